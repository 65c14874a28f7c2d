//! Retry policies end to end: SNS delivery policies written in YAML or pasted as
//! JSON, their previews, topic- vs endpoint-level precedence, `retry_on` classification
//! against a real receiver, the per-endpoint throttle and the request policy's content type.

use std::time::Duration;

use hookgate::model::Timestamp;
use serde_json::{Value, json};

use crate::support::{Reply, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(10);

/// The seed's example policy (docs/policies.md, "SNS delivery policies"): 3 no-delay, 2 at 1 s, 10
/// exponential 1 → 60 s, 35 at 60 s — 50 retries, 51 attempts, about 2205 s.
const SEED_SNS_YAML: &str = "
      healthyRetryPolicy:
        minDelayTarget: 1
        maxDelayTarget: 60
        numRetries: 50
        numNoDelayRetries: 3
        numMinDelayRetries: 2
        numMaxDelayRetries: 35
        backoffFunction: exponential
      throttlePolicy:
        maxReceivesPerSecond: 10
      requestPolicy:
        headerContentType: application/json
";

/// The same document as SNS prints it, pasted verbatim as a JSON string.
const SEED_SNS_JSON: &str = r#"
      { "healthyRetryPolicy": { "minDelayTarget": 1, "maxDelayTarget": 60, "numRetries": 50,
          "numNoDelayRetries": 3, "numMinDelayRetries": 2, "numMaxDelayRetries": 35,
          "backoffFunction": "exponential" },
        "throttlePolicy": { "maxReceivesPerSecond": 10 },
        "requestPolicy": { "headerContentType": "application/json" } }
"#;

fn time(v: &Value) -> Timestamp {
    Timestamp::parse_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}"))).unwrap()
}

fn millis(seconds: &Value) -> u64 {
    (seconds
        .as_f64()
        .unwrap_or_else(|| panic!("not seconds: {seconds}"))
        * 1000.0)
        .round() as u64
}

/// The only delivery of `endpoint`.
async fn delivery_of(gw: &TestGateway, endpoint: &str) -> String {
    let list = gw
        .wait_until(&format!("/v1/deliveries?endpoint={endpoint}"), WAIT, |l| {
            l["deliveries"].as_array().is_some_and(|d| d.len() == 1)
        })
        .await;
    list["deliveries"][0]["id"].as_str().unwrap().to_owned()
}

/// Waits until nothing more happens to the delivery without the clock moving: it is final,
/// or pending with its next attempt in the (manual clock's) future.
async fn settled(gw: &TestGateway, id: &str) -> Value {
    let now = gw.now();
    gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
        match d["status"].as_str() {
            Some("succeeded" | "failed" | "dead") => true,
            Some("pending") => d["next_attempt_at"].is_string() && time(&d["next_attempt_at"]) > now,
            _ => false,
        }
    })
    .await
}

/// The wait the delivery is now scheduled for: next attempt minus the last attempt's start.
fn scheduled_wait(d: &Value) -> Duration {
    let last = d["attempts"].as_array().unwrap().last().unwrap();
    time(&d["next_attempt_at"]).since(time(&last["started_at"]))
}

