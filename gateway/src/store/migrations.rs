//! Versioned schema migrations, run at start. `PRAGMA user_version` holds the version; each
//! migration runs in its own transaction, so a crash mid-migration leaves the previous version.

use rusqlite::Connection;

/// The schema of version 1, kept apart so tests can build a database as it was then.
pub(super) const FIRST_SCHEMA: &str = r#"
    CREATE TABLE events (
        seq           INTEGER PRIMARY KEY,
        id            TEXT    NOT NULL,
        topic         TEXT    NOT NULL,
        event_type    TEXT    NOT NULL,
        content_type  TEXT    NOT NULL,
        payload       BLOB    NOT NULL,
        ordering_key  TEXT,
        received_at   INTEGER NOT NULL,
        UNIQUE (topic, id)
    );
    CREATE INDEX events_by_id ON events (id);
    CREATE INDEX events_by_topic_time ON events (topic, received_at);
    CREATE INDEX events_by_time ON events (received_at);

    CREATE TABLE deliveries (
        id               INTEGER PRIMARY KEY AUTOINCREMENT,
        event_seq        INTEGER NOT NULL REFERENCES events (seq),
        endpoint         TEXT    NOT NULL,
        status           TEXT    NOT NULL,
        round            INTEGER NOT NULL DEFAULT 1,
        attempt_count    INTEGER NOT NULL DEFAULT 0,
        next_attempt_at  INTEGER,
        last_error       TEXT,
        created_at       INTEGER NOT NULL,
        updated_at       INTEGER NOT NULL
    );
    CREATE INDEX deliveries_pending ON deliveries (endpoint, next_attempt_at) WHERE status = 'pending';
    CREATE INDEX deliveries_by_endpoint ON deliveries (endpoint, id);
    CREATE INDEX deliveries_by_status ON deliveries (status, id);
    CREATE INDEX deliveries_by_event ON deliveries (event_seq);
    CREATE INDEX deliveries_by_update ON deliveries (updated_at);

    CREATE TABLE attempts (
        id            INTEGER PRIMARY KEY,
        delivery_id   INTEGER NOT NULL,
        round         INTEGER NOT NULL,
        n             INTEGER NOT NULL,
        started_at    INTEGER NOT NULL,
        duration_ms   INTEGER NOT NULL,
        status_code   INTEGER,
        error_kind    TEXT,
        error         TEXT,
        plugin_note   TEXT
    );
    CREATE INDEX attempts_by_delivery ON attempts (delivery_id, id);

    CREATE TABLE endpoint_health (
        endpoint              TEXT PRIMARY KEY,
        state                 TEXT    NOT NULL,
        consecutive_failures  INTEGER NOT NULL,
        failing_since         INTEGER,
        last_success_at       INTEGER,
        changed_at            INTEGER
    );

    CREATE TABLE endpoint_history (
        id        INTEGER PRIMARY KEY,
        endpoint  TEXT    NOT NULL,
        state     TEXT    NOT NULL,
        at        INTEGER NOT NULL,
        reason    TEXT    NOT NULL
    );
    CREATE INDEX endpoint_history_by_endpoint ON endpoint_history (endpoint, id);

    CREATE TABLE idempotency (
        scope         TEXT    NOT NULL,
        key           TEXT    NOT NULL,
        request_hash  BLOB    NOT NULL,
        status        INTEGER NOT NULL,
        response      BLOB    NOT NULL,
        created_at    INTEGER NOT NULL,
        PRIMARY KEY (scope, key)
    );
    CREATE INDEX idempotency_by_time ON idempotency (created_at);
    "#;

/// The failed attempts by time: SQLite's migration 10 and PostgreSQL's 11, the same SQL.
pub(super) const FAILED_ATTEMPTS_BY_TIME: &str = r#"
    CREATE INDEX attempts_failed_by_time ON attempts (started_at) WHERE error_kind IS NOT NULL;
    "#;

/// The partial indexes of the deliveries' states: SQLite's migration 11 and PostgreSQL's 12,
/// the same SQL (why: at SQLite's migration 11 below).
pub(super) const PARTIAL_DELIVERY_INDEXES: &str = r#"
    DROP INDEX deliveries_by_status;
    DROP INDEX deliveries_by_update;
    DROP INDEX deliveries_pending;
    CREATE INDEX deliveries_pending ON deliveries (endpoint, id) WHERE status = 'pending';
    CREATE INDEX deliveries_dead ON deliveries (endpoint, id) WHERE status = 'dead';
    CREATE INDEX deliveries_settled ON deliveries (updated_at)
        WHERE status IN ('succeeded', 'failed', 'dead');
    "#;

