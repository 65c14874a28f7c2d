//! The PostgreSQL store's own rules (migrations, leases and notices, racing writers). Everything else
//! it shares with SQLite is proven by the integration suite run on both backends. These tests
//! need `HOOKGATE_TEST_POSTGRES` (a URL to an existing database, used to create one per test)
//! and say that they were skipped without it.

use super::*;
use crate::store::{ClusterStore, KeyActionRequest};

/// A fresh, empty schema for one test (in the database of `HOOKGATE_TEST_POSTGRES`), dropped
/// when the test ends. Schemas, not databases: creating and dropping a database costs a
/// checkpoint each.
struct TestDb {
    admin: String,
    name: String,
    url: String,
}

impl TestDb {
    async fn create() -> Option<TestDb> {
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
            return None;
        };
        let name = format!("hg_unit_{}", ulid::Ulid::new().to_string().to_lowercase());
        admin_client(&admin)
            .await
            .batch_execute(&format!("CREATE SCHEMA {name}"))
            .await
            .expect("create the test schema");
        let url = with_schema(&admin, &name);
        Some(TestDb { admin, name, url })
    }
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // A thread of its own: Drop may run inside the test's runtime.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async {
                let _ = admin_client(&admin)
                    .await
                    .batch_execute(&format!("DROP SCHEMA IF EXISTS {name} CASCADE"))
                    .await;
            });
        })
        .join();
    }
}

async fn admin_client(url: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls)
        .await
        .expect("connect to HOOKGATE_TEST_POSTGRES");
    tokio::spawn(connection);
    client
}

/// A node `node-a` on the test schema, with the suite's key.
async fn node_a(db: &TestDb) -> PgStore {
    node(db, "node-a").await
}

/// Node `id` on the test schema, with the suite's key.
async fn node(db: &TestDb, id: &str) -> PgStore {
    node_with(db, id, &Metrics::new()).await
}

/// Node `id` on the test schema, recording into `metrics`.
async fn node_with(db: &TestDb, id: &str, metrics: &Metrics) -> PgStore {
    PgStore::open(&db.url, metrics, id, test_sealer()).await.unwrap()
}

/// The deliveries an ingestion committed.
fn committed(outcome: IngestOutcome) -> Vec<ReadyDelivery> {
    match outcome {
        IngestOutcome::Committed(ready) => ready,
        IngestOutcome::AlreadyDone(_) => panic!("not committed: no idempotency key was sent"),
    }
}

/// The key every test store of a database opens with.
fn test_sealer() -> Sealer {
    Sealer::new(
        crate::store::EncryptionKey::from_base64("dGVzdCBrZXkgdGVzdCBrZXkgdGVzdCBrZXkgdGVzdCA=").unwrap(),
        Vec::new(),
    )
}

/// `url` with `schema` as the connection's search path.
fn with_schema(url: &str, schema: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}options=-c%20search_path%3D{schema}")
}

fn event(id: &str) -> Arc<Event> {
    Arc::new(Event {
        id: id.to_owned(),
        topic: "t".into(),
        event_type: "x".into(),
        content_type: "application/json".into(),
        payload: Bytes::from_static(b"{}"),
        ordering_key: None,
        received_at: Timestamp::from_millis(1_767_225_600_000),
        tenant: None,
        trace: None,
        labels: Default::default(),
    })
}

/// Node `id` as its heartbeat describes it, started at 1 ms.
fn info(id: &str) -> NodeInfo {
    NodeInfo {
        id: id.into(),
        address: "127.0.0.1:1".into(),
        started_at: Timestamp::from_millis(1),
    }
}

fn batch(id: &str) -> IngestBatch {
    batch_to(id, &[Target::untenanted("e")])
}

fn batch_to(id: &str, targets: &[Target]) -> IngestBatch {
    IngestBatch {
        items: vec![IngestItem {
            event: event(id),
            endpoints: targets.to_vec(),
        }],
        idempotency: None,
        now: Timestamp::from_millis(1_767_225_600_000),
    }
}

#[test]
fn a_url_gets_a_search_path() {
    assert_eq!(
        with_schema("postgres://u@h/test", "x"),
        "postgres://u@h/test?options=-c%20search_path%3Dx"
    );
    assert_eq!(
        with_schema("postgres://u@h/test?sslmode=disable", "x"),
        "postgres://u@h/test?sslmode=disable&options=-c%20search_path%3Dx"
    );
}

#[tokio::test]
async fn api_endpoints_are_created_once_and_replaced_only_from_what_was_read() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    crate::store::contract::api_endpoint_writes(&store).await;
}

#[tokio::test]
async fn an_api_endpoints_uid_is_unique_within_its_tenant() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    crate::store::contract::api_endpoint_uids(&store).await;
}

#[tokio::test]
async fn api_endpoints_page_by_name_in_either_direction() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    crate::store::contract::api_endpoint_pages(&store).await;
}

