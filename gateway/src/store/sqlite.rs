//! The SQLite store: WAL, one writer thread with group commit and a syncer thread that fsyncs
//! the WAL behind it (`synchronous=NORMAL` plus an fsync before every answer), a small pool of
//! read connections.

mod backup;
mod keys;
mod ordering;
#[cfg(test)]
mod power_cut_vfs;
#[cfg(test)]
mod power_loss;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bytes::Bytes;
use rusqlite::{Connection, OpenFlags, OptionalExtension, Row, params};
use tokio::sync::oneshot;

pub use backup::{SqliteBackup, backup_sqlite};
pub use keys::key_file_of;

use super::seal::{EncryptionKey, Sealer};
use super::writer::{self, Job, JobResult, WriterHandle};
use super::*;
use crate::health::EndpointHealth;
use crate::model::EndpointState;
use crate::telemetry::Metrics;

#[derive(Debug, Clone)]
pub struct SqliteOptions {
    pub path: PathBuf,
    /// Jobs waiting for the writer before ingestion is refused with 503.
    pub write_queue: usize,
    /// Jobs per transaction at most.
    pub max_batch: usize,
    /// Reads running at once, each on a connection of its own kept open between reads.
    pub read_connections: usize,
    /// The largest the database file may grow (`storage.max_size`), applied as
    /// `PRAGMA max_page_count`: a cap reached behaves like a full disk.
    pub max_size_bytes: Option<u64>,
    /// Where the writer records its batch sizes and commit times.
    pub metrics: Metrics,
    /// The key secrets are sealed under (`storage.encryption_key`); None: the key file beside
    /// the database ([`key_file_of`]), made on the first start.
    pub encryption_key: Option<EncryptionKey>,
    /// Keys that still open what they sealed (`storage.previous_encryption_keys`).
    pub previous_encryption_keys: Vec<EncryptionKey>,
    /// The SQLite VFS to open the files with instead of the platform's: the power-loss tests'.
    #[cfg(test)]
    pub(crate) vfs: Option<&'static str>,
}

impl SqliteOptions {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        SqliteOptions {
            path: path.into(),
            write_queue: 8192,
            max_batch: 2048,
            read_connections: 4,
            max_size_bytes: None,
            metrics: Metrics::new(),
            encryption_key: None,
            previous_encryption_keys: Vec::new(),
            #[cfg(test)]
            vfs: None,
        }
    }

    fn database(&self) -> DatabaseFile {
        DatabaseFile {
            path: self.path.clone(),
            #[cfg(test)]
            vfs: self.vfs,
        }
    }
}

/// The database's path, and in tests the VFS to open it with.
#[derive(Debug, Clone)]
struct DatabaseFile {
    path: PathBuf,
    #[cfg(test)]
    vfs: Option<&'static str>,
}

impl DatabaseFile {
    fn open(&self, flags: OpenFlags) -> rusqlite::Result<Connection> {
        #[cfg(test)]
        if let Some(vfs) = self.vfs {
            return Connection::open_with_flags_and_vfs(&self.path, flags, vfs);
        }
        Connection::open_with_flags(&self.path, flags)
    }

    /// A read-only connection that writes nothing at all, not even the `-wal` and `-shm`
    /// files a read-only connection of a WAL database otherwise makes: `immutable`, which is
    /// exact only while no log exists (the database file then holds every commit), so a
    /// database with a log is opened read-only as usual (its `-shm` is an index of the log,
    /// rebuilt from it, not data).
    fn open_without_writing(&self) -> rusqlite::Result<Connection> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let mut wal = self.path.clone().into_os_string();
        wal.push("-wal");
        if std::path::Path::new(&wal).exists() {
            return self.open(flags);
        }
        let path = self.path.to_string_lossy();
        let escaped = percent_encoding::utf8_percent_encode(&path, URI_PATH);
        let uri = format!("file:{escaped}?immutable=1");
        let flags = flags | OpenFlags::SQLITE_OPEN_URI;
        #[cfg(test)]
        if let Some(vfs) = self.vfs {
            return Connection::open_with_flags_and_vfs(&uri, flags, vfs);
        }
        Connection::open_with_flags(&uri, flags)
    }

    /// The fsync of the WAL file for the writer's syncer, on a descriptor of its own. The
    /// writer's connection `conn` keeps the WAL file open (SQLite deletes it only when the last
    /// connection closes), so the descriptor names the file SQLite writes for the store's
    /// whole life; an fsync covers what any descriptor wrote to it. The WAL exists once `conn`
    /// has read the database (the migrations did). Its name is the database's as SQLite
    /// resolved it — symbolic links followed — with `-wal`.
    fn wal_sync(&self, conn: &Connection) -> StoreResult<writer::SyncWal> {
        let database = conn
            .path()
            .filter(|resolved| !resolved.is_empty())
            .map_or_else(|| self.path.clone(), PathBuf::from);
        let mut wal_path = database.into_os_string();
        wal_path.push("-wal");
        let wal_path = PathBuf::from(wal_path);
        let wal = std::fs::File::open(&wal_path).map_err(|e| {
            StoreError::Unavailable(format!(
                "cannot open the database's log {}: {e}",
                wal_path.display()
            ))
        })?;
        #[cfg(test)]
        if self.vfs.is_some() {
            // The power-cut disk decides what an fsync made durable.
            return Ok(Box::new(move || {
                let _open = &wal;
                power_cut_vfs::sync_path(&wal_path)
            }));
        }
        Ok(Box::new(move || wal.sync_data()))
    }
}

pub struct SqliteStore {
    writer: WriterHandle,
    readers: Arc<ReadPool>,
    /// SQLite's own `max_page_count` before any cap: what "no cap" restores.
    uncapped_pages: u64,
    /// Seals the secrets written and opens the ones read.
    sealer: Arc<Sealer>,
    /// Why the last write failed for want of storage, until a write commits again: what
    /// `check_writable` answers, and the one readiness probe at a time that tries again.
    refusing: Arc<Mutex<Option<String>>>,
    probe: tokio::sync::Mutex<()>,
}

/// The read connections. At most `read_connections` reads run at once (the rest wait for a
/// permit), so no more connections than that are ever opened, and after the first reads each
/// read finds one that is open, has read the schema and holds its prepared statements: opening one per read when many deliveries read their events back at
/// once (a backlog beyond the memory budget) cost more than the reads themselves.
struct ReadPool {
    database: DatabaseFile,
    idle: Mutex<Vec<Connection>>,
    permits: Arc<tokio::sync::Semaphore>,
}

impl ReadPool {
    fn take(&self) -> StoreResult<Connection> {
        if let Some(conn) = self.idle.lock().expect("read pool lock").pop() {
            return Ok(conn);
        }
        let conn = self.database.open(
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX | OpenFlags::SQLITE_OPEN_URI,
        )?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        Ok(conn)
    }

    /// Keeps `conn` for the next read; the permits bound how many there are.
    fn give_back(&self, conn: Connection) {
        self.idle.lock().expect("read pool lock").push(conn);
    }
}

impl SqliteStore {
    /// Deletes the row of `table` whose `column` is `key`; NotFound, naming `what`, when there
    /// is none. Table and column are the store's own names, never input.
    async fn delete_row(
        &self,
        table: &'static str,
        column: &'static str,
        key: &str,
        what: &'static str,
    ) -> StoreResult<()> {
        let key = key.to_owned();
        self.write(Urgency::Wait, move |conn| {
            let removed = conn
                .prepare_cached(&format!("DELETE FROM {table} WHERE {column} = ?1"))?
                .execute(params![key])?;
            if removed == 0 {
                return Err(StoreError::NotFound(format!("{what} `{key}`")));
            }
            Ok(())
        })
        .await
    }

    /// Opens (creating if needed) the database, runs migrations and starts the writer thread.
    pub fn open(options: SqliteOptions) -> StoreResult<SqliteStore> {
        if let Some(dir) = options.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| {
                StoreError::Unavailable(format!(
                    "cannot create the database folder {}: {e}",
                    dir.display()
                ))
            })?;
        }
        // The key before any write: a missing or wrong key must leave the files as they were.
        let sealer = keys::sealer_for(&options)?;
        let mut conn = open_writer_connection(&options.database())?;
        let uncapped_pages = conn.pragma_query_value(None, "max_page_count", |r| r.get::<_, i64>(0))?;
        let uncapped_pages = u64::try_from(uncapped_pages).unwrap_or(u64::MAX);
        // Migrations first: a cap below what the schema needs must not keep the gateway from
        // starting on an existing database; it only refuses new data.
        super::migrations::migrate(&mut conn)?;
        keys::seal_plaintext(&mut conn, &sealer)?;
        if let Some(max_bytes) = options.max_size_bytes {
            apply_size_limit(&conn, Some(max_bytes), uncapped_pages)?;
        }
        let sync_wal = options.database().wal_sync(&conn)?;
        let writer = writer::spawn(
            conn,
            sync_wal,
            options.write_queue,
            options.max_batch,
            &options.metrics,
        );
        Ok(SqliteStore {
            writer,
            readers: Arc::new(ReadPool {
                database: options.database(),
                idle: Mutex::new(Vec::new()),
                permits: Arc::new(tokio::sync::Semaphore::new(options.read_connections.max(1))),
            }),
            uncapped_pages,
            sealer: Arc::new(sealer),
            refusing: Arc::default(),
            probe: tokio::sync::Mutex::new(()),
        })
    }

    /// Runs `f` in a savepoint of the writer's next group; resolves after the commit.
    async fn write<T, F>(&self, urgency: Urgency, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let (tx, rx) = oneshot::channel::<StoreResult<T>>();
        let job: Job = Box::new(move |conn| match f(conn) {
            Ok(value) => JobResult {
                keep: true,
                completion: Box::new(move |committed| {
                    let _ = tx.send(committed.map(|()| value));
                }),
            },
            Err(e) => JobResult {
                keep: false,
                completion: Box::new(move |_| {
                    let _ = tx.send(Err(e));
                }),
            },
        });
        let submitted = match urgency {
            Urgency::RefuseWhenFull => self.writer.try_submit(job),
            Urgency::Wait => self.writer.submit(job).await,
        };
        let result = match submitted {
            Ok(()) => rx.await.unwrap_or_else(|_| {
                Err(StoreError::Unavailable(
                    "the write was dropped before its commit".into(),
                ))
            }),
            Err(e) => Err(e),
        };
        // Only an event's write shows that events fit again: an outcome or a purge may commit
        // on a store that has no room for one.
        self.note_outcome(&result, matches!(urgency, Urgency::RefuseWhenFull));
        result
    }

    /// Keeps what a write says about the storage: refusing (for want of room, an I/O error, a
    /// failed fsync, a closed store) or, when `shows_room`, taking events again. A full queue
    /// or a write refused for its own content says nothing about the storage.
    fn note_outcome<T>(&self, result: &StoreResult<T>, shows_room: bool) {
        let mut refusing = self.refusing.lock().expect("refusing lock");
        match result {
            Ok(_) if shows_room => *refusing = None,
            Err(StoreError::Unavailable(reason)) => *refusing = Some(reason.clone()),
            _ => {}
        }
    }

    async fn read<T, F>(&self, f: F) -> StoreResult<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> StoreResult<T> + Send + 'static,
    {
        let pool = self.readers.clone();
        let permit = pool
            .permits
            .clone()
            .acquire_owned()
            .await
            .expect("the read permits are never closed");
        tokio::task::spawn_blocking(move || {
            let conn = pool.take()?;
            let result = f(&conn);
            pool.give_back(conn);
            drop(permit);
            result
        })
        .await
        .map_err(|e| StoreError::Internal(format!("read task failed: {e}")))?
    }
}

