//! Recovering missed events: redeliver, redrive, replay and re-enable with `replay_since`
//! (the README's "Recovering missed events").
//!
//! The rules live here, the HTTP handlers only parse and answer: replay windows reach at most
//! 7 days back and hold at most 10 000 events, a truncated replay names the time to continue
//! from, paused and disabled endpoints refuse until re-enabled. Each call starts a new round for
//! the deliveries it touches (the whole policy again) and commits them through the
//! [`Committer`], like ingestion.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::clock::Clock;
use crate::commit::{Committer, ToSchedule};
use crate::config::EndpointConfig;
use crate::model::{DeliveryId, EndpointState, Event, Timestamp};
use crate::scheduler::SchedulerHandle;
use crate::store::{
    AnswerFn, DeliveryRow, IdempotencyRecord, IngestOutcome, ReadyDelivery, ReplayWindow, Store, StoreError,
};

/// The events of `endpoint`'s topics in a time window that it would receive: its type filter,
/// its tenant, its channels and its content filter.
fn replay_window(endpoint: &EndpointConfig) -> impl Fn(Timestamp, Timestamp) -> ReplayWindow + use<> {
    let ep = endpoint.clone();
    let topics = endpoint.topics.clone();
    let matcher: Arc<dyn Fn(&Event) -> bool + Send + Sync> = Arc::new(move |e: &Event| {
        ep.matches_type(&e.event_type)
            && ep.accepts_tenant(e.tenant.as_deref())
            && crate::model::channels_match(&ep.channels, &e.labels.channels)
            && ep
                .filter
                .as_ref()
                .is_none_or(|f| f.matches(&crate::filter::input(e)))
    });
    move |since, until| ReplayWindow {
        topics: topics.clone(),
        since,
        until,
        matches: matcher.clone(),
    }
}

/// How far back a replay may reach.
pub const REPLAY_MAX_AGE: Duration = Duration::from_secs(7 * 86_400);
/// How many events one replay re-sends at most (and how many dead deliveries one redrive).
pub const REPLAY_MAX_EVENTS: u32 = 10_000;
/// How many of its topics' newest events [`Recovery::recent_events`] reads at most.
pub const RECENT_SCAN: u32 = 2_000;

#[derive(Debug, thiserror::Error)]
pub enum RecoveryError {
    #[error("no endpoint `{0}`")]
    EndpointNotFound(String),
    #[error("endpoint `{endpoint}` is {state}; re-enable it first")]
    EndpointNotActive { endpoint: String, state: EndpointState },
    #[error("endpoint `{0}` is no longer configured")]
    EndpointRemoved(String),
    #[error("no delivery `{0}`")]
    DeliveryNotFound(DeliveryId),
    #[error("an attempt of delivery `{0}` is running now; wait for its outcome")]
    DeliveryInFlight(DeliveryId),
    /// The event's payload was expunged (Svix's `expunge_content`): there is nothing to send.
    #[error("the payload of event `{0}` was expunged; it cannot be sent again")]
    PayloadExpunged(String),
    /// `field` (`since`, `replay_since`) reaches further back than [`REPLAY_MAX_AGE`].
    #[error("`{field}` may be at most 7 days back (not before {oldest})")]
    WindowTooFarBack { field: &'static str, oldest: Timestamp },
    #[error("{0}")]
    InvalidWindow(&'static str),
    #[error("the gateway is shutting down")]
    ShuttingDown,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What one replay queued.
#[derive(Debug, Clone)]
pub struct Replayed {
    pub endpoint: String,
    pub since: Timestamp,
    pub until: Timestamp,
    /// Events queued again for the endpoint.
    pub queued: usize,
    /// When more than [`REPLAY_MAX_EVENTS`] matched, the time to pass as the next `since`:
    /// every matching event before it was queued and none from it on.
    pub continue_from: Option<Timestamp>,
    /// The id range of the new deliveries, to follow them.
    pub first_delivery: Option<DeliveryId>,
    pub last_delivery: Option<DeliveryId>,
}

impl Replayed {
    pub fn truncated(&self) -> bool {
        self.continue_from.is_some()
    }
}

/// How a replay with an idempotency record answers: the record to store and how the answer's
/// bytes are made from what was queued (inside the commit that queues it).
pub type ReplayAnswer = Box<dyn Fn(&Replayed) -> Bytes + Send + Sync>;

/// A replay's result: queued now, or the first answer of its idempotency key.
pub enum Replay {
    Fresh(Replayed),
    Earlier(IdempotencyRecord),
}

#[derive(Clone)]
pub struct Recovery {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) endpoints: crate::endpoints::Endpoints,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) scheduler: SchedulerHandle,
    pub(crate) committer: Committer,
}

impl Recovery {
    /// The running endpoint of that name.
    pub async fn endpoint(&self, name: &str) -> Result<Arc<EndpointConfig>, RecoveryError> {
        self.endpoints
            .get(name)
            .await?
            .ok_or_else(|| RecoveryError::EndpointNotFound(name.to_owned()))
    }

