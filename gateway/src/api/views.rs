//! The JSON shapes of the API (README "HTTP API"). Times are RFC 3339 UTC strings.

use base64::Engine;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::config::EndpointConfig;
use crate::delivery::OutboundAuth;
use crate::delivery::signing::{SignatureScheme, ed25519_public_key};
use crate::health::EndpointHealth;
use crate::model::{DeliveryStatus, EndpointState, Event, Timestamp};
use crate::recovery::Replayed;
use crate::store::{AttemptRow, DeliveryRow, HistoryEntry};

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct DeliveryView {
    /// `dlv_<n>`
    pub(crate) id: String,
    pub(crate) event_id: String,
    pub(crate) topic: String,
    pub(crate) event_type: String,
    pub(crate) endpoint: String,
    /// The endpoint's tenant; null for an endpoint without one.
    #[serde(default)]
    pub(crate) tenant: Option<String>,
    /// pending, delivering, succeeded, failed or dead.
    #[schema(value_type = String, example = "pending")]
    pub(crate) status: DeliveryStatus,
    /// Attempts of the current round (a redeliver starts a new round).
    pub(crate) attempt_count: u32,
    pub(crate) round: u32,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) next_attempt_at: Option<Timestamp>,
    pub(crate) last_error: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub(crate) created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub(crate) updated_at: Timestamp,
}

