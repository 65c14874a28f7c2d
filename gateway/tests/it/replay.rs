//! Getting missed events back (README "Recovering missed events"): re-enable with `replay_since`,
//! and replay with its `Idempotency-Key` protocol, window limit and truncation.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{Probe, WAIT, deliveries_of, endpoint, time, wait_state};
use crate::support::{Reply, START, Sink, TestGateway};

const DAY: Duration = Duration::from_secs(86_400);

/// Endpoint `e` on topic `t` for `order.*` events only.
fn config(sink: &Sink, probe: &Probe, health: &str) -> String {
    format!(
        "{health}policies:\n  twice:\n    schedule: [0s, 2h]\n    jitter: 0\n\
         topics:\n  t: {{}}\n{}endpoints:\n  e:\n    url: {}\n    topics: [t]\n    types: [\"order.*\"]\n    policy: twice\n{}",
        probe.topic_yaml(),
        sink.url("/hook"),
        probe.endpoint_yaml()
    )
}

/// Health rules under which one failure degrades and an hour of failing pauses.
const QUICK_PAUSE: &str =
    "health:\n  degrade_after_failures: 1\n  pause_min_failures: 1\n  pause_after: 1h\n  disable_after: 1d\n";

fn ids(received: &[crate::support::Received]) -> HashSet<String> {
    received
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect()
}

async fn replay(gw: &TestGateway, key: Option<&str>, body: Value) -> (u16, Value, bool) {
    let mut request = gw.post_builder("/v1/endpoints/e/replay").json(&body);
    if let Some(key) = key {
        request = request.header("idempotency-key", key);
    }
    let response = request.send().await.unwrap();
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    (status, response.json().await.unwrap_or_default(), replayed)
}

#[tokio::test]
async fn reenable_with_replay_since_sends_exactly_the_events_missed_while_paused() {
    let sink = Sink::start().await;
    sink.script([Reply::status(503)]);
    let probe = Probe::start().await;
    let gw = TestGateway::start(&config(&sink, &probe, QUICK_PAUSE)).await;

    let before_pause = gw.ingest("t", "order.created", json!({"n": 0})).await;
    wait_state(&gw, "e", "degraded").await;
    gw.advance(Duration::from_secs(3600)).await;
    let e = wait_state(&gw, "e", "paused").await;
    let paused_at = time(&e["history"].as_array().unwrap().last().unwrap()["at"]);
    assert_eq!(paused_at, START.plus(Duration::from_secs(3600)));

    let mut missed = HashSet::new();
    for event_type in ["order.paid", "user.created", "order.shipped"] {
        gw.advance(Duration::from_secs(60)).await;
        let accepted = gw.ingest("t", event_type, json!({"type": event_type})).await;
        assert_eq!(accepted["deliveries"], 0);
        if event_type.starts_with("order.") {
            missed.insert(accepted["id"].as_str().unwrap().to_owned());
        }
    }
    gw.advance(Duration::from_secs(60)).await;

    // A replay needs an active endpoint.
    let (status, body, _) = replay(&gw, Some("k"), json!({"since": paused_at.to_rfc3339()})).await;
    assert_eq!(status, 409, "{body}");

    // More than 7 days back: refused, and nothing changes.
    let too_old = gw.now().minus(7 * DAY).minus(Duration::from_secs(1));
    let (status, body) = gw
        .post(
            "/v1/endpoints/e/reenable",
            json!({"replay_since": too_old.to_rfc3339()}),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "replay_window_too_large");
    probe.barrier(&gw).await;
    let e = endpoint(&gw, "e").await;
    assert_eq!(e["state"], "paused");
    assert_eq!(e["history"].as_array().unwrap().len(), 2);
    assert_eq!(deliveries_of(&gw, "e").await.len(), 1);
    assert_eq!(sink.count(), 1);

    let (status, body) = gw
        .post(
            "/v1/endpoints/e/reenable",
            json!({"replay_since": paused_at.to_rfc3339()}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["endpoint"]["state"], "active");
    assert_eq!(body["endpoint"]["consecutive_failures"], 0);
    assert_eq!(body["replayed"], 2);
    assert_eq!(body["replay"]["truncated"], false);

    let got = sink.wait_for(3, WAIT).await;
    assert_eq!(ids(&got[1..]), missed);
    gw.wait_until("/v1/deliveries?endpoint=e&status=succeeded", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 2
    })
    .await;
    probe.barrier(&gw).await;
    assert_eq!(sink.count(), 3, "nothing but the missed events");
    assert!(!ids(&sink.received()[1..]).contains(before_pause["id"].as_str().unwrap()));
    let e = endpoint(&gw, "e").await;
    let last = e["history"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["state"], "active");
    assert_eq!(last["reason"], "re-enabled by operator");

    // Active again: new events are queued as usual.
    let accepted = gw.ingest("t", "order.created", json!({})).await;
    assert_eq!(accepted["deliveries"], 1);
    sink.wait_for(4, WAIT).await;
}

