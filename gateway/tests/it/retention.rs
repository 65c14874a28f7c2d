//! Retention (README "Configuration", `retention`): the background purge, run every simulated
//! minute, removes finished deliveries with their attempts and events after 30 days and ingestion
//! idempotency keys after 24 hours, and never touches what is still pending.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Reply, START, Sink, TestGateway};
use crate::support::{WAIT, deliveries_of};

const MINUTE: Duration = Duration::from_secs(60);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

/// `ok` and `bad` take topic `t` (one attempt each; `bad` always fails); `waiting` takes topic
/// `slow` and retries after 60 days, so its delivery stays pending past the retention window.
async fn gateway() -> (TestGateway, Sink, Sink) {
    let good = Sink::start().await;
    let bad = Sink::start().await;
    bad.always(Reply::status(503));
    let gw = TestGateway::start(&format!(
        "policies:\n  once:\n    schedule: [0s]\n  later:\n    schedule: [0s, 60d]\n    jitter: 0\n\
         topics:\n  t: {{}}\n  slow: {{}}\n  quiet: {{}}\n\
         endpoints:\n  ok:\n    url: {}\n    topics: [t]\n    policy: once\n\
         \x20 bad:\n    url: {}\n    topics: [t]\n    policy: once\n\
         \x20 waiting:\n    url: {}\n    topics: [slow]\n    policy: later\n",
        good.url("/"),
        bad.url("/"),
        bad.url("/slow")
    ))
    .await;
    (gw, good, bad)
}

async fn post_with_key(gw: &TestGateway, key: &str, body: &Value) -> (u16, Value, bool) {
    post_to_with_key(gw, "t", key, body).await
}

