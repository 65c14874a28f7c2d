//! Validating one endpoint of the file: every key checked, every problem recorded.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use globset::{Glob, GlobSetBuilder};
use http::{HeaderName, HeaderValue, Uri};
use ipnet::IpNet;

use super::raw::{RawEndpoint, RawFinalFailure, RawSecrets};
use super::validate::Validator;
use super::{EndpointConfig, EndpointSource, FinalFailure, TopicConfig, TypeFilter, defaults};
use crate::delivery::{Destination, ssrf};
use crate::filter::Filter;
use crate::model::Secret;
use crate::policy::Policy;

/// Headers the gateway sets itself; an endpoint's `headers` may not override them.
const RESERVED_HEADERS: &[&str] = &[
    "webhook-id",
    "webhook-timestamp",
    "webhook-signature",
    "svix-id",
    "svix-timestamp",
    "svix-signature",
    "hookgate-delivery-attempt",
    "hookgate-event-type",
    "hookgate-ordering-key",
    // Names the attempt's span; a configured value would put every attempt in one trace.
    "traceparent",
    "content-length",
    "host",
    "transfer-encoding",
    "connection",
];

/// What an endpoint may refer to: the file's topics and policies (presets included), and the
/// networks `delivery.allow_networks` exempts from the SSRF rules.
pub(super) struct Known<'a> {
    pub topics: &'a BTreeMap<String, TopicConfig>,
    pub policies: &'a BTreeMap<String, Arc<Policy>>,
    pub allow_networks: &'a [IpNet],
}