/// A write that needs what an event needs — new pages, room in the log, an fsync — and leaves
/// nothing behind: a row of 64 KiB (an event with a sizeable payload, so that a page or two
/// freed by chance does not pass for room), made and removed in one transaction.
fn probe_write(conn: &Connection) -> StoreResult<()> {
    conn.prepare_cached("INSERT INTO write_probe (filler) VALUES (zeroblob(65536))")?
        .execute([])?;
    conn.prepare_cached("DELETE FROM write_probe")?.execute([])?;
    Ok(())
}

/// What a file name must escape in a SQLite URI: `%`, and `?` and `#`, which would end the path.
const URI_PATH: &percent_encoding::AsciiSet = &percent_encoding::CONTROLS.add(b'%').add(b'?').add(b'#');

#[derive(Clone, Copy)]
enum Urgency {
    /// Ingestion: a full queue is an immediate 503, never unbounded waiting.
    RefuseWhenFull,
    /// Outcomes and operator actions: wait for room (they are bounded by the work in flight).
    Wait,
}

fn open_writer_connection(database: &DatabaseFile) -> StoreResult<Connection> {
    let conn = database.open(OpenFlags::default())?;
    conn.busy_timeout(std::time::Duration::from_secs(5))?;
    // WAL: readers never block the writer. NORMAL: a commit writes the WAL without an fsync,
    // and the writer's syncer thread fsyncs the WAL before anyone is answered (`writer.rs`);
    // checkpoints still fsync the WAL before copying it and the database after.
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0))?;
    conn.pragma_update(None, "synchronous", "NORMAL")?;
    conn.pragma_update(None, "foreign_keys", "OFF")?;
    conn.pragma_update(None, "temp_store", "MEMORY")?;
    conn.pragma_update(None, "cache_size", -16_000)?;
    Ok(conn)
}

/// Sets `max_page_count` for `max_bytes` (whole pages, at least one), or back to `uncapped`.
/// SQLite never sets it below the pages in use; the value it took is logged.
fn apply_size_limit(conn: &Connection, max_bytes: Option<u64>, uncapped: u64) -> StoreResult<()> {
    let page_size = conn.pragma_query_value(None, "page_size", |r| r.get::<_, i64>(0))?;
    let page_size = u64::try_from(page_size).unwrap_or(4096).max(1);
    let wanted = max_bytes.map_or(uncapped, |bytes| (bytes / page_size).max(1));
    let applied = conn.pragma_update_and_check(
        None,
        "max_page_count",
        i64::try_from(wanted).unwrap_or(i64::MAX),
        |r| r.get::<_, i64>(0),
    )?;
    let applied = u64::try_from(applied).unwrap_or(0);
    match max_bytes {
        Some(bytes) if applied > wanted => tracing::warn!(
            max_size_bytes = bytes,
            held_at_bytes = applied.saturating_mul(page_size),
            "storage.max_size is below the database's current size; it is held at its size"
        ),
        Some(bytes) => tracing::info!(max_size_bytes = bytes, pages = applied, "database size cap set"),
        None => tracing::info!("database size cap removed"),
    }
    Ok(())
}

fn ts(row: &Row<'_>, idx: usize) -> rusqlite::Result<Timestamp> {
    Ok(Timestamp::from_millis(row.get(idx)?))
}

fn opt_ts(row: &Row<'_>, idx: usize) -> rusqlite::Result<Option<Timestamp>> {
    Ok(row.get::<_, Option<i64>>(idx)?.map(Timestamp::from_millis))
}

fn api_endpoint_from_row(r: &Row<'_>) -> rusqlite::Result<ApiEndpointRow> {
    let retiring = match (r.get::<_, Option<String>>(4)?, opt_ts(r, 5)?) {
        (Some(secret), Some(until)) => Some((secret, until)),
        _ => None,
    };
    Ok(ApiEndpointRow {
        name: r.get(0)?,
        tenant: r.get(1)?,
        spec: r.get(2)?,
        uid: r.get(3)?,
        retiring,
        version: r.get::<_, i64>(6)?.max(1) as u64,
        created_at: ts(r, 7)?,
        updated_at: ts(r, 8)?,
    })
}

/// A write of an API endpoint that broke the uid's uniqueness within its tenant (the only
/// constraint the name's `ON CONFLICT` does not take) is a conflict; any other error stays.
fn uid_taken_or(e: rusqlite::Error, row: &ApiEndpointRow) -> StoreError {
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) && row.uid.is_some() {
        crate::store::api_endpoint_uid_taken(row)
    } else {
        e.into()
    }
}

fn parse_col<T: std::str::FromStr>(row: &Row<'_>, idx: usize) -> rusqlite::Result<T> {
    let text: String = row.get(idx)?;
    text.parse().map_err(|_| {
        rusqlite::Error::FromSqlConversionFailure(
            idx,
            rusqlite::types::Type::Text,
            format!("bad value `{text}`").into(),
        )
    })
}

const EVENT_COLUMNS: &str = "e.id, e.topic, e.event_type, e.content_type, e.payload, e.ordering_key, e.received_at, \
     e.tenant, e.trace_id, e.trace_span_id, e.labels";

/// `?1` as a delivery id in a join. SQLite re-prepares a join whose `WHERE` compares a column
/// with a bare parameter each time the statement runs (it propagates the bound value into the
/// plan, so a new value expires the plan); a cast of the parameter is not propagated. The
/// attempt of every delivery whose event is not held in memory runs such a read, and the
/// re-preparing cost more than the read.
const DELIVERY_ID_PARAM: &str = "CAST(?1 AS INTEGER)";

/// A pending delivery with its event, read when its attempt is due.
fn delivery_for_attempt_sql() -> String {
    format!(
        "SELECT d.endpoint, d.status, d.round, d.attempt_count, d.round_started_at, {EVENT_COLUMNS}
         FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.id = {DELIVERY_ID_PARAM}"
    )
}

/// The events of `window` that its filter lets through, at most `limit`: oldest first, or,
/// with `newest_scan`, newest first among the window's newest `newest_scan` events.
fn window_events(
    conn: &Connection,
    window: &ReplayWindow,
    limit: u32,
    newest_scan: Option<u32>,
) -> StoreResult<Vec<Arc<Event>>> {
    let topics = serde_json::to_string(&window.topics).map_err(|e| StoreError::Internal(e.to_string()))?;
    let order = if newest_scan.is_some() { "DESC" } else { "ASC" };
    let mut stmt = conn.prepare_cached(&format!(
        "SELECT {EVENT_COLUMNS} FROM events e
         WHERE e.topic IN (SELECT value FROM json_each(?1)) AND e.received_at >= ?2 AND e.received_at < ?3
         ORDER BY e.received_at {order}, e.seq {order} LIMIT ?4"
    ))?;
    // SQLite reads a negative LIMIT as none.
    let scan = newest_scan.map_or(-1, i64::from);
    let mut rows = stmt.query(params![
        topics,
        window.since.as_millis(),
        window.until.as_millis(),
        scan
    ])?;
    let mut out = Vec::new();
    while out.len() < limit as usize
        && let Some(row) = rows.next()?
    {
        let event = event_from_row(row, 0)?;
        if (window.matches)(&event) {
            out.push(Arc::new(event));
        }
    }
    Ok(out)
}

fn event_from_row(row: &Row<'_>, first: usize) -> rusqlite::Result<Event> {
    Ok(Event {
        id: row.get(first)?,
        topic: row.get(first + 1)?,
        event_type: row.get(first + 2)?,
        content_type: row.get(first + 3)?,
        payload: Bytes::from(row.get::<_, Vec<u8>>(first + 4)?),
        ordering_key: row.get(first + 5)?,
        received_at: ts(row, first + 6)?,
        tenant: row.get(first + 7)?,
        trace: TraceColumns {
            trace_id: row.get(first + 8)?,
            span_id: row.get(first + 9)?,
        }
        .into_trace(),
        labels: EventLabels::from_column(row.get::<_, Option<String>>(first + 10)?.as_deref()),
    })
}

// The queries by a delivery's state. Each names its state as a literal, the very condition of
// a partial index (migration 11), so that SQLite reads that index: a parameter in its place
// would leave SQLite to scan. `the_state_queries_read_their_partial_indexes` checks it.
// A start's page of pending deliveries goes on in two steps: the rest of the cursor's endpoint
// (a search on `endpoint = ? AND id > ?`), then the endpoints after it. One `(endpoint, id) >
// (?, ?)` seeks only on the endpoint and walks its ids from the first on every page, which
// made a million pending deliveries of one endpoint take 3 s to read instead of 0.6 s.
const PENDING_SAME_ENDPOINT_SQL: &str =
    "SELECT d.id, d.endpoint, d.next_attempt_at, d.round, d.attempt_count, e.ordering_key, d.round_started_at
     FROM deliveries d JOIN events e ON e.seq = d.event_seq
     WHERE d.status = 'pending' AND d.endpoint = ?1 AND d.id > ?2 ORDER BY d.id LIMIT ?3";
const PENDING_NEXT_ENDPOINTS_SQL: &str =
    "SELECT d.id, d.endpoint, d.next_attempt_at, d.round, d.attempt_count, e.ordering_key, d.round_started_at
     FROM deliveries d JOIN events e ON e.seq = d.event_seq
     WHERE d.status = 'pending' AND d.endpoint > ?1 ORDER BY d.endpoint, d.id LIMIT ?2";
const DEAD_OF_ENDPOINT_SQL: &str =
    "SELECT id FROM deliveries WHERE endpoint = ?1 AND status = 'dead' ORDER BY id LIMIT ?2";
const PENDING_COUNT_SQL: &str =
    "SELECT COUNT(*) FROM deliveries WHERE status = 'pending' AND (?1 IS NULL OR tenant = ?1)";