#[tokio::test]
async fn the_svix_api_s_rows_are_kept_as_the_contract_says() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    crate::store::svix_contract::applications(&store).await;
    crate::store::svix_contract::event_types(&store).await;
    crate::store::svix_contract::tenant_events_and_attempts(&store).await;
    crate::store::svix_contract::latest_events(&store).await;
    crate::store::svix_contract::pages_read_back_from_a_cursor(&store).await;
    crate::store::svix_contract::expunged_payloads(&store).await;
}

#[tokio::test]
async fn ordering_keys_show_their_heads_what_waits_and_the_holds() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    crate::store::ordering::contract::ordering_keys(&store).await;
}

/// The one event every delivery of the listing tests points at.
const ONE_EVENT: &str = "INSERT INTO events (seq, id, topic, event_type, content_type, payload, ordering_key,
     received_at) VALUES (1, 'e1', 't', 'x', 'application/json', '\\x7b7d', 'k', 0);";

/// 200 000 pending deliveries of endpoint `e` on 200 keys (`k0`…`k199`), the first of each
/// key's thousand having failed once: 200 blocked keys.
const BLOCKED_BACKLOG: &str = "INSERT INTO deliveries (event_seq, endpoint, status, round, attempt_count,
     created_at, updated_at, round_started_at, ordering_key)
     SELECT 1, 'e', 'pending', 1, CASE WHEN i % 1000 = 1 THEN 1 ELSE 0 END, i, i, i, 'k' || ((i - 1) / 1000)
     FROM generate_series(1, 200000) AS i;";

/// The blocked listing reads the failed heads' index, never the endpoint's whole backlog: with
/// 200 000 pending deliveries on 200 keys, each behind a failed head, the planner searches
/// `deliveries_failed_heads` for the keys and `deliveries_by_key` for each key's head and count.
#[tokio::test]
async fn listing_blocked_keys_uses_the_failed_heads_index() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    let conn = store.conn().await.unwrap();
    conn.batch_execute(&format!("{ONE_EVENT} {BLOCKED_BACKLOG} ANALYZE deliveries;"))
        .await
        .unwrap();
    let plan = |sql: String| {
        let conn = &conn;
        async move {
            let rows = conn.query(&format!("EXPLAIN {sql}"), &[]).await.unwrap();
            rows.iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>()
                .join("\n")
        }
    };
    let blocked = plan(
        "SELECT DISTINCT ordering_key FROM deliveries WHERE endpoint = 'e' AND status = 'pending'
             AND ordering_key IS NOT NULL AND attempt_count > 0 AND ordering_key > '' ORDER BY 1 LIMIT 100"
            .into(),
    )
    .await;
    assert!(blocked.contains("deliveries_failed_heads"), "{blocked}");
    assert!(!blocked.contains("Seq Scan"), "{blocked}");
    let head = plan(
        "SELECT d.id FROM deliveries d WHERE d.endpoint = 'e' AND d.ordering_key = 'k7'
             AND d.status = 'pending' ORDER BY d.id LIMIT 2"
            .into(),
    )
    .await;
    assert!(head.contains("deliveries_by_key"), "{head}");
    let page = store
        .ordering_keys("e", KeyListing::Blocked, None, 500)
        .await
        .unwrap();
    assert_eq!(page.keys.len(), 200);
    assert_eq!(page.keys.iter().map(|k| k.waiting).sum::<u64>(), 200_000 - 200);
}

