//! Durable state. The only module that knows SQL.
//!
//! The rest of the gateway talks to a [`Store`]: operations named after the domain (ingest,
//! record an attempt, pending deliveries, replay window…), not after tables. SQLite is the
//! embedded default ([`SqliteStore`]); PostgreSQL ([`PgStore`], `storage.url`) is the database a
//! gateway outgrows one machine onto.
//!
//! Durability point: a write's future resolves only after the commit that contains it, so
//! "202 Accepted" always means "on disk". SQLite writes go through one writer thread that
//! commits in groups (`synchronous=FULL`, WAL); PostgreSQL groups the fsyncs of concurrent
//! transactions itself.

mod cluster;
mod migrations;
mod ordering;
mod postgres;
mod seal;
mod sqlite;
mod writer;

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;

pub use cluster::{ClusterNotice, ClusterStore, KeyActionRequest, NodeInfo, NodeRow, Notices};
pub use ordering::{KeyHead, KeyListing, KeyPage, KeyState, OrderingKeyRow};
pub use postgres::{
    CopyProgress, DEFAULT_MAX_CONNECTIONS as PG_MAX_CONNECTIONS, PgStore, copy_sqlite_to_postgres,
};
pub use seal::{Column as SealedColumn, EncryptionKey, KeyFormatError, KeyId, SealError, Sealer};
pub use sqlite::{SqliteBackup, SqliteOptions, SqliteStore, backup_sqlite, key_file_of};

use crate::health::{EndpointHealth, HealthInput, HealthRules, Step};
use crate::model::{
    Attempt, DeliveryId, DeliveryStatus, ErrorKind, Event, EventLabels, EventTrace, Exchange, SpanId,
    Timestamp, TraceId,
};

#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// An event with this id already exists in the topic; nothing was written.
    #[error("event `{id}` already exists in topic `{topic}`")]
    DuplicateEvent { topic: String, id: String },
    #[error("{0} not found")]
    NotFound(String),
    /// The request cannot be applied in the delivery's or endpoint's current state.
    #[error("{0}")]
    Conflict(String),
    /// The database cannot take writes right now (disk full, size limit reached, I/O error,
    /// shutting down). Nothing of the failed write was kept.
    #[error("storage unavailable: {0}")]
    Unavailable(String),
    /// The writer's queue is full: the write was refused before it was queued, so that a
    /// saturated writer turns into a quick "retry later" instead of unbounded memory.
    #[error("overloaded: {0}")]
    Overloaded(String),
    #[error("storage error: {0}")]
    Internal(String),
}

/// How long a start's reads are tried again while the store cannot serve them (see
/// [`patiently`]): as long as a start waits for its database to be reachable at all.
pub const START_READ_PATIENCE: std::time::Duration = std::time::Duration::from_secs(30);

/// A read that a start needs, tried again with a growing pause while the store answers that it
/// cannot serve now — the database cut off or restarting for a moment
/// ([`StoreError::Unavailable`]), or all its connections busy ([`StoreError::Overloaded`]) —
/// for at most `patience`; any other answer at once. A node that comes up while its database
/// blinks waits it out instead of ending the process.
pub async fn patiently<T, F, Fut>(what: &str, patience: std::time::Duration, mut read: F) -> StoreResult<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = StoreResult<T>>,
{
    let started = tokio::time::Instant::now();
    let mut pause = std::time::Duration::from_millis(250);
    loop {
        match read().await {
            Err(e @ (StoreError::Unavailable(_) | StoreError::Overloaded(_)))
                if started.elapsed() + pause < patience =>
            {
                tracing::warn!(error = %e, what, "the store cannot serve a read of the start yet; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(std::time::Duration::from_secs(2));
            }
            other => return other,
        }
    }
}

impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        use rusqlite::ErrorCode;
        match e.sqlite_error_code() {
            Some(ErrorCode::DiskFull | ErrorCode::SystemIoFailure | ErrorCode::ReadOnly) => {
                StoreError::Unavailable(e.to_string())
            }
            Some(ErrorCode::CannotOpen | ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => {
                StoreError::Unavailable(e.to_string())
            }
            _ => StoreError::Internal(e.to_string()),
        }
    }
}

pub type StoreResult<T> = Result<T, StoreError>;

/// One event and the endpoints it fans out to (already filtered by topic, type, tenant and
/// health).
#[derive(Debug, Clone)]
pub struct IngestItem {
    pub event: Arc<Event>,
    pub endpoints: Vec<Target>,
}

/// An endpoint a delivery goes to, with the endpoint's tenant: a tenant's key sees the
/// deliveries to its own endpoints, also after such an endpoint was deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub endpoint: Arc<str>,
    pub tenant: Option<Arc<str>>,
    /// The endpoint delivers one ordering key's events in order. In a cluster every node,
    /// the one that committed the delivery too, takes such deliveries from the notices, which
    /// arrive in commit order; the others' notices are needed only by another node.
    pub ordered: bool,
}

impl Target {
    /// An unordered endpoint without a tenant.
    pub fn untenanted(endpoint: &str) -> Target {
        Target {
            endpoint: Arc::from(endpoint),
            tenant: None,
            ordered: false,
        }
    }
}

/// The stored answer of an idempotent request, replayed verbatim for a retry with the same key.
#[derive(Debug, Clone, PartialEq)]
pub struct IdempotencyRecord {
    /// Who the key belongs to: a hash of the API key (never the key), or `anonymous`.
    pub scope: String,
    pub key: String,
    /// SHA-256 of what the request meant (method, path, body); a different hash under the same
    /// key is a client error (422).
    pub request_hash: Vec<u8>,
    pub status: u16,
    pub response: Bytes,
    pub created_at: Timestamp,
}

/// Makes a request's answer from the deliveries it created, inside the commit that creates them.
pub type AnswerFn = Box<dyn FnOnce(&[ReadyDelivery]) -> Bytes + Send>;

#[derive(Debug, Clone)]
pub struct IngestBatch {
    pub items: Vec<IngestItem>,
    /// Written in the same transaction as the events, so a retried request either sees the
    /// whole first answer or none of it.
    pub idempotency: Option<IdempotencyRecord>,
    pub now: Timestamp,
}

/// A delivery ready for the scheduler: what it needs to attempt it without another read.
#[derive(Debug, Clone)]
pub struct ReadyDelivery {
    pub id: DeliveryId,
    pub endpoint: Arc<str>,
    pub event: Arc<Event>,
    pub next_attempt_at: Timestamp,
    /// 1 for the first round; a redeliver starts the next round with a fresh attempt counter.
    pub round: u32,
    /// When the current round began: its policy deadline counts from here.
    pub round_started_at: Timestamp,
    pub attempts_made: u32,
}

/// A delivery put into a new round, and whether it was waiting for a retry before.
#[derive(Debug, Clone)]
pub struct Restarted {
    pub ready: ReadyDelivery,
    pub was_pending: bool,
}

#[derive(Debug, Clone)]
pub enum IngestOutcome {
    Committed(Vec<ReadyDelivery>),
    /// The idempotency key was already used: nothing new was written; here is the first answer.
    AlreadyDone(IdempotencyRecord),
}

/// A pending delivery as the scheduler rebuilds its queue from: no payload, so a million of
/// them fit in memory.
#[derive(Debug, Clone, PartialEq)]
pub struct PendingDelivery {
    pub id: DeliveryId,
    pub endpoint: Arc<str>,
    pub next_attempt_at: Timestamp,
    pub round: u32,
    pub attempts_made: u32,
    pub ordering_key: Option<String>,
    /// When the current round began: its policy deadline counts from here.
    pub round_started_at: Timestamp,
}

