//! Dead letters: with `dead_letter: true` a delivery that exhausts its policy or
//! fails permanently is kept as `dead` (without it: `failed`), listed by
//! `GET /v1/deliveries?status=dead`, and sent again by redeliver and redrive with a fresh
//! attempt counter.

use std::time::Duration;

use hookgate::model::Timestamp;
use serde_json::{Value, json};

use crate::support::{Reply, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(10);

/// Two attempts one second apart, only 5xx/429/timeouts/connection errors retried.
const POLICY: &str = "policies:\n  twice:\n    schedule: [0s, 1s]\n    jitter: 0\n    retry_on: sns\n";

fn endpoint(name: &str, sink: &Sink, dead_letter: bool) -> String {
    format!(
        "  {name}:\n    url: {}\n    topics: [t]\n    policy: twice\n    dead_letter: {dead_letter}\n",
        sink.url(&format!("/{name}"))
    )
}

fn time(v: &Value) -> Timestamp {
    Timestamp::parse_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}"))).unwrap()
}

/// The ids of the deliveries the log lists for this query, newest first.
async fn listed(gw: &TestGateway, query: &str) -> Vec<String> {
    let (status, list) = gw.get(&format!("/v1/deliveries?{query}")).await;
    assert_eq!(status, 200, "{list}");
    list["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .collect()
}

async fn only_delivery_of(gw: &TestGateway, endpoint: &str) -> String {
    let ids = listed(gw, &format!("endpoint={endpoint}")).await;
    assert_eq!(ids.len(), 1, "{endpoint}: {ids:?}");
    ids[0].clone()
}

async fn wait_status(gw: &TestGateway, id: &str, status: &str) -> Value {
    gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| d["status"] == status)
        .await
}

/// Ingests one event and drives the clock through the `twice` policy: the first attempt now,
/// the second one second later, once the first is recorded.
async fn ingest_and_run_the_policy(gw: &TestGateway, endpoints: &[&str]) {
    gw.ingest("t", "x", json!({"n": 1})).await;
    for endpoint in endpoints {
        let id = only_delivery_of(gw, endpoint).await;
        gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
            d["attempt_count"] == 1 && d["status"] != "delivering"
        })
        .await;
    }
    gw.advance(Duration::from_secs(1)).await;
}

#[tokio::test]
async fn exhausted_and_permanent_failures_are_dead_with_dead_letter_and_failed_without() {
    let unavailable = Sink::start().await;
    unavailable.always(Reply::status(503));
    let not_found = Sink::start().await;
    not_found.always(Reply::status(404));
    let gw = TestGateway::start(&format!(
        "{POLICY}topics:\n  t: {{}}\nendpoints:\n{}{}{}{}",
        endpoint("dl-exhausted", &unavailable, true),
        endpoint("dl-permanent", &not_found, true),
        endpoint("exhausted", &unavailable, false),
        endpoint("permanent", &not_found, false),
    ))
    .await;
    ingest_and_run_the_policy(&gw, &["dl-exhausted", "exhausted"]).await;

    let cases = [
        ("dl-exhausted", "dead", 2, "exhausted: http_status"),
        ("dl-permanent", "dead", 1, "permanent"),
        ("exhausted", "failed", 2, "exhausted: http_status"),
        ("permanent", "failed", 1, "permanent"),
    ];
    let mut dead = Vec::new();
    let mut failed = Vec::new();
    for (endpoint, status, attempts, error) in cases {
        let id = only_delivery_of(&gw, endpoint).await;
        let d = wait_status(&gw, &id, status).await;
        assert_eq!(d["attempt_count"], attempts, "{endpoint}: {d}");
        assert!(
            d["last_error"].as_str().unwrap().starts_with(error),
            "{endpoint}: {d}"
        );
        assert_eq!(d["next_attempt_at"], Value::Null, "{endpoint}: {d}");
        if status == "dead" { &mut dead } else { &mut failed }.push(id);
    }
    assert_eq!(unavailable.count(), 4);
    assert_eq!(not_found.count(), 2);

    let mut listed_dead = listed(&gw, "status=dead").await;
    listed_dead.sort();
    dead.sort();
    assert_eq!(listed_dead, dead);
    let mut listed_failed = listed(&gw, "status=failed").await;
    listed_failed.sort();
    failed.sort();
    assert_eq!(listed_failed, failed);
    assert_eq!(
        listed(&gw, "status=dead&endpoint=dl-permanent").await,
        [only_delivery_of(&gw, "dl-permanent").await]
    );
    // A dead delivery is final: the clock moving on changes nothing.
    gw.advance(Duration::from_secs(3600)).await;
    assert_eq!(listed(&gw, "status=dead").await.len(), 2);
    assert_eq!(unavailable.count(), 4);
}

