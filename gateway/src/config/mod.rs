//! The YAML configuration: text → `${ENV}` interpolation → YAML with line numbers → typed raw
//! structs (`deny_unknown_fields`) → validation → the [`Config`] the gateway runs on.
//!
//! Every problem is reported as `file:line: path: reason`, all of them at once, so that
//! `hookgate config check` lists everything to fix in one go. Relative paths in the file
//! (storage, plugins) are relative to the working directory, like the embedded default's.

mod api;
mod build;
pub mod defaults;
mod endpoint;
mod env;
mod outbound;
mod raw;
mod shape;
mod validate;
pub mod watch;
mod yaml;

pub use api::{Refused, api_endpoint, retiring_secrets, stored_retiring};
pub use raw::RawConfig;
use raw::RawTopic;
pub use validate::{NAME_RULE, valid_name};

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use globset::GlobSet;
use http::{HeaderName, HeaderValue, Uri};
use ipnet::IpNet;
use rustls::pki_types::CertificateDer;

use crate::delivery::signing::SignatureScheme;
use crate::delivery::{Destination, OutboundAuth, ProxyAddr, Route};
use crate::filter::Filter;
use crate::health::HealthRules;
use crate::model::{PluginBinding, Secret, Timestamp};
use crate::policy::Policy;
use crate::store::EncryptionKey;

/// One thing wrong with a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: String,
    pub line: usize,
    /// Dotted key path, e.g. `endpoints.billing.policy`; empty for the file as a whole.
    pub path: String,
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Line 0: not from a line of the file (an endpoint created through the API).
        match (self.line, self.path.is_empty()) {
            (0, true) => write!(f, "{}: {}", self.file, self.reason),
            (0, false) => write!(f, "{}: {}: {}", self.file, self.path, self.reason),
            (line, true) => write!(f, "{}:{line}: {}", self.file, self.reason),
            (line, false) => write!(f, "{}:{line}: {}: {}", self.file, self.path, self.reason),
        }
    }
}

/// Every problem found in a config file; the running config (if any) stays as it was.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ConfigError {
    pub problems: Vec<Problem>,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, p) in self.problems.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{p}")?;
        }
        Ok(())
    }
}

/// A plugin binding that cannot work right now: its plugin is not loaded, or is loaded as
/// another kind (a signer bound as a transform).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BindingProblem {
    pub endpoint: Arc<str>,
    /// `transform`, `signer` or `backoff`.
    pub role: &'static str,
    pub plugin: String,
    /// The kind the plugin is loaded as; `None` when it is not loaded.
    pub loaded_as: Option<&'static str>,
}

impl BindingProblem {
    /// The plugin kind (WIT world) the binding's role needs.
    pub fn expected_world(&self) -> &'static str {
        match self.role {
            "transform" => "transformer",
            other => other,
        }
    }

    /// `missing` or `wrong_kind`, for metrics and the API.
    pub fn code(&self) -> &'static str {
        if self.loaded_as.is_some() {
            "wrong_kind"
        } else {
            "missing"
        }
    }
}

impl fmt::Display for BindingProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "endpoint {} binds {} plugin \"{}\" which ",
            self.endpoint, self.role, self.plugin
        )?;
        match self.loaded_as {
            None => write!(f, "is not loaded"),
            Some(found) => write!(f, "is a {found}, not a {}", self.expected_world()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The validated config.

#[derive(Debug, Clone)]
pub struct Config {
    /// The file this came from; None for the embedded default.
    pub source: Option<PathBuf>,
    /// What the command line set over the file: a reload of the file applies it again.
    pub overrides: Overrides,
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub cluster: ClusterConfig,
    pub plugins: PluginsConfig,
    pub delivery: DeliveryConfig,
    pub health: HealthConfig,
    pub retention: RetentionConfig,
    /// None: no traces are exported.
    pub telemetry: Option<TelemetryConfig>,
    /// The presets and the user's policies.
    pub policies: BTreeMap<String, Arc<Policy>>,
    pub topics: BTreeMap<String, TopicConfig>,
    /// The file's endpoints. Those created through the API are rows of the store, which the
    /// running gateway's endpoint index (`crate::endpoints`) holds beside these.
    pub file_endpoints: BTreeMap<Arc<str>, Arc<EndpointConfig>>,
}

/// Settings the command line (or its environment) sets over the file or the embedded default,
/// before validation: `serve --listen` (`HOOKGATE_LISTEN`) for `server.listen`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Overrides {
    pub listen: Option<SocketAddr>,
}

impl Overrides {
    fn apply(&self, raw: &mut RawConfig) {
        if let Some(listen) = self.listen {
            raw.server.listen = Some(listen.to_string());
        }
    }
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub api_keys: Vec<ApiKey>,
    /// The keys that sign console tokens (the first) and verify them (all); empty: derived
    /// from the admin keys.
    pub console_keys: Vec<Secret>,
    /// Where console links point, without a trailing `/`; None: the listen address.
    pub public_url: Option<String>,
    pub max_body_bytes: usize,
    pub shutdown_grace: Duration,
    pub rate_limit_per_key: Option<u32>,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
    /// The runtime's worker threads; None: one per CPU this process may use.
    pub workers: Option<u32>,
}

/// A key of `server.api_keys`: an admin's (no tenant) or a tenant's.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiKey {
    pub key: Secret,
    pub tenant: Option<String>,
}