/// Pinned to the dead deliveries' index: `status = 'dead'` also satisfies the settled
/// deliveries' condition (migration 12), and the planner would scan that larger index instead.
const DEAD_COUNT_SQL: &str = "SELECT COUNT(*) FROM deliveries INDEXED BY deliveries_dead
     WHERE status = 'dead' AND (?1 IS NULL OR tenant = ?1)";
/// The condition of the settled deliveries' partial index (migration 12), written as the index
/// writes it: SQLite reads a partial index only for a query that names its condition.
macro_rules! settled {
    () => {
        "(status = 'succeeded' OR status = 'failed' OR status = 'dead')"
    };
}
const SETTLED_IN_RANGE_SQL: &str = concat!(
    "SELECT COALESCE(SUM(status = 'succeeded'), 0), COALESCE(SUM(status <> 'succeeded'), 0)
     FROM deliveries
     WHERE updated_at >= ?1 AND updated_at < ?2 AND ",
    settled!(),
    " AND (?3 IS NULL OR tenant = ?3)"
);
const SETTLED_BEFORE_SQL: &str = concat!(
    "SELECT id FROM deliveries WHERE updated_at < ?1 AND ",
    settled!(),
    " ORDER BY updated_at LIMIT ?2"
);
const FAIL_PENDING_SQL: &str =
    "UPDATE deliveries SET status = ?2, next_attempt_at = NULL, last_error = ?3, updated_at = ?4
     WHERE endpoint = ?1 AND status = 'pending'";

const DELIVERY_COLUMNS: &str = "d.id, e.id, e.topic, e.event_type, d.endpoint, d.status, d.round, d.attempt_count, \
     d.next_attempt_at, d.last_error, d.created_at, d.updated_at, d.tenant";

fn delivery_from_row(row: &Row<'_>) -> rusqlite::Result<DeliveryRow> {
    Ok(DeliveryRow {
        id: DeliveryId(row.get(0)?),
        event_id: row.get(1)?,
        topic: row.get(2)?,
        event_type: row.get(3)?,
        endpoint: row.get(4)?,
        status: parse_col(row, 5)?,
        round: row.get(6)?,
        attempt_count: row.get(7)?,
        next_attempt_at: opt_ts(row, 8)?,
        last_error: row.get(9)?,
        created_at: ts(row, 10)?,
        updated_at: ts(row, 11)?,
        tenant: row.get(12)?,
    })
}

/// The attempt columns `n, started_at, duration_ms, status_code, error_kind, error, plugin_note,
/// request_headers, response_headers, response_body, trace_id` from `first` on.
fn attempt_from_row(r: &Row<'_>, first: usize) -> rusqlite::Result<Attempt> {
    Ok(Attempt {
        n: r.get(first)?,
        started_at: ts(r, first + 1)?,
        duration_ms: r.get::<_, i64>(first + 2)?.max(0) as u64,
        status_code: r.get(first + 3)?,
        error_kind: r
            .get::<_, Option<String>>(first + 4)?
            .map(|k| k.parse::<ErrorKind>())
            .transpose()
            .map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(first + 4, rusqlite::types::Type::Text, e.into())
            })?,
        error: r.get(first + 5)?,
        exchange: ExchangeColumns {
            request_headers: r.get(first + 7)?,
            response_headers: r.get(first + 8)?,
            response_body: r.get(first + 9)?,
        }
        .into_exchange(),
        trace_id: parse_trace_id(r.get::<_, Option<String>>(first + 10)?.as_deref()),
    })
}

fn millis(t: Option<Timestamp>) -> Option<i64> {
    t.map(Timestamp::as_millis)
}

const APPLICATION_COLUMNS: &str = "id, uid, tenant, name, metadata, rate_limit, created_at, updated_at";

fn application_from_row(r: &Row<'_>) -> rusqlite::Result<ApplicationRow> {
    Ok(ApplicationRow {
        id: r.get(0)?,
        uid: r.get(1)?,
        tenant: r.get(2)?,
        name: r.get(3)?,
        metadata: r.get(4)?,
        rate_limit: r.get(5)?,
        created_at: ts(r, 6)?,
        updated_at: ts(r, 7)?,
    })
}

const EVENT_TYPE_COLUMNS: &str =
    "name, description, archived, deprecated, schemas, feature_flags, group_name, created_at, updated_at";

fn event_type_from_row(r: &Row<'_>) -> rusqlite::Result<EventTypeRow> {
    Ok(EventTypeRow {
        name: r.get(0)?,
        description: r.get(1)?,
        archived: r.get(2)?,
        deprecated: r.get(3)?,
        schemas: r.get(4)?,
        feature_flags: r.get(5)?,
        group_name: r.get(6)?,
        created_at: ts(r, 7)?,
        updated_at: ts(r, 8)?,
    })
}

/// A unique column taken: the write changed nothing.
fn taken(e: rusqlite::Error, what: &str) -> StoreError {
    if e.sqlite_error_code() == Some(rusqlite::ErrorCode::ConstraintViolation) {
        StoreError::Conflict(format!("{what} exists"))
    } else {
        e.into()
    }
}

fn insert_event(conn: &Connection, event: &Event) -> StoreResult<i64> {
    let trace = TraceColumns::of(event.trace);
    let inserted = conn
        .prepare_cached(
            "INSERT INTO events (id, topic, event_type, content_type, payload, ordering_key, received_at, tenant,
                 trace_id, trace_span_id, labels)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11) ON CONFLICT (topic, id) DO NOTHING",
        )?
        .execute(params![
            event.id,
            event.topic,
            event.event_type,
            event.content_type,
            &event.payload[..],
            event.ordering_key,
            event.received_at.as_millis(),
            event.tenant,
            trace.trace_id,
            trace.span_id,
            event.labels.to_column(),
        ])?;
    if inserted == 0 {
        return Err(StoreError::DuplicateEvent {
            topic: event.topic.clone(),
            id: event.id.clone(),
        });
    }
    Ok(conn.last_insert_rowid())
}

/// A new pending delivery of the event at `event_seq`. It carries the event's ordering key, so
/// that an endpoint's keys can be listed from the deliveries' own index.
fn insert_delivery(
    conn: &Connection,
    event_seq: i64,
    event: &Event,
    target: &Target,
    now: Timestamp,
) -> StoreResult<DeliveryId> {
    conn.prepare_cached(
        "INSERT INTO deliveries (event_seq, endpoint, status, round, attempt_count, next_attempt_at, created_at, updated_at,
             round_started_at, tenant, ordering_key)
         VALUES (?1, ?2, 'pending', 1, 0, ?3, ?3, ?3, ?3, ?4, ?5)",
    )?
    .execute(params![
        event_seq,
        &*target.endpoint,
        now.as_millis(),
        target.tenant.as_deref(),
        event.ordering_key
    ])?;
    Ok(DeliveryId(conn.last_insert_rowid()))
}

fn idempotency_lookup(
    conn: &Connection,
    sealer: &Sealer,
    scope: &str,
    key: &str,
) -> StoreResult<Option<IdempotencyRecord>> {
    let found = conn
        .prepare_cached(
            "SELECT request_hash, status, response, created_at FROM idempotency WHERE scope = ?1 AND key = ?2",
        )?
        .query_row(params![scope, key], |row| {
            Ok(IdempotencyRecord {
                scope: scope.to_owned(),
                key: key.to_owned(),
                request_hash: row.get(0)?,
                status: row.get(1)?,
                response: Bytes::from(row.get::<_, Vec<u8>>(2)?),
                created_at: ts(row, 3)?,
            })
        })
        .optional()?;
    found.map(|record| sealer.open_idempotency(record)).transpose()
}

/// Inserts `record`, whose answer is sealed already ([`Sealer::seal_idempotency`]). A key
/// stored already keeps its first answer: ingestion and replay looked the key up in the same
/// transaction, and a request racing [`Store::save_idempotency`] was first.
fn insert_idempotency(conn: &Connection, record: &IdempotencyRecord) -> StoreResult<()> {
    conn.prepare_cached(
        "INSERT INTO idempotency (scope, key, request_hash, status, response, created_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6) ON CONFLICT (scope, key) DO NOTHING",
    )?
    .execute(params![
        record.scope,
        record.key,
        record.request_hash,
        record.status,
        &record.response[..],
        record.created_at.as_millis(),
    ])?;
    Ok(())
}

fn read_health(conn: &Connection, endpoint: &str) -> StoreResult<EndpointHealth> {
    Ok(conn
        .prepare_cached(
            "SELECT state, consecutive_failures, failing_since, last_success_at, changed_at
             FROM endpoint_health WHERE endpoint = ?1",
        )?
        .query_row(params![endpoint], |row| {
            Ok(EndpointHealth {
                state: parse_col(row, 0)?,
                consecutive_failures: row.get(1)?,
                failing_since: opt_ts(row, 2)?,
                last_success_at: opt_ts(row, 3)?,
                changed_at: opt_ts(row, 4)?,
            })
        })
        .optional()?
        .unwrap_or_default())
}

/// Applies a health input to the health the database holds, writes the new health and records
/// the transitions in the history.
fn apply_health(conn: &Connection, change: &HealthChange) -> StoreResult<HealthApplied> {
    let current = read_health(conn, &change.endpoint)?;
    let step = crate::health::apply(&change.rules, &current, change.input, change.at);
    let h = &step.health;
    conn.prepare_cached(
        "INSERT INTO endpoint_health (endpoint, state, consecutive_failures, failing_since, last_success_at, changed_at)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)
         ON CONFLICT (endpoint) DO UPDATE SET state = excluded.state,
             consecutive_failures = excluded.consecutive_failures, failing_since = excluded.failing_since,
             last_success_at = excluded.last_success_at, changed_at = excluded.changed_at",
    )?
    .execute(params![
        &*change.endpoint,
        h.state.as_str(),
        h.consecutive_failures,
        h.failing_since.map(Timestamp::as_millis),
        h.last_success_at.map(Timestamp::as_millis),
        h.changed_at.map(Timestamp::as_millis),
    ])?;
    for t in &step.transitions {
        conn.prepare_cached(
            "INSERT INTO endpoint_history (endpoint, state, at, reason) VALUES (?1, ?2, ?3, ?4)",
        )?
        .execute(params![
            &*change.endpoint,
            t.to.as_str(),
            t.at.as_millis(),
            t.reason
        ])?;
    }
    Ok(HealthApplied {
        endpoint: change.endpoint.clone(),
        input: change.input,
        step,
    })
}