/// A page of keys reads each key by `deliveries_by_key` even when the table's statistics are
/// those of before a burst (autovacuum analyses it only a minute or so later): on those the
/// planner once walked the endpoint's whole range of pending deliveries once per key to count
/// what waits — over two minutes for a thousand keys at a million waiting — so the listing
/// brings them up to date first.
#[tokio::test]
async fn a_page_of_keys_reads_by_key_on_statistics_from_before_a_burst() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    let conn = store.conn().await.unwrap();
    conn.batch_execute(&format!(
        "ALTER TABLE deliveries SET (autovacuum_enabled = false);
             {ONE_EVENT}
             INSERT INTO deliveries (event_seq, endpoint, status, round, attempt_count, created_at,
                 updated_at, round_started_at, ordering_key)
             SELECT 1, 'other', 'delivered', 1, 1, i, i, i, 'k' FROM generate_series(1, 100) AS i;
             ANALYZE deliveries;
             {BLOCKED_BACKLOG}"
    ))
    .await
    .unwrap();
    let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
    let plan = |sql: &'static str| {
        let (conn, keys) = (&conn, &keys);
        async move {
            conn.query(&format!("EXPLAIN {sql}"), &[&"e", keys])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get::<_, String>(0))
                .collect::<Vec<_>>()
                .join("\n")
        }
    };
    // (Since the pending deliveries' index is by endpoint and id, stale statistics no longer
    // lead the planner there; the listing keeps them fresh all the same, for other plans.)
    // The burst's counts reach the statistics system when its connection flushes them.
    let counted = "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relid = 'deliveries'::regclass";
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while conn.query_one(counted, &[]).await.unwrap().get::<_, i64>(0) < 200_000 {
        assert!(
            std::time::Instant::now() < deadline,
            "the inserts never reached pg_stat"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let page = store
        .ordering_keys("e", KeyListing::Blocked, None, 1000)
        .await
        .unwrap();
    assert_eq!(page.keys.len(), 200);
    assert_eq!(page.keys.iter().map(|k| k.waiting).sum::<u64>(), 200_000 - 200);
    for sql in [super::ordering::FIRST_TWO, super::ordering::PENDING_COUNTS] {
        let after = plan(sql).await;
        assert!(after.contains("deliveries_by_key"), "{after}");
        assert!(!after.contains("deliveries_pending on"), "{after}");
    }
}

/// Two nodes on one schema: an endpoint's lease is held by one of them at a time, passes on
/// when it is given back or lapses, and each node's notices reach the other but not itself.
#[tokio::test]
async fn nodes_share_one_schema_by_leases_and_notices() {
    let Some(db) = TestDb::create().await else { return };
    let a = node_a(&db).await;
    let b = node(&db, "node-b").await;
    let e: Vec<Arc<str>> = vec![Arc::from("e")];
    // Long enough to outlast a busy machine between two statements; the lapse below uses a
    // short one.
    let lease = Duration::from_secs(10);
    let short = Duration::from_millis(300);
    assert_eq!(a.hold_endpoints(&e, &[], lease).await.unwrap(), e);
    assert!(
        b.hold_endpoints(&e, &[], lease).await.unwrap().is_empty(),
        "held by a"
    );
    assert_eq!(
        a.hold_endpoints(&e, &e, lease).await.unwrap(),
        e,
        "released, then taken again"
    );
    assert!(
        b.hold_endpoints(&e, &[], lease).await.unwrap().is_empty(),
        "renewed by a"
    );
    a.hold_endpoints(&[], &e, lease).await.unwrap();
    assert_eq!(
        b.hold_endpoints(&e, &[], short).await.unwrap(),
        e,
        "given back by a"
    );
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    assert_eq!(
        a.hold_endpoints(&e, &[], lease).await.unwrap(),
        e,
        "b's lease lapsed"
    );

    a.heartbeat(&info("node-a")).await.unwrap();
    let (_, nodes) = b.heartbeat(&info("node-b")).await.unwrap();
    let listed: Vec<(&str, u32)> = nodes.iter().map(|n| (n.id.as_str(), n.leases)).collect();
    assert_eq!(listed, [("node-a", 1), ("node-b", 0)]);

    let mut at_a = a.listen().await.unwrap();
    let mut at_b = b.listen().await.unwrap();
    // To an endpoint no node holds: its deliveries are announced (see the next test).
    let ready = committed(
        a.ingest(batch_to("evt_1", &[Target::untenanted("x")]))
            .await
            .unwrap(),
    );
    let wait = Duration::from_secs(5);
    let notice = tokio::time::timeout(wait, at_b.next()).await.unwrap();
    let ids = vec![(ready[0].endpoint.clone(), ready[0].id)];
    assert_eq!(
        notice,
        Some(ClusterNotice::Deliveries {
            ids: ids.clone(),
            own: false
        })
    );
    let notice = tokio::time::timeout(wait, at_a.next()).await.unwrap();
    assert_eq!(
        notice,
        Some(ClusterNotice::Deliveries { ids, own: true }),
        "marked as its own"
    );
    let pending = b.pending_by_ids(&[ready[0].id]).await.unwrap();
    assert_eq!(pending.len(), 1);
    assert_eq!(pending[0].1.id, "evt_1");
    assert_eq!(
        b.pending_of(&[Arc::from("x")]).await.unwrap(),
        b.pending_of(&[Arc::from("e"), Arc::from("x")]).await.unwrap()
    );

    a.leave().await;
    let (_, nodes) = b.heartbeat(&info("node-b")).await.unwrap();
    let listed: Vec<(&str, u32, bool)> = nodes
        .iter()
        .map(|n| (n.id.as_str(), n.leases, n.left_at.is_some()))
        .collect();
    assert_eq!(
        listed,
        [("node-a", 0, true), ("node-b", 0, false)],
        "a is listed as left, without its lease"
    );
    // Back under the same id, it runs again, started anew.
    let restarted = NodeInfo {
        started_at: Timestamp::from_millis(2),
        ..info("node-a")
    };
    let (_, nodes) = a.heartbeat(&restarted).await.unwrap();
    assert_eq!(
        (nodes[0].left_at, nodes[0].started_at),
        (None, Timestamp::from_millis(2))
    );
}

/// An ingestion group announces only the deliveries another node needs to hear of: not those
/// of an unordered endpoint whose lease the ingesting node holds (its own scheduler takes
/// them), but those of endpoints it does not hold and of ordered endpoints (every node takes
/// those from the notices, in commit order). No notice also means no wait for PostgreSQL's
/// notify lock, which serialises every notifying commit.
#[tokio::test]
async fn a_group_announces_only_what_another_node_needs() {
    let Some(db) = TestDb::create().await else { return };
    let a = node_a(&db).await;
    let b = node(&db, "node-b").await;
    let held: Vec<Arc<str>> = vec![Arc::from("held"), Arc::from("ordered")];
    a.hold_endpoints(&held, &[], Duration::from_secs(60))
        .await
        .unwrap();
    let mut at_b = b.listen().await.unwrap();
    let ordered = Target {
        ordered: true,
        ..Target::untenanted("ordered")
    };
    let targets = [
        Target::untenanted("held"),
        ordered,
        Target::untenanted("elsewhere"),
    ];
    let ready = committed(a.ingest(batch_to("evt_1", &targets)).await.unwrap());
    let wait = Duration::from_secs(5);
    let announced = |r: &[ReadyDelivery]| -> Vec<(Arc<str>, DeliveryId)> {
        r.iter().map(|r| (r.endpoint.clone(), r.id)).collect()
    };
    assert_eq!(
        tokio::time::timeout(wait, at_b.next()).await.unwrap(),
        Some(ClusterNotice::Deliveries {
            ids: announced(&ready[1..]),
            own: false
        }),
        "the ordered endpoint's and the unheld one's, not the held one's"
    );
    let only_held = batch_to("evt_2", &[Target::untenanted("held")]);
    let _ = committed(a.ingest(only_held).await.unwrap());
    let next = committed(a.ingest(batch_to("evt_3", &targets[2..])).await.unwrap());
    assert_eq!(
        tokio::time::timeout(wait, at_b.next()).await.unwrap(),
        Some(ClusterNotice::Deliveries {
            ids: announced(&next),
            own: false
        }),
        "a group of held deliveries alone sent no notice"
    );
}

/// A lease changes hands only between ingestion groups: a group waits for a move under way and
/// reads the leases after it (so it announces what the new holder needs), and a move waits for
/// the groups under way (so the new holder's full read finds what they made). A renewal that
/// moves nothing waits for no group.
#[tokio::test]
async fn a_lease_moves_only_between_ingestion_groups() {
    let Some(db) = TestDb::create().await else { return };
    let a = Arc::new(node(&db, "node-a").await);
    let b = Arc::new(node(&db, "node-b").await);
    let (e, lease) = (vec![Arc::<str>::from("e")], Duration::from_secs(60));
    a.hold_endpoints(&e, &[], lease).await.unwrap();
    let mut at_b = b.listen().await.unwrap();
    let raw = admin_client(&db.url).await;

    // A move under way (another node's takeover, not committed yet): the group waits for it.
    let lease_moves = super::cluster::LEASE_MOVES;
    raw.batch_execute(&format!(
        "BEGIN; SELECT pg_advisory_xact_lock({lease_moves}); UPDATE endpoint_leases SET node = 'node-b'"
    ))
    .await
    .unwrap();
    let ingest = tokio::spawn({
        let a = a.clone();
        async move { a.ingest(batch("evt_1")).await }
    });
    let waited = lease_moves_waited_for(&raw).await && !ingest.is_finished();
    // Committed before any assertion: a failed test must not leave the schema locked.
    raw.batch_execute("COMMIT").await.unwrap();
    assert!(waited, "the group waits for the move");
    let ready = committed(ingest.await.unwrap().unwrap());
    assert_eq!(
        tokio::time::timeout(Duration::from_secs(5), at_b.next())
            .await
            .unwrap(),
        Some(ClusterNotice::Deliveries {
            ids: vec![(ready[0].endpoint.clone(), ready[0].id)],
            own: false
        }),
        "read after the move: b holds the endpoint now and hears of its delivery"
    );

    // A group under way: a move (b gives the lease back) waits for it; a renewal does not.
    hold_lease_moves_shared(&raw).await;
    let renewed = tokio::time::timeout(Duration::from_secs(5), b.hold_endpoints(&e, &[], lease)).await;
    if !matches!(&renewed, Ok(Ok(held)) if *held == e) {
        raw.batch_execute("COMMIT").await.unwrap();
        panic!("a renewal that moves nothing waited, or failed: {renewed:?}");
    }
    let release = tokio::spawn({
        let b = b.clone();
        async move { b.hold_endpoints(&[], &e, lease).await }
    });
    let waited = lease_moves_waited_for(&raw).await && !release.is_finished();
    raw.batch_execute("COMMIT").await.unwrap();
    assert!(waited, "the move waits for the group");
    assert!(release.await.unwrap().unwrap().is_empty(), "given back");
}

/// The keeper renews a node's leases while the node's own turn waits to move a lease (for an
/// ingestion group relying on the leases to commit): the keeper does not queue behind the turn
/// for a lease connection. With one lease connection the renewal queued behind the turn: it
/// got the connection only when the turn's call ran out of time (2 s, the whole lease of the
/// fault tests), or ran out of time itself.
#[tokio::test]
async fn the_keeper_renews_while_the_turn_waits_to_move_a_lease() {
    let Some(db) = TestDb::create().await else { return };
    let a = Arc::new(node(&db, "node-a").await);
    let node = info("node-a");
    let held = vec![Arc::<str>::from("e")];
    let lease = Duration::from_secs(60);
    a.heartbeat(&node).await.unwrap();
    a.hold_endpoints(&held, &[], lease).await.unwrap();
    let raw = admin_client(&db.url).await;
    hold_lease_moves_shared(&raw).await;
    let turn = tokio::spawn({
        let a = a.clone();
        let wanted = vec![Arc::<str>::from("e"), Arc::<str>::from("f")];
        async move { a.hold_endpoints(&wanted, &[], lease).await }
    });
    let turn_waits = lease_moves_waited_for(&raw).await && !turn.is_finished();
    let renewed = a.renew_leases(&node, &held, lease).await;
    let turn_still_waits = !turn.is_finished();
    // Committed before any assertion: a failed test must not leave the schema locked.
    raw.batch_execute("COMMIT").await.unwrap();
    assert!(turn_waits, "the turn waits for the group");
    assert_eq!(renewed.unwrap(), held, "the keeper renewed");
    assert!(
        turn_still_waits,
        "the renewal was answered while the turn still waited"
    );
    let mut now_held = turn.await.unwrap().unwrap();
    now_held.sort();
    assert_eq!(now_held, vec![Arc::<str>::from("e"), Arc::<str>::from("f")]);
}

/// Begins a transaction on `c` that holds the lease-moves lock shared, as an uncommitted
/// ingestion group does; the caller commits it.
async fn hold_lease_moves_shared(c: &tokio_postgres::Client) {
    let lease_moves = super::cluster::LEASE_MOVES;
    c.batch_execute(&format!(
        "BEGIN; SELECT pg_advisory_xact_lock_shared({lease_moves})"
    ))
    .await
    .unwrap();
}

/// Whether a session of this schema waits for the lease-moves lock, within 10 s.
async fn lease_moves_waited_for(c: &tokio_postgres::Client) -> bool {
    let waiting = format!(
        "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
             AND ((classid::bigint << 32) | objid::bigint) = {}",
        super::cluster::LEASE_MOVES
    );
    for _ in 0..400 {
        if c.query_one(&waiting, &[]).await.unwrap().get::<_, i64>(0) > 0 {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    false
}

/// The keeper's renewal extends only the leases a node still holds: it takes no free lease,
/// does not take back one that lapsed and went to another node, and marks the node seen.
#[tokio::test]
async fn a_renewal_extends_only_leases_still_held() {
    let Some(db) = TestDb::create().await else { return };
    let a = node_a(&db).await;
    let b = node(&db, "node-b").await;
    let (e, f): (Arc<str>, Arc<str>) = (Arc::from("e"), Arc::from("f"));
    let both = vec![e.clone(), f.clone()];
    let lease = Duration::from_secs(10);
    let short = Duration::from_millis(300);
    assert_eq!(
        a.hold_endpoints(std::slice::from_ref(&e), &[], short)
            .await
            .unwrap(),
        vec![e.clone()]
    );
    // `f` is free: a renewal does not take it.
    assert_eq!(
        a.renew_leases(&info("node-a"), &both, short).await.unwrap(),
        vec![e.clone()]
    );
    // Let `e` lapse and go to b: a's renewal no longer finds it.
    tokio::time::sleep(short + Duration::from_millis(100)).await;
    assert_eq!(
        b.hold_endpoints(std::slice::from_ref(&e), &[], lease)
            .await
            .unwrap(),
        vec![e.clone()]
    );
    assert!(
        a.renew_leases(&info("node-a"), &both, lease)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        b.renew_leases(&info("node-b"), &both, lease).await.unwrap(),
        vec![e]
    );
    let (_, nodes) = b.heartbeat(&info("node-b")).await.unwrap();
    let listed: Vec<(&str, u32)> = nodes.iter().map(|n| (n.id.as_str(), n.leases)).collect();
    assert_eq!(
        listed,
        [("node-a", 0), ("node-b", 1)],
        "the renewal marked a seen"
    );
}

/// A node taking in deliveries another node announced reads their events with them, each
/// event once however many of its deliveries it takes: their attempts read nothing more.
#[tokio::test]
async fn announced_deliveries_come_with_their_events_read_once_each() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    let mut fanned = batch("evt_1");
    fanned.items[0].endpoints.push(Target::untenanted("x"));
    let mut keyed = batch("evt_2").items.remove(0);
    keyed.event = Arc::new(Event {
        ordering_key: Some("k".into()),
        ..(*keyed.event).clone()
    });
    fanned.items.push(keyed);
    let ready = committed(store.ingest(fanned).await.unwrap());
    let mut ids: Vec<DeliveryId> = ready.iter().map(|r| r.id).collect();
    ids.push(DeliveryId(i64::MAX));
    let read = store.pending_by_ids(&ids).await.unwrap();
    assert_eq!(read.len(), 3, "the three pending deliveries, not the unknown id");
    for (p, event) in &read {
        let sent = ready.iter().find(|r| r.id == p.id).unwrap();
        assert_eq!(**event, *sent.event, "delivery {} carries its event", p.id);
        assert_eq!(p.endpoint, sent.endpoint);
        assert_eq!(p.ordering_key, sent.event.ordering_key);
    }
    let of = |id: &str| {
        read.iter()
            .filter(|(_, e)| e.id == id)
            .map(|(_, e)| e)
            .collect::<Vec<_>>()
    };
    let (one, two) = (of("evt_1"), of("evt_2"));
    assert_eq!((one.len(), two.len()), (2, 1));
    assert!(
        Arc::ptr_eq(one[0], one[1]),
        "a fan-out's deliveries share one read of their event"
    );

    let ended = ready[0].id;
    let finish = StateChange::Finish {
        delivery: ended,
        status: DeliveryStatus::Dead,
        error: "expired".into(),
        now: Timestamp::from_millis(2),
    };
    store.apply(Arc::from([finish])).await.unwrap();
    let read = store.pending_by_ids(&ids).await.unwrap();
    assert_eq!(read.len(), 2, "a delivery that ended is not taken in");
    assert!(read.iter().all(|(p, _)| p.id != ended));
}

/// Nodes purge one at a time: while another holds the purge lock, a purge removes nothing;
/// once it is free, the same purge does its work.
#[tokio::test]
async fn one_node_at_a_time_purges() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    let mut old = batch("evt_1");
    old.idempotency = Some(IdempotencyRecord {
        scope: "anonymous".into(),
        key: "k".into(),
        request_hash: vec![1],
        status: 202,
        response: Bytes::from_static(b"{}"),
        created_at: Timestamp::from_millis(1),
    });
    store.ingest(old).await.unwrap();
    let cutoffs = RetentionCutoffs {
        deliveries_before: Timestamp::from_millis(0),
        events_before: Timestamp::from_millis(0),
        idempotency_before: Timestamp::from_millis(1_000),
        history_before: Timestamp::from_millis(0),
        batch: 10,
    };
    let other = admin_client(&db.url).await;
    other.batch_execute("BEGIN").await.unwrap();
    other
        .execute(&format!("SELECT pg_advisory_xact_lock({PURGE_LOCK})"), &[])
        .await
        .unwrap();
    assert_eq!(
        store.purge(cutoffs).await.unwrap(),
        Purged::default(),
        "another node is purging"
    );
    other.batch_execute("COMMIT").await.unwrap();
    assert_eq!(store.purge(cutoffs).await.unwrap().idempotency_keys, 1);
}

/// An operator's action on a key whose asking node died before it read the answer is purged
/// with the idempotency keys of its age; a recent one stays for its asker.
#[tokio::test]
async fn actions_left_by_an_asker_that_died_are_purged() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    let request = |key: &str| KeyActionRequest {
        endpoint: Arc::from("e"),
        key: key.into(),
        action: "skip".into(),
        delivery: None,
    };
    let left = store
        .request_key_action(&request("left"), Timestamp::from_millis(10))
        .await
        .unwrap();
    store.answer_key_action(left, "{}").await.unwrap();
    let asked = store
        .request_key_action(&request("asked"), Timestamp::from_millis(5_000))
        .await
        .unwrap();
    let cutoffs = RetentionCutoffs {
        deliveries_before: Timestamp::from_millis(0),
        events_before: Timestamp::from_millis(0),
        idempotency_before: Timestamp::from_millis(1_000),
        history_before: Timestamp::from_millis(0),
        batch: 10,
    };
    store.purge(cutoffs).await.unwrap();
    assert_eq!(store.take_key_action_answer(left, false).await.unwrap(), None);
    assert!(store.key_action_request(asked).await.unwrap().is_some());
}

