//! The recovery calls of the README's "Endpoint health" and "Recovering missed events" that act on
//! deliveries and endpoints one by one: the test call, redeliver, and redrive of dead deliveries.

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Probe, WAIT, deliveries_of, endpoint, wait_failures, wait_state};
use crate::support::{Reply, Sink, TestGateway};

/// Endpoint `e` on topic `t`: two attempts one second apart, and health rules low enough that
/// one failure degrades it and an hour of failing pauses it.
fn config(sink: &Sink, probe: &Probe, endpoint_extra: &str) -> String {
    format!(
        "health:\n  degrade_after_failures: 1\n  pause_min_failures: 1\n  pause_after: 1h\n  disable_after: 1d\n\
         policies:\n  twice:\n    schedule: [0s, 1s]\n    jitter: 0\n\
         topics:\n  t: {{}}\n{}endpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: twice\n{endpoint_extra}{}",
        probe.topic_yaml(),
        sink.url("/hook"),
        probe.endpoint_yaml()
    )
}

fn health_fields(e: &Value) -> Value {
    json!([
        e["state"],
        e["consecutive_failures"],
        e["failing_since"],
        e["last_success_at"],
        e["state_changed_at"],
        e["history"]
    ])
}

#[tokio::test]
async fn the_test_call_answers_the_outcome_and_changes_no_state_or_counter() {
    let sink = Sink::start().await;
    let probe = Probe::start().await;
    // The standard health rules: 5 failures degrade.
    let yaml = format!(
        "topics:\n  t: {{}}\n{}endpoints:\n  e:\n    url: {}\n    topics: [t]\n{}",
        probe.topic_yaml(),
        sink.url("/hook"),
        probe.endpoint_yaml()
    );
    let gw = TestGateway::start(&yaml).await;
    sink.script(std::iter::repeat_n(Reply::status(500), 5));
    for _ in 0..5 {
        gw.ingest("t", "order.created", json!({})).await;
    }
    wait_state(&gw, "e", "degraded").await;
    let before = health_fields(&endpoint(&gw, "e").await);

    sink.script([Reply::status(500), Reply::status(204)]);
    let (status, outcome) = gw.post("/v1/endpoints/e/test", json!({})).await;
    assert_eq!(
        status, 200,
        "a refused test is still a successful call: {outcome}"
    );
    assert_eq!(outcome["delivered"], false);
    assert_eq!(outcome["status_code"], 500);
    assert_eq!(outcome["error_kind"], "http_status");
    let test_request = sink.wait_for(6, WAIT).await.pop().unwrap();
    assert_eq!(
        test_request.header("webhook-id"),
        outcome["event_id"].as_str().unwrap()
    );
    assert_eq!(test_request.header("hookgate-delivery-attempt"), "1");

    // A test the endpoint accepts does not recover it either.
    let (status, outcome) = gw
        .post(
            "/v1/endpoints/e/test",
            json!({"type": "ping", "payload": {"hello": 1}}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(outcome["delivered"], true);
    assert_eq!(outcome["status_code"], 204);
    assert_eq!(sink.wait_for(7, WAIT).await[6].json(), json!({"hello": 1}));

    probe.barrier(&gw).await;
    assert_eq!(health_fields(&endpoint(&gw, "e").await), before);
    // Test events are not in the event log and create no deliveries.
    assert_eq!(deliveries_of(&gw, "e").await.len(), 5);
    let (status, _) = gw
        .get(&format!("/v1/events/{}", outcome["event_id"].as_str().unwrap()))
        .await;
    assert_eq!(status, 404);

    let (status, body) = gw.post("/v1/endpoints/nope/test", json!({})).await;
    assert_eq!(status, 404);
    assert_eq!(body["error"]["code"], "endpoint_not_found");
}

#[tokio::test]
async fn redeliver_starts_a_new_round_with_a_fresh_attempt_counter() {
    let sink = Sink::start().await;
    sink.script([Reply::status(503), Reply::status(503)]);
    let probe = Probe::start().await;
    // Default health rules here: the two failures must not pause anything.
    let yaml = config(&sink, &probe, "").replacen(
        "health:\n  degrade_after_failures: 1\n  pause_min_failures: 1\n  pause_after: 1h\n  disable_after: 1d\n",
        "",
        1,
    );
    let gw = TestGateway::start(&yaml).await;
    let accepted = gw.ingest("t", "order.created", json!({"n": 1})).await;
    let event_id = accepted["id"].as_str().unwrap().to_owned();
    let id = deliveries_of(&gw, "e").await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/deliveries/{id}");

    gw.wait_until(&path, WAIT, |d| {
        d["attempt_count"] == 1 && d["status"] == "pending"
    })
    .await;
    gw.advance(Duration::from_secs(1)).await;
    let d = gw.wait_until(&path, WAIT, |d| d["status"] == "failed").await;
    assert_eq!(d["attempt_count"], 2);

    let (status, body) = gw.post(&format!("{path}/redeliver"), json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["round"], 2);
    assert_eq!(body["attempt_count"], 0);
    let d = gw.wait_until(&path, WAIT, |d| d["status"] == "succeeded").await;
    assert_eq!(d["attempt_count"], 1);
    let rounds: Vec<(u64, u64)> = d["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["round"].as_u64().unwrap(), a["n"].as_u64().unwrap()))
        .collect();
    assert_eq!(rounds, [(1, 1), (1, 2), (2, 1)]);
    let sent = sink.received();
    let numbers: Vec<&str> = sent
        .iter()
        .map(|r| r.header("hookgate-delivery-attempt"))
        .collect();
    assert_eq!(numbers, ["1", "2", "1"]);
    // The same webhook-id every time, so the receiver can deduplicate.
    assert!(sent.iter().all(|r| r.header("webhook-id") == event_id));

    let (status, body) = gw.post("/v1/deliveries/dlv_999999/redeliver", json!({})).await;
    assert_eq!(status, 404, "{body}");
}

/// Redeliver on a delivery that waits for its next retry attempts it now, in a new round, and
/// the waiting attempt of the old round never happens.
#[tokio::test]
async fn redeliver_of_a_waiting_delivery_attempts_it_now_and_cancels_the_waiting_attempt() {
    let sink = Sink::start().await;
    sink.script([Reply::status(503), Reply::status(503)]);
    let probe = Probe::start().await;
    let yaml = config(&sink, &probe, "")
        .replacen(
            "health:\n  degrade_after_failures: 1\n  pause_min_failures: 1\n  pause_after: 1h\n  disable_after: 1d\n",
            "",
            1,
        )
        .replace("schedule: [0s, 1s]", "schedule: [0s, 1h, 1h]");
    let gw = TestGateway::start(&yaml).await;
    gw.ingest("t", "order.created", json!({"n": 1})).await;
    let id = deliveries_of(&gw, "e").await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = format!("/v1/deliveries/{id}");
    gw.wait_until(&path, WAIT, |d| {
        d["attempt_count"] == 1 && d["status"] == "pending"
    })
    .await;

    // Waiting an hour for attempt 2; the operator does not want to wait.
    let (status, body) = gw.post(&format!("{path}/redeliver"), json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["round"], 2);
    // Round 2, attempt 1 runs now, without the clock moving, and fails (the second 503).
    let d = gw
        .wait_until(&path, WAIT, |d| d["round"] == 2 && d["attempt_count"] == 1)
        .await;
    assert_eq!(d["status"], "pending");
    // An hour on: exactly one attempt, round 2's second; the old round's waiting attempt is gone.
    gw.advance(Duration::from_secs(3600)).await;
    let d = gw.wait_until(&path, WAIT, |d| d["status"] == "succeeded").await;
    let rounds: Vec<(u64, u64)> = d["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a["round"].as_u64().unwrap(), a["n"].as_u64().unwrap()))
        .collect();
    assert_eq!(rounds, [(1, 1), (2, 1), (2, 2)]);
    gw.advance(Duration::from_secs(3 * 3600)).await;
    gw.settle().await;
    let numbers: Vec<String> = sink
        .received()
        .iter()
        .map(|r| r.header("hookgate-delivery-attempt").to_owned())
        .collect();
    assert_eq!(numbers, ["1", "1", "2"]);
}

#[tokio::test]
async fn redeliver_is_refused_while_the_endpoint_is_paused() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let probe = Probe::start().await;
    let gw = TestGateway::start(&config(&sink, &probe, "")).await;
    gw.ingest("t", "order.created", json!({})).await;
    let id = deliveries_of(&gw, "e").await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // The first attempt's failure is planned before the clock moves.
    gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| d["attempt_count"] == 1)
        .await;
    gw.advance(Duration::from_secs(1)).await;
    gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| d["status"] == "failed")
        .await;
    wait_failures(&gw, "e", 2).await;
    gw.advance(Duration::from_secs(3600)).await;
    wait_state(&gw, "e", "paused").await;

    let (status, body) = gw
        .post(&format!("/v1/deliveries/{id}/redeliver"), json!({}))
        .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(body["error"]["code"], "endpoint_not_active");
    let (_, d) = gw.get(&format!("/v1/deliveries/{id}")).await;
    assert_eq!(d["status"], "failed", "the refused call changed nothing");
    assert_eq!(d["round"], 1);

    // Once re-enabled, the same call works.
    sink.always(Reply::status(200));
    let (status, _) = gw.post("/v1/endpoints/e/reenable", json!({})).await;
    assert_eq!(status, 200);
    let (status, _) = gw
        .post(&format!("/v1/deliveries/{id}/redeliver"), json!({}))
        .await;
    assert_eq!(status, 202);
    gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
        d["status"] == "succeeded"
    })
    .await;
}