fn write_attempt(conn: &Connection, write: &AttemptWrite) -> StoreResult<()> {
    let a = &write.attempt;
    let exchange = ExchangeColumns::of(&a.exchange);
    conn.prepare_cached(
        "INSERT INTO attempts (delivery_id, round, n, started_at, duration_ms, status_code, error_kind, error, plugin_note,
             request_headers, response_headers, response_body, trace_id)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
    )?
    .execute(params![
        write.delivery.0,
        write.round,
        a.n,
        a.started_at.as_millis(),
        i64::try_from(a.duration_ms).unwrap_or(i64::MAX),
        a.status_code,
        a.error_kind.map(|k| k.as_str()),
        a.error,
        write.plugin_note,
        exchange.request_headers,
        exchange.response_headers,
        exchange.response_body,
        a.trace_id.map(|t| t.to_string()),
    ])?;
    let values = params![
        write.delivery.0,
        write.status.as_str(),
        a.n,
        write.next_attempt_at.map(Timestamp::as_millis),
        write.last_error,
        a.started_at
            .plus(std::time::Duration::from_millis(a.duration_ms))
            .as_millis(),
        write.round,
    ];
    // An attempt that leaves its delivery pending does not name `status` among the columns it
    // sets: SQLite then leaves the partial indexes on the state as they are, where setting it
    // to the same value would take each entry out and put it back.
    if write.status == DeliveryStatus::Pending
        && conn
            .prepare_cached(
                "UPDATE deliveries SET attempt_count = ?3, next_attempt_at = ?4, last_error = ?5, updated_at = ?6
                 WHERE id = ?1 AND round = ?7 AND status = ?2",
            )?
            .execute(values)?
            == 1
    {
        return Ok(());
    }
    // The round guard keeps a late outcome of an old round from overwriting a redelivery.
    conn.prepare_cached(
        "UPDATE deliveries SET status = ?2, attempt_count = ?3, next_attempt_at = ?4, last_error = ?5,
             updated_at = ?6 WHERE id = ?1 AND round = ?7",
    )?
    .execute(values)?;
    Ok(())
}

/// Marks a delivery as the start of a new round, if its state allows: a finished one always,
/// a pending one only when `replace_waiting`.
fn restart_round(
    conn: &Connection,
    id: DeliveryId,
    now: Timestamp,
    replace_waiting: bool,
) -> StoreResult<Restarted> {
    let row = conn
        .prepare_cached(&format!(
            "SELECT d.status, d.round, d.endpoint, {EVENT_COLUMNS}
             FROM deliveries d JOIN events e ON e.seq = d.event_seq WHERE d.id = {DELIVERY_ID_PARAM}"
        ))?
        .query_row(params![id.0], |row| {
            Ok((
                parse_col::<DeliveryStatus>(row, 0)?,
                row.get::<_, u32>(1)?,
                row.get::<_, String>(2)?,
                event_from_row(row, 3)?,
            ))
        })
        .optional()?;
    let Some((status, round, endpoint, event)) = row else {
        return Err(StoreError::NotFound(format!("delivery {id}")));
    };
    let was_pending = !status.is_final();
    if was_pending && !replace_waiting {
        return Err(StoreError::Conflict(format!(
            "delivery {id} is {} and will be attempted by itself",
            status.as_str()
        )));
    }
    conn.prepare_cached(
        "UPDATE deliveries SET status = 'pending', round = ?2, attempt_count = 0, next_attempt_at = ?3,
             last_error = NULL, updated_at = ?3, round_started_at = ?3 WHERE id = ?1",
    )?
    .execute(params![id.0, round + 1, now.as_millis()])?;
    Ok(Restarted {
        ready: ReadyDelivery {
            id,
            endpoint: Arc::from(endpoint),
            event: Arc::new(event),
            next_attempt_at: now,
            round: round + 1,
            round_started_at: now,
            attempts_made: 0,
        },
        was_pending,
    })
}

#[async_trait]
impl Store for SqliteStore {
    async fn ingest(&self, batch: IngestBatch) -> StoreResult<IngestOutcome> {
        let sealer = self.sealer.clone();
        // Sealed here, so that the writer thread spends no time on it.
        let sealed = batch.idempotency.as_ref().map(|r| sealer.seal_idempotency(r));
        self.write(Urgency::RefuseWhenFull, move |conn| {
            if let Some(record) = &batch.idempotency
                && let Some(first) = idempotency_lookup(conn, &sealer, &record.scope, &record.key)?
            {
                return Ok(IngestOutcome::AlreadyDone(first));
            }
            let mut ready = Vec::with_capacity(batch.items.iter().map(|i| i.endpoints.len()).sum());
            for item in &batch.items {
                let seq = insert_event(conn, &item.event)?;
                for target in &item.endpoints {
                    let id = insert_delivery(conn, seq, &item.event, target, batch.now)?;
                    ready.push(ReadyDelivery {
                        id,
                        endpoint: target.endpoint.clone(),
                        event: item.event.clone(),
                        next_attempt_at: batch.now,
                        round: 1,
                        round_started_at: batch.now,
                        attempts_made: 0,
                    });
                }
            }
            if let Some(record) = &sealed {
                insert_idempotency(conn, record)?;
            }
            Ok(IngestOutcome::Committed(ready))
        })
        .await
    }

    async fn apply(&self, changes: Arc<[StateChange]>) -> StoreResult<Vec<HealthApplied>> {
        self.write(Urgency::Wait, move |conn| {
            let mut applied = Vec::new();
            for change in changes.iter() {
                match change {
                    StateChange::Attempt(write) => write_attempt(conn, write)?,
                    StateChange::Health(change) => applied.push(apply_health(conn, change)?),
                    StateChange::FailPending {
                        endpoint,
                        kind,
                        status,
                        now,
                    } => {
                        conn.prepare_cached(FAIL_PENDING_SQL)?
                        .execute(params![&**endpoint, status.as_str(), kind.as_str(), now.as_millis()])?;
                    }
                    StateChange::Finish {
                        delivery,
                        status,
                        error,
                        now,
                    } => {
                        conn.prepare_cached(
                            "UPDATE deliveries SET status = ?2, next_attempt_at = NULL, last_error = ?3, updated_at = ?4
                             WHERE id = ?1 AND status = 'pending'",
                        )?
                        .execute(params![delivery.0, status.as_str(), error, now.as_millis()])?;
                    }
                    StateChange::Hold {
                        endpoint,
                        key,
                        delivery,
                        at,
                    } => ordering::hold(conn, endpoint, key, *delivery, *at)?,
                    StateChange::Release {
                        endpoint,
                        key,
                        delivery,
                    } => ordering::release(conn, endpoint, key, *delivery)?,
                }
            }
            Ok(applied)
        })
        .await
    }

    async fn restart_delivery(
        &self,
        id: DeliveryId,
        now: Timestamp,
        replace_waiting: bool,
    ) -> StoreResult<Restarted> {
        self.write(Urgency::Wait, move |conn| {
            restart_round(conn, id, now, replace_waiting)
        })
        .await
    }

