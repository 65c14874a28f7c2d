//! JavaScript transformations through the whole gateway: Svix-style `handler(webhook)` code in
//! an endpoint's binding or in a `.js` file, run in the sandbox by the `js` plugin.

use std::time::Duration;

use serde_json::{Value, json};

use crate::plugin_build::install_plugins;
use crate::support::{START, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(30);

async fn dir_with_js() -> std::sync::Arc<tempfile::TempDir> {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    tokio::task::spawn_blocking(move || install_plugins(&plugins, &["js"]))
        .await
        .unwrap();
    dir
}

fn clock() -> hookgate::clock::ManualClock {
    hookgate::clock::ManualClock::new(START)
}

/// An endpoint of topic `t` with the JavaScript `code` as its transform (`policy` optional).
fn js_endpoint(name: &str, url: &str, policy: &str, code: &str) -> String {
    let code: String = code.lines().map(|line| format!("          {line}\n")).collect();
    format!(
        "  {name}:\n    url: {url}\n    topics: [t]\n{policy}    transform:\n      plugin: js\n      config:\n        code: |\n{code}"
    )
}

/// The first attempt of `endpoint`'s only delivery, once it has one.
async fn first_attempt(gw: &TestGateway, endpoint: &str) -> Value {
    let list = gw
        .wait_until(&format!("/v1/deliveries?endpoint={endpoint}"), WAIT, |l| {
            l["deliveries"][0]["attempt_count"].as_u64() >= Some(1)
        })
        .await;
    let id = list["deliveries"][0]["id"].as_str().unwrap();
    let (_, d) = gw.get(&format!("/v1/deliveries/{id}")).await;
    d
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_svix_style_transformation_reshapes_the_request_or_cancels_it() {
    let sink = Sink::start().await;
    let reshape = r#"function handler(webhook) {
  webhook.payload = { kind: webhook.eventType, order: webhook.payload.id };
  webhook.headers["x-shop"] = "eu";
  webhook.method = "PUT";
  return webhook;
}"#;
    let cancel = r#"function handler(webhook) {
  if (webhook.payload.test) {
    webhook.cancel = "test orders are not sent";
  }
  return webhook;
}"#;
    let yaml = format!(
        "topics:\n  t: {{}}\nendpoints:\n{}{}",
        js_endpoint("reshaped", &sink.url("/reshaped"), "", reshape),
        js_endpoint("filtered", &sink.url("/filtered"), "", cancel),
    );
    let gw = TestGateway::start_in(dir_with_js().await, &yaml, clock()).await;
    gw.ingest("t", "order.created", json!({"id": 42, "test": true}))
        .await;
    let received = sink.wait_for(1, WAIT).await;
    let r = &received[0];
    assert_eq!(r.path, "/reshaped");
    assert_eq!(r.method, "PUT");
    assert_eq!(r.json(), json!({"kind": "order.created", "order": 42}));
    assert_eq!(r.header("x-shop"), "eu");
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(r.header("hookgate-method"), "");
    // The gateway's own headers are set after the transform.
    assert!(r.header("webhook-id").starts_with("evt_"), "{r:?}");

    let d = gw
        .wait_until("/v1/deliveries?endpoint=filtered", WAIT, |l| {
            l["deliveries"][0]["status"] == "succeeded"
        })
        .await;
    assert_eq!(
        d["deliveries"][0]["last_error"],
        "dropped_by_plugin: test orders are not sent"
    );
    // A real order goes through the same code.
    gw.ingest("t", "order.created", json!({"id": 43})).await;
    let received = sink.wait_for(3, WAIT).await;
    let filtered: Vec<_> = received.iter().filter(|r| r.path == "/filtered").collect();
    assert_eq!(filtered.len(), 1);
    assert_eq!(
        (filtered[0].method.as_str(), filtered[0].json()),
        ("POST", json!({"id": 43}))
    );
}