/// A delivery with the event it carries, for an attempt of a delivery that was not ingested in
/// this process (after a restart, or a retry whose payload was not kept in memory).
#[derive(Debug, Clone)]
pub struct DeliveryForAttempt {
    pub id: DeliveryId,
    pub endpoint: Arc<str>,
    pub status: DeliveryStatus,
    pub round: u32,
    pub round_started_at: Timestamp,
    pub attempts_made: u32,
    pub event: Arc<Event>,
}

/// The result of one attempt, written together with the health change it caused.
#[derive(Debug, Clone)]
pub struct AttemptWrite {
    pub delivery: DeliveryId,
    pub round: u32,
    pub attempt: Attempt,
    /// What ran on the attempt: `cloudevents@1a2b3c4d (0.3 ms)`, for the attempt log.
    pub plugin_note: Option<String>,
    pub status: DeliveryStatus,
    pub next_attempt_at: Option<Timestamp>,
    pub last_error: Option<String>,
}

/// A change the scheduler makes to deliveries and endpoint health. The scheduler decides in
/// memory and streams these to the store in the order it decided them, so the database ends
/// in the same state as memory (and a late write never overtakes an earlier one).
#[derive(Debug, Clone)]
pub enum StateChange {
    /// An attempt's outcome and the delivery's new status.
    Attempt(AttemptWrite),
    /// An endpoint's health record and the transitions that led to it.
    /// An input to an endpoint's health machine. The store applies it to the health it holds
    /// — the one authority when several nodes share the database — and reports the step.
    Health(HealthChange),
    /// Every pending delivery of an endpoint ends with `kind` (paused, disabled, removed).
    FailPending {
        endpoint: Arc<str>,
        kind: ErrorKind,
        status: DeliveryStatus,
        now: Timestamp,
    },
    /// One pending delivery ends without an attempt.
    Finish {
        delivery: DeliveryId,
        status: DeliveryStatus,
        error: String,
        now: Timestamp,
    },
    /// An ordering key stops behind `delivery`, which finally failed (`on_final_failure:
    /// hold`), until an operator releases it. A key already held stays held as it was.
    Hold {
        endpoint: Arc<str>,
        key: String,
        delivery: DeliveryId,
        at: Timestamp,
    },
    /// The key held behind `delivery` moves on (only if it is still held behind that one).
    Release {
        endpoint: Arc<str>,
        key: String,
        delivery: DeliveryId,
    },
}

/// A key held behind its failed head, as the scheduler restores it at start.
#[derive(Debug, Clone, PartialEq)]
pub struct HeldKey {
    pub endpoint: Arc<str>,
    pub key: String,
    pub delivery: DeliveryId,
}

/// An endpoint health input to apply (see [`StateChange::Health`]).
#[derive(Debug, Clone)]
pub struct HealthChange {
    pub endpoint: Arc<str>,
    pub input: HealthInput,
    /// When it happened (a timer's deadline for a tick).
    pub at: Timestamp,
    pub rules: HealthRules,
}

/// A health input as the store applied it: the step of the machine from the health it held,
/// whose transitions it recorded in the history.
#[derive(Debug, Clone)]
pub struct HealthApplied {
    pub endpoint: Arc<str>,
    pub input: HealthInput,
    pub step: Step,
}

/// A delivery as the API shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct DeliveryRow {
    pub id: DeliveryId,
    pub event_id: String,
    pub topic: String,
    pub event_type: String,
    pub endpoint: String,
    /// The endpoint's tenant when the delivery was made.
    pub tenant: Option<String>,
    pub status: DeliveryStatus,
    pub round: u32,
    pub attempt_count: u32,
    pub next_attempt_at: Option<Timestamp>,
    pub last_error: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AttemptRow {
    pub round: u32,
    pub attempt: Attempt,
    pub plugin_note: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub endpoint: Option<String>,
    pub status: Option<DeliveryStatus>,
    pub event_id: Option<String>,
    /// Only deliveries to this tenant's endpoints.
    pub tenant: Option<String>,
    /// Only deliveries of events of this type.
    pub event_type: Option<String>,
    /// Only deliveries made in `[since, until)`.
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    /// Only deliveries older than this one (the cursor of the previous page).
    pub before: Option<DeliveryId>,
    /// Only deliveries newer than this one, oldest first (a page back: the cursor of the page
    /// after it).
    pub after: Option<DeliveryId>,
    pub limit: u32,
}

#[derive(Debug, Clone, PartialEq)]
pub struct HistoryEntry {
    pub state: crate::model::EndpointState,
    pub at: Timestamp,
    pub reason: String,
}

/// Which events a replay re-sends: those of `topics` received in `[since, until)` for which
/// `matches` holds (the endpoint's type filter), oldest first.
#[derive(Clone)]
pub struct ReplayWindow {
    pub topics: Vec<String>,
    pub since: Timestamp,
    pub until: Timestamp,
    pub matches: Arc<dyn Fn(&Event) -> bool + Send + Sync>,
}

impl std::fmt::Debug for ReplayWindow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReplayWindow")
            .field("topics", &self.topics)
            .field("since", &self.since)
            .field("until", &self.until)
            .finish_non_exhaustive()
    }
}

/// What a retention run removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Purged {
    pub deliveries: u64,
    pub attempts: u64,
    pub events: u64,
    pub idempotency_keys: u64,
    pub history: u64,
}

impl Purged {
    /// True when some table had a full batch to remove, so another call may find more.
    pub fn may_have_more(&self, batch: u32) -> bool {
        let batch = u64::from(batch);
        self.deliveries >= batch
            || self.events >= batch
            || self.idempotency_keys >= batch
            || self.history >= batch
    }

    pub fn rows(&self) -> u64 {
        self.deliveries + self.attempts + self.events + self.idempotency_keys + self.history
    }
}

#[derive(Debug, Clone, Copy)]
pub struct RetentionCutoffs {
    /// Final deliveries (and their attempts) last changed before this go.
    pub deliveries_before: Timestamp,
    /// Events received before this go, once no delivery of theirs is left.
    pub events_before: Timestamp,
    pub idempotency_before: Timestamp,
    /// Endpoint state changes recorded before this go, except each endpoint's latest, which
    /// explains its current state however old it is.
    pub history_before: Timestamp,
    /// Rows per table per call, so that one call never holds the writer for long.
    pub batch: u32,
}

/// How many deliveries finished in one time bucket, by how they ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ActivityBucket {
    pub start: Timestamp,
    /// Deliveries that ended `succeeded` in the bucket.
    pub succeeded: u64,
    /// Deliveries that ended `failed` or `dead` in the bucket (by their status now: one
    /// redriven since counts where it then succeeded).
    pub failed: u64,
    /// Attempts that failed in the bucket, whatever became of their delivery since: an outage
    /// stays visible after its deliveries were recovered.
    pub failed_attempts: u64,
}

/// Deliveries waiting and dead letters now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    pub pending: u64,
    pub dead: u64,
}

