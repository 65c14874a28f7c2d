//! A database that cannot be written: `storage.max_size` reached (SQLite's `max_page_count`,
//! the way a full disk looks to the gateway). Ingestion must answer 503 `storage_unavailable`
//! and never 202, keep everything it acknowledged, leave a sound database, and work again
//! once the cap is raised by a reload, without a restart.

use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Reply, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(20);

/// The whole config file (the test harness's base has no `storage.max_size`).
fn config_text(dir: &Path, max_size: &str, rest: &str) -> String {
    format!(
        "storage:\n  path: {d}/hookgate.db\n  max_size: {max_size}\nplugins:\n  dir: {d}/plugins\n  bundled: false\n\
         delivery:\n  allow_networks: [127.0.0.0/8]\n  timeout: 2s\n{rest}",
        d = dir.display()
    )
}

/// Starts a gateway whose database may grow to `max_bytes`.
async fn start_capped(rest: &str, max_bytes: u64) -> TestGateway {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    TestGateway::start_with(
        dir,
        rest,
        hookgate::clock::ManualClock::new(crate::support::START),
        |o| {
            o.config.storage.max_size_bytes = Some(max_bytes);
        },
    )
    .await
}

/// Raises (or sets) the cap the way an operator does: edit the file, reload.
async fn reload_with_cap(gw: &TestGateway, max_size: &str, rest: &str) {
    std::fs::write(gw.config_path(), config_text(gw.dir.path(), max_size, rest)).unwrap();
    gw.reloader().reload_from_file().await;
}

fn integrity_check(db: &Path) -> String {
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap()
}

/// Posts one event with its own id; the status, the body and the `Retry-After` header.
async fn post_event(gw: &TestGateway, id: &str) -> (u16, Value, Option<String>) {
    gw.post_with_retry_after(
        "/v1/topics/t/events",
        json!({"type": "x", "id": id, "payload": {"filler": "f".repeat(3000)}}),
    )
    .await
}

/// Ingests 3 KB events until the store refuses one; the ids it accepted, and the refused one.
async fn fill(gw: &TestGateway) -> (Vec<String>, String) {
    let mut accepted = Vec::new();
    for i in 0..1000 {
        let id = format!("e{i}");
        let (status, body, retry_after) = post_event(gw, &id).await;
        match status {
            202 => accepted.push(id),
            503 => {
                assert_eq!(body["error"]["code"], "storage_unavailable", "{body}");
                assert!(
                    retry_after.is_some_and(|s| s.parse::<u64>().unwrap() >= 1),
                    "a 503 carries Retry-After"
                );
                return (accepted, id);
            }
            other => panic!("event {id}: {other} {body}"),
        }
    }
    panic!("the size cap never took effect");
}

fn webhook_ids(sink: &Sink) -> Vec<String> {
    sink.received()
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect()
}