    /// Refuses while the endpoint is paused or disabled: it receives nothing until re-enabled.
    pub fn ensure_receiving(&self, endpoint: &str) -> Result<(), RecoveryError> {
        let health = self.scheduler.health_of(endpoint);
        if health.state.receives_events() {
            Ok(())
        } else {
            Err(RecoveryError::EndpointNotActive {
                endpoint: endpoint.to_owned(),
                state: health.state,
            })
        }
    }

    /// Attempts a delivery again now, in a new round. One waiting for a retry is attempted now
    /// instead (the waiting attempt is cancelled); one whose attempt is running is refused.
    /// Answers the delivery as the new round left it, read before the round is scheduled (so
    /// never an attempt of it already).
    pub async fn redeliver(&self, id: DeliveryId) -> Result<DeliveryRow, RecoveryError> {
        let (row, _) = self
            .store
            .delivery(id)
            .await?
            .ok_or(RecoveryError::DeliveryNotFound(id))?;
        if !self.endpoints.contains(&row.endpoint) {
            return Err(RecoveryError::EndpointRemoved(row.endpoint));
        }
        self.ensure_receiving(&row.endpoint)?;
        let events = self.store.event(&row.event_id, Some(&row.topic)).await?;
        if events.iter().any(|e| e.labels.expunged) {
            return Err(RecoveryError::PayloadExpunged(row.event_id));
        }
        if self.scheduler.is_in_flight(id) {
            return Err(RecoveryError::DeliveryInFlight(id));
        }
        let (store, now) = (self.store.clone(), self.clock.now());
        let row = self
            .committer
            .commit(async move {
                let restarted = store.restart_delivery(id, now, true).await?;
                let row = store.delivery(id).await?.map(|(row, _)| row);
                Ok((row, ToSchedule::Restarted(restarted)))
            })
            .await?;
        row.ok_or(RecoveryError::DeliveryNotFound(id))
    }

    /// Sends the endpoint's dead deliveries again (at most [`REPLAY_MAX_EVENTS`] per call), each
    /// in a new round. Answers how many were queued.
    pub async fn redrive(&self, endpoint: &EndpointConfig) -> Result<usize, RecoveryError> {
        self.ensure_receiving(&endpoint.name)?;
        let (store, name, now) = (self.store.clone(), endpoint.name.clone(), self.clock.now());
        let queued = self
            .committer
            .commit(async move {
                let ready = store.restart_dead(&name, now, REPLAY_MAX_EVENTS).await?;
                Ok((ready.len(), ToSchedule::Ready(ready)))
            })
            .await?;
        Ok(queued)
    }

    /// Checks that a replay may start at `since` (at most 7 days back); `field` names it in
    /// the error.
    pub fn check_start(&self, field: &'static str, since: Timestamp) -> Result<Timestamp, RecoveryError> {
        let oldest = self.clock.now().minus(REPLAY_MAX_AGE);
        if since < oldest {
            return Err(RecoveryError::WindowTooFarBack { field, oldest });
        }
        Ok(since)
    }