impl DeliveryView {
    /// `in_flight`: an attempt is running right now, which the store does not record.
    pub(crate) fn new(row: DeliveryRow, in_flight: bool) -> Self {
        let status = if in_flight && row.status == DeliveryStatus::Pending {
            DeliveryStatus::Delivering
        } else {
            row.status
        };
        DeliveryView {
            id: row.id.to_string(),
            event_id: row.event_id,
            topic: row.topic,
            event_type: row.event_type,
            endpoint: row.endpoint,
            tenant: row.tenant,
            status,
            attempt_count: row.attempt_count,
            round: row.round,
            next_attempt_at: row.next_attempt_at,
            last_error: row.last_error,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct AttemptView {
    /// 1 for the first attempt of a round.
    pub(crate) n: u32,
    pub(crate) round: u32,
    #[schema(value_type = String, format = DateTime)]
    pub(crate) started_at: Timestamp,
    pub(crate) duration_ms: u64,
    /// The HTTP status; null for a broker, whose answer is in `response_headers` and
    /// `response_body`.
    pub(crate) status_code: Option<u16>,
    /// timeout, connect, tls, dns, http_status, redirect, blocked_address, plugin_error,
    /// rejected (a broker refused the message), …
    pub(crate) error_kind: Option<String>,
    pub(crate) error: Option<String>,
    /// Plugins that ran, with their time.
    pub(crate) plugins: Option<String>,
    /// The request headers sent, in order; credentials and signatures read `[masked]`.
    pub(crate) request_headers: Vec<HeaderView>,
    /// The response headers; for a broker, its answer as fields (`subject`, `stream`, `seq`;
    /// `exchange`, `routing_key`; `stream`, `entry_id`; `topic`, `puback`). Empty when no
    /// response came.
    pub(crate) response_headers: Vec<HeaderView>,
    /// The first 4 KiB of the response body (invalid UTF-8 replaced); for a broker, its answer
    /// in one line. Null when no response came.
    pub(crate) response_body: Option<String>,
    /// The trace of the attempt's span, as in the `traceparent` it sent (32 hex digits); null
    /// for attempts recorded before traces were.
    pub(crate) trace_id: Option<String>,
}

/// One header line of an attempt.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct HeaderView {
    pub(crate) name: String,
    pub(crate) value: String,
}

fn header_views(headers: Vec<(String, String)>) -> Vec<HeaderView> {
    headers
        .into_iter()
        .map(|(name, value)| HeaderView { name, value })
        .collect()
}

impl From<AttemptRow> for AttemptView {
    fn from(row: AttemptRow) -> Self {
        AttemptView {
            n: row.attempt.n,
            round: row.round,
            started_at: row.attempt.started_at,
            duration_ms: row.attempt.duration_ms,
            status_code: row.attempt.status_code,
            error_kind: row.attempt.error_kind.map(|k| k.as_str().to_owned()),
            error: row.attempt.error,
            plugins: row.plugin_note,
            request_headers: header_views(row.attempt.exchange.request_headers),
            response_headers: header_views(row.attempt.exchange.response_headers),
            response_body: row.attempt.exchange.response_body,
            trace_id: row.attempt.trace_id.map(|t| t.to_string()),
        }
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct DeliveryDetailView {
    #[serde(flatten)]
    pub(crate) delivery: DeliveryView,
    pub(crate) attempts: Vec<AttemptView>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct DeliveryList {
    pub(crate) deliveries: Vec<DeliveryView>,
    /// Pass as `cursor` for the next (older) page; null on the last page.
    pub(crate) next_cursor: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct EventView {
    pub(crate) id: String,
    pub(crate) topic: String,
    #[serde(rename = "type")]
    pub(crate) event_type: String,
    pub(crate) content_type: String,
    pub(crate) ordering_key: Option<String>,
    /// The tenant the event belongs to.
    pub(crate) tenant: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub(crate) received_at: Timestamp,
    /// The payload: JSON as JSON, other UTF-8 text as a string; binary only in `payload_base64`.
    #[schema(value_type = Object)]
    pub(crate) payload: Option<serde_json::Value>,
    pub(crate) payload_base64: Option<String>,
    /// The trace the event's attempts belong to (32 hex digits): the app's when it sent a
    /// `traceparent`; null for events stored before traces were.
    #[serde(default)]
    pub(crate) trace_id: Option<String>,
    /// Its channels (none: it reaches the endpoints without channels only).
    #[serde(default)]
    pub(crate) channels: Vec<String>,
    /// A Svix message's tags and `eventId` (docs/svix.md).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tags: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) svix_event_id: Option<String>,
    pub(crate) deliveries: Vec<DeliveryView>,
}

impl EventView {
    pub(crate) fn new(event: Event, deliveries: Vec<DeliveryView>) -> Self {
        let json = event.content_type.starts_with("application/json") || event.content_type.contains("+json");
        let (payload, payload_base64) = match (json, std::str::from_utf8(&event.payload)) {
            (true, Ok(text)) => match serde_json::from_str(text) {
                Ok(v) => (Some(v), None),
                Err(_) => (Some(serde_json::Value::String(text.to_owned())), None),
            },
            (false, Ok(text)) => (Some(serde_json::Value::String(text.to_owned())), None),
            (_, Err(_)) => (
                None,
                Some(base64::engine::general_purpose::STANDARD.encode(&event.payload)),
            ),
        };
        EventView {
            id: event.id,
            topic: event.topic,
            event_type: event.event_type,
            content_type: event.content_type,
            ordering_key: event.ordering_key,
            tenant: event.tenant,
            received_at: event.received_at,
            payload,
            payload_base64,
            trace_id: event.trace.map(|t| t.trace_id.to_string()),
            channels: event.labels.channels,
            tags: event.labels.tags,
            svix_event_id: event.labels.event_id,
            deliveries,
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct HistoryView {
    #[schema(value_type = String, example = "degraded")]
    pub(crate) state: EndpointState,
    #[schema(value_type = String, format = DateTime)]
    pub(crate) at: Timestamp,
    pub(crate) reason: String,
}

impl From<HistoryEntry> for HistoryView {
    fn from(h: HistoryEntry) -> Self {
        HistoryView {
            state: h.state,
            at: h.at,
            reason: h.reason,
        }
    }
}

/// An endpoint as the API shows it: never its secret.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct EndpointView {
    pub(crate) name: String,
    /// `config` (declared in the config file: read-only here) or `api` (created through the
    /// API).
    #[serde(default)]
    pub(crate) source: String,
    /// The tenant whose events (only) it receives; null: every tenant's.
    #[serde(default)]
    pub(crate) tenant: Option<String>,
    #[serde(default)]
    pub(crate) description: Option<String>,
    /// The URL, with any user:password part masked.
    pub(crate) url: String,
    /// The transport its URL's scheme chooses: http, nats, amqp, redis or mqtt.
    #[serde(default = "http_kind")]
    pub(crate) kind: String,
    /// What a broker puts its messages into: `subject orders.created`, `exchange shop,
    /// routing key orders`, `stream orders`, `topic shop/orders`; null for HTTP.
    #[serde(default)]
    pub(crate) target: Option<String>,
    pub(crate) topics: Vec<String>,
    pub(crate) types: Vec<String>,
    /// Its own retry policy; null: each topic's (else `standard`).
    pub(crate) policy: Option<String>,
    /// The policy the deliveries of each of its topics follow: `policy`, else the topic's,
    /// else `standard`.
    #[serde(default)]
    pub(crate) topic_policies: std::collections::BTreeMap<String, String>,
    /// active, degraded, paused or disabled.
    #[schema(value_type = String, example = "active")]
    pub(crate) state: EndpointState,
    pub(crate) consecutive_failures: u32,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) failing_since: Option<Timestamp>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) last_success_at: Option<Timestamp>,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) state_changed_at: Option<Timestamp>,
    /// How many secrets sign (2 while rotating); the secrets themselves are never shown.
    pub(crate) signing_secrets: usize,
    /// While a rotated-out secret still signs: until when.
    #[serde(default)]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) previous_secret_until: Option<Timestamp>,
    /// `hmac` (Standard Webhooks `v1`) or `ed25519` (`v1a`).
    #[serde(default)]
    pub(crate) signature: String,
    /// With `ed25519`: the `whpk_` public key of each signing key, in order, for receivers to
    /// verify with.
    #[serde(default)]
    pub(crate) public_keys: Vec<String>,
    /// The kind of outbound credentials (`bearer`, `basic`, `oauth2`); never the credentials.
    #[serde(default)]
    pub(crate) auth: Option<String>,
    /// Whether the endpoint presents a client certificate (mutual TLS).
    #[serde(default)]
    pub(crate) client_certificate: bool,
    /// The egress proxy of the endpoint's own, `host:port`.
    #[serde(default)]
    pub(crate) proxy: Option<String>,
    pub(crate) transform: Option<String>,
    pub(crate) signer: Option<String>,
    pub(crate) backoff: Option<String>,
    pub(crate) ordered: bool,
    /// An ordered endpoint's `skip` or `hold`; null for an endpoint that is not ordered.
    #[serde(default)]
    pub(crate) on_final_failure: Option<String>,
    pub(crate) dead_letter: bool,
    pub(crate) max_per_second: Option<f64>,
    /// The channels it listens to; empty: every event, with channels or without.
    #[serde(default)]
    pub(crate) channels: Vec<String>,
    /// Switched off by its owner: it receives no events.
    #[serde(default)]
    pub(crate) disabled: bool,
    #[serde(default)]
    pub(crate) metadata: std::collections::BTreeMap<String, String>,
    /// Its content filter as written; null: every event of its topics (README "Content
    /// filters").
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub(crate) filter: Option<serde_json::Value>,
    /// Its state changes, newest 100; left out of the pages of `GET /v1/endpoints` (read one
    /// endpoint for them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) history: Option<Vec<HistoryView>>,
    /// What keeps the endpoint's deliveries from working as configured, e.g. `endpoint billing
    /// binds transform plugin "cloudevent" which is not loaded`. Empty when all is well.
    pub(crate) problems: Vec<String>,
}

fn http_kind() -> String {
    "http".to_owned()
}

impl EndpointView {
    pub(crate) fn new(
        ep: &EndpointConfig,
        topic_policies: std::collections::BTreeMap<String, String>,
        health: EndpointHealth,
        history: Option<Vec<HistoryEntry>>,
        problems: Vec<String>,
        now: Timestamp,
    ) -> Self {
        let retiring_until = ep
            .retiring
            .iter()
            .map(|(_, until)| *until)
            .filter(|until| now < *until)
            .max();
        EndpointView {
            name: ep.name.to_string(),
            source: ep.source.as_str().to_owned(),
            tenant: ep.tenant.as_deref().map(str::to_owned),
            description: ep.description.clone(),
            url: ep.destination.masked(),
            kind: ep.destination.kind().to_owned(),
            target: ep.destination.target(),
            topics: ep.topics.clone(),
            types: ep.types.clone(),
            policy: ep.policy.clone(),
            topic_policies,
            state: health.state,
            consecutive_failures: health.consecutive_failures,
            failing_since: health.failing_since,
            last_success_at: health.last_success_at,
            state_changed_at: health.changed_at,
            signing_secrets: ep.signing_secrets(now).len(),
            previous_secret_until: retiring_until,
            signature: match ep.signature {
                SignatureScheme::Hmac => "hmac",
                SignatureScheme::Ed25519 => "ed25519",
            }
            .to_owned(),
            public_keys: public_keys(ep),
            auth: ep.auth().map(|auth| {
                match auth {
                    OutboundAuth::Bearer(_) => "bearer",
                    OutboundAuth::Basic { .. } => "basic",
                    OutboundAuth::OAuth2(_) => "oauth2",
                }
                .to_owned()
            }),
            client_certificate: ep.route().is_some_and(|route| route.identity.is_some()),
            proxy: ep
                .route()
                .and_then(|route| route.proxy.as_ref())
                .map(ToString::to_string),
            transform: ep.transform.as_ref().map(|b| b.plugin.clone()),
            signer: ep.signer.as_ref().map(|b| b.plugin.clone()),
            backoff: ep.backoff.as_ref().map(|b| b.plugin.clone()),
            ordered: ep.ordered,
            on_final_failure: ep.ordered.then(|| ep.on_final_failure.as_str().to_owned()),
            dead_letter: ep.dead_letter,
            max_per_second: ep.max_per_second,
            channels: ep.channels.clone(),
            disabled: ep.disabled,
            metadata: ep.metadata.clone(),
            filter: ep.filter.as_ref().map(|f| f.source().clone()),
            history: history.map(|h| h.into_iter().map(HistoryView::from).collect()),
            problems,
        }
    }
}

/// The `whpk_` keys of an Ed25519 endpoint (none for HMAC: its secrets are never shown).
fn public_keys(ep: &EndpointConfig) -> Vec<String> {
    if ep.signature != SignatureScheme::Ed25519 {
        return Vec::new();
    }
    ep.secrets
        .iter()
        .filter_map(|secret| ed25519_public_key(secret).ok())
        .collect()
}

/// An endpoint as a create, change or rotation left it.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct SavedEndpoint {
    #[serde(flatten)]
    pub(crate) endpoint: EndpointView,
    /// The new signing secret (`whsec_…`, or a `whsk_…` key with `signature: ed25519`):
    /// shown once, when it was made; null otherwise.
    pub(crate) secret: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct EndpointList {
    pub(crate) endpoints: Vec<EndpointView>,
    /// The `cursor` of the next page; null on the last.
    pub(crate) next_cursor: Option<String>,
}

/// How many deliveries of an id range are in each status (`GET /v1/deliveries/summary`).
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub(crate) struct Summary {
    pub(crate) pending: u64,
    pub(crate) succeeded: u64,
    pub(crate) failed: u64,
    pub(crate) dead: u64,
}

/// What a replay (or a re-enable's `replay_since`) queued.
#[derive(Debug, Serialize, Deserialize, ToSchema, Clone)]
pub(crate) struct ReplayOutcome {
    pub(crate) endpoint: String,
    #[schema(value_type = String, format = DateTime)]
    pub(crate) since: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub(crate) until: Timestamp,
    /// Events queued again for the endpoint.
    pub(crate) queued: usize,
    /// More than 10 000 events matched: only the oldest were queued, up to a millisecond
    /// boundary (so possibly a few fewer than 10 000).
    pub(crate) truncated: bool,
    /// When truncated: pass this as `since` to continue. Every matching event before it was
    /// queued and none from it on, so continuing neither repeats nor skips an event.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) continue_from: Option<Timestamp>,
    /// The id range of the new deliveries, to follow them (`GET /v1/deliveries/summary`).
    pub(crate) first_delivery: Option<String>,
    pub(crate) last_delivery: Option<String>,
}

impl From<&Replayed> for ReplayOutcome {
    fn from(r: &Replayed) -> Self {
        ReplayOutcome {
            endpoint: r.endpoint.clone(),
            since: r.since,
            until: r.until,
            queued: r.queued,
            truncated: r.truncated(),
            continue_from: r.continue_from,
            first_delivery: r.first_delivery.map(|d| d.to_string()),
            last_delivery: r.last_delivery.map(|d| d.to_string()),
        }
    }
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct Reenabled {
    pub(crate) endpoint: EndpointView,
    /// Events queued again by `replay_since` (0 without it).
    pub(crate) replayed: usize,
    pub(crate) replay: Option<ReplayOutcome>,
}

/// What the endpoint test call did: the one attempt's outcome.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct TestOutcome {
    /// Whether the endpoint answered 2xx in time, or the broker took the message.
    pub(crate) delivered: bool,
    pub(crate) event_id: String,
    /// The endpoint's transport: http, nats, amqp, redis or mqtt.
    pub(crate) kind: String,
    /// Where a broker was to put the message (`subject orders.created`, …); null for HTTP.
    pub(crate) target: Option<String>,
    /// What the broker answered (`PubAck: stream ORDERS, sequence 12`, a refusal); null for
    /// HTTP, whose answer is `status_code`.
    pub(crate) answer: Option<String>,
    pub(crate) status_code: Option<u16>,
    pub(crate) error_kind: Option<String>,
    pub(crate) error: Option<String>,
    pub(crate) duration_ms: u64,
    /// Plugins that ran, with their time.
    pub(crate) plugins: Option<String>,
    /// Set when a transform plugin dropped the event.
    pub(crate) dropped: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct Redriven {
    /// Dead deliveries queued again.
    pub(crate) queued: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_payloads_show_as_json_text_or_base64() {
        let mut event = Event {
            id: "e".into(),
            topic: "t".into(),
            event_type: "x".into(),
            content_type: "application/json".into(),
            payload: bytes::Bytes::from_static(br#"{"a":1}"#),
            ordering_key: None,
            received_at: Timestamp::EPOCH,
            tenant: None,
            trace: None,
            labels: Default::default(),
        };
        assert_eq!(EventView::new(event.clone(), vec![]).payload.unwrap()["a"], 1);
        event.content_type = "text/plain".into();
        event.payload = bytes::Bytes::from_static(b"hello");
        assert_eq!(EventView::new(event.clone(), vec![]).payload.unwrap(), "hello");
        event.payload = bytes::Bytes::from_static(&[0xff, 0x00]);
        let view = EventView::new(event, vec![]);
        assert!(view.payload.is_none());
        assert_eq!(view.payload_base64.as_deref(), Some("/wA="));
    }
}

/// `GET /v1/cluster`: the nodes sharing this gateway's database (one on SQLite).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ClusterNodesView {
    pub(crate) nodes: Vec<NodeView>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct NodeView {
    pub(crate) id: String,
    /// Where the node's API listens.
    pub(crate) address: String,
    /// `alive` (seen within `cluster.lease`), `lapsed` (not seen for longer: killed, frozen or
    /// cut off; the others take its endpoints over) or `left` (it stopped cleanly). A node not
    /// seen for an hour is no longer listed.
    #[serde(default)]
    #[schema(example = "alive")]
    pub(crate) state: String,
    #[schema(value_type = String, format = DateTime)]
    pub(crate) started_at: Timestamp,
    /// When the node last renewed its leases (the database's clock); for a node that left,
    /// when it left.
    #[schema(value_type = String, format = DateTime)]
    pub(crate) last_seen_at: Timestamp,
    /// Endpoints whose deliveries the node holds the lease of.
    pub(crate) leases: u32,
}

impl NodeView {
    pub(crate) fn new(n: crate::store::NodeRow, state: crate::cluster::NodeState) -> Self {
        NodeView {
            id: n.id,
            address: n.address,
            state: state.as_str().to_owned(),
            started_at: n.started_at,
            last_seen_at: n.last_seen_at,
            leases: n.leases,
        }
    }
}

/// An event type of the catalog.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct EventTypeView {
    pub(crate) name: String,
    pub(crate) description: String,
    /// Hidden from lists unless asked for; events of it are still accepted.
    pub(crate) archived: bool,
    pub(crate) deprecated: bool,
    /// JSON Schemas of the payload by version (`{"1": {...}}`); an event's payload must match
    /// the highest version.
    #[schema(value_type = Option<Object>)]
    pub(crate) schemas: Option<serde_json::Value>,
    pub(crate) feature_flags: Vec<String>,
    pub(crate) group_name: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    pub(crate) created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    pub(crate) updated_at: Timestamp,
}

impl From<crate::store::EventTypeRow> for EventTypeView {
    fn from(row: crate::store::EventTypeRow) -> Self {
        EventTypeView {
            schemas: row.schemas.as_deref().and_then(|s| serde_json::from_str(s).ok()),
            feature_flags: row
                .feature_flags
                .as_deref()
                .and_then(|s| serde_json::from_str(s).ok())
                .unwrap_or_default(),
            name: row.name,
            description: row.description,
            archived: row.archived,
            deprecated: row.deprecated,
            group_name: row.group_name,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// How a content filter judges a sample event and the endpoint's newest events
/// (`POST /v1/endpoints/{name}/filter/test`).
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct FilterTestOutcome {
    /// The filter tried: the candidate, else the endpoint's; null: none, every event passes.
    #[schema(value_type = Option<Object>)]
    pub(crate) filter: Option<serde_json::Value>,
    /// Whether the sample event passes; null without a sample.
    pub(crate) matched: Option<bool>,
    /// Why: the condition that refused the sample, or those that let it through.
    pub(crate) reason: Option<String>,
    /// With `recent`: how many of the endpoint's newest events it would let through.
    pub(crate) recent: Option<RecentOutcome>,
}

/// A filter tried on the endpoint's newest events.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct RecentOutcome {
    /// How many were tried (fewer than asked when the endpoint has had fewer).
    pub(crate) events: usize,
    /// How many of them it lets through.
    pub(crate) matched: usize,
}
