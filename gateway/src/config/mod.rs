//! The YAML configuration: text → `${ENV}` interpolation → YAML with line numbers → typed raw
//! structs (`deny_unknown_fields`) → validation → the [`Config`] the gateway runs on.
//!
//! Every problem is reported as `file:line: path: reason`, all of them at once, so that
//! `hookgate config check` lists everything to fix in one go. Relative paths in the file
//! (storage, plugins) are relative to the working directory, like the embedded default's.

mod env;
pub mod watch;
mod yaml;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use globset::{Glob, GlobSet, GlobSetBuilder};
use http::{HeaderName, HeaderValue, Uri};
use ipnet::IpNet;
use rustls::pki_types::CertificateDer;
use schemars::JsonSchema;
use serde::Deserialize;

use crate::health::HealthRules;
use crate::model::{PluginBinding, Secret};
use crate::policy::{Policy, PolicySpec};

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
        if self.path.is_empty() {
            write!(f, "{}:{}: {}", self.file, self.line, self.reason)
        } else {
            write!(f, "{}:{}: {}: {}", self.file, self.line, self.path, self.reason)
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

// ---------------------------------------------------------------------------------------------
// The file's shape. These structs are what `hookgate config schema` describes.

/// The hookgate configuration file.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub storage: RawStorage,
    #[serde(default)]
    pub plugins: RawPlugins,
    #[serde(default)]
    pub delivery: RawDelivery,
    #[serde(default)]
    pub health: RawHealth,
    #[serde(default)]
    pub retention: RawRetention,
    /// Retry policies by name. The presets `standard`, `sns-http-default`, `sns-aws-managed` and
    /// `sns-customer-managed` always exist and cannot be redefined.
    #[serde(default)]
    pub policies: BTreeMap<String, PolicySpec>,
    /// The topics apps may post to.
    #[serde(default)]
    pub topics: BTreeMap<String, RawTopic>,
    /// The subscribers.
    #[serde(default)]
    pub endpoints: BTreeMap<String, RawEndpoint>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// `ip:port` to listen on. Default `127.0.0.1:8080`.
    pub listen: Option<String>,
    /// Bearer keys accepted by the API. None: no authentication, allowed only on loopback.
    #[serde(default)]
    pub api_keys: Vec<String>,
    /// Largest accepted request body, e.g. `256KiB` (the default) or `1MiB`.
    pub max_body: Option<String>,
    /// How long in-flight attempts may finish after SIGTERM/SIGINT. Default `10s`.
    pub shutdown_grace: Option<String>,
    /// Ingestion requests per second allowed per API key (average, with a burst of the same
    /// size). None: unlimited.
    pub rate_limit_per_key: Option<u32>,
    /// How long a client may take to send a request's headers (and how long an idle
    /// keep-alive connection stays open); slower connections are closed, so that slow clients
    /// cannot hold connections open (slowloris). Default `10s`.
    pub header_timeout: Option<String>,
    /// How long a client may take to send a request body once its headers are in; a slower
    /// body is refused with 408. Default `30s`.
    pub body_timeout: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawStorage {
    /// The SQLite database file. Default `./data/hookgate.db`.
    pub path: Option<String>,
    /// The largest the database may grow, e.g. `8GiB` (at least `64KiB`). Reaching it is
    /// handled like a full disk: ingestion answers 503 `storage_unavailable` and nothing is
    /// written until there is room. Reloadable: raising it makes room without a restart.
    /// Default: no cap.
    pub max_size: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPlugins {
    /// Folder watched for `*.wasm` plugins. Default `./plugins`.
    pub dir: Option<String>,
    /// Folder for compiled plugin artifacts. Default: `plugin-cache` next to the database.
    pub cache_dir: Option<String>,
    /// CPU time a plugin call may take. Default `100ms`.
    pub call_timeout: Option<String>,
    /// Wall-clock time a plugin call may take, sleeping, waiting and host calls included
    /// (never less than `call_timeout`). Default `1s`.
    pub call_wall_timeout: Option<String>,
    /// Linear memory a plugin instance may grow to. Default `32MiB`.
    pub memory: Option<String>,
    /// Largest body + headers a plugin may return. Default `1MiB`.
    pub max_output: Option<String>,
    /// Largest plugin file loaded; larger files are refused before they are compiled. Default
    /// `32MiB`.
    pub max_file_size: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDelivery {
    /// Whole-request timeout of an attempt. Default `10s`.
    pub timeout: Option<String>,
    /// CIDRs exempt from the private-address block, e.g. `127.0.0.0/8`.
    #[serde(default)]
    pub allow_networks: Vec<String>,
    /// Attempts in flight at once, over all endpoints. Default 512.
    pub max_in_flight: Option<u32>,
    /// Attempts in flight at once per endpoint, unless the endpoint says otherwise. Default 16.
    pub max_in_flight_per_endpoint: Option<u32>,
    /// PEM files of certificate authorities trusted for `https` endpoints besides Mozilla's
    /// roots, e.g. a company's internal CA. Read at start; a change needs a restart.
    #[serde(default)]
    pub ca_certs: Vec<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    /// Failed attempts in a row that make an active endpoint degraded. Default 5.
    pub degrade_after_failures: Option<u32>,
    /// Time without success before a degraded endpoint is paused. Default `3d`.
    pub pause_after: Option<String>,
    /// Failed attempts in a row also needed for the pause. Default 20.
    pub pause_min_failures: Option<u32>,
    /// Time without success before a paused endpoint is disabled. Default `7d`.
    pub disable_after: Option<String>,
    /// A topic on which every endpoint state change is published as an event
    /// (`hookgate.endpoint.degraded`, `.paused`, `.disabled`, `.reenabled`, `.recovered`).
    /// The topic exists implicitly; subscribe an endpoint to it to route alerts.
    pub operator_topic: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRetention {
    /// How long finished deliveries and their attempts are kept. Default `30d`.
    pub deliveries: Option<String>,
    /// How long events are kept (at least the 7 days replay needs). Default `30d`.
    pub events: Option<String>,
    /// How long ingestion idempotency keys are kept. Default `24h`.
    pub idempotency: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTopic {
    /// The retry policy of deliveries of this topic, unless the endpoint names its own.
    pub policy: Option<String>,
    /// Free text for humans.
    pub description: Option<String>,
}

/// One secret, or a list while rotating (every listed secret signs).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawSecrets {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBinding {
    /// The plugin's name: its file name without `.wasm`.
    pub plugin: String,
    /// Plugin-specific settings; a plugin ignores keys it does not know.
    #[serde(default)]
    pub config: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEndpoint {
    /// Where events are POSTed: `http://` or `https://`.
    pub url: String,
    /// The topics this endpoint receives.
    pub topics: Vec<String>,
    /// Event-type globs (`order.*`); none: every type.
    #[serde(default)]
    pub types: Vec<String>,
    /// Retry policy; wins over the topic's. Default: the topic's, else `standard`.
    pub policy: Option<String>,
    /// Signing secret(s): `whsec_<base64>` (Standard Webhooks) or any string.
    pub secret: Option<RawSecrets>,
    /// Extra headers sent with every attempt.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub transform: Option<RawBinding>,
    pub signer: Option<RawBinding>,
    pub backoff: Option<RawBinding>,
    /// Average deliveries per second to this endpoint (not a strict cap).
    pub max_per_second: Option<f64>,
    /// Attempts in flight at once to this endpoint.
    pub max_in_flight: Option<u32>,
    /// Per-endpoint attempt timeout, overriding `delivery.timeout`.
    pub timeout: Option<String>,
    /// Deliver events with the same `ordering_key` strictly one after another.
    #[serde(default)]
    pub ordered: bool,
    /// Keep exhausted or permanently failed deliveries as `dead` for redrive.
    #[serde(default)]
    pub dead_letter: bool,
    /// Free text for humans.
    pub description: Option<String>,
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
    pub server: ServerConfig,
    pub storage: StorageConfig,
    pub plugins: PluginsConfig,
    pub delivery: DeliveryConfig,
    pub health: HealthConfig,
    pub retention: RetentionConfig,
    /// The presets and the user's policies.
    pub policies: BTreeMap<String, Arc<Policy>>,
    pub topics: BTreeMap<String, TopicConfig>,
    pub endpoints: BTreeMap<Arc<str>, Arc<EndpointConfig>>,
}

#[derive(Debug, Clone)]
pub struct ServerConfig {
    pub listen: SocketAddr,
    pub api_keys: Vec<Secret>,
    pub max_body_bytes: usize,
    pub shutdown_grace: Duration,
    pub rate_limit_per_key: Option<u32>,
    pub header_timeout: Duration,
    pub body_timeout: Duration,
}

#[derive(Debug, Clone)]
pub struct StorageConfig {
    pub path: PathBuf,
    /// None: no cap beyond SQLite's own.
    pub max_size_bytes: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct PluginsConfig {
    pub dir: PathBuf,
    pub cache_dir: PathBuf,
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
}

#[derive(Debug, Clone)]
pub struct HealthConfig {
    pub rules: HealthRules,
    pub operator_topic: Option<String>,
}

#[derive(Debug, Clone)]
pub struct RetentionConfig {
    pub deliveries: Duration,
    pub events: Duration,
    pub idempotency: Duration,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopicConfig {
    pub policy: Option<String>,
}

#[derive(Debug, Clone)]
pub struct EndpointConfig {
    pub name: Arc<str>,
    pub url: Uri,
    pub topics: Vec<String>,
    pub types: Vec<String>,
    type_matcher: Option<GlobSet>,
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
    pub dead_letter: bool,
}

impl PartialEq for EndpointConfig {
    /// Two endpoint configs are equal when everything the user wrote is; the compiled glob set
    /// follows from `types`.
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
            && self.url == other.url
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
            && self.dead_letter == other.dead_letter
    }
}

impl EndpointConfig {
    /// Whether an event of `topic` and `event_type` goes to this endpoint (health aside).
    pub fn subscribes_to(&self, topic: &str, event_type: &str) -> bool {
        self.topics.iter().any(|t| t == topic) && self.matches_type(event_type)
    }

    pub fn matches_type(&self, event_type: &str) -> bool {
        self.type_matcher.as_ref().is_none_or(|m| m.is_match(event_type))
    }
}

/// Headers the gateway sets itself; an endpoint's `headers` may not override them.
const RESERVED_HEADERS: &[&str] = &[
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "hookgate-delivery-attempt",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
];

pub const DEFAULT_LISTEN: &str = "127.0.0.1:8080";
pub const DEFAULT_DB_PATH: &str = "./data/hookgate.db";
pub const DEFAULT_PLUGIN_DIR: &str = "./plugins";
/// The one topic of the embedded default, so that a newcomer's first event is accepted.
pub const DEFAULT_TOPIC: &str = "default";

impl Config {
    /// The config a newcomer gets with no file: loopback listener, SQLite under `./data`, and
    /// one topic, `default`, so that the first `curl` is accepted (and visible in
    /// `GET /v1/topics` and `GET /v1/events/{id}`); no endpoints until a file declares them.
    pub fn embedded_default() -> Config {
        let raw = RawConfig {
            topics: BTreeMap::from([(
                DEFAULT_TOPIC.to_owned(),
                RawTopic {
                    description: Some(
                        "the embedded default's topic: events are stored, no endpoint subscribes yet".into(),
                    ),
                    ..RawTopic::default()
                },
            )]),
            ..RawConfig::default()
        };
        build(raw, None, "<embedded default>", &|_| 1).expect("the embedded default config is valid")
    }

    /// The policy for deliveries of `topic` to `endpoint`: the endpoint's, else the topic's,
    /// else `standard`.
    pub fn policy_for(&self, endpoint: &EndpointConfig, topic: &str) -> Arc<Policy> {
        endpoint
            .policy
            .as_deref()
            .or_else(|| self.topics.get(topic).and_then(|t| t.policy.as_deref()))
            .and_then(|name| self.policies.get(name))
            .or_else(|| self.policies.get("standard"))
            .cloned()
            .unwrap_or_else(|| Arc::new(Policy::standard()))
    }

    /// Every plugin binding whose plugin is not loaded, or is loaded as another kind:
    /// `world_of(name)` is `Some("transformer" | "signer" | "backoff")` for a loaded plugin.
    /// The gateway reports these at start, at every reload and whenever the plugin folder
    /// changes (log, `GET /v1/status`, the endpoint's `problems`, a metric), because the
    /// binding's attempts fail with `plugin_error` until the plugin appears.
    pub fn plugin_binding_problems(
        &self,
        world_of: impl Fn(&str) -> Option<&'static str>,
    ) -> Vec<BindingProblem> {
        let mut problems = Vec::new();
        for (name, ep) in &self.endpoints {
            for (role, binding) in [
                ("transform", &ep.transform),
                ("signer", &ep.signer),
                ("backoff", &ep.backoff),
            ] {
                let Some(binding) = binding else { continue };
                let problem = BindingProblem {
                    endpoint: name.clone(),
                    role,
                    plugin: binding.plugin.clone(),
                    loaded_as: world_of(&binding.plugin),
                };
                if problem.loaded_as != Some(problem.expected_world()) {
                    problems.push(problem);
                }
            }
        }
        problems
    }

    /// Whether apps may post to `topic`.
    pub fn has_topic(&self, topic: &str) -> bool {
        self.topics.contains_key(topic)
    }

    /// The endpoints an event of `topic`/`event_type` fans out to, before health is considered.
    pub fn subscribers<'a>(
        &'a self,
        topic: &'a str,
        event_type: &'a str,
    ) -> impl Iterator<Item = &'a Arc<EndpointConfig>> + 'a {
        self.endpoints
            .values()
            .filter(move |e| e.subscribes_to(topic, event_type))
    }
}

/// Reads, interpolates, parses and validates a config file.
pub fn load_file(path: &Path) -> Result<Config, ConfigError> {
    let label = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError {
        problems: vec![Problem {
            file: label.clone(),
            line: 1,
            path: String::new(),
            reason: format!("cannot read the file: {e}"),
        }],
    })?;
    load_str(&text, &label, Some(path.to_path_buf()), |name| {
        std::env::var(name).ok()
    })
}

/// Like [`load_file`] on text already read; `env` looks up `${NAME}` references.
pub fn load_str(
    text: &str,
    label: &str,
    source: Option<PathBuf>,
    env: impl Fn(&str) -> Option<String>,
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
    let doc = yaml::parse(&text).map_err(|e| ConfigError {
        problems: vec![problem(e.line, &e.path, e.reason)],
    })?;
    let raw: RawConfig = serde_path_to_error::deserialize(&doc.value).map_err(|e| {
        let mut path = e.path().to_string();
        if path == "." {
            path.clear();
        }
        let reason = e.inner().to_string();
        // Make sure an unknown key's path names the key itself, not only its parent.
        if let Some(key) = reason
            .strip_prefix("unknown field `")
            .and_then(|r| r.split('`').next())
            && !path.ends_with(key)
        {
            path = if path.is_empty() {
                key.to_owned()
            } else {
                format!("{path}.{key}")
            };
        }
        ConfigError {
            problems: vec![problem(doc.line_of(&path), &path, reason)],
        }
    })?;
    build(raw, source, label, &|path| doc.line_of(path))
}

/// Validates the raw config and builds the typed one, collecting every problem.
fn build(
    raw: RawConfig,
    source: Option<PathBuf>,
    label: &str,
    line_of: &dyn Fn(&str) -> usize,
) -> Result<Config, ConfigError> {
    let mut v = Validator {
        label,
        line_of,
        problems: Vec::new(),
    };

    let listen = v
        .parse(
            "server.listen",
            raw.server.listen.as_deref().unwrap_or(DEFAULT_LISTEN),
            |s| {
                s.parse::<SocketAddr>()
                    .map_err(|_| format!("`{s}` is not an ip:port address"))
            },
        )
        .unwrap_or_else(|| DEFAULT_LISTEN.parse().expect("valid default"));
    let mut api_keys = Vec::new();
    for (i, key) in raw.server.api_keys.iter().enumerate() {
        if key.trim().is_empty() {
            v.problem(
                &format!("server.api_keys[{i}]"),
                "an API key may not be empty".into(),
            );
        } else {
            api_keys.push(Secret::new(key.clone()));
        }
    }
    if api_keys.is_empty() && !listen.ip().is_loopback() {
        v.problem(
            "server.api_keys",
            format!(
                "no API keys, but the listener {listen} is not loopback; add api_keys or listen on 127.0.0.1"
            ),
        );
    }
    let server = ServerConfig {
        listen,
        api_keys,
        max_body_bytes: v.size("server.max_body", raw.server.max_body.as_deref(), 256 * 1024),
        shutdown_grace: v.duration(
            "server.shutdown_grace",
            raw.server.shutdown_grace.as_deref(),
            "10s",
        ),
        rate_limit_per_key: v.positive("server.rate_limit_per_key", raw.server.rate_limit_per_key),
        header_timeout: v.nonzero_duration(
            "server.header_timeout",
            raw.server.header_timeout.as_deref(),
            "10s",
        ),
        body_timeout: v.nonzero_duration("server.body_timeout", raw.server.body_timeout.as_deref(), "30s"),
    };

    let storage = StorageConfig {
        path: PathBuf::from(raw.storage.path.as_deref().unwrap_or(DEFAULT_DB_PATH)),
        max_size_bytes: raw.storage.max_size.as_deref().and_then(|text| {
            let bytes = v.parse("storage.max_size", text, parse_size)?;
            if bytes < MIN_STORAGE_SIZE {
                v.problem(
                    "storage.max_size",
                    format!("`{text}` is below the minimum of 64KiB"),
                );
                return None;
            }
            u64::try_from(bytes).ok()
        }),
    };
    let plugin_cache_default = storage
        .path
        .parent()
        .map(|p| p.join("plugin-cache"))
        .unwrap_or_else(|| PathBuf::from("plugin-cache"));
    let plugins = PluginsConfig {
        dir: PathBuf::from(raw.plugins.dir.as_deref().unwrap_or(DEFAULT_PLUGIN_DIR)),
        cache_dir: raw
            .plugins
            .cache_dir
            .as_deref()
            .map(PathBuf::from)
            .unwrap_or(plugin_cache_default),
        call_timeout: v.duration(
            "plugins.call_timeout",
            raw.plugins.call_timeout.as_deref(),
            "100ms",
        ),
        call_wall_timeout: v.duration(
            "plugins.call_wall_timeout",
            raw.plugins.call_wall_timeout.as_deref(),
            "1s",
        ),
        memory_bytes: v.size("plugins.memory", raw.plugins.memory.as_deref(), 32 << 20),
        max_output_bytes: v.size("plugins.max_output", raw.plugins.max_output.as_deref(), 1 << 20),
        max_file_bytes: v.size(
            "plugins.max_file_size",
            raw.plugins.max_file_size.as_deref(),
            32 << 20,
        ) as u64,
    };

    let mut allow_networks = Vec::new();
    for (i, net) in raw.delivery.allow_networks.iter().enumerate() {
        let parsed = net
            .parse::<IpNet>()
            .or_else(|_| net.parse::<std::net::IpAddr>().map(IpNet::from));
        match parsed {
            Ok(n) => allow_networks.push(n),
            Err(_) => v.problem(
                &format!("delivery.allow_networks[{i}]"),
                format!("`{net}` is not a CIDR such as 127.0.0.0/8"),
            ),
        }
    }
    let mut extra_roots = Vec::new();
    for (i, file) in raw.delivery.ca_certs.iter().enumerate() {
        match read_ca_certs(Path::new(file)) {
            Ok(certs) => extra_roots.extend(certs),
            Err(why) => v.problem(&format!("delivery.ca_certs[{i}]"), format!("`{file}`: {why}")),
        }
    }
    let delivery = DeliveryConfig {
        timeout: v.duration("delivery.timeout", raw.delivery.timeout.as_deref(), "10s"),
        allow_networks,
        extra_roots,
        max_in_flight: v
            .positive("delivery.max_in_flight", raw.delivery.max_in_flight)
            .unwrap_or(512),
        max_in_flight_per_endpoint: v
            .positive(
                "delivery.max_in_flight_per_endpoint",
                raw.delivery.max_in_flight_per_endpoint,
            )
            .unwrap_or(16),
    };

    let defaults = HealthRules::default();
    let health = HealthConfig {
        rules: HealthRules {
            degrade_after_failures: v
                .positive("health.degrade_after_failures", raw.health.degrade_after_failures)
                .unwrap_or(defaults.degrade_after_failures),
            pause_after: v.duration_or(
                "health.pause_after",
                raw.health.pause_after.as_deref(),
                defaults.pause_after,
            ),
            pause_min_failures: v
                .positive("health.pause_min_failures", raw.health.pause_min_failures)
                .unwrap_or(defaults.pause_min_failures),
            disable_after: v.duration_or(
                "health.disable_after",
                raw.health.disable_after.as_deref(),
                defaults.disable_after,
            ),
        },
        operator_topic: raw.health.operator_topic.clone(),
    };

    let retention = RetentionConfig {
        deliveries: v.duration("retention.deliveries", raw.retention.deliveries.as_deref(), "30d"),
        events: v.duration("retention.events", raw.retention.events.as_deref(), "30d"),
        idempotency: v.duration(
            "retention.idempotency",
            raw.retention.idempotency.as_deref(),
            "24h",
        ),
    };
    if retention.events < Duration::from_secs(7 * 86_400) {
        v.problem(
            "retention.events",
            "must be at least 7d, the window replay needs".into(),
        );
    }

    let mut policies: BTreeMap<String, Arc<Policy>> = Policy::presets()
        .into_iter()
        .map(|p| (p.name().to_owned(), Arc::new(p)))
        .collect();
    for (name, spec) in &raw.policies {
        let path = format!("policies.{name}");
        if Policy::is_preset_name(name) {
            v.problem(
                &path,
                format!("`{name}` is a built-in preset and cannot be redefined; choose another name"),
            );
            continue;
        }
        match Policy::from_spec(name, spec) {
            Ok(policy) => {
                policies.insert(name.clone(), Arc::new(policy));
            }
            Err(problems) => {
                for p in problems {
                    let full = if p.path.is_empty() {
                        path.clone()
                    } else {
                        format!("{path}.{}", p.path)
                    };
                    v.problem(&full, p.message);
                }
            }
        }
    }

    let mut topics = BTreeMap::new();
    for (name, topic) in &raw.topics {
        let path = format!("topics.{name}");
        v.name(&path, name);
        if let Some(policy) = &topic.policy {
            v.policy_exists(&format!("{path}.policy"), policy, &policies);
        }
        topics.insert(
            name.clone(),
            TopicConfig {
                policy: topic.policy.clone(),
            },
        );
    }
    if let Some(op) = &health.operator_topic {
        v.name("health.operator_topic", op);
        topics.entry(op.clone()).or_insert(TopicConfig { policy: None });
    }

    let mut endpoints = BTreeMap::new();
    for (name, raw_ep) in raw.endpoints {
        if let Some(ep) = v.endpoint(&name, raw_ep, &topics, &policies) {
            endpoints.insert(ep.name.clone(), Arc::new(ep));
        }
    }

    if !v.problems.is_empty() {
        v.problems.sort_by_key(|p| p.line);
        return Err(ConfigError { problems: v.problems });
    }
    Ok(Config {
        source,
        server,
        storage,
        plugins,
        delivery,
        health,
        retention,
        policies,
        topics,
        endpoints,
    })
}

struct Validator<'a> {
    label: &'a str,
    line_of: &'a dyn Fn(&str) -> usize,
    problems: Vec<Problem>,
}

impl Validator<'_> {
    fn problem(&mut self, path: &str, reason: String) {
        self.problems.push(Problem {
            file: self.label.to_owned(),
            line: (self.line_of)(path),
            path: path.to_owned(),
            reason,
        });
    }

    fn parse<T>(&mut self, path: &str, text: &str, f: impl FnOnce(&str) -> Result<T, String>) -> Option<T> {
        match f(text) {
            Ok(v) => Some(v),
            Err(reason) => {
                self.problem(path, reason);
                None
            }
        }
    }

    fn duration(&mut self, path: &str, text: Option<&str>, default: &str) -> Duration {
        let default = crate::policy::parse_duration(default).expect("valid default duration");
        self.duration_or(path, text, default)
    }

    fn duration_or(&mut self, path: &str, text: Option<&str>, default: Duration) -> Duration {
        match text {
            None => default,
            Some(t) => self
                .parse(path, t, |s| {
                    crate::policy::parse_duration(s).map_err(|e| format!("`{s}` is not a duration ({e})"))
                })
                .unwrap_or(default),
        }
    }

    /// A timeout: zero would refuse everything, so it is a mistake, not a way to turn it off.
    fn nonzero_duration(&mut self, path: &str, text: Option<&str>, default: &str) -> Duration {
        let fallback = crate::policy::parse_duration(default).expect("valid default duration");
        let value = self.duration_or(path, text, fallback);
        if value.is_zero() {
            self.problem(path, "must be more than 0".into());
            return fallback;
        }
        value
    }

    fn size(&mut self, path: &str, text: Option<&str>, default: usize) -> usize {
        match text {
            None => default,
            Some(t) => self.parse(path, t, parse_size).unwrap_or(default),
        }
    }

    fn positive(&mut self, path: &str, value: Option<u32>) -> Option<u32> {
        match value {
            Some(0) => {
                self.problem(path, "must be at least 1".into());
                None
            }
            other => other,
        }
    }

    /// Topic and endpoint names appear in URLs and metrics labels: keep them plain.
    fn name(&mut self, path: &str, name: &str) {
        let ok = !name.is_empty()
            && name.len() <= 128
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if !ok {
            self.problem(
                path,
                format!("`{name}` must be 1-128 characters of a-z, A-Z, 0-9, `-`, `_`, `.`"),
            );
        }
    }

    fn policy_exists(&mut self, path: &str, name: &str, policies: &BTreeMap<String, Arc<Policy>>) {
        if !policies.contains_key(name) {
            let known: Vec<&str> = policies.keys().map(String::as_str).collect();
            self.problem(
                path,
                format!("unknown policy `{name}` (known: {})", known.join(", ")),
            );
        }
    }

    fn binding(&mut self, path: &str, raw: Option<RawBinding>) -> Option<PluginBinding> {
        let raw = raw?;
        if raw.plugin.trim().is_empty() {
            self.problem(&format!("{path}.plugin"), "a plugin name may not be empty".into());
            return None;
        }
        let config = raw
            .config
            .into_iter()
            .map(|(k, v)| {
                let text = match v {
                    serde_json::Value::String(s) => s,
                    other => other.to_string(),
                };
                (k, text)
            })
            .collect();
        Some(PluginBinding {
            plugin: PluginBinding::normalize_name(&raw.plugin),
            config,
        })
    }

    fn endpoint(
        &mut self,
        name: &str,
        raw: RawEndpoint,
        topics: &BTreeMap<String, TopicConfig>,
        policies: &BTreeMap<String, Arc<Policy>>,
    ) -> Option<EndpointConfig> {
        let path = format!("endpoints.{name}");
        let before = self.problems.len();
        self.name(&path, name);

        let url = self.parse(&format!("{path}.url"), &raw.url, |s| {
            let uri: Uri = s.parse().map_err(|e| format!("`{s}` is not a URL: {e}"))?;
            match uri.scheme_str() {
                Some("http" | "https") => {}
                _ => return Err(format!("`{s}` must start with http:// or https://")),
            }
            if uri.host().is_none_or(str::is_empty) {
                return Err(format!("`{s}` has no host"));
            }
            Ok(uri)
        });

        if raw.topics.is_empty() {
            self.problem(
                &format!("{path}.topics"),
                "an endpoint needs at least one topic".into(),
            );
        }
        for (i, topic) in raw.topics.iter().enumerate() {
            if !topics.contains_key(topic) {
                let known: Vec<&str> = topics.keys().map(String::as_str).collect();
                self.problem(
                    &format!("{path}.topics[{i}]"),
                    format!("unknown topic `{topic}` (declared: {})", known.join(", ")),
                );
            }
        }

        let type_matcher = if raw.types.is_empty() {
            None
        } else {
            let mut builder = GlobSetBuilder::new();
            for (i, pattern) in raw.types.iter().enumerate() {
                match Glob::new(pattern) {
                    Ok(g) => {
                        builder.add(g);
                    }
                    Err(e) => self.problem(
                        &format!("{path}.types[{i}]"),
                        format!("`{pattern}` is not a glob: {e}"),
                    ),
                }
            }
            builder.build().ok()
        };

        if let Some(policy) = &raw.policy {
            self.policy_exists(&format!("{path}.policy"), policy, policies);
        }

        let secrets: Vec<String> = match raw.secret {
            None => Vec::new(),
            Some(RawSecrets::One(s)) => vec![s],
            Some(RawSecrets::Many(list)) => list,
        };
        for (i, secret) in secrets.iter().enumerate() {
            let spath = if secrets.len() == 1 {
                format!("{path}.secret")
            } else {
                format!("{path}.secret[{i}]")
            };
            if secret.is_empty() {
                self.problem(&spath, "a secret may not be empty".into());
            } else if let Some(b64) = secret.strip_prefix("whsec_") {
                use base64::Engine;
                let decoded = base64::engine::general_purpose::STANDARD.decode(b64);
                if decoded.as_ref().map_or(true, Vec::is_empty) {
                    // Never echo the secret itself.
                    self.problem(
                        &spath,
                        "a whsec_ secret must be followed by non-empty base64".into(),
                    );
                }
            }
        }

        let mut headers = Vec::new();
        for (key, value) in &raw.headers {
            let hpath = format!("{path}.headers.{key}");
            let Ok(name) = HeaderName::from_bytes(key.as_bytes()) else {
                self.problem(&hpath, format!("`{key}` is not a valid header name"));
                continue;
            };
            if RESERVED_HEADERS.contains(&name.as_str()) {
                self.problem(
                    &hpath,
                    format!("`{key}` is set by the gateway and cannot be overridden"),
                );
                continue;
            }
            match HeaderValue::from_str(value) {
                Ok(v) => headers.push((name, v)),
                Err(_) => self.problem(&hpath, "not a valid header value".into()),
            }
        }

        if let Some(rate) = raw.max_per_second
            && !(rate.is_finite() && rate > 0.0)
        {
            self.problem(
                &format!("{path}.max_per_second"),
                format!("{rate} must be a positive number"),
            );
        }
        let max_in_flight = self.positive(&format!("{path}.max_in_flight"), raw.max_in_flight);
        let timeout = raw
            .timeout
            .as_deref()
            .map(|t| self.duration_or(&format!("{path}.timeout"), Some(t), Duration::from_secs(10)));

        let transform = self.binding(&format!("{path}.transform"), raw.transform);
        let signer = self.binding(&format!("{path}.signer"), raw.signer);
        let backoff = self.binding(&format!("{path}.backoff"), raw.backoff);

        if self.problems.len() > before {
            return None;
        }
        Some(EndpointConfig {
            name: Arc::from(name),
            url: url?,
            topics: raw.topics,
            types: raw.types,
            type_matcher,
            policy: raw.policy,
            secrets: secrets.into_iter().map(Secret::new).collect(),
            headers,
            transform,
            signer,
            backoff,
            max_per_second: raw.max_per_second,
            max_in_flight,
            timeout,
            ordered: raw.ordered,
            dead_letter: raw.dead_letter,
        })
    }
}

/// The smallest `storage.max_size`: an empty database alone takes tens of KiB.
const MIN_STORAGE_SIZE: usize = 64 * 1024;

/// `256KiB`, `1MiB`, `1000`, `64KB`: a byte count.
fn parse_size(text: &str) -> Result<usize, String> {
    let t = text.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (digits, unit) = t.split_at(split);
    let n: usize = digits
        .parse()
        .map_err(|_| format!("`{text}` is not a size such as 256KiB"))?;
    let factor: usize = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "K" => 1 << 10,
        "MiB" | "M" => 1 << 20,
        "GiB" | "G" => 1 << 30,
        "KB" | "kB" => 1000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        other => {
            return Err(format!(
                "unknown size unit `{other}` (use B, KiB, MiB, GiB, KB, MB, GB)"
            ));
        }
    };
    n.checked_mul(factor)
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("`{text}` is out of range"))
}