    /// The replay window `[since, until)`: at most 7 days back, by default up to and including
    /// this millisecond.
    pub fn window(
        &self,
        since: Timestamp,
        until: Option<Timestamp>,
    ) -> Result<(Timestamp, Timestamp), RecoveryError> {
        let since = self.check_start("since", since)?;
        let end_of_now = self.clock.now().plus(Duration::from_millis(1));
        let until = until.unwrap_or(end_of_now).min(end_of_now);
        if until <= since {
            return Err(RecoveryError::InvalidWindow("`until` must be after `since`"));
        }
        Ok((since, until))
    }

    /// The endpoint's newest events of the last 7 days that it subscribes to (type, tenant,
    /// channels), whatever its content filter says: what a filter being edited is tried on.
    /// At most `limit`, newest first, found among the newest [`RECENT_SCAN`] events of its
    /// topics.
    pub async fn recent_events(
        &self,
        endpoint: &EndpointConfig,
        limit: u32,
    ) -> Result<Vec<Arc<Event>>, RecoveryError> {
        let mut unfiltered = endpoint.clone();
        unfiltered.filter = None;
        let now = self.clock.now();
        let window =
            replay_window(&unfiltered)(now.minus(REPLAY_MAX_AGE), now.plus(Duration::from_millis(1)));
        Ok(self.store.latest_events(window, limit, RECENT_SCAN).await?)
    }

    /// Re-sends the endpoint's matching events of a window checked by [`Recovery::window`].
    /// With an idempotency record, its answer is stored in the same commit.
    pub async fn replay(
        &self,
        endpoint: &EndpointConfig,
        (since, until): (Timestamp, Timestamp),
        idempotency: Option<(IdempotencyRecord, ReplayAnswer)>,
    ) -> Result<Replay, RecoveryError> {
        self.ensure_receiving(&endpoint.name)?;
        self.queue_replay(endpoint, since, until, idempotency).await
    }

    /// What a replay of this window would send now, without sending it: how many events, and
    /// where a second replay would continue when the window holds more than one sends.
    pub async fn replay_preview(
        &self,
        endpoint: &EndpointConfig,
        (since, until): (Timestamp, Timestamp),
    ) -> Result<(usize, Option<Timestamp>), RecoveryError> {
        let since = Self::not_before_creation(endpoint, since).min(until);
        let (events, continue_from) = self.replay_batch(replay_window(endpoint), since, until).await?;
        Ok((events.len(), continue_from))
    }

    /// `since`, or the endpoint's creation when that is later: an event accepted before the
    /// endpoint existed was never its to receive, and a replay does not send it. The gateway
    /// knows when an endpoint created through the API began (its row's `created_at`, new when
    /// a deleted name is created again); it keeps no such time for the config file's.
    fn not_before_creation(endpoint: &EndpointConfig, since: Timestamp) -> Timestamp {
        endpoint
            .stored
            .map_or(since, |stored| since.max(stored.created_at))
    }

    /// Makes a paused or disabled endpoint active again and, with `replay_since`, re-sends the
    /// matching events since then. A bad `replay_since` changes nothing.
    pub async fn reenable(
        &self,
        endpoint: &EndpointConfig,
        replay_since: Option<Timestamp>,
    ) -> Result<Option<Replayed>, RecoveryError> {
        let replay_since = replay_since
            .map(|since| self.check_start("replay_since", since))
            .transpose()?;
        if replay_since.is_some_and(|since| since > self.clock.now()) {
            return Err(RecoveryError::InvalidWindow("`replay_since` is in the future"));
        }
        self.scheduler
            .reenable(endpoint.name.clone())
            .await
            .ok_or(RecoveryError::ShuttingDown)?;
        let Some(since) = replay_since else {
            return Ok(None);
        };
        // The window closes only once the endpoint receives events again, and takes in that
        // millisecond whole: an event the paused endpoint missed can share its millisecond with
        // the re-enable. An event of that millisecond that was delivered anyway may then be sent
        // twice (receivers deduplicate by webhook-id) — better than lost.
        let until = self.clock.now().plus(Duration::from_millis(1));
        match self.queue_replay(endpoint, since, until, None).await? {
            Replay::Fresh(replayed) => Ok(Some(replayed)),
            Replay::Earlier(_) => Ok(None),
        }
    }