async fn post_to_with_key(gw: &TestGateway, topic: &str, key: &str, body: &Value) -> (u16, Value, bool) {
    let response = gw
        .post_builder(&format!("/v1/topics/{topic}/events"))
        .header("idempotency-key", key)
        .json(body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    (status, response.json().await.unwrap(), replayed)
}

/// The event's deliveries once all of them have left `pending`.
async fn finished(gw: &TestGateway, event_id: &str) -> Vec<Value> {
    let event = gw
        .wait_until(&format!("/v1/events/{event_id}"), WAIT, |e| {
            e["deliveries"].as_array().is_some_and(|d| {
                d.len() == 2
                    && d.iter()
                        .all(|d| d["status"] != "pending" && d["status"] != "delivering")
            })
        })
        .await;
    event["deliveries"].as_array().unwrap().clone()
}

/// Leaves a mark for [`wait_purge_ran`]: an idempotency key on topic `quiet`, which no endpoint
/// takes.
async fn mark(gw: &TestGateway, key: &str) {
    let (status, _, replayed) =
        post_to_with_key(gw, "quiet", key, &json!({"type": "mark", "payload": {}})).await;
    assert_eq!((status, replayed), (202, false));
}

/// Returns once a purge has run at the current (manual) time, which must be more than 24 h
/// after the [`mark`]: the purge forgets the mark's key, which is all the outside can see of
/// a purge that removes nothing else.
async fn wait_purge_ran(gw: &TestGateway, key: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, _, replayed) =
            post_to_with_key(gw, "quiet", key, &json!({"type": "mark", "payload": {}})).await;
        assert_eq!(status, 202);
        if !replayed {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "no purge ran");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn wait_gone(gw: &TestGateway, path: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let (status, body) = gw.get(path).await;
        if status == 404 {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{path} was not purged: {body}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn idempotency_keys_are_forgotten_after_24_hours() {
    let (gw, good, _bad) = gateway().await;
    let body = json!({"type": "order.created", "payload": {"n": 1}});
    let (status, first, _) = post_with_key(&gw, "k-1", &body).await;
    assert_eq!(status, 202);
    good.wait_for(1, WAIT).await;

    gw.advance(23 * HOUR).await;
    let (status, again, replayed) = post_with_key(&gw, "k-1", &body).await;
    assert_eq!((status, replayed), (202, true));
    assert_eq!(again, first);

    // Past 24 h the purge (every simulated minute) drops the key: the same request is new.
    gw.advance(HOUR + MINUTE).await;
    let deadline = tokio::time::Instant::now() + WAIT;
    let fresh = loop {
        let (status, answer, replayed) = post_with_key(&gw, "k-1", &body).await;
        assert_eq!(status, 202, "{answer}");
        if !replayed {
            break answer;
        }
        assert!(tokio::time::Instant::now() < deadline, "the key was not purged");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_ne!(fresh["id"], first["id"]);
    good.wait_for(2, WAIT).await;
}

#[tokio::test]
async fn after_30_days_finished_deliveries_and_their_events_go_and_pending_ones_stay() {
    let (gw, good, bad) = gateway().await;
    let old = gw.ingest("t", "order.created", json!({"n": "old"})).await;
    let old_id = old["id"].as_str().unwrap().to_owned();
    let waiting = gw.ingest("slow", "order.created", json!({"n": "waiting"})).await;
    let waiting_id = waiting["id"].as_str().unwrap().to_owned();
    let old_deliveries = finished(&gw, &old_id).await;
    let statuses: Vec<&str> = {
        let mut s: Vec<&str> = old_deliveries
            .iter()
            .map(|d| d["status"].as_str().unwrap())
            .collect();
        s.sort();
        s
    };
    assert_eq!(statuses, ["failed", "succeeded"]);
    gw.wait_until("/v1/deliveries?endpoint=waiting", WAIT, |l| {
        l["deliveries"][0]["attempt_count"] == 1 && l["deliveries"][0]["status"] == "pending"
    })
    .await;

    // Finished ten days later: kept until day 40.
    gw.advance(10 * DAY).await;
    let recent = gw.ingest("t", "order.created", json!({"n": "recent"})).await;
    let recent_id = recent["id"].as_str().unwrap().to_owned();
    finished(&gw, &recent_id).await;
    good.wait_for(2, WAIT).await;

    // One minute short of 30 days nothing goes.
    mark(&gw, "mark-1").await;
    gw.advance_to(START.plus(30 * DAY).minus(MINUTE)).await;
    wait_purge_ran(&gw, "mark-1").await;
    let (status, _) = gw.get(&format!("/v1/events/{old_id}")).await;
    assert_eq!(status, 200);
    for d in &old_deliveries {
        let (status, _) = gw
            .get(&format!("/v1/deliveries/{}", d["id"].as_str().unwrap()))
            .await;
        assert_eq!(status, 200, "{d}");
    }

    gw.advance_to(START.plus(30 * DAY).plus(MINUTE)).await;
    wait_gone(&gw, &format!("/v1/events/{old_id}")).await;
    for d in &old_deliveries {
        let (status, _) = gw
            .get(&format!("/v1/deliveries/{}", d["id"].as_str().unwrap()))
            .await;
        assert_eq!(status, 404, "{d}");
    }
    // The pending delivery and its (just as old) event stay.
    let (status, event) = gw.get(&format!("/v1/events/{waiting_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(event["deliveries"][0]["status"], "pending");
    let (status, event) = gw.get(&format!("/v1/events/{recent_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(event["deliveries"].as_array().unwrap().len(), 2);
    assert_eq!(deliveries_of(&gw, "ok").await.len(), 1);

    // Ten days later the purge, still running every minute, takes the recent ones too.
    gw.advance_to(START.plus(40 * DAY).plus(MINUTE)).await;
    wait_gone(&gw, &format!("/v1/events/{recent_id}")).await;
    assert!(deliveries_of(&gw, "ok").await.is_empty());
    assert!(deliveries_of(&gw, "bad").await.is_empty());
    let (status, event) = gw.get(&format!("/v1/events/{waiting_id}")).await;
    assert_eq!(status, 200);
    assert_eq!(event["deliveries"][0]["status"], "pending");
    assert_eq!(bad.count(), 3, "no attempt was touched by the purge");
}