#[tokio::test]
async fn an_sns_policy_in_yaml_and_pasted_as_json_previews_the_seeds_51_attempts() {
    let gw = TestGateway::start(&format!(
        "policies:\n  seed-yaml:\n    sns:{SEED_SNS_YAML}  seed-json:\n    sns: |{SEED_SNS_JSON}"
    ))
    .await;

    let (status, list) = gw.get("/v1/policies").await;
    assert_eq!(status, 200);
    let names: Vec<&str> = list["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    for name in [
        "seed-yaml",
        "seed-json",
        "standard",
        "sns-http-default",
        "sns-aws-managed",
        "sns-customer-managed",
    ] {
        assert!(names.contains(&name), "{name} missing from {names:?}");
    }

    let (status, from_yaml) = gw.get("/v1/policies/seed-yaml/preview").await;
    assert_eq!(status, 200, "{from_yaml}");
    let (status, from_json) = gw.get("/v1/policies/seed-json/preview").await;
    assert_eq!(status, 200, "{from_json}");
    assert_eq!(from_yaml["policy"], "seed-yaml");
    assert_eq!(from_json["policy"], "seed-json");
    assert_eq!(from_yaml["attempts"], from_json["attempts"]);
    assert_eq!(from_yaml["jitter"], 0.2);
    assert_eq!(from_yaml["deadline_s"], Value::Null);

    let attempts = from_yaml["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 51);
    let phases: Vec<&str> = attempts.iter().map(|a| a["phase"].as_str().unwrap()).collect();
    let count = |phase: &str| phases.iter().filter(|p| **p == phase).count();
    assert_eq!(phases[0], "initial");
    assert_eq!(
        [
            count("no_delay"),
            count("pre_backoff"),
            count("backoff"),
            count("post_backoff")
        ],
        [3, 2, 10, 35]
    );
    // The phases come in order.
    let order = ["initial", "no_delay", "pre_backoff", "backoff", "post_backoff"];
    let ranks: Vec<usize> = phases
        .iter()
        .map(|p| order.iter().position(|o| o == p).unwrap())
        .collect();
    assert!(ranks.windows(2).all(|w| w[0] <= w[1]), "{phases:?}");

    let waits_ms: Vec<u64> = attempts.iter().map(|a| millis(&a["wait_s"])).collect();
    assert_eq!(waits_ms[..6], [0, 0, 0, 0, 1_000, 1_000]);
    // Backoff retry i of N = 10: 1 + 59·(e^(i−1) − 1)/(e^9 − 1) s (docs/policies.md, "SNS delivery
    // policies").
    let expected_backoff_ms: Vec<u64> = (1..=10)
        .map(|i: i32| {
            let s = 1.0 + 59.0 * (f64::from(i - 1).exp() - 1.0) / (9f64.exp() - 1.0);
            (s * 1000.0).round() as u64
        })
        .collect();
    assert_eq!(waits_ms[6..16], expected_backoff_ms[..]);
    assert!(waits_ms[16..].iter().all(|w| *w == 60_000));
    // Each attempt's time is the sum of the waits before it; the last is ~2205 s after the event.
    let mut at_ms = 0;
    for (a, wait_ms) in attempts.iter().zip(&waits_ms) {
        at_ms += wait_ms;
        assert_eq!(millis(&a["at_s"]), at_ms, "{a}");
    }
    assert_eq!(at_ms, 2_205_271);
    // Jitter bounds are ±20 % of each wait.
    assert_eq!(millis(&attempts[50]["min_wait_s"]), 48_000);
    assert_eq!(millis(&attempts[50]["max_wait_s"]), 72_000);

    let (status, missing) = gw.get("/v1/policies/nope/preview").await;
    assert_eq!(status, 404);
    assert_eq!(missing["error"]["code"], "policy_not_found");
}

#[tokio::test]
async fn the_gateway_retries_the_seed_policy_exactly_as_its_preview_says() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let gw = TestGateway::start(&format!(
        "policies:\n  seed:\n    jitter: 0\n    sns:{SEED_SNS_YAML}topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: seed\n",
        sink.url("/hook")
    ))
    .await;
    let (_, preview) = gw.get("/v1/policies/seed/preview").await;
    let planned_ms: Vec<u64> = preview["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| millis(&a["wait_s"]))
        .collect();
    assert_eq!(planned_ms.len(), 51);

    gw.ingest("t", "x", json!({})).await;
    let id = delivery_of(&gw, "e").await;
    let mut scheduled = 0;
    let d = loop {
        let d = settled(&gw, &id).await;
        if d["status"] != "pending" {
            break d;
        }
        // The delivery's next_attempt_at is the preview's wait after the last attempt.
        let n = d["attempt_count"].as_u64().unwrap() as usize;
        assert_eq!(
            scheduled_wait(&d).as_millis() as u64,
            planned_ms[n],
            "wait before attempt {}",
            n + 1
        );
        scheduled += 1;
        gw.advance_to(time(&d["next_attempt_at"])).await;
    };
    // No-delay retries run at once, so they are never seen waiting; every other one is.
    assert_eq!(scheduled, 47);
    assert_eq!(d["status"], "failed");
    assert_eq!(d["attempt_count"], 51);
    assert!(d["last_error"].as_str().unwrap().starts_with("exhausted"), "{d}");
    let starts: Vec<Timestamp> = d["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| time(&a["started_at"]))
        .collect();
    let observed_ms: Vec<u64> = std::iter::once(0)
        .chain(starts.windows(2).map(|w| w[1].since(w[0]).as_millis() as u64))
        .collect();
    assert_eq!(observed_ms, planned_ms);
    assert_eq!(sink.count(), 51);
    // The request policy of the document applies to every attempt.
    assert!(
        sink.received()
            .iter()
            .all(|r| r.header("content-type") == "application/json")
    );
}

#[tokio::test]
async fn an_endpoint_policy_wins_over_its_topics_and_a_topic_policy_over_standard() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let gw = TestGateway::start(&format!(
        "policies:
  topic-level:
    schedule: [0s, 7s]
    jitter: 0
  endpoint-level:
    jitter: 0
    sns: {{healthyRetryPolicy: {{minDelayTarget: 3, maxDelayTarget: 3, numRetries: 1}}}}
topics:
  with-policy: {{policy: topic-level}}
  plain: {{}}
endpoints:
  own:
    url: {url}
    topics: [with-policy, plain]
    policy: endpoint-level
  inherits:
    url: {url}
    topics: [with-policy]
  by-default:
    url: {url}
    topics: [plain]
",
        url = sink.url("/hook")
    ))
    .await;
    gw.ingest("with-policy", "x", json!({})).await;
    gw.ingest("plain", "x", json!({})).await;
    sink.wait_for(4, WAIT).await;

    let (_, list) = gw.get("/v1/deliveries?limit=10").await;
    let deliveries = list["deliveries"].as_array().unwrap();
    assert_eq!(deliveries.len(), 4);
    for summary in deliveries {
        let id = summary["id"].as_str().unwrap();
        let d = settled(&gw, id).await;
        let wait = scheduled_wait(&d);
        let endpoint = d["endpoint"].as_str().unwrap();
        let topic = d["topic"].as_str().unwrap();
        match (endpoint, topic) {
            // The endpoint's own policy, whatever the topic says.
            ("own", _) => assert_eq!(wait, Duration::from_secs(3), "{d}"),
            // No endpoint policy: the topic's.
            ("inherits", "with-policy") => assert_eq!(wait, Duration::from_secs(7), "{d}"),
            // Neither: `standard`, 30 s ± 20 %.
            ("by-default", "plain") => assert!(
                wait >= Duration::from_secs(24) && wait <= Duration::from_secs(36),
                "{d}"
            ),
            other => panic!("unexpected delivery {other:?}"),
        }
    }
}

/// How one receiver behaviour is expected to be treated.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// Another attempt is scheduled 10 s later, and made.
    Retried,
    /// The delivery fails after its first attempt.
    Permanent,
    /// The delivery fails and the endpoint is disabled at once.
    Disables,
}

