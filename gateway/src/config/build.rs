//! From the file's raw shape to the [`Config`] the gateway runs on, one section at a time. Each
//! section reads its keys, falls back to [`defaults`] and records every problem in the
//! [`Validator`]; [`build`] fails only at the end, with all of them.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use ipnet::IpNet;

use super::defaults::{self, limits};
use super::endpoint::Known;
use super::raw::*;
use super::validate::{Validator, parse_size, read_ca_certs};
use super::*;
use crate::health::HealthRules;
use crate::model::Secret;
use crate::policy::{Policy, PolicySpec};

/// Validates the raw config and builds the typed one, collecting every problem.
pub(super) fn build(
    raw: RawConfig,
    source: Option<PathBuf>,
    label: &str,
    line_of: &dyn Fn(&str) -> usize,
) -> Result<Config, ConfigError> {
    let mut v = Validator::new(label, line_of);
    let server = v.server(&raw.server);
    let storage = v.storage(&raw.storage);
    let cluster = v.cluster(&raw.cluster);
    let plugins = v.plugins(&raw.plugins, &storage.path);
    let delivery = v.delivery(&raw.delivery);
    let health = v.health(&raw.health);
    let retention = v.retention(&raw.retention);
    let telemetry = raw.telemetry.as_ref().and_then(|t| v.telemetry(t));
    let policies = v.policies(&raw.policies);
    let topics = v.topics(&raw.topics, &health, &policies);
    let known = Known {
        topics: &topics,
        policies: &policies,
        allow_networks: &delivery.allow_networks,
    };
    let mut endpoints = BTreeMap::new();
    for (name, raw_ep) in raw.endpoints {
        if let Some(ep) = v.endpoint(&name, raw_ep, &known) {
            endpoints.insert(ep.name.clone(), Arc::new(ep));
        }
    }
    if !v.problems.is_empty() {
        v.problems.sort_by_key(|p| p.line);
        return Err(ConfigError { problems: v.problems });
    }
    Ok(Config {
        source,
        overrides: super::Overrides::default(),
        server,
        storage,
        cluster,
        plugins,
        delivery,
        health,
        retention,
        telemetry,
        policies,
        topics,
        file_endpoints: endpoints,
    })
}

