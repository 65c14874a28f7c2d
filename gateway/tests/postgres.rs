//! The integration suite (`tests/it`) once more, on PostgreSQL: one test list, two stores.
//!
//! Runs the `it` test binary cargo built beside this one with `HOOKGATE_TEST_BACKEND=postgres`,
//! so that every `TestGateway` gets a schema of its own (see `postgres_url_for` in
//! `tests/it/support.rs`), then drops those schemas. Needs `HOOKGATE_TEST_POSTGRES`, a URL to
//! an existing database where the test user may create schemas, e.g.
//! `postgres://postgres@127.0.0.1/test`; without it the test says that it was skipped.
//! `HOOKGATE_TEST_POSTGRES_REQUIRED=1` (set by CI) turns the skip into a failure.

use std::path::PathBuf;
use std::process::Command;

/// Tests that run the real binary on its own SQLite file, or that are about SQLite itself
/// (the writer queue, `storage.max_size`): the first run of the suite covers them.
const SQLITE_ONLY: &[&str] = &[
    "kill_9",
    "late_rounds",
    "ops_cli",
    "backpressure",
    "disk_faults",
    "backup",
    "readiness::a_full_disk",
    "real_binary",
    "real_attempts",
    "embedded_default",
    "serve_listen::",
    // The console over the API: the same pages whatever the store; one browser run is enough.
    "console::",
];

#[test]
fn the_integration_suite_passes_on_postgresql() {
    let Ok(admin) = std::env::var("HOOKGATE_TEST_POSTGRES") else {
        assert!(
            std::env::var_os("HOOKGATE_TEST_POSTGRES_REQUIRED").is_none(),
            "HOOKGATE_TEST_POSTGRES_REQUIRED is set but HOOKGATE_TEST_POSTGRES is not"
        );
        // Straight to the terminal, past the test harness's output capture: a skip must show.
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED {}: needs HOOKGATE_TEST_POSTGRES (e.g. postgres://postgres@127.0.0.1/test)",
            std::thread::current().name().unwrap_or("a PostgreSQL test")
        );
        return;
    };
    let it = it_binary();
    let mut command = Command::new(&it);
    command.env("HOOKGATE_TEST_BACKEND", "postgres");
    for name in SQLITE_ONLY {
        command.args(["--skip", name]);
    }
    let status = command
        .status()
        .unwrap_or_else(|e| panic!("running {}: {e}", it.display()));
    drop_test_schemas(&admin);
    assert!(
        status.success(),
        "the integration suite failed on PostgreSQL (see above)"
    );
}

/// The newest `it-*` test executable in this binary's folder (cargo builds every test target
/// before it runs any).
fn it_binary() -> PathBuf {
    let me = std::env::current_exe().unwrap();
    let dir = me.parent().unwrap();
    std::fs::read_dir(dir)
        .unwrap()
        .filter_map(Result::ok)
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.starts_with("it-") && !name.contains('.')
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
        .expect("the `it` test binary next to this one: run `cargo test -p hookgate`")
}

fn drop_test_schemas(admin: &str) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (client, connection) = tokio_postgres::connect(admin, tokio_postgres::NoTls)
            .await
            .expect("connect to HOOKGATE_TEST_POSTGRES");
        tokio::spawn(connection);
        let names = client
            .query(
                "SELECT nspname FROM pg_namespace WHERE nspname LIKE 'hg\\_it\\_%'",
                &[],
            )
            .await
            .unwrap();
        for row in names {
            let name: String = row.get(0);
            client
                .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                .await
                .unwrap_or_else(|e| panic!("dropping {name}: {e}"));
        }
    });
}

