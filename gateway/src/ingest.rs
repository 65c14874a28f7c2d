//! Taking events in: fan-out to the subscribed endpoints, one durable commit, then straight to
//! the scheduler. Used by the HTTP API and by the scheduler's operator events.
//!
//! Ingestion is split in two so that an idempotent request can store its exact answer in the
//! same commit as its events: [`Ingestor::prepare`] decides ids and fan-out (and so the answer),
//! [`Ingestor::commit`] writes and schedules.

use std::cell::OnceCell;
use std::sync::Arc;

use arc_swap::ArcSwap;
use bytes::Bytes;
use metrics::Counter;

use crate::clock::Clock;
use crate::commit::{Committer, ToSchedule};
use crate::config::Config;
use crate::endpoints::Endpoints;
use crate::filter;
use crate::health::EndpointHealth;
use crate::model::{DeliveryId, Event, EventLabels, EventTrace, Timestamp};
use crate::scheduler::SchedulerHandle;
use crate::store::{
    IdempotencyRecord, IngestBatch, IngestItem, IngestOutcome, OrderingKeyRow, Store, StoreError, Target,
};
use crate::telemetry::Metrics;

/// An event as an app hands it in.
#[derive(Debug, Clone)]
pub struct NewEvent {
    /// The app's own id (unique per topic), or None for a generated `evt_<ulid>`.
    pub id: Option<String>,
    pub topic: String,
    pub event_type: String,
    pub content_type: String,
    pub payload: Bytes,
    pub ordering_key: Option<String>,
    /// The tenant whose endpoints (and the endpoints without a tenant) receive it.
    pub tenant: Option<String>,
    /// Its channels, and a Svix message's tags and eventId.
    pub labels: EventLabels,
}

/// How a commit went.
#[derive(Debug, Clone)]
pub enum Committed {
    /// Written and handed to the scheduler.
    Fresh,
    /// The idempotency key was used before: nothing was written; this is the first answer.
    Earlier(IdempotencyRecord),
}

/// Events with their ids and fan-out decided, not yet written.
#[derive(Debug, Clone)]
pub struct Prepared {
    pub items: Vec<IngestItem>,
    pub now: Timestamp,
}

impl Prepared {
    pub fn ids(&self) -> Vec<String> {
        self.items.iter().map(|i| i.event.id.clone()).collect()
    }

    pub fn delivery_count(&self) -> usize {
        self.items.iter().map(|i| i.endpoints.len()).sum()
    }
}

/// The operator event of an ordered endpoint's key held behind a head that finally failed.
pub const KEY_HELD: &str = "hookgate.ordering.key_held";
/// The operator event of an ordered endpoint's key whose events have waited behind a failing
/// head for longer than `health.key_blocked_after`.
pub const KEY_BLOCKED: &str = "hookgate.ordering.key_blocked";

#[derive(Clone)]
pub struct Ingestor {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: Arc<ArcSwap<Config>>,
    pub(crate) endpoints: Endpoints,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) scheduler: SchedulerHandle,
    pub(crate) committer: Committer,
    pub(crate) metrics: Metrics,
}

/// `evt_` and a new ULID in lowercase, in one allocation.
pub fn new_event_id() -> String {
    let mut ulid = [0u8; ulid::ULID_LEN];
    let ulid = ulid::Ulid::new().array_to_str(&mut ulid);
    ulid.make_ascii_lowercase();
    let mut id = String::with_capacity(EVENT_ID_PREFIX.len() + ulid::ULID_LEN);
    id.push_str(EVENT_ID_PREFIX);
    id.push_str(ulid);
    id
}

const EVENT_ID_PREFIX: &str = "evt_";

