//! The PostgreSQL store: the same [`Store`] as SQLite, on a database several gateway nodes can
//! reach. Every write is one transaction on a pooled connection; concurrent ingestion requests
//! share one (`group.rs`), as they share a commit of the SQLite writer. Health inputs lock their endpoint's row
//! (`FOR UPDATE`), idempotency keys take a transaction-scoped advisory lock, so both stay right
//! when writers race.
//!
//! The tables live in the connection's current schema (`public` unless the URL sets
//! `options=-c search_path=…`), so one database can hold several independent gateways.
//!
//! Several nodes may share one schema (a cluster): `cluster.rs` keeps the node list and the
//! endpoint leases, and every write that makes deliveries pending or changes an endpoint's
//! state sends a notice (`NOTIFY`, delivered with the commit) that the other nodes listen for.

mod cluster;
mod copy;
mod group;
mod keys;
mod ordering;
mod schema;

pub use copy::{CopyProgress, copy_sqlite_to_postgres};

use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use deadpool_postgres::{
    GenericClient, Manager, ManagerConfig, Object, Pool, PoolError, RecyclingMethod, Runtime,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row};

use super::seal::Sealer;
use super::*;
use crate::health::EndpointHealth;
use crate::model::{Attempt, EndpointState};
use crate::telemetry::Metrics;

/// How long a write waits for a pooled connection before it is refused.
const POOL_WAIT: Duration = Duration::from_secs(5);
/// How long the readiness probe waits for the database's answer: a node that cannot get one
/// that soon would keep an event's client waiting as long.
const READY_WAIT: Duration = Duration::from_secs(3);
/// Connections a store opens at most, unless told otherwise (`storage.max_connections`).
pub const DEFAULT_MAX_CONNECTIONS: usize = 16;

/// The connections each node keeps for heartbeats and lease calls, besides `max_connections`
/// and the one that listens for notices: the turn's and the keeper's (`crate::cluster`).
const LEASE_CONNECTIONS: usize = 2;

pub struct PgStore {
    pool: Pool,
    /// Connections of their own for the cluster's heartbeats and lease calls, so that they
    /// never wait behind ingestion for a pooled connection (a slow or saturated database):
    /// [`LEASE_CONNECTIONS`], one for the node's turn and one for its keeper, so that the
    /// keeper renews the leases even while a turn's lease transaction waits for the lock that
    /// moves leases (behind ingestion groups that rely on them).
    lease_pool: Pool,
    /// How long each write transaction's commit took, as the SQLite writer records its groups.
    commit_seconds: metrics::Histogram,
    /// Concurrent ingestion requests, committed together.
    groups: group::Groups,
    /// This node's id, which its notices carry so that it can ignore its own.
    node_id: String,
    /// The `NOTIFY` channel of this schema's nodes.
    channel: String,
    config: tokio_postgres::Config,
    /// Seals the secrets written and opens the ones read.
    sealer: Arc<Sealer>,
}

impl From<tokio_postgres::Error> for StoreError {
    fn from(e: tokio_postgres::Error) -> Self {
        let Some(code) = e.code() else {
            // No SQL state: the connection itself failed or closed.
            return StoreError::Unavailable(format!("postgres: {e}"));
        };
        // The server's message says what went wrong; the error's own text is only "db error".
        let e = e.as_db_error().map_or_else(|| e.to_string(), |db| db.to_string());
        let class = &code.code()[..2];
        let unavailable = matches!(class, "08" | "53" | "57")
            || *code == SqlState::READ_ONLY_SQL_TRANSACTION
            || *code == SqlState::T_R_SERIALIZATION_FAILURE
            // Two writers inserting the same events in opposite orders: one of them is rolled
            // back, and trying again is the client's answer, as for a serialization failure.
            || *code == SqlState::T_R_DEADLOCK_DETECTED;
        if unavailable {
            StoreError::Unavailable(format!("postgres: {e}"))
        } else {
            StoreError::Internal(format!("postgres: {e}"))
        }
    }
}

impl From<PoolError> for StoreError {
    fn from(e: PoolError) -> Self {
        match e {
            PoolError::Backend(e) => e.into(),
            PoolError::Timeout(_) => {
                StoreError::Overloaded(format!("no database connection free within {POOL_WAIT:?}"))
            }
            other => StoreError::Unavailable(format!("postgres pool: {other}")),
        }
    }
}

impl PgStore {
    /// Connects to `url` as node `node_id`, checks that `sealer`'s keys are the database's,
    /// and runs the migrations (once, under an advisory lock). The URL is a secret (it may
    /// hold a password): it is never logged.
    pub async fn open(url: &str, metrics: &Metrics, node_id: &str, sealer: Sealer) -> StoreResult<PgStore> {
        PgStore::open_with(url, metrics, node_id, DEFAULT_MAX_CONNECTIONS, sealer).await
    }

    /// Like [`PgStore::open`], with at most `pool_size` pooled connections (one more listens
    /// for the other nodes' notices).
    pub async fn open_with(
        url: &str,
        metrics: &Metrics,
        node_id: &str,
        pool_size: usize,
        sealer: Sealer,
    ) -> StoreResult<PgStore> {
        let mut config = tokio_postgres::Config::from_str(url)
            .map_err(|e| StoreError::Internal(format!("storage.url is not a PostgreSQL URL: {e}")))?;
        detect_dead_connections(&mut config);
        let (mut client, connection) = config.connect(NoTls).await?;
        let driver = tokio::spawn(connection);
        // The key before the migrations: a node with another key writes nothing.
        keys::check_key(&client, &sealer).await?;
        schema::migrate(&mut client).await?;
        keys::seal_plaintext(&mut client, &sealer).await?;
        let schema: String = client.query_one("SELECT current_schema()", &[]).await?.get(0);
        drop(client);
        let _ = driver.await;
        let manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(pool_size.max(1))
            .wait_timeout(Some(POOL_WAIT))
            .create_timeout(Some(POOL_WAIT))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Internal(format!("postgres pool: {e}")))?;
        let lease_manager = Manager::from_config(
            config.clone(),
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let lease_pool = Pool::builder(lease_manager)
            .max_size(LEASE_CONNECTIONS)
            .wait_timeout(Some(cluster::LEASE_CALL_TIMEOUT))
            .create_timeout(Some(cluster::LEASE_CALL_TIMEOUT))
            .runtime(Runtime::Tokio1)
            .build()
            .map_err(|e| StoreError::Internal(format!("postgres pool: {e}")))?;
        Ok(PgStore {
            pool,
            lease_pool,
            commit_seconds: metrics.writer_commit(),
            groups: group::Groups::new(pool_size, metrics.writer_batch_size()),
            node_id: node_id.to_owned(),
            channel: format!("hookgate_{schema}"),
            config,
            sealer: Arc::new(sealer),
        })
    }

    async fn conn(&self) -> StoreResult<Object> {
        Ok(self.pool.get().await?)
    }

    async fn commit(&self, tx: deadpool_postgres::Transaction<'_>) -> StoreResult<()> {
        let started = std::time::Instant::now();
        tx.commit().await?;
        self.commit_seconds.record(started.elapsed().as_secs_f64());
        Ok(())
    }

    /// Deletes the row of `table` whose `column` is `key`; [`StoreError::NotFound`] names it as
    /// `what` when there is none. (`table` and `column` are the caller's literals.)
    async fn delete_row(&self, table: &str, column: &str, key: &str, what: &str) -> StoreResult<()> {
        let conn = self.conn().await?;
        let sql = format!("DELETE FROM {table} WHERE {column} = $1");
        if execute(&conn, &sql, &[&key]).await? == 0 {
            return Err(StoreError::NotFound(format!("{what} `{key}`")));
        }
        Ok(())
    }
}

/// Unless the URL says otherwise, a connection whose peer stopped answering (a network
/// partition that drops packets, a database host that froze) is found dead within seconds and
/// closed, instead of holding its request, and a pooled connection, until the kernel gives up
/// after many minutes: connects time out, idle connections are probed, and data left
/// unacknowledged fails the connection.
fn detect_dead_connections(config: &mut tokio_postgres::Config) {
    if config.get_connect_timeout().is_none() {
        config.connect_timeout(Duration::from_secs(5));
    }
    if config.get_tcp_user_timeout().is_none() {
        config.tcp_user_timeout(Duration::from_secs(10));
    }
    if config.get_keepalives_idle() == Duration::from_secs(2 * 60 * 60) {
        config.keepalives_idle(Duration::from_secs(10));
    }
}

fn u(v: i64) -> u32 {
    u32::try_from(v).unwrap_or(u32::MAX)
}

fn ts(row: &Row, idx: usize) -> Timestamp {
    Timestamp::from_millis(row.get(idx))
}