/// `hookgate migrate` copies a SQLite store into PostgreSQL with every id kept: the PostgreSQL
/// store answers every read as the SQLite one did, new ids continue after the copied ones, and a
/// second copy into the same (no longer empty) database is refused.
#[test]
fn migrate_copies_a_sqlite_store_into_postgresql_with_every_id_kept() {
    let Ok(admin) = std::env::var("HOOKGATE_TEST_POSTGRES") else {
        use std::io::Write as _;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED migrate test: needs HOOKGATE_TEST_POSTGRES"
        );
        return;
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("hookgate.db");
        let sqlite = fill_sqlite(&db).await;
        let schema = format!("hg_migrate_{}", std::process::id());
        let url = schema_url(&admin, &schema).await;

        let out = Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .args(["migrate", "--from"])
            .arg(&db)
            .env("HOOKGATE_MIGRATE_TO", &url)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{stdout}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(stdout.contains("events: 1200 rows"), "{stdout}");
        assert!(
            !stdout.contains(&url) && !stdout.contains("postgres://"),
            "the URL is never printed"
        );

        assert!(
            stdout.contains("storage.encryption_key"),
            "says which key the PostgreSQL gateway needs: {stdout}"
        );
        // The secrets come over sealed, under the SQLite store's key, which opens them there.
        let key = std::fs::read_to_string(dir.path().join("hookgate.key")).unwrap();
        let sealer = Sealer::new(EncryptionKey::from_base64(&key).unwrap(), Vec::new());
        let pg = PgStore::open(&url, &Metrics::new(), "test-reader", sealer)
            .await
            .unwrap();
        assert_same_reads(&sqlite, &pg).await;
        let newest = sqlite.deliveries(all()).await.unwrap()[0].id;
        let Committed(fresh) = pg.ingest(batch(9999, None)).await.unwrap() else {
            panic!("not committed")
        };
        assert!(fresh[0].id.0 > newest.0, "new ids continue after the copied ones");
        pg.close().await;

        let again = Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .args(["migrate", "--from"])
            .arg(&db)
            .env("HOOKGATE_MIGRATE_TO", &url)
            .output()
            .unwrap();
        assert!(!again.status.success());
        assert!(String::from_utf8_lossy(&again.stderr).contains("copy into an empty one"));
        drop_schema(&admin, &schema).await;
    });
}