impl Ingestor {
    /// Gives each event its id, receipt time and trace, and picks its endpoints: subscribed to
    /// the topic, matching the type filter, of the event's tenant or of none, neither paused
    /// nor disabled, and passed by their content filter. `trace` is the ingestion request's
    /// span; without one (operator events) each event starts a trace.
    pub fn prepare(&self, events: Vec<NewEvent>, trace: Option<EventTrace>) -> Prepared {
        let now = self.clock.now();
        let items = events
            .into_iter()
            .map(|e| {
                let event = Event {
                    id: e.id.unwrap_or_else(new_event_id),
                    topic: e.topic,
                    event_type: e.event_type,
                    content_type: e.content_type,
                    payload: e.payload,
                    ordering_key: e.ordering_key,
                    received_at: now,
                    tenant: e.tenant,
                    trace: Some(trace.unwrap_or_else(|| EventTrace {
                        trace_id: crate::traces::new_trace_id(),
                        span_id: None,
                    })),
                    labels: e.labels,
                };
                let endpoints = self.fan_out(&event);
                IngestItem {
                    event: Arc::new(event),
                    endpoints,
                }
            })
            .collect();
        Prepared { items, now }
    }

    /// The endpoints an event goes to. The view that content filters read is built at most
    /// once per event, and only when an endpoint it reaches has a filter: an event none of
    /// whose endpoints filters is never parsed.
    fn fan_out(&self, event: &Event) -> Vec<Target> {
        let view = OnceCell::new();
        self.endpoints
            .subscribers(
                &event.topic,
                &event.event_type,
                event.tenant.as_deref(),
                &event.labels.channels,
            )
            .into_iter()
            .filter(|ep| self.scheduler.receives_events(&ep.name))
            .filter(|ep| {
                ep.filter()
                    .is_none_or(|f| f.matches(view.get_or_init(|| filter::input(event))))
            })
            .map(|ep| ep.target())
            .collect()
    }

    /// Writes the events, their deliveries and the idempotency record in one durable commit,
    /// then hands the deliveries to the scheduler (through the [`Committer`], so a client that
    /// hangs up cannot separate the two).
    pub async fn commit(
        &self,
        prepared: Prepared,
        idempotency: Option<IdempotencyRecord>,
    ) -> Result<Committed, StoreError> {
        self.committer
            .commit(self.clone().write(prepared, idempotency))
            .await
    }

    async fn write(
        self,
        prepared: Prepared,
        idempotency: Option<IdempotencyRecord>,
    ) -> Result<(Committed, ToSchedule), StoreError> {
        // One count per topic and commit, not one metric update per event.
        let per_topic: Vec<(Counter, u64)> = {
            let mut per_topic: Vec<(&str, u64)> = Vec::new();
            for item in &prepared.items {
                match per_topic.iter_mut().find(|(t, _)| *t == item.event.topic) {
                    Some((_, n)) => *n += 1,
                    None => per_topic.push((&item.event.topic, 1)),
                }
            }
            let counter = |(topic, n)| (self.metrics.events_ingested(topic), n);
            per_topic.into_iter().map(counter).collect()
        };
        let batch = IngestBatch {
            items: prepared.items,
            idempotency,
            now: prepared.now,
        };
        match self.store.ingest(batch).await? {
            IngestOutcome::Committed(ready) => {
                for (counter, n) in per_topic {
                    counter.increment(n);
                }
                Ok((Committed::Fresh, ToSchedule::Ready(ready)))
            }
            IngestOutcome::AlreadyDone(first) => Ok((Committed::Earlier(first), ToSchedule::Nothing)),
        }
    }

    /// Publishes `hookgate.ordering.key_held` on the operator topic, if there is one: an
    /// ordered endpoint's key stopped behind `head`, which finally failed, until an operator
    /// releases, retries or skips it.
    pub fn publish_key_held(&self, endpoint: &str, key: &str, head: DeliveryId) {
        let body = serde_json::json!({
            "type": KEY_HELD,
            "endpoint": endpoint,
            "ordering_key": key,
            "head": head.to_string(),
        });
        self.publish(KEY_HELD, endpoint, body);
    }

