//! Plain domain data shared by every module: timestamps, events, deliveries, attempts,
//! outcomes and endpoint states. No I/O, no clock, no SQL, no HTTP shapes.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use serde::{Deserialize, Serialize};

/// A point in time: milliseconds since the Unix epoch, UTC.
///
/// Every time inside the gateway is one of these, handed in by the [`crate::clock::Clock`]
/// (real or simulated), so pure code never reads a clock itself.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timestamp(i64);

impl Timestamp {
    pub const EPOCH: Timestamp = Timestamp(0);

    pub const fn from_millis(ms: i64) -> Self {
        Timestamp(ms)
    }

    pub const fn as_millis(self) -> i64 {
        self.0
    }

    pub fn as_unix_seconds(self) -> i64 {
        self.0.div_euclid(1000)
    }

    /// `self + d`, saturating instead of overflowing.
    pub fn plus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_add(duration_millis(d)))
    }

    /// `self - d`, saturating instead of overflowing.
    pub fn minus(self, d: Duration) -> Self {
        Timestamp(self.0.saturating_sub(duration_millis(d)))
    }

    /// The time from `earlier` to `self`; zero when `earlier` is later.
    pub fn since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0).max(0) as u64)
    }

    /// RFC 3339 in UTC with millisecond precision, e.g. `2026-11-29T19:49:05.123Z`.
    pub fn to_rfc3339(self) -> String {
        match chrono::DateTime::from_timestamp_millis(self.0) {
            Some(t) => t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true),
            None => format!("@{}ms", self.0),
        }
    }

    pub fn parse_rfc3339(s: &str) -> Result<Self, chrono::ParseError> {
        let t = chrono::DateTime::parse_from_rfc3339(s)?;
        Ok(Timestamp(t.timestamp_millis()))
    }

    pub fn to_system_time(self) -> std::time::SystemTime {
        if self.0 >= 0 {
            std::time::UNIX_EPOCH + Duration::from_millis(self.0 as u64)
        } else {
            std::time::UNIX_EPOCH - Duration::from_millis(self.0.unsigned_abs())
        }
    }

    pub fn from_system_time(t: std::time::SystemTime) -> Self {
        match t.duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Timestamp(duration_millis(d)),
            Err(e) => Timestamp(-duration_millis(e.duration())),
        }
    }
}

fn duration_millis(d: Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_rfc3339())
    }
}

impl Serialize for Timestamp {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_rfc3339())
    }
}

impl<'de> Deserialize<'de> for Timestamp {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        Timestamp::parse_rfc3339(&s).map_err(serde::de::Error::custom)
    }
}

/// An event as the gateway stores it. `id` is unique per topic; `webhook-id` is this id.
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    pub id: String,
    pub topic: String,
    pub event_type: String,
    pub content_type: String,
    pub payload: Bytes,
    pub ordering_key: Option<String>,
    pub received_at: Timestamp,
    /// The tenant the event belongs to: it reaches only that tenant's endpoints (and the
    /// endpoints without a tenant). None: no tenant's endpoint receives it.
    pub tenant: Option<String>,
    /// The trace the event's attempts belong to; None for events stored before traces were.
    pub trace: Option<EventTrace>,
    /// Its channels (routing) and the Svix API's own fields.
    pub labels: EventLabels,
}

/// What an event carries beside its payload. `channels` route it (see [`channels_match`]);
/// `tags` and `event_id` are kept for the Svix API, which shows them on its messages, and
/// `expunged` says its payload was removed on request (Svix's `expunge_content`): it is
/// never sent again.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EventLabels {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channels: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// A Svix message's `eventId`, the app's own id of it (unique per application).
    #[serde(default, rename = "eventId", skip_serializing_if = "Option::is_none")]
    pub event_id: Option<String>,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub expunged: bool,
}

impl EventLabels {
    pub fn is_empty(&self) -> bool {
        self.channels.is_empty() && self.tags.is_empty() && self.event_id.is_none() && !self.expunged
    }

    /// As the stores keep them: a JSON object, or NULL when there are none.
    pub fn to_column(&self) -> Option<String> {
        (!self.is_empty()).then(|| serde_json::to_string(self).expect("labels serialize"))
    }

    /// Back from the column; a text that does not parse (never written by the gateway) reads
    /// as no labels rather than failing the read of the event.
    pub fn from_column(text: Option<&str>) -> EventLabels {
        text.and_then(|t| serde_json::from_str(t).ok())
            .unwrap_or_default()
    }
}

/// Svix's channel rule, as its server applies it: an endpoint without channels takes every
/// event; an endpoint with channels takes only the events that name at least one of them, so
/// never an event without channels.
pub fn channels_match(endpoint_channels: &[String], event_channels: &[String]) -> bool {
    endpoint_channels.is_empty() || event_channels.iter().any(|c| endpoint_channels.contains(c))
}