fn opt_ts(row: &Row, idx: usize) -> Option<Timestamp> {
    row.get::<_, Option<i64>>(idx).map(Timestamp::from_millis)
}

fn api_endpoint_from_row(r: &Row) -> ApiEndpointRow {
    ApiEndpointRow {
        name: r.get(0),
        tenant: r.get(1),
        spec: r.get(2),
        uid: r.get(3),
        retiring: r.get::<_, Option<String>>(4).zip(opt_ts(r, 5)),
        version: r.get::<_, i64>(6).max(1) as u64,
        created_at: ts(r, 7),
        updated_at: ts(r, 8),
    }
}

fn parse<T: FromStr>(row: &Row, idx: usize) -> StoreResult<T> {
    let text: &str = row.get(idx);
    text.parse()
        .map_err(|_| StoreError::Internal(format!("bad value `{text}` in the database")))
}

/// Adds `n` deliveries that ended in `status` to bucket `i`.
fn count_activity(buckets: &mut [ActivityBucket], i: i64, status: &str, n: i64) {
    let Some(bucket) = usize::try_from(i).ok().and_then(|i| buckets.get_mut(i)) else {
        return;
    };
    let n = n.max(0) as u64;
    match status {
        "succeeded" => bucket.succeeded += n,
        _ => bucket.failed += n,
    }
}

fn millis(t: Option<Timestamp>) -> Option<i64> {
    t.map(Timestamp::as_millis)
}

pub(super) const EVENT_COLUMNS: &str = "e.id, e.topic, e.event_type, e.content_type, e.payload, e.ordering_key, e.received_at, \
     e.tenant, e.trace_id, e.trace_span_id, e.labels";
/// How many columns [`EVENT_COLUMNS`] names: a column selected after them has this index.
const EVENT_COLUMN_COUNT: usize = 11;

pub(super) fn event_from_row(row: &Row, first: usize) -> Event {
    Event {
        id: row.get(first),
        topic: row.get(first + 1),
        event_type: row.get(first + 2),
        content_type: row.get(first + 3),
        payload: Bytes::from(row.get::<_, Vec<u8>>(first + 4)),
        ordering_key: row.get(first + 5),
        received_at: ts(row, first + 6),
        tenant: row.get(first + 7),
        trace: TraceColumns {
            trace_id: row.get(first + 8),
            span_id: row.get(first + 9),
        }
        .into_trace(),
        labels: EventLabels::from_column(row.get::<_, Option<&str>>(first + 10)),
    }
}

const DELIVERY_COLUMNS: &str = "d.id, e.id, e.topic, e.event_type, d.endpoint, d.status, d.round, d.attempt_count, \
     d.next_attempt_at, d.last_error, d.created_at, d.updated_at, d.tenant";

fn delivery_from_row(row: &Row) -> StoreResult<DeliveryRow> {
    Ok(DeliveryRow {
        id: DeliveryId(row.get(0)),
        event_id: row.get(1),
        topic: row.get(2),
        event_type: row.get(3),
        endpoint: row.get(4),
        status: parse(row, 5)?,
        round: u(row.get(6)),
        attempt_count: u(row.get(7)),
        next_attempt_at: opt_ts(row, 8),
        last_error: row.get(9),
        created_at: ts(row, 10),
        updated_at: ts(row, 11),
        tenant: row.get(12),
    })
}

fn health_from_row(row: &Row, first: usize) -> StoreResult<EndpointHealth> {
    Ok(EndpointHealth {
        state: parse::<EndpointState>(row, first)?,
        consecutive_failures: u(row.get(first + 1)),
        failing_since: opt_ts(row, first + 2),
        last_success_at: opt_ts(row, first + 3),
        changed_at: opt_ts(row, first + 4),
    })
}

/// The advisory lock a purge holds for its transaction: one per schema.
const PURGE_LOCK: &str = "hashtextextended('hookgate-purge:' || current_schema(), 0)";

/// Pending deliveries as the scheduler takes them in; a caller adds `AND …` and the order.
const PENDING_SELECT: &str = "SELECT d.id, d.endpoint, d.next_attempt_at, d.round, d.attempt_count, \
     e.ordering_key, d.round_started_at FROM deliveries d JOIN events e ON e.seq = d.event_seq \
     WHERE d.status = 'pending'";

fn pending_from_rows(rows: &[Row]) -> Vec<PendingDelivery> {
    // Endpoint names repeat on every row; share one allocation per name.
    let mut names: std::collections::HashMap<String, Arc<str>> = Default::default();
    rows.iter()
        .map(|row| {
            let endpoint: String = row.get(1);
            let round_started_at = ts(row, 6);
            PendingDelivery {
                id: DeliveryId(row.get(0)),
                endpoint: names
                    .entry(endpoint)
                    .or_insert_with_key(|k| Arc::from(k.as_str()))
                    .clone(),
                next_attempt_at: opt_ts(row, 2).unwrap_or(round_started_at),
                round: u(row.get(3)),
                attempts_made: u(row.get(4)),
                ordering_key: row.get(5),
                round_started_at,
            }
        })
        .collect()
}

/// The attempt columns `n, started_at, duration_ms, status_code, error_kind, error, plugin_note,
/// request_headers, response_headers, response_body, trace_id` from `first` on.
fn attempt_from_row(r: &Row, first: usize) -> StoreResult<Attempt> {
    let error_kind = r
        .get::<_, Option<&str>>(first + 4)
        .map(str::parse::<ErrorKind>)
        .transpose()
        .map_err(|e| StoreError::Internal(format!("bad error kind in the database: {e}")))?;
    Ok(Attempt {
        n: u(r.get(first)),
        started_at: ts(r, first + 1),
        duration_ms: r.get::<_, i64>(first + 2).max(0) as u64,
        status_code: r
            .get::<_, Option<i64>>(first + 3)
            .and_then(|c| u16::try_from(c).ok()),
        error_kind,
        error: r.get(first + 5),
        exchange: ExchangeColumns {
            request_headers: r.get(first + 7),
            response_headers: r.get(first + 8),
            response_body: r.get(first + 9),
        }
        .into_exchange(),
        trace_id: parse_trace_id(r.get::<_, Option<&str>>(first + 10)),
    })
}

const APPLICATION_COLUMNS: &str = "id, uid, tenant, name, metadata, rate_limit, created_at, updated_at";

fn application_from_row(r: &Row) -> ApplicationRow {
    ApplicationRow {
        id: r.get(0),
        uid: r.get(1),
        tenant: r.get(2),
        name: r.get(3),
        metadata: r.get(4),
        rate_limit: r.get::<_, Option<i64>>(5).and_then(|n| u32::try_from(n).ok()),
        created_at: ts(r, 6),
        updated_at: ts(r, 7),
    }
}

const EVENT_TYPE_COLUMNS: &str =
    "name, description, archived, deprecated, schemas, feature_flags, group_name, created_at, updated_at";

fn event_type_from_row(r: &Row) -> EventTypeRow {
    EventTypeRow {
        name: r.get(0),
        description: r.get(1),
        archived: r.get(2),
        deprecated: r.get(3),
        schemas: r.get(4),
        feature_flags: r.get(5),
        group_name: r.get(6),
        created_at: ts(r, 7),
        updated_at: ts(r, 8),
    }
}

/// A unique column taken: the write changed nothing.
fn taken(e: StoreError, what: &str) -> StoreError {
    match e {
        StoreError::Internal(message) if message.contains("duplicate key") => {
            StoreError::Conflict(format!("{what} exists"))
        }
        other => other,
    }
}

async fn query<C: GenericClient>(c: &C, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<Vec<Row>> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query(&stmt, params).await?)
}

async fn query_opt<C: GenericClient>(
    c: &C,
    sql: &str,
    params: &[&(dyn ToSql + Sync)],
) -> StoreResult<Option<Row>> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.query_opt(&stmt, params).await?)
}

async fn execute<C: GenericClient>(c: &C, sql: &str, params: &[&(dyn ToSql + Sync)]) -> StoreResult<u64> {
    let stmt = c.prepare_cached(sql).await?;
    Ok(c.execute(&stmt, params).await?)
}

/// Serialises the writers of one idempotency key until the end of the transaction, then looks
/// it up: a second node (or request) with the same key waits and finds the first answer.
async fn idempotency_locked<C: GenericClient>(
    c: &C,
    sealer: &Sealer,
    scope: &str,
    key: &str,
) -> StoreResult<Option<IdempotencyRecord>> {
    execute(
        c,
        "SELECT pg_advisory_xact_lock(hashtextextended(current_schema() || $1, 0))",
        &[&format!("\n{scope}\n{key}")],
    )
    .await?;
    idempotency_lookup(c, sealer, scope, key).await
}