#[derive(Debug, Clone)]
pub struct StorageConfig {
    pub path: PathBuf,
    /// None: no cap beyond SQLite's own.
    pub max_size_bytes: Option<u64>,
    /// The PostgreSQL database to use instead of `path`; a secret (it may hold a password).
    pub url: Option<Secret>,
    /// The PostgreSQL connection pool's size.
    pub max_connections: usize,
    /// The key the store seals secrets under; None (SQLite only): the database's key file.
    pub encryption_key: Option<EncryptionKey>,
    /// Keys that still open what they sealed, during a rotation.
    pub previous_encryption_keys: Vec<EncryptionKey>,
}

#[derive(Debug, Clone)]
pub struct ClusterConfig {
    pub lease: Duration,
    /// None: a fresh id at every start.
    pub node_id: Option<String>,
}

#[derive(Debug, Clone)]
pub struct PluginsConfig {
    pub dir: PathBuf,
    pub cache_dir: PathBuf,
    /// Serve the plugins built into the binary (`plugins.bundled`).
    pub bundled: bool,
    pub call_timeout: Duration,
    pub call_wall_timeout: Duration,
    pub memory_bytes: usize,
    pub max_output_bytes: usize,
    pub max_file_bytes: u64,
}

#[derive(Debug, Clone)]
pub struct DeliveryConfig {
    pub timeout: Duration,
    pub allow_networks: Vec<IpNet>,
    pub max_in_flight: u32,
    pub max_in_flight_per_endpoint: u32,
    /// The certificates read from the files of `delivery.ca_certs`, each checked to be usable
    /// as a trust anchor.
    pub extra_roots: Vec<CertificateDer<'static>>,
    /// The egress proxy of endpoints without one of their own.
    pub proxy: Option<ProxyAddr>,
}

#[derive(Debug, Clone)]
pub struct HealthConfig {
    pub rules: HealthRules,
    pub operator_topic: Option<String>,
    /// How long events may wait behind an ordered key's failing head before the key is
    /// reported (`health.key_blocked_after`).
    pub key_blocked_after: Duration,
}

#[derive(Debug, Clone)]
pub struct RetentionConfig {
    pub deliveries: Duration,
    pub events: Duration,
    pub idempotency: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    /// Where spans are POSTed: the collector's `/v1/traces`.
    pub traces_url: Uri,
    pub service_name: String,
    pub max_queue_spans: usize,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    pub policy: Option<String>,
}