/// The JSON Schema of the config file, for editors (`hookgate config schema`).
pub fn json_schema() -> serde_json::Value {
    serde_json::to_value(schemars::schema_for!(RawConfig)).expect("a schema serializes")
}

/// The largest CA file read: a bundle of a few hundred certificates.
const MAX_CA_FILE_BYTES: u64 = 1 << 20;

/// The certificates of a PEM file, each checked to be usable as a trust anchor.
fn read_ca_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    use std::io::Read as _;

    use rustls::pki_types::pem::PemObject as _;
    // Only a regular file, read no further than the limit: never block on a FIFO, and never
    // read a device or a `/proc` file (which report a size of 0) without end.
    let meta = std::fs::metadata(path).map_err(|e| e.to_string())?;
    if !meta.is_file() {
        return Err("not a regular file".to_owned());
    }
    let mut pem = Vec::new();
    std::fs::File::open(path)
        .and_then(|file| file.take(MAX_CA_FILE_BYTES + 1).read_to_end(&mut pem))
        .map_err(|e| e.to_string())?;
    if pem.len() as u64 > MAX_CA_FILE_BYTES {
        return Err(format!("larger than {} KiB", MAX_CA_FILE_BYTES / 1024));
    }
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("not a PEM certificate file ({e})"))?;
    if certs.is_empty() {
        return Err("holds no `BEGIN CERTIFICATE` block".to_owned());
    }
    let mut check = rustls::RootCertStore::empty();
    for (n, cert) in certs.iter().enumerate() {
        check
            .add(cert.clone())
            .map_err(|e| format!("certificate {} is not a usable CA certificate: {e}", n + 1))?;
    }
    Ok(certs)
}

#[cfg(test)]
mod tests;