/// An endpoint created through the API, as the store keeps it. The store does not read `spec`:
/// the config module validates it like the YAML file's endpoints.
#[derive(Clone, PartialEq)]
pub struct ApiEndpointRow {
    pub name: String,
    pub tenant: Option<String>,
    /// The endpoint's keys as a JSON object (the YAML endpoint keys), its secret included.
    pub spec: String,
    /// The Svix API's uid of the endpoint (also in `spec`): unique within its tenant, which
    /// the store enforces, so that two concurrent creates with one uid cannot both succeed.
    pub uid: Option<String>,
    /// A secret being rotated out, and until when it still signs.
    pub retiring: Option<(String, Timestamp)>,
    /// 1 when created; each change adds one. A change names the version it was made from.
    pub version: u64,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// Which endpoints created through the API a page holds: those of `tenant` (or all), by
/// name, after the name `after` in the page's direction, at most `limit`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EndpointPage {
    pub tenant: Option<String>,
    pub after: Option<String>,
    pub limit: u32,
    /// Names from the last to the first.
    pub descending: bool,
}

/// The columns of an `api_endpoints` row, in the order both stores read them.
const API_ENDPOINT_COLUMNS: &str =
    "name, tenant, spec, uid, retiring_secret, retiring_until, version, created_at, updated_at";

impl EndpointPage {
    /// The query of this page, with `params` the backend's placeholders of the tenant, the
    /// cursor and the limit (a text type where the database cannot infer one): a condition per
    /// filter given, none for one left out. `p IS NULL OR name > p` would keep the database
    /// from starting its index scan at the cursor, so a page would cost as much as the
    /// endpoints before it.
    fn sql(&self, [tenant, after, limit]: [&str; 3]) -> String {
        let (past, order) = if self.descending {
            ("<", "DESC")
        } else {
            (">", "ASC")
        };
        let tenant = match self.tenant {
            Some(_) => format!("tenant = {tenant}"),
            None => format!("{tenant} IS NULL"),
        };
        let cursor = match self.after {
            Some(_) => format!("name {past} {after}"),
            None => format!("{after} IS NULL"),
        };
        format!(
            "SELECT {API_ENDPOINT_COLUMNS} FROM api_endpoints
             WHERE {tenant} AND {cursor} ORDER BY name {order} LIMIT {limit}"
        )
    }
}

impl std::fmt::Debug for ApiEndpointRow {
    /// Without `spec` and the retiring secret: both hold secrets.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ApiEndpointRow")
            .field("name", &self.name)
            .field("tenant", &self.tenant)
            .field("uid", &self.uid)
            .field("version", &self.version)
            .finish_non_exhaustive()
    }
}

/// An application of the Svix API: a tenant, with what that API keeps about it. `tenant` is
/// fixed when it is made (its `uid`, else its `id`), so the tenant's endpoints, events and keys
/// stay its own when the uid changes.
#[derive(Debug, Clone, PartialEq)]
pub struct ApplicationRow {
    /// `app_<ulid>`.
    pub id: String,
    pub uid: Option<String>,
    pub tenant: String,
    pub name: String,
    /// A JSON object of strings.
    pub metadata: String,
    pub rate_limit: Option<u32>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// An event type of the catalog.
#[derive(Debug, Clone, PartialEq)]
pub struct EventTypeRow {
    pub name: String,
    pub description: String,
    pub archived: bool,
    pub deprecated: bool,
    /// JSON Schemas by version (`{"1": {...}}`), as JSON text.
    pub schemas: Option<String>,
    /// A JSON array of strings.
    pub feature_flags: Option<String>,
    pub group_name: Option<String>,
    pub created_at: Timestamp,
    pub updated_at: Timestamp,
}

/// The SQL order of a page of a list kept newest first: against it (oldest first) for a page
/// read back from a cursor (`after`), so that the rows nearest the cursor come first.
fn order(after: bool) -> &'static str {
    if after { "ASC" } else { "DESC" }
}

/// One page of a tenant's events, newest first.
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    pub tenant: String,
    /// Only events older than this one (by its `seq`, the cursor of the previous page).
    pub before: Option<i64>,
    /// Only events newer than this one, oldest first (a page back: the cursor of the page after
    /// it).
    pub after: Option<i64>,
    /// Only events received in `[since, until)`.
    pub since: Option<Timestamp>,
    pub until: Option<Timestamp>,
    /// Only events of these types (all when empty).
    pub event_types: Vec<String>,
    pub limit: u32,
}

/// One page of attempts, newest first: of one event's deliveries, or of one endpoint's.
#[derive(Debug, Clone, Default)]
pub struct AttemptQuery {
    /// Only attempts of deliveries to this tenant's endpoints.
    pub tenant: Option<String>,
    pub event_id: Option<String>,
    pub endpoint: Option<String>,
    /// Only attempts older than this one (the cursor of the previous page).
    pub before: Option<i64>,
    /// Only attempts newer than this one, oldest first (a page back: the cursor of the page
    /// after it).
    pub after: Option<i64>,
    pub limit: u32,
}

/// An attempt with its delivery, for lists of attempts.
#[derive(Debug, Clone, PartialEq)]
pub struct AttemptListRow {
    /// The attempt's own number in the store (`atmpt_<n>` in the Svix API).
    pub id: i64,
    pub delivery: DeliveryId,
    pub event_id: String,
    pub endpoint: String,
    pub round: u32,
    pub attempt: Attempt,
}

/// Pending deliveries read at once when the queue is rebuilt (see [`Store::pending_page`]).
pub const PENDING_PAGE: u32 = 10_000;

/// Where a page of pending deliveries starts: after this delivery of this endpoint. Pages go
/// by endpoint, then id, the order of the pending deliveries' index by endpoint, so that no
/// other index of them is needed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PendingCursor {
    pub endpoint: Arc<str>,
    pub id: DeliveryId,
}

