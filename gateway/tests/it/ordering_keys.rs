//! Ordered delivery an operator can see and steer: blocked and held keys in the API, and the
//! `skip`, `retry` and `release` actions (README "Ordered delivery").

use std::time::Duration;

use serde_json::{Value, json};

use crate::support::{Reply, Sink, TestGateway, metric};

const WAIT: Duration = Duration::from_secs(10);

/// Posts event `n` of `key`; answers its id.
async fn post(gw: &TestGateway, key: &str, n: u64) -> String {
    let body = json!({"type": "x", "payload": {"key": key, "n": n}, "ordering_key": key});
    let (status, answer) = gw.post("/v1/topics/t/events", body).await;
    assert_eq!(status, 202, "{answer}");
    answer["id"].as_str().unwrap().to_owned()
}

/// What the sink received, as `key:n`, in order.
fn received(sink: &Sink) -> Vec<String> {
    sink.received()
        .iter()
        .map(|r| {
            let v = r.json();
            format!("{}:{}", v["key"].as_str().unwrap(), v["n"])
        })
        .collect()
}

/// Fails every request for one key's event `n` with `status`.
fn fail(sink: &Sink, key: &'static str, n: u64, status: u16) {
    sink.rule(move |body| {
        let v: Value = serde_json::from_slice(body).ok()?;
        (v["key"] == key && v["n"] == n).then(|| Reply::status(status))
    });
}

fn yaml(sink: &Sink, policy: &str, extra: &str) -> String {
    format!(
        "policies:\n  p:\n    schedule: {policy}\n    jitter: 0\ntopics:\n  t: {{}}\n  ops: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: p\n    ordered: true\n    dead_letter: true\n{extra}",
        sink.url("/")
    )
}

async fn keys(gw: &TestGateway, state: &str) -> Vec<Value> {
    let (status, list) = gw
        .get(&format!("/v1/endpoints/e/ordering-keys?state={state}"))
        .await;
    assert_eq!(status, 200, "{list}");
    list["keys"].as_array().unwrap().clone()
}

async fn act(gw: &TestGateway, key: &str, action: &str, head: Option<&str>) -> (u16, Value) {
    let body = head.map_or(json!({}), |h| json!({"delivery_id": h}));
    gw.post(&format!("/v1/endpoints/e/ordering-keys/{key}/{action}"), body)
        .await
}

/// The delivery of an event, as the API shows it.
async fn delivery_of(gw: &TestGateway, event_id: &str) -> Value {
    let (status, event) = gw.get(&format!("/v1/events/{event_id}")).await;
    assert_eq!(status, 200, "{event}");
    event["deliveries"][0].clone()
}

#[tokio::test]
async fn a_blocked_key_shows_its_head_and_skip_sends_the_rest_in_order() {
    let sink = Sink::start().await;
    fail(&sink, "a", 1, 503);
    let gw = TestGateway::start(&yaml(&sink, "[0s, 1m, 1m]", "")).await;
    let a1 = post(&gw, "a", 1).await;
    sink.wait_for(1, WAIT).await;
    post(&gw, "a", 2).await;
    post(&gw, "a", 3).await;
    post(&gw, "b", 1).await;
    post(&gw, "b", 2).await;
    // Key b flows while a waits behind its failed head.
    sink.wait_for(3, WAIT).await;
    gw.settle().await;
    assert_eq!(received(&sink), ["a:1", "b:1", "b:2"]);

    let blocked = keys(&gw, "blocked").await;
    assert_eq!(blocked.len(), 1, "{blocked:?}");
    let a = &blocked[0];
    assert_eq!(a["key"], "a");
    assert_eq!(a["state"], "blocked");
    assert_eq!(a["waiting"], 2);
    assert_eq!(a["head"]["event_id"], a1.as_str());
    assert_eq!(a["head"]["attempt_count"], 1);
    assert_eq!(a["head"]["status"], "pending");
    assert!(a["head"]["last_error"].as_str().unwrap().contains("503"), "{a}");
    assert_eq!(
        crate::support::time(&a["head"]["next_attempt_at"]),
        crate::support::START.plus(Duration::from_secs(60))
    );
    assert!(a["oldest_waiting_at"].is_string(), "{a}");
    assert_eq!(keys(&gw, "all").await.len(), 1, "b has nothing pending");
    let metrics = gw.metrics_text().await;
    assert_eq!(
        metric(&metrics, "hookgate_ordering_keys_blocked{endpoint=\"e\"}"),
        1.0
    );

    let head = a["head"]["delivery_id"].as_str().unwrap().to_owned();
    let (status, answer) = act(&gw, "a", "skip", Some(&head)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["applied"], true);
    assert_eq!(answer["head"], head.as_str());
    // The rest of the key goes at once, in order; the head is a `skipped` dead letter.
    sink.wait_for(5, WAIT).await;
    gw.settle().await;
    assert_eq!(received(&sink), ["a:1", "b:1", "b:2", "a:2", "a:3"]);
    let skipped = delivery_of(&gw, &a1).await;
    assert_eq!(skipped["status"], "dead");
    assert_eq!(skipped["last_error"], "skipped");
    // Skipping it again does nothing.
    let (status, again) = act(&gw, "a", "skip", Some(&head)).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(again["applied"], false);
    assert!(keys(&gw, "all").await.is_empty());
    // Nothing more is sent when its retry would have been due.
    gw.advance(Duration::from_secs(120)).await;
    gw.settle().await;
    assert_eq!(sink.count(), 5);
    let metrics = gw.metrics_text().await;
    assert_eq!(
        metric(&metrics, "hookgate_ordering_keys_blocked{endpoint=\"e\"}"),
        0.0
    );
}