#[tokio::test]
async fn a_full_store_refuses_with_503_loses_nothing_and_recovers_when_the_cap_is_raised() {
    let sink = Sink::start().await;
    let rest = format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    );
    let mut gw = start_capped(&rest, 256 * 1024).await;
    let db = gw.dir.path().join("hookgate.db");

    let (accepted, refused) = fill(&gw).await;
    assert!(accepted.len() >= 10, "only {} events fit", accepted.len());
    // Not ready while full (a load balancer stops sending), yet alive.
    let (status, body) = gw.get("/readyz").await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (503, Some("storage_unavailable")),
        "{body}"
    );
    assert_eq!(gw.get("/healthz").await.0, 200);

    // Still full: every further write is refused whole, a batch included. (The batch is large:
    // deliveries finishing meanwhile may free a page or two of the index they leave.)
    let (status, body) = gw
        .post(
            "/v1/topics/t/events/batch",
            json!({"events": [{"type": "x", "id": "batch-1", "payload": {"filler": "f".repeat(64 * 1024)}},
                              {"type": "x", "id": "batch-2", "payload": 2}]}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (503, Some("storage_unavailable")),
        "{body}"
    );
    for id in [refused.as_str(), "batch-1", "batch-2"] {
        let (status, _) = gw.get(&format!("/v1/events/{id}")).await;
        assert_eq!(status, 404, "{id} was refused, so it must not exist");
    }

    // Everything acknowledged is delivered, and the database is sound.
    sink.wait_for(accepted.len(), WAIT).await;
    let delivered: HashSet<String> = webhook_ids(&sink).into_iter().collect();
    for id in &accepted {
        assert!(delivered.contains(id), "{id} was acknowledged but not delivered");
    }
    assert!(!delivered.contains(&refused));
    assert_eq!(integrity_check(&db), "ok");

    // Room again, without a restart: ready again (the probe's write fits), and the refused
    // event is taken now.
    reload_with_cap(&gw, "4MiB", &rest).await;
    gw.wait_until("/readyz", WAIT, |r| r["status"] == "ready").await;
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, body, _) = post_event(&gw, &refused).await;
        if status == 202 {
            break;
        }
        assert_eq!(status, 503, "{body}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "ingestion did not recover"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for i in 0..20 {
        assert_eq!(post_event(&gw, &format!("after{i}")).await.0, 202);
    }
    sink.wait_for(accepted.len() + 21, WAIT).await;
    assert!(webhook_ids(&sink).contains(&refused));

    gw.stop().await;
    assert_eq!(integrity_check(&db), "ok");
    // A restart finds every acknowledged event.
    let gw = TestGateway::start_in(gw.dir.clone(), &rest, gw.clock.clone()).await;
    for id in accepted.iter().chain([&refused]) {
        let (status, body) = gw.get(&format!("/v1/events/{id}")).await;
        assert_eq!(status, 200, "{id}: {body}");
    }
}

#[tokio::test]
async fn outcomes_that_a_full_store_refused_are_recorded_once_it_has_room() {
    let sink = Sink::start().await;
    sink.always(Reply::status(500));
    let rest = format!(
        "policies:\n  quick:\n    schedule: [0s, 10s]\n    deadline: 1h\n    jitter: 0\n\
         topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: quick\n",
        sink.url("/")
    );
    let gw = start_capped(&rest, 512 * 1024).await;
    let db = gw.dir.path().join("hookgate.db");

    // Fill the store; every delivery's first attempt fails.
    let (accepted, _) = fill(&gw).await;
    let n = accepted.len();
    sink.wait_for(n, WAIT).await;
    // The last first outcomes may have found the store full too: a little room until all are
    // recorded, then the cap again, which holds the store at its size. (Whether they fit in
    // the last pages' slack depended on the size of an attempt row.)
    reload_with_cap(&gw, "640KiB", &rest).await;
    gw.wait_until("/v1/deliveries?status=pending&limit=1000", WAIT, |l| {
        let pending = l["deliveries"].as_array().unwrap();
        pending.len() == n && pending.iter().all(|d| d["attempt_count"] == 1)
    })
    .await;
    reload_with_cap(&gw, "512KiB", &rest).await;

    // The second attempts succeed, but their outcomes (an attempt row each) no longer fit.
    sink.always(Reply::status(200));
    gw.advance(Duration::from_secs(11)).await;
    sink.wait_for(2 * n, WAIT).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    while !crate::support::captured_logs().contains("could not record delivery outcomes; keeping them") {
        assert!(tokio::time::Instant::now() < deadline, "no outcome write failed");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (_, on_disk) = gw.get("/v1/deliveries?status=succeeded&limit=1000").await;
    assert!(
        on_disk["deliveries"].as_array().unwrap().len() < n,
        "the store was full, yet every outcome was recorded"
    );

    // Room again: the kept outcomes reach the disk, in order, without a restart.
    reload_with_cap(&gw, "8MiB", &rest).await;
    gw.wait_until("/v1/deliveries?status=succeeded&limit=1000", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == n
    })
    .await;
    let (_, pending) = gw.get("/v1/deliveries?status=pending&limit=1000").await;
    assert!(pending["deliveries"].as_array().unwrap().is_empty(), "{pending}");
    // Nothing was sent twice meanwhile.
    assert_eq!(sink.count(), 2 * n);
    assert_eq!(integrity_check(&db), "ok");
}