/// A receiver behaviour: a scripted reply, or nobody listening.
#[derive(Debug, Clone)]
enum Receiver {
    Replies(Reply),
    ConnectionRefused,
}

/// One gateway with four endpoints, two classifying like SNS and two retrying everything,
/// each pair with an SNS document and a schedule policy, so that both the defaults and the
/// explicit `retry_on` are covered. Returns the error kind of the first attempt.
async fn classify_end_to_end(receiver: Receiver, under_sns: Expect, under_all: Expect) -> String {
    let sink = Sink::start().await;
    let url = match &receiver {
        Receiver::Replies(reply) => {
            sink.always(reply.clone());
            sink.url("/hook")
        }
        Receiver::ConnectionRefused => {
            // A port that was just free and is closed again: the connection is refused.
            let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let addr = listener.local_addr().unwrap();
            drop(listener);
            format!("http://{addr}/hook")
        }
    };
    let endpoint = |name: &str, policy: &str| {
        format!("  {name}:\n    url: {url}\n    topics: [t]\n    policy: {policy}\n    timeout: 300ms\n")
    };
    let gw = TestGateway::start(&format!(
        "policies:
  sns-doc:
    jitter: 0
    sns: {{healthyRetryPolicy: {{minDelayTarget: 10, maxDelayTarget: 10, numRetries: 1}}}}
  sns-doc-all:
    jitter: 0
    retry_on: all
    sns: {{healthyRetryPolicy: {{minDelayTarget: 10, maxDelayTarget: 10, numRetries: 1}}}}
  schedule:
    schedule: [0s, 10s]
    jitter: 0
  schedule-sns:
    schedule: [0s, 10s]
    jitter: 0
    retry_on: sns
topics:
  t: {{}}
endpoints:
{}{}{}{}",
        endpoint("sns-default", "sns-doc"),
        endpoint("sns-explicit", "schedule-sns"),
        endpoint("all-default", "schedule"),
        endpoint("all-explicit", "sns-doc-all"),
    ))
    .await;
    let cases = [
        ("sns-default", under_sns),
        ("sns-explicit", under_sns),
        ("all-default", under_all),
        ("all-explicit", under_all),
    ];
    gw.ingest("t", "x", json!({})).await;
    let t0 = gw.now();
    let mut ids = Vec::new();
    let mut kind = String::new();
    for (endpoint, expect) in cases {
        let id = delivery_of(&gw, endpoint).await;
        let d = settled(&gw, &id).await;
        assert_eq!(d["attempt_count"], 1, "{endpoint}: {d}");
        kind = d["attempts"][0]["error_kind"].as_str().unwrap().to_owned();
        match expect {
            Expect::Retried => {
                assert_eq!(d["status"], "pending", "{endpoint}: {d}");
                assert_eq!(time(&d["next_attempt_at"]), t0.plus(Duration::from_secs(10)));
            }
            Expect::Permanent => {
                assert_eq!(d["status"], "failed", "{endpoint}: {d}");
                assert_eq!(d["last_error"], "permanent", "{endpoint}: {d}");
            }
            Expect::Disables => {
                assert_eq!(d["status"], "failed", "{endpoint}: {d}");
                assert_eq!(d["last_error"], "gone", "{endpoint}: {d}");
            }
        }
        let (_, ep) = gw.get(&format!("/v1/endpoints/{endpoint}")).await;
        let state = if expect == Expect::Disables {
            "disabled"
        } else {
            "active"
        };
        assert_eq!(ep["state"], state, "{endpoint}: {ep}");
        ids.push((endpoint, expect, id));
    }
    // What was scheduled is attempted: the second attempt happens 10 s later, and the others
    // stay as they were.
    gw.advance(Duration::from_secs(10)).await;
    for (endpoint, expect, id) in ids {
        let d = if expect == Expect::Retried {
            gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| d["status"] == "failed")
                .await
        } else {
            settled(&gw, &id).await
        };
        let attempts = if expect == Expect::Retried { 2 } else { 1 };
        assert_eq!(d["attempt_count"], attempts, "{endpoint}: {d}");
    }
    kind
}