#[tokio::test]
async fn an_event_missed_in_the_same_millisecond_as_the_reenable_is_replayed() {
    let sink = Sink::start().await;
    sink.script([Reply::status(503)]);
    let probe = Probe::start().await;
    let gw = TestGateway::start(&config(&sink, &probe, QUICK_PAUSE)).await;
    gw.ingest("t", "order.created", json!({})).await;
    wait_state(&gw, "e", "degraded").await;
    gw.advance(Duration::from_secs(3600)).await;
    let e = wait_state(&gw, "e", "paused").await;
    let paused_at = time(&e["history"].as_array().unwrap().last().unwrap()["at"]);

    // The clock stands still: the missed event and the re-enable share one millisecond.
    let missed = gw.ingest("t", "order.paid", json!({})).await;
    assert_eq!(missed["deliveries"], 0);
    let (status, body) = gw
        .post(
            "/v1/endpoints/e/reenable",
            json!({"replay_since": paused_at.to_rfc3339()}),
        )
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["replayed"], 1);
    let got = sink.wait_for(2, WAIT).await;
    assert_eq!(got[1].header("webhook-id"), missed["id"].as_str().unwrap());
}

/// Three `order.*` events delivered at START, a minute ago.
async fn three_delivered_events() -> (TestGateway, Sink, Probe) {
    let sink = Sink::start().await;
    let probe = Probe::start().await;
    let gw = TestGateway::start(&config(&sink, &probe, "")).await;
    for n in 0..3 {
        gw.ingest("t", "order.created", json!({"n": n})).await;
    }
    sink.wait_for(3, WAIT).await;
    gw.advance(Duration::from_secs(60)).await;
    (gw, sink, probe)
}

#[tokio::test]
async fn replay_needs_a_key_and_a_retry_with_it_sends_nothing_twice() {
    let (gw, sink, probe) = three_delivered_events().await;
    let since = START.to_rfc3339();

    let (status, body, _) = replay(&gw, None, json!({"since": since})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "idempotency_key_required");

    let (status, first, replayed) = replay(&gw, Some("r-1"), json!({"since": since})).await;
    assert_eq!((status, replayed), (202, false), "{first}");
    assert_eq!(first["queued"], 3);
    assert_eq!(first["truncated"], false);
    assert_eq!(first["continue_from"], Value::Null);
    assert_eq!(time(&first["since"]), START);
    // The window is [since, until): by default it ends just after now, so it includes now.
    assert_eq!(time(&first["until"]), gw.now().plus(Duration::from_millis(1)));
    sink.wait_for(6, WAIT).await;

    let (status, again, replayed) = replay(&gw, Some("r-1"), json!({"since": since})).await;
    assert_eq!((status, replayed), (202, true));
    assert_eq!(again, first);

    let (status, body, _) = replay(
        &gw,
        Some("r-1"),
        json!({"since": since, "until": gw.now().to_rfc3339()}),
    )
    .await;
    assert_eq!(status, 422, "{body}");
    assert_eq!(body["error"]["code"], "idempotency_key_reused");

    let eight_days_ago = gw.now().minus(8 * DAY).to_rfc3339();
    let (status, body, _) = replay(&gw, Some("r-2"), json!({"since": eight_days_ago})).await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["error"]["code"], "replay_window_too_large");

    probe.barrier(&gw).await;
    assert_eq!(sink.count(), 6);
    assert_eq!(deliveries_of(&gw, "e").await.len(), 6);
}