#[tokio::test]
async fn redrive_sends_dead_deliveries_again_each_from_attempt_one() {
    let sink = Sink::start().await;
    sink.always(Reply::status(500));
    let probe = Probe::start().await;
    let yaml = config(&sink, &probe, "    dead_letter: true\n").replacen(
        "health:\n  degrade_after_failures: 1\n  pause_min_failures: 1\n  pause_after: 1h\n  disable_after: 1d\n",
        "",
        1,
    );
    let gw = TestGateway::start(&yaml).await;
    for n in 0..3 {
        gw.ingest("t", "order.created", json!({"n": n})).await;
    }
    gw.wait_until("/v1/deliveries?endpoint=e", WAIT, |l| {
        l["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["attempt_count"] == 1 && d["status"] == "pending")
            .count()
            == 3
    })
    .await;
    gw.advance(Duration::from_secs(1)).await;
    gw.wait_until("/v1/deliveries?endpoint=e&status=dead", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 3
    })
    .await;
    assert_eq!(sink.count(), 6);

    sink.always(Reply::status(200));
    let (status, body) = gw.post("/v1/endpoints/e/redrive", json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["queued"], 3);
    let got = sink.wait_for(9, WAIT).await;
    assert!(
        got[6..]
            .iter()
            .all(|r| r.header("hookgate-delivery-attempt") == "1"),
        "a redrive restarts the attempt counter"
    );
    gw.wait_until("/v1/deliveries?endpoint=e&status=succeeded", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 3
    })
    .await;
    for d in deliveries_of(&gw, "e").await {
        assert_eq!(d["round"], 2, "{d}");
    }

    // Nothing dead is left: a second redrive queues nothing.
    let (status, body) = gw.post("/v1/endpoints/e/redrive", json!({})).await;
    assert_eq!((status, body["queued"].clone()), (202, json!(0)));
    probe.barrier(&gw).await;
    assert_eq!(sink.count(), 9);
}