/// `release` is for held keys: on a key that is blocked but not held it does nothing and says
/// so, naming the key's head (it answered `head: null`, as if the key had none).
#[tokio::test]
async fn release_of_a_key_that_is_not_held_names_its_head() {
    let sink = Sink::start().await;
    sink.script([Reply::status(503)]);
    let gw = TestGateway::start(&yaml(&sink, "[0s, 1h]", "")).await;
    let a1 = post(&gw, "a", 1).await;
    sink.wait_for(1, WAIT).await;
    post(&gw, "a", 2).await;
    gw.settle().await;
    let head = delivery_of(&gw, &a1).await["id"].as_str().unwrap().to_owned();
    let (status, answer) = act(&gw, "a", "release", None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(
        answer,
        json!({"key": "a", "action": "release", "applied": false, "head": head, "reason": "not_held"})
    );
    // A key with nothing pending has no head to name.
    let (_, none) = act(&gw, "nothing", "release", None).await;
    assert_eq!(
        (&none["head"], &none["reason"]),
        (&Value::Null, &json!("no_head")),
        "{none}"
    );
    assert_eq!(keys(&gw, "blocked").await[0]["state"], "blocked");
}

#[tokio::test]
async fn retry_attempts_the_head_at_once() {
    let sink = Sink::start().await;
    sink.script([Reply::status(503)]);
    let gw = TestGateway::start(&yaml(&sink, "[0s, 1h]", "")).await;
    post(&gw, "a", 1).await;
    sink.wait_for(1, WAIT).await;
    post(&gw, "a", 2).await;
    gw.settle().await;
    assert_eq!(keys(&gw, "blocked").await.len(), 1);
    let (status, answer) = act(&gw, "a", "retry", None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["applied"], true);
    // No clock moved: the head went now, then the next event.
    sink.wait_for(3, WAIT).await;
    gw.settle().await;
    assert_eq!(received(&sink), ["a:1", "a:1", "a:2"]);
    assert!(keys(&gw, "all").await.is_empty());
}

#[tokio::test]
async fn an_action_on_a_head_being_attempted_waits_for_its_outcome() {
    let sink = Sink::start().await;
    sink.script([
        Reply::status(503),
        Reply::status(200).delayed(Duration::from_millis(400)),
    ]);
    let gw = TestGateway::start(&yaml(&sink, "[0s, 1m]", "")).await;
    post(&gw, "a", 1).await;
    sink.wait_for(1, WAIT).await;
    post(&gw, "a", 2).await;
    gw.settle().await;
    let head = keys(&gw, "blocked").await[0]["head"]["delivery_id"]
        .as_str()
        .unwrap()
        .to_owned();
    gw.advance(Duration::from_secs(60)).await;
    // The head's retry is running (and will succeed): a skip now is refused…
    sink.wait_for(2, WAIT).await;
    let (status, answer) = act(&gw, "a", "skip", Some(&head)).await;
    assert_eq!(status, 409, "{answer}");
    assert_eq!(answer["error"]["code"], "head_in_flight");
    // …and once it succeeded, the same skip names a head that moved on: it does nothing, and
    // the next event is sent exactly once.
    sink.wait_for(3, WAIT).await;
    gw.settle().await;
    let (status, answer) = act(&gw, "a", "skip", Some(&head)).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["applied"], false);
    gw.settle().await;
    assert_eq!(received(&sink), ["a:1", "a:1", "a:2"]);
}

