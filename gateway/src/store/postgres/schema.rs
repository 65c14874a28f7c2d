//! The PostgreSQL schema and its migrations. Several nodes may start at once: the migrations
//! run under an advisory lock, each in its own transaction, and a database whose schema is
//! newer than this gateway's is refused.

use tokio_postgres::Client;

use crate::store::migrations::{FAILED_ATTEMPTS_BY_TIME, PARTIAL_DELIVERY_INDEXES};
use crate::store::{StoreError, StoreResult};

/// The advisory lock under which migrations run: one per schema.
const MIGRATION_LOCK: &str = "hashtextextended('hookgate-migrations:' || current_schema(), 0)";

/// Migration `i` brings the schema from version `i` to `i + 1`. Never edit a released one:
/// add the next. Times are milliseconds since the epoch (BIGINT), like the SQLite store's.
const MIGRATIONS: &[&str] = &[
    r#"
    CREATE TABLE events (
        seq           BIGSERIAL PRIMARY KEY,
        id            TEXT   NOT NULL,
        topic         TEXT   NOT NULL,
        event_type    TEXT   NOT NULL,
        content_type  TEXT   NOT NULL,
        payload       BYTEA  NOT NULL,
        ordering_key  TEXT,
        received_at   BIGINT NOT NULL,
        UNIQUE (topic, id)
    );
    CREATE INDEX events_by_id ON events (id);
    CREATE INDEX events_by_topic_time ON events (topic, received_at);
    CREATE INDEX events_by_time ON events (received_at);

    CREATE TABLE deliveries (
        id                BIGSERIAL PRIMARY KEY,
        event_seq         BIGINT NOT NULL,
        endpoint          TEXT   NOT NULL,
        status            TEXT   NOT NULL,
        round             BIGINT NOT NULL DEFAULT 1,
        attempt_count     BIGINT NOT NULL DEFAULT 0,
        next_attempt_at   BIGINT,
        last_error        TEXT,
        created_at        BIGINT NOT NULL,
        updated_at        BIGINT NOT NULL,
        round_started_at  BIGINT NOT NULL
    );
    CREATE INDEX deliveries_pending ON deliveries (endpoint, next_attempt_at) WHERE status = 'pending';
    CREATE INDEX deliveries_by_endpoint ON deliveries (endpoint, id);
    CREATE INDEX deliveries_by_status ON deliveries (status, id);
    CREATE INDEX deliveries_by_event ON deliveries (event_seq);
    CREATE INDEX deliveries_by_update ON deliveries (updated_at);

    CREATE TABLE attempts (
        id           BIGSERIAL PRIMARY KEY,
        delivery_id  BIGINT NOT NULL,
        round        BIGINT NOT NULL,
        n            BIGINT NOT NULL,
        started_at   BIGINT NOT NULL,
        duration_ms  BIGINT NOT NULL,
        status_code  BIGINT,
        error_kind   TEXT,
        error        TEXT,
        plugin_note  TEXT
    );
    CREATE INDEX attempts_by_delivery ON attempts (delivery_id, id);

    CREATE TABLE endpoint_health (
        endpoint              TEXT PRIMARY KEY,
        state                 TEXT   NOT NULL,
        consecutive_failures  BIGINT NOT NULL,
        failing_since         BIGINT,
        last_success_at       BIGINT,
        changed_at            BIGINT
    );

    CREATE TABLE endpoint_history (
        id        BIGSERIAL PRIMARY KEY,
        endpoint  TEXT   NOT NULL,
        state     TEXT   NOT NULL,
        at        BIGINT NOT NULL,
        reason    TEXT   NOT NULL
    );
    CREATE INDEX endpoint_history_by_endpoint ON endpoint_history (endpoint, id);
    CREATE INDEX endpoint_history_by_time ON endpoint_history (at);

    CREATE TABLE idempotency (
        scope         TEXT   NOT NULL,
        key           TEXT   NOT NULL,
        request_hash  BYTEA  NOT NULL,
        status        BIGINT NOT NULL,
        response      BYTEA  NOT NULL,
        created_at    BIGINT NOT NULL,
        PRIMARY KEY (scope, key)
    );
    CREATE INDEX idempotency_by_time ON idempotency (created_at);
    "#,
    // 2: what each attempt sent and got back (headers masked, the response body's first 4 KiB).
    r#"
    ALTER TABLE attempts ADD COLUMN request_headers TEXT;
    ALTER TABLE attempts ADD COLUMN response_headers TEXT;
    ALTER TABLE attempts ADD COLUMN response_body TEXT;
    "#,
    // 3: the nodes of a cluster and who delivers each endpoint.
    r#"
    CREATE TABLE nodes (
        id            TEXT   PRIMARY KEY,
        address       TEXT   NOT NULL,
        started_at    BIGINT NOT NULL,
        last_seen_at  BIGINT NOT NULL
    );

    CREATE TABLE endpoint_leases (
        endpoint    TEXT   PRIMARY KEY,
        node        TEXT   NOT NULL,
        expires_at  BIGINT NOT NULL
    );
    CREATE INDEX endpoint_leases_by_node ON endpoint_leases (node);
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
        spec             TEXT   NOT NULL,
        retiring_secret  TEXT,
        retiring_until   BIGINT,
        created_at       BIGINT NOT NULL,
        updated_at       BIGINT NOT NULL
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
        rate_limit  BIGINT,
        created_at  BIGINT  NOT NULL,
        updated_at  BIGINT  NOT NULL
    );
    CREATE TABLE event_types (
        name           TEXT PRIMARY KEY,
        description    TEXT    NOT NULL,
        archived       BOOLEAN NOT NULL,
        deprecated     BOOLEAN NOT NULL,
        schemas        TEXT,
        feature_flags  TEXT,
        group_name     TEXT,
        created_at     BIGINT  NOT NULL,
        updated_at     BIGINT  NOT NULL
    );
    "#,
    // 7: a node that stops cleanly says so, and stays listed as left.
    r#"
    ALTER TABLE nodes ADD COLUMN left_at BIGINT;
    "#,
    // 8: ordered delivery an operator can see (as the SQLite store's migration 7): a delivery
    // carries its event's ordering key, indexes for an endpoint's keys and its failed heads,
    // and the keys held behind a head that finally failed; and an operator's actions on a key
    // on their way from the node that took the call to the node that delivers the endpoint
    // (a row lives until its asker has read the answer).
    r#"
    ALTER TABLE deliveries ADD COLUMN ordering_key TEXT;
    UPDATE deliveries d SET ordering_key = e.ordering_key
        FROM events e WHERE e.seq = d.event_seq AND e.ordering_key IS NOT NULL;
    CREATE INDEX deliveries_by_key ON deliveries (endpoint, ordering_key, id)
        WHERE status = 'pending' AND ordering_key IS NOT NULL;
    CREATE INDEX deliveries_failed_heads ON deliveries (endpoint, ordering_key)
        WHERE status = 'pending' AND ordering_key IS NOT NULL AND attempt_count > 0;
    CREATE TABLE ordering_holds (
        endpoint      TEXT   NOT NULL,
        ordering_key  TEXT   NOT NULL,
        delivery_id   BIGINT NOT NULL,
        held_at       BIGINT NOT NULL,
        PRIMARY KEY (endpoint, ordering_key)
    );
    CREATE TABLE ordering_actions (
        id            BIGSERIAL PRIMARY KEY,
        endpoint      TEXT   NOT NULL,
        ordering_key  TEXT   NOT NULL,
        action        TEXT   NOT NULL,
        delivery_id   BIGINT,
        requested_at  BIGINT NOT NULL,
        answer        TEXT
    );
    "#,
    // 9: secrets at rest (`store/seal.rs`), as the SQLite store's migration 8: the check value
    // that tells the database's key from another, written with the first sealed value.
    r#"
    CREATE TABLE encryption (
        id           BIGINT PRIMARY KEY CHECK (id = 1),
        check_value  TEXT    NOT NULL
    );
    "#,
    // 10: endpoints created through the API, one at a time (as the SQLite store's migration 9):
    // a version per row, a tenant's endpoints by name, the Svix uid unique within a tenant.
    r#"
    ALTER TABLE api_endpoints ADD COLUMN version BIGINT NOT NULL DEFAULT 1;
    ALTER TABLE api_endpoints ADD COLUMN uid TEXT;
    UPDATE api_endpoints SET uid = spec::jsonb -> 'svix' ->> 'uid'
        WHERE jsonb_typeof(spec::jsonb -> 'svix' -> 'uid') = 'string';
    UPDATE api_endpoints e SET uid = NULL
        WHERE uid IS NOT NULL AND EXISTS (
            SELECT 1 FROM api_endpoints older
            WHERE older.uid = e.uid
              AND COALESCE(older.tenant, '') = COALESCE(e.tenant, '')
              AND (older.created_at, older.name) < (e.created_at, e.name));
    CREATE UNIQUE INDEX api_endpoints_by_uid ON api_endpoints (COALESCE(tenant, ''), uid)
        WHERE uid IS NOT NULL;
    CREATE INDEX api_endpoints_by_tenant ON api_endpoints (tenant, name);
    "#,
    // 11: the failed attempts by time (as the SQLite store's migration 10), for the overview.
    FAILED_ATTEMPTS_BY_TIME,
    // 12: fewer index entries per delivery (as the SQLite store's migration 11): the indexes
    // on `status` and on `updated_at` held every delivery and moved on every outcome; the
    // states that are looked up get partial indexes instead (pending by endpoint, dead by
    // endpoint, settled by when they settled). PostgreSQL tests the `IN` without a temporary
    // table, so it keeps this form (SQLite's migration 12 does not apply here).
    PARTIAL_DELIVERY_INDEXES,
];