async fn idempotency_lookup<C: GenericClient>(
    c: &C,
    sealer: &Sealer,
    scope: &str,
    key: &str,
) -> StoreResult<Option<IdempotencyRecord>> {
    let row = query_opt(
        c,
        "SELECT request_hash, status, response, created_at FROM idempotency WHERE scope = $1 AND key = $2",
        &[&scope, &key],
    )
    .await?;
    row.map(|row| {
        sealer.open_idempotency(IdempotencyRecord {
            scope: scope.to_owned(),
            key: key.to_owned(),
            request_hash: row.get(0),
            status: u16::try_from(row.get::<_, i64>(1)).unwrap_or(500),
            response: Bytes::from(row.get::<_, Vec<u8>>(2)),
            created_at: ts(&row, 3),
        })
    })
    .transpose()
}

/// Inserts `r`, whose answer is sealed already ([`Sealer::seal_idempotency`]).
async fn insert_idempotency<C: GenericClient>(c: &C, r: &IdempotencyRecord) -> StoreResult<()> {
    execute(
        c,
        "INSERT INTO idempotency (scope, key, request_hash, status, response, created_at) VALUES ($1, $2, $3, $4, $5, $6)",
        &[&r.scope, &r.key, &r.request_hash, &i64::from(r.status), &&r.response[..], &r.created_at.as_millis()],
    )
    .await?;
    Ok(())
}

/// The keys and rows of one or more ingestion batches, ready to be inserted with one statement
/// for the events and one for the deliveries, not one per row: a batch of 100 events fanned out
/// to 10 endpoints was 1 100 round trips, and a group of concurrent requests (`group.rs`) is one
/// statement too.
pub(super) struct Planned<'a> {
    items: Vec<&'a IngestItem>,
    seqs: Vec<i64>,
    deliveries: DeliveryColumns<'a>,
    /// Each batch's ready deliveries, in the order of the batches.
    pub(super) ready: Vec<Vec<ReadyDelivery>>,
    /// Each delivery with its target, for the cluster's notice.
    pub(super) targets: Vec<(&'a Target, DeliveryId)>,
}

/// Takes the keys of the batches' events and deliveries from the sequences and lays their rows
/// out. Keys are handed out in the batches' order, so that ids follow it as they did row by
/// row (one key's deliveries are taken in id order after a restart). Each batch's deliveries
/// are made at its own `now`.
pub(super) async fn plan_batches<'a, C: GenericClient>(
    c: &C,
    batches: &[&'a IngestBatch],
) -> StoreResult<Planned<'a>> {
    let items: Vec<&IngestItem> = batches.iter().flat_map(|b| &b.items).collect();
    let count: usize = items.iter().map(|i| i.endpoints.len()).sum();
    let (seqs, ids) = take_keys(c, items.len(), count).await?;
    let mut deliveries = DeliveryColumns::default();
    let mut targets = Vec::with_capacity(count);
    let mut ready = Vec::with_capacity(batches.len());
    let (mut ids, mut next_seq) = (ids.into_iter(), seqs.iter());
    for batch in batches {
        let mut ready_ones = Vec::with_capacity(batch.items.iter().map(|i| i.endpoints.len()).sum());
        for item in &batch.items {
            let seq = *next_seq.next().expect("one key per event");
            for target in &item.endpoints {
                let id = ids.next().expect("one key per delivery");
                deliveries.push(id, seq, &item.event, target, batch.now);
                targets.push((target, DeliveryId(id)));
                ready_ones.push(ready_delivery(
                    DeliveryId(id),
                    target.endpoint.clone(),
                    item.event.clone(),
                    batch.now,
                ));
            }
        }
        ready.push(ready_ones);
    }
    Ok(Planned {
        items,
        seqs,
        deliveries,
        ready,
        targets,
    })
}

/// Inserts what [`plan_batches`] laid out, both statements sent at once (they may reach the
/// server in either order; neither reads what the other writes). An event already
/// stored fails the whole call with [`StoreError::DuplicateEvent`]; the caller's transaction
/// then keeps nothing of it.
pub(super) async fn insert_planned<C: GenericClient>(c: &C, planned: &Planned<'_>) -> StoreResult<()> {
    tokio::try_join!(
        insert_events(c, &planned.items, &planned.seqs),
        insert_deliveries(c, &planned.deliveries)
    )?;
    Ok(())
}

/// Inserts new pending deliveries in their first round, each made at its `now`.
async fn insert_deliveries<C: GenericClient>(c: &C, rows: &DeliveryColumns<'_>) -> StoreResult<()> {
    execute(
        c,
        "INSERT INTO deliveries (id, event_seq, endpoint, status, round, attempt_count, next_attempt_at, created_at,
             updated_at, round_started_at, tenant, ordering_key)
         SELECT u.id, u.seq, u.endpoint, 'pending', 1, 0, u.now, u.now, u.now, u.now, u.tenant, u.ordering_key
         FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::bigint[], $5::text[], $6::text[])
             AS u(id, seq, endpoint, now, tenant, ordering_key)",
        &[&rows.ids, &rows.seqs, &rows.endpoints, &rows.nows, &rows.tenants, &rows.ordering_keys],
    )
    .await?;
    Ok(())
}

/// `events` keys for the batch's events and `deliveries` keys for its deliveries, each in
/// ascending order.
async fn take_keys<C: GenericClient>(
    c: &C,
    events: usize,
    deliveries: usize,
) -> StoreResult<(Vec<i64>, Vec<i64>)> {
    let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
    // The sequences by the names `BIGSERIAL` gave them: a name is resolved once per
    // statement, where `pg_get_serial_sequence` would look it up for every key.
    let row = query(
        c,
        "SELECT ARRAY(SELECT nextval('events_seq_seq') FROM generate_series(1, $1::bigint)),
                ARRAY(SELECT nextval('deliveries_id_seq') FROM generate_series(1, $2::bigint))",
        &[&count(events), &count(deliveries)],
    )
    .await?;
    let (mut seqs, mut ids): (Vec<i64>, Vec<i64>) = (row[0].get(0), row[0].get(1));
    seqs.sort_unstable();
    ids.sort_unstable();
    Ok((seqs, ids))
}

async fn insert_events<C: GenericClient>(c: &C, items: &[&IngestItem], seqs: &[i64]) -> StoreResult<()> {
    let events: Vec<&Event> = items.iter().map(|i| &*i.event).collect();
    let traces: Vec<TraceColumns> = events.iter().map(|e| TraceColumns::of(e.trace)).collect();
    let text = |f: &dyn Fn(&Event) -> &str| events.iter().map(|e| f(e)).collect::<Vec<&str>>();
    let inserted = query(
        c,
        "INSERT INTO events (seq, id, topic, event_type, content_type, payload, ordering_key, received_at, tenant,
             trace_id, trace_span_id, labels)
         SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bytea[], $7::text[],
                              $8::bigint[], $9::text[], $10::text[], $11::text[], $12::text[])
         ON CONFLICT (topic, id) DO NOTHING RETURNING seq",
        &[
            &seqs,
            &text(&|e| &e.id),
            &text(&|e| &e.topic),
            &text(&|e| &e.event_type),
            &text(&|e| &e.content_type),
            &events.iter().map(|e| &e.payload[..]).collect::<Vec<&[u8]>>(),
            &events.iter().map(|e| e.ordering_key.as_deref()).collect::<Vec<_>>(),
            &events.iter().map(|e| e.received_at.as_millis()).collect::<Vec<_>>(),
            &events.iter().map(|e| e.tenant.as_deref()).collect::<Vec<_>>(),
            &traces.iter().map(|t| t.trace_id.as_deref()).collect::<Vec<_>>(),
            &traces.iter().map(|t| t.span_id.as_deref()).collect::<Vec<_>>(),
            &events.iter().map(|e| e.labels.to_column()).collect::<Vec<_>>(),
        ],
    )
    .await?;
    if inserted.len() == events.len() {
        return Ok(());
    }
    let stored: std::collections::HashSet<i64> = inserted.iter().map(|r| r.get(0)).collect();
    let (event, _) = events
        .iter()
        .zip(seqs)
        .find(|(_, seq)| !stored.contains(seq))
        .expect("an event was not inserted");
    Err(StoreError::DuplicateEvent {
        topic: event.topic.clone(),
        id: event.id.clone(),
    })
}

/// The `seq` of each of `events`, None for one no longer stored.
async fn stored_seqs<C: GenericClient>(c: &C, events: &[Arc<Event>]) -> StoreResult<Vec<Option<i64>>> {
    let topics: Vec<&str> = events.iter().map(|e| e.topic.as_str()).collect();
    let ids: Vec<&str> = events.iter().map(|e| e.id.as_str()).collect();
    let rows = query(
        c,
        "SELECT e.seq, e.topic, e.id FROM events e
         JOIN unnest($1::text[], $2::text[]) AS u(topic, id) ON e.topic = u.topic AND e.id = u.id",
        &[&topics, &ids],
    )
    .await?;
    let by_key: std::collections::HashMap<(&str, &str), i64> =
        rows.iter().map(|r| ((r.get(1), r.get(2)), r.get(0))).collect();
    Ok(events
        .iter()
        .map(|e| by_key.get(&(e.topic.as_str(), e.id.as_str())).copied())
        .collect())
}

