//! Plugin bindings that cannot work are loud, and a backoff plugin drives real retries.
//!
//! A binding to a plugin that is missing (not yet dropped in, deleted, a typo) or of the wrong
//! kind is reported at start, at every config reload and whenever the plugin folder changes:
//! in the log, in `GET /v1/status` and the endpoint's `problems`, and as a metric.

use std::time::Duration;

use serde_json::{Value, json};

use crate::binary::RealGateway;
use crate::plugin_build::{built_plugin, install_plugins};
use crate::support::{Reply, START, Sink, TestGateway, captured_logs};

const WAIT: Duration = Duration::from_secs(20);

fn problems(body: &Value) -> Vec<String> {
    body["problems"]
        .as_array()
        .unwrap_or_else(|| panic!("no problems field in {body}"))
        .iter()
        .map(|p| p.as_str().unwrap().to_owned())
        .collect()
}

async fn metrics(gw: &TestGateway) -> String {
    reqwest::get(format!("{}/metrics", gw.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_or_wrong_kind_plugin_is_reported_until_it_is_put_right() {
    let sink = Sink::start().await;
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let yaml = format!(
        "topics:\n  t: {{}}\nendpoints:\n  billing-problems:\n    url: {}\n    topics: [t]\n    transform: {{ plugin: cloudevent }}\n    signer: {{ plugin: github-signature }}\n",
        sink.url("/")
    );
    let gw = TestGateway::start_in(dir.clone(), &yaml, hookgate::clock::ManualClock::new(START)).await;
    let missing_transform =
        "endpoint billing-problems binds transform plugin \"cloudevent\" which is not loaded";
    let missing_signer =
        "endpoint billing-problems binds signer plugin \"github-signature\" which is not loaded";

    let (_, status) = gw.get("/v1/status").await;
    assert_eq!(problems(&status), [missing_transform, missing_signer]);
    let (_, endpoint) = gw.get("/v1/endpoints/billing-problems").await;
    assert_eq!(problems(&endpoint), [missing_transform, missing_signer]);
    let logs = captured_logs();
    assert!(logs.contains(missing_transform), "the start warns");
    let text = metrics(&gw).await;
    assert!(
        text.lines()
            .any(|l| l.starts_with("hookgate_plugin_binding_problems{")
                && l.contains("endpoint=\"billing-problems\"")
                && l.contains("plugin=\"cloudevent\"")
                && l.contains("problem=\"missing\"")
                && l.ends_with(" 1")),
        "{text}"
    );

    // The signer is dropped in: its problem resolves without a restart.
    let plugins = dir.path().join("plugins");
    let install = plugins.clone();
    tokio::task::spawn_blocking(move || install_plugins(&install, &["github-signature"]))
        .await
        .unwrap();
    let status = gw
        .wait_until("/v1/status", WAIT, |s| {
            s["problems"].as_array().unwrap().len() == 1
        })
        .await;
    assert_eq!(problems(&status), [missing_transform]);

    // A backoff plugin dropped in under the transform's name is the wrong kind.
    let backoff = tokio::task::spawn_blocking(|| built_plugin("decorrelated-jitter"))
        .await
        .unwrap();
    std::fs::copy(backoff, plugins.join("cloudevent.wasm")).unwrap();
    let wrong_kind = "endpoint billing-problems binds transform plugin \"cloudevent\" which is a backoff, not a transformer";
    let status = gw
        .wait_until("/v1/status", WAIT, |s| s["problems"][0] == wrong_kind)
        .await;
    assert_eq!(problems(&status), [wrong_kind]);
    let text = metrics(&gw).await;
    assert!(
        text.lines().any(|l| l.contains("plugin=\"github-signature\"")
            && l.starts_with("hookgate_plugin_binding_problems{")
            && l.ends_with(" 0")),
        "a resolved problem's gauge drops to 0:\n{text}"
    );

    // Every config reload warns again about what is still wrong.
    let before = captured_logs().matches(wrong_kind).count();
    gw.reloader().reload_from_file().await;
    assert!(captured_logs().matches(wrong_kind).count() > before);

    // And the delivery fails with plugin_error, without counting against the endpoint.
    gw.ingest("t", "x", json!({})).await;
    let (_, list) = gw.get("/v1/deliveries?endpoint=billing-problems").await;
    let id = list["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let d = gw
        .wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| d["attempt_count"] == 1)
        .await;
    assert_eq!(d["attempts"][0]["error_kind"], "plugin_error", "{d}");
    let (_, endpoint) = gw.get("/v1/endpoints/billing-problems").await;
    assert_eq!(endpoint["consecutive_failures"], 0);
    assert!(sink.received().is_empty());
}

/// The API takes a binding to a plugin that is not loaded, or is of another kind, as the file
/// does: the endpoint is created, and the problem is in its answer, `GET /v1/status` and the
/// log until the plugin is put right (the API used to refuse it with a 400 the file did not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_accepts_a_missing_plugin_and_reports_it_as_the_file_does() {
    let sink = Sink::start().await;
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let gw = TestGateway::start_in(
        dir.clone(),
        "topics:\n  t: {}\n",
        hookgate::clock::ManualClock::new(START),
    )
    .await;
    let (status, saved) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "shop", "url": sink.url("/"), "topics": ["t"],
                   "transform": {"plugin": "shop-tag"}, "signer": {"plugin": "cloudevents"}}),
        )
        .await;
    assert_eq!(status, 201, "{saved}");
    let missing = "endpoint shop binds transform plugin \"shop-tag\" which is not loaded";
    let missing_signer = "endpoint shop binds signer plugin \"cloudevents\" which is not loaded";
    assert_eq!(problems(&saved), [missing, missing_signer]);
    let (_, status) = gw.get("/v1/status").await;
    assert_eq!(problems(&status), [missing, missing_signer]);
    assert!(captured_logs().contains(missing), "the change warns");

    // `cloudevents` dropped in is a transformer: the signer bound to it is the wrong kind, and
    // the transform's problem resolves once a transformer named `shop-tag` appears.
    let plugins = dir.path().join("plugins");
    let install = plugins.clone();
    tokio::task::spawn_blocking(move || install_plugins(&install, &["cloudevents"]))
        .await
        .unwrap();
    let wrong_kind = "endpoint shop binds signer plugin \"cloudevents\" which is a transformer, not a signer";
    gw.wait_until("/v1/status", WAIT, |s| s["problems"][1] == wrong_kind)
        .await;
    std::fs::copy(plugins.join("cloudevents.wasm"), plugins.join("shop-tag.wasm")).unwrap();
    let status = gw
        .wait_until("/v1/status", WAIT, |s| {
            s["problems"].as_array().unwrap().len() == 1
        })
        .await;
    assert_eq!(problems(&status), [wrong_kind]);
    let (_, endpoint) = gw.get("/v1/endpoints/shop").await;
    assert_eq!(problems(&endpoint), [wrong_kind]);
}