/// Code that loops forever, allocates 1 GiB or throws fails only its own attempts, each with
/// its own failure detail, while a plain endpoint and a well-behaved script keep delivering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn looping_allocating_and_throwing_code_fails_only_its_own_attempts() {
    let good = Sink::start().await;
    let bad = Sink::start().await;
    let hostile = [
        ("loops", "function handler(w) { while (true) {} }", "timeout"),
        (
            "allocates",
            "function handler(w) { w.payload = new ArrayBuffer(1024 * 1024 * 1024); return w }",
            "memory",
        ),
        (
            "throws",
            "function handler(w) { throw new Error('no such customer') }",
            "plugin `js` plugin: js_error: Error: no such customer",
        ),
    ];
    let mut yaml = format!(
        "policies:\n  once:\n    schedule: [0s, 1h]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  plain:\n    url: {}\n    topics: [t]\n{}",
        good.url("/plain"),
        js_endpoint(
            "tagged",
            &good.url("/tagged"),
            "",
            "function handler(w) { w.headers['x-tag'] = '1'; return w }"
        ),
    );
    for (name, code, _) in hostile {
        yaml.push_str(&js_endpoint(name, &bad.url("/"), "    policy: once\n", code));
    }
    let gw = TestGateway::start_in(dir_with_js().await, &yaml, clock()).await;
    for n in 0..3 {
        gw.ingest("t", "x", json!({"n": n})).await;
    }
    let received = good.wait_for(6, WAIT).await;
    assert_eq!(received.iter().filter(|r| r.header("x-tag") == "1").count(), 3);
    for (name, _, detail) in hostile {
        let d = first_attempt(&gw, name).await;
        let attempt = &d["attempts"][0];
        assert_eq!(attempt["error_kind"], "plugin_error", "{name}: {d}");
        let error = attempt["error"].as_str().unwrap();
        assert!(error.contains(detail), "{name}: {error}");
        let (_, ep) = gw.get(&format!("/v1/endpoints/{name}")).await;
        assert_eq!(ep["consecutive_failures"], 0, "{name}: never contacted");
    }
    assert_eq!(bad.count(), 0);
    // The engine keeps serving after its instances were dropped.
    gw.ingest("t", "x", json!({"after": true})).await;
    good.wait_for(8, WAIT).await;
}

/// `tag.js` in the plugin folder is plugin `tag`; editing the file reloads it without a
/// restart, the next deliveries run the new code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn editing_a_js_file_reloads_the_transformation() {
    let sink = Sink::start().await;
    let dir = dir_with_js().await;
    let script = dir.path().join("plugins/tag.js");
    let write = |version: u32| {
        let staging = script.with_file_name(".tag.js.tmp");
        let code = format!("function handler(w) {{ w.payload = {{ version: {version} }}; return w }}");
        std::fs::write(&staging, code).unwrap();
        std::fs::rename(&staging, &script).unwrap();
    };
    write(1);
    let yaml = format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    transform: {{ plugin: tag }}\n",
        sink.url("/")
    );
    let gw = TestGateway::start_in(dir, &yaml, clock()).await;
    gw.ingest("t", "x", json!({})).await;
    assert_eq!(sink.wait_for(1, WAIT).await[0].json(), json!({"version": 1}));
    let sha_of_tag = |plugins: &Value| {
        plugins["plugins"]
            .as_array()
            .and_then(|l| l.iter().find(|p| p["name"] == "tag"))
            .map(|p| p["sha256"].clone())
    };
    let (_, plugins) = gw.get("/v1/plugins").await;
    let first = sha_of_tag(&plugins).expect("tag is loaded");

    write(2);
    gw.wait_until("/v1/plugins", WAIT, |p| {
        sha_of_tag(p).is_some_and(|sha| sha != first)
    })
    .await;
    gw.ingest("t", "x", json!({})).await;
    assert_eq!(sink.wait_for(2, WAIT).await[1].json(), json!({"version": 2}));
}