#[tokio::test]
async fn hold_keeps_a_key_stopped_past_its_final_failure_until_release() {
    let sink = Sink::start().await;
    let ops = Sink::start().await;
    fail(&sink, "k", 1, 500);
    let yaml = format!(
        "health:\n  operator_topic: ops\n{}  ops:\n    url: {}\n    topics: [ops]\n",
        yaml(&sink, "[0s]", "    on_final_failure: hold\n"),
        ops.url("/ops")
    );
    let mut gw = TestGateway::start(&yaml).await;
    let k1 = post(&gw, "k", 1).await;
    sink.wait_for(1, WAIT).await;
    post(&gw, "k", 2).await;
    post(&gw, "j", 1).await;
    sink.wait_for(2, WAIT).await;
    gw.settle().await;
    let held = keys(&gw, "blocked").await;
    assert_eq!(held.len(), 1, "{held:?}");
    assert_eq!(held[0]["state"], "held");
    assert_eq!(held[0]["head"]["event_id"], k1.as_str());
    assert_eq!(held[0]["head"]["status"], "dead");
    assert_eq!(held[0]["waiting"], 1);
    let metrics = gw.metrics_text().await;
    assert_eq!(
        metric(&metrics, "hookgate_ordering_keys_held{endpoint=\"e\"}"),
        1.0
    );
    // The operator hears of it.
    let told = ops.wait_for(1, WAIT).await[0].json();
    assert_eq!(told["type"], "hookgate.ordering.key_held");
    assert_eq!(
        (&told["endpoint"], &told["ordering_key"]),
        (&json!("e"), &json!("k"))
    );
    assert_eq!(told["head"], held[0]["head"]["delivery_id"]);

    // Held across time and a restart.
    gw.advance(Duration::from_secs(3600)).await;
    gw.settle().await;
    assert_eq!(received(&sink), ["k:1", "j:1"]);
    gw.stop().await;
    let gw = TestGateway::start_in(gw.dir.clone(), &yaml, gw.clock.clone()).await;
    gw.settle().await;
    assert_eq!(sink.count(), 2);
    assert_eq!(keys(&gw, "blocked").await[0]["state"], "held");

    // A retry is a new round of the head: it fails again and the key is held again.
    let (status, answer) = act(&gw, "k", "retry", None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["applied"], true);
    sink.wait_for(3, WAIT).await;
    gw.settle().await;
    assert_eq!(keys(&gw, "blocked").await[0]["state"], "held");
    assert_eq!(received(&sink), ["k:1", "j:1", "k:1"]);

    // Release: the next event goes; the head stays a dead letter.
    let (status, answer) = act(&gw, "k", "release", None).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["applied"], true);
    sink.wait_for(4, WAIT).await;
    gw.settle().await;
    assert_eq!(received(&sink), ["k:1", "j:1", "k:1", "k:2"]);
    assert_eq!(delivery_of(&gw, &k1).await["status"], "dead");
    assert!(keys(&gw, "all").await.is_empty());
    let (status, again) = act(&gw, "k", "release", None).await;
    assert_eq!((status, &again["applied"]), (200, &json!(false)), "{again}");
}