pub use opentelemetry::trace::{SpanId, TraceId};

/// Where an event sits in a distributed trace: its trace, and the span its attempts descend
/// from — the ingestion request's span, whose own parent is the app's span when the app sent a
/// `traceparent`. Stored with the event, so attempts made after a restart or on another node
/// stay in the trace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EventTrace {
    pub trace_id: TraceId,
    /// None when no request brought the event in (operator events): its attempts are the
    /// trace's root spans.
    pub span_id: Option<SpanId>,
}

/// A delivery's id: a number inside the store, `dlv_<n>` outside.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DeliveryId(pub i64);

impl fmt::Display for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "dlv_{}", self.0)
    }
}

impl fmt::Debug for DeliveryId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl FromStr for DeliveryId {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        s.strip_prefix("dlv_")
            .and_then(|n| n.parse::<i64>().ok())
            .filter(|n| *n > 0)
            .map(DeliveryId)
            .ok_or_else(|| UnknownName(s.to_owned()))
    }
}

impl Serialize for DeliveryId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// A delivery's place in its life. The names are part of the API contract (README "HTTP API").
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryStatus {
    /// Waiting for its next attempt (or its first).
    Pending,
    /// An attempt is running. Only ever seen while the gateway runs; a restart treats it as
    /// pending again.
    Delivering,
    Succeeded,
    /// The policy gave up, the endpoint was paused/disabled/removed, or the failure was permanent.
    Failed,
    /// Like failed, for an endpoint with `dead_letter: true`: kept for redrive.
    Dead,
}

impl DeliveryStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            DeliveryStatus::Pending => "pending",
            DeliveryStatus::Delivering => "delivering",
            DeliveryStatus::Succeeded => "succeeded",
            DeliveryStatus::Failed => "failed",
            DeliveryStatus::Dead => "dead",
        }
    }

    /// True once nothing more will happen to the delivery by itself.
    pub fn is_final(self) -> bool {
        matches!(
            self,
            DeliveryStatus::Succeeded | DeliveryStatus::Failed | DeliveryStatus::Dead
        )
    }
}

impl FromStr for DeliveryStatus {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "pending" => DeliveryStatus::Pending,
            "delivering" => DeliveryStatus::Delivering,
            "succeeded" => DeliveryStatus::Succeeded,
            "failed" => DeliveryStatus::Failed,
            "dead" => DeliveryStatus::Dead,
            _ => return Err(UnknownName(s.to_owned())),
        })
    }
}

/// Why an attempt (or a delivery without an attempt) failed. Names are API contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    Timeout,
    Connect,
    Tls,
    Dns,
    HttpStatus,
    Redirect,
    BlockedAddress,
    PluginError,
    /// The endpoint's outbound credentials could not be had: the OAuth2 token server refused
    /// or failed. The receiver was not contacted.
    Auth,
    /// A broker refused the message: a nack, a `basic.return`, an error reply, a refusing
    /// PUBACK, no stream for the subject. Retried like an HTTP 5xx.
    Rejected,
    EndpointPaused,
    EndpointRemoved,
    /// The event's payload was expunged on request (Svix's `expunge_content`): nothing is
    /// sent, and the delivery ends.
    PayloadExpunged,
}

impl ErrorKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::Timeout => "timeout",
            ErrorKind::Connect => "connect",
            ErrorKind::Tls => "tls",
            ErrorKind::Dns => "dns",
            ErrorKind::HttpStatus => "http_status",
            ErrorKind::Redirect => "redirect",
            ErrorKind::BlockedAddress => "blocked_address",
            ErrorKind::PluginError => "plugin_error",
            ErrorKind::Auth => "auth",
            ErrorKind::Rejected => "rejected",
            ErrorKind::EndpointPaused => "endpoint_paused",
            ErrorKind::EndpointRemoved => "endpoint_removed",
            ErrorKind::PayloadExpunged => "payload_expunged",
        }
    }
}

impl FromStr for ErrorKind {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "timeout" => ErrorKind::Timeout,
            "connect" => ErrorKind::Connect,
            "tls" => ErrorKind::Tls,
            "dns" => ErrorKind::Dns,
            "http_status" => ErrorKind::HttpStatus,
            "redirect" => ErrorKind::Redirect,
            "blocked_address" => ErrorKind::BlockedAddress,
            "plugin_error" => ErrorKind::PluginError,
            "auth" => ErrorKind::Auth,
            "rejected" => ErrorKind::Rejected,
            "endpoint_paused" => ErrorKind::EndpointPaused,
            "endpoint_removed" => ErrorKind::EndpointRemoved,
            "payload_expunged" => ErrorKind::PayloadExpunged,
            _ => return Err(UnknownName(s.to_owned())),
        })
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the receiver asked for in `Retry-After`, already turned into an absolute time.
pub type RetryAfter = Timestamp;