#[tokio::test]
async fn redeliver_sends_a_dead_delivery_again_with_a_fresh_attempt_counter() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let gw = TestGateway::start(&format!(
        "{POLICY}topics:\n  t: {{}}\nendpoints:\n{}",
        endpoint("e", &sink, true)
    ))
    .await;
    ingest_and_run_the_policy(&gw, &["e"]).await;
    let id = only_delivery_of(&gw, "e").await;
    let d = wait_status(&gw, &id, "dead").await;
    assert_eq!(d["round"], 1);
    assert_eq!(d["attempt_count"], 2);

    // The receiver is fixed; an operator redelivers.
    sink.always(Reply::status(200));
    let (status, body) = gw
        .post(&format!("/v1/deliveries/{id}/redeliver"), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["id"], id.as_str());
    assert_eq!(body["round"], 2);
    let d = wait_status(&gw, &id, "succeeded").await;
    assert_eq!(d["attempt_count"], 1);
    assert_eq!(d["round"], 2);
    assert_eq!(d["last_error"], Value::Null);
    // The log keeps both rounds: two failed attempts, then attempt 1 of round 2 at once.
    let attempts = d["attempts"].as_array().unwrap();
    let rounds: Vec<(u64, u64)> = attempts
        .iter()
        .map(|a| (a["round"].as_u64().unwrap(), a["n"].as_u64().unwrap()))
        .collect();
    assert_eq!(rounds, [(1, 1), (1, 2), (2, 1)]);
    assert_eq!(time(&attempts[2]["started_at"]), gw.now());

    let received = sink.wait_for(3, WAIT).await;
    let numbers: Vec<&str> = received
        .iter()
        .map(|r| r.header("hookgate-delivery-attempt"))
        .collect();
    assert_eq!(numbers, ["1", "2", "1"]);
    // The same event id, so the receiver can deduplicate.
    assert!(
        received
            .iter()
            .all(|r| r.header("webhook-id") == d["event_id"].as_str().unwrap())
    );
    assert!(listed(&gw, "status=dead").await.is_empty());
}