#[tokio::test]
async fn ordering_keys_need_an_ordered_endpoint_and_good_filters() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n  o:\n    url: {}\n    topics: [t]\n    ordered: true\n",
        sink.url("/"),
        sink.url("/")
    ))
    .await;
    let (status, answer) = gw.get("/v1/endpoints/e/ordering-keys").await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (409, &json!("endpoint_not_ordered"))
    );
    let (status, answer) = gw.get("/v1/endpoints/o/ordering-keys?state=stuck").await;
    assert_eq!((status, &answer["error"]["code"]), (400, &json!("invalid_state")));
    let (status, answer) = gw.get("/v1/endpoints/o/ordering-keys?cursor=!!").await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (400, &json!("invalid_cursor"))
    );
    let (status, answer) = gw.get("/v1/endpoints/nope/ordering-keys").await;
    assert_eq!(status, 404, "{answer}");
    let (status, answer) = gw
        .post(
            "/v1/endpoints/o/ordering-keys/k/skip",
            json!({"delivery_id": "x"}),
        )
        .await;
    assert_eq!(
        (status, &answer["error"]["code"]),
        (400, &json!("invalid_delivery_id"))
    );
    let (status, answer) = gw.post("/v1/endpoints/o/ordering-keys/k/skip", json!({})).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["reason"], "no_head");
    let (status, endpoint) = gw.get("/v1/endpoints/o").await;
    assert_eq!(status, 200);
    assert_eq!(endpoint["on_final_failure"], "skip");
}

/// The whole story with the real binary, on the suite's store (SQLite, or PostgreSQL in the
/// suite's PostgreSQL pass): a receiver failing one key's head; the API shows that key blocked
/// with its head and what waits while another key flows; `retry` attempts the head at once,
/// `skip` sends the rest in order and leaves the head a `skipped` dead letter; on a `hold`
/// endpoint the key stays stopped past the head's final failure until `release`.
#[tokio::test]
async fn the_gateway_binary_shows_blocked_keys_and_moves_them_on() {
    let dir = tempfile::tempdir().unwrap();
    let sink = Sink::start().await;
    sink.rule(|body| {
        let v: Value = serde_json::from_slice(body).ok()?;
        (v["n"] == 1 && (v["key"] == "a" || v["key"] == "k")).then(|| Reply::status(503))
    });
    let yaml = format!(
        "delivery:\n  allow_networks: [127.0.0.0/8]\npolicies:\n  slow:\n    schedule: [0s, 1h, 1h]\n    jitter: 0\n  once:\n    schedule: [0s]\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    types: [x]\n    policy: slow\n    ordered: true\n    dead_letter: true\n  h:\n    url: {}\n    topics: [t]\n    types: [held]\n    policy: once\n    ordered: true\n    dead_letter: true\n    on_final_failure: hold\n",
        sink.url("/e"),
        sink.url("/h")
    );
    let gw = crate::binary::RealGateway::start_on_suite_store(dir.path(), "", &yaml, &[]).await;
    let send = |key: &'static str, n: u64, event_type: &'static str| {
        let gw = &gw;
        async move {
            let body = json!({"type": event_type, "payload": {"key": key, "n": n}, "ordering_key": key});
            let (status, answer) = gw.post("/v1/topics/t/events", body).await;
            assert_eq!(status, 202, "{answer}");
        }
    };
    let at = |path: &'static str| {
        move |sink: &Sink| -> Vec<String> {
            sink.received()
                .iter()
                .filter(|r| r.path == path)
                .map(|r| {
                    let v = r.json();
                    format!("{}:{}", v["key"].as_str().unwrap(), v["n"])
                })
                .collect()
        }
    };
    send("a", 1, "x").await;
    sink.wait_for(1, WAIT).await;
    send("a", 2, "x").await;
    send("a", 3, "x").await;
    send("b", 1, "x").await;
    let blocked = gw
        .wait_until("/v1/endpoints/e/ordering-keys?state=blocked", WAIT, |l| {
            l["keys"][0]["waiting"] == 2
        })
        .await;
    let a = &blocked["keys"][0];
    assert_eq!(
        (&a["key"], &a["state"]),
        (&json!("a"), &json!("blocked")),
        "{blocked}"
    );
    assert_eq!(a["head"]["attempt_count"], 1, "{a}");
    sink.wait_for(2, WAIT).await;
    assert_eq!(at("/e")(&sink), ["a:1", "b:1"], "b flows while a is blocked");

    // Retry: attempted now, fails again, still blocked.
    let (status, answer) = gw.post("/v1/endpoints/e/ordering-keys/a/retry", json!({})).await;
    assert_eq!((status, &answer["applied"]), (200, &json!(true)), "{answer}");
    gw.wait_until("/v1/endpoints/e/ordering-keys?state=blocked", WAIT, |l| {
        l["keys"][0]["head"]["attempt_count"] == 2
    })
    .await;
    // Skip: the rest in order, the head a `skipped` dead letter.
    let head = a["head"]["delivery_id"].as_str().unwrap();
    let (status, answer) = gw
        .post(
            "/v1/endpoints/e/ordering-keys/a/skip",
            json!({"delivery_id": head}),
        )
        .await;
    assert_eq!((status, &answer["applied"]), (200, &json!(true)), "{answer}");
    sink.wait_for(5, WAIT).await;
    assert_eq!(at("/e")(&sink), ["a:1", "b:1", "a:1", "a:2", "a:3"]);
    let (_, skipped) = gw.get(&format!("/v1/deliveries/{head}")).await;
    assert_eq!(
        (&skipped["status"], &skipped["last_error"]),
        (&json!("dead"), &json!("skipped"))
    );

    // Hold: the key stays stopped past the final failure, until released.
    send("k", 1, "held").await;
    sink.wait_for(6, WAIT).await;
    send("k", 2, "held").await;
    let held = gw
        .wait_until("/v1/endpoints/h/ordering-keys?state=blocked", WAIT, |l| {
            l["keys"][0]["state"] == "held" && l["keys"][0]["waiting"] == 1
        })
        .await;
    assert_eq!(held["keys"][0]["head"]["status"], "dead", "{held}");
    assert_eq!(at("/h")(&sink), ["k:1"]);
    let (status, answer) = gw
        .post("/v1/endpoints/h/ordering-keys/k/release", json!({}))
        .await;
    assert_eq!((status, &answer["applied"]), (200, &json!(true)), "{answer}");
    sink.wait_for(7, WAIT).await;
    assert_eq!(at("/h")(&sink), ["k:1", "k:2"]);
    gw.wait_until("/v1/endpoints/h/ordering-keys?state=all", WAIT, |l| {
        l["keys"].as_array().unwrap().is_empty()
    })
    .await;
}