/// The result of one attempt, as the policy and health machine see it.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// An HTTP 2xx within the timeout (`status`), or a broker that took the message (no
    /// status).
    Delivered { status: Option<u16> },
    /// Anything else. `status` is set for `HttpStatus` and `Redirect`; `retry_after` only
    /// when a 429 or 5xx carried a parseable `Retry-After`.
    Failed {
        kind: ErrorKind,
        status: Option<u16>,
        retry_after: Option<RetryAfter>,
        detail: String,
    },
}

impl Outcome {
    pub fn is_success(&self) -> bool {
        matches!(self, Outcome::Delivered { .. })
    }

    pub fn status_code(&self) -> Option<u16> {
        match self {
            Outcome::Delivered { status } => *status,
            Outcome::Failed { status, .. } => *status,
        }
    }

    pub fn error_kind(&self) -> Option<ErrorKind> {
        match self {
            Outcome::Delivered { .. } => None,
            Outcome::Failed { kind, .. } => Some(*kind),
        }
    }

    /// A 410 Gone: the receiver says it wants no more events.
    pub fn is_gone(&self) -> bool {
        self.status_code() == Some(410) && !self.is_success()
    }
}

/// One recorded attempt of a delivery.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    /// 1 for the first attempt (of the current round: redeliver starts a fresh counter).
    pub n: u32,
    pub started_at: Timestamp,
    pub duration_ms: u64,
    pub status_code: Option<u16>,
    pub error_kind: Option<ErrorKind>,
    pub error: Option<String>,
    pub exchange: Exchange,
    /// The trace of the attempt's span (its `traceparent`); None for attempts recorded before
    /// traces were.
    pub trace_id: Option<TraceId>,
}

/// What one attempt sent and got back, for the delivery log. Built by the delivery module with
/// every credential and signature value already masked ([`MASKED`]).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Exchange {
    /// The request headers as sent, in order; empty when nothing was sent.
    pub request_headers: Vec<(String, String)>,
    /// The response headers; empty when no response came.
    pub response_headers: Vec<(String, String)>,
    /// The start of the response body (lossy UTF-8); None when no response came.
    pub response_body: Option<String>,
}

/// What a masked header value reads as in an attempt record.
pub const MASKED: &str = "[masked]";

impl Attempt {
    pub fn from_outcome(
        n: u32,
        started_at: Timestamp,
        duration_ms: u64,
        outcome: &Outcome,
        exchange: Exchange,
        trace_id: TraceId,
    ) -> Self {
        let error = match outcome {
            Outcome::Delivered { .. } => None,
            Outcome::Failed { detail, .. } => Some(detail.clone()),
        };
        Attempt {
            n,
            started_at,
            duration_ms,
            status_code: outcome.status_code(),
            error_kind: outcome.error_kind(),
            error,
            exchange,
            trace_id: Some(trace_id),
        }
    }
}

/// An endpoint's health state (README "Endpoint health"). Names are API contract.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum EndpointState {
    #[default]
    Active,
    Degraded,
    Paused,
    Disabled,
}

impl EndpointState {
    pub fn as_str(self) -> &'static str {
        match self {
            EndpointState::Active => "active",
            EndpointState::Degraded => "degraded",
            EndpointState::Paused => "paused",
            EndpointState::Disabled => "disabled",
        }
    }

    /// Paused and disabled endpoints get no deliveries at all.
    pub fn receives_events(self) -> bool {
        matches!(self, EndpointState::Active | EndpointState::Degraded)
    }
}

impl FromStr for EndpointState {
    type Err = UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s {
            "active" => EndpointState::Active,
            "degraded" => EndpointState::Degraded,
            "paused" => EndpointState::Paused,
            "disabled" => EndpointState::Disabled,
            _ => return Err(UnknownName(s.to_owned())),
        })
    }
}

impl fmt::Display for EndpointState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An endpoint's use of a plugin, as the YAML says it:
/// `transform: { plugin: cloudevents, config: { source: shop } }`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct PluginBinding {
    /// The plugin's name: its file name without `.wasm`, with `_` folded to `-`.
    pub plugin: String,
    /// The plugin-specific config. Scalars are kept as their text (`500`, `true`, `shop`);
    /// lists and maps as their JSON text, so a plugin can parse what it needs.
    pub config: std::collections::BTreeMap<String, String>,
}

impl PluginBinding {
    /// Plugin names compare with `-` and `_` counting as the same (README "Plugins"). A name
    /// that is already normal (every binding from the config is) comes back borrowed: calls
    /// look their plugin up by it.
    pub fn normalize_name(name: &str) -> std::borrow::Cow<'_, str> {
        let name = name.trim_end_matches(".wasm");
        match name.contains('_') {
            true => std::borrow::Cow::Owned(name.replace('_', "-")),
            false => std::borrow::Cow::Borrowed(name),
        }
    }
}