#[derive(Debug, Clone)]
pub struct EndpointConfig {
    pub name: Arc<str>,
    /// Where its messages go, chosen by the URL's scheme (README "Destinations").
    pub destination: Destination,
    pub topics: Vec<String>,
    pub types: Vec<String>,
    type_filter: TypeFilter,
    pub policy: Option<String>,
    pub secrets: Vec<Secret>,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub transform: Option<PluginBinding>,
    pub signer: Option<PluginBinding>,
    pub backoff: Option<PluginBinding>,
    pub max_per_second: Option<f64>,
    pub max_in_flight: Option<u32>,
    pub timeout: Option<Duration>,
    pub ordered: bool,
    /// What an ordered endpoint's key does when its head finally fails.
    pub on_final_failure: FinalFailure,
    pub dead_letter: bool,
    /// How `secrets` sign: HMAC (`v1`) or Ed25519 (`v1a`).
    pub signature: SignatureScheme,
    /// Declared in the file, or created through the API.
    pub source: EndpointSource,
    /// The tenant whose events (only) this endpoint receives.
    pub tenant: Option<Arc<str>>,
    pub description: Option<String>,
    /// Secrets being rotated out, newest first: each still signs, beside `secrets`, until its
    /// time (gateway time), so that every rotation of a day keeps its grace period.
    pub retiring: Vec<(Secret, Timestamp)>,
    /// It receives only events naming one of these (none: every event, see
    /// [`crate::model::channels_match`]).
    pub channels: Vec<String>,
    /// Switched off by its owner: no event fans out to it.
    pub disabled: bool,
    pub metadata: BTreeMap<String, String>,
    /// The Svix API's `uid` of the endpoint.
    pub svix_uid: Option<String>,
    /// Sends the `svix-*` headers beside the `webhook-*` ones.
    pub svix_headers: bool,
    /// The Svix API's `version` of the endpoint (1 unless set).
    pub svix_version: u16,
    /// Its content filter, compiled: evaluated at fan-out, so an event it refuses creates no
    /// delivery. None: every event it subscribes to.
    pub filter: Option<Arc<Filter>>,
    /// For an endpoint created through the API, its row's version and times.
    pub stored: Option<Stored>,
}

/// What the store keeps beside an API endpoint's keys: its version (each change adds one) and
/// when it was created and last changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stored {
    pub version: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The event types an endpoint takes (`types`): plain names, compared as they are, and glob
/// patterns (`invoice.*`), compiled once. Empty: every type.
#[derive(Debug, Clone, Default)]
pub struct TypeFilter {
    exact: Box<[Arc<str>]>,
    patterns: Option<Arc<GlobSet>>,
}

impl TypeFilter {
    pub(crate) fn new(exact: Vec<Arc<str>>, patterns: Option<Arc<GlobSet>>) -> TypeFilter {
        TypeFilter {
            exact: exact.into_boxed_slice(),
            patterns,
        }
    }

    /// Whether a `types` entry is a glob pattern rather than a name: it has a character that
    /// means something to a glob.
    pub fn is_pattern(entry: &str) -> bool {
        entry.contains(['*', '?', '[', ']', '{', '}', '\\'])
    }

    pub fn matches(&self, event_type: &str) -> bool {
        (self.exact.is_empty() && self.patterns.is_none())
            || self.exact.iter().any(|t| **t == *event_type)
            || self.patterns.as_ref().is_some_and(|p| p.is_match(event_type))
    }

    /// The plain names, when these are all the filter has (no pattern, and at least one
    /// name): such an endpoint can be found by its types.
    pub fn names_only(&self) -> Option<&[Arc<str>]> {
        (self.patterns.is_none() && !self.exact.is_empty()).then_some(&*self.exact)
    }

    /// Every plain name (beside any patterns).
    pub fn names(&self) -> &[Arc<str>] {
        &self.exact
    }

    /// Puts `shared`'s copy of each plain name in place of this filter's own (an index of
    /// many endpoints keeps one copy of each event type's name).
    pub(crate) fn share_names(&mut self, mut shared: impl FnMut(&Arc<str>) -> Arc<str>) {
        for name in self.exact.iter_mut() {
            *name = shared(name);
        }
    }
}

/// What an ordered endpoint's key does when its head finally fails (`on_final_failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FinalFailure {
    /// The head ends (failed, or dead with `dead_letter`) and the key's next event goes.
    #[default]
    Skip,
    /// The key stays stopped behind the head until an operator releases it.
    Hold,
}

impl FinalFailure {
    pub fn as_str(self) -> &'static str {
        match self {
            FinalFailure::Skip => "skip",
            FinalFailure::Hold => "hold",
        }
    }
}

/// Where an endpoint was declared: in the config file (read-only through the API) or through
/// the API (kept in the store).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndpointSource {
    Config,
    Api,
}

impl EndpointSource {
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointSource::Config => "config",
            EndpointSource::Api => "api",
        }
    }
}

