//! Endpoint health through the whole gateway (SPEC §5): counts of failed attempts, days without
//! success on the manual clock, the exact timers, the effects of a pause, operator events and
//! persistence across a restart. The last test drives the real binary with `--time-scale`.

use std::time::Duration;

use hookgate::model::Timestamp;
use serde_json::{Value, json};

use crate::support::{Reply, START, Sink, TestGateway};

pub const WAIT: Duration = Duration::from_secs(10);
const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

pub fn time(v: &Value) -> Timestamp {
    Timestamp::parse_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}"))).unwrap()
}

/// A sink on the `probe` topic that always answers 200, used as a barrier: once a probe event
/// has been sent, the scheduler has run a full turn (timers included) after everything the test
/// did before it.
pub struct Probe {
    sink: Sink,
}

impl Probe {
    pub async fn start() -> Probe {
        Probe {
            sink: Sink::start().await,
        }
    }

    /// The YAML lines of the probe's topic and endpoint (to put under `topics:` and
    /// `endpoints:`).
    pub fn topic_yaml(&self) -> &'static str {
        "  probe: {}\n"
    }

    pub fn endpoint_yaml(&self) -> String {
        format!(
            "  probe:\n    url: {}\n    topics: [probe]\n",
            self.sink.url("/probe")
        )
    }

    /// Returns once the scheduler has handled a turn that started after this call.
    pub async fn barrier(&self, gw: &TestGateway) {
        let before = self.sink.count();
        gw.ingest("probe", "probe", json!({})).await;
        self.sink.wait_for(before + 1, WAIT).await;
    }
}

/// The config of these tests: endpoint `e` on topic `t` with a slow exact schedule (a retry
/// every 30 h), so the test decides with the clock when attempts happen.
fn config(sink: &Sink, probe: &Probe, extra: &str) -> String {
    format!(
        "policies:\n  slow:\n    schedule: [0s, 30h, 30h, 30h, 30h, 30h]\n    deadline: 10d\n    jitter: 0\n\
         {extra}topics:\n  t: {{}}\n{}endpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: slow\n{}",
        probe.topic_yaml(),
        sink.url("/hook"),
        probe.endpoint_yaml()
    )
}