#[tokio::test]
async fn redrive_sends_every_dead_delivery_of_the_endpoint_again() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let other = Sink::start().await;
    other.always(Reply::status(404));
    let gw = TestGateway::start(&format!(
        "{POLICY}topics:\n  t: {{}}\nendpoints:\n{}{}",
        endpoint("e", &sink, true),
        endpoint("other", &other, true)
    ))
    .await;
    for n in 0..3 {
        gw.ingest("t", "x", json!({ "n": n })).await;
    }
    let ids = listed(&gw, "endpoint=e").await;
    assert_eq!(ids.len(), 3);
    for id in &ids {
        gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
            d["attempt_count"] == 1 && d["status"] == "pending"
        })
        .await;
    }
    gw.advance(Duration::from_secs(1)).await;
    for id in &ids {
        wait_status(&gw, id, "dead").await;
    }
    for id in listed(&gw, "endpoint=other").await {
        wait_status(&gw, &id, "dead").await;
    }
    assert_eq!(listed(&gw, "endpoint=other&status=dead").await.len(), 3);
    assert_eq!(sink.count(), 6);

    // Redriven while the receiver still fails: every delivery runs the whole policy again,
    // counting from 1, and ends dead again.
    let (status, body) = gw.post("/v1/endpoints/e/redrive", json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["queued"], 3);
    for id in &ids {
        gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
            d["round"] == 2 && d["attempt_count"] == 1 && d["status"] == "pending"
        })
        .await;
    }
    gw.advance(Duration::from_secs(1)).await;
    for id in &ids {
        let d = wait_status(&gw, id, "dead").await;
        assert_eq!(
            (d["round"].as_u64(), d["attempt_count"].as_u64()),
            (Some(2), Some(2))
        );
    }
    let numbers: Vec<String> = sink.received()[6..]
        .iter()
        .map(|r| r.header("hookgate-delivery-attempt").to_owned())
        .collect();
    assert_eq!(numbers, ["1", "1", "1", "2", "2", "2"]);

    // Redriven once the receiver is back: all three arrive, and nothing is dead any more.
    sink.always(Reply::status(204));
    let (status, body) = gw.post("/v1/endpoints/e/redrive", json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["queued"], 3);
    for id in &ids {
        let d = wait_status(&gw, id, "succeeded").await;
        assert_eq!(
            (d["round"].as_u64(), d["attempt_count"].as_u64()),
            (Some(3), Some(1))
        );
    }
    assert_eq!(sink.count(), 15);
    let mut payloads: Vec<i64> = sink.received()[12..]
        .iter()
        .map(|r| r.json()["n"].as_i64().unwrap())
        .collect();
    payloads.sort();
    assert_eq!(payloads, [0, 1, 2]);
    assert!(listed(&gw, "endpoint=e&status=dead").await.is_empty());
    // Redrive is per endpoint: the other endpoint's dead letters stay where they are.
    assert_eq!(listed(&gw, "endpoint=other&status=dead").await.len(), 3);
    assert_eq!(other.count(), 3);

    // Nothing dead: nothing to do.
    let (status, body) = gw.post("/v1/endpoints/e/redrive", json!({})).await;
    assert_eq!((status, body["queued"].as_u64()), (202, Some(0)));
    let (status, body) = gw.post("/v1/endpoints/nope/redrive", json!({})).await;
    assert_eq!(status, 404, "{body}");
}

#[tokio::test]
async fn a_410_dead_letters_the_delivery_and_redrive_waits_for_the_endpoint_to_be_reenabled() {
    let sink = Sink::start().await;
    sink.always(Reply::status(410));
    let gw = TestGateway::start(&format!(
        "{POLICY}topics:\n  t: {{}}\nendpoints:\n{}",
        endpoint("e", &sink, true)
    ))
    .await;
    gw.ingest("t", "x", json!({})).await;
    let id = only_delivery_of(&gw, "e").await;
    let d = wait_status(&gw, &id, "dead").await;
    assert_eq!(d["last_error"], "gone");
    let (_, ep) = gw.get("/v1/endpoints/e").await;
    assert_eq!(ep["state"], "disabled", "{ep}");

    // A disabled endpoint gets nothing, dead letters included.
    let (status, body) = gw.post("/v1/endpoints/e/redrive", json!({})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "endpoint_not_active");
    let (status, body) = gw
        .post(&format!("/v1/deliveries/{id}/redeliver"), json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(listed(&gw, "status=dead").await, std::slice::from_ref(&id));

    sink.always(Reply::status(200));
    let (status, body) = gw.post("/v1/endpoints/e/reenable", json!({})).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = gw.post("/v1/endpoints/e/redrive", json!({})).await;
    assert_eq!((status, body["queued"].as_u64()), (202, Some(1)), "{body}");
    let d = wait_status(&gw, &id, "succeeded").await;
    assert_eq!(
        (d["round"].as_u64(), d["attempt_count"].as_u64()),
        (Some(2), Some(1))
    );
    assert_eq!(sink.count(), 2);
}