#[tokio::test]
async fn a_404_is_permanent_under_sns_and_retried_under_all() {
    let kind = classify_end_to_end(
        Receiver::Replies(Reply::status(404)),
        Expect::Permanent,
        Expect::Retried,
    )
    .await;
    assert_eq!(kind, "http_status");
}

#[tokio::test]
async fn a_429_is_retried_under_both() {
    let kind = classify_end_to_end(
        Receiver::Replies(Reply::status(429)),
        Expect::Retried,
        Expect::Retried,
    )
    .await;
    assert_eq!(kind, "http_status");
}

#[tokio::test]
async fn server_errors_are_retried_under_both() {
    for status in [500, 503] {
        let kind = classify_end_to_end(
            Receiver::Replies(Reply::status(status)),
            Expect::Retried,
            Expect::Retried,
        )
        .await;
        assert_eq!(kind, "http_status");
    }
}

#[tokio::test]
async fn a_timeout_is_retried_under_both() {
    let kind = classify_end_to_end(
        Receiver::Replies(Reply::status(200).delayed(Duration::from_secs(3))),
        Expect::Retried,
        Expect::Retried,
    )
    .await;
    assert_eq!(kind, "timeout");
}

#[tokio::test]
async fn a_refused_connection_is_retried_under_both() {
    let kind = classify_end_to_end(Receiver::ConnectionRefused, Expect::Retried, Expect::Retried).await;
    assert_eq!(kind, "connect");
}