impl Validator<'_> {
    fn server(&mut self, raw: &RawServer) -> ServerConfig {
        let listen = self
            .parse(
                "server.listen",
                raw.listen.as_deref().unwrap_or(defaults::LISTEN),
                |s| {
                    s.parse::<SocketAddr>()
                        .map_err(|_| format!("`{s}` is not an ip:port address"))
                },
            )
            .unwrap_or_else(|| defaults::LISTEN.parse().expect("valid default"));
        let api_keys = self.api_keys(&raw.api_keys);
        let mut console_keys = Vec::new();
        for (i, key) in raw.console_keys.iter().enumerate() {
            if key.len() < 16 {
                self.problem(
                    &format!("server.console_keys[{i}]"),
                    "a console key needs at least 16 characters".into(),
                );
            }
            console_keys.push(Secret::new(key.clone()));
        }
        let public_url = raw.public_url.as_deref().and_then(|url| {
            self.parse("server.public_url", url, |s| match s.parse::<http::Uri>() {
                Ok(u) if matches!(u.scheme_str(), Some("http" | "https")) && u.host().is_some() => {
                    Ok(s.trim_end_matches('/').to_owned())
                }
                _ => Err(format!("`{s}` is not an http:// or https:// address")),
            })
        });
        if api_keys.is_empty() && !listen.ip().is_loopback() {
            self.problem(
                "server.api_keys",
                format!(
                    "no API keys, but the listener {listen} is not loopback; add api_keys or listen on 127.0.0.1"
                ),
            );
        }
        ServerConfig {
            listen,
            api_keys,
            console_keys,
            public_url,
            max_body_bytes: self.size(
                "server.max_body",
                raw.max_body.as_deref(),
                defaults::MAX_BODY_BYTES,
            ),
            shutdown_grace: self.duration(
                "server.shutdown_grace",
                raw.shutdown_grace.as_deref(),
                defaults::SHUTDOWN_GRACE,
                limits::SHUTDOWN_GRACE,
            ),
            rate_limit_per_key: self.positive("server.rate_limit_per_key", raw.rate_limit_per_key),
            header_timeout: self.duration(
                "server.header_timeout",
                raw.header_timeout.as_deref(),
                defaults::HEADER_TIMEOUT,
                limits::HEADER_TIMEOUT,
            ),
            body_timeout: self.duration(
                "server.body_timeout",
                raw.body_timeout.as_deref(),
                defaults::BODY_TIMEOUT,
                limits::BODY_TIMEOUT,
            ),
            workers: self.workers(raw.workers),
        }
    }

    fn workers(&mut self, workers: Option<u32>) -> Option<u32> {
        let workers = self.positive("server.workers", workers)?;
        if workers > limits::MAX_WORKERS {
            self.problem(
                "server.workers",
                format!("{workers} is more than {}", limits::MAX_WORKERS),
            );
            return None;
        }
        Some(workers)
    }

    fn api_keys(&mut self, raw: &[RawApiKey]) -> Vec<ApiKey> {
        let mut keys = Vec::new();
        for (i, entry) in raw.iter().enumerate() {
            let path = format!("server.api_keys[{i}]");
            let (key, tenant) = match entry {
                RawApiKey::Admin(key) => (key, None),
                RawApiKey::Tenant(scoped) => {
                    self.name(&format!("{path}.tenant"), &scoped.tenant);
                    (&scoped.key, Some(scoped.tenant.clone()))
                }
            };
            if key.trim().is_empty() {
                self.problem(&path, "an API key may not be empty".into());
            } else if key.starts_with(crate::model::CONSOLE_TOKEN_PREFIX) {
                self.problem(
                    &path,
                    "an API key may not look like a console token (`hgc_…`)".into(),
                );
            } else {
                keys.push(ApiKey {
                    key: Secret::new(key.clone()),
                    tenant,
                });
            }
        }
        keys
    }

    fn storage(&mut self, raw: &RawStorage) -> StorageConfig {
        let url = raw.url.as_deref().and_then(|url| self.database_url(url));
        if url.is_some() && raw.max_size.is_some() {
            self.problem(
                "storage.max_size",
                "applies to the embedded SQLite file only; give PostgreSQL its own quota".into(),
            );
        }
        let max_connections = raw.max_connections.unwrap_or(defaults::PG_MAX_CONNECTIONS);
        if !(1..=1000).contains(&max_connections) {
            self.problem(
                "storage.max_connections",
                format!("{max_connections} is not between 1 and 1000"),
            );
        }
        let encryption_key = raw
            .encryption_key
            .as_deref()
            .and_then(|text| self.encryption_key("storage.encryption_key", text));
        if url.is_some() && encryption_key.is_none() && raw.encryption_key.is_none() {
            self.problem(
                "storage.url",
                "needs storage.encryption_key (every node the same; make one with `hookgate keygen \
                 storage`): the secrets kept in the database are encrypted under it"
                    .into(),
            );
        }
        let previous_encryption_keys = raw
            .previous_encryption_keys
            .iter()
            .enumerate()
            .filter_map(|(i, text)| {
                self.encryption_key(&format!("storage.previous_encryption_keys[{i}]"), text)
            })
            .collect();
        StorageConfig {
            url,
            max_connections,
            encryption_key,
            previous_encryption_keys,
            path: PathBuf::from(raw.path.as_deref().unwrap_or(defaults::DB_PATH)),
            max_size_bytes: raw.max_size.as_deref().and_then(|text| {
                let bytes = self.parse("storage.max_size", text, parse_size)?;
                if bytes < limits::MIN_STORAGE_SIZE {
                    self.problem(
                        "storage.max_size",
                        format!("`{text}` is below the minimum of 64KiB"),
                    );
                    return None;
                }
                u64::try_from(bytes).ok()
            }),
        }
    }

    fn cluster(&mut self, raw: &RawCluster) -> ClusterConfig {
        let lease = self.duration(
            "cluster.lease",
            raw.lease.as_deref(),
            defaults::CLUSTER_LEASE,
            limits::CLUSTER_LEASE,
        );
        let node_id = raw.node_id.clone().filter(|id| {
            let ok = !id.is_empty()
                && id.len() <= 64
                && id.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c));
            if !ok {
                self.problem(
                    "cluster.node_id",
                    format!("`{id}` must be 1 to 64 letters, digits, `.`, `_` or `-`"),
                );
            }
            ok
        });
        ClusterConfig { lease, node_id }
    }

    /// A `postgres://` URL that the client can read. The problem never repeats the URL: it may
    /// hold a password.
    /// A storage key; a problem never echoes the text (it is a secret).
    fn encryption_key(&mut self, path: &str, text: &str) -> Option<EncryptionKey> {
        EncryptionKey::from_base64(text)
            .map_err(|e| self.problem(path, e.to_string()))
            .ok()
    }

    fn database_url(&mut self, url: &str) -> Option<Secret> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            self.problem(
                "storage.url",
                "must start with postgres:// or postgresql://".into(),
            );
            return None;
        }
        match url.parse::<tokio_postgres::Config>() {
            Ok(_) => Some(Secret::new(url.to_owned())),
            Err(e) => {
                self.problem("storage.url", format!("is not a PostgreSQL URL: {e}"));
                None
            }
        }
    }

    fn plugins(&mut self, raw: &RawPlugins, db_path: &Path) -> PluginsConfig {
        let cache_default = db_path
            .parent()
            .map(|p| p.join(defaults::PLUGIN_CACHE_DIR_NAME))
            .unwrap_or_else(|| PathBuf::from(defaults::PLUGIN_CACHE_DIR_NAME));
        PluginsConfig {
            dir: PathBuf::from(raw.dir.as_deref().unwrap_or(defaults::PLUGIN_DIR)),
            cache_dir: raw
                .cache_dir
                .as_deref()
                .map(PathBuf::from)
                .unwrap_or(cache_default),
            bundled: raw.bundled.unwrap_or(true),
            call_timeout: self.duration(
                "plugins.call_timeout",
                raw.call_timeout.as_deref(),
                defaults::PLUGIN_CALL_TIMEOUT,
                limits::PLUGIN_CALL_TIMEOUT,
            ),
            call_wall_timeout: self.duration(
                "plugins.call_wall_timeout",
                raw.call_wall_timeout.as_deref(),
                defaults::PLUGIN_CALL_WALL_TIMEOUT,
                limits::PLUGIN_CALL_WALL_TIMEOUT,
            ),
            max_file_bytes: self.size(
                "plugins.max_file_size",
                raw.max_file_size.as_deref(),
                defaults::PLUGIN_MAX_FILE_BYTES,
            ) as u64,
            memory_bytes: self.size(
                "plugins.memory",
                raw.memory.as_deref(),
                defaults::PLUGIN_MEMORY_BYTES,
            ),
            max_output_bytes: self.size(
                "plugins.max_output",
                raw.max_output.as_deref(),
                defaults::PLUGIN_MAX_OUTPUT_BYTES,
            ),
        }
    }

    fn delivery(&mut self, raw: &RawDelivery) -> DeliveryConfig {
        let mut allow_networks = Vec::new();
        for (i, net) in raw.allow_networks.iter().enumerate() {
            let parsed = net
                .parse::<IpNet>()
                .or_else(|_| net.parse::<std::net::IpAddr>().map(IpNet::from));
            match parsed {
                Ok(n) => allow_networks.push(n),
                Err(_) => self.problem(
                    &format!("delivery.allow_networks[{i}]"),
                    format!("`{net}` is not a CIDR such as 127.0.0.0/8"),
                ),
            }
        }
        let mut extra_roots = Vec::new();
        for (i, file) in raw.ca_certs.iter().enumerate() {
            match read_ca_certs(Path::new(file)) {
                Ok(certs) => extra_roots.extend(certs),
                Err(why) => self.problem(&format!("delivery.ca_certs[{i}]"), format!("`{file}`: {why}")),
            }
        }
        let proxy = raw
            .proxy
            .as_deref()
            .and_then(|text| self.parse("delivery.proxy", text, ProxyAddr::parse));
        DeliveryConfig {
            proxy,
            timeout: self.duration(
                "delivery.timeout",
                raw.timeout.as_deref(),
                defaults::DELIVERY_TIMEOUT,
                limits::DELIVERY_TIMEOUT,
            ),
            allow_networks,
            extra_roots,
            max_in_flight: self
                .positive("delivery.max_in_flight", raw.max_in_flight)
                .unwrap_or(defaults::MAX_IN_FLIGHT),
            max_in_flight_per_endpoint: self
                .positive(
                    "delivery.max_in_flight_per_endpoint",
                    raw.max_in_flight_per_endpoint,
                )
                .unwrap_or(defaults::MAX_IN_FLIGHT_PER_ENDPOINT),
        }
    }

    /// The health machine's limits; their defaults live with the machine ([`HealthRules`]).
    fn health(&mut self, raw: &RawHealth) -> HealthConfig {
        let d = HealthRules::default();
        let rules = HealthRules {
            degrade_after_failures: self
                .positive("health.degrade_after_failures", raw.degrade_after_failures)
                .unwrap_or(d.degrade_after_failures),
            pause_after: self.duration(
                "health.pause_after",
                raw.pause_after.as_deref(),
                d.pause_after,
                limits::PAUSE_AFTER,
            ),
            pause_min_failures: self
                .positive("health.pause_min_failures", raw.pause_min_failures)
                .unwrap_or(d.pause_min_failures),
            disable_after: self.duration(
                "health.disable_after",
                raw.disable_after.as_deref(),
                d.disable_after,
                limits::DISABLE_AFTER,
            ),
        };
        if let Some(op) = &raw.operator_topic {
            self.name("health.operator_topic", op);
        }
        HealthConfig {
            rules,
            operator_topic: raw.operator_topic.clone(),
            key_blocked_after: self.duration(
                "health.key_blocked_after",
                raw.key_blocked_after.as_deref(),
                defaults::KEY_BLOCKED_AFTER,
                limits::KEY_BLOCKED_AFTER,
            ),
        }
    }

    fn retention(&mut self, raw: &RawRetention) -> RetentionConfig {
        RetentionConfig {
            deliveries: self.duration(
                "retention.deliveries",
                raw.deliveries.as_deref(),
                defaults::RETAIN_DELIVERIES,
                limits::RETAIN_DELIVERIES,
            ),
            events: self.duration(
                "retention.events",
                raw.events.as_deref(),
                defaults::RETAIN_EVENTS,
                limits::RETAIN_EVENTS,
            ),
            idempotency: self.duration(
                "retention.idempotency",
                raw.idempotency.as_deref(),
                defaults::RETAIN_IDEMPOTENCY_KEYS,
                limits::RETAIN_IDEMPOTENCY_KEYS,
            ),
        }
    }

    /// The trace exporter, or None when its section has a problem (recorded).
    fn telemetry(&mut self, raw: &RawTelemetry) -> Option<TelemetryConfig> {
        let Some(endpoint) = raw.otlp_endpoint.as_deref() else {
            self.problem(
                "telemetry.otlp_endpoint",
                "required: the OTLP/HTTP collector, e.g. http://collector:4318".into(),
            );
            return None;
        };
        let traces_url = self.parse("telemetry.otlp_endpoint", endpoint, |s| -> Result<Uri, String> {
            let url: Uri = s.parse().map_err(|_| format!("`{s}` is not a URL"))?;
            crate::delivery::validate_url(&url).map_err(|e| format!("`{s}`: {e}"))?;
            if url.query().is_some() {
                return Err(format!("`{s}`: a collector URL has no query"));
            }
            // The OTLP rule for a base URL: the traces path goes under it.
            match url.path() {
                "" | "/" => format!("{}/v1/traces", s.trim_end_matches('/'))
                    .parse::<Uri>()
                    .map_err(|_| format!("`{s}` is not a URL")),
                _ => Ok(url),
            }
        });
        let service_name = raw
            .service_name
            .clone()
            .unwrap_or_else(|| defaults::TRACE_SERVICE_NAME.to_owned());
        if service_name.trim().is_empty() {
            self.problem("telemetry.service_name", "may not be empty".into());
        }
        let max_queue_spans = raw.max_queue_spans.unwrap_or(defaults::TRACE_MAX_QUEUE_SPANS);
        if max_queue_spans == 0 || max_queue_spans > limits::MAX_TRACE_QUEUE_SPANS {
            self.problem(
                "telemetry.max_queue_spans",
                format!(
                    "{max_queue_spans} is outside 1..={}",
                    limits::MAX_TRACE_QUEUE_SPANS
                ),
            );
        }
        Some(TelemetryConfig {
            traces_url: traces_url?,
            service_name,
            max_queue_spans: max_queue_spans as usize,
        })
    }

    /// The presets and the file's own policies, which may not take a preset's name.
    fn policies(&mut self, raw: &BTreeMap<String, PolicySpec>) -> BTreeMap<String, Arc<Policy>> {
        let mut policies: BTreeMap<String, Arc<Policy>> = Policy::presets()
            .into_iter()
            .map(|p| (p.name().to_owned(), Arc::new(p)))
            .collect();
        for (name, spec) in raw {
            let path = format!("policies.{name}");
            if Policy::is_preset_name(name) {
                self.problem(
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
                        self.problem(&full, p.message);
                    }
                }
            }
        }
        policies
    }

    /// The file's topics, plus the operator topic when health events are published, and the
    /// Svix API's topic.
    fn topics(
        &mut self,
        raw: &BTreeMap<String, RawTopic>,
        health: &HealthConfig,
        policies: &BTreeMap<String, Arc<Policy>>,
    ) -> BTreeMap<String, TopicConfig> {
        let mut topics = BTreeMap::new();
        for (name, topic) in raw {
            let path = format!("topics.{name}");
            self.name(&path, name);
            if let Some(policy) = &topic.policy {
                self.policy_exists(&format!("{path}.policy"), policy, policies);
            }
            topics.insert(
                name.clone(),
                TopicConfig {
                    policy: topic.policy.clone(),
                },
            );
        }
        if let Some(op) = &health.operator_topic {
            topics.entry(op.clone()).or_insert(TopicConfig { policy: None });
        }
        // The Svix API's messages go to this topic; the file may declare it to give it a policy.
        topics
            .entry(defaults::SVIX_TOPIC.to_owned())
            .or_insert(TopicConfig { policy: None });
        topics
    }
}