impl PartialEq for EndpointConfig {
    /// Two endpoint configs are equal when everything the user wrote is; the compiled glob set
    /// follows from `types`.
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.destination == other.destination
            && self.topics == other.topics
            && self.types == other.types
            && self.policy == other.policy
            && self.secrets == other.secrets
            && self.headers == other.headers
            && self.transform == other.transform
            && self.signer == other.signer
            && self.backoff == other.backoff
            && self.max_per_second == other.max_per_second
            && self.max_in_flight == other.max_in_flight
            && self.timeout == other.timeout
            && self.ordered == other.ordered
            && self.on_final_failure == other.on_final_failure
            && self.dead_letter == other.dead_letter
            && self.signature == other.signature
            && self.source == other.source
            && self.tenant == other.tenant
            && self.description == other.description
            && self.retiring == other.retiring
            && self.channels == other.channels
            && self.disabled == other.disabled
            && self.metadata == other.metadata
            && self.svix_uid == other.svix_uid
            && self.svix_headers == other.svix_headers
            && self.svix_version == other.svix_version
            && self.filter == other.filter
            && self.stored.map(|s| s.version) == other.stored.map(|s| s.version)
    }
}

impl EndpointConfig {
    /// Outbound credentials, added as `Authorization` after every plugin ran: an HTTP
    /// endpoint's `auth` (a broker's credentials are in its URL).
    pub fn auth(&self) -> Option<&OutboundAuth> {
        self.destination.http().and_then(|http| http.auth.as_deref())
    }

    /// The client certificate and proxy of an HTTP endpoint; None for a broker's.
    pub fn route(&self) -> Option<&Route> {
        self.destination.http().map(|http| &http.route)
    }

    /// Where a delivery to this endpoint goes, as the store records it.
    pub fn target(&self) -> crate::store::Target {
        crate::store::Target {
            endpoint: self.name.clone(),
            tenant: self.tenant.clone(),
            ordered: self.ordered,
        }
    }

    /// Whether an event of `topic` and `event_type` goes to this endpoint (health and tenant
    /// aside).
    pub fn subscribes_to(&self, topic: &str, event_type: &str) -> bool {
        self.topics.iter().any(|t| t == topic) && self.matches_type(event_type)
    }

    /// Whether an event of `tenant` may reach this endpoint: a tenant's endpoint takes only its
    /// tenant's events, an endpoint without a tenant takes everyone's.
    pub fn accepts_tenant(&self, tenant: Option<&str>) -> bool {
        self.tenant.as_deref().is_none_or(|own| Some(own) == tenant)
    }

    /// This endpoint's plugin bindings that cannot work now (see
    /// [`crate::endpoints::Endpoints::binding_problems`]).
    pub fn binding_problems(&self, world_of: impl Fn(&str) -> Option<&'static str>) -> Vec<BindingProblem> {
        let mut problems = Vec::new();
        for (role, binding) in [
            ("transform", &self.transform),
            ("signer", &self.signer),
            ("backoff", &self.backoff),
        ] {
            let Some(binding) = binding else { continue };
            let problem = BindingProblem {
                endpoint: self.name.clone(),
                role,
                plugin: binding.plugin.clone(),
                loaded_as: world_of(&binding.plugin),
            };
            if problem.loaded_as != Some(problem.expected_world()) {
                problems.push(problem);
            }
        }
        problems
    }

    /// The secrets that sign at `now`: `secrets`, and each retiring one until its overlap ends.
    pub fn signing_secrets(&self, now: Timestamp) -> std::borrow::Cow<'_, [Secret]> {
        let retiring = self.retiring.iter().filter(|(_, until)| now < *until);
        if retiring.clone().next().is_none() {
            return std::borrow::Cow::Borrowed(&self.secrets);
        }
        let mut all = self.secrets.clone();
        all.extend(retiring.map(|(old, _)| old.clone()));
        std::borrow::Cow::Owned(all)
    }

    pub fn matches_type(&self, event_type: &str) -> bool {
        self.type_filter.matches(event_type)
    }

    pub fn type_filter(&self) -> &TypeFilter {
        &self.type_filter
    }
}

impl Config {
    /// The config a newcomer gets with no file: loopback listener, SQLite under `./data`, and
    /// one topic, `default`, so that the first `curl` is accepted (and visible in
    /// `GET /v1/topics` and `GET /v1/events/{id}`), beside the built-in `svix`; no endpoints
    /// until a file declares them.
    pub fn embedded_default() -> Config {
        Config::embedded_default_with(&Overrides::default()).expect("the embedded default config is valid")
    }