#[tokio::test]
async fn a_410_disables_the_endpoint_under_both() {
    let kind = classify_end_to_end(
        Receiver::Replies(Reply::status(410)),
        Expect::Disables,
        Expect::Disables,
    )
    .await;
    assert_eq!(kind, "http_status");
}

/// How many requests `sink` got for `endpoint`, once every attempt started so far has finished
/// and is recorded: none is in flight and the log's succeeded count matches what arrived.
/// (An attempt that ended but is not yet recorded still reads `pending`; in flight it reads
/// `delivering`.)
async fn sent_so_far(gw: &TestGateway, endpoint: &str, sink: &Sink) -> usize {
    gw.wait_until(
        &format!("/v1/deliveries?endpoint={endpoint}&limit=100"),
        WAIT,
        |l| {
            let deliveries = l["deliveries"].as_array().unwrap();
            let succeeded = deliveries.iter().filter(|d| d["status"] == "succeeded").count();
            deliveries.iter().all(|d| d["status"] != "delivering") && succeeded == sink.count()
        },
    )
    .await;
    sink.count()
}

#[tokio::test]
async fn max_per_second_spreads_deliveries_at_the_rate_without_slowing_other_endpoints() {
    let slow = Sink::start().await;
    let fast = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\n  barrier: {{}}\nendpoints:\n  slow:\n    url: {}\n    topics: [t]\n    max_per_second: 5\n  fast:\n    url: {}\n    topics: [t, barrier]\n    max_in_flight: 40\n",
        slow.url("/slow"),
        fast.url("/fast")
    ))
    .await;
    let events: Vec<Value> = (0..20)
        .map(|i| json!({"type": "x", "payload": {"i": i}}))
        .collect();
    let (status, body) = gw
        .post("/v1/topics/t/events/batch", json!({"events": events}))
        .await;
    assert_eq!(status, 202, "{body}");

    // The other endpoint gets all 20 at once: the clock has not moved.
    fast.wait_for(20, WAIT).await;
    let mut fast_expected = 20;
    let mut per_second = Vec::new();
    for second in 0..5 {
        if second > 0 {
            gw.advance(Duration::from_secs(1)).await;
        }
        // A barrier: an event only `fast` receives is dispatched at this simulated time, in the
        // same pass as anything the throttle lets through, so once it has arrived the set of
        // attempts started at this time is complete.
        gw.ingest("barrier", "tick", json!({})).await;
        fast_expected += 1;
        fast.wait_for(fast_expected, WAIT).await;
        let total = sent_so_far(&gw, "slow", &slow).await;
        per_second.push(total - per_second.iter().sum::<usize>());
    }
    // An average of 5 per second: a burst of one second's worth, then 5 in every second.
    assert_eq!(per_second, [5, 5, 5, 5, 0]);
    assert_eq!(slow.count(), 20);
    let mut seen: Vec<i64> = slow
        .received()
        .iter()
        .map(|r| r.json()["i"].as_i64().unwrap())
        .collect();
    seen.sort();
    assert_eq!(seen, (0..20).collect::<Vec<_>>());
}