/// The columns of a batch's deliveries, as the insert's arrays.
#[derive(Default)]
struct DeliveryColumns<'a> {
    ids: Vec<i64>,
    seqs: Vec<i64>,
    endpoints: Vec<&'a str>,
    nows: Vec<i64>,
    tenants: Vec<Option<&'a str>>,
    /// The event's ordering key, kept on the delivery for the ordering index.
    ordering_keys: Vec<Option<&'a str>>,
}

impl<'a> DeliveryColumns<'a> {
    fn push(&mut self, id: i64, seq: i64, event: &'a Event, target: &'a Target, now: Timestamp) {
        self.ordering_keys.push(event.ordering_key.as_deref());
        self.ids.push(id);
        self.seqs.push(seq);
        self.endpoints.push(&target.endpoint);
        self.nows.push(now.as_millis());
        self.tenants.push(target.tenant.as_deref());
    }
}

fn ready_delivery(id: DeliveryId, endpoint: Arc<str>, event: Arc<Event>, now: Timestamp) -> ReadyDelivery {
    ReadyDelivery {
        id,
        endpoint,
        event,
        next_attempt_at: now,
        round: 1,
        round_started_at: now,
        attempts_made: 0,
    }
}

/// Applies health inputs to the health the database holds, in order per endpoint: each
/// endpoint's row is locked once (`FOR UPDATE`, in name order, so that two nodes never wait on
/// each other's rows in opposite orders), its inputs are stepped one after another, the result
/// is written once and the transitions recorded. Answers in the order of `changes`.
async fn apply_health_run<C: GenericClient>(
    c: &C,
    changes: &[&HealthChange],
) -> StoreResult<Vec<HealthApplied>> {
    let mut by_endpoint: std::collections::BTreeMap<&str, Vec<usize>> = Default::default();
    for (i, change) in changes.iter().enumerate() {
        by_endpoint.entry(&change.endpoint).or_default().push(i);
    }
    let mut answers: Vec<Option<HealthApplied>> = vec![None; changes.len()];
    for (endpoint, indices) in by_endpoint {
        let mut health = lock_health(c, endpoint).await?;
        for i in indices {
            let change = changes[i];
            let step = crate::health::apply(&change.rules, &health, change.input, change.at);
            health = step.health.clone();
            for t in &step.transitions {
                execute(
                    c,
                    "INSERT INTO endpoint_history (endpoint, state, at, reason) VALUES ($1, $2, $3, $4)",
                    &[&endpoint, &t.to.as_str(), &t.at.as_millis(), &t.reason],
                )
                .await?;
            }
            answers[i] = Some(HealthApplied {
                endpoint: change.endpoint.clone(),
                input: change.input,
                step,
            });
        }
        write_health(c, endpoint, &health).await?;
    }
    Ok(answers.into_iter().flatten().collect())
}

/// The endpoint's stored health (a fresh endpoint's row is made active), locked until the
/// commit.
async fn lock_health<C: GenericClient>(c: &C, endpoint: &str) -> StoreResult<EndpointHealth> {
    execute(
        c,
        "INSERT INTO endpoint_health (endpoint, state, consecutive_failures) VALUES ($1, 'active', 0)
         ON CONFLICT (endpoint) DO NOTHING",
        &[&endpoint],
    )
    .await?;
    let row = query(
        c,
        "SELECT state, consecutive_failures, failing_since, last_success_at, changed_at
         FROM endpoint_health WHERE endpoint = $1 FOR UPDATE",
        &[&endpoint],
    )
    .await?;
    health_from_row(&row[0], 0)
}

async fn write_health<C: GenericClient>(c: &C, endpoint: &str, h: &EndpointHealth) -> StoreResult<()> {
    execute(
        c,
        "UPDATE endpoint_health SET state = $2, consecutive_failures = $3, failing_since = $4,
             last_success_at = $5, changed_at = $6 WHERE endpoint = $1",
        &[
            &endpoint,
            &h.state.as_str(),
            &i64::from(h.consecutive_failures),
            &millis(h.failing_since),
            &millis(h.last_success_at),
            &millis(h.changed_at),
        ],
    )
    .await?;
    Ok(())
}

/// Writes a run of attempt outcomes with two statements, whatever their number: a node
/// records hundreds per commit, and one round trip per row would let the records fall behind
/// the deliveries.
async fn write_attempts<C: GenericClient>(c: &C, writes: &[&AttemptWrite]) -> StoreResult<()> {
    if writes.is_empty() {
        return Ok(());
    }
    let col = |f: &dyn Fn(&AttemptWrite) -> i64| writes.iter().map(|w| f(w)).collect::<Vec<i64>>();
    let exchanges: Vec<ExchangeColumns> = writes
        .iter()
        .map(|w| ExchangeColumns::of(&w.attempt.exchange))
        .collect();
    let text = |f: &dyn Fn(&ExchangeColumns) -> Option<String>| {
        exchanges.iter().map(f).collect::<Vec<Option<String>>>()
    };
    execute(
        c,
        "INSERT INTO attempts (delivery_id, round, n, started_at, duration_ms, status_code, error_kind, error, plugin_note,
             request_headers, response_headers, response_body, trace_id)
         SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::bigint[], $4::bigint[], $5::bigint[],
                              $6::bigint[], $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[],
                              $13::text[])",
        &[
            &col(&|w| w.delivery.0),
            &col(&|w| i64::from(w.round)),
            &col(&|w| i64::from(w.attempt.n)),
            &col(&|w| w.attempt.started_at.as_millis()),
            &col(&|w| i64::try_from(w.attempt.duration_ms).unwrap_or(i64::MAX)),
            &writes.iter().map(|w| w.attempt.status_code.map(i64::from)).collect::<Vec<_>>(),
            &writes.iter().map(|w| w.attempt.error_kind.map(|k| k.as_str())).collect::<Vec<_>>(),
            &writes.iter().map(|w| w.attempt.error.clone()).collect::<Vec<_>>(),
            &writes.iter().map(|w| w.plugin_note.clone()).collect::<Vec<_>>(),
            &text(&|e| e.request_headers.clone()),
            &text(&|e| e.response_headers.clone()),
            &text(&|e| e.response_body.clone()),
            &writes
                .iter()
                .map(|w| w.attempt.trace_id.map(|t| t.to_string()))
                .collect::<Vec<_>>(),
        ],
    )
    .await?;
    // The last outcome of each round of a delivery is its state. The round guard keeps a late
    // outcome of an old round from overwriting a redelivery.
    let mut last: Vec<&AttemptWrite> = Vec::with_capacity(writes.len());
    let mut seen = std::collections::HashSet::new();
    for w in writes.iter().rev() {
        if seen.insert((w.delivery, w.round)) {
            last.push(w);
        }
    }
    let finished_at = |w: &AttemptWrite| {
        w.attempt
            .started_at
            .plus(Duration::from_millis(w.attempt.duration_ms))
            .as_millis()
    };
    // `d.id = ANY($1)` keeps the plan on the primary key: joined with `unnest` alone, the
    // planner may hash the batch and scan the whole table, each time.
    execute(
        c,
        "UPDATE deliveries d SET status = u.status, attempt_count = u.n, next_attempt_at = u.next,
             last_error = u.err, updated_at = u.updated
         FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::bigint[], $5::text[], $6::bigint[], $7::bigint[])
              AS u(id, status, n, next, err, updated, round)
         WHERE d.id = ANY($1) AND d.id = u.id AND d.round = u.round",
        &[
            &last.iter().map(|w| w.delivery.0).collect::<Vec<_>>(),
            &last.iter().map(|w| w.status.as_str()).collect::<Vec<_>>(),
            &last.iter().map(|w| i64::from(w.attempt.n)).collect::<Vec<_>>(),
            &last.iter().map(|w| millis(w.next_attempt_at)).collect::<Vec<_>>(),
            &last.iter().map(|w| w.last_error.clone()).collect::<Vec<_>>(),
            &last.iter().map(|w| finished_at(w)).collect::<Vec<_>>(),
            &last.iter().map(|w| i64::from(w.round)).collect::<Vec<_>>(),
        ],
    )
    .await?;
    Ok(())
}