#[tokio::test]
async fn migrations_run_once_and_a_newer_schema_is_refused() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    store.close().await;
    drop(store);
    let mut client = admin_client(&db.url).await;
    assert_eq!(
        schema::migrate(&mut client).await.unwrap(),
        schema::current_version(),
        "a second run is a no-op"
    );
    schema::force_version(&client, 999).await.unwrap();
    let Err(e) = schema::migrate(&mut client).await else {
        panic!("a newer schema was accepted");
    };
    assert!(e.to_string().contains("newer than this gateway"), "{e}");
}

#[tokio::test]
async fn a_duplicate_event_keeps_nothing_of_its_batch() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    store.ingest(batch("evt_1")).await.unwrap();
    let mut twice = batch("evt_2");
    twice.items.push(batch("evt_1").items.remove(0));
    let err = store.ingest(twice).await.unwrap_err();
    assert!(matches!(err, StoreError::DuplicateEvent { .. }), "{err}");
    assert!(
        store.event("evt_2", None).await.unwrap().is_empty(),
        "the batch was rolled back"
    );
    assert_eq!(store.pending_deliveries().await.unwrap().len(), 1);
}

/// Concurrent ingestion requests share commits (the group's size is recorded), and each gets
/// exactly its own deliveries back.
#[tokio::test]
async fn concurrent_requests_share_a_commit_and_each_gets_its_own_answer() {
    let Some(db) = TestDb::create().await else { return };
    let metrics = Metrics::new();
    let store = Arc::new(node_with(&db, "node-a", &metrics).await);
    let tasks: Vec<_> = (0..200)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { (i, store.ingest(batch(&format!("evt_{i}"))).await.unwrap()) })
        })
        .collect();
    for task in tasks {
        let (i, outcome) = task.await.unwrap();
        let IngestOutcome::Committed(ready) = outcome else {
            panic!("request {i} was not committed");
        };
        assert_eq!(ready.len(), 1);
        assert_eq!(
            ready[0].event.id,
            format!("evt_{i}"),
            "request {i} got another's delivery"
        );
    }
    assert_eq!(store.pending_deliveries().await.unwrap().len(), 200);
    let groups = metric_value(&metrics.render(), "hookgate_writer_batch_size_count");
    let requests = metric_value(&metrics.render(), "hookgate_writer_batch_size_sum");
    assert_eq!(requests, 200.0);
    assert!(
        groups < 200.0,
        "{groups} groups for 200 concurrent requests: no commit was shared"
    );
}