/// Migration `i` brings the schema from version `i` to `i + 1`. Never edit a released one:
/// add the next.
const MIGRATIONS: &[&str] = &[
    // 1: the initial schema.
    FIRST_SCHEMA,
    // 2: every round of a delivery (the first, a redelivery, a redrive, a replay) gets the whole
    // policy, its deadline counted from the round's start. A round in progress at the upgrade
    // started at its first attempt (or, with none yet, when it was last changed).
    r#"
    ALTER TABLE deliveries ADD COLUMN round_started_at INTEGER NOT NULL DEFAULT 0;
    UPDATE deliveries SET round_started_at = CASE
        WHEN round = 1 THEN created_at
        ELSE COALESCE(
            (SELECT MIN(a.started_at) FROM attempts a WHERE a.delivery_id = deliveries.id AND a.round = deliveries.round),
            updated_at)
        END;
    CREATE INDEX endpoint_history_by_time ON endpoint_history (at);
    "#,
    // 3: what each attempt sent and got back (headers masked, the response body's first 4 KiB).
    r#"
    ALTER TABLE attempts ADD COLUMN request_headers TEXT;
    ALTER TABLE attempts ADD COLUMN response_headers TEXT;
    ALTER TABLE attempts ADD COLUMN response_body TEXT;
    "#,
    // 4: tenants on events and deliveries (a delivery's is its endpoint's), and the endpoints
    // created through the API.
    r#"
    ALTER TABLE events ADD COLUMN tenant TEXT;
    ALTER TABLE deliveries ADD COLUMN tenant TEXT;
    CREATE INDEX deliveries_by_tenant ON deliveries (tenant, id) WHERE tenant IS NOT NULL;
    CREATE TABLE api_endpoints (
        name             TEXT PRIMARY KEY,
        tenant           TEXT,
        spec             TEXT    NOT NULL,
        retiring_secret  TEXT,
        retiring_until   INTEGER,
        created_at       INTEGER NOT NULL,
        updated_at       INTEGER NOT NULL
    );
    "#,
    // 5: the trace of each event (its trace id and the ingestion span its attempts descend
    // from) and of each attempt, as lowercase hex.
    r#"
    ALTER TABLE events ADD COLUMN trace_id TEXT;
    ALTER TABLE events ADD COLUMN trace_span_id TEXT;
    ALTER TABLE attempts ADD COLUMN trace_id TEXT;
    "#,
    // 6: an event's labels (its channels, and a Svix message's tags and eventId) as a JSON
    // object; a tenant's events by time (the Svix API lists an application's messages); the
    // Svix API's applications and the event type catalog.
    r#"
    ALTER TABLE events ADD COLUMN labels TEXT;
    CREATE INDEX events_by_tenant ON events (tenant, seq) WHERE tenant IS NOT NULL;
    CREATE TABLE applications (
        id          TEXT PRIMARY KEY,
        uid         TEXT UNIQUE,
        tenant      TEXT    NOT NULL UNIQUE,
        name        TEXT    NOT NULL,
        metadata    TEXT    NOT NULL,
        rate_limit  INTEGER,
        created_at  INTEGER NOT NULL,
        updated_at  INTEGER NOT NULL
    );
    CREATE TABLE event_types (
        name           TEXT PRIMARY KEY,
        description    TEXT    NOT NULL,
        archived       INTEGER NOT NULL,
        deprecated     INTEGER NOT NULL,
        schemas        TEXT,
        feature_flags  TEXT,
        group_name     TEXT,
        created_at     INTEGER NOT NULL,
        updated_at     INTEGER NOT NULL
    );
    "#,
    // 7: ordered delivery an operator can see: a delivery carries its event's ordering key, so
    // that an endpoint's keys, their heads and what waits behind them are read from indexes
    // (the failed heads' index holds only pending deliveries already attempted: listing the
    // blocked keys costs the blocked keys, not the backlog); and the keys an operator must
    // release, stopped behind a head that finally failed (`on_final_failure: hold`).
    r#"
    ALTER TABLE deliveries ADD COLUMN ordering_key TEXT;
    UPDATE deliveries SET ordering_key =
        (SELECT e.ordering_key FROM events e WHERE e.seq = deliveries.event_seq)
        WHERE event_seq IN (SELECT seq FROM events WHERE ordering_key IS NOT NULL);
    CREATE INDEX deliveries_by_key ON deliveries (endpoint, ordering_key, id)
        WHERE status = 'pending' AND ordering_key IS NOT NULL;
    CREATE INDEX deliveries_failed_heads ON deliveries (endpoint, ordering_key)
        WHERE status = 'pending' AND ordering_key IS NOT NULL AND attempt_count > 0;
    CREATE TABLE ordering_holds (
        endpoint      TEXT    NOT NULL,
        ordering_key  TEXT    NOT NULL,
        delivery_id   INTEGER NOT NULL,
        held_at       INTEGER NOT NULL,
        PRIMARY KEY (endpoint, ordering_key)
    );
    "#,
    // 8: secrets at rest (`store/seal.rs`): the check value that tells the database's key from
    // another. Its row is written with the first sealed value, in the same transaction. And the
    // table the readiness probe writes to (and empties again) while the store refuses writes.
    r#"
    CREATE TABLE encryption (
        id           INTEGER PRIMARY KEY CHECK (id = 1),
        check_value  TEXT    NOT NULL
    );
    CREATE TABLE write_probe (filler BLOB NOT NULL);
    "#,
    // 9: endpoints created through the API, one at a time: a version per row (a change names
    // the version it was made from; the running gateway applies a change only over an older
    // one), a tenant's endpoints by name (its list pages), and the Svix uid as a column,
    // unique within a tenant. An older database may hold two endpoints of one tenant with one
    // uid (two creates that raced): the column keeps the older one's.
    r#"
    ALTER TABLE api_endpoints ADD COLUMN version INTEGER NOT NULL DEFAULT 1;
    ALTER TABLE api_endpoints ADD COLUMN uid TEXT;
    UPDATE api_endpoints SET uid = json_extract(spec, '$.svix.uid')
        WHERE json_valid(spec) AND json_type(spec, '$.svix.uid') = 'text';
    UPDATE api_endpoints SET uid = NULL
        WHERE uid IS NOT NULL AND EXISTS (
            SELECT 1 FROM api_endpoints older
            WHERE older.uid = api_endpoints.uid
              AND COALESCE(older.tenant, '') = COALESCE(api_endpoints.tenant, '')
              AND (older.created_at, older.name) < (api_endpoints.created_at, api_endpoints.name));
    CREATE UNIQUE INDEX api_endpoints_by_uid ON api_endpoints (COALESCE(tenant, ''), uid)
        WHERE uid IS NOT NULL;
    CREATE INDEX api_endpoints_by_tenant ON api_endpoints (tenant, name);
    "#,
    // 10: the failed attempts by time, for the overview's count of them per minute and hour
    // (`activity`). Partial: a successful attempt adds nothing to it.
    FAILED_ATTEMPTS_BY_TIME,
    // 11: fewer index entries per delivery. The indexes on `status` and on `updated_at` held
    // every delivery and moved on every outcome; the states that are looked up get partial
    // indexes on columns that do not change while a delivery is in them: the pending ones by
    // endpoint (a start reads them in that order; an attempt that fails and is retried moves
    // nothing), the dead ones by endpoint (redrive, the backlog), the settled ones by when they
    // settled (the overview's charts, retention). A delivery enters the pending one when made
    // and leaves it, for the settled one, when it ends.
    PARTIAL_DELIVERY_INDEXES,
    // 12: the settled deliveries' index with its condition as three comparisons. Written as
    // `IN` of three values, SQLite built a temporary b-tree of them on every insert of a
    // delivery and every outcome (twice on an update) to test the row against the condition:
    // 24 of a delivery's allocations (scripts/count-allocations.sh). The queries that read the
    // index name the same condition (`settled!` in sqlite.rs).
    r#"
    DROP INDEX deliveries_settled;
    CREATE INDEX deliveries_settled ON deliveries (updated_at)
        WHERE status = 'succeeded' OR status = 'failed' OR status = 'dead';
    "#,
];

/// The schema version this gateway writes.
pub(super) fn current_version() -> u32 {
    MIGRATIONS.len() as u32
}

pub(super) fn migrate(conn: &mut Connection) -> rusqlite::Result<u32> {
    let current: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    let target = MIGRATIONS.len() as u32;
    if current > target {
        return Err(rusqlite::Error::InvalidParameterName(format!(
            "the database has schema version {current}, newer than this gateway's {target}; \
             upgrade the gateway"
        )));
    }
    for (version, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = conn.transaction()?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version as u32 + 1)?;
        tx.commit()?;
        tracing::info!(version = version + 1, "applied schema migration");
    }
    Ok(target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrating_twice_is_a_no_op_and_sets_the_version() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), MIGRATIONS.len() as u32);
        assert_eq!(migrate(&mut conn).unwrap(), MIGRATIONS.len() as u32);
        let v: u32 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, MIGRATIONS.len() as u32);
    }

    #[test]
    fn a_newer_database_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", 999).unwrap();
        let err = migrate(&mut conn).unwrap_err().to_string();
        assert!(err.contains("newer than this gateway"), "{err}");
    }
}