/// The schema version this gateway writes.
#[cfg(test)]
pub(super) fn current_version() -> u32 {
    MIGRATIONS.len() as u32
}

/// Brings the schema up to this gateway's version; returns it.
pub(super) async fn migrate(client: &mut Client) -> StoreResult<u32> {
    // The lock first: `CREATE TABLE IF NOT EXISTS` run by two sessions at once can still
    // collide on the catalog.
    client
        .query_one(&format!("SELECT pg_advisory_lock({MIGRATION_LOCK})"), &[])
        .await?;
    let result = match client
        .batch_execute("CREATE TABLE IF NOT EXISTS hookgate_schema (version BIGINT NOT NULL)")
        .await
    {
        Ok(()) => migrate_locked(client).await,
        Err(e) => Err(e.into()),
    };
    client
        .query_one(&format!("SELECT pg_advisory_unlock({MIGRATION_LOCK})"), &[])
        .await?;
    result
}

async fn migrate_locked(client: &mut Client) -> StoreResult<u32> {
    let current: i64 = client
        .query_opt("SELECT version FROM hookgate_schema", &[])
        .await?
        .map_or(0, |row| row.get(0));
    let target = MIGRATIONS.len() as i64;
    if current > target {
        return Err(StoreError::Internal(format!(
            "the database has schema version {current}, newer than this gateway's {target}; \
             upgrade the gateway"
        )));
    }
    for (version, sql) in MIGRATIONS.iter().enumerate().skip(current as usize) {
        let tx = client.transaction().await?;
        tx.batch_execute(sql).await?;
        tx.execute("DELETE FROM hookgate_schema", &[]).await?;
        tx.execute(
            "INSERT INTO hookgate_schema (version) VALUES ($1)",
            &[&(version as i64 + 1)],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(version = version + 1, "applied schema migration");
    }
    Ok(target as u32)
}

/// Sets the schema version (tests use it to fake a newer database).
#[cfg(test)]
pub(super) async fn force_version(client: &Client, version: i64) -> StoreResult<()> {
    client
        .execute("UPDATE hookgate_schema SET version = $1", &[&version])
        .await?;
    Ok(())
}