async fn apply_change<C: GenericClient>(
    c: &C,
    change: &StateChange,
    applied: &mut Vec<HealthApplied>,
) -> StoreResult<()> {
    match change {
        StateChange::Attempt(write) => write_attempts(c, &[write]).await?,
        StateChange::Health(change) => applied.extend(apply_health_run(c, &[change]).await?),
        StateChange::FailPending {
            endpoint,
            kind,
            status,
            now,
        } => {
            execute(
                c,
                "UPDATE deliveries SET status = $2, next_attempt_at = NULL, last_error = $3, updated_at = $4
                 WHERE endpoint = $1 AND status = 'pending'",
                &[&&**endpoint, &status.as_str(), &kind.as_str(), &now.as_millis()],
            )
            .await?;
        }
        StateChange::Finish {
            delivery,
            status,
            error,
            now,
        } => {
            execute(
                c,
                "UPDATE deliveries SET status = $2, next_attempt_at = NULL, last_error = $3, updated_at = $4
                 WHERE id = $1 AND status = 'pending'",
                &[&delivery.0, &status.as_str(), &error, &now.as_millis()],
            )
            .await?;
        }
        StateChange::Hold {
            endpoint,
            key,
            delivery,
            at,
        } => ordering::hold(c, endpoint, key, *delivery, *at).await?,
        StateChange::Release {
            endpoint,
            key,
            delivery,
        } => ordering::release(c, endpoint, key, *delivery).await?,
    }
    Ok(())
}

/// Starts a new round of a delivery if its state allows: a finished one always, a pending one
/// only when `replace_waiting`. The row is locked until the commit.
async fn restart_round<C: GenericClient>(
    c: &C,
    id: DeliveryId,
    now: Timestamp,
    replace_waiting: bool,
) -> StoreResult<Restarted> {
    let row = query_opt(
        c,
        &format!(
            "SELECT d.status, d.round, d.endpoint, {EVENT_COLUMNS}
             FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.id = $1 FOR UPDATE OF d"
        ),
        &[&id.0],
    )
    .await?
    .ok_or_else(|| StoreError::NotFound(format!("delivery {id}")))?;
    let status: DeliveryStatus = parse(&row, 0)?;
    let round = u(row.get(1));
    let was_pending = !status.is_final();
    if was_pending && !replace_waiting {
        return Err(StoreError::Conflict(format!(
            "delivery {id} is {} and will be attempted by itself",
            status.as_str()
        )));
    }
    execute(
        c,
        "UPDATE deliveries SET status = 'pending', round = $2, attempt_count = 0, next_attempt_at = $3,
             last_error = NULL, updated_at = $3, round_started_at = $3 WHERE id = $1",
        &[&id.0, &i64::from(round + 1), &now.as_millis()],
    )
    .await?;
    let endpoint: String = row.get(2);
    Ok(Restarted {
        ready: ReadyDelivery {
            round: round + 1,
            ..ready_delivery(id, Arc::from(endpoint), Arc::new(event_from_row(&row, 3)), now)
        },
        was_pending,
    })
}

#[async_trait]
impl Store for PgStore {
    async fn ingest(&self, batch: IngestBatch) -> StoreResult<IngestOutcome> {
        self.ingest_grouped(batch).await
    }

    async fn apply(&self, changes: Arc<[StateChange]>) -> StoreResult<Vec<HealthApplied>> {
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let mut applied = Vec::new();
        // A run of attempt outcomes and health inputs is written together: outcomes touch only
        // deliveries and attempts, inputs only health, so neither's order depends on the
        // other's. Anything else ends a run and keeps its place in the order.
        let mut attempts: Vec<&AttemptWrite> = Vec::new();
        let mut health: Vec<&HealthChange> = Vec::new();
        for change in changes.iter() {
            match change {
                StateChange::Attempt(write) => attempts.push(write),
                StateChange::Health(input) => health.push(input),
                other => {
                    write_attempts(&tx, &std::mem::take(&mut attempts)).await?;
                    applied.extend(apply_health_run(&tx, &std::mem::take(&mut health)).await?);
                    apply_change(&tx, other, &mut applied).await?;
                }
            }
        }
        write_attempts(&tx, &attempts).await?;
        applied.extend(apply_health_run(&tx, &health).await?);
        for step in applied.iter().filter(|a| !a.step.transitions.is_empty()) {
            self.notify_health(&tx, &step.endpoint).await?;
        }
        self.commit(tx).await?;
        Ok(applied)
    }

    async fn restart_delivery(
        &self,
        id: DeliveryId,
        now: Timestamp,
        replace_waiting: bool,
    ) -> StoreResult<Restarted> {
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let restarted = restart_round(&tx, id, now, replace_waiting).await?;
        let endpoint = restarted.ready.endpoint.clone();
        self.notify_deliveries(&tx, [(&*endpoint, id)].into_iter())
            .await?;
        self.commit(tx).await?;
        Ok(restarted)
    }