#[tokio::test]
async fn an_sns_throttle_policy_sends_one_every_period_after_the_burst() {
    let sink = Sink::start().await;
    let fast = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "policies:
  throttled:
    sns: {{throttlePolicy: {{maxReceivesPerSecond: 2}}}}
topics:
  t: {{policy: throttled}}
  barrier: {{}}
endpoints:
  e:
    url: {}
    topics: [t]
  fast:
    url: {}
    topics: [barrier]
",
        sink.url("/hook"),
        fast.url("/fast")
    ))
    .await;
    let events: Vec<Value> = (0..6)
        .map(|i| json!({"type": "x", "payload": {"i": i}}))
        .collect();
    let (status, _) = gw
        .post("/v1/topics/t/events/batch", json!({"events": events}))
        .await;
    assert_eq!(status, 202);
    // Step through 2.5 simulated seconds in 100 ms steps and note when each send started.
    let mut started_at_ms = Vec::new();
    let mut barriers = 0;
    for step in 0..=25u64 {
        if step > 0 {
            gw.advance(Duration::from_millis(100)).await;
        }
        gw.ingest("barrier", "tick", json!({})).await;
        barriers += 1;
        fast.wait_for(barriers, WAIT).await;
        let total = sent_so_far(&gw, "e", &sink).await;
        while started_at_ms.len() < total {
            started_at_ms.push(step * 100);
        }
    }
    // A burst of 2 (one second's worth), then one every 500 ms.
    assert_eq!(started_at_ms, [0, 0, 500, 1000, 1500, 2000]);
}

#[tokio::test]
async fn the_request_policy_sets_the_content_type() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "policies:
  sns-no-request-policy:
    sns: {{healthyRetryPolicy: {{numRetries: 1}}}}
  sns-json:
    sns: {{requestPolicy: {{headerContentType: application/json}}}}
  sns-text:
    sns: '{{\"requestPolicy\": {{\"headerContentType\": \"text/plain\"}}}}'
  schedule:
    schedule: [0s, 1m]
topics:
  t: {{}}
endpoints:
  sns-default: {{url: '{url}/sns-default', topics: [t], policy: sns-no-request-policy}}
  sns-json: {{url: '{url}/sns-json', topics: [t], policy: sns-json}}
  sns-text: {{url: '{url}/sns-text', topics: [t], policy: sns-text}}
  http-default-preset: {{url: '{url}/http-default-preset', topics: [t], policy: sns-http-default}}
  schedule: {{url: '{url}/schedule', topics: [t], policy: schedule}}
",
        url = format!("http://{}", sink.addr)
    ))
    .await;
    // A JSON event and a raw CSV one.
    gw.ingest("t", "x", json!({"a": 1})).await;
    let (status, body) = gw
        .send(
            gw.post_builder("/v1/topics/t/events")
                .header("content-type", "text/csv")
                .header("event-type", "report.ready")
                .body("a,b\n1,2\n"),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let received = sink.wait_for(10, WAIT).await;
    let content_types = |path: &str| -> Vec<String> {
        let mut types: Vec<String> = received
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.header("content-type").to_owned())
            .collect();
        types.sort();
        types
    };
    let sns_default = "text/plain; charset=UTF-8";
    assert_eq!(content_types("/sns-default"), [sns_default, sns_default]);
    assert_eq!(
        content_types("/sns-json"),
        ["application/json", "application/json"]
    );
    assert_eq!(content_types("/sns-text"), ["text/plain", "text/plain"]);
    assert_eq!(content_types("/http-default-preset"), [sns_default, sns_default]);
    // A schedule policy has no request policy: the event's own type.
    assert_eq!(content_types("/schedule"), ["application/json", "text/csv"]);
    // The body is never changed by the content type.
    let csv: Vec<&[u8]> = received
        .iter()
        .filter(|r| r.body.starts_with(b"a,b"))
        .map(|r| r.body.as_ref())
        .collect();
    assert_eq!(csv.len(), 5);
    assert!(csv.iter().all(|b| *b == b"a,b\n1,2\n"));
}