/// The gateway's durable state, in the domain's terms.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Writes events, their deliveries and the idempotency record in one commit.
    /// A duplicate event id fails the whole batch with [`StoreError::DuplicateEvent`].
    async fn ingest(&self, batch: IngestBatch) -> StoreResult<IngestOutcome>;

    /// Applies the scheduler's state changes in order, in one commit, and answers the health
    /// steps of its [`StateChange::Health`] inputs, in order. Shared, so that a caller who keeps
    /// the batch for another try after [`StoreError::Unavailable`] need not copy it for every
    /// try.
    async fn apply(&self, changes: Arc<[StateChange]>) -> StoreResult<Vec<HealthApplied>>;

    /// Starts a new round for a delivery: pending now, fresh attempt counter, the policy's
    /// deadline counted from `now`. A finished delivery always may; a pending one only with
    /// `replace_waiting` (redeliver cancels its waiting attempt). The answer says whether the
    /// delivery was pending, so the scheduler can drop the attempt it was holding.
    async fn restart_delivery(
        &self,
        id: DeliveryId,
        now: Timestamp,
        replace_waiting: bool,
    ) -> StoreResult<Restarted>;

    /// Starts a new round for every dead delivery of an endpoint (redrive).
    async fn restart_dead(
        &self,
        endpoint: &str,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<ReadyDelivery>>;

    /// New deliveries of existing events to one endpoint (replay). With an idempotency record,
    /// its answer is made by `answer` from the new deliveries and written in the same commit.
    async fn create_deliveries(
        &self,
        endpoint: Target,
        events: Vec<Arc<Event>>,
        idempotency: Option<(IdempotencyRecord, AnswerFn)>,
        now: Timestamp,
    ) -> StoreResult<IngestOutcome>;

    /// The pending deliveries after `after` (all, without one), by endpoint and, within an
    /// endpoint, in id order, at most `limit`, without payloads. The in-memory queue is rebuilt
    /// from these pages after a start, so that a million pending deliveries never lie in one
    /// vector beside the queue being built from them.
    async fn pending_page(
        &self,
        after: Option<PendingCursor>,
        limit: u32,
    ) -> StoreResult<Vec<PendingDelivery>>;

    /// Every pending delivery, by endpoint and in id order within each, handed to `take` a
    /// page of [`PENDING_PAGE`] at a time; answers how many there were.
    async fn each_pending_page(
        &self,
        take: &mut (dyn FnMut(Vec<PendingDelivery>) + Send),
    ) -> StoreResult<usize> {
        let (mut after, mut count) = (None, 0);
        loop {
            let page = self.pending_page(after.take(), PENDING_PAGE).await?;
            let full = page.len() == PENDING_PAGE as usize;
            after = page.last().map(|p| PendingCursor {
                endpoint: p.endpoint.clone(),
                id: p.id,
            });
            count += page.len();
            take(page);
            if !full {
                return Ok(count);
            }
        }
    }

    /// Every pending delivery, by endpoint and in id order within each.
    async fn pending_deliveries(&self) -> StoreResult<Vec<PendingDelivery>> {
        let mut all = Vec::new();
        self.each_pending_page(&mut |page| all.extend(page)).await?;
        Ok(all)
    }

    async fn delivery_for_attempt(&self, id: DeliveryId) -> StoreResult<Option<DeliveryForAttempt>>;

    /// The first `limit` matching events of a replay window, oldest first.
    async fn events_in_window(&self, window: ReplayWindow, limit: u32) -> StoreResult<Vec<Arc<Event>>>;

    /// The newest matching events of a window, newest first: at most `limit`, found among at
    /// most `scan` of the window's newest events (so that a rare match costs a bounded read).
    async fn latest_events(
        &self,
        window: ReplayWindow,
        limit: u32,
        scan: u32,
    ) -> StoreResult<Vec<Arc<Event>>>;

    async fn event(&self, id: &str, topic: Option<&str>) -> StoreResult<Vec<Event>>;

    /// Removes the payload of the event `id` of `topic` on request (Svix's `expunge_content`):
    /// the payload becomes empty and the labels `labels` (which say `expunged`). False when
    /// there is no such event.
    async fn expunge_payload(&self, topic: &str, id: &str, labels: &EventLabels) -> StoreResult<bool>;

    /// An endpoint's ordering keys of `listing`, in key order after `after`: each with its
    /// head, what waits behind it and since when. At most `limit` keys are looked at (a page
    /// may hold fewer: a failed head with nothing behind it is not blocked).
    async fn ordering_keys(
        &self,
        endpoint: &str,
        listing: KeyListing,
        after: Option<String>,
        limit: u32,
    ) -> StoreResult<KeyPage>;

    /// Every held ordering key, for the scheduler to keep stopped after a start.
    async fn held_keys(&self) -> StoreResult<Vec<HeldKey>>;

    async fn deliveries(&self, filter: DeliveryFilter) -> StoreResult<Vec<DeliveryRow>>;
    async fn delivery(&self, id: DeliveryId) -> StoreResult<Option<(DeliveryRow, Vec<AttemptRow>)>>;
    /// How many deliveries of `endpoint` with ids in `[from, to]` are in each status.
    async fn delivery_summary(
        &self,
        endpoint: &str,
        from: DeliveryId,
        to: DeliveryId,
    ) -> StoreResult<Vec<(DeliveryStatus, u64)>>;
    async fn endpoint_health(&self) -> StoreResult<Vec<(String, EndpointHealth)>>;
    async fn endpoint_history(&self, endpoint: &str, limit: u32) -> StoreResult<Vec<HistoryEntry>>;
    async fn idempotency_record(&self, scope: &str, key: &str) -> StoreResult<Option<IdempotencyRecord>>;

    /// The deliveries that finished in `[since, since + buckets × bucket)`, counted per bucket
    /// (of this tenant's endpoints only, with `tenant`).
    async fn activity(
        &self,
        since: Timestamp,
        bucket: std::time::Duration,
        buckets: u32,
        tenant: Option<String>,
    ) -> StoreResult<Vec<ActivityBucket>>;

    /// Deliveries pending and dead now (of this tenant's endpoints only, with `tenant`).
    async fn backlog(&self, tenant: Option<String>) -> StoreResult<Backlog>;

    /// The endpoint created through the API of that name.
    async fn api_endpoint(&self, name: &str) -> StoreResult<Option<ApiEndpointRow>>;

    /// A page of the endpoints created through the API (see [`EndpointPage`]).
    async fn api_endpoint_page(&self, page: EndpointPage) -> StoreResult<Vec<ApiEndpointRow>>;

    /// Creates an endpoint (`previous` None; [`StoreError::Conflict`] when its name, or its uid
    /// within its tenant, is taken) or replaces the one at version `previous` with `row`, whose
    /// version is the next ([`StoreError::Conflict`] when it was changed or deleted since:
    /// another node's change is never overwritten unseen).
    async fn save_api_endpoint(&self, row: ApiEndpointRow, previous: Option<u64>) -> StoreResult<()>;

    /// Removes an endpoint created through the API ([`StoreError::NotFound`] when there is none).
    async fn delete_api_endpoint(&self, name: &str) -> StoreResult<()>;

    /// The Svix API's applications ordered by id (`descending`: newest first), after `after`
    /// (the cursor: past it in that order).
    async fn applications(
        &self,
        after: Option<String>,
        limit: u32,
        descending: bool,
    ) -> StoreResult<Vec<ApplicationRow>>;

    /// The application whose id, uid or tenant is `key`.
    async fn application(&self, key: &str) -> StoreResult<Option<ApplicationRow>>;

    /// Creates an application (`previous` None; [`StoreError::Conflict`] when its id, uid or
    /// tenant is taken) or replaces the one last changed at `previous`.
    async fn save_application(&self, row: ApplicationRow, previous: Option<Timestamp>) -> StoreResult<()>;

    /// Removes an application ([`StoreError::NotFound`] when there is none).
    async fn delete_application(&self, id: &str) -> StoreResult<()>;

    /// The event type catalog ordered by name (`descending`: from the last name), after
    /// `after` (the cursor: past it in that order).
    async fn event_types(
        &self,
        after: Option<String>,
        limit: u32,
        include_archived: bool,
        descending: bool,
    ) -> StoreResult<Vec<EventTypeRow>>;

    async fn event_type(&self, name: &str) -> StoreResult<Option<EventTypeRow>>;

    /// Creates an event type (`previous` None; [`StoreError::Conflict`] when the name is
    /// taken) or replaces the one last changed at `previous`.
    async fn save_event_type(&self, row: EventTypeRow, previous: Option<Timestamp>) -> StoreResult<()>;

    /// Removes an event type ([`StoreError::NotFound`] when there is none).
    async fn delete_event_type(&self, name: &str) -> StoreResult<()>;

    /// Keeps the answer of an idempotent request that wrote through another operation (the
    /// Svix API's creations): written after that write, so a crash between the two lets a
    /// retry with the key run again. A key already kept is left as it is.
    async fn save_idempotency(&self, record: IdempotencyRecord) -> StoreResult<()>;

    /// A page of a tenant's events with their `seq` (the cursor), newest first.
    async fn tenant_events(&self, query: EventQuery) -> StoreResult<Vec<(i64, Event)>>;

    /// A page of attempts, newest first.
    async fn attempts(&self, query: AttemptQuery) -> StoreResult<Vec<AttemptListRow>>;

    /// Removes data older than the retention windows, a bounded batch per call. Nodes sharing
    /// a store purge one at a time: a node that finds another purging removes nothing.
    async fn purge(&self, cutoffs: RetentionCutoffs) -> StoreResult<Purged>;

    /// Caps the database at `max_bytes` (None: only SQLite's own limit). A write that would
    /// grow it further fails with [`StoreError::Unavailable`] and keeps nothing. Applied by the
    /// writer between two commits, so it can be changed while running: raising the cap is how a
    /// full store gets room again. A cap below the current size holds the store at its size.
    async fn set_size_limit(&self, max_bytes: Option<u64>) -> StoreResult<()>;

    /// Seals every secret the store keeps under the current key, those sealed under a previous
    /// one (`storage.previous_encryption_keys`) included, and the check value with them, so
    /// that the previous keys can be dropped. Returns how many values were sealed again.
    async fn rekey(&self) -> StoreResult<u64>;

    /// Whether the store takes writes now (`GET /readyz`): [`StoreError::Unavailable`] with
    /// the reason while it does not — a full disk or size cap, an I/O error, a failed fsync, a
    /// database that does not answer, a store shutting down.
    async fn check_writable(&self) -> StoreResult<()>;

    /// Waits until every write submitted so far is committed, then stops the writer.
    async fn close(&self);

    /// The store's side of a cluster, when several nodes can share it (PostgreSQL); None for
    /// a store only one process can open (SQLite).
    fn cluster(self: Arc<Self>) -> Option<Arc<dyn ClusterStore>> {
        None
    }
}