/// An event already stored, or sent twice within one group, refuses only its own request: the
/// others of the group are committed.
#[tokio::test]
async fn a_duplicate_in_a_group_fails_only_its_own_request() {
    let Some(db) = TestDb::create().await else { return };
    let store = Arc::new(node(&db, "node-a").await);
    store.ingest(batch("evt_old")).await.unwrap();
    let ids = ["evt_a", "evt_old", "evt_b", "evt_twice", "evt_c", "evt_twice"];
    let tasks: Vec<_> = ids
        .iter()
        .map(|id| {
            let store = store.clone();
            let id = (*id).to_owned();
            tokio::spawn(async move { store.ingest(batch(&id)).await })
        })
        .collect();
    let mut refused = Vec::new();
    for (id, task) in ids.iter().zip(tasks) {
        match task.await.unwrap() {
            Ok(IngestOutcome::Committed(ready)) => assert_eq!(ready[0].event.id, *id),
            Ok(IngestOutcome::AlreadyDone(_)) => panic!("no idempotency key was sent"),
            Err(StoreError::DuplicateEvent { id: dup, .. }) => refused.push(dup),
            Err(e) => panic!("{id}: {e}"),
        }
    }
    refused.sort();
    assert_eq!(refused, ["evt_old", "evt_twice"]);
    // evt_old once, the three singles, evt_twice once.
    assert_eq!(store.pending_deliveries().await.unwrap().len(), 5);
}