/// Drops one schema (the suite's run drops the `hg_it_` ones when it ends; this test runs
/// beside it and must not touch them).
async fn drop_schema(admin: &str, schema: &str) {
    let (client, connection) = tokio_postgres::connect(admin, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}

use std::sync::Arc;

use bytes::Bytes;
use hookgate::health::{HealthInput, HealthRules};
use hookgate::model::{Attempt, DeliveryStatus, Event, EventTrace, Exchange, SpanId, Timestamp, TraceId};
use hookgate::store::IngestOutcome::Committed;
use hookgate::store::{
    AttemptWrite, DeliveryFilter, EncryptionKey, HealthChange, IdempotencyRecord, IngestBatch, IngestItem,
    PgStore, Sealer, SqliteOptions, SqliteStore, StateChange, Store, Target,
};
use hookgate::telemetry::Metrics;

const T0: i64 = 1_767_225_600_000;

fn batch(n: i64, idempotency: Option<IdempotencyRecord>) -> IngestBatch {
    IngestBatch {
        items: vec![IngestItem {
            event: Arc::new(Event {
                id: format!("evt_{n}"),
                topic: "t".into(),
                event_type: "order.created".into(),
                content_type: "application/json".into(),
                payload: Bytes::from(format!("{{\"n\":{n}}}")),
                ordering_key: (n % 3 == 0).then(|| format!("k{}", n % 7)),
                received_at: Timestamp::from_millis(T0 + n),
                tenant: None,
                trace: Some(EventTrace {
                    trace_id: TraceId::from(0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736 + n as u128),
                    span_id: (n % 2 == 0).then(|| SpanId::from(0x00f0_67aa_0ba9_02b7 + n as u64)),
                }),
                labels: hookgate::model::EventLabels {
                    channels: vec![format!("c{}", n % 2)],
                    ..Default::default()
                },
            }),
            endpoints: vec![Target::untenanted("a"), Target::untenanted("b")],
        }],
        idempotency,
        now: Timestamp::from_millis(T0 + n),
    }
}

/// A store with 1 200 events (2 400 deliveries, some attempted, some finished), an idempotency
/// record, and an endpoint degraded by five failures (health and history).
async fn fill_sqlite(path: &std::path::Path) -> SqliteStore {
    let store = SqliteStore::open(SqliteOptions::new(path)).unwrap();
    for n in 0..1200 {
        let record = (n == 7).then(|| IdempotencyRecord {
            scope: "anonymous".into(),
            key: "key-7".into(),
            request_hash: vec![7; 32],
            status: 202,
            response: Bytes::from_static(b"{\"id\":\"evt_7\"}"),
            created_at: Timestamp::from_millis(T0 + n),
        });
        let Committed(ready) = store.ingest(batch(n, record)).await.unwrap() else {
            panic!("not committed")
        };
        if n % 4 == 0 {
            let attempt = Attempt {
                n: 1,
                started_at: Timestamp::from_millis(T0 + n + 5),
                duration_ms: 12,
                status_code: Some(if n % 8 == 0 { 200 } else { 503 }),
                error_kind: None,
                error: None,
                exchange: Exchange {
                    request_headers: vec![("authorization".into(), "[masked]".into())],
                    response_headers: vec![("content-type".into(), "text/plain".into())],
                    response_body: Some(format!("answer {n}")),
                },
                trace_id: Some(TraceId::from(
                    0x4bf9_2f35_77b3_4da6_a3ce_929d_0e0e_4736 + n as u128,
                )),
            };
            let status = if n % 8 == 0 {
                DeliveryStatus::Succeeded
            } else {
                DeliveryStatus::Pending
            };
            let write = AttemptWrite {
                delivery: ready[0].id,
                round: 1,
                attempt,
                plugin_note: Some("cloudevents@1a2b (0.3 ms)".into()),
                status,
                next_attempt_at: (status == DeliveryStatus::Pending)
                    .then(|| Timestamp::from_millis(T0 + 60_000)),
                last_error: None,
            };
            store
                .apply(Arc::from([StateChange::Attempt(write)]))
                .await
                .unwrap();
        }
    }
    for i in 0..5 {
        let change = StateChange::Health(HealthChange {
            endpoint: Arc::from("b"),
            input: HealthInput::AttemptFailed { gone: false },
            at: Timestamp::from_millis(T0 + i),
            rules: HealthRules::default(),
        });
        store.apply(Arc::from([change])).await.unwrap();
    }
    store
}

fn all() -> DeliveryFilter {
    DeliveryFilter {
        limit: 10_000,
        ..DeliveryFilter::default()
    }
}

async fn assert_same_reads(a: &dyn Store, b: &dyn Store) {
    let deliveries = a.deliveries(all()).await.unwrap();
    assert_eq!(deliveries.len(), 2400);
    assert_eq!(deliveries, b.deliveries(all()).await.unwrap());
    for d in deliveries.iter().step_by(97) {
        assert_eq!(a.delivery(d.id).await.unwrap(), b.delivery(d.id).await.unwrap());
    }
    assert_eq!(
        a.pending_deliveries().await.unwrap(),
        b.pending_deliveries().await.unwrap()
    );
    assert_eq!(
        a.endpoint_health().await.unwrap(),
        b.endpoint_health().await.unwrap()
    );
    assert_eq!(
        a.endpoint_history("b", 10).await.unwrap(),
        b.endpoint_history("b", 10).await.unwrap()
    );
    let key = a.idempotency_record("anonymous", "key-7").await.unwrap();
    assert!(key.is_some());
    assert_eq!(key, b.idempotency_record("anonymous", "key-7").await.unwrap());
    let event = a.event("evt_33", None).await.unwrap();
    assert_eq!(event.len(), 1);
    assert!(event[0].trace.is_some(), "the trace columns are copied");
    assert_eq!(event, b.event("evt_33", None).await.unwrap());
}

/// A fresh schema in the test database, as a URL whose search path is that schema.
async fn schema_url(admin: &str, schema: &str) -> String {
    let (client, connection) = tokio_postgres::connect(admin, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
        .batch_execute(&format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}"
        ))
        .await
        .unwrap();
    let sep = if admin.contains('?') { '&' } else { '?' };
    format!("{admin}{sep}options=-c%20search_path%3D{schema}")
}