/// `buckets` empty buckets of `width_ms` from `since`, for [`Store::activity`].
pub(crate) fn activity_buckets(since: Timestamp, width_ms: i64, buckets: u32) -> Vec<ActivityBucket> {
    (0..i64::from(buckets))
        .map(|i| ActivityBucket {
            start: Timestamp::from_millis(since.as_millis() + i * width_ms),
            ..ActivityBucket::default()
        })
        .collect()
}

/// Why [`Store::save_api_endpoint`] changed nothing.
pub(crate) fn api_endpoint_conflict(row: &ApiEndpointRow, replacing: bool) -> StoreError {
    let name = &row.name;
    if replacing {
        StoreError::Conflict(format!(
            "endpoint `{name}` was changed or deleted meanwhile; read it again and retry"
        ))
    } else {
        StoreError::Conflict(format!("an endpoint named `{name}` exists"))
    }
}

/// A create refused because another endpoint of the tenant has the uid.
pub(crate) fn api_endpoint_uid_taken(row: &ApiEndpointRow) -> StoreError {
    StoreError::Conflict(format!(
        "an endpoint with uid `{}` exists",
        row.uid.as_deref().unwrap_or_default()
    ))
}

/// Why a replacing write changed nothing: the row was changed or deleted since it was read.
pub(crate) fn changed_meanwhile(what: &str, key: &str) -> StoreError {
    StoreError::Conflict(format!(
        "{what} `{key}` was changed or deleted meanwhile; read it again and retry"
    ))
}

/// An attempt's exchange as both stores keep it: each header list a JSON array of
/// `[name, value]` pairs (NULL when empty), the response body as text.
pub(crate) struct ExchangeColumns {
    pub(crate) request_headers: Option<String>,
    pub(crate) response_headers: Option<String>,
    pub(crate) response_body: Option<String>,
}

impl ExchangeColumns {
    pub(crate) fn of(exchange: &Exchange) -> ExchangeColumns {
        let list = |headers: &[(String, String)]| {
            (!headers.is_empty()).then(|| serde_json::to_string(headers).unwrap_or_default())
        };
        ExchangeColumns {
            request_headers: list(&exchange.request_headers),
            response_headers: list(&exchange.response_headers),
            response_body: exchange.response_body.clone(),
        }
    }

    /// The exchange back; a list that does not parse (never written by the gateway) reads as
    /// empty rather than failing the whole delivery's read.
    pub(crate) fn into_exchange(self) -> Exchange {
        let list = |text: Option<String>| {
            text.and_then(|t| serde_json::from_str(&t).ok())
                .unwrap_or_default()
        };
        Exchange {
            request_headers: list(self.request_headers),
            response_headers: list(self.response_headers),
            response_body: self.response_body,
        }
    }
}

/// An event's trace as both stores keep it: the trace id and the ingestion span id, each
/// lowercase hex or NULL.
pub(crate) struct TraceColumns {
    pub(crate) trace_id: Option<String>,
    pub(crate) span_id: Option<String>,
}

impl TraceColumns {
    pub(crate) fn of(trace: Option<EventTrace>) -> TraceColumns {
        TraceColumns {
            trace_id: trace.map(|t| t.trace_id.to_string()),
            span_id: trace.and_then(|t| t.span_id).map(|s| s.to_string()),
        }
    }

    /// The trace back; ids that do not parse (never written by the gateway) read as none.
    pub(crate) fn into_trace(self) -> Option<EventTrace> {
        let trace_id = parse_trace_id(self.trace_id.as_deref())?;
        Some(EventTrace {
            trace_id,
            span_id: self
                .span_id
                .as_deref()
                .and_then(|s| SpanId::from_hex(s).ok())
                .filter(|s| *s != SpanId::INVALID),
        })
    }
}

/// A stored trace id: lowercase hex, or None.
pub(crate) fn parse_trace_id(text: Option<&str>) -> Option<TraceId> {
    text.and_then(|t| TraceId::from_hex(t).ok())
        .filter(|t| *t != TraceId::INVALID)
}

/// Checks both stores pass: what every [`Store`] must do, written once.
#[cfg(test)]
pub(crate) mod contract {
    use super::*;

    fn row(name: &str, spec: &str, version: u64, at: i64) -> ApiEndpointRow {
        ApiEndpointRow {
            name: name.into(),
            tenant: Some("acme".into()),
            spec: spec.into(),
            uid: None,
            retiring: None,
            version,
            created_at: Timestamp::from_millis(at),
            updated_at: Timestamp::from_millis(at),
        }
    }