fn metric_value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} not in:\n{text}"))
}

/// Two writers racing with one idempotency key: one commits, the other waits on the key's lock
/// and gets the first answer, so exactly one set of events is written.
#[tokio::test]
async fn racing_requests_with_one_idempotency_key_write_once() {
    let Some(db) = TestDb::create().await else { return };
    let store = Arc::new(node(&db, "node-a").await);
    let record = IdempotencyRecord {
        scope: "anonymous".into(),
        key: "k".into(),
        request_hash: vec![1],
        status: 202,
        response: Bytes::from_static(b"{}"),
        created_at: Timestamp::from_millis(1_767_225_600_000),
    };
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let (store, record) = (store.clone(), record.clone());
            tokio::spawn(async move {
                let mut b = batch(&format!("evt_{i}"));
                b.idempotency = Some(record);
                store.ingest(b).await.unwrap()
            })
        })
        .collect();
    let mut committed = 0;
    for t in tasks {
        if matches!(t.await.unwrap(), IngestOutcome::Committed(_)) {
            committed += 1;
        }
    }
    assert_eq!(committed, 1);
    assert_eq!(store.pending_deliveries().await.unwrap().len(), 1);
}

/// Health inputs from concurrent writers are applied one after another on the locked row: five
/// failures degrade the endpoint exactly once.
#[tokio::test]
async fn concurrent_health_inputs_are_all_counted_and_degrade_once() {
    let Some(db) = TestDb::create().await else { return };
    let store = Arc::new(node(&db, "node-a").await);
    let tasks: Vec<_> = (0..5)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let change = StateChange::Health(HealthChange {
                    endpoint: Arc::from("e"),
                    input: HealthInput::AttemptFailed { gone: false },
                    at: Timestamp::from_millis(1_767_225_600_000 + i),
                    rules: HealthRules::default(),
                });
                store.apply(Arc::from([change])).await.unwrap()
            })
        })
        .collect();
    let mut transitions = 0;
    for t in tasks {
        transitions += t.await.unwrap()[0].step.transitions.len();
    }
    assert_eq!(transitions, 1, "degraded once");
    let health = store.endpoint_health().await.unwrap();
    assert_eq!(health[0].1.consecutive_failures, 5);
    assert_eq!(health[0].1.state, EndpointState::Degraded);
    assert_eq!(store.endpoint_history("e", 10).await.unwrap().len(), 1);
}