/// A name that is not one of an enum's contract names.
#[derive(Debug, Clone, thiserror::Error)]
#[error("unknown name `{0}`")]
pub struct UnknownName(pub String);

/// What every console token starts with, and so what no API key may start with: the API
/// tells the two kinds of bearer apart by it.
pub const CONSOLE_TOKEN_PREFIX: &str = "hgc_";

/// A secret string (endpoint signing secret, API key): never printed, never serialized.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }

    /// The secret itself. Call sites are few and deliberate: signing and API-key comparison.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

/// serde helpers for keys written as text that YAML may read as a number (`timeout: 10`,
/// `max_body: 1000`): the number is kept as its text, so that the key's own check says what is
/// wrong with it (`10` has no unit) instead of serde naming a type.
pub mod text_or_number {
    use std::fmt;

    use serde::de::{self, Deserialize, Deserializer, Visitor};

    /// One such value, for a key of its own type: `Option<Quantity>` reads as `Option<String>`
    /// does (`as_deref`), and its schema is a string's.
    #[derive(Debug, schemars::JsonSchema)]
    #[schemars(transparent)]
    pub struct Quantity(pub String);

    impl std::ops::Deref for Quantity {
        type Target = str;
        fn deref(&self) -> &str {
            &self.0
        }
    }

    impl<'de> Deserialize<'de> for Quantity {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct Reader;
            impl Visitor<'_> for Reader {
                type Value = Quantity;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("text such as 30s or 256KiB")
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Quantity, E> {
                    Ok(Quantity(v.to_owned()))
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Quantity, E> {
                    Ok(Quantity(v.to_string()))
                }
                fn visit_i64<E: de::Error>(self, v: i64) -> Result<Quantity, E> {
                    Ok(Quantity(v.to_string()))
                }
                fn visit_f64<E: de::Error>(self, v: f64) -> Result<Quantity, E> {
                    Ok(Quantity(v.to_string()))
                }
            }
            d.deserialize_any(Reader)
        }
    }

    /// For an `Option<String>` key.
    pub fn option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
        Ok(Option::<Quantity>::deserialize(d)?.map(|t| t.0))
    }

    /// For an `Option<Vec<String>>` key.
    pub fn option_list<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
        Ok(Option::<Vec<Quantity>>::deserialize(d)?.map(|list| list.into_iter().map(|t| t.0).collect()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamp_round_trips_through_rfc3339() {
        let t = Timestamp::from_millis(1_614_265_330_123);
        assert_eq!(t.to_rfc3339(), "2021-02-25T15:02:10.123Z");
        assert_eq!(Timestamp::parse_rfc3339(&t.to_rfc3339()).unwrap(), t);
        assert_eq!(
            Timestamp::parse_rfc3339("2021-02-25T16:02:10.123+01:00").unwrap(),
            t
        );
    }

    #[test]
    fn timestamp_arithmetic_saturates_and_never_goes_negative_in_since() {
        let t = Timestamp::from_millis(10_000);
        assert_eq!(t.plus(Duration::from_secs(5)).as_millis(), 15_000);
        assert_eq!(t.since(t.plus(Duration::from_secs(1))), Duration::ZERO);
        assert_eq!(
            Timestamp::from_millis(i64::MAX)
                .plus(Duration::from_secs(1))
                .as_millis(),
            i64::MAX
        );
    }

    #[test]
    fn contract_names_parse_back() {
        for s in ["pending", "delivering", "succeeded", "failed", "dead"] {
            assert_eq!(s.parse::<DeliveryStatus>().unwrap().as_str(), s);
        }
        for s in ["active", "degraded", "paused", "disabled"] {
            assert_eq!(s.parse::<EndpointState>().unwrap().as_str(), s);
        }
        for s in [
            "timeout",
            "connect",
            "tls",
            "dns",
            "http_status",
            "redirect",
            "blocked_address",
            "plugin_error",
            "rejected",
            "endpoint_paused",
            "endpoint_removed",
            "payload_expunged",
        ] {
            assert_eq!(s.parse::<ErrorKind>().unwrap().as_str(), s);
        }
    }

    #[test]
    fn delivery_ids_print_and_parse_as_dlv_n() {
        assert_eq!(DeliveryId(42).to_string(), "dlv_42");
        assert_eq!("dlv_42".parse::<DeliveryId>().unwrap(), DeliveryId(42));
        assert!("42".parse::<DeliveryId>().is_err());
        assert!("dlv_-1".parse::<DeliveryId>().is_err());
        assert!("dlv_x".parse::<DeliveryId>().is_err());
    }

    #[test]
    fn secrets_never_show_in_debug_output() {
        let s = Secret::new("whsec_abc");
        assert_eq!(format!("{s:?}"), "Secret(***)");
    }
}
