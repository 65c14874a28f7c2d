//! Plugins through the whole gateway: bound in YAML, applied on delivery, hot-loaded, and
//! hostile ones failing only their own attempts.

use std::time::Duration;

use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use crate::plugin_build::{built_plugin, install_plugins};
use crate::support::{START, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(20);

/// Builds the plugins workspace (once per process) off the async threads and copies `names`
/// into a fresh temp dir's plugin folder.
async fn dir_with_plugins(names: &'static [&'static str]) -> std::sync::Arc<tempfile::TempDir> {
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let plugins = dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    tokio::task::spawn_blocking(move || install_plugins(&plugins, names))
        .await
        .unwrap();
    dir
}

fn clock() -> hookgate::clock::ManualClock {
    hookgate::clock::ManualClock::new(START)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_and_a_signer_shape_what_the_endpoint_receives() {
    let sink = Sink::start().await;
    let dir = dir_with_plugins(&["cloudevents", "github-signature"]).await;
    let gw = TestGateway::start_in(
        dir,
        &format!(
            "topics:\n  shop: {{}}\nendpoints:\n  ce:\n    url: {}\n    topics: [shop]\n    secret: \"It's a Secret to Everybody\"\n    transform: {{ plugin: cloudevents, config: {{ source: /shop, unknown_key: ignored }} }}\n    signer: {{ plugin: github-signature }}\n",
            sink.url("/ce")
        ),
        clock(),
    )
    .await;
    let accepted = gw.ingest("shop", "order.created", json!({"id": 42})).await;
    let r = &sink.wait_for(1, WAIT).await[0];
    let body = r.json();
    assert_eq!(body["specversion"], "1.0", "{body}");
    assert_eq!(body["id"], accepted["id"]);
    assert_eq!(body["type"], "order.created");
    assert_eq!(body["source"], "/shop");
    assert_eq!(body["data"], json!({"id": 42}));
    let mut mac = Hmac::<Sha256>::new_from_slice(b"It's a Secret to Everybody").unwrap();
    mac.update(&r.body);
    assert_eq!(
        r.header("x-hub-signature-256"),
        format!("sha256={}", hex::encode(mac.finalize().into_bytes()))
    );
    // The signer replaces the Standard Webhooks signature; the other headers stay.
    assert_eq!(r.header("webhook-signature"), "");
    assert_eq!(r.header("webhook-id"), accepted["id"].as_str().unwrap());
    let (_, list) = gw.get("/v1/deliveries").await;
    let id = list["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let d = gw
        .wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
            d["status"] == "succeeded"
        })
        .await;
    let note = d["attempts"][0]["plugins"].as_str().unwrap();
    assert!(
        note.contains("cloudevents@") && note.contains("github-signature@") && note.contains("ms"),
        "{note}"
    );
    let (_, plugins) = gw.get("/v1/plugins").await;
    let names: Vec<&str> = plugins["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, vec!["cloudevents", "github-signature"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_plugin_fails_only_its_own_attempts_while_others_keep_delivering() {
    let good = Sink::start().await;
    let bad = Sink::start().await;
    let dir = dir_with_plugins(&["loop-forever", "memory-bomb", "trap", "huge-output"]).await;
    let mut yaml = format!(
        "policies:\n  twice:\n    schedule: [0s, 1s]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  good:\n    url: {}\n    topics: [t]\n",
        good.url("/")
    );
    for fixture in ["loop-forever", "memory-bomb", "trap", "huge-output"] {
        yaml.push_str(&format!(
            "  {fixture}:\n    url: {}\n    topics: [t]\n    policy: twice\n    transform: {{ plugin: {fixture} }}\n",
            bad.url("/")
        ));
    }
    let gw = TestGateway::start_in(dir, &yaml, clock()).await;
    let events: Vec<_> = (0..10)
        .map(|i| json!({"type": "x", "payload": {"i": i}}))
        .collect();
    let (status, _) = gw
        .post("/v1/topics/t/events/batch", json!({"events": events}))
        .await;
    assert_eq!(status, 202);
    good.wait_for(10, WAIT).await;
    for (fixture, detail) in [
        ("loop-forever", "timeout"),
        ("memory-bomb", "memory"),
        ("trap", "trap"),
        ("huge-output", "output_too_large"),
    ] {
        let list = gw
            .wait_until(
                &format!("/v1/deliveries?endpoint={fixture}&limit=100"),
                WAIT,
                |l| {
                    l["deliveries"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .all(|d| d["attempt_count"] == 1 && d["status"] == "pending")
                },
            )
            .await;
        let id = list["deliveries"][0]["id"].as_str().unwrap();
        let (_, d) = gw.get(&format!("/v1/deliveries/{id}")).await;
        let attempt = &d["attempts"][0];
        assert_eq!(attempt["error_kind"], "plugin_error", "{fixture}: {d}");
        assert!(
            attempt["error"].as_str().unwrap().contains(detail),
            "{fixture}: {d}"
        );
        // The endpoint was never contacted: its health is untouched.
        let (_, ep) = gw.get(&format!("/v1/endpoints/{fixture}")).await;
        assert_eq!(
            (ep["state"].as_str(), ep["consecutive_failures"].as_u64()),
            (Some("active"), Some(0)),
            "{fixture}"
        );
    }
    assert_eq!(bad.count(), 0);
    // …and they are retried by policy, failing the same way, while the gateway keeps serving.
    gw.advance(Duration::from_secs(1)).await;
    for fixture in ["loop-forever", "memory-bomb", "trap", "huge-output"] {
        gw.wait_until(
            &format!("/v1/deliveries?endpoint={fixture}&status=failed&limit=100"),
            WAIT,
            |l| l["deliveries"].as_array().unwrap().len() == 10,
        )
        .await;
    }
    gw.ingest("t", "x", json!({"after": true})).await;
    good.wait_for(11, WAIT).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_plugin_fails_attempts_until_it_is_dropped_into_the_folder() {
    let sink = Sink::start().await;
    let dir = dir_with_plugins(&[]).await;
    let plugin_dir = dir.path().join("plugins");
    let gw = TestGateway::start_in(
        dir,
        &format!(
            "policies:\n  p:\n    schedule: [0s, 1m]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: p\n    transform: {{ plugin: cloudevents, config: {{ source: /x }} }}\n",
            sink.url("/")
        ),
        clock(),
    )
    .await;
    gw.ingest("t", "x", json!({"n": 1})).await;
    let list = gw
        .wait_until("/v1/deliveries", WAIT, |l| {
            l["deliveries"][0]["attempt_count"] == 1
        })
        .await;
    assert!(
        list["deliveries"][0]["last_error"]
            .as_str()
            .unwrap()
            .contains("missing"),
        "{list}"
    );
    // Drop the file in (write elsewhere, rename into place): the watcher loads it.
    let source = tokio::task::spawn_blocking(|| built_plugin("cloudevents"))
        .await
        .unwrap();
    let staging = plugin_dir.join("cloudevents.wasm.tmp");
    std::fs::copy(source, &staging).unwrap();
    std::fs::rename(&staging, plugin_dir.join("cloudevents.wasm")).unwrap();
    gw.wait_until("/v1/plugins", WAIT, |p| {
        p["plugins"].as_array().is_some_and(|l| l.len() == 1)
    })
    .await;
    gw.advance(Duration::from_secs(60)).await;
    let r = &sink.wait_for(1, WAIT).await[0];
    assert_eq!(r.json()["specversion"], "1.0");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropping_transform_ends_the_delivery_as_succeeded_without_sending() {
    let sink = Sink::start().await;
    let dir = dir_with_plugins(&["drop-all"]).await;
    let gw = TestGateway::start_in(
        dir,
        &format!(
            "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    transform: {{ plugin: drop-all, config: {{ reason: not for this customer }} }}\n",
            sink.url("/")
        ),
        clock(),
    )
    .await;
    gw.ingest("t", "internal.audit", json!({})).await;
    let list = gw
        .wait_until("/v1/deliveries", WAIT, |l| {
            l["deliveries"][0]["status"] == "succeeded"
        })
        .await;
    let last_error = list["deliveries"][0]["last_error"].as_str().unwrap();
    assert!(
        last_error.starts_with("dropped_by_plugin: not for this customer"),
        "{last_error}"
    );
    assert_eq!(sink.count(), 0);
}

/// A signer bound as a transform does not keep the gateway from starting (the plugin folder
/// may still change): it is reported, and the binding's attempts fail with `plugin_error`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_of_the_wrong_kind_is_reported_at_start() {
    let dir = dir_with_plugins(&["github-signature"]).await;
    let gw = TestGateway::start_in(
        dir,
        "topics:\n  t: {}\nendpoints:\n  wrong-kind:\n    url: http://127.0.0.1:9/\n    topics: [t]\n    transform: { plugin: github-signature }\n",
        clock(),
    )
    .await;
    let (_, status) = gw.get("/v1/status").await;
    assert_eq!(
        status["problems"],
        json!([
            "endpoint wrong-kind binds transform plugin \"github-signature\" which is a signer, not a transformer"
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_check_describes_a_component_and_refuses_garbage() {
    let path = tokio::task::spawn_blocking(|| built_plugin("github-signature"))
        .await
        .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["plugin", "check"])
        .arg(&path)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("signer"), "{text}");
    let garbage = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(garbage.path(), b"not a component").unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["plugin", "check"])
        .arg(garbage.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(!out.stderr.is_empty());
}

/// `hookgate plugin check FILE ARGS…`: success, standard output, standard error.
fn plugin_check(file: &std::path::Path, args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["plugin", "check"])
        .arg(file)
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_check_passes_config_entries_to_the_sample_call() {
    let path = tokio::task::spawn_blocking(|| built_plugin("redact"))
        .await
        .unwrap();
    // Without its config, `redact` refuses the sample: reported, not an error.
    let (ok, out, err) = plugin_check(&path, &[]);
    assert!(ok, "{out}{err}");
    assert!(
        out.contains("sample call:  FAILED") && out.contains("bad_config"),
        "{out}"
    );
    // With it, the sample's customer e-mail is dropped; a JSON list works as in YAML.
    for paths in ["customer.email", r#"["customer.email","amount"]"#] {
        let config = format!("paths={paths}");
        let (ok, out, err) = plugin_check(&path, &["--config", &config, "--config", "unknown=ignored"]);
        assert!(ok, "{out}{err}");
        assert!(out.contains("sample call:  ok"), "{out}");
        assert!(
            out.contains("ord_123") && !out.contains("ada@example.com"),
            "{out}"
        );
    }
    let (ok, _, err) = plugin_check(&path, &["--config", "no-equals-sign"]);
    assert!(!ok);
    assert!(err.contains("KEY=VALUE"), "{err}");
}