/// An endpoint with a signing secret, a credential header and a secret being rotated out.
fn endpoint_with_secrets() -> ApiEndpointRow {
    ApiEndpointRow {
        name: "billing".into(),
        tenant: None,
        spec: r#"{"url":"https://example.com/hook","secret":"whsec_cGcgc2VjcmV0","headers":{"authorization":"Bearer pg_live_5678"}}"#.into(),
        uid: None,
        retiring: Some(("whsec_cGcgb2xk".into(), Timestamp::from_millis(5))),
        version: 1,
        created_at: Timestamp::from_millis(1),
        updated_at: Timestamp::from_millis(1),
    }
}

/// The schema as `pg_dump` writes it: what a stolen dump holds.
fn pg_dump(db: &TestDb) -> String {
    let out = std::process::Command::new("pg_dump")
        .arg(format!("--schema={}", db.name))
        .arg(&db.admin)
        .output()
        .expect("pg_dump runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // Without the random token newer dumps fence their content with.
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|line| !line.starts_with("\\restrict") && !line.starts_with("\\unrestrict"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// A dump shows none of the secrets; a node with another key refuses to start, says which key
/// the database has, and writes nothing; the right key reads the rows as they were written.
#[tokio::test]
async fn a_dump_holds_no_secret_and_a_node_with_another_key_is_refused() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    store
        .save_api_endpoint(endpoint_with_secrets(), None)
        .await
        .unwrap();
    store
        .save_idempotency(IdempotencyRecord {
            scope: "s".into(),
            key: "k".into(),
            request_hash: vec![1; 32],
            status: 200,
            response: Bytes::from_static(br#"{"token":"portal_cGcgdG9rZW4"}"#),
            created_at: Timestamp::from_millis(2),
        })
        .await
        .unwrap();
    store.close().await;

    let dump = pg_dump(&db);
    assert!(dump.contains("sealed:v1:"), "the rows are in the dump, sealed");
    for secret in [
        "cGcgc2VjcmV0",
        "pg_live_5678",
        "cGcgb2xk",
        "cGcgdG9rZW4",
        "example.com",
    ] {
        assert!(!dump.contains(secret), "`{secret}` is in the dump");
    }

    let other = Sealer::new(crate::store::EncryptionKey::generate(), Vec::new());
    let Err(e) = PgStore::open(&db.url, &Metrics::new(), "node-b", other.clone()).await else {
        panic!("a node with another key started")
    };
    let e = e.to_string();
    assert!(e.contains(&test_sealer().current_id().to_string()), "{e}");
    assert!(e.contains(&other.current_id().to_string()), "{e}");
    assert!(pg_dump(&db) == dump, "the refused node wrote nothing");

    let store = node_a(&db).await;
    assert_eq!(
        crate::store::every_api_endpoint(&store).await,
        vec![endpoint_with_secrets()]
    );
    store.close().await;
}

/// A database from before encryption is sealed by the first node that starts with a key.
#[tokio::test]
async fn a_database_that_kept_secrets_in_the_clear_is_sealed_by_the_first_node_with_a_key() {
    let Some(db) = TestDb::create().await else { return };
    let store = node_a(&db).await;
    store.close().await;
    let spec = endpoint_with_secrets().spec;
    admin_client(&db.url)
        .await
        .batch_execute(&format!(
            "DROP TABLE encryption; DROP INDEX attempts_failed_by_time;
             DROP INDEX deliveries_dead; DROP INDEX deliveries_settled;
             DROP INDEX deliveries_pending;
             CREATE INDEX deliveries_pending ON deliveries (endpoint, next_attempt_at) WHERE status = 'pending';
             CREATE INDEX deliveries_by_status ON deliveries (status, id);
             CREATE INDEX deliveries_by_update ON deliveries (updated_at);
             DROP INDEX api_endpoints_by_uid; DROP INDEX api_endpoints_by_tenant;
             ALTER TABLE api_endpoints DROP COLUMN uid, DROP COLUMN version;
             UPDATE hookgate_schema SET version = 8;
             INSERT INTO api_endpoints (name, tenant, spec, retiring_secret, retiring_until, created_at, updated_at)
             VALUES ('billing', NULL, '{spec}', 'whsec_cGcgb2xk', 5, 1, 1)"
        ))
        .await
        .unwrap();
    assert!(
        pg_dump(&db).contains("pg_live_5678"),
        "the old database kept it in the clear"
    );

    let store = node_a(&db).await;
    assert_eq!(
        crate::store::every_api_endpoint(&store).await,
        vec![endpoint_with_secrets()]
    );
    store.close().await;
    let dump = pg_dump(&db);
    assert!(
        !dump.contains("pg_live_5678") && !dump.contains("cGcgb2xk"),
        "sealed on the first start"
    );
}