    /// The embedded default with the command line's `overrides`, which may make it invalid
    /// (`--listen 0.0.0.0:8080` without API keys).
    pub fn embedded_default_with(overrides: &Overrides) -> Result<Config, ConfigError> {
        let mut raw = RawConfig {
            topics: BTreeMap::from([(
                defaults::TOPIC.to_owned(),
                RawTopic {
                    description: Some(
                        "the embedded default's topic: events are stored, no endpoint subscribes yet".into(),
                    ),
                    ..RawTopic::default()
                },
            )]),
            ..RawConfig::default()
        };
        raw.plugins.dir = Some(defaults::EMBEDDED_PLUGIN_DIR.to_owned());
        overrides.apply(&mut raw);
        let mut config = build::build(raw, None, "<embedded default>", &|_| 1)?;
        config.overrides = overrides.clone();
        Ok(config)
    }

    /// The policy for deliveries of `topic` to `endpoint`: the endpoint's, else the topic's,
    /// else `standard`.
    pub fn policy_for(&self, endpoint: &EndpointConfig, topic: &str) -> Arc<Policy> {
        self.policy_named(endpoint.policy.as_deref(), topic)
    }

    /// The policy for deliveries of `topic` to an endpoint whose own policy is `own`.
    pub fn policy_named(&self, own: Option<&str>, topic: &str) -> Arc<Policy> {
        own.or_else(|| self.topics.get(topic).and_then(|t| t.policy.as_deref()))
            .and_then(|name| self.policies.get(name))
            .or_else(|| self.policies.get("standard"))
            .cloned()
            .unwrap_or_else(|| Arc::new(Policy::standard()))
    }

    /// Whether apps may post to `topic`.
    pub fn has_topic(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }
}

/// Reads, interpolates, parses and validates a config file.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    load_file_with(path, &Overrides::default())
}

/// Like [`load_file`], with the command line's `overrides` set over the file before it is
/// validated.
pub fn load_file_with(path: &Path, overrides: &Overrides) -> Result<Config, ConfigError> {
    let label = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        problems: vec![Problem {
            file: label.clone(),
            line: 1,
            path: String::new(),
            reason: format!("cannot read the file: {e}"),
        }],
    })?;
    load_str_with(
        &text,
        &label,
        Some(path.to_path_buf()),
        |name| std::env::var(name).ok(),
        overrides,
    )
}

/// Like [`load_file`] on text already read; `env` looks up `${NAME}` references.
pub fn load_str(
    text: &str,
    label: &str,
    source: Option<PathBuf>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    load_str_with(text, label, source, env, &Overrides::default())
}

fn load_str_with(
    text: &str,
    label: &str,
    source: Option<PathBuf>,
    env: impl Fn(&str) -> Option<String>,
    overrides: &Overrides,
) -> Result<Config, ConfigError> {
    let problem = |line: usize, path: &str, reason: String| Problem {
        file: label.to_owned(),
        line,
        path: path.to_owned(),
        reason,
    };
    let text = env::interpolate(text, env).map_err(|ps| ConfigError {
        problems: ps.into_iter().map(|p| problem(p.line, "", p.reason)).collect(),
    })?;
    let mut doc = yaml::parse(&text).map_err(|e| ConfigError {
        problems: vec![problem(e.line, &e.path, e.reason)],
    })?;
    // Mistakes of shape (unknown keys, wrong types) and of values are all reported together;
    // the checks of values run on what is left once the mistakes of shape are taken out.
    let mut shaped = shape::read::<RawConfig>(std::mem::take(&mut doc.value));
    let mut problems: Vec<Problem> = shaped
        .problems
        .iter()
        .map(|(path, reason)| problem(doc.line_of(path), path, reason.clone()))
        .collect();
    let Some(mut raw) = shaped.value.take() else {
        return Err(ConfigError { problems });
    };
    overrides.apply(&mut raw);
    match build::build(raw, source, label, &|path| doc.line_of(path)) {
        Ok(config) if problems.is_empty() => Ok(Config {
            overrides: overrides.clone(),
            ..config
        }),
        Ok(_) => Err(ConfigError { problems }),
        Err(found) => {
            problems.extend(found.problems.into_iter().filter(|p| !shaped.covers(&p.path)));
            problems.sort_by_key(|p| p.line);
            Err(ConfigError { problems })
        }
    }
}

/// The JSON Schema of the config file, for editors (`hookgate config schema`).
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RawConfig)).expect("a schema serializes")
}

#[cfg(test)]
mod tests;