    async fn restart_dead(
        &self,
        endpoint: &str,
        now: Timestamp,
        limit: u32,
    ) -> StoreResult<Vec<ReadyDelivery>> {
        let endpoint = endpoint.to_owned();
        self.write(Urgency::Wait, move |conn| {
            let ids: Vec<i64> = conn
                .prepare_cached(DEAD_OF_ENDPOINT_SQL)?
                .query_map(params![endpoint, limit], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            ids.into_iter()
                .map(|id| restart_round(conn, DeliveryId(id), now, false).map(|r| r.ready))
                .collect()
        })
        .await
    }

    async fn create_deliveries(
        &self,
        target: Target,
        events: Vec<Arc<Event>>,
        idempotency: Option<(IdempotencyRecord, AnswerFn)>,
        now: Timestamp,
    ) -> StoreResult<IngestOutcome> {
        let sealer = self.sealer.clone();
        self.write(Urgency::Wait, move |conn| {
            if let Some((record, _)) = &idempotency
                && let Some(first) = idempotency_lookup(conn, &sealer, &record.scope, &record.key)?
            {
                return Ok(IngestOutcome::AlreadyDone(first));
            }
            let mut ready = Vec::with_capacity(events.len());
            for event in events {
                let seq: Option<i64> = conn
                    .prepare_cached("SELECT seq FROM events WHERE topic = ?1 AND id = ?2")?
                    .query_row(params![event.topic, event.id], |r| r.get(0))
                    .optional()?;
                // An event purged since the window was read is simply not replayed.
                let Some(seq) = seq else { continue };
                let id = insert_delivery(conn, seq, &event, &target, now)?;
                ready.push(ReadyDelivery {
                    id,
                    endpoint: target.endpoint.clone(),
                    event,
                    next_attempt_at: now,
                    round: 1,
                    round_started_at: now,
                    attempts_made: 0,
                });
            }
            if let Some((mut record, answer)) = idempotency {
                record.response = answer(&ready);
                insert_idempotency(conn, &sealer.seal_idempotency(&record))?;
            }
            Ok(IngestOutcome::Committed(ready))
        })
        .await
    }

    async fn pending_page(
        &self,
        after: Option<PendingCursor>,
        limit: u32,
    ) -> StoreResult<Vec<PendingDelivery>> {
        self.read(move |conn| {
            // Without a cursor, from before the first endpoint (no name is empty).
            let after_endpoint = after.as_ref().map_or(String::new(), |c| c.endpoint.to_string());
            // Endpoint names repeat on every row; share one allocation per name.
            let mut names: std::collections::HashMap<String, Arc<str>> = Default::default();
            let mut pending = |row: &Row<'_>| -> rusqlite::Result<PendingDelivery> {
                let endpoint = names
                    .entry(row.get(1)?)
                    .or_insert_with_key(|k: &String| Arc::from(k.as_str()))
                    .clone();
                let round_started_at = ts(row, 6)?;
                Ok(PendingDelivery {
                    id: DeliveryId(row.get(0)?),
                    endpoint,
                    next_attempt_at: opt_ts(row, 2)?.unwrap_or(round_started_at),
                    round: row.get(3)?,
                    attempts_made: row.get(4)?,
                    ordering_key: row.get(5)?,
                    round_started_at,
                })
            };
            let mut out = Vec::with_capacity(limit.min(PENDING_PAGE) as usize);
            if let Some(cursor) = &after {
                let mut stmt = conn.prepare_cached(PENDING_SAME_ENDPOINT_SQL)?;
                for row in stmt.query_map(params![after_endpoint, cursor.id.0, limit], &mut pending)? {
                    out.push(row?);
                }
            }
            let left = limit.saturating_sub(out.len() as u32);
            if left > 0 {
                let mut stmt = conn.prepare_cached(PENDING_NEXT_ENDPOINTS_SQL)?;
                for row in stmt.query_map(params![after_endpoint, left], &mut pending)? {
                    out.push(row?);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn delivery_for_attempt(&self, id: DeliveryId) -> StoreResult<Option<DeliveryForAttempt>> {
        self.read(move |conn| {
            Ok(conn
                .prepare_cached(&delivery_for_attempt_sql())?
                .query_row(params![id.0], |row| {
                    Ok(DeliveryForAttempt {
                        id,
                        endpoint: Arc::from(row.get::<_, String>(0)?),
                        status: parse_col(row, 1)?,
                        round: row.get(2)?,
                        attempts_made: row.get(3)?,
                        round_started_at: ts(row, 4)?,
                        event: Arc::new(event_from_row(row, 5)?),
                    })
                })
                .optional()?)
        })
        .await
    }

    async fn events_in_window(&self, window: ReplayWindow, limit: u32) -> StoreResult<Vec<Arc<Event>>> {
        self.read(move |conn| window_events(conn, &window, limit, None))
            .await
    }

    async fn ordering_keys(
        &self,
        endpoint: &str,
        listing: KeyListing,
        after: Option<String>,
        limit: u32,
    ) -> StoreResult<KeyPage> {
        let endpoint = endpoint.to_owned();
        self.read(move |conn| ordering::ordering_keys(conn, &endpoint, listing, after, limit))
            .await
    }

    async fn held_keys(&self) -> StoreResult<Vec<HeldKey>> {
        self.read(ordering::held_keys).await
    }

    async fn latest_events(
        &self,
        window: ReplayWindow,
        limit: u32,
        scan: u32,
    ) -> StoreResult<Vec<Arc<Event>>> {
        self.read(move |conn| window_events(conn, &window, limit, Some(scan)))
            .await
    }

    async fn event(&self, id: &str, topic: Option<&str>) -> StoreResult<Vec<Event>> {
        let (id, topic) = (id.to_owned(), topic.map(str::to_owned));
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {EVENT_COLUMNS} FROM events e WHERE e.id = ?1 AND (?2 IS NULL OR e.topic = ?2) ORDER BY e.seq"
            ))?;
            let rows = stmt.query_map(params![id, topic], |row| event_from_row(row, 0))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn expunge_payload(&self, topic: &str, id: &str, labels: &EventLabels) -> StoreResult<bool> {
        let (topic, id, labels) = (topic.to_owned(), id.to_owned(), labels.to_column());
        self.write(Urgency::Wait, move |conn| {
            let changed = conn
                .prepare_cached("UPDATE events SET payload = X'', labels = ?3 WHERE topic = ?1 AND id = ?2")?
                .execute(params![topic, id, labels])?;
            Ok(changed > 0)
        })
        .await
    }

    async fn deliveries(&self, filter: DeliveryFilter) -> StoreResult<Vec<DeliveryRow>> {
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {DELIVERY_COLUMNS} FROM deliveries d JOIN events e ON e.seq = d.event_seq
                 WHERE (?1 IS NULL OR d.endpoint = ?1) AND (?2 IS NULL OR d.status = ?2)
                   AND (?3 IS NULL OR e.id = ?3) AND (?4 IS NULL OR d.id < ?4)
                   AND (?6 IS NULL OR d.tenant = ?6) AND (?7 IS NULL OR e.event_type = ?7)
                   AND (?8 IS NULL OR d.created_at >= ?8) AND (?9 IS NULL OR d.created_at < ?9)
                   AND (?10 IS NULL OR d.id > ?10)
                 ORDER BY d.id {} LIMIT ?5",
                order(filter.after.is_some())
            ))?;
            let rows = stmt.query_map(
                params![
                    filter.endpoint,
                    filter.status.map(DeliveryStatus::as_str),
                    filter.event_id,
                    filter.before.map(|d| d.0),
                    filter.limit,
                    filter.tenant,
                    filter.event_type,
                    filter.since.map(Timestamp::as_millis),
                    filter.until.map(Timestamp::as_millis),
                    filter.after.map(|d| d.0),
                ],
                delivery_from_row,
            )?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn delivery(&self, id: DeliveryId) -> StoreResult<Option<(DeliveryRow, Vec<AttemptRow>)>> {
        self.read(move |conn| {
            let row = conn
                .prepare_cached(&format!(
                    "SELECT {DELIVERY_COLUMNS} FROM deliveries d JOIN events e ON e.seq = d.event_seq \
                     WHERE d.id = {DELIVERY_ID_PARAM}"
                ))?
                .query_row(params![id.0], delivery_from_row)
                .optional()?;
            let Some(row) = row else { return Ok(None) };
            let mut stmt = conn.prepare_cached(
                "SELECT round, n, started_at, duration_ms, status_code, error_kind, error, plugin_note,
                        request_headers, response_headers, response_body, trace_id
                 FROM attempts WHERE delivery_id = ?1 ORDER BY id",
            )?;
            let attempts = stmt
                .query_map(params![id.0], |r| {
                    Ok(AttemptRow {
                        round: r.get(0)?,
                        attempt: attempt_from_row(r, 1)?,
                        plugin_note: r.get(7)?,
                    })
                })?
                .collect::<rusqlite::Result<_>>()?;
            Ok(Some((row, attempts)))
        })
        .await
    }

    async fn delivery_summary(
        &self,
        endpoint: &str,
        from: DeliveryId,
        to: DeliveryId,
    ) -> StoreResult<Vec<(DeliveryStatus, u64)>> {
        let endpoint = endpoint.to_owned();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT status, COUNT(*) FROM deliveries WHERE endpoint = ?1 AND id BETWEEN ?2 AND ?3 GROUP BY status",
            )?;
            let rows = stmt.query_map(params![endpoint, from.0, to.0], |r| Ok((parse_col(r, 0)?, r.get::<_, i64>(1)?.max(0) as u64)))?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn endpoint_health(&self) -> StoreResult<Vec<(String, EndpointHealth)>> {
        self.read(|conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT endpoint, state, consecutive_failures, failing_since, last_success_at, changed_at
                 FROM endpoint_health ORDER BY endpoint",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    EndpointHealth {
                        state: parse_col::<EndpointState>(r, 1)?,
                        consecutive_failures: r.get(2)?,
                        failing_since: opt_ts(r, 3)?,
                        last_success_at: opt_ts(r, 4)?,
                        changed_at: opt_ts(r, 5)?,
                    },
                ))
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn endpoint_history(&self, endpoint: &str, limit: u32) -> StoreResult<Vec<HistoryEntry>> {
        let endpoint = endpoint.to_owned();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(
                "SELECT state, at, reason FROM (
                     SELECT id, state, at, reason FROM endpoint_history WHERE endpoint = ?1 ORDER BY id DESC LIMIT ?2
                 ) ORDER BY id",
            )?;
            let rows = stmt.query_map(params![endpoint, limit], |r| {
                Ok(HistoryEntry {
                    state: parse_col(r, 0)?,
                    at: ts(r, 1)?,
                    reason: r.get(2)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn idempotency_record(&self, scope: &str, key: &str) -> StoreResult<Option<IdempotencyRecord>> {
        let (scope, key) = (scope.to_owned(), key.to_owned());
        let sealer = self.sealer.clone();
        self.read(move |conn| idempotency_lookup(conn, &sealer, &scope, &key))
            .await
    }

    async fn activity(
        &self,
        since: Timestamp,
        bucket: std::time::Duration,
        buckets: u32,
        tenant: Option<String>,
    ) -> StoreResult<Vec<ActivityBucket>> {
        let width = (bucket.as_millis() as i64).max(1);
        self.read(move |conn| {
            // One range count per bucket over the settled deliveries' index: a GROUP BY over a
            // day's million rows would sort them in a temporary B-tree, three times slower. The
            // status term is the index's own condition, word for word, so that SQLite uses it.
            let mut stmt = conn.prepare_cached(SETTLED_IN_RANGE_SQL)?;
            // A range count on the partial index of failed attempts; a tenant's are found
            // through their delivery.
            let mut failed_attempts = conn.prepare_cached(
                "SELECT COUNT(*) FROM attempts a
                 WHERE a.started_at >= ?1 AND a.started_at < ?2 AND a.error_kind IS NOT NULL
                   AND (?3 IS NULL OR EXISTS
                        (SELECT 1 FROM deliveries d WHERE d.id = a.delivery_id AND d.tenant = ?3))",
            )?;
            let mut out = activity_buckets(since, width, buckets);
            for bucket in &mut out {
                let start = bucket.start.as_millis();
                let (succeeded, failed): (i64, i64) = stmt
                    .query_row(params![start, start + width, tenant], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?;
                bucket.succeeded = succeeded.max(0) as u64;
                bucket.failed = failed.max(0) as u64;
                let attempts: i64 =
                    failed_attempts.query_row(params![start, start + width, tenant], |r| r.get(0))?;
                bucket.failed_attempts = attempts.max(0) as u64;
            }
            Ok(out)
        })
        .await
    }

    async fn backlog(&self, tenant: Option<String>) -> StoreResult<Backlog> {
        self.read(move |conn| {
            // The states as literals, not parameters: each count then reads its partial index.
            let count = |sql: &str| -> rusqlite::Result<u64> {
                conn.prepare_cached(sql)?
                    .query_row(params![tenant], |r| r.get::<_, i64>(0))
                    .map(|n| n.max(0) as u64)
            };
            Ok(Backlog {
                pending: count(PENDING_COUNT_SQL)?,
                dead: count(DEAD_COUNT_SQL)?,
            })
        })
        .await
    }

    async fn api_endpoint(&self, name: &str) -> StoreResult<Option<ApiEndpointRow>> {
        let name = name.to_owned();
        let sealer = self.sealer.clone();
        self.read(move |conn| {
            conn.prepare_cached(&format!(
                "SELECT {API_ENDPOINT_COLUMNS} FROM api_endpoints WHERE name = ?1"
            ))?
            .query_row(params![name], api_endpoint_from_row)
            .optional()?
            .map(|row| sealer.open_endpoint(row))
            .transpose()
        })
        .await
    }

    async fn api_endpoint_page(&self, page: EndpointPage) -> StoreResult<Vec<ApiEndpointRow>> {
        let sealer = self.sealer.clone();
        self.read(move |conn| {
            let mut stmt = conn.prepare_cached(&page.sql(["?1", "?2", "?3"]))?;
            let rows = stmt
                .query_map(
                    params![page.tenant, page.after, page.limit],
                    api_endpoint_from_row,
                )?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            sealer.open_endpoints(rows)
        })
        .await
    }

    async fn save_api_endpoint(&self, row: ApiEndpointRow, previous: Option<u64>) -> StoreResult<()> {
        let row = self.sealer.seal_endpoint(row);
        self.write(Urgency::Wait, move |conn| {
            let (secret, until) = row.retiring.clone().unzip();
            let until = until.map(Timestamp::as_millis);
            let changed = if let Some(previous) = previous {
                conn.prepare_cached(
                    "UPDATE api_endpoints SET tenant = ?2, spec = ?3, uid = ?4, retiring_secret = ?5,
                            retiring_until = ?6, version = ?7, updated_at = ?8
                     WHERE name = ?1 AND version = ?9",
                )?
                .execute(params![
                    row.name,
                    row.tenant,
                    row.spec,
                    row.uid,
                    secret,
                    until,
                    row.version as i64,
                    row.updated_at.as_millis(),
                    previous as i64,
                ])
                .map_err(|e| uid_taken_or(e, &row))?
            } else {
                conn.prepare_cached(
                    "INSERT INTO api_endpoints (name, tenant, spec, uid, retiring_secret, retiring_until,
                                                version, created_at, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) ON CONFLICT (name) DO NOTHING",
                )?
                .execute(params![
                    row.name,
                    row.tenant,
                    row.spec,
                    row.uid,
                    secret,
                    until,
                    row.version as i64,
                    row.created_at.as_millis(),
                    row.updated_at.as_millis(),
                ])
                .map_err(|e| uid_taken_or(e, &row))?
            };
            if changed == 0 {
                return Err(api_endpoint_conflict(&row, previous.is_some()));
            }
            Ok(())
        })
        .await
    }

    async fn delete_api_endpoint(&self, name: &str) -> StoreResult<()> {
        self.delete_row("api_endpoints", "name", name, "endpoint").await
    }

    async fn applications(
        &self,
        after: Option<String>,
        limit: u32,
        descending: bool,
    ) -> StoreResult<Vec<ApplicationRow>> {
        self.read(move |conn| {
            // As for endpoints: no `OR` around the cursor, which would scan from the first id.
            let (cursor, order) = match (after.is_some(), descending) {
                (true, false) => ("id > ?1", "ASC"),
                (true, true) => ("id < ?1", "DESC"),
                (false, false) => ("?1 IS NULL", "ASC"),
                (false, true) => ("?1 IS NULL", "DESC"),
            };
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {APPLICATION_COLUMNS} FROM applications WHERE {cursor} ORDER BY id {order} LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![after, limit], application_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn application(&self, key: &str) -> StoreResult<Option<ApplicationRow>> {
        let key = key.to_owned();
        // By id, else uid, else tenant: three searches of unique indexes, the first found
        // answering. (One search with `OR` and an `ORDER BY` on the parameter was planned again
        // for every new key: SQLite re-prepared it on each bind, about a fifth of a Svix
        // message's CPU.)
        self.read(move |conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {APPLICATION_COLUMNS} FROM applications WHERE id = ?1
                     UNION ALL SELECT {APPLICATION_COLUMNS} FROM applications WHERE uid = ?1
                     UNION ALL SELECT {APPLICATION_COLUMNS} FROM applications WHERE tenant = ?1
                     LIMIT 1"
                ))?
                .query_row(params![key], application_from_row)
                .optional()?)
        })
        .await
    }

    async fn save_application(&self, row: ApplicationRow, previous: Option<Timestamp>) -> StoreResult<()> {
        self.write(Urgency::Wait, move |conn| {
            let what = format!("an application with id `{}`, uid or tenant", row.id);
            let changed = if let Some(previous) = previous {
                conn.prepare_cached(
                    "UPDATE applications SET uid = ?2, name = ?3, metadata = ?4, rate_limit = ?5, updated_at = ?6
                     WHERE id = ?1 AND updated_at = ?7",
                )?
                .execute(params![
                    row.id,
                    row.uid,
                    row.name,
                    row.metadata,
                    row.rate_limit,
                    row.updated_at.as_millis(),
                    previous.as_millis()
                ])
                .map_err(|e| taken(e, &what))?
            } else {
                conn.prepare_cached(&format!(
                    "INSERT INTO applications ({APPLICATION_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                ))?
                .execute(params![
                    row.id,
                    row.uid,
                    row.tenant,
                    row.name,
                    row.metadata,
                    row.rate_limit,
                    row.created_at.as_millis(),
                    row.updated_at.as_millis()
                ])
                .map_err(|e| taken(e, &what))?
            };
            if changed == 0 {
                return Err(changed_meanwhile("application", &row.id));
            }
            Ok(())
        })
        .await
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
        self.read(move |conn| {
            let (cursor, order) = if descending { ("<", "DESC") } else { (">", "ASC") };
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT {EVENT_TYPE_COLUMNS} FROM event_types
                 WHERE (?1 IS NULL OR name {cursor} ?1) AND (?3 OR NOT archived) ORDER BY name {order} LIMIT ?2"
            ))?;
            let rows = stmt.query_map(params![after, limit, include_archived], event_type_from_row)?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn event_type(&self, name: &str) -> StoreResult<Option<EventTypeRow>> {
        let name = name.to_owned();
        self.read(move |conn| {
            Ok(conn
                .prepare_cached(&format!(
                    "SELECT {EVENT_TYPE_COLUMNS} FROM event_types WHERE name = ?1"
                ))?
                .query_row(params![name], event_type_from_row)
                .optional()?)
        })
        .await
    }

    async fn save_event_type(&self, row: EventTypeRow, previous: Option<Timestamp>) -> StoreResult<()> {
        self.write(Urgency::Wait, move |conn| {
            let changed = if let Some(previous) = previous {
                conn.prepare_cached(
                    "UPDATE event_types SET description = ?2, archived = ?3, deprecated = ?4, schemas = ?5,
                            feature_flags = ?6, group_name = ?7, updated_at = ?8
                     WHERE name = ?1 AND updated_at = ?9",
                )?
                .execute(params![
                    row.name,
                    row.description,
                    row.archived,
                    row.deprecated,
                    row.schemas,
                    row.feature_flags,
                    row.group_name,
                    row.updated_at.as_millis(),
                    previous.as_millis()
                ])?
            } else {
                conn.prepare_cached(&format!(
                    "INSERT INTO event_types ({EVENT_TYPE_COLUMNS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)
                     ON CONFLICT (name) DO NOTHING"
                ))?
                .execute(params![
                    row.name,
                    row.description,
                    row.archived,
                    row.deprecated,
                    row.schemas,
                    row.feature_flags,
                    row.group_name,
                    row.created_at.as_millis(),
                    row.updated_at.as_millis()
                ])?
            };
            if changed == 0 {
                return Err(match previous {
                    Some(_) => changed_meanwhile("event type", &row.name),
                    None => StoreError::Conflict(format!("an event type named `{}` exists", row.name)),
                });
            }
            Ok(())
        })
        .await
    }

    async fn delete_event_type(&self, name: &str) -> StoreResult<()> {
        self.delete_row("event_types", "name", name, "event type").await
    }

    async fn save_idempotency(&self, record: IdempotencyRecord) -> StoreResult<()> {
        let record = self.sealer.seal_idempotency(&record);
        self.write(Urgency::Wait, move |conn| insert_idempotency(conn, &record))
            .await
    }

    async fn tenant_events(&self, query: EventQuery) -> StoreResult<Vec<(i64, Event)>> {
        self.read(move |conn| {
            let types =
                serde_json::to_string(&query.event_types).map_err(|e| StoreError::Internal(e.to_string()))?;
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT e.seq, {EVENT_COLUMNS} FROM events e
                 WHERE e.tenant = ?1 AND (?2 IS NULL OR e.seq < ?2)
                   AND (?3 IS NULL OR e.received_at >= ?3) AND (?4 IS NULL OR e.received_at < ?4)
                   AND (?5 = '[]' OR e.event_type IN (SELECT value FROM json_each(?5)))
                   AND (?7 IS NULL OR e.seq > ?7)
                 ORDER BY e.seq {} LIMIT ?6",
                order(query.after.is_some())
            ))?;
            let rows = stmt.query_map(
                params![
                    query.tenant,
                    query.before,
                    millis(query.since),
                    millis(query.until),
                    types,
                    query.limit,
                    query.after
                ],
                |r| Ok((r.get(0)?, event_from_row(r, 1)?)),
            )?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn attempts(&self, query: AttemptQuery) -> StoreResult<Vec<AttemptListRow>> {
        self.read(move |conn| {
            // Only the filters given, so that the planner can start from the one event's
            // deliveries (events_by_id) instead of walking every attempt; `+` keeps it from
            // starting from all of the tenant's deliveries instead.
            let mut conditions = Vec::new();
            let mut values: Vec<rusqlite::types::Value> = Vec::new();
            for (column, value) in [
                ("+d.tenant = ?", query.tenant.map(Into::into)),
                ("e.id = ?", query.event_id.map(Into::into)),
                ("d.endpoint = ?", query.endpoint.map(Into::into)),
                ("a.id < ?", query.before.map(Into::into)),
                ("a.id > ?", query.after.map(Into::into)),
            ] {
                if let Some(value) = value {
                    conditions.push(column);
                    values.push(value);
                }
            }
            values.push(i64::from(query.limit).into());
            let filter = if conditions.is_empty() {
                String::new()
            } else {
                format!("WHERE {}", conditions.join(" AND "))
            };
            let mut stmt = conn.prepare_cached(&format!(
                "SELECT a.id, d.id, e.id, d.endpoint, a.round, a.n, a.started_at, a.duration_ms, a.status_code,
                        a.error_kind, a.error, a.plugin_note, a.request_headers, a.response_headers,
                        a.response_body, a.trace_id
                 FROM attempts a JOIN deliveries d ON d.id = a.delivery_id JOIN events e ON e.seq = d.event_seq
                 {filter} ORDER BY a.id {} LIMIT ?",
                order(query.after.is_some())
            ))?;
            let rows = stmt.query_map(rusqlite::params_from_iter(values), |r| {
                Ok(AttemptListRow {
                    id: r.get(0)?,
                    delivery: DeliveryId(r.get(1)?),
                    event_id: r.get(2)?,
                    endpoint: r.get(3)?,
                    round: r.get(4)?,
                    attempt: attempt_from_row(r, 5)?,
                })
            })?;
            Ok(rows.collect::<rusqlite::Result<_>>()?)
        })
        .await
    }

    async fn purge(&self, cutoffs: RetentionCutoffs) -> StoreResult<Purged> {
        self.write(Urgency::Wait, move |conn| {
            let mut purged = Purged::default();
            let ids: Vec<i64> = conn
                .prepare_cached(SETTLED_BEFORE_SQL)?
                .query_map(
                    params![cutoffs.deliveries_before.as_millis(), cutoffs.batch],
                    |r| r.get(0),
                )?
                .collect::<rusqlite::Result<_>>()?;
            for id in ids {
                purged.attempts += conn
                    .prepare_cached("DELETE FROM attempts WHERE delivery_id = ?1")?
                    .execute(params![id])? as u64;
                purged.deliveries += conn
                    .prepare_cached("DELETE FROM deliveries WHERE id = ?1")?
                    .execute(params![id])? as u64;
            }
            purged.events =
                conn.prepare_cached(
                    "DELETE FROM events WHERE seq IN (
                         SELECT seq FROM events e WHERE e.received_at < ?1
                           AND NOT EXISTS (SELECT 1 FROM deliveries d WHERE d.event_seq = e.seq)
                         ORDER BY e.received_at LIMIT ?2)",
                )?
                .execute(params![cutoffs.events_before.as_millis(), cutoffs.batch])? as u64;
            purged.idempotency_keys = conn
                .prepare_cached(
                    "DELETE FROM idempotency WHERE rowid IN (
                         SELECT rowid FROM idempotency WHERE created_at < ?1 ORDER BY created_at LIMIT ?2)",
                )?
                .execute(params![cutoffs.idempotency_before.as_millis(), cutoffs.batch])?
                as u64;
            purged.history =
                conn.prepare_cached(
                    "DELETE FROM endpoint_history WHERE id IN (
                         SELECT h.id FROM endpoint_history h WHERE h.at < ?1
                           AND h.id < (SELECT MAX(l.id) FROM endpoint_history l WHERE l.endpoint = h.endpoint)
                         ORDER BY h.at LIMIT ?2)",
                )?
                .execute(params![cutoffs.history_before.as_millis(), cutoffs.batch])? as u64;
            Ok(purged)
        })
        .await
    }

    async fn set_size_limit(&self, max_bytes: Option<u64>) -> StoreResult<()> {
        let uncapped = self.uncapped_pages;
        self.write(Urgency::Wait, move |conn| {
            apply_size_limit(conn, max_bytes, uncapped)
        })
        .await
    }

    async fn rekey(&self) -> StoreResult<u64> {
        let sealer = self.sealer.clone();
        self.write(Urgency::Wait, move |conn| keys::rekey(conn, &sealer))
            .await
    }

    async fn check_writable(&self) -> StoreResult<()> {
        let refusing = self.refusing.lock().expect("refusing lock").clone();
        let Some(reason) = refusing else {
            return Ok(());
        };
        // Nothing else may write while the node is out of its load balancer: a write tried
        // here is what finds out that the disk has room again. One at a time.
        let Ok(_probing) = self.probe.try_lock() else {
            return Err(StoreError::Unavailable(reason));
        };
        let probed = self.write(Urgency::Wait, probe_write).await;
        self.note_outcome(&probed, true);
        probed
    }

    async fn close(&self) {
        self.writer.close().await;
    }
}

/// A store on a new database in `dir` with the rows `sql` writes: a test's starting point
/// when the API would take too long to make them.
#[cfg(test)]
async fn store_with_rows(dir: &std::path::Path, sql: &'static str) -> SqliteStore {
    let store = SqliteStore::open(SqliteOptions::new(dir.join("db"))).unwrap();
    store
        .write(Urgency::Wait, move |conn| Ok(conn.execute_batch(sql)?))
        .await
        .unwrap();
    store
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::mpsc as std_mpsc;
    use std::time::Duration;

    use futures_util::FutureExt;

    use super::*;

    pub(super) const NOW: Timestamp = Timestamp::from_millis(1_767_225_600_000);

    /// One event of `payload_bytes` for endpoint `e`, received at [`NOW`].
    pub(super) fn batch(id: &str, payload_bytes: usize) -> IngestBatch {
        IngestBatch {
            items: vec![IngestItem {
                event: Arc::new(Event {
                    id: id.to_owned(),
                    topic: "t".into(),
                    event_type: "x".into(),
                    content_type: "application/octet-stream".into(),
                    payload: Bytes::from(vec![b'p'; payload_bytes]),
                    ordering_key: None,
                    received_at: NOW,
                    tenant: None,
                    trace: None,
                    labels: EventLabels::default(),
                }),
                endpoints: vec![Target::untenanted("e")],
            }],
            idempotency: None,
            now: NOW,
        }
    }

    async fn pending_ids(store: &SqliteStore) -> Vec<i64> {
        store
            .pending_deliveries()
            .await
            .unwrap()
            .into_iter()
            .map(|p| p.id.0)
            .collect()
    }

    /// A job that holds the writer until `release` is sent, and says when it has started.
    fn blocker() -> (Job, std_mpsc::Receiver<()>, std_mpsc::Sender<()>) {
        let (started_tx, started_rx) = std_mpsc::channel();
        let (release_tx, release_rx) = std_mpsc::channel::<()>();
        let job: Job = Box::new(move |_conn| {
            started_tx.send(()).unwrap();
            let _ = release_rx.recv_timeout(Duration::from_secs(30));
            JobResult {
                keep: true,
                completion: Box::new(|_| {}),
            }
        });
        (job, started_rx, release_tx)
    }

    #[tokio::test]
    async fn a_full_write_queue_refuses_ingestion_at_once_and_keeps_everything_queued() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(SqliteOptions {
            write_queue: 1,
            max_batch: 1,
            ..SqliteOptions::new(dir.path().join("db"))
        })
        .unwrap();

        // The writer is busy with the blocker, and the queue's one slot holds `a`.
        let (job, started, release) = blocker();
        store.writer.try_submit(job).unwrap();
        started.recv_timeout(Duration::from_secs(10)).unwrap();
        let mut a = store.ingest(batch("a", 10));
        assert!((&mut a).now_or_never().is_none(), "a waits for its commit");

        let refused = store.ingest(batch("b", 10)).await;
        assert!(matches!(refused, Err(StoreError::Overloaded(_))), "{refused:?}");

        release.send(()).unwrap();
        assert!(matches!(a.await, Ok(IngestOutcome::Committed(ref d)) if d.len() == 1));
        assert!(matches!(
            store.ingest(batch("b", 10)).await,
            Ok(IngestOutcome::Committed(_))
        ));
        assert_eq!(pending_ids(&store).await.len(), 2, "a, and b once retried");
        assert_eq!(store.event("b", None).await.unwrap().len(), 1);
        store.close().await;
    }

    fn integrity(path: &Path) -> String {
        let conn = Connection::open_with_flags(path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap()
    }

    #[tokio::test]
    async fn a_size_cap_refuses_whole_writes_and_lifting_it_makes_room_again() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = SqliteStore::open(SqliteOptions {
            max_size_bytes: Some(256 * 1024),
            ..SqliteOptions::new(&path)
        })
        .unwrap();

        // 3 KiB payloads need a page of their own each: the cap is reached within ~64 events.
        let mut accepted = Vec::new();
        let refusal = loop {
            let id = format!("e{}", accepted.len());
            match store.ingest(batch(&id, 3 * 1024)).await {
                Ok(IngestOutcome::Committed(_)) => accepted.push(id),
                Ok(other) => panic!("{other:?}"),
                Err(e) => break (id, e),
            }
            assert!(accepted.len() < 200, "the cap never took effect");
        };
        assert!(matches!(refusal.1, StoreError::Unavailable(_)), "{:?}", refusal.1);
        assert!(accepted.len() > 10, "only {} events fit", accepted.len());
        // Nothing of the refused write was kept: neither its event nor its delivery.
        assert!(store.event(&refusal.0, None).await.unwrap().is_empty());
        assert_eq!(pending_ids(&store).await.len(), accepted.len());
        // Outcome writes that need no new page still go through while the store is full.
        let first = store.pending_deliveries().await.unwrap()[0].id;
        store
            .apply(Arc::from([StateChange::Finish {
                delivery: first,
                status: DeliveryStatus::Failed,
                error: "test".into(),
                now: NOW,
            }]))
            .await
            .unwrap();
        assert_eq!(integrity(&path), "ok");

        store.set_size_limit(Some(1024 * 1024)).await.unwrap();
        for i in 0..20 {
            assert!(matches!(
                store.ingest(batch(&format!("after{i}"), 3 * 1024)).await,
                Ok(IngestOutcome::Committed(_))
            ));
        }
        store.set_size_limit(None).await.unwrap();
        assert!(store.ingest(batch("big", 2 << 20)).await.is_ok());
        assert_eq!(pending_ids(&store).await.len(), accepted.len() - 1 + 21);
        store.close().await;
        assert_eq!(integrity(&path), "ok");
    }

    /// SQLite follows a symbolic link to the database and names the WAL after the file it
    /// found; the fsync must reach that file.
    #[tokio::test]
    async fn a_database_reached_through_a_symbolic_link_commits_and_keeps_its_events() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("data")).unwrap();
        let link = dir.path().join("hookgate.db");
        std::os::unix::fs::symlink(dir.path().join("data/real.db"), &link).unwrap();
        let store = SqliteStore::open(SqliteOptions::new(&link)).unwrap();
        store.ingest(batch("a", 10)).await.unwrap();
        store.close().await;
        drop(store);
        let store = SqliteStore::open(SqliteOptions::new(&link)).unwrap();
        assert_eq!(store.event("a", None).await.unwrap().len(), 1);
        store.close().await;
    }

    #[tokio::test]
    async fn api_endpoints_are_created_once_and_replaced_only_from_what_was_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(SqliteOptions::new(dir.path().join("db"))).unwrap();
        crate::store::contract::api_endpoint_writes(&store).await;
    }

    #[tokio::test]
    async fn an_api_endpoints_uid_is_unique_within_its_tenant() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(SqliteOptions::new(dir.path().join("db"))).unwrap();
        crate::store::contract::api_endpoint_uids(&store).await;
    }

    /// A page starts at its cursor in an index: its cost is the page's, not that of every
    /// endpoint before it.
    #[test]
    fn a_page_of_endpoints_is_an_index_search_from_its_cursor() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        let plan = |page: &EndpointPage| -> String {
            let sql = format!("EXPLAIN QUERY PLAN {}", page.sql(["?1", "?2", "?3"]));
            let mut stmt = conn.prepare(&sql).unwrap();
            let rows = stmt
                .query_map(params![page.tenant, page.after, page.limit], |r| {
                    r.get::<_, String>(3)
                })
                .unwrap();
            rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
        };
        let page = |tenant: Option<&str>, after: Option<&str>, descending| EndpointPage {
            tenant: tenant.map(str::to_owned),
            after: after.map(str::to_owned),
            limit: 500,
            descending,
        };
        for (p, index) in [
            (page(None, Some("c0500000"), false), "(name>?)"),
            (page(None, Some("c0500000"), true), "(name<?)"),
            (
                page(Some("acme"), Some("e7"), false),
                "api_endpoints_by_tenant (tenant=? AND name>?)",
            ),
        ] {
            let plan = plan(&p);
            assert!(plan.contains("SEARCH") && plan.contains(index), "{p:?}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{p:?}: {plan}");
        }
    }

