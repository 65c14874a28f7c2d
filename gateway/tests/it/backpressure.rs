//! A saturated writer: ingestion must refuse at once with 503 `overloaded` and `Retry-After`
//! (the writer's queue is bounded, so memory is too), and everything it did accept must still
//! be delivered. The writer is stalled for real: another connection holds SQLite's write lock,
//! so the writer's current job waits on it, and the queue (one slot here) fills up.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{START, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(20);
const REQUESTS: usize = 10;

#[tokio::test]
async fn a_stalled_writer_turns_ingestion_into_503_and_delivers_all_it_accepted() {
    let sink = Sink::start().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let db = dir.path().join("hookgate.db");
    let yaml = format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    );
    let gw = TestGateway::start_with(dir, &yaml, hookgate::clock::ManualClock::new(START), |o| {
        o.store_options = Some(hookgate::store::SqliteOptions {
            write_queue: 1,
            max_batch: 1,
            ..hookgate::store::SqliteOptions::new(&db)
        });
    })
    .await;
    let gw = Arc::new(gw);

    // Take the write lock; the writer's next job waits on it (busy timeout: 5 s).
    let lock = rusqlite::Connection::open(&db).unwrap();
    lock.busy_timeout(Duration::from_secs(5)).unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();

    let (tx, mut answers) = tokio::sync::mpsc::unbounded_channel::<(String, u16, Value, Option<String>)>();
    for i in 0..REQUESTS {
        let (gw, tx) = (gw.clone(), tx.clone());
        tokio::spawn(async move {
            let id = format!("b{i}");
            let (status, body, retry_after) = gw
                .post_with_retry_after(
                    "/v1/topics/t/events",
                    json!({"type": "x", "id": id, "payload": {"i": i}}),
                )
                .await;
            let _ = tx.send((id, status, body, retry_after));
        });
    }
    drop(tx);

    // One job in the writer and one in the queue can wait; every other request is refused at
    // once, while the lock is still held.
    let mut refused = Vec::new();
    while refused.len() < REQUESTS - 2 {
        let (id, status, body, retry_after) = tokio::time::timeout(Duration::from_secs(4), answers.recv())
            .await
            .expect("refusals come at once, not after the writer")
            .unwrap();
        assert_eq!(status, 503, "{id} answered while the writer was stalled: {body}");
        assert_eq!(body["error"]["code"], "overloaded", "{body}");
        assert_eq!(retry_after.as_deref(), Some("1"));
        refused.push(id);
    }
    lock.execute_batch("ROLLBACK").unwrap();

    let mut accepted = Vec::new();
    while let Some((id, status, body, _)) = answers.recv().await {
        assert!(status == 202 || status == 503, "{id}: {status} {body}");
        if status == 202 {
            accepted.push(id);
        } else {
            refused.push(id);
        }
    }
    // The requests that waited in the queue are answered once the writer runs: committed, or
    // refused as well if other writes (the retention purge, outcomes) held the slots. Either
    // way every request got an answer and nothing refused was written.
    assert_eq!(accepted.len() + refused.len(), REQUESTS);

    // What was accepted is delivered; what was refused left nothing behind.
    sink.wait_for(accepted.len(), WAIT).await;
    for id in &refused {
        let (status, _) = gw.get(&format!("/v1/events/{id}")).await;
        assert_eq!(status, 404, "{id} was refused but exists");
    }
    // A refused request sent again goes through. With one queue slot the writer is still busy
    // now and then (with the deliveries' outcomes), so a client retries while it gets 503.
    for id in &refused {
        let deadline = tokio::time::Instant::now() + WAIT;
        loop {
            let (status, body) = gw
                .post(
                    "/v1/topics/t/events",
                    json!({"type": "x", "id": id, "payload": {}}),
                )
                .await;
            if status == 202 {
                break;
            }
            assert_eq!(
                (status, body["error"]["code"].as_str()),
                (503, Some("overloaded")),
                "{id}: {body}"
            );
            assert!(tokio::time::Instant::now() < deadline, "{id} was never accepted");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let received = sink.wait_for(REQUESTS, WAIT).await;
    let mut ids: Vec<&str> = received.iter().map(|r| r.header("webhook-id")).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), REQUESTS, "every event delivered, none twice");
}