    /// Publishes `hookgate.ordering.key_blocked` on the operator topic, if there is one: the
    /// oldest event of an ordered endpoint's key has waited `blocked_for` behind a head that
    /// keeps failing. Answers once the event is committed (or was not to be published).
    pub async fn publish_key_blocked(
        &self,
        endpoint: &str,
        row: &OrderingKeyRow,
        blocked_for: std::time::Duration,
    ) -> Result<(), StoreError> {
        let head = row.head.as_ref();
        let body = serde_json::json!({
            "type": KEY_BLOCKED,
            "endpoint": endpoint,
            "ordering_key": row.key,
            "head": head.map(|h| h.delivery_id.to_string()),
            "head_attempts": head.map(|h| h.attempt_count),
            "last_error": head.and_then(|h| h.last_error.clone()),
            "waiting": row.waiting,
            "oldest_waiting_at": row.oldest_waiting_at,
            "blocked_for_seconds": blocked_for.as_secs(),
        });
        let Some(write) = self.operator_write(KEY_BLOCKED, endpoint, body) else {
            return Ok(());
        };
        self.committer
            .commit(async move {
                let (_, to_schedule) = write.await?;
                Ok(((), to_schedule))
            })
            .await
    }

    /// Publishes an operator event (`hookgate.endpoint.paused`…) on the configured operator
    /// topic, if there is one. Fire and forget: a failure is logged, never blocks delivery.
    pub fn publish_operator_event(&self, endpoint: &str, event_type: &'static str, health: &EndpointHealth) {
        // The receiver sees only the payload, so it names the event type too: `recovered` and
        // `reenabled` both end in `active`.
        let body = serde_json::json!({
            "type": event_type,
            "endpoint": endpoint,
            "state": health.state.as_str(),
            "consecutive_failures": health.consecutive_failures,
            "failing_since": health.failing_since,
            "last_success_at": health.last_success_at,
            "changed_at": health.changed_at,
        });
        self.publish(event_type, endpoint, body);
    }

    /// An operator event with `body` on the operator topic, keyed by its endpoint, in the
    /// background.
    fn publish(&self, event_type: &'static str, endpoint: &str, body: serde_json::Value) {
        let Some(write) = self.operator_write(event_type, endpoint, body) else {
            return;
        };
        self.committer
            .commit_in_background("publishing an operator event", async move {
                let (_, to_schedule) = write.await?;
                Ok(((), to_schedule))
            });
    }

    /// The write of an operator event, or None without an operator topic.
    fn operator_write(
        &self,
        event_type: &'static str,
        endpoint: &str,
        body: serde_json::Value,
    ) -> Option<impl Future<Output = Result<(Committed, ToSchedule), StoreError>> + Send + 'static> {
        let topic = self.config.load().health.operator_topic.clone()?;
        let prepared = self.prepare(
            vec![NewEvent {
                id: None,
                topic,
                event_type: event_type.to_owned(),
                content_type: "application/json".into(),
                payload: Bytes::from(body.to_string()),
                ordering_key: Some(endpoint.to_owned()),
                tenant: None,
                labels: EventLabels::default(),
            }],
            None,
        );
        Some(self.clone().write(prepared, None))
    }
}

#[cfg(test)]
mod tests {
    /// `evt_` and 26 lowercase Crockford base-32 characters, different each time.
    #[test]
    fn an_event_id_is_evt_and_a_lowercase_ulid() {
        let (a, b) = (super::new_event_id(), super::new_event_id());
        for id in [&a, &b] {
            let ulid = id.strip_prefix("evt_").expect(id);
            assert_eq!(ulid.len(), 26, "{id}");
            assert!(
                ulid.bytes().all(|c| c.is_ascii_digit() || c.is_ascii_lowercase()),
                "{id}"
            );
            assert_eq!(
                ulid.to_ascii_uppercase().parse::<ulid::Ulid>().map(|_| ()),
                Ok(())
            );
        }
        assert_ne!(a, b);
    }
}