    async fn queue_replay(
        &self,
        endpoint: &EndpointConfig,
        since: Timestamp,
        until: Timestamp,
        idempotency: Option<(IdempotencyRecord, ReplayAnswer)>,
    ) -> Result<Replay, RecoveryError> {
        let since = Self::not_before_creation(endpoint, since).min(until);
        let (events, continue_from) = self.replay_batch(replay_window(endpoint), since, until).await?;
        let name = endpoint.name.to_string();
        let summary = move |ready: &[ReadyDelivery]| Replayed {
            endpoint: name.clone(),
            since,
            until,
            queued: ready.len(),
            continue_from,
            first_delivery: ready.first().map(|d| d.id),
            last_delivery: ready.last().map(|d| d.id),
        };
        let idempotency = idempotency.map(|(record, answer)| {
            let summary = summary.clone();
            let make: AnswerFn = Box::new(move |ready: &[ReadyDelivery]| answer(&summary(ready)));
            (record, make)
        });
        let target = endpoint.target();
        let (store, now) = (self.store.clone(), self.clock.now());
        let replay = self
            .committer
            .commit(async move {
                match store.create_deliveries(target, events, idempotency, now).await? {
                    IngestOutcome::Committed(ready) => {
                        Ok((Replay::Fresh(summary(&ready)), ToSchedule::Ready(ready)))
                    }
                    IngestOutcome::AlreadyDone(first) => Ok((Replay::Earlier(first), ToSchedule::Nothing)),
                }
            })
            .await?;
        Ok(replay)
    }

    /// The events one replay queues, oldest first, and where the next call continues if the
    /// window holds more than [`REPLAY_MAX_EVENTS`].
    ///
    /// The cursor is a time, and times have millisecond precision while a batch of events
    /// shares one receipt time. So a truncated batch ends at a millisecond boundary: it holds
    /// every matching event before `continue_from` and none from it on, and continuing from
    /// there neither repeats nor skips an event. That may queue a few fewer than 10 000. Should
    /// more than 10 000 events share the window's first millisecond, that millisecond is queued
    /// whole: a little over the limit, rather than a cursor that cannot move forward.
    /// Events whose payload was expunged are left out: they are never sent again.
    async fn replay_batch(
        &self,
        window: impl Fn(Timestamp, Timestamp) -> ReplayWindow,
        since: Timestamp,
        until: Timestamp,
    ) -> Result<(Vec<Arc<Event>>, Option<Timestamp>), StoreError> {
        let (mut events, continue_from) = self.window_batch(window, since, until).await?;
        events.retain(|e| !e.labels.expunged);
        Ok((events, continue_from))
    }

    /// The events of the window in one batch, as [`Self::replay_batch`] cuts it.
    async fn window_batch(
        &self,
        window: impl Fn(Timestamp, Timestamp) -> ReplayWindow,
        since: Timestamp,
        until: Timestamp,
    ) -> Result<(Vec<Arc<Event>>, Option<Timestamp>), StoreError> {
        let limit = REPLAY_MAX_EVENTS as usize;
        let mut events = self
            .store
            .events_in_window(window(since, until), REPLAY_MAX_EVENTS + 1)
            .await?;
        if events.len() <= limit {
            return Ok((events, None));
        }
        let first_unsent = events[limit].received_at;
        events.truncate(limit);
        let whole_milliseconds = events.partition_point(|e| e.received_at < first_unsent);
        if whole_milliseconds > 0 {
            events.truncate(whole_milliseconds);
            return Ok((events, Some(first_unsent)));
        }
        let next_millisecond = first_unsent.plus(Duration::from_millis(1));
        let crowded = self
            .store
            .events_in_window(window(first_unsent, next_millisecond), u32::MAX)
            .await?;
        let more = !self
            .store
            .events_in_window(window(next_millisecond, until), 1)
            .await?
            .is_empty();
        Ok((crowded, more.then_some(next_millisecond)))
    }
}