    /// Created once per name; replaced only from the version it was read at; deleted once.
    pub(crate) async fn api_endpoint_writes(store: &dyn Store) {
        store.save_api_endpoint(row("a", "{}", 1, 1), None).await.unwrap();
        let taken = store.save_api_endpoint(row("a", "{}", 1, 1), None).await;
        assert!(matches!(taken, Err(StoreError::Conflict(_))), "{taken:?}");

        let mut changed = row("a", r#"{"url":"http://x"}"#, 2, 2);
        changed.retiring = Some(("whsec_b2xk".into(), Timestamp::from_millis(99)));
        store.save_api_endpoint(changed.clone(), Some(1)).await.unwrap();
        // A change based on what was there before the last one is refused, not applied.
        let stale = store.save_api_endpoint(row("a", "{}", 2, 3), Some(1)).await;
        assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
        let read = store.api_endpoint("a").await.unwrap().expect("stored");
        assert_eq!(read.spec, changed.spec);
        assert_eq!(read.retiring, changed.retiring);
        assert_eq!(read.version, 2);
        assert_eq!(read.created_at, Timestamp::from_millis(1));
        assert_eq!(read.updated_at, Timestamp::from_millis(2));

        store.delete_api_endpoint("a").await.unwrap();
        let gone = store.delete_api_endpoint("a").await;
        assert!(matches!(gone, Err(StoreError::NotFound(_))), "{gone:?}");
        assert!(store.api_endpoint("a").await.unwrap().is_none());
    }

    /// A uid is unique within its tenant: a second create with it is refused, in another tenant
    /// it is free, and it is free again once its endpoint is gone.
    pub(crate) async fn api_endpoint_uids(store: &dyn Store) {
        let with_uid = |name: &str, tenant: &str, uid: &str| ApiEndpointRow {
            tenant: Some(tenant.into()),
            uid: Some(uid.into()),
            ..row(name, "{}", 1, 1)
        };
        store
            .save_api_endpoint(with_uid("a", "acme", "main"), None)
            .await
            .unwrap();
        let taken = store.save_api_endpoint(with_uid("b", "acme", "main"), None).await;
        assert!(
            matches!(&taken, Err(StoreError::Conflict(m)) if m.contains("uid `main`")),
            "{taken:?}"
        );
        store
            .save_api_endpoint(with_uid("c", "globex", "main"), None)
            .await
            .unwrap();
        store.delete_api_endpoint("a").await.unwrap();
        store
            .save_api_endpoint(with_uid("b", "acme", "main"), None)
            .await
            .unwrap();
    }

    /// Pages by name in either direction, of one tenant or all: each endpoint once.
    pub(crate) async fn api_endpoint_pages(store: &dyn Store) {
        for (i, tenant) in ["acme", "globex", "acme", "acme", "globex"].iter().enumerate() {
            let r = ApiEndpointRow {
                tenant: Some((*tenant).into()),
                ..row(&format!("e{i}"), "{}", 1, 1)
            };
            store.save_api_endpoint(r, None).await.unwrap();
        }
        let names = |rows: Vec<ApiEndpointRow>| rows.into_iter().map(|r| r.name).collect::<Vec<_>>();
        let page = |tenant: Option<&str>, after: Option<&str>, limit, descending| EndpointPage {
            tenant: tenant.map(str::to_owned),
            after: after.map(str::to_owned),
            limit,
            descending,
        };
        let first = store.api_endpoint_page(page(None, None, 2, false)).await.unwrap();
        assert_eq!(names(first), ["e0", "e1"]);
        let next = store
            .api_endpoint_page(page(None, Some("e1"), 10, false))
            .await
            .unwrap();
        assert_eq!(names(next), ["e2", "e3", "e4"]);
        let acme = store
            .api_endpoint_page(page(Some("acme"), Some("e0"), 10, false))
            .await
            .unwrap();
        assert_eq!(names(acme), ["e2", "e3"]);
        let back = store
            .api_endpoint_page(page(Some("acme"), Some("e3"), 10, true))
            .await
            .unwrap();
        assert_eq!(names(back), ["e2", "e0"]);
        let last = store.api_endpoint_page(page(None, None, 1, true)).await.unwrap();
        assert_eq!(names(last), ["e4"]);
    }
}

/// Every endpoint created through the API, in one list: for tests of a store's few rows.
#[cfg(test)]
pub(crate) async fn every_api_endpoint(store: &dyn Store) -> Vec<ApiEndpointRow> {
    let page = EndpointPage {
        limit: 10_000,
        ..EndpointPage::default()
    };
    store.api_endpoint_page(page).await.unwrap()
}

#[cfg(test)]
pub(crate) mod svix_contract {
    //! What every [`Store`] must do for the Svix API and the event type catalog.
    use super::*;

    fn app(id: &str, uid: Option<&str>, at: i64) -> ApplicationRow {
        ApplicationRow {
            id: id.into(),
            uid: uid.map(str::to_owned),
            tenant: uid.unwrap_or(id).into(),
            name: format!("app {id}"),
            metadata: r#"{"plan":"pro"}"#.into(),
            rate_limit: Some(20),
            created_at: Timestamp::from_millis(at),
            updated_at: Timestamp::from_millis(at),
        }
    }

    /// Found by id, uid or tenant; ids, uids and tenants are unique; replaced only from the
    /// version read; listed by id after a cursor; deleted once.
    pub(crate) async fn applications(store: &dyn Store) {
        store
            .save_application(app("app_b", Some("acme"), 1), None)
            .await
            .unwrap();
        store.save_application(app("app_a", None, 1), None).await.unwrap();
        for clash in [app("app_b", None, 1), app("app_c", Some("acme"), 1)] {
            let taken = store.save_application(clash, None).await;
            assert!(matches!(taken, Err(StoreError::Conflict(_))), "{taken:?}");
        }
        for key in ["app_b", "acme"] {
            assert_eq!(store.application(key).await.unwrap().unwrap().id, "app_b");
        }
        assert!(store.application("nope").await.unwrap().is_none());

        let mut renamed = app("app_b", Some("acme-2"), 2);
        renamed.tenant = "acme".into();
        renamed.rate_limit = None;
        store
            .save_application(renamed.clone(), Some(Timestamp::from_millis(1)))
            .await
            .unwrap();
        let stale = store
            .save_application(renamed.clone(), Some(Timestamp::from_millis(1)))
            .await;
        assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
        let read = store.application("acme-2").await.unwrap().unwrap();
        assert_eq!(
            read,
            ApplicationRow {
                created_at: Timestamp::from_millis(1),
                ..renamed
            }
        );
        // The tenant stays what it was made with, and finds it still.
        assert_eq!(store.application("acme").await.unwrap().unwrap().id, "app_b");

        let ids = |rows: Vec<ApplicationRow>| rows.into_iter().map(|r| r.id).collect::<Vec<_>>();
        assert_eq!(
            ids(store.applications(None, 10, false).await.unwrap()),
            ["app_a", "app_b"]
        );
        assert_eq!(ids(store.applications(None, 1, false).await.unwrap()), ["app_a"]);
        assert_eq!(
            ids(store.applications(Some("app_a".into()), 10, false).await.unwrap()),
            ["app_b"]
        );
        assert_eq!(
            ids(store.applications(None, 10, true).await.unwrap()),
            ["app_b", "app_a"]
        );
        assert_eq!(
            ids(store.applications(Some("app_b".into()), 10, true).await.unwrap()),
            ["app_a"]
        );

        store.delete_application("app_b").await.unwrap();
        let gone = store.delete_application("app_b").await;
        assert!(matches!(gone, Err(StoreError::NotFound(_))), "{gone:?}");
        assert_eq!(ids(store.applications(None, 10, false).await.unwrap()), ["app_a"]);
    }