#[tokio::test]
async fn a_replay_window_takes_the_endpoints_matching_events_from_since_until_until() {
    let sink = Sink::start().await;
    let probe = Probe::start().await;
    let gw = TestGateway::start(&config(&sink, &probe, "")).await;
    let mut ids = Vec::new();
    for event_type in ["order.a", "user.b", "order.c", "order.d"] {
        let accepted = gw.ingest("t", event_type, json!({})).await;
        ids.push(accepted["id"].as_str().unwrap().to_owned());
        gw.advance(Duration::from_secs(60)).await;
    }
    sink.wait_for(3, WAIT).await;

    // [START + 1 min, START + 3 min): `user.b` (not `e`'s type) and `order.c`.
    let (status, answer, _) = replay(
        &gw,
        Some("w-1"),
        json!({
            "since": START.plus(Duration::from_secs(60)).to_rfc3339(),
            "until": START.plus(Duration::from_secs(180)).to_rfc3339(),
        }),
    )
    .await;
    assert_eq!(status, 202, "{answer}");
    assert_eq!(answer["queued"], 1);
    let got = sink.wait_for(4, WAIT).await;
    assert_eq!(got[3].header("webhook-id"), ids[2]);

    let (status, answer, _) = replay(
        &gw,
        Some("w-2"),
        json!({"since": gw.now().to_rfc3339(), "until": START.to_rfc3339()}),
    )
    .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_window");
    let (status, answer, _) = replay(&gw, Some("w-3"), json!({"since": "yesterday"})).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_time");
    probe.barrier(&gw).await;
    assert_eq!(sink.count(), 4);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_replays_with_one_key_queue_one_set_of_deliveries() {
    let (gw, sink, probe) = three_delivered_events().await;
    let body = json!({"since": START.to_rfc3339()});
    let tasks: Vec<_> = (0..8)
        .map(|_| {
            let request = gw
                .post_builder("/v1/endpoints/e/replay")
                .header("idempotency-key", "same")
                .json(&body);
            tokio::spawn(async move {
                let response = request.send().await.unwrap();
                let status = response.status().as_u16();
                (status, response.json::<Value>().await.unwrap())
            })
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.push(task.await.unwrap());
    }
    let accepted: Vec<&Value> = answers
        .iter()
        .filter(|(s, _)| *s == 202)
        .map(|(_, b)| b)
        .collect();
    assert!(!accepted.is_empty(), "{answers:?}");
    assert!(accepted.iter().all(|b| *b == accepted[0]), "{answers:?}");
    for (status, body) in &answers {
        assert!(
            *status == 202 || (*status == 409 && body["error"]["code"] == "idempotency_key_in_use"),
            "{status} {body}"
        );
    }
    sink.wait_for(6, WAIT).await;
    probe.barrier(&gw).await;
    assert_eq!(sink.count(), 6);
    assert_eq!(deliveries_of(&gw, "e").await.len(), 6);
}

/// Starts a gateway whose endpoint `e` is subscribed to nothing, ingests batches of
/// `order.created` events of these sizes on `t` (each batch `gap` after the previous one), then
/// restarts the gateway with `e` subscribed to `t`: the events are in the log, but only a replay
/// sends them. Returns the gateway (a minute after the last batch) and the event ids.
async fn events_only_a_replay_sends(
    sink: &Sink,
    probe: &Probe,
    batches: &[usize],
    gap: Duration,
) -> (TestGateway, HashSet<String>) {
    let quiet = config(sink, probe, "").replace("topics: [t]", "topics: [probe]");
    let mut gw = TestGateway::start(&quiet).await;
    let started = Instant::now();
    let mut all = HashSet::new();
    for (batch, size) in batches.iter().enumerate() {
        let events: Vec<Value> = (0..*size)
            .map(|i| json!({"type": "order.created", "payload": {"batch": batch, "i": i}}))
            .collect();
        let (status, body) = gw
            .post("/v1/topics/t/events/batch", json!({"events": events}))
            .await;
        assert_eq!(status, 202, "{body}");
        all.extend(
            body["ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|id| id.as_str().unwrap().to_owned()),
        );
        gw.advance(gap).await;
    }
    println!(
        "ingested {} events in {} batches in {:?}",
        all.len(),
        batches.len(),
        started.elapsed()
    );
    gw.stop().await;
    let gw = TestGateway::start_in(gw.dir.clone(), &config(sink, probe, ""), gw.clock.clone()).await;
    gw.advance(Duration::from_secs(60)).await;
    (gw, all)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_more_than_10000_events_is_truncated_and_continues_where_it_stopped() {
    let sink = Sink::start().await;
    let probe = Probe::start().await;
    // 50 events, then ten batches of 1000, each batch a second later: the 10 000th event falls
    // inside the last batch, whose events share one receipt time.
    let mut batches = vec![50];
    batches.extend([1000; 10]);
    let (gw, all) = events_only_a_replay_sends(&sink, &probe, &batches, Duration::from_secs(1)).await;
    assert_eq!(all.len(), 10_050);

    let started = Instant::now();
    let (status, first, _) = replay(&gw, Some("big-1"), json!({"since": START.to_rfc3339()})).await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["truncated"], true);
    let continue_from = time(&first["continue_from"]);
    assert_eq!(continue_from, START.plus(Duration::from_secs(10)));
    // Only whole milliseconds are sent, so the continuation neither repeats nor skips one.
    assert_eq!(first["queued"], 9_050);

    let (status, rest, _) = replay(&gw, Some("big-2"), json!({"since": continue_from.to_rfc3339()})).await;
    assert_eq!(status, 202, "{rest}");
    assert_eq!(rest["truncated"], false);
    assert_eq!(rest["continue_from"], Value::Null);
    assert_eq!(rest["queued"], 1_000);
    let replay_time = started.elapsed();

    let got = sink.wait_for(10_050, Duration::from_secs(120)).await;
    let send_time = started.elapsed();
    probe.barrier(&gw).await;
    assert_eq!(sink.count(), 10_050, "every event exactly once");
    assert_eq!(ids(&got), all);
    println!("two replay calls: {replay_time:?}; all 10 050 received: {send_time:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn more_than_10000_events_in_one_millisecond_are_replayed_together() {
    let sink = Sink::start().await;
    let probe = Probe::start().await;
    // 10 001 events in one millisecond (the manual clock stands still), then 5 a second later.
    let (gw, all) = events_only_a_replay_sends(
        &sink,
        &probe,
        &[1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1000, 1],
        Duration::ZERO,
    )
    .await;
    gw.advance(Duration::from_secs(1)).await;
    let mut all = all;
    for n in 0..5 {
        let accepted = gw.ingest("t", "order.created", json!({"n": n})).await;
        all.insert(accepted["id"].as_str().unwrap().to_owned());
    }
    sink.wait_for(5, WAIT).await;
    gw.advance(Duration::from_secs(1)).await;

    let (status, first, _) = replay(&gw, Some("crowded-1"), json!({"since": START.to_rfc3339()})).await;
    assert_eq!(status, 202, "{first}");
    assert_eq!(first["queued"], 10_001, "a millisecond is never split");
    assert_eq!(first["truncated"], true);
    let continue_from = time(&first["continue_from"]);
    assert_eq!(continue_from, START.plus(Duration::from_millis(1)));
    let (status, rest, _) = replay(
        &gw,
        Some("crowded-2"),
        json!({"since": continue_from.to_rfc3339()}),
    )
    .await;
    assert_eq!(status, 202, "{rest}");
    assert_eq!(
        (rest["queued"].clone(), rest["truncated"].clone()),
        (json!(5), json!(false))
    );

    let got = sink.wait_for(5 + 10_006, Duration::from_secs(120)).await;
    probe.barrier(&gw).await;
    assert_eq!(sink.count(), 5 + 10_006);
    assert_eq!(ids(&got[5..]), all);
}

/// A replay does not send an endpoint the events accepted before it existed: its window starts
/// no earlier than the endpoint's creation (one made through the API; the replay sent
/// an event from before it).
#[tokio::test]
async fn a_replay_starts_no_earlier_than_the_endpoint_was_created() {
    let sink = Sink::start().await;
    let gw = TestGateway::start("topics:\n  t: {}\n").await;
    gw.ingest("t", "order.created", json!({"n": "before"})).await;
    gw.advance(Duration::from_secs(60)).await;
    let created_at = gw.now();
    let (status, body) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "late", "url": sink.url("/late"), "topics": ["t"]}),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    gw.advance(Duration::from_secs(60)).await;
    gw.ingest("t", "order.created", json!({"n": "after"})).await;
    sink.wait_for(1, WAIT).await;
    gw.settle().await;

    let since = START.to_rfc3339();
    let (status, preview) = gw
        .get(&format!("/v1/endpoints/late/replay/preview?since={since}"))
        .await;
    assert_eq!((status, &preview["events"]), (200, &json!(1)), "{preview}");
    let (status, replayed) = gw
        .send(
            gw.post_builder("/v1/endpoints/late/replay")
                .header("idempotency-key", "late-1")
                .json(&json!({"since": since})),
        )
        .await;
    assert_eq!(status, 202, "{replayed}");
    assert_eq!(replayed["queued"], 1, "{replayed}");
    assert_eq!(time(&replayed["since"]), created_at, "{replayed}");
    let received = sink.wait_for(2, WAIT).await;
    assert!(
        received.iter().all(|r| r.json()["n"] == "after"),
        "only the event accepted after the endpoint existed: {:?}",
        received.iter().map(|r| r.json()).collect::<Vec<_>>()
    );
}
