//! Endpoint health through the whole gateway (README "Endpoint health"): counts of failed attempts,
//! days without success on the manual clock, the exact timers, the effects of a pause, operator
//! events and persistence across a restart. The last test drives the real binary with
//! `--time-scale`.

use std::collections::HashSet;
use std::time::Duration;

use hookgate::model::Timestamp;
use serde_json::{Value, json};

use crate::support::{
    Probe, Reply, START, Sink, TestGateway, WAIT, deliveries_of, endpoint, metric, time, wait_failures,
    wait_state,
};

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(86_400);

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

fn last_history(e: &Value) -> &Value {
    e["history"].as_array().unwrap().last().unwrap()
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
    // Still 4 once everything before the probe has run (on PostgreSQL the view is the
    // database's, which the scheduler's writes reach a moment after its memory).
    let e2 = wait_failures(&gw, "e", 4).await;
    assert_eq!(e2["consecutive_failures"], 4, "{e2}");
    assert_eq!(e["state"], "active", "4 failures are not enough: {e}");
    assert_eq!(e["history"], json!([]));
    assert_eq!(time(&e["failing_since"]), START);

    gw.advance(Duration::from_secs(60)).await;
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
    // The metrics say so: the endpoint's state gauge (exported while it is not active) and
    // the count per state.
    let text = gw.metrics_text().await;
    let degraded = r#"hookgate_endpoint_state{endpoint="e",state="degraded"}"#;
    assert_eq!(metric(&text, degraded), 1.0, "{text}");
    assert_eq!(
        metric(&text, r#"hookgate_endpoints{state="degraded"}"#),
        1.0,
        "{text}"
    );

    // A degraded endpoint still receives events.
    let accepted = gw.ingest("t", "order.created", json!({})).await;
    assert_eq!(accepted["deliveries"], 1);
    wait_failures(&gw, "e", 6).await;

    sink.always(Reply::status(200));
    gw.advance(30 * HOUR).await;
    let e = wait_state(&gw, "e", "active").await;
    let recovered_at = START.plus(Duration::from_secs(60)).plus(30 * HOUR);
    assert_eq!(e["consecutive_failures"], 0);
    assert_eq!(e["failing_since"], Value::Null);
    assert_eq!(time(&e["last_success_at"]), recovered_at);
    let h = last_history(&e);
    assert_eq!(h["reason"], "delivery succeeded");
    assert_eq!(time(&h["at"]), recovered_at);
    // Active again: its gauge says so once more, and it counts as active.
    let text = gw.metrics_text().await;
    assert_eq!(metric(&text, degraded), 0.0, "{text}");
    assert_eq!(
        metric(&text, r#"hookgate_endpoint_state{endpoint="e",state="active"}"#),
        1.0,
        "{text}"
    );
    assert_eq!(
        metric(&text, r#"hookgate_endpoints{state="degraded"}"#),
        0.0,
        "{text}"
    );
    let active = metric(&text, r#"hookgate_endpoints{state="active"}"#);
    assert_eq!(
        active,
        gw.get("/v1/status").await.1["endpoints"].as_f64().unwrap(),
        "{text}"
    );
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
    gw.advance(30 * HOUR).await;
    wait_failures(&gw, "e", 20).await;
    // 20 failures but only 30 h: still degraded.
    probe.barrier(&gw).await;
    assert_eq!(endpoint(&gw, "e").await["state"], "degraded");
    gw.advance(30 * HOUR).await;
    wait_failures(&gw, "e", 30).await;
    // One more delivery, so that 11 are waiting (next attempts at 90 h) when the pause comes.
    ingest_n(&gw, 1).await;
    wait_failures(&gw, "e", 31).await;
    let pending = deliveries_of(&gw, "e").await;
    assert_eq!(pending.len(), 11);
    assert!(pending.iter().all(|d| d["status"] == "pending"), "{pending:?}");

    // The pause comes from the timer at exactly 3 days, with no attempt running.
    let pause_at = START.plus(3 * DAY);
    gw.advance_to(pause_at.minus(Duration::from_secs(1))).await;
    probe.barrier(&gw).await;
    assert_eq!(endpoint(&gw, "e").await["state"], "degraded");
    gw.advance(Duration::from_secs(1)).await;
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
    gw.advance_to(START.plus(90 * HOUR)).await;
    probe.barrier(&gw).await;
    assert_eq!(sink.count(), sent_before_pause);

    let disable_at = START.plus(7 * DAY);
    gw.advance_to(disable_at.minus(Duration::from_secs(1))).await;
    probe.barrier(&gw).await;
    assert_eq!(endpoint(&gw, "e").await["state"], "paused");
    gw.advance(Duration::from_secs(1)).await;
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
async fn deadlines_that_passed_while_the_gateway_was_down_apply_at_start_at_their_own_times() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let probe = Probe::start().await;
    let yaml = config(&sink, &probe, "");
    let mut gw = TestGateway::start(&yaml).await;
    ingest_n(&gw, 20).await;
    wait_failures(&gw, "e", 20).await;
    wait_state(&gw, "e", "degraded").await;
    gw.stop().await;

    // Down for ten days: both the pause (3 days) and the disable (7 days) are overdue.
    gw.clock.advance(10 * DAY);
    let gw = TestGateway::start_in(gw.dir.clone(), &yaml, gw.clock.clone()).await;
    let e = wait_state(&gw, "e", "disabled").await;
    let history: Vec<(String, Timestamp)> = e["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| (h["state"].as_str().unwrap().to_owned(), time(&h["at"])))
        .collect();
    assert_eq!(
        history,
        [
            ("degraded".to_owned(), START),
            ("paused".to_owned(), START.plus(3 * DAY)),
            ("disabled".to_owned(), START.plus(7 * DAY)),
        ]
    );
    // The deliveries that were waiting fail; none is attempted.
    gw.wait_until("/v1/deliveries?endpoint=e&status=failed", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 20
    })
    .await;
    probe.barrier(&gw).await;
    assert_eq!(sink.count(), 20);
}

/// Applies `yaml` (after the test base) to the running gateway, as a file reload would.
async fn reload(gw: &TestGateway, yaml: &str) {
    let path = gw.dir.path().join("reloaded.yaml");
    std::fs::write(
        &path,
        format!("{}{yaml}", crate::support::base_yaml(gw.dir.path())),
    )
    .unwrap();
    let config = hookgate::config::load_file(&path).unwrap();
    gw.gateway.as_ref().unwrap().reloader().apply(config).await;
}

#[tokio::test]
async fn changed_health_rules_move_the_timers_of_a_running_gateway() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let probe = Probe::start().await;
    let gw = TestGateway::start(&config(&sink, &probe, "")).await;
    ingest_n(&gw, 20).await;
    wait_failures(&gw, "e", 20).await;
    wait_state(&gw, "e", "degraded").await;

    // One day instead of three (no attempt runs in between: the retries come at 30 h).
    gw.advance(HOUR).await;
    reload(&gw, &config(&sink, &probe, "health:\n  pause_after: 1d\n")).await;
    gw.advance_to(START.plus(DAY).minus(Duration::from_secs(1))).await;
    probe.barrier(&gw).await;
    assert_eq!(endpoint(&gw, "e").await["state"], "degraded");
    gw.advance_to(START.plus(DAY)).await;
    let e = wait_state(&gw, "e", "paused").await;
    assert_eq!(
        time(&e["history"].as_array().unwrap().last().unwrap()["at"]),
        START.plus(DAY)
    );
    assert_eq!(
        e["history"].as_array().unwrap().last().unwrap()["reason"],
        "1 day without success and 20 failed attempts in a row"
    );
    assert_eq!(sink.count(), 20);

    // A disable_after lowered below the time already spent applies at once.
    gw.advance_to(START.plus(2 * DAY)).await;
    reload(
        &gw,
        &config(
            &sink,
            &probe,
            "health:\n  pause_after: 1d\n  disable_after: 36h\n",
        ),
    )
    .await;
    let e = wait_state(&gw, "e", "disabled").await;
    assert_eq!(
        time(&e["history"].as_array().unwrap().last().unwrap()["at"]),
        START.plus(36 * HOUR),
        "recorded at the deadline the new rule gives"
    );
    assert_eq!(sink.count(), 20);
}

#[tokio::test]
async fn rules_lowered_past_the_last_change_do_not_date_a_change_before_it() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let probe = Probe::start().await;
    let gw = TestGateway::start(&config(&sink, &probe, "")).await;
    ingest_n(&gw, 20).await;
    wait_failures(&gw, "e", 20).await;
    gw.advance_to(START.plus(3 * DAY)).await;
    wait_state(&gw, "e", "paused").await;

    // Under the new rules the disable was due 12 h after the first failure, before the pause:
    // it happens now, and the history stays in order.
    gw.advance(HOUR).await;
    reload(
        &gw,
        &config(
            &sink,
            &probe,
            "health:\n  pause_after: 12h\n  disable_after: 12h\n",
        ),
    )
    .await;
    let e = wait_state(&gw, "e", "disabled").await;
    let times: Vec<Timestamp> = e["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| time(&h["at"]))
        .collect();
    assert_eq!(times, [START, START.plus(3 * DAY), START.plus(3 * DAY)]);
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
    gw.advance(Duration::from_secs(60)).await;
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
    gw.advance(30 * HOUR).await;
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
    gw.advance(3 * DAY).await;
    pager.wait_for(2, WAIT).await;
    gw.advance(4 * DAY).await;
    pager.wait_for(3, WAIT).await;
    let (status, _) = gw.post("/v1/endpoints/e/reenable", json!({})).await;
    assert_eq!(status, 200);
    pager.wait_for(4, WAIT).await;
    // Degraded again, then a success: `recovered`.
    ingest_n(&gw, 5).await;
    pager.wait_for(5, WAIT).await;
    sink.always(Reply::status(200));
    gw.advance(30 * HOUR).await;
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
    use hookgate::store::IngestBatch;

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
    let store = crate::support::open_store(gw.dir.path()).await;
    store
        .ingest(IngestBatch {
            items: vec![crate::support::item_for_e(
                "evt_left_pending",
                "order.created",
                gw.now(),
            )],
            idempotency: None,
            now: gw.now(),
        })
        .await
        .unwrap();
    store.close().await;
    drop(store);

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

/// The `hookgate` binary as a child process; killed (SIGKILL) if the test fails before it
/// stops it.
struct Binary {
    child: std::process::Child,
    base: String,
}

impl Binary {
    /// Starts `hookgate serve` with the simulated clock `time_scale` times faster, and waits
    /// until it listens (on a port the OS chose, read from its JSON log).
    async fn start(config: &std::path::Path, log: &std::path::Path, time_scale: u32) -> Binary {
        let _ = std::fs::remove_file(log);
        // Owned by a `Binary` at once, so that a failed start still kills the child.
        let mut binary = Binary {
            child: std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
                .args(["--log-format", "json", "serve", "--config"])
                .arg(config)
                .args(["--time-scale", &time_scale.to_string()])
                .stdout(std::process::Stdio::null())
                .stderr(std::fs::File::create(log).unwrap())
                .spawn()
                .unwrap(),
            base: String::new(),
        };
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let addr = text
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .find(|l| l["message"] == "hookgate is listening")
                .and_then(|l| l["addr"].as_str().map(str::to_owned));
            if let Some(addr) = addr {
                binary.base = format!("http://{addr}");
                return binary;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "the gateway did not start:\n{text}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGTERM, then waits for a clean exit.
    async fn stop(mut self) {
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(exit) = self.child.try_wait().unwrap() {
                assert!(exit.success(), "{exit}");
                return;
            }
            assert!(tokio::time::Instant::now() < deadline, "no exit after SIGTERM");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for Binary {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn get_json(http: &reqwest::Client, url: String) -> Value {
    let response = http.get(&url).send().await.unwrap();
    assert_eq!(response.status(), 200, "{url}");
    response.json().await.unwrap()
}

/// Ingests one event; answers its id and how many deliveries it got.
async fn post_event(http: &reqwest::Client, base: &str, event_type: &str) -> (String, u64) {
    let response = http
        .post(format!("{base}/v1/topics/t/events"))
        .json(&json!({"type": event_type, "payload": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 202);
    let body: Value = response.json().await.unwrap();
    (
        body["id"].as_str().unwrap().to_owned(),
        body["deliveries"].as_u64().unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_real_binary_with_a_day_per_second_walks_an_endpoint_down_and_replays_what_it_missed() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    const SCALE: u32 = 86_400;
    let real_start = std::time::Instant::now();
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("hookgate.yaml");
    std::fs::write(
        &config,
        format!(
            "server:\n  listen: 127.0.0.1:0\nstorage:\n  path: {d}/hookgate.db\nplugins:\n  dir: {d}/plugins\n  bundled: false\n\
             delivery:\n  allow_networks: [127.0.0.0/8]\n  timeout: 2s\n\
             policies:\n  hourly:\n    schedule: [0s, 2h, 2h, 2h, 2h]\n    jitter: 0\n\
             topics:\n  t: {{}}\n\
             endpoints:\n  e:\n    url: {url}\n    topics: [t]\n    types: [\"order.*\"]\n    policy: hourly\n",
            d = dir.path().display(),
            url = sink.url("/hook"),
        ),
    )
    .unwrap();
    let log = dir.path().join("gateway.log");
    let http = reqwest::Client::new();
    let gw = Binary::start(&config, &log, SCALE).await;
    let endpoint_url = format!("{}/v1/endpoints/e", gw.base);

    // An app keeps sending: an `order.*` event about every simulated hour, and a `user.*`
    // event (which `e` does not take) now and then.
    let stop = Arc::new(AtomicBool::new(false));
    let sent: Arc<Mutex<Vec<(String, String, u64)>>> = Arc::default();
    let app = {
        let (http, base, stop, sent) = (http.clone(), gw.base.clone(), stop.clone(), sent.clone());
        tokio::spawn(async move {
            let mut n = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let event_type = if n % 5 == 4 {
                    "user.created"
                } else {
                    "order.created"
                };
                let (id, deliveries) = post_event(&http, &base, event_type).await;
                sent.lock().unwrap().push((id, event_type.to_owned(), deliveries));
                n += 1;
                tokio::time::sleep(Duration::from_millis(40)).await;
            }
        })
    };

    // Watch the state: active → degraded → paused → disabled, within a bounded real time.
    let mut seen = vec!["active".to_owned()];
    let deadline = tokio::time::Instant::now() + Duration::from_secs(40);
    while seen.last().unwrap() != "disabled" {
        let e = get_json(&http, endpoint_url.clone()).await;
        let state = e["state"].as_str().unwrap().to_owned();
        if *seen.last().unwrap() != state {
            seen.push(state);
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "states seen: {seen:?}; last: {e}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    stop.store(true, Ordering::Relaxed);
    app.await.unwrap();
    assert_eq!(seen, ["active", "degraded", "paused", "disabled"]);
    let walked_down = real_start.elapsed();

    let e = get_json(&http, endpoint_url.clone()).await;
    let history = e["history"].as_array().unwrap().clone();
    let states: Vec<&str> = history.iter().map(|h| h["state"].as_str().unwrap()).collect();
    assert_eq!(states, ["degraded", "paused", "disabled"]);
    let failing_since = time(&e["failing_since"]);
    let paused_at = time(&history[1]["at"]);
    let disabled_at = time(&history[2]["at"]);
    // Attempts keep failing until the pause, so an attempt may be what pauses the endpoint,
    // a moment after the timer's deadline.
    let pause_lag = paused_at.since(failing_since.plus(3 * DAY));
    assert!(paused_at >= failing_since.plus(3 * DAY), "{e}");
    assert!(pause_lag <= 6 * HOUR, "paused {pause_lag:?} after the deadline");
    assert!(e["consecutive_failures"].as_u64().unwrap() >= 20, "{e}");
    // No attempt runs while paused: the timer disables it, recorded at its exact deadline.
    assert_eq!(disabled_at, failing_since.plus(7 * DAY), "{e}");

    // Nothing was sent while paused. The pause is recorded at its deadline and takes hold
    // when the timer runs, a real millisecond or two (a few simulated minutes) later; an
    // attempt already under way then may start in between. So: no attempt started later than
    // an hour after the pause, while the retries (every 2 h) would have gone on for 4 days
    // otherwise; the sink got exactly the attempts the gateway recorded; and no event
    // received since the pause was attempted at all.
    let list = get_json(&http, format!("{}/v1/deliveries?endpoint=e&limit=1000", gw.base)).await;
    let mut attempts = 0;
    for d in list["deliveries"].as_array().unwrap() {
        assert_ne!(d["status"], "pending", "{d}");
        let detail = get_json(
            &http,
            format!("{}/v1/deliveries/{}", gw.base, d["id"].as_str().unwrap()),
        )
        .await;
        for a in detail["attempts"].as_array().unwrap() {
            assert!(
                time(&a["started_at"]) < paused_at.plus(HOUR),
                "{a} after the pause at {paused_at}"
            );
            attempts += 1;
        }
    }
    assert_eq!(sink.count(), attempts);

    // Which events did `e` miss since the pause? Those received from then on, of its types.
    let sent = sent.lock().unwrap().clone();
    let mut missed = HashSet::new();
    let mut queued_while_paused = 0;
    for (id, event_type, deliveries) in &sent {
        let event = get_json(&http, format!("{}/v1/events/{id}", gw.base)).await;
        let received_at = time(&event["received_at"]);
        if received_at >= paused_at {
            for d in event["deliveries"].as_array().unwrap() {
                assert_eq!(d["attempt_count"], 0, "{event}");
            }
            queued_while_paused += deliveries;
            if event_type.starts_with("order.") {
                missed.insert(id.clone());
            }
        }
    }
    assert!(
        queued_while_paused <= 1,
        "{queued_while_paused} events queued while paused"
    );
    // How many depends on how many requests the app's loop gets through in the pause's four
    // real seconds: some 75 `order.*` events when each request is quick (one every 40 ms and
    // a bit), 9 once on a loaded machine. A few are enough to show that the replay sends
    // exactly those.
    assert!(missed.len() >= 3, "only {} missed events", missed.len());

    sink.always(Reply::status(200));
    let before_replay = sink.count();
    let response = http
        .post(format!("{endpoint_url}/reenable"))
        .json(&json!({"replay_since": paused_at.to_rfc3339()}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let reenabled: Value = response.json().await.unwrap();
    assert_eq!(
        reenabled["replayed"].as_u64().unwrap() as usize,
        missed.len(),
        "{reenabled}"
    );
    let got = sink.wait_for(before_replay + missed.len(), WAIT).await;
    let replayed: HashSet<String> = got[before_replay..]
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    assert_eq!(replayed, missed);
    wait_until_json(
        &http,
        &format!("{}/v1/deliveries?endpoint=e&status=pending", gw.base),
        |l| l["deliveries"].as_array().unwrap().is_empty(),
    )
    .await;
    let e = get_json(&http, endpoint_url.clone()).await;
    assert_eq!(e["state"], "active");
    assert!(!e["last_success_at"].is_null(), "{e}");
    assert_eq!(
        sink.count(),
        before_replay + missed.len(),
        "exactly the missed events"
    );

    // A restart keeps state, counters and history.
    let e_before = e;
    gw.stop().await;
    let gw = Binary::start(&config, &log, SCALE).await;
    let e_after = get_json(&http, format!("{}/v1/endpoints/e", gw.base)).await;
    for key in [
        "state",
        "consecutive_failures",
        "failing_since",
        "last_success_at",
        "state_changed_at",
        "history",
    ] {
        assert_eq!(e_after[key], e_before[key], "{key} after a restart");
    }
    gw.stop().await;
    println!(
        "real binary at {SCALE}x: active → disabled in {walked_down:?} real time, paused \
         {pause_lag:?} simulated after the deadline, {} events missed and replayed, whole test {:?}",
        missed.len(),
        real_start.elapsed()
    );
}

async fn wait_until_json(http: &reqwest::Client, url: &str, check: impl Fn(&Value) -> bool) -> Value {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let value = get_json(http, url.to_owned()).await;
        if check(&value) {
            return value;
        }
        assert!(tokio::time::Instant::now() < deadline, "last: {value}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