    fn event_type(name: &str, archived: bool, at: i64) -> EventTypeRow {
        EventTypeRow {
            name: name.into(),
            description: format!("{name} happened"),
            archived,
            deprecated: false,
            schemas: Some(r#"{"1":{"type":"object"}}"#.into()),
            feature_flags: None,
            group_name: Some("users".into()),
            created_at: Timestamp::from_millis(at),
            updated_at: Timestamp::from_millis(at),
        }
    }

    /// Created once per name, replaced only from the version read, listed by name (archived
    /// ones on request), deleted once.
    pub(crate) async fn event_types(store: &dyn Store) {
        store
            .save_event_type(event_type("user.signup", false, 1), None)
            .await
            .unwrap();
        store
            .save_event_type(event_type("user.deleted", true, 1), None)
            .await
            .unwrap();
        let taken = store
            .save_event_type(event_type("user.signup", false, 1), None)
            .await;
        assert!(matches!(taken, Err(StoreError::Conflict(_))), "{taken:?}");

        let mut changed = event_type("user.signup", false, 2);
        changed.deprecated = true;
        changed.schemas = None;
        store
            .save_event_type(changed.clone(), Some(Timestamp::from_millis(1)))
            .await
            .unwrap();
        let stale = store
            .save_event_type(changed.clone(), Some(Timestamp::from_millis(1)))
            .await;
        assert!(matches!(stale, Err(StoreError::Conflict(_))), "{stale:?}");
        assert_eq!(
            store.event_type("user.signup").await.unwrap().unwrap(),
            EventTypeRow {
                created_at: Timestamp::from_millis(1),
                ..changed
            }
        );

        // The names of a page: from `after`, at most `limit`, archived ones too or not, by
        // name forward or (`descending`) back.
        let listed = |after: Option<&str>, limit: u32, archived: bool, descending: bool| {
            let after = after.map(str::to_owned);
            async move {
                let rows = store
                    .event_types(after, limit, archived, descending)
                    .await
                    .unwrap();
                rows.into_iter().map(|r| r.name).collect::<Vec<_>>()
            }
        };
        assert_eq!(listed(None, 10, false, false).await, ["user.signup"]);
        assert_eq!(
            listed(None, 10, true, false).await,
            ["user.deleted", "user.signup"]
        );
        assert_eq!(
            listed(Some("user.deleted"), 10, true, false).await,
            ["user.signup"]
        );
        // Back from a name: the names before it, nearest first.
        assert_eq!(
            listed(Some("user.signup"), 10, true, true).await,
            ["user.deleted"]
        );
        assert_eq!(listed(None, 1, true, true).await, ["user.signup"]);

        store.delete_event_type("user.signup").await.unwrap();
        let gone = store.delete_event_type("user.signup").await;
        assert!(matches!(gone, Err(StoreError::NotFound(_))), "{gone:?}");
        assert!(store.event_type("user.signup").await.unwrap().is_none());
    }

    /// The newest matching events of a window come newest first, at most `limit` of them,
    /// from at most `scan` of the window's newest events (a content filter tried on recent
    /// events).
    pub(crate) async fn latest_events(store: &dyn Store) {
        let on_topic = |id: &str, event_type: &str, at: i64| {
            let mut item = event(id, "acme", event_type, at);
            let mut e = (*item.event).clone();
            e.topic = "filters".into();
            item.event = Arc::new(e);
            item
        };
        let batch = IngestBatch {
            items: vec![
                on_topic("l1", "a", 10),
                on_topic("l2", "b", 20),
                on_topic("l3", "a", 30),
                on_topic("l4", "b", 40),
            ],
            idempotency: None,
            now: Timestamp::from_millis(40),
        };
        store.ingest(batch).await.unwrap();
        let latest = |since: i64, limit: u32, scan: u32| async move {
            let window = ReplayWindow {
                topics: vec!["filters".into()],
                since: Timestamp::from_millis(since),
                until: Timestamp::from_millis(100),
                matches: Arc::new(|e: &Event| e.event_type == "a"),
            };
            let found = store.latest_events(window, limit, scan).await.unwrap();
            found.iter().map(|e| e.id.clone()).collect::<Vec<_>>()
        };
        assert_eq!(latest(0, 10, 10).await, ["l3", "l1"]);
        assert_eq!(latest(0, 1, 10).await, ["l3"]);
        assert_eq!(latest(0, 10, 2).await, ["l3"], "only the newest two are read");
        assert!(latest(0, 10, 1).await.is_empty());
        assert_eq!(latest(15, 10, 10).await, ["l3"]);
    }

    fn event(id: &str, tenant: &str, event_type: &str, at: i64) -> IngestItem {
        IngestItem {
            event: Arc::new(Event {
                id: id.into(),
                topic: "svix".into(),
                event_type: event_type.into(),
                content_type: "application/json".into(),
                payload: Bytes::from_static(b"{}"),
                ordering_key: None,
                received_at: Timestamp::from_millis(at),
                tenant: Some(tenant.into()),
                trace: None,
                labels: EventLabels {
                    channels: vec!["eu".into()],
                    tags: vec!["t1".into()],
                    event_id: Some(format!("app-{id}")),
                    expunged: false,
                },
            }),
            endpoints: vec![Target {
                endpoint: Arc::from(format!("ep-{tenant}")),
                tenant: Some(Arc::from(tenant)),
                ordered: false,
            }],
        }
    }

    /// The failed first attempt of `delivery`, the `n`th of a test: HTTP `500 + n`.
    fn failed_attempt(delivery: DeliveryId, n: usize) -> StateChange {
        StateChange::Attempt(AttemptWrite {
            delivery,
            round: 1,
            attempt: Attempt {
                n: 1,
                started_at: Timestamp::from_millis(50 + n as i64),
                duration_ms: 3,
                status_code: Some(500 + n as u16),
                error_kind: Some(ErrorKind::HttpStatus),
                error: None,
                exchange: Exchange {
                    response_body: Some(format!("body {n}")),
                    ..Exchange::default()
                },
                trace_id: None,
            },
            plugin_note: None,
            status: DeliveryStatus::Failed,
            next_attempt_at: None,
            last_error: Some("HTTP 500".into()),
        })
    }

    /// An expunged event keeps its row (its deliveries and attempts still list it) without
    /// its payload, and its labels say so; an unknown event is not expunged.
    pub(crate) async fn expunged_payloads(store: &dyn Store) {
        let batch = IngestBatch {
            items: vec![event("x1", "hooli", "a", 1)],
            idempotency: None,
            now: Timestamp::from_millis(1),
        };
        store.ingest(batch).await.unwrap();
        let mut labels = store.event("x1", Some("svix")).await.unwrap()[0].labels.clone();
        labels.expunged = true;
        assert!(store.expunge_payload("svix", "x1", &labels).await.unwrap());
        let expunged = store.event("x1", Some("svix")).await.unwrap().remove(0);
        assert!(expunged.payload.is_empty());
        assert!(expunged.labels.expunged);
        assert_eq!(expunged.labels.event_id.as_deref(), Some("app-x1"));
        assert!(!store.expunge_payload("svix", "nope", &labels).await.unwrap());
    }

    /// The lists the Svix API pages both ways read back from a cursor too (`after`): the rows
    /// newer than it, oldest first, so that the nearest come first; `before` still reads on.
    pub(crate) async fn pages_read_back_from_a_cursor(store: &dyn Store) {
        let items = ["p1", "p2", "p3", "p4"];
        let batch = IngestBatch {
            items: items
                .iter()
                .enumerate()
                .map(|(n, id)| event(id, "initech", "a", n as i64))
                .collect(),
            idempotency: None,
            now: Timestamp::from_millis(10),
        };
        let IngestOutcome::Committed(ready) = store.ingest(batch).await.unwrap() else {
            panic!("a fresh batch is committed")
        };
        let events = |after, before| EventQuery {
            tenant: "initech".into(),
            after,
            before,
            limit: 2,
            ..EventQuery::default()
        };
        let all = store.tenant_events(events(None, None)).await.unwrap();
        let ids = |rows: &[(i64, Event)]| rows.iter().map(|(_, e)| e.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&all), ["p4", "p3"]);
        let older = store.tenant_events(events(None, Some(all[1].0))).await.unwrap();
        assert_eq!(ids(&older), ["p2", "p1"]);
        let (p1, p4) = (older[1].0, all[0].0);
        let back = store.tenant_events(events(Some(p1), None)).await.unwrap();
        assert_eq!(ids(&back), ["p2", "p3"]);
        let between = store.tenant_events(events(Some(p1), Some(p4))).await.unwrap();
        assert_eq!(ids(&between), ["p2", "p3"]);

        let deliveries = |after: Option<DeliveryId>| DeliveryFilter {
            tenant: Some("initech".into()),
            after,
            limit: 2,
            ..DeliveryFilter::default()
        };
        let first = ready.iter().map(|d| d.id).min().unwrap();
        let back = store.deliveries(deliveries(Some(first))).await.unwrap();
        let of = |rows: &[DeliveryRow]| rows.iter().map(|d| d.event_id.clone()).collect::<Vec<_>>();
        assert_eq!(of(&back), ["p2", "p3"]);
        assert_eq!(
            of(&store.deliveries(deliveries(None)).await.unwrap()),
            ["p4", "p3"]
        );

        let changes: Vec<_> = ready
            .iter()
            .enumerate()
            .map(|(n, d)| failed_attempt(d.id, n))
            .collect();
        store.apply(changes.into()).await.unwrap();
        let attempts = |after, before| AttemptQuery {
            tenant: Some("initech".into()),
            after,
            before,
            limit: 2,
            ..AttemptQuery::default()
        };
        let newest = store.attempts(attempts(None, None)).await.unwrap();
        let events_of = |rows: &[AttemptListRow]| rows.iter().map(|a| a.event_id.clone()).collect::<Vec<_>>();
        assert_eq!(events_of(&newest), ["p4", "p3"]);
        let older = store.attempts(attempts(None, Some(newest[1].id))).await.unwrap();
        assert_eq!(events_of(&older), ["p2", "p1"]);
        let back = store.attempts(attempts(Some(older[1].id), None)).await.unwrap();
        assert_eq!(events_of(&back), ["p2", "p3"]);
    }