pub async fn endpoint(gw: &TestGateway, name: &str) -> Value {
    let (status, body) = gw.get(&format!("/v1/endpoints/{name}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Waits until the endpoint is in `state` and its history (written by the store, after the
/// in-memory state) ends with that state.
pub async fn wait_state(gw: &TestGateway, name: &str, state: &str) -> Value {
    gw.wait_until(&format!("/v1/endpoints/{name}"), WAIT, |e| {
        e["state"] == state
            && e["history"]
                .as_array()
                .and_then(|h| h.last())
                .is_some_and(|last| last["state"] == state)
    })
    .await
}

pub async fn wait_failures(gw: &TestGateway, name: &str, n: u64) -> Value {
    gw.wait_until(&format!("/v1/endpoints/{name}"), WAIT, |e| {
        e["consecutive_failures"].as_u64() == Some(n)
    })
    .await
}

fn last_history(e: &Value) -> &Value {
    e["history"].as_array().unwrap().last().unwrap()
}

/// Every delivery of an endpoint, newest first.
pub async fn deliveries_of(gw: &TestGateway, name: &str) -> Vec<Value> {
    let (_, list) = gw
        .get(&format!("/v1/deliveries?endpoint={name}&limit=1000"))
        .await;
    list["deliveries"].as_array().unwrap().clone()
}

async fn ingest_n(gw: &TestGateway, n: usize) {
    for i in 0..n {
        gw.ingest("t", "order.created", json!({"i": i})).await;
    }
}

#[tokio::test]
async fn five_failed_attempts_degrade_and_one_success_recovers() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let probe = Probe::start().await;
    let gw = TestGateway::start(&config(&sink, &probe, "")).await;

    ingest_n(&gw, 4).await;
    let e = wait_failures(&gw, "e", 4).await;
    probe.barrier(&gw).await;
    let e2 = endpoint(&gw, "e").await;
    assert_eq!(e2["consecutive_failures"], 4, "{e2}");
    assert_eq!(e["state"], "active", "4 failures are not enough: {e}");
    assert_eq!(e["history"], json!([]));
    assert_eq!(time(&e["failing_since"]), START);

    gw.advance(Duration::from_secs(60));
    ingest_n(&gw, 1).await;
    let e = wait_state(&gw, "e", "degraded").await;
    assert_eq!(e["consecutive_failures"], 5);
    assert_eq!(
        time(&e["failing_since"]),
        START,
        "days count from the first failure"
    );
    assert_eq!(e["last_success_at"], Value::Null);
    let h = last_history(&e);
    assert_eq!(time(&h["at"]), START.plus(Duration::from_secs(60)));
    assert_eq!(h["reason"], "5 failed attempts in a row");
    // The list shows the same.
    let (_, list) = gw.get("/v1/endpoints").await;
    let listed = list["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .find(|x| x["name"] == "e")
        .unwrap()
        .clone();
    assert_eq!(listed["state"], "degraded");
    assert_eq!(listed["consecutive_failures"], 5);

    // A degraded endpoint still receives events.
    let accepted = gw.ingest("t", "order.created", json!({})).await;
    assert_eq!(accepted["deliveries"], 1);
    wait_failures(&gw, "e", 6).await;

    sink.always(Reply::status(200));
    gw.advance(30 * HOUR);
    let e = wait_state(&gw, "e", "active").await;
    let recovered_at = START.plus(Duration::from_secs(60)).plus(30 * HOUR);
    assert_eq!(e["consecutive_failures"], 0);
    assert_eq!(e["failing_since"], Value::Null);
    assert_eq!(time(&e["last_success_at"]), recovered_at);
    let h = last_history(&e);
    assert_eq!(h["reason"], "delivery succeeded");
    assert_eq!(time(&h["at"]), recovered_at);
}

#[tokio::test]
async fn three_days_and_twenty_failures_pause_then_seven_days_disable_exactly_on_time() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let probe = Probe::start().await;
    let yaml = config(&sink, &probe, "");
    let mut gw = TestGateway::start(&yaml).await;

    // 10 deliveries fail at once, again after 30 h and after 60 h: 30 failures in a row.
    ingest_n(&gw, 10).await;
    let e = wait_state(&gw, "e", "degraded").await;
    assert_eq!(time(&e["failing_since"]), START);
    wait_failures(&gw, "e", 10).await;
    gw.advance(30 * HOUR);
    wait_failures(&gw, "e", 20).await;
    // 20 failures but only 30 h: still degraded.
    probe.barrier(&gw).await;
    assert_eq!(endpoint(&gw, "e").await["state"], "degraded");
    gw.advance(30 * HOUR);
    wait_failures(&gw, "e", 30).await;
    // One more delivery, so that 11 are waiting (next attempts at 90 h) when the pause comes.
    ingest_n(&gw, 1).await;
    wait_failures(&gw, "e", 31).await;
    let pending = deliveries_of(&gw, "e").await;
    assert_eq!(pending.len(), 11);
    assert!(pending.iter().all(|d| d["status"] == "pending"), "{pending:?}");

    // The pause comes from the timer at exactly 3 days, with no attempt running.
    let pause_at = START.plus(3 * DAY);
    gw.clock.set(pause_at.minus(Duration::from_secs(1)));
    probe.barrier(&gw).await;
    assert_eq!(endpoint(&gw, "e").await["state"], "degraded");
    gw.advance(Duration::from_secs(1));
    let e = wait_state(&gw, "e", "paused").await;
    let h = last_history(&e);
    assert_eq!(time(&h["at"]), pause_at);
    assert_eq!(
        h["reason"],
        "3 days without success and 20 failed attempts in a row"
    );
    assert_eq!(e["consecutive_failures"], 31);
    let sent_before_pause = sink.count();
    assert_eq!(sent_before_pause, 31);

    // Waiting deliveries fail with endpoint_paused and are not resent by themselves.
    gw.wait_until("/v1/deliveries?endpoint=e&status=failed", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 11
    })
    .await;
    for d in deliveries_of(&gw, "e").await {
        assert_eq!(d["status"], "failed", "{d}");
        assert_eq!(d["last_error"], "endpoint_paused", "{d}");
    }

    // New events are not queued for it, but they are in the event log.
    let accepted = gw.ingest("t", "order.created", json!({"late": true})).await;
    assert_eq!(accepted["deliveries"], 0);
    let (status, event) = gw
        .get(&format!("/v1/events/{}", accepted["id"].as_str().unwrap()))
        .await;
    assert_eq!(status, 200);
    assert_eq!(event["deliveries"], json!([]));

    // State, counters and history survive a restart, and the disable timer is armed again.
    let before = endpoint(&gw, "e").await;
    gw.stop().await;
    let gw = TestGateway::start_in(gw.dir.clone(), &yaml, gw.clock.clone()).await;
    let after = endpoint(&gw, "e").await;
    for key in [
        "state",
        "consecutive_failures",
        "failing_since",
        "last_success_at",
        "state_changed_at",
        "history",
    ] {
        assert_eq!(after[key], before[key], "{key} after a restart");
    }

    // The retries that were due at 90 h are not made.
    gw.clock.set(START.plus(90 * HOUR));
    probe.barrier(&gw).await;
    assert_eq!(sink.count(), sent_before_pause);

    let disable_at = START.plus(7 * DAY);
    gw.clock.set(disable_at.minus(Duration::from_secs(1)));
    probe.barrier(&gw).await;
    assert_eq!(endpoint(&gw, "e").await["state"], "paused");
    gw.advance(Duration::from_secs(1));
    let e = wait_state(&gw, "e", "disabled").await;
    let h = last_history(&e);
    assert_eq!(time(&h["at"]), disable_at);
    assert_eq!(h["reason"], "7 days without success");
    let states: Vec<&str> = e["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["state"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["degraded", "paused", "disabled"]);
    assert_eq!(sink.count(), sent_before_pause, "nothing is sent while paused");
}

#[tokio::test]
async fn a_410_disables_the_endpoint_at_once() {
    let sink = Sink::start().await;
    sink.script(std::iter::repeat_n(Reply::status(503), 5));
    sink.always(Reply::status(410));
    let probe = Probe::start().await;
    let gw = TestGateway::start(&config(&sink, &probe, "")).await;

    ingest_n(&gw, 5).await;
    wait_state(&gw, "e", "degraded").await;
    gw.advance(Duration::from_secs(60));
    let accepted = gw.ingest("t", "order.created", json!({})).await;
    let e = wait_state(&gw, "e", "disabled").await;
    assert_eq!(e["consecutive_failures"], 6);
    let h = last_history(&e);
    assert_eq!(h["reason"], "410 Gone from the endpoint");
    assert_eq!(time(&h["at"]), START.plus(Duration::from_secs(60)));

    // The 410'd delivery is not retried, and neither are the five waiting ones.
    let (_, event) = gw
        .get(&format!("/v1/events/{}", accepted["id"].as_str().unwrap()))
        .await;
    let d = &event["deliveries"][0];
    assert_eq!(d["status"], "failed", "{event}");
    assert_eq!(d["attempt_count"], 1);
    gw.wait_until("/v1/deliveries?endpoint=e&status=pending", WAIT, |l| {
        l["deliveries"].as_array().unwrap().is_empty()
    })
    .await;
    gw.advance(30 * HOUR);
    probe.barrier(&gw).await;
    assert_eq!(sink.count(), 6);
    let accepted = gw.ingest("t", "order.created", json!({})).await;
    assert_eq!(accepted["deliveries"], 0);
}

#[tokio::test]
async fn every_state_change_is_published_on_the_operator_topic() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let pager = Sink::start().await;
    let probe = Probe::start().await;
    let yaml = config(&sink, &probe, "health:\n  operator_topic: ops\n").replace(
        "endpoints:\n",
        &format!(
            "endpoints:\n  pager:\n    url: {}\n    topics: [ops]\n",
            pager.url("/alerts")
        ),
    );
    let gw = TestGateway::start(&yaml).await;

    ingest_n(&gw, 20).await;
    wait_failures(&gw, "e", 20).await;
    pager.wait_for(1, WAIT).await;
    gw.advance(3 * DAY);
    pager.wait_for(2, WAIT).await;
    gw.advance(4 * DAY);
    pager.wait_for(3, WAIT).await;
    let (status, _) = gw.post("/v1/endpoints/e/reenable", json!({})).await;
    assert_eq!(status, 200);
    pager.wait_for(4, WAIT).await;
    // Degraded again, then a success: `recovered`.
    ingest_n(&gw, 5).await;
    pager.wait_for(5, WAIT).await;
    sink.always(Reply::status(200));
    gw.advance(30 * HOUR);
    let got = pager.wait_for(6, WAIT).await;

    let payloads: Vec<Value> = got.iter().map(|r| r.json()).collect();
    let seen: Vec<(&str, &str)> = payloads
        .iter()
        .map(|p| (p["type"].as_str().unwrap(), p["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        seen,
        [
            ("hookgate.endpoint.degraded", "degraded"),
            ("hookgate.endpoint.paused", "paused"),
            ("hookgate.endpoint.disabled", "disabled"),
            ("hookgate.endpoint.reenabled", "active"),
            ("hookgate.endpoint.degraded", "degraded"),
            ("hookgate.endpoint.recovered", "active"),
        ]
    );
    assert!(payloads.iter().all(|p| p["endpoint"] == "e"), "{payloads:?}");
    assert_eq!(payloads[1]["consecutive_failures"], 20);
    // The events are ordinary events of the operator topic, with their types.
    for r in &got {
        let (status, event) = gw.get(&format!("/v1/events/{}", r.header("webhook-id"))).await;
        assert_eq!(status, 200);
        assert_eq!(event["topic"], "ops");
        assert_eq!(event["type"], r.json()["type"]);
    }
    assert_eq!(pager.count(), 6);
}

#[tokio::test]
async fn deliveries_left_pending_for_a_paused_endpoint_are_not_sent_after_a_restart() {
    use std::sync::Arc;

    use hookgate::model::Event;
    use hookgate::store::{IngestBatch, IngestItem, SqliteOptions, SqliteStore, Store};

    let sink = Sink::start().await;
    sink.always(Reply::status(410));
    let probe = Probe::start().await;
    let yaml = config(&sink, &probe, "");
    let mut gw = TestGateway::start(&yaml).await;
    gw.ingest("t", "order.created", json!({})).await;
    wait_state(&gw, "e", "disabled").await;
    gw.stop().await;

    // As if the gateway had stopped after committing the disable but before failing the
    // endpoint's waiting deliveries: one is still pending on disk.
    let store = SqliteStore::open(SqliteOptions::new(gw.dir.path().join("hookgate.db"))).unwrap();
    store
        .ingest(IngestBatch {
            items: vec![IngestItem {
                event: Arc::new(Event {
                    id: "evt_left_pending".into(),
                    topic: "t".into(),
                    event_type: "order.created".into(),
                    content_type: "application/json".into(),
                    payload: "{}".into(),
                    ordering_key: None,
                    received_at: gw.now(),
                }),
                endpoints: vec![Arc::from("e")],
            }],
            idempotency: None,
            now: gw.now(),
        })
        .await
        .unwrap();
    store.close().await;

    let gw = TestGateway::start_in(gw.dir.clone(), &yaml, gw.clock.clone()).await;
    let event = gw
        .wait_until("/v1/events/evt_left_pending", WAIT, |e| {
            e["deliveries"][0]["status"] == "failed"
        })
        .await;
    assert_eq!(event["deliveries"][0]["last_error"], "endpoint_paused");
    assert_eq!(event["deliveries"][0]["attempt_count"], 0);
    probe.barrier(&gw).await;
    assert_eq!(sink.count(), 1);
}
