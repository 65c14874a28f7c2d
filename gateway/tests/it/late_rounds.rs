//! A new round gets the whole policy: redeliver, redrive, re-enable with `replay_since` and
//! replay each start the policy afresh, its deadline counted from the round's start — so an
//! event older than the deadline, whose receiver fails once more and then recovers, is
//! delivered on the second attempt of its new round instead of giving up after one.
//!
//! The real binary under `--time-scale 43200` (one real second is twelve simulated hours):
//! the standard policy's 72 hours pass in six seconds.

use std::time::Duration;

use serde_json::{Value, json};

use crate::binary::RealGateway;
use crate::support::{Reply, Sink};

const WAIT: Duration = Duration::from_secs(30);
const DEADLINE_MS: i64 = 72 * 3600 * 1000;

fn endpoint_yaml(name: &str, sink: &Sink, dead_letter: bool) -> String {
    format!(
        "  {name}:\n    url: {}\n    topics: [t]\n    dead_letter: {dead_letter}\n",
        sink.url("/")
    )
}

fn ms(time: &Value) -> i64 {
    hookgate::model::Timestamp::parse_rfc3339(time.as_str().unwrap())
        .unwrap()
        .as_millis()
}

/// The endpoint's only delivery of round 1.
async fn first_delivery(gw: &RealGateway, endpoint: &str) -> String {
    let (_, list) = gw.get(&format!("/v1/deliveries?endpoint={endpoint}")).await;
    list["deliveries"][0]["id"].as_str().unwrap().to_owned()
}

/// Waits until the delivery succeeded and returns its attempts as (round, n, status code).
async fn attempts_when_delivered(gw: &RealGateway, id: &str) -> Vec<(u64, u64, u64)> {
    let d = gw
        .wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
            d["status"] == "succeeded" || d["status"] == "failed" || d["status"] == "dead"
        })
        .await;
    assert_eq!(d["status"], "succeeded", "{d}");
    d["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["round"].as_u64().unwrap(),
                a["n"].as_u64().unwrap(),
                a["status_code"].as_u64().unwrap_or(0),
            )
        })
        .collect()
}

/// The new deliveries a replay created for `endpoint` (those after `first`).
async fn replayed_delivery(gw: &RealGateway, endpoint: &str, first: &str) -> String {
    let (_, list) = gw.get(&format!("/v1/deliveries?endpoint={endpoint}")).await;
    let ids: Vec<String> = list["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap().to_owned())
        .filter(|id| id != first)
        .collect();
    assert_eq!(ids.len(), 1, "one replayed delivery: {list}");
    ids[0].clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_new_round_after_the_deadline_gets_the_whole_policy() {
    let sinks: Vec<Sink> = futures_util::future::join_all((0..4).map(|_| Sink::start())).await;
    let [redeliver, redrive, reenable, replay] = [&sinks[0], &sinks[1], &sinks[2], &sinks[3]];
    for sink in &sinks {
        sink.always(Reply::status(503));
    }
    // The endpoint to re-enable says 410 Gone on its last attempt, which disables it.
    reenable.script(std::iter::repeat_n(Reply::status(503), 8).chain([Reply::status(410)]));
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        "delivery:\n  allow_networks: [127.0.0.0/8]\ntopics:\n  t: {{}}\nendpoints:\n{}{}{}{}",
        endpoint_yaml("redeliver", redeliver, false),
        endpoint_yaml("redrive", redrive, true),
        endpoint_yaml("reenable", reenable, false),
        endpoint_yaml("replay", replay, false),
    );
    let gw = RealGateway::start(dir.path(), &yaml, &["--time-scale", "43200"]).await;

    let (status, accepted) = gw
        .post(
            "/v1/topics/t/events",
            json!({"type": "order.created", "payload": {"n": 1}}),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let event_id = accepted["id"].as_str().unwrap();
    let (_, event) = gw.get(&format!("/v1/events/{event_id}")).await;
    let received_at = ms(&event["received_at"]);

    // The whole standard policy runs out: nine attempts, the last at the 72-hour deadline.
    let mut first = Vec::new();
    for name in ["redeliver", "redrive", "reenable", "replay"] {
        let id = first_delivery(&gw, name).await;
        let d = gw
            .wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
                d["status"] == "failed" || d["status"] == "dead"
            })
            .await;
        assert_eq!(d["attempt_count"], 9, "{name}: {d}");
        first.push(id);
    }
    gw.wait_until("/v1/endpoints/reenable", WAIT, |e| e["state"] == "disabled")
        .await;
    let (_, status) = gw.get("/v1/status").await;
    assert!(
        ms(&status["now"]) - received_at >= DEADLINE_MS,
        "the event is past its deadline before the new rounds start"
    );

    // Every receiver is fixed, but fails once more (a cold start) before it succeeds.
    for sink in &sinks {
        sink.script([Reply::status(503)]);
        sink.always(Reply::status(204));
    }
    let since = hookgate::model::Timestamp::from_millis(received_at - 1).to_rfc3339();

    let (status, body) = gw
        .post(&format!("/v1/deliveries/{}/redeliver", first[0]), json!({}))
        .await;
    assert_eq!(status, 202, "{body}");
    let (status, body) = gw.post("/v1/endpoints/redrive/redrive", json!({})).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["queued"], 1);
    let (status, body) = gw
        .post("/v1/endpoints/reenable/reenable", json!({"replay_since": since}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["replayed"], 1);
    let (status, body) = gw
        .post_with(
            "/v1/endpoints/replay/replay",
            json!({"since": since}),
            &[("idempotency-key", "late-replay")],
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["queued"], 1);

    // Redeliver and redrive continue the same delivery in round 2.
    for id in &first[..2] {
        let attempts = attempts_when_delivered(&gw, id).await;
        assert_eq!(attempts.len(), 11, "{attempts:?}");
        assert_eq!(attempts[9..], [(2, 1, 503), (2, 2, 204)], "{id}");
    }
    // Re-enable and replay make a new delivery of the old event, in round 1.
    for (name, first) in [("reenable", &first[2]), ("replay", &first[3])] {
        let id = replayed_delivery(&gw, name, first).await;
        let attempts = attempts_when_delivered(&gw, &id).await;
        assert_eq!(attempts, [(1, 1, 503), (1, 2, 204)], "{name}");
    }
    for sink in &sinks {
        let last = sink.received().pop().unwrap();
        assert_eq!(last.header("webhook-id"), event_id);
        assert_eq!(last.header("hookgate-delivery-attempt"), "2");
    }
}