impl Validator<'_> {
    /// `on_final_failure` means something only where keys wait for each other.
    fn final_failure(&mut self, path: &str, raw: Option<RawFinalFailure>, ordered: bool) -> FinalFailure {
        match raw {
            None | Some(RawFinalFailure::Skip) => FinalFailure::Skip,
            Some(RawFinalFailure::Hold) if ordered => FinalFailure::Hold,
            Some(RawFinalFailure::Hold) => {
                self.problem(
                    &format!("{path}.on_final_failure"),
                    "`hold` needs `ordered: true`: only an ordered endpoint's keys wait for their head"
                        .into(),
                );
                FinalFailure::Skip
            }
        }
    }

    /// The endpoint `name`, or None when any of its keys has a problem (all of them recorded).
    pub(super) fn endpoint(&mut self, name: &str, raw: RawEndpoint, known: &Known) -> Option<EndpointConfig> {
        let path = format!("endpoints.{name}");
        let before = self.problems.len();
        self.name(&path, name);
        let destination = self.destination(&path, &raw.url, known.allow_networks);
        self.endpoint_topics(&path, &raw.topics, known.topics);
        let type_filter = self.type_filter(&path, &raw.types);
        if let Some(policy) = &raw.policy {
            self.policy_exists(&format!("{path}.policy"), policy, known.policies);
        }
        let (max_in_flight, timeout) = self.endpoint_limits(&path, &raw);
        let svix_uid = self.endpoint_names(&path, &raw);
        let secrets = self.secrets(&path, raw.secret);
        let headers = self.headers(&path, &raw.headers);
        let transform = self.binding(&format!("{path}.transform"), raw.transform);
        let signer = self.binding(&format!("{path}.signer"), raw.signer);
        let backoff = self.binding(&format!("{path}.backoff"), raw.backoff);
        if let Some(destination) = destination.as_ref().filter(|d| !d.is_http()) {
            self.http_only(
                &path,
                destination,
                raw.auth.is_some(),
                raw.tls.is_some(),
                raw.proxy.is_some(),
            );
        }
        let auth = self.outbound_auth(&path, raw.auth, &headers, known.allow_networks);
        let http_url = destination
            .as_ref()
            .and_then(Destination::http)
            .map(|http| &http.url);
        let route = self.route(&path, raw.tls, raw.proxy.as_deref(), http_url);
        let signature = self.signature(&path, raw.signature, &secrets, signer.is_some());
        let on_final_failure = self.final_failure(&path, raw.on_final_failure, raw.ordered);
        let filter = raw.filter.as_ref().and_then(|doc| self.filter(&path, doc));

        if self.problems.len() > before {
            return None;
        }
        let mut destination = destination?;
        if let Destination::Http(http) = &mut destination {
            http.auth = auth.map(Arc::new);
            http.route = route;
        }
        Some(EndpointConfig {
            name: Arc::from(name),
            destination,
            topics: raw.topics,
            types: raw.types,
            type_filter,
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
            on_final_failure,
            dead_letter: raw.dead_letter,
            signature,
            source: EndpointSource::Config,
            tenant: raw.tenant.map(Arc::from),
            description: raw.description,
            retiring: Vec::new(),
            channels: raw.channels,
            disabled: raw.disabled,
            metadata: raw.metadata,
            svix_uid,
            svix_version: raw.svix.as_ref().and_then(|s| s.version).unwrap_or(1),
            svix_headers: raw.svix.is_some_and(|s| s.headers.unwrap_or(true)),
            filter,
            stored: None,
        })
    }

    /// The endpoint's own limits: `max_per_second` checked, `max_in_flight` and `timeout`.
    fn endpoint_limits(&mut self, path: &str, raw: &RawEndpoint) -> (Option<u32>, Option<Duration>) {
        if let Some(rate) = raw.max_per_second
            && !(rate.is_finite() && rate > 0.0)
        {
            self.problem(
                &format!("{path}.max_per_second"),
                format!("{rate} must be a positive number"),
            );
        }
        let max_in_flight = self.positive(&format!("{path}.max_in_flight"), raw.max_in_flight);
        let timeout = raw.timeout.as_deref().map(|t| {
            self.duration(
                &format!("{path}.timeout"),
                Some(t),
                defaults::DELIVERY_TIMEOUT,
                defaults::limits::DELIVERY_TIMEOUT,
            )
        });
        (max_in_flight, timeout)
    }

    /// The names an endpoint carries besides its own (tenant, channels, Svix uid), each held
    /// to the one name rule; returns the Svix uid.
    fn endpoint_names(&mut self, path: &str, raw: &RawEndpoint) -> Option<String> {
        if let Some(tenant) = &raw.tenant {
            self.name(&format!("{path}.tenant"), tenant);
        }
        for (i, channel) in raw.channels.iter().enumerate() {
            self.name(&format!("{path}.channels[{i}]"), channel);
        }
        let svix_uid = raw.svix.as_ref().and_then(|s| s.uid.clone());
        if let Some(uid) = &svix_uid {
            self.name(&format!("{path}.svix.uid"), uid);
        }
        svix_uid
    }

    /// The content filter, compiled once here; each mistake in it is a problem at its path
    /// inside the filter (`endpoints.billing.filter.payload.amount.$gte`). `{}` is no filter.
    fn filter(&mut self, path: &str, document: &serde_json::Value) -> Option<Arc<Filter>> {
        match Filter::compile(document) {
            Ok(filter) => filter.map(Arc::new),
            Err(errors) => {
                for e in errors {
                    let at = if e.path.is_empty() {
                        format!("{path}.filter")
                    } else {
                        format!("{path}.filter.{}", e.path)
                    };
                    self.problem(&at, e.reason);
                }
                None
            }
        }
    }

    /// Where the endpoint's messages go: the URL's scheme chooses the transport. An IP literal
    /// the SSRF rules block is refused here, whatever the scheme (see [`Validator::reachable`]).
    fn destination(&mut self, path: &str, url: &str, allow: &[IpNet]) -> Option<Destination> {
        let path = format!("{path}.url");
        let destination = self.parse(&path, url, Destination::parse)?;
        let host = destination.host().map(str::to_owned);
        self.host_reachable(&path, &destination.masked(), host.as_deref(), allow)
            .then_some(destination)
    }

    /// `auth`, `tls` and `proxy` are HTTP's: a broker's credentials are in its URL, its TLS
    /// in its scheme, and it is dialled directly.
    fn http_only(&mut self, path: &str, destination: &Destination, auth: bool, tls: bool, proxy: bool) {
        for (key, set) in [("auth", auth), ("tls", tls), ("proxy", proxy)] {
            if set {
                self.problem(
                    &format!("{path}.{key}"),
                    format!(
                        "applies to http(s) endpoints only; a {} endpoint takes its credentials \
                         from its URL and its TLS from the scheme",
                        destination.kind()
                    ),
                );
            }
        }
    }

    /// Whether the SSRF rules let the gateway contact `url`'s host (see
    /// [`Validator::host_reachable`]).
    pub(super) fn reachable(&mut self, path: &str, url: &Uri, allow: &[IpNet]) -> bool {
        self.host_reachable(path, &url.to_string(), url.host(), allow)
    }

    /// Whether the SSRF rules let the gateway contact `host`, when it is an IP address; a
    /// problem (counted in [`Validator::blocked_addresses`]) when they do not. Every attempt to
    /// such an address would fail `blocked_address`, so the file and the API refuse it alike.
    /// Names are judged at every attempt, after they resolve.
    fn host_reachable(&mut self, path: &str, shown: &str, host: Option<&str>, allow: &[IpNet]) -> bool {
        let Some((ip, why)) = host.and_then(|host| ssrf::blocked_literal(host, allow)) else {
            return true;
        };
        self.blocked_addresses += 1;
        self.problem(
            path,
            format!(
                "`{shown}`: {ip} is {why}; webhooks may not target it unless \
                 delivery.allow_networks lists it"
            ),
        );
        false
    }

    fn endpoint_topics(&mut self, path: &str, wanted: &[String], topics: &BTreeMap<String, TopicConfig>) {
        if wanted.is_empty() {
            self.problem(
                &format!("{path}.topics"),
                "an endpoint needs at least one topic".into(),
            );
        }
        for (i, topic) in wanted.iter().enumerate() {
            if !topics.contains_key(topic) {
                let known: Vec<&str> = topics.keys().map(String::as_str).collect();
                self.problem(
                    &format!("{path}.topics[{i}]"),
                    format!("unknown topic `{topic}` (declared: {})", known.join(", ")),
                );
            }
        }
    }

    /// The `types` an endpoint takes: names without a glob character are compared as they
    /// are, and only patterns are compiled into a glob set (which costs kilobytes and
    /// microseconds: most endpoints list plain names).
    fn type_filter(&mut self, path: &str, types: &[String]) -> TypeFilter {
        let mut exact = Vec::new();
        let mut patterns = GlobSetBuilder::new();
        let mut any_pattern = false;
        for (i, pattern) in types.iter().enumerate() {
            if !TypeFilter::is_pattern(pattern) {
                exact.push(Arc::from(pattern.as_str()));
                continue;
            }
            match Glob::new(pattern) {
                Ok(g) => {
                    patterns.add(g);
                    any_pattern = true;
                }
                Err(e) => self.problem(
                    &format!("{path}.types[{i}]"),
                    format!("`{pattern}` is not a glob: {e}"),
                ),
            }
        }
        let patterns = any_pattern.then(|| patterns.build().ok().map(Arc::new)).flatten();
        TypeFilter::new(exact, patterns)
    }

    /// The signing secrets, one or a list (during a rotation). A problem never echoes a secret.
    fn secrets(&mut self, path: &str, raw: Option<RawSecrets>) -> Vec<String> {
        let secrets: Vec<String> = match raw {
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
                    self.problem(
                        &spath,
                        "a whsec_ secret must be followed by non-empty base64".into(),
                    );
                }
            }
        }
        secrets
    }

    /// The extra headers, none of which may be one the gateway sets itself.
    fn headers(&mut self, path: &str, raw: &BTreeMap<String, String>) -> Vec<(HeaderName, HeaderValue)> {
        let mut headers = Vec::new();
        for (key, value) in raw {
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
        headers
    }
}