    async fn restart_dead(
        &self,
        endpoint: &str,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<ReadyDelivery>> {
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let ids = query(
            &tx,
            "SELECT id FROM deliveries WHERE endpoint = $1 AND status = 'dead' ORDER BY id LIMIT $2",
            &[&endpoint, &i64::from(limit)],
        )
        .await?;
        let mut out = Vec::with_capacity(ids.len());
        for row in ids {
            out.push(
                restart_round(&tx, DeliveryId(row.get(0)), now, false)
                    .await?
                    .ready,
            );
        }
        self.notify_deliveries(&tx, out.iter().map(|r| (&*r.endpoint, r.id)))
            .await?;
        self.commit(tx).await?;
        Ok(out)
    }

    async fn create_deliveries(
        &self,
        target: Target,
        events: Vec<Arc<Event>>,
        idempotency: Option<(IdempotencyRecord, AnswerFn)>,
        now: Timestamp,
    ) -> StoreResult<IngestOutcome> {
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        if let Some((record, _)) = &idempotency
            && let Some(first) = idempotency_locked(&tx, &self.sealer, &record.scope, &record.key).await?
        {
            return Ok(IngestOutcome::AlreadyDone(first));
        }
        // Events purged since the window was read are simply not replayed.
        let stored = stored_seqs(&tx, &events).await?;
        let kept: Vec<(Arc<Event>, i64)> = events
            .into_iter()
            .zip(stored)
            .filter_map(|(e, seq)| Some((e, seq?)))
            .collect();
        let (_, ids) = take_keys(&tx, 0, kept.len()).await?;
        let mut columns = DeliveryColumns::default();
        let mut out = Vec::with_capacity(kept.len());
        for ((event, seq), id) in kept.iter().zip(ids) {
            columns.push(id, *seq, event, &target, now);
            out.push(ready_delivery(
                DeliveryId(id),
                target.endpoint.clone(),
                event.clone(),
                now,
            ));
        }
        insert_deliveries(&tx, &columns).await?;
        if let Some((mut record, answer)) = idempotency {
            record.response = answer(&out);
            insert_idempotency(&tx, &self.sealer.seal_idempotency(&record)).await?;
        }
        self.notify_deliveries(&tx, out.iter().map(|r| (&*r.endpoint, r.id)))
            .await?;
        self.commit(tx).await?;
        Ok(IngestOutcome::Committed(out))
    }

    async fn pending_page(
        &self,
        after: Option<PendingCursor>,
        limit: u32,
    ) -> StoreResult<Vec<PendingDelivery>> {
        let conn = self.conn().await?;
        // By endpoint, then id: the order of the pending deliveries' index.
        let sql =
            format!("{PENDING_SELECT} AND (d.endpoint, d.id) > ($1, $2) ORDER BY d.endpoint, d.id LIMIT $3");
        // Without a cursor, from before the first endpoint (no name is empty).
        let (after_endpoint, after_id) =
            after.map_or((String::new(), i64::MIN), |c| (c.endpoint.to_string(), c.id.0));
        let rows = query(&conn, &sql, &[&after_endpoint, &after_id, &i64::from(limit)]).await?;
        Ok(pending_from_rows(&rows))
    }

    async fn delivery_for_attempt(&self, id: DeliveryId) -> StoreResult<Option<DeliveryForAttempt>> {
        let conn = self.conn().await?;
        let row = query_opt(
            &conn,
            &format!(
                "SELECT d.endpoint, d.status, d.round, d.attempt_count, d.round_started_at, {EVENT_COLUMNS}
                 FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.id = $1"
            ),
            &[&id.0],
        )
        .await?;
        let Some(row) = row else { return Ok(None) };
        Ok(Some(DeliveryForAttempt {
            id,
            endpoint: Arc::from(row.get::<_, String>(0)),
            status: parse(&row, 1)?,
            round: u(row.get(2)),
            attempts_made: u(row.get(3)),
            round_started_at: ts(&row, 4),
            event: Arc::new(event_from_row(&row, 5)),
        }))
    }

    async fn latest_events(
        &self,
        window: ReplayWindow,
        limit: u32,
        scan: u32,
    ) -> StoreResult<Vec<Arc<Event>>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            &format!(
                "SELECT {EVENT_COLUMNS} FROM events e
                 WHERE e.topic = ANY($1) AND e.received_at >= $2 AND e.received_at < $3
                 ORDER BY e.received_at DESC, e.seq DESC LIMIT $4"
            ),
            &[
                &window.topics,
                &window.since.as_millis(),
                &window.until.as_millis(),
                &i64::from(scan),
            ],
        )
        .await?;
        Ok(rows
            .iter()
            .map(|row| event_from_row(row, 0))
            .filter(|event| (window.matches)(event))
            .take(limit as usize)
            .map(Arc::new)
            .collect())
    }

    async fn events_in_window(&self, window: ReplayWindow, limit: u32) -> StoreResult<Vec<Arc<Event>>> {
        const PAGE: i64 = 1000;
        let conn = self.conn().await?;
        let mut out = Vec::new();
        let mut after: (i64, i64) = (window.since.as_millis(), 0);
        // Pages in (received_at, seq) order until `limit` events pass the type filter.
        loop {
            let rows = query(
                &conn,
                &format!(
                    "SELECT {EVENT_COLUMNS}, e.seq FROM events e
                     WHERE e.topic = ANY($1) AND (e.received_at, e.seq) >= ($2, $3) AND e.received_at < $4
                     ORDER BY e.received_at, e.seq LIMIT $5"
                ),
                &[
                    &window.topics,
                    &after.0,
                    &after.1,
                    &window.until.as_millis(),
                    &PAGE,
                ],
            )
            .await?;
            for row in &rows {
                let event = event_from_row(row, 0);
                after = (
                    event.received_at.as_millis(),
                    row.get::<_, i64>(EVENT_COLUMN_COUNT) + 1,
                );
                if (window.matches)(&event) {
                    out.push(Arc::new(event));
                    if out.len() >= limit as usize {
                        return Ok(out);
                    }
                }
            }
            if (rows.len() as i64) < PAGE {
                return Ok(out);
            }
        }
    }

    async fn ordering_keys(
        &self,
        endpoint: &str,
        listing: KeyListing,
        after: Option<String>,
        limit: u32,
    ) -> StoreResult<KeyPage> {
        let conn = self.conn().await?;
        ordering::ordering_keys(&conn, endpoint, listing, after, limit).await
    }

    async fn held_keys(&self) -> StoreResult<Vec<HeldKey>> {
        let conn = self.conn().await?;
        ordering::held_keys(&conn).await
    }

    async fn event(&self, id: &str, topic: Option<&str>) -> StoreResult<Vec<Event>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            &format!(
                "SELECT {EVENT_COLUMNS} FROM events e WHERE e.id = $1 AND ($2::TEXT IS NULL OR e.topic = $2) ORDER BY e.seq"
            ),
            &[&id, &topic],
        )
        .await?;
        Ok(rows.iter().map(|r| event_from_row(r, 0)).collect())
    }

    async fn expunge_payload(&self, topic: &str, id: &str, labels: &EventLabels) -> StoreResult<bool> {
        let conn = self.conn().await?;
        let changed = execute(
            &conn,
            "UPDATE events SET payload = ''::BYTEA, labels = $3 WHERE topic = $1 AND id = $2",
            &[&topic, &id, &labels.to_column()],
        )
        .await?;
        Ok(changed > 0)
    }

    async fn deliveries(&self, filter: DeliveryFilter) -> StoreResult<Vec<DeliveryRow>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            &format!(
                "SELECT {DELIVERY_COLUMNS} FROM deliveries d JOIN events e ON e.seq = d.event_seq
                 WHERE ($1::TEXT IS NULL OR d.endpoint = $1) AND ($2::TEXT IS NULL OR d.status = $2)
                   AND ($3::TEXT IS NULL OR e.id = $3) AND ($4::BIGINT IS NULL OR d.id < $4)
                   AND ($6::TEXT IS NULL OR d.tenant = $6) AND ($7::TEXT IS NULL OR e.event_type = $7)
                   AND ($8::BIGINT IS NULL OR d.created_at >= $8) AND ($9::BIGINT IS NULL OR d.created_at < $9)
                   AND ($10::BIGINT IS NULL OR d.id > $10)
                 ORDER BY d.id {} LIMIT $5",
                super::order(filter.after.is_some())
            ),
            &[
                &filter.endpoint,
                &filter.status.map(DeliveryStatus::as_str),
                &filter.event_id,
                &filter.before.map(|d| d.0),
                &i64::from(filter.limit),
                &filter.tenant,
                &filter.event_type,
                &millis(filter.since),
                &millis(filter.until),
                &filter.after.map(|d| d.0),
            ],
        )
        .await?;
        rows.iter().map(delivery_from_row).collect()
    }

    async fn delivery(&self, id: DeliveryId) -> StoreResult<Option<(DeliveryRow, Vec<AttemptRow>)>> {
        let conn = self.conn().await?;
        let row = query_opt(
            &conn,
            &format!("SELECT {DELIVERY_COLUMNS} FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.id = $1"),
            &[&id.0],
        )
        .await?;
        let Some(row) = row else { return Ok(None) };
        let attempts = query(
            &conn,
            "SELECT round, n, started_at, duration_ms, status_code, error_kind, error, plugin_note,
                    request_headers, response_headers, response_body, trace_id
             FROM attempts WHERE delivery_id = $1 ORDER BY id",
            &[&id.0],
        )
        .await?;
        let attempts = attempts
            .iter()
            .map(|r| {
                Ok(AttemptRow {
                    round: u(r.get(0)),
                    attempt: attempt_from_row(r, 1)?,
                    plugin_note: r.get(7),
                })
            })
            .collect::<StoreResult<_>>()?;
        Ok(Some((delivery_from_row(&row)?, attempts)))
    }

    async fn delivery_summary(
        &self,
        endpoint: &str,
        from: DeliveryId,
        to: DeliveryId,
    ) -> StoreResult<Vec<(DeliveryStatus, u64)>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            "SELECT status, COUNT(*) FROM deliveries WHERE endpoint = $1 AND id BETWEEN $2 AND $3 GROUP BY status",
            &[&endpoint, &from.0, &to.0],
        )
        .await?;
        rows.iter()
            .map(|r| Ok((parse(r, 0)?, r.get::<_, i64>(1).max(0) as u64)))
            .collect()
    }

    async fn endpoint_health(&self) -> StoreResult<Vec<(String, EndpointHealth)>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            "SELECT endpoint, state, consecutive_failures, failing_since, last_success_at, changed_at
             FROM endpoint_health ORDER BY endpoint",
            &[],
        )
        .await?;
        rows.iter()
            .map(|r| Ok((r.get(0), health_from_row(r, 1)?)))
            .collect()
    }

    async fn endpoint_history(&self, endpoint: &str, limit: u32) -> StoreResult<Vec<HistoryEntry>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            "SELECT state, at, reason FROM (
                 SELECT id, state, at, reason FROM endpoint_history WHERE endpoint = $1 ORDER BY id DESC LIMIT $2
             ) h ORDER BY id",
            &[&endpoint, &i64::from(limit)],
        )
        .await?;
        rows.iter()
            .map(|r| {
                Ok(HistoryEntry {
                    state: parse(r, 0)?,
                    at: ts(r, 1),
                    reason: r.get(2),
                })
            })
            .collect()
    }

    async fn idempotency_record(&self, scope: &str, key: &str) -> StoreResult<Option<IdempotencyRecord>> {
        let conn = self.conn().await?;
        idempotency_lookup(&conn, &self.sealer, scope, key).await
    }

    async fn activity(
        &self,
        since: Timestamp,
        bucket: Duration,
        buckets: u32,
        tenant: Option<String>,
    ) -> StoreResult<Vec<ActivityBucket>> {
        let width = (bucket.as_millis() as i64).max(1);
        let until = since.as_millis() + width * i64::from(buckets);
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            "SELECT (updated_at - $1) / $2, status, COUNT(*) FROM deliveries
             WHERE updated_at >= $1 AND updated_at < $3 AND status IN ('succeeded', 'failed', 'dead')
               AND ($4::TEXT IS NULL OR tenant = $4)
             GROUP BY 1, 2",
            &[&since.as_millis(), &width, &until, &tenant],
        )
        .await?;
        let mut out = activity_buckets(since, width, buckets);
        for r in &rows {
            count_activity(&mut out, r.get(0), r.get(1), r.get(2));
        }
        let failed_attempts = query(
            &conn,
            "SELECT (a.started_at - $1) / $2, COUNT(*) FROM attempts a
             WHERE a.started_at >= $1 AND a.started_at < $3 AND a.error_kind IS NOT NULL
               AND ($4::TEXT IS NULL OR EXISTS
                    (SELECT 1 FROM deliveries d WHERE d.id = a.delivery_id AND d.tenant = $4))
             GROUP BY 1",
            &[&since.as_millis(), &width, &until, &tenant],
        )
        .await?;
        for r in &failed_attempts {
            let bucket = usize::try_from(r.get::<_, i64>(0))
                .ok()
                .and_then(|i| out.get_mut(i));
            if let Some(bucket) = bucket {
                bucket.failed_attempts = r.get::<_, i64>(1).max(0) as u64;
            }
        }
        Ok(out)
    }

    async fn backlog(&self, tenant: Option<String>) -> StoreResult<Backlog> {
        let conn = self.conn().await?;
        let row = query(
            &conn,
            // One count per state, each on its partial index.
            "SELECT (SELECT COUNT(*) FROM deliveries WHERE status = 'pending' AND ($1::TEXT IS NULL OR tenant = $1)),
                    (SELECT COUNT(*) FROM deliveries WHERE status = 'dead' AND ($1::TEXT IS NULL OR tenant = $1))",
            &[&tenant],
        )
        .await?;
        Ok(Backlog {
            pending: row[0].get::<_, i64>(0).max(0) as u64,
            dead: row[0].get::<_, i64>(1).max(0) as u64,
        })
    }

    async fn api_endpoint(&self, name: &str) -> StoreResult<Option<ApiEndpointRow>> {
        let conn = self.conn().await?;
        let row = conn
            .query_opt(
                &format!("SELECT {API_ENDPOINT_COLUMNS} FROM api_endpoints WHERE name = $1"),
                &[&name],
            )
            .await?;
        row.as_ref()
            .map(|r| self.sealer.open_endpoint(api_endpoint_from_row(r)))
            .transpose()
    }

    async fn api_endpoint_page(&self, page: EndpointPage) -> StoreResult<Vec<ApiEndpointRow>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            &page.sql(["$1::TEXT", "$2::TEXT", "$3"]),
            &[&page.tenant, &page.after, &i64::from(page.limit)],
        )
        .await?;
        let rows: Vec<_> = rows.iter().map(api_endpoint_from_row).collect();
        if rows.len() <= Sealer::OPENED_ON_ONE_CORE {
            return self.sealer.open_endpoints(rows);
        }
        // A start's page: opened on every core, off the async workers.
        let sealer = self.sealer.clone();
        tokio::task::spawn_blocking(move || sealer.open_endpoints(rows))
            .await
            .map_err(|e| StoreError::Internal(format!("opening endpoint rows: {e}")))?
    }

    async fn save_api_endpoint(&self, row: ApiEndpointRow, previous: Option<u64>) -> StoreResult<()> {
        let row = self.sealer.seal_endpoint(row);
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let (secret, until) = row.retiring.clone().unzip();
        let until = millis(until);
        let version = row.version as i64;
        // The raw driver's error: a broken uniqueness of the uid is the caller's conflict.
        let execute = async |sql: &str, params: &[&(dyn ToSql + Sync)]| {
            let stmt = tx.prepare_cached(sql).await?;
            tx.execute(&stmt, params).await
        };
        let changed = if let Some(previous) = previous {
            execute(
                "UPDATE api_endpoints SET tenant = $2, spec = $3, uid = $4, retiring_secret = $5,
                        retiring_until = $6, version = $7, updated_at = $8
                 WHERE name = $1 AND version = $9",
                &[
                    &row.name,
                    &row.tenant,
                    &row.spec,
                    &row.uid,
                    &secret,
                    &until,
                    &version,
                    &row.updated_at.as_millis(),
                    &(previous as i64),
                ],
            )
            .await
        } else {
            execute(
                "INSERT INTO api_endpoints (name, tenant, spec, uid, retiring_secret, retiring_until,
                                            version, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (name) DO NOTHING",
                &[
                    &row.name,
                    &row.tenant,
                    &row.spec,
                    &row.uid,
                    &secret,
                    &until,
                    &version,
                    &row.created_at.as_millis(),
                    &row.updated_at.as_millis(),
                ],
            )
            .await
        };
        let changed = match changed {
            Err(e) if e.code() == Some(&SqlState::UNIQUE_VIOLATION) && row.uid.is_some() => {
                return Err(crate::store::api_endpoint_uid_taken(&row));
            }
            other => other?,
        };
        if changed == 0 {
            return Err(api_endpoint_conflict(&row, previous.is_some()));
        }
        self.notify_endpoint(&tx, &row.name).await?;
        self.commit(tx).await
    }

    async fn delete_api_endpoint(&self, name: &str) -> StoreResult<()> {
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let removed = execute(&tx, "DELETE FROM api_endpoints WHERE name = $1", &[&name]).await?;
        if removed == 0 {
            return Err(StoreError::NotFound(format!("endpoint `{name}`")));
        }
        self.notify_endpoint(&tx, name).await?;
        self.commit(tx).await
    }

    async fn applications(
        &self,
        after: Option<String>,
        limit: u32,
        descending: bool,
    ) -> StoreResult<Vec<ApplicationRow>> {
        let conn = self.conn().await?;
        let (cursor, order) = match (after.is_some(), descending) {
            (true, false) => ("id > $1", "ASC"),
            (true, true) => ("id < $1", "DESC"),
            (false, false) => ("$1::TEXT IS NULL", "ASC"),
            (false, true) => ("$1::TEXT IS NULL", "DESC"),
        };
        let rows = query(
            &conn,
            &format!(
                "SELECT {APPLICATION_COLUMNS} FROM applications WHERE {cursor} ORDER BY id {order} LIMIT $2"
            ),
            &[&after, &i64::from(limit)],
        )
        .await?;
        Ok(rows.iter().map(application_from_row).collect())
    }

    async fn application(&self, key: &str) -> StoreResult<Option<ApplicationRow>> {
        let conn = self.conn().await?;
        let row = query_opt(
            &conn,
            &format!(
                "SELECT {APPLICATION_COLUMNS} FROM applications WHERE id = $1 OR uid = $1 OR tenant = $1
                 ORDER BY id = $1 DESC, uid = $1 DESC NULLS LAST LIMIT 1"
            ),
            &[&key],
        )
        .await?;
        Ok(row.as_ref().map(application_from_row))
    }

    async fn save_application(&self, row: ApplicationRow, previous: Option<Timestamp>) -> StoreResult<()> {
        let conn = self.conn().await?;
        let what = format!("an application with id `{}`, uid or tenant", row.id);
        let rate_limit = row.rate_limit.map(i64::from);
        let changed = if let Some(previous) = previous {
            execute(
                &conn,
                "UPDATE applications SET uid = $2, name = $3, metadata = $4, rate_limit = $5, updated_at = $6
                 WHERE id = $1 AND updated_at = $7",
                &[
                    &row.id,
                    &row.uid,
                    &row.name,
                    &row.metadata,
                    &rate_limit,
                    &row.updated_at.as_millis(),
                    &previous.as_millis(),
                ],
            )
            .await
        } else {
            execute(
                &conn,
                &format!(
                    "INSERT INTO applications ({APPLICATION_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)"
                ),
                &[
                    &row.id,
                    &row.uid,
                    &row.tenant,
                    &row.name,
                    &row.metadata,
                    &rate_limit,
                    &row.created_at.as_millis(),
                    &row.updated_at.as_millis(),
                ],
            )
            .await
        }
        .map_err(|e| taken(e, &what))?;
        if changed == 0 {
            return Err(changed_meanwhile("application", &row.id));
        }
        Ok(())
    }

    async fn delete_application(&self, id: &str) -> StoreResult<()> {
        self.delete_row("applications", "id", id, "application").await
    }

    async fn event_types(
        &self,
        after: Option<String>,
        limit: u32,
        include_archived: bool,
        descending: bool,
    ) -> StoreResult<Vec<EventTypeRow>> {
        let conn = self.conn().await?;
        let (cursor, order) = if descending { ("<", "DESC") } else { (">", "ASC") };
        let rows = query(
            &conn,
            &format!(
                "SELECT {EVENT_TYPE_COLUMNS} FROM event_types
                 WHERE ($1::TEXT IS NULL OR name {cursor} $1) AND ($3 OR NOT archived) ORDER BY name {order} LIMIT $2"
            ),
            &[&after, &i64::from(limit), &include_archived],
        )
        .await?;
        Ok(rows.iter().map(event_type_from_row).collect())
    }

    async fn event_type(&self, name: &str) -> StoreResult<Option<EventTypeRow>> {
        let conn = self.conn().await?;
        let row = query_opt(
            &conn,
            &format!("SELECT {EVENT_TYPE_COLUMNS} FROM event_types WHERE name = $1"),
            &[&name],
        )
        .await?;
        Ok(row.as_ref().map(event_type_from_row))
    }

    async fn save_event_type(&self, row: EventTypeRow, previous: Option<Timestamp>) -> StoreResult<()> {
        let conn = self.conn().await?;
        let changed = if let Some(previous) = previous {
            execute(
                &conn,
                "UPDATE event_types SET description = $2, archived = $3, deprecated = $4, schemas = $5,
                        feature_flags = $6, group_name = $7, updated_at = $8
                 WHERE name = $1 AND updated_at = $9",
                &[
                    &row.name,
                    &row.description,
                    &row.archived,
                    &row.deprecated,
                    &row.schemas,
                    &row.feature_flags,
                    &row.group_name,
                    &row.updated_at.as_millis(),
                    &previous.as_millis(),
                ],
            )
            .await?
        } else {
            execute(
                &conn,
                &format!(
                    "INSERT INTO event_types ({EVENT_TYPE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
                     ON CONFLICT (name) DO NOTHING"
                ),
                &[
                    &row.name,
                    &row.description,
                    &row.archived,
                    &row.deprecated,
                    &row.schemas,
                    &row.feature_flags,
                    &row.group_name,
                    &row.created_at.as_millis(),
                    &row.updated_at.as_millis(),
                ],
            )
            .await?
        };
        if changed == 0 {
            return Err(match previous {
                Some(_) => changed_meanwhile("event type", &row.name),
                None => StoreError::Conflict(format!("an event type named `{}` exists", row.name)),
            });
        }
        Ok(())
    }

    async fn delete_event_type(&self, name: &str) -> StoreResult<()> {
        self.delete_row("event_types", "name", name, "event type").await
    }

    async fn save_idempotency(&self, r: IdempotencyRecord) -> StoreResult<()> {
        let r = self.sealer.seal_idempotency(&r);
        let conn = self.conn().await?;
        execute(
            &conn,
            "INSERT INTO idempotency (scope, key, request_hash, status, response, created_at)
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (scope, key) DO NOTHING",
            &[
                &r.scope,
                &r.key,
                &r.request_hash,
                &i64::from(r.status),
                &&r.response[..],
                &r.created_at.as_millis(),
            ],
        )
        .await?;
        Ok(())
    }

    async fn tenant_events(&self, query_: EventQuery) -> StoreResult<Vec<(i64, Event)>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            &format!(
                "SELECT {EVENT_COLUMNS}, e.seq FROM events e
                 WHERE e.tenant = $1 AND ($2::BIGINT IS NULL OR e.seq < $2)
                   AND ($3::BIGINT IS NULL OR e.received_at >= $3) AND ($4::BIGINT IS NULL OR e.received_at < $4)
                   AND (cardinality($5::TEXT[]) = 0 OR e.event_type = ANY($5))
                   AND ($7::BIGINT IS NULL OR e.seq > $7)
                 ORDER BY e.seq {} LIMIT $6",
                super::order(query_.after.is_some())
            ),
            &[
                &query_.tenant,
                &query_.before,
                &millis(query_.since),
                &millis(query_.until),
                &query_.event_types,
                &i64::from(query_.limit),
                &query_.after,
            ],
        )
        .await?;
        Ok(rows
            .iter()
            .map(|r| (r.get(EVENT_COLUMN_COUNT), event_from_row(r, 0)))
            .collect())
    }

    async fn attempts(&self, query_: AttemptQuery) -> StoreResult<Vec<AttemptListRow>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            &format!(
                "SELECT a.id, d.id, e.id, d.endpoint, a.round, a.n, a.started_at, a.duration_ms, a.status_code,
                        a.error_kind, a.error, a.plugin_note, a.request_headers, a.response_headers,
                        a.response_body, a.trace_id
                 FROM attempts a JOIN deliveries d ON d.id = a.delivery_id JOIN events e ON e.seq = d.event_seq
                 WHERE ($1::TEXT IS NULL OR d.tenant = $1) AND ($2::TEXT IS NULL OR e.id = $2)
                   AND ($3::TEXT IS NULL OR d.endpoint = $3) AND ($4::BIGINT IS NULL OR a.id < $4)
                   AND ($6::BIGINT IS NULL OR a.id > $6)
                 ORDER BY a.id {} LIMIT $5",
                super::order(query_.after.is_some())
            ),
            &[
                &query_.tenant,
                &query_.event_id,
                &query_.endpoint,
                &query_.before,
                &i64::from(query_.limit),
                &query_.after,
            ],
        )
        .await?;
        rows.iter()
            .map(|r| {
                Ok(AttemptListRow {
                    id: r.get(0),
                    delivery: DeliveryId(r.get(1)),
                    event_id: r.get(2),
                    endpoint: r.get(3),
                    round: u(r.get(4)),
                    attempt: attempt_from_row(r, 5)?,
                })
            })
            .collect()
    }

    async fn purge(&self, cutoffs: RetentionCutoffs) -> StoreResult<Purged> {
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        // Every node runs the purge; one at a time does the work, so that nodes do not scan
        // for the same rows and wait on each other's deletes.
        let ours: bool = query(
            &tx,
            &format!("SELECT pg_try_advisory_xact_lock({PURGE_LOCK})"),
            &[],
        )
        .await?[0]
            .get(0);
        if !ours {
            return Ok(Purged::default());
        }
        let batch = i64::from(cutoffs.batch);
        let ids: Vec<i64> = query(
            &tx,
            "SELECT id FROM deliveries WHERE updated_at < $1 AND status IN ('succeeded', 'failed', 'dead')
             ORDER BY updated_at LIMIT $2",
            &[&cutoffs.deliveries_before.as_millis(), &batch],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
        let purged = Purged {
            attempts: execute(&tx, "DELETE FROM attempts WHERE delivery_id = ANY($1)", &[&ids]).await?,
            deliveries: execute(&tx, "DELETE FROM deliveries WHERE id = ANY($1)", &[&ids]).await?,
            events: execute(
                &tx,
                "DELETE FROM events WHERE seq IN (
                     SELECT seq FROM events e WHERE e.received_at < $1
                       AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq)
                     ORDER BY e.received_at LIMIT $2)",
                &[&cutoffs.events_before.as_millis(), &batch],
            )
            .await?,
            idempotency_keys: execute(
                &tx,
                "DELETE FROM idempotency WHERE (scope, key) IN (
                     SELECT scope, key FROM idempotency WHERE created_at < $1 ORDER BY created_at LIMIT $2)",
                &[&cutoffs.idempotency_before.as_millis(), &batch],
            )
            .await?,
            history: execute(
                &tx,
                "DELETE FROM endpoint_history WHERE id IN (
                     SELECT h.id FROM endpoint_history h WHERE h.at < $1
                       AND h.id < (SELECT MAX(l.id) FROM endpoint_history l WHERE l.endpoint = h.endpoint)
                     ORDER BY h.at LIMIT $2)",
                &[&cutoffs.history_before.as_millis(), &batch],
            )
            .await?,
        };
        // An operator's action on an ordering key lives until its asker reads the answer, within
        // seconds; one whose asker died before that is left behind, and goes with the
        // idempotency keys of its age (not counted: it was never data).
        execute(
            &tx,
            "DELETE FROM ordering_actions WHERE id IN (
                 SELECT id FROM ordering_actions WHERE requested_at < $1 ORDER BY id LIMIT $2)",
            &[&cutoffs.idempotency_before.as_millis(), &batch],
        )
        .await?;
        self.commit(tx).await?;
        Ok(purged)
    }

    async fn set_size_limit(&self, max_bytes: Option<u64>) -> StoreResult<()> {
        // Refused by config validation; a database server has its own quotas.
        if max_bytes.is_some() {
            return Err(StoreError::Internal(
                "storage.max_size applies to the embedded SQLite store only".into(),
            ));
        }
        Ok(())
    }

    /// Closes the pool; a node that leaves the cluster has given its leases back before.
    async fn rekey(&self) -> StoreResult<u64> {
        let mut conn = self.conn().await?;
        keys::rekey(&mut conn, &self.sealer).await
    }

    async fn check_writable(&self) -> StoreResult<()> {
        let answer = tokio::time::timeout(READY_WAIT, async {
            let conn = self.conn().await?;
            conn.simple_query("SELECT 1").await?;
            Ok::<_, StoreError>(())
        })
        .await;
        match answer {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(StoreError::Unavailable(format!(
                "the database cannot be reached: {e}"
            ))),
            Err(_) => Err(StoreError::Unavailable(format!(
                "the database did not answer within {READY_WAIT:?} (unreachable, or every \
                 connection busy)"
            ))),
        }
    }

    async fn close(&self) {
        self.pool.close();
    }

    fn cluster(self: Arc<Self>) -> Option<Arc<dyn ClusterStore>> {
        Some(self)
    }
}

#[cfg(test)]
mod tests;
