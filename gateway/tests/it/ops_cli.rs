//! The operator commands and signals of the real binary.

use std::process::Command;
use std::time::Duration;

use serde_json::json;

use crate::support::{Reply, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(10);

/// Runs the real binary: whether it succeeded, its stdout, its stderr.
pub(crate) fn hookgate(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(args)
        .output()
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

async fn run(args: Vec<String>) -> (bool, String, String) {
    tokio::task::spawn_blocking(move || hookgate(&args.iter().map(String::as_str).collect::<Vec<_>>()))
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_commands_show_endpoints_and_deliveries_and_recover_them() {
    let sink = Sink::start().await;
    sink.script([Reply::status(500)]);
    let mut gw = TestGateway::start(&format!(
        "server:\n  api_keys: [ops-key]\npolicies:\n  once:\n    schedule: [0s]\ntopics:\n  t: {{}}\nendpoints:\n  billing:\n    url: {}\n    topics: [t]\n    policy: once\n",
        sink.url("/")
    ))
    .await;
    gw.ingest("t", "order.created", json!({})).await;
    let failed = gw
        .wait_until("/v1/deliveries?status=failed", WAIT, |l| {
            !l["deliveries"].as_array().unwrap().is_empty()
        })
        .await;
    let id = failed["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let target = vec![
        "--url".to_owned(),
        gw.base.clone(),
        "--api-key".to_owned(),
        "ops-key".to_owned(),
    ];
    let with = |cmd: &[&str]| {
        cmd.iter()
            .map(|s| s.to_string())
            .chain(target.clone())
            .collect::<Vec<_>>()
    };

    let (ok, out, err) = run(with(&["healthcheck"])).await;
    assert!(ok && out.trim() == "ok", "{out}{err}");
    let (ok, out, err) = run(with(&["healthcheck", "--ready"])).await;
    assert!(ok && out.trim() == "ok", "ready: {out}{err}");

    let (ok, out, err) = run(with(&["cluster"])).await;
    assert!(ok, "{err}");
    let nodes: Vec<&str> = out.lines().collect();
    assert!(
        nodes[0].starts_with("NODE") && nodes.len() == 2,
        "one node on SQLite: {out}"
    );
    assert!(nodes[1].ends_with(" 1"), "it holds the one endpoint: {out}");
    assert!(nodes[0].contains(" STATE "), "{out}");
    assert!(nodes[1].contains(" alive "), "{out}");

    let (ok, out, err) = run(with(&["endpoints"])).await;
    assert!(ok, "{err}");
    assert!(out.lines().next().unwrap().starts_with("NAME"), "{out}");
    assert!(out.contains("billing") && out.contains("active"), "{out}");

    let (ok, out, _) = run(with(&["endpoint", "billing"])).await;
    assert!(
        ok && out.contains("consecutive_failures") && out.contains("history:"),
        "{out}"
    );

    let (ok, out, _) = run(with(&["deliveries", "--status", "failed"])).await;
    assert!(ok && out.contains(&id) && out.contains("failed"), "{out}");

    let (ok, out, err) = run(with(&["redeliver", &id])).await;
    assert!(ok, "{err}");
    assert!(out.contains(&id), "{out}");
    sink.wait_for(2, WAIT).await;
    gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
        d["status"] == "succeeded"
    })
    .await;

    let since = gw.now().minus(Duration::from_secs(3600)).to_rfc3339();
    let (ok, out, err) = run(with(&["replay", "billing", "--since", &since, "--wait"])).await;
    assert!(ok, "{err}");
    assert!(out.contains("1 events queued again"), "{out}");
    assert!(out.contains("done: 1 succeeded"), "{out}");
    sink.wait_for(3, WAIT).await;

    // Without the key the gateway says no, and the command says how to give one: its own
    // flag and variable, not the API's header.
    let (ok, _, err) = run(vec!["endpoints".into(), "--url".into(), gw.base.clone()]).await;
    assert!(!ok && err.contains("401"), "{err}");
    assert!(
        err.contains("--api-key") && err.contains("HOOKGATE_API_KEY") && !err.contains("Authorization"),
        "{err}"
    );
    let (ok, _, err) = run(vec![
        "endpoints".into(),
        "--url".into(),
        gw.base.clone(),
        "--api-key".into(),
        "wrong-key".into(),
    ])
    .await;
    assert!(!ok && err.contains("403") && err.contains("--api-key"), "{err}");
    let base = gw.base.clone();
    gw.stop().await;
    // A container's health check fails once the gateway is gone.
    let (ok, _, err) = run(vec!["healthcheck".into(), "--url".into(), base]).await;
    assert!(!ok && err.contains("cannot reach"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sighup_reloads_the_config_of_the_real_binary() {
    let sink = Sink::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let base = format!("http://127.0.0.1:{port}");
    let config = dir.path().join("hookgate.yaml");
    let write = |endpoints: &str| {
        std::fs::write(
            &config,
            format!(
                "server:\n  listen: 127.0.0.1:{port}\nstorage:\n  path: {}/hookgate.db\nplugins:\n  dir: {}/plugins\n  bundled: false\ndelivery:\n  allow_networks: [127.0.0.0/8]\ntopics:\n  t: {{}}\nendpoints:\n{endpoints}",
                dir.path().display(),
                dir.path().display()
            ),
        )
        .unwrap()
    };
    write(&format!("  a:\n    url: {}\n    topics: [t]\n", sink.url("/a")));
    let mut child = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["serve", "--no-watch", "--config"])
        .arg(&config)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let http = reqwest::Client::new();
    let endpoints = |http: reqwest::Client, base: String| async move {
        let r = http.get(format!("{base}/v1/endpoints")).send().await.ok()?;
        let v: serde_json::Value = r.json().await.ok()?;
        Some(
            v["endpoints"]
                .as_array()?
                .iter()
                .map(|e| e["name"].as_str().unwrap_or_default().to_owned())
                .collect::<Vec<_>>(),
        )
    };
    let deadline = tokio::time::Instant::now() + WAIT;
    while endpoints(http.clone(), base.clone()).await.is_none() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the gateway did not start"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    write(&format!(
        "  a:\n    url: {}\n    topics: [t]\n  b:\n    url: {}\n    topics: [t]\n",
        sink.url("/a"),
        sink.url("/b")
    ));
    // --no-watch: the edit alone changes nothing…
    assert_eq!(endpoints(http.clone(), base.clone()).await.unwrap(), vec!["a"]);
    // …SIGHUP applies it.
    assert!(
        Command::new("kill")
            .args(["-HUP", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        if endpoints(http.clone(), base.clone()).await.unwrap_or_default() == vec!["a", "b"] {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "SIGHUP did not reload");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // SIGTERM: a graceful stop, exit code 0.
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = tokio::task::spawn_blocking(move || child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn config_schema_is_json_schema_describing_the_file() {
    let (ok, out, err) = hookgate(&["config", "schema"]);
    assert!(ok, "{err}");
    let schema: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(schema["$schema"].as_str().unwrap().contains("json-schema.org"));
    let props = schema["properties"].as_object().unwrap();
    for key in [
        "server",
        "storage",
        "plugins",
        "delivery",
        "health",
        "retention",
        "policies",
        "topics",
        "endpoints",
    ] {
        assert!(props.contains_key(key), "{key} missing from the schema");
    }
    // The nested parts are described too: an endpoint's `dead_letter`, a policy's `schedule`
    // and `sns`, each a property of some object in the schema.
    for key in ["dead_letter", "schedule", "sns", "max_in_flight_per_endpoint"] {
        assert!(
            declares_property(&schema, key),
            "no `{key}` property in the schema: {out}"
        );
    }
    assert!(!declares_property(&schema, "no_such_key"));
}

/// Whether an object anywhere in `schema` lists `key` among its `properties`.
fn declares_property(schema: &serde_json::Value, key: &str) -> bool {
    match schema {
        serde_json::Value::Object(map) => {
            map.get("properties")
                .and_then(|p| p.as_object())
                .is_some_and(|p| p.contains_key(key))
                || map.values().any(|v| declares_property(v, key))
        }
        serde_json::Value::Array(items) => items.iter().any(|v| declares_property(v, key)),
        _ => false,
    }
}

#[test]
fn config_check_accepts_the_quick_start_config_and_lists_every_problem() {
    let quick_start = concat!(env!("CARGO_MANIFEST_DIR"), "/../config/hookgate.yaml");
    let (ok, out, err) = hookgate(&["config", "check", quick_start]);
    assert!(ok, "{out}{err}");
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yaml");
    std::fs::write(
        &bad,
        "server:\n  listen: nowhere\ntopics:\n  t: {}\nendpoints:\n  e:\n    url: ftp://x\n    topics: [t]\n",
    )
    .unwrap();
    let (ok, _, err) = hookgate(&["config", "check", bad.to_str().unwrap()]);
    assert!(!ok);
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 2, "{err}");
    assert!(lines[0].contains("bad.yaml:2: server.listen: "), "{err}");
    assert!(lines[1].contains("bad.yaml:7: endpoints.e.url: "), "{err}");
}

/// `hookgate endpoint create|update|rotate-secret|delete` drive the endpoints API; the secret
/// is printed once, and the created endpoint gets deliveries.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_commands_create_change_rotate_and_delete_an_endpoint() {
    let sink = Sink::start().await;
    let gw = TestGateway::start("server:\n  api_keys: [ops-key]\ntopics:\n  t: {}\n").await;
    let with = |cmd: &[&str]| {
        cmd.iter()
            .map(|s| s.to_string())
            .chain([
                "--url".to_owned(),
                gw.base.clone(),
                "--api-key".to_owned(),
                "ops-key".to_owned(),
            ])
            .collect::<Vec<_>>()
    };
    let url = sink.url("/cli");
    let (ok, out, err) = run(with(&[
        "endpoint",
        "create",
        "--name",
        "cli-made",
        "--endpoint-url",
        &url,
        "--topic",
        "t",
        "--tenant",
        "acme",
        "--json",
        r#"{"max_per_second": 50}"#,
    ]))
    .await;
    assert!(ok, "{err}");
    assert!(
        out.contains("source") && out.contains("api") && out.contains("acme"),
        "{out}"
    );
    let secret = out
        .lines()
        .find_map(|l| l.strip_prefix("secret (shown once): "))
        .unwrap_or_else(|| panic!("no secret in {out}"))
        .to_owned();
    assert!(secret.starts_with("whsec_"));

    let (ok, _, err) = run(with(&["endpoint", "update", "cli-made", "--type", "order.*"])).await;
    assert!(ok, "{err}");
    assert_eq!(
        crate::support::endpoint(&gw, "cli-made").await["types"],
        json!(["order.*"])
    );

    let (status, _) = gw
        .post(
            "/v1/topics/t/events",
            json!({"type": "order.paid", "payload": {}, "tenant": "acme"}),
        )
        .await;
    assert_eq!(status, 202);
    let received = sink.wait_for(1, WAIT).await;
    assert!(crate::ingest::verify(
        &secret,
        received[0].header("webhook-id"),
        received[0].header("webhook-timestamp"),
        &received[0].body,
        received[0].header("webhook-signature"),
    ));

    let (ok, out, err) = run(with(&[
        "endpoint",
        "rotate-secret",
        "cli-made",
        "--overlap",
        "1h",
    ]))
    .await;
    assert!(ok, "{err}");
    assert!(
        out.contains("secret (shown once): whsec_") && !out.contains(&secret),
        "{out}"
    );

    let (ok, out, err) = run(with(&["endpoint", "delete", "cli-made"])).await;
    assert!(ok, "{err}");
    assert!(out.contains("deleted cli-made"), "{out}");
    let (ok, _, err) = run(with(&["endpoint", "delete", "cli-made"])).await;
    assert!(!ok && err.contains("endpoint_not_found"), "{err}");
    // Showing one still works as before.
    let (ok, _, err) = run(with(&["endpoint", "cli-made"])).await;
    assert!(!ok && err.contains("404"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_test_prints_a_status_for_http_and_the_target_and_answer_for_a_broker() {
    use crate::destinations::Fixture as _;
    let Some(stream) = crate::destinations::redis::RedisFixture::new().await else {
        return;
    };
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [ops-key]\ntopics:\n  t: {{}}\nendpoints:\n  web:\n    url: {}\n    topics: [t]\n  stream:\n    url: '{}'\n    topics: [t]\n",
        sink.url("/"),
        stream.url(stream.broker_addr())
    ))
    .await;
    let target = ["--url", gw.base.as_str(), "--api-key", "ops-key"];
    let args = |name: &str| -> Vec<String> {
        ["endpoint", "test", name]
            .iter()
            .chain(target.iter())
            .map(|s| s.to_string())
            .collect()
    };
    let (ok, out, err) = run(args("web")).await;
    assert!(ok, "{err}");
    assert!(out.contains("web: delivered"), "{out}");
    assert!(out.contains("status") && out.contains("200"), "{out}");
    let (ok, out, err) = run(args("stream")).await;
    assert!(ok, "{err}");
    assert!(out.contains("stream: delivered"), "{out}");
    assert!(out.contains("kind                  redis"), "{out}");
    assert!(out.contains("target                stream hgtest_"), "{out}");
    assert!(out.contains("answer                XADD: entry"), "{out}");
    assert_eq!(stream.received().await.len(), 1);
    stream.cleanup().await;
}

/// `hookgate endpoint test` tells a script what happened by its exit status: 0 delivered, 3 the
/// gateway made the call but the endpoint did not take it, 1 no answer (an unknown endpoint).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoint_test_exits_non_zero_when_the_event_is_not_delivered() {
    let (up, down) = (Sink::start().await, Sink::start().await);
    down.always(Reply::status(503));
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  up:\n    url: {}\n    topics: [t]\n  down:\n    url: {}\n    topics: [t]\n",
        up.url("/"),
        down.url("/")
    ))
    .await;
    let test = |name: &str| {
        let args = ["endpoint", "test", name, "--url", gw.base.as_str()].map(str::to_owned);
        tokio::task::spawn_blocking(move || {
            let out = Command::new(env!("CARGO_BIN_EXE_hookgate"))
                .args(&args)
                .output()
                .unwrap();
            (
                out.status.code(),
                String::from_utf8_lossy(&out.stdout).into_owned(),
            )
        })
    };
    let (code, out) = test("up").await.unwrap();
    assert_eq!(code, Some(0), "{out}");
    assert!(out.contains("up: delivered"), "{out}");
    let (code, out) = test("down").await.unwrap();
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("down: not delivered") && out.contains("503"),
        "{out}"
    );
    let (code, out) = test("nowhere").await.unwrap();
    assert_eq!(code, Some(1), "{out}");
    assert_eq!((up.count(), down.count()), (1, 1));
}

/// Log lines written to a file (or a pipe) are plain text: no colour codes, which a terminal
/// would show as colours and a file keeps as `\x1b[2m…` noise.
#[tokio::test]
async fn logs_to_a_file_carry_no_colour_codes() {
    let dir = tempfile::tempdir().unwrap();
    let gw = crate::binary::RealGateway::start(dir.path(), "topics:\n  t: {}\n", &[]).await;
    let (status, _) = gw
        .post("/v1/topics/t/events", json!({"type": "x", "payload": {}}))
        .await;
    assert_eq!(status, 202);
    let log = std::fs::read_to_string(&gw.log).unwrap();
    assert!(log.contains(" INFO "), "{log}");
    assert!(!log.contains('\u{1b}'), "colour codes in a log file:\n{log:?}");
}