#[tokio::test]
async fn a_key_blocked_longer_than_the_threshold_is_reported_once_per_head() {
    let sink = Sink::start().await;
    let ops = Sink::start().await;
    fail(&sink, "k", 1, 503);
    let yaml = format!(
        "health:\n  operator_topic: ops\n  key_blocked_after: 10m\n{}  ops:\n    url: {}\n    topics: [ops]\n",
        yaml(&sink, "[0s, 1h, 1h]", ""),
        ops.url("/ops")
    );
    let gw = TestGateway::start(&yaml).await;
    post(&gw, "k", 1).await;
    sink.wait_for(1, WAIT).await;
    post(&gw, "k", 2).await;
    gw.settle().await;

    // Blocked, but not yet for ten minutes: nothing to report.
    gw.advance(Duration::from_secs(9 * 60)).await;
    gw.settle().await;
    assert_eq!(ops.count(), 0);

    // The watch looks every quarter of the threshold.
    gw.advance(Duration::from_secs(3 * 60)).await;
    let told = ops.wait_for(1, WAIT).await[0].json();
    assert_eq!(told["type"], "hookgate.ordering.key_blocked");
    assert_eq!(
        (&told["endpoint"], &told["ordering_key"], &told["waiting"]),
        (&json!("e"), &json!("k"), &json!(1))
    );
    let blocked = keys(&gw, "blocked").await;
    assert_eq!(told["head"], blocked[0]["head"]["delivery_id"]);
    assert!(told["last_error"].as_str().unwrap().contains("503"), "{told}");
    assert!(told["blocked_for_seconds"].as_u64().unwrap() >= 600, "{told}");

    // Still blocked behind the same head, through its next failed retry: not again.
    gw.advance(Duration::from_secs(60 * 60)).await;
    sink.wait_for(2, WAIT).await;
    gw.settle().await;
    gw.advance(Duration::from_secs(5 * 60)).await;
    gw.settle().await;
    assert_eq!(ops.count(), 1);
    let metrics = gw.metrics_text().await;
    assert_eq!(
        metric(
            &metrics,
            "hookgate_ordering_key_events_total{endpoint=\"e\",event=\"blocked_too_long\"}"
        ),
        1.0
    );
}