    /// Writing a delivery builds no temporary b-tree: the partial indexes' conditions are
    /// tested with comparisons (migration 12), not with an `IN` list SQLite turns into a table.
    #[test]
    fn a_delivery_is_written_without_a_temporary_table() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        for sql in [
            "INSERT INTO deliveries (event_seq, endpoint, status, round, attempt_count, next_attempt_at,
                 created_at, updated_at, round_started_at) VALUES (1, 'e', 'pending', 1, 0, 1, 1, 1, 1)",
            "UPDATE deliveries SET status = 'succeeded', updated_at = 2 WHERE id = 1",
            "UPDATE deliveries SET attempt_count = 1, updated_at = 2 WHERE id = 1 AND status = 'pending'",
        ] {
            let mut stmt = conn.prepare(&format!("EXPLAIN {sql}")).unwrap();
            let ops: Vec<String> = stmt
                .query_map([], |r| r.get::<_, String>(1))
                .unwrap()
                .map(Result::unwrap)
                .collect();
            assert!(ops.iter().any(|op| op == "IdxInsert"), "{sql}: {ops:?}");
            assert!(!ops.iter().any(|op| op == "OpenEphemeral"), "{sql}: {ops:?}");
        }
    }

    /// Each query by a delivery's state reads its partial index (migration 11): none scans
    /// the deliveries, and none reads an index that every delivery is in.
    #[test]
    fn the_state_queries_read_their_partial_indexes() {
        let mut conn = Connection::open_in_memory().unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        let plan = |sql: &str| -> String {
            let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
            let n = stmt.parameter_count();
            let nulls: Vec<Option<i64>> = vec![Some(1); n];
            let rows = stmt
                .query_map(rusqlite::params_from_iter(nulls), |r| r.get::<_, String>(3))
                .unwrap();
            rows.map(Result::unwrap).collect::<Vec<_>>().join("; ")
        };
        for (sql, index) in [
            (PENDING_SAME_ENDPOINT_SQL, "deliveries_pending"),
            (PENDING_NEXT_ENDPOINTS_SQL, "deliveries_pending"),
            (PENDING_COUNT_SQL, "deliveries_pending"),
            (FAIL_PENDING_SQL, "deliveries_pending"),
            (DEAD_OF_ENDPOINT_SQL, "deliveries_dead"),
            (DEAD_COUNT_SQL, "deliveries_dead"),
            (SETTLED_IN_RANGE_SQL, "deliveries_settled"),
            (SETTLED_BEFORE_SQL, "deliveries_settled"),
        ] {
            let plan = plan(sql);
            let steps: Vec<&str> = plan.split("; ").collect();
            let reads_index = |step: &&str| {
                step.contains(&format!("INDEX {index} ")) || step.ends_with(&format!("INDEX {index}"))
            };
            assert!(steps.iter().any(reads_index), "{sql}: {plan}");
            // The rest of an endpoint's pending deliveries is a search from the cursor's id,
            // not a walk from the endpoint's first.
            if sql == PENDING_SAME_ENDPOINT_SQL {
                assert!(plan.contains("(endpoint=? AND id>?)"), "{sql}: {plan}");
            }
            // A scan of the deliveries themselves (no index named) is what this avoids.
            assert!(
                steps
                    .iter()
                    .all(|step| !step.starts_with("SCAN") || step.contains("INDEX")),
                "{sql}: {plan}"
            );
        }
    }

    /// Small pages of pending deliveries, cut inside an endpoint and at its end, give each
    /// pending delivery once, by endpoint and id, and none of another state.
    #[tokio::test]
    async fn pending_pages_go_on_inside_an_endpoint_and_across_endpoints() {
        let dir = tempfile::tempdir().unwrap();
        let store = super::store_with_rows(
            dir.path(),
                    "INSERT INTO events (seq, id, topic, event_type, content_type, payload, received_at)
                         VALUES (1, 'e1', 't', 'x', 'application/json', x'7b7d', 0);
                     INSERT INTO deliveries (id, event_seq, endpoint, status, round, attempt_count, created_at,
                         updated_at, round_started_at)
                     VALUES (1, 1, 'c', 'pending', 1, 0, 0, 0, 0), (2, 1, 'a', 'pending', 1, 0, 0, 0, 0),
                            (3, 1, 'b', 'dead', 1, 9, 0, 0, 0), (4, 1, 'a', 'pending', 1, 0, 0, 0, 0),
                            (5, 1, 'c', 'pending', 1, 0, 0, 0, 0), (6, 1, 'a', 'succeeded', 1, 1, 0, 0, 0),
                            (7, 1, 'a', 'pending', 1, 0, 0, 0, 0), (8, 1, 'd', 'pending', 1, 0, 0, 0, 0);",
        )
        .await;
        for size in [1, 2, 3, 10] {
            let (mut seen, mut after) = (Vec::new(), None);
            loop {
                let page = store.pending_page(after.take(), size).await.unwrap();
                let full = page.len() == size as usize;
                after = page.last().map(|p| PendingCursor {
                    endpoint: p.endpoint.clone(),
                    id: p.id,
                });
                seen.extend(page.iter().map(|p| (p.endpoint.to_string(), p.id.0)));
                if !full {
                    break;
                }
            }
            let expected = [("a", 2), ("a", 4), ("a", 7), ("c", 1), ("c", 5), ("d", 8)]
                .map(|(e, id)| (e.to_owned(), id));
            assert_eq!(seen, expected, "pages of {size}");
        }
    }

    #[tokio::test]
    async fn api_endpoints_page_by_name_in_either_direction() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(SqliteOptions::new(dir.path().join("db"))).unwrap();
        crate::store::contract::api_endpoint_pages(&store).await;
    }

    #[tokio::test]
    async fn the_svix_api_s_rows_are_kept_as_the_contract_says() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(SqliteOptions::new(dir.path().join("db"))).unwrap();
        crate::store::svix_contract::applications(&store).await;
        crate::store::svix_contract::event_types(&store).await;
        crate::store::svix_contract::tenant_events_and_attempts(&store).await;
        crate::store::svix_contract::latest_events(&store).await;
        crate::store::svix_contract::pages_read_back_from_a_cursor(&store).await;
        crate::store::svix_contract::expunged_payloads(&store).await;
    }

    #[tokio::test]
    async fn ordering_keys_show_their_heads_what_waits_and_the_holds() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(SqliteOptions::new(dir.path().join("db"))).unwrap();
        crate::store::ordering::contract::ordering_keys(&store).await;
    }

    /// A due delivery's read keeps its plan: run with new ids it is neither re-prepared (see
    /// [`DELIVERY_ID_PARAM`]) nor scans the table.
    #[tokio::test]
    async fn the_read_of_a_due_delivery_is_prepared_once_and_looks_up_by_id() {
        use rusqlite::StatementStatus;

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let store = SqliteStore::open(SqliteOptions::new(&path)).unwrap();
        for i in 0..5 {
            store.ingest(batch(&format!("e{i}"), 10)).await.unwrap();
        }
        let ids = pending_ids(&store).await;
        let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
        let sql = delivery_for_attempt_sql();
        let plan: Vec<String> = conn
            .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
            .unwrap()
            .query_map([ids[0]], |r| r.get(3))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert!(plan.iter().all(|step| step.starts_with("SEARCH")), "{plan:?}");
        for id in &ids {
            let mut stmt = conn.prepare_cached(&sql).unwrap();
            let endpoint: String = stmt.query_row([id], |r| r.get(0)).unwrap();
            assert_eq!(endpoint, "e");
            assert_eq!(stmt.get_status(StatementStatus::RePrepare), 0);
        }
        store.close().await;
    }

    #[tokio::test]
    async fn a_cap_below_the_current_size_holds_the_store_at_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(SqliteOptions::new(dir.path().join("db"))).unwrap();
        for i in 0..5 {
            store.ingest(batch(&format!("e{i}"), 3 * 1024)).await.unwrap();
        }
        store.set_size_limit(Some(1)).await.unwrap();
        assert!(matches!(
            store.ingest(batch("more", 3 * 1024)).await,
            Err(StoreError::Unavailable(_))
        ));
        assert_eq!(pending_ids(&store).await.len(), 5);
        store.close().await;
    }

    fn change(endpoint: &str, input: crate::health::HealthInput, at: Timestamp) -> StateChange {
        StateChange::Health(HealthChange {
            endpoint: Arc::from(endpoint),
            input,
            at,
            rules: crate::health::HealthRules::default(),
        })
    }

    /// Endpoint history ages out with the delivery log, except each endpoint's latest change,
    /// which explains the state the endpoint is in however old it is.
    #[tokio::test]
    async fn retention_purges_old_history_but_keeps_each_endpoints_latest_change() {
        use crate::health::HealthInput::{AttemptFailed, Reenable};
        use crate::model::EndpointState::{Active, Disabled};
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(SqliteOptions::new(dir.path().join("db"))).unwrap();
        let day = Duration::from_secs(86_400);
        let old = NOW.minus(day * 40);
        let gone = AttemptFailed { gone: true };
        let changes = vec![
            change("a", gone, old),
            change("a", Reenable, old.plus(day)),
            change("a", gone, NOW),
            change("b", gone, old),
            change("b", Reenable, old.plus(day)),
        ];
        let applied = store.apply(changes.into()).await.unwrap();
        assert_eq!(applied.len(), 5);
        assert_eq!(
            applied[2].step.health.state, Disabled,
            "applied to the stored health"
        );
        let purged = store
            .purge(RetentionCutoffs {
                deliveries_before: NOW.minus(day * 30),
                events_before: NOW.minus(day * 30),
                idempotency_before: NOW.minus(day),
                history_before: NOW.minus(day * 30),
                batch: 100,
            })
            .await
            .unwrap();
        assert_eq!(purged.history, 3);
        let states = |h: Vec<HistoryEntry>| h.into_iter().map(|e| e.state).collect::<Vec<_>>();
        assert_eq!(states(store.endpoint_history("a", 10).await.unwrap()), [Disabled]);
        assert_eq!(states(store.endpoint_history("b", 10).await.unwrap()), [Active]);
        store.close().await;
    }

    /// A round in progress when the schema gained `round_started_at` keeps its deadline: the
    /// first round from the delivery's creation, a later one from its first attempt.
    #[test]
    fn the_round_start_migration_backfills_from_creation_and_first_attempts() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(super::super::migrations::FIRST_SCHEMA)
            .unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        conn.execute_batch(
            "INSERT INTO events (seq, id, topic, event_type, content_type, payload, received_at)
                 VALUES (1, 'e1', 't', 'x', 'text/plain', x'', 100);
             INSERT INTO deliveries (id, event_seq, endpoint, status, round, created_at, updated_at)
                 VALUES (1, 1, 'a', 'pending', 1, 100, 900), (2, 1, 'b', 'pending', 2, 100, 900),
                        (3, 1, 'c', 'pending', 2, 100, 900);
             INSERT INTO attempts (delivery_id, round, n, started_at, duration_ms)
                 VALUES (2, 1, 1, 150, 1), (2, 2, 1, 500, 1), (2, 2, 2, 700, 1);",
        )
        .unwrap();
        super::super::migrations::migrate(&mut conn).unwrap();
        let starts: Vec<i64> = conn
            .prepare("SELECT round_started_at FROM deliveries ORDER BY id")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap();
        assert_eq!(starts, [100, 500, 900]);
    }
}