/// A backoff plugin bound to an endpoint decides the waits of real retries in the real binary:
/// `decorrelated-jitter` with `base_ms: 60000` and `cap_ms: 60000` always waits one simulated
/// minute, where the standard policy would wait 30 s, then 2 min.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backoff_plugin_sets_the_waits_between_real_attempts() {
    let sink = Sink::start().await;
    sink.script([Reply::status(503), Reply::status(503)]);
    sink.always(Reply::status(204));
    let dir = tempfile::tempdir().unwrap();
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    tokio::task::spawn_blocking(move || install_plugins(&plugins, &["decorrelated-jitter"]))
        .await
        .unwrap();
    let yaml = format!(
        "delivery:\n  allow_networks: [127.0.0.0/8]\npolicies:\n  exact:\n    schedule: [0s, 30s, 2m, 10m]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: exact\n    backoff: {{ plugin: decorrelated-jitter, config: {{ base_ms: 60000, cap_ms: 60000 }} }}\n",
        sink.url("/")
    );
    // One real second is a simulated minute: the plugin's waits take about a second each.
    let gw = RealGateway::start(dir.path(), &yaml, &["--time-scale", "60"]).await;
    let (status, body) = gw
        .post("/v1/topics/t/events", json!({"type": "x", "payload": {}}))
        .await;
    assert_eq!(status, 202, "{body}");
    let (_, list) = gw.get("/v1/deliveries?endpoint=e").await;
    let id = list["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let d = gw
        .wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
            d["status"] == "succeeded"
        })
        .await;
    let attempts = d["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3, "{d}");
    let started: Vec<i64> = attempts
        .iter()
        .map(|a| {
            hookgate::model::Timestamp::parse_rfc3339(a["started_at"].as_str().unwrap())
                .unwrap()
                .as_millis()
        })
        .collect();
    for (n, pair) in started.windows(2).enumerate() {
        let wait_ms = pair[1] - pair[0];
        // 60 s planned. The scaled clock turns each real millisecond of lateness into 60 ms;
        // the standard waits (30 s, then 2 min) would fall outside either way.
        assert!(
            (60_000..90_000).contains(&wait_ms),
            "wait before attempt {} was {wait_ms} ms, not the plugin's 60 s",
            n + 2
        );
    }
    let note = attempts[0]["plugins"].as_str().unwrap_or_default();
    assert!(note.contains("decorrelated-jitter@"), "{note}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempt_failing_on_a_missing_plugin_counts_as_a_missing_call() {
    let sink = Sink::start().await;
    let yaml = format!(
        "policies:\n  once:\n    schedule: [0s]\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: once\n    transform: {{ plugin: absentplugin }}\n",
        sink.url("/")
    );
    let gw = TestGateway::start(&yaml).await;
    gw.ingest("t", "x", json!({})).await;
    let list = gw
        .wait_until("/v1/deliveries", WAIT, |l| {
            l["deliveries"][0]["status"] == "failed"
        })
        .await;
    let id = list["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let (_, delivery) = gw.get(&format!("/v1/deliveries/{id}")).await;
    assert_eq!(
        delivery["attempts"][0]["error_kind"], "plugin_error",
        "{delivery}"
    );
    assert_eq!(sink.count(), 0, "nothing is sent without its transform");
    let text = metrics(&gw).await;
    let calls: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("hookgate_plugin_calls_total{") && l.contains("plugin=\"absentplugin\""))
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    assert!(calls[0].contains("outcome=\"missing\""), "{calls:?}");
    assert!(calls[0].ends_with(" 1"), "{calls:?}");
}