    /// A tenant's events come newest first, paged by their `seq`, filtered by type and time,
    /// labels intact; attempts come newest first by event, endpoint or tenant.
    pub(crate) async fn tenant_events_and_attempts(store: &dyn Store) {
        let batch = IngestBatch {
            items: vec![
                event("m1", "acme", "a", 10),
                event("m2", "acme", "b", 20),
                event("m3", "globex", "a", 30),
                event("m4", "acme", "a", 40),
            ],
            idempotency: None,
            now: Timestamp::from_millis(40),
        };
        let IngestOutcome::Committed(ready) = store.ingest(batch).await.unwrap() else {
            panic!("a fresh batch is committed")
        };
        let page = |before: Option<i64>, types: &[&str], since: Option<i64>| EventQuery {
            tenant: "acme".into(),
            before,
            since: since.map(Timestamp::from_millis),
            event_types: types.iter().map(|t| t.to_string()).collect(),
            limit: 2,
            ..EventQuery::default()
        };
        let first = store.tenant_events(page(None, &[], None)).await.unwrap();
        let ids = |rows: &[(i64, Event)]| rows.iter().map(|(_, e)| e.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&first), ["m4", "m2"]);
        assert_eq!(first[0].1.labels.event_id.as_deref(), Some("app-m4"));
        assert_eq!(first[0].1.labels.channels, ["eu"]);
        let second = store
            .tenant_events(page(Some(first[1].0), &[], None))
            .await
            .unwrap();
        assert_eq!(ids(&second), ["m1"]);
        assert_eq!(
            ids(&store.tenant_events(page(None, &["a"], None)).await.unwrap()),
            ["m4", "m1"]
        );
        assert_eq!(
            ids(&store.tenant_events(page(None, &[], Some(15))).await.unwrap()),
            ["m4", "m2"]
        );

        let changes: Vec<_> = ready
            .iter()
            .enumerate()
            .map(|(n, d)| failed_attempt(d.id, n))
            .collect();
        store.apply(changes.into()).await.unwrap();
        let all =
            |q: AttemptQuery| async move { store.attempts(AttemptQuery { limit: 10, ..q }).await.unwrap() };
        let of_acme = all(AttemptQuery {
            tenant: Some("acme".into()),
            ..AttemptQuery::default()
        })
        .await;
        let events: Vec<&str> = of_acme.iter().map(|a| a.event_id.as_str()).collect();
        assert_eq!(events, ["m4", "m2", "m1"]);
        assert_eq!(of_acme[0].attempt.status_code, Some(503));
        assert_eq!(
            of_acme[0].attempt.exchange.response_body.as_deref(),
            Some("body 3")
        );
        assert_eq!(of_acme[0].endpoint, "ep-acme");
        let of_m2 = all(AttemptQuery {
            event_id: Some("m2".into()),
            ..AttemptQuery::default()
        })
        .await;
        assert_eq!(of_m2.len(), 1);
        let older = all(AttemptQuery {
            endpoint: Some("ep-acme".into()),
            before: Some(of_acme[0].id),
            ..AttemptQuery::default()
        })
        .await;
        assert_eq!(
            older.iter().map(|a| a.event_id.as_str()).collect::<Vec<_>>(),
            ["m2", "m1"]
        );
    }
}

#[cfg(test)]
mod tests {
    use rusqlite::ffi;

    use super::StoreError;

    fn sqlite_error(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(ffi::Error::new(code), None)
    }

    /// A start's read waits out a database that blinks (unavailable, then busy, then there),
    /// gives up after its patience, and never retries an answer that is not about the moment.
    #[tokio::test(start_paused = true)]
    async fn a_start_s_read_waits_out_a_blink_of_the_database_but_not_for_ever() {
        use std::sync::atomic::{AtomicU32, Ordering};
        use std::time::Duration;

        let tries = AtomicU32::new(0);
        let blink = super::patiently("a read", Duration::from_secs(30), || async {
            match tries.fetch_add(1, Ordering::SeqCst) {
                0 => Err(StoreError::Unavailable("connection closed".into())),
                1 => Err(StoreError::Overloaded("no connection free".into())),
                _ => Ok(7),
            }
        })
        .await;
        assert_eq!(blink.unwrap(), 7);
        assert_eq!(tries.load(Ordering::SeqCst), 3);

        let started = tokio::time::Instant::now();
        let down = super::patiently("a read", Duration::from_secs(30), || async {
            Err::<u32, _>(StoreError::Unavailable("connection refused".into()))
        })
        .await;
        assert!(matches!(down, Err(StoreError::Unavailable(_))));
        let waited = started.elapsed();
        assert!(
            waited <= Duration::from_secs(30) && waited >= Duration::from_secs(20),
            "{waited:?}"
        );

        let tries = AtomicU32::new(0);
        let broken = super::patiently("a read", Duration::from_secs(30), || async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err::<u32, _>(StoreError::Internal("no such table".into()))
        })
        .await;
        assert!(matches!(broken, Err(StoreError::Internal(_))));
        assert_eq!(tries.load(Ordering::SeqCst), 1);
    }

    /// A disk that cannot take a write is a condition to wait out (503 with `Retry-After`), not
    /// an internal error.
    #[test]
    fn disk_full_and_io_errors_are_unavailable() {
        for code in [
            ffi::SQLITE_FULL,
            ffi::SQLITE_IOERR,
            ffi::SQLITE_IOERR_WRITE,
            ffi::SQLITE_IOERR_FSYNC,
            ffi::SQLITE_READONLY,
        ] {
            assert!(
                matches!(StoreError::from(sqlite_error(code)), StoreError::Unavailable(_)),
                "code {code}"
            );
        }
        assert!(matches!(
            StoreError::from(sqlite_error(ffi::SQLITE_CONSTRAINT)),
            StoreError::Internal(_)
        ));
    }
}
