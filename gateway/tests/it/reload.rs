use std::time::Duration;

use serde_json::json;

use crate::support::{Reply, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(10);

fn two_endpoints(a: &Sink, b: Option<&Sink>, a_headers: &str) -> String {
    let mut yaml = format!(
        "policies:\n  slow:\n    schedule: [0s, 1h]\ntopics:\n  t: {{}}\nendpoints:\n  a:\n    url: {}\n    topics: [t]\n    policy: slow\n    headers: {{ X-Version: '{a_headers}' }}\n",
        a.url("/a")
    );
    if let Some(b) = b {
        yaml.push_str(&format!("  b:\n    url: {}\n    topics: [t]\n", b.url("/b")));
    }
    yaml
}

#[tokio::test]
async fn a_reload_adds_changes_and_removes_endpoints() {
    let a = Sink::start().await;
    let b = Sink::start().await;
    let gw = TestGateway::start(&two_endpoints(&a, None, "1")).await;
    gw.ingest("t", "x", json!({"n": 1})).await;
    assert_eq!(a.wait_for(1, WAIT).await[0].header("x-version"), "1");

    // Add b, change a's header: applies to the next attempt and the next event.
    gw.write_config(&two_endpoints(&a, Some(&b), "2"));
    gw.reloader().reload_from_file().await;
    let accepted = gw.ingest("t", "x", json!({"n": 2})).await;
    assert_eq!(accepted["deliveries"], 2);
    assert_eq!(a.wait_for(2, WAIT).await[1].header("x-version"), "2");
    b.wait_for(1, WAIT).await;
    let (_, status) = gw.get("/v1/status").await;
    assert_eq!(status["last_reload"]["ok"], true);
    assert_eq!(status["endpoints"], 2);

    // Remove a while one of its deliveries waits for a retry: it ends as endpoint_removed.
    a.always(Reply::status(500));
    let pending = gw.ingest("t", "x", json!({"n": 3})).await;
    a.wait_for(3, WAIT).await;
    let event_path = format!("/v1/events/{}", pending["id"].as_str().unwrap());
    gw.wait_until(&event_path, WAIT, |e| {
        e["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["endpoint"] == "a" && d["attempt_count"] == 1)
    })
    .await;
    let only_b = format!(
        "topics:\n  t: {{}}\nendpoints:\n  b:\n    url: {}\n    topics: [t]\n",
        b.url("/b")
    );
    gw.write_config(&only_b);
    gw.reloader().reload_from_file().await;
    let event = gw
        .wait_until(&event_path, WAIT, |e| {
            e["deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .any(|d| d["endpoint"] == "a" && d["status"] == "failed")
        })
        .await;
    let removed = event["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["endpoint"] == "a")
        .unwrap()
        .clone();
    assert_eq!(removed["last_error"], "endpoint_removed");
    // Its history is kept; the endpoint itself is gone from the API.
    assert_eq!(gw.get("/v1/endpoints/a").await.0, 404);
    let accepted = gw.ingest("t", "x", json!({"n": 4})).await;
    assert_eq!(accepted["deliveries"], 1);
}

#[tokio::test]
async fn a_changed_policy_applies_to_the_next_planning_step() {
    let sink = Sink::start().await;
    sink.always(Reply::status(500));
    let yaml = |wait: &str| {
        format!(
            "policies:\n  p:\n    schedule: [0s, {wait}, {wait}]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: p\n",
            sink.url("/")
        )
    };
    let gw = TestGateway::start(&yaml("1h")).await;
    let t0 = gw.now();
    gw.ingest("t", "x", json!({})).await;
    let d = gw
        .wait_until("/v1/deliveries", WAIT, |l| {
            l["deliveries"][0]["attempt_count"] == 1
        })
        .await;
    assert_eq!(
        d["deliveries"][0]["next_attempt_at"],
        t0.plus(Duration::from_secs(3600)).to_rfc3339()
    );
    gw.write_config(&yaml("10s"));
    gw.reloader().reload_from_file().await;
    gw.advance(Duration::from_secs(3600)).await;
    let d = gw
        .wait_until("/v1/deliveries", WAIT, |l| {
            l["deliveries"][0]["attempt_count"] == 2
        })
        .await;
    let planned = t0.plus(Duration::from_secs(3600 + 10)).to_rfc3339();
    assert_eq!(d["deliveries"][0]["next_attempt_at"], planned);
}

#[tokio::test]
async fn an_invalid_file_is_refused_and_the_old_config_keeps_serving() {
    let sink = Sink::start().await;
    let good = format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    );
    let gw = TestGateway::start(&good).await;
    let broken = [
        ("bad syntax", format!("{good}  oops: [unclosed\n")),
        ("unknown key", format!("{good}    colour: blue\n")),
        (
            "invalid policy",
            format!("policies:\n  p:\n    sns:\n      healthyRetryPolicy:\n        numRetries: 101\n{good}"),
        ),
    ];
    for (what, text) in broken {
        std::fs::write(
            gw.config_path(),
            format!("{}{text}", crate::support::base_yaml(gw.dir.path())),
        )
        .unwrap();
        let outcome = gw.reloader().reload_from_file().await;
        let hookgate::ReloadOutcome::Refused { problems } = outcome else {
            panic!("{what}: {outcome:?}");
        };
        let (_, status) = gw.get("/v1/status").await;
        assert_eq!(status["last_reload"]["ok"], false, "{what}");
        assert_eq!(status["config_differs_from_file"], true, "{what}: {status}");
        let errors = status["last_reload"]["errors"].as_array().unwrap();
        assert!(!errors.is_empty(), "{what}");
        assert_eq!(errors.len(), problems.len(), "{what}");
        let line = errors[0].as_str().unwrap();
        assert!(line.contains("hookgate.yaml:"), "{what}: {line}");
        // Still serving the old config.
        let accepted = gw.ingest("t", "x", json!({})).await;
        assert_eq!(accepted["deliveries"], 1, "{what}");
    }
    let logs = crate::support::captured_logs();
    let line = logs
        .lines()
        .find(|l| l.contains("config reload refused"))
        .expect("a refused reload is logged");
    assert!(line.contains("hookgate.yaml:"), "{line}");
    let path = gw.config_path().display().to_string();
    assert!(
        logs.lines().any(|l| l.contains(" WARN ")
            && l.contains("the config file on disk is not what runs")
            && l.contains(&path)),
        "a warning says that the file is not what runs:\n{logs}"
    );

    // The file as it runs again: it is what runs.
    std::fs::write(
        gw.config_path(),
        format!("{}{good}", crate::support::base_yaml(gw.dir.path())),
    )
    .unwrap();
    assert!(matches!(
        gw.reloader().reload_from_file().await,
        hookgate::ReloadOutcome::Applied { .. }
    ));
    let (_, status) = gw.get("/v1/status").await;
    assert_eq!(status["config_differs_from_file"], false, "{status}");
}

#[tokio::test]
async fn the_file_watcher_applies_rename_style_saves() {
    let sink = Sink::start().await;
    let other = Sink::start().await;
    let yaml = |url: &str| format!("topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {url}\n    topics: [t]\n");
    let dir = std::sync::Arc::new(tempfile::tempdir().unwrap());
    let gw = TestGateway::start_with(
        dir,
        &yaml(&sink.url("/")),
        hookgate::clock::ManualClock::new(crate::support::START),
        |o| {
            o.watch_config = true;
        },
    )
    .await;
    // Editors write a temporary file and rename it over the config.
    let tmp = gw.dir.path().join(".hookgate.yaml.swp");
    std::fs::write(
        &tmp,
        format!(
            "{}{}",
            crate::support::base_yaml(gw.dir.path()),
            yaml(&other.url("/"))
        ),
    )
    .unwrap();
    std::fs::rename(&tmp, gw.config_path()).unwrap();
    gw.wait_until("/v1/status", WAIT, |s| s["last_reload"]["ok"] == true)
        .await;
    gw.ingest("t", "x", json!({})).await;
    other.wait_for(1, WAIT).await;
    assert_eq!(sink.count(), 0);
}

/// Settings read only at start keep their running value through a reload, with a warning that
/// names each; the reloadable ones in the same file take effect.
#[tokio::test]
async fn settings_read_only_at_start_keep_their_value_and_say_they_need_a_restart() {
    let sink = Sink::start().await;
    let endpoints = format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    );
    let gw = TestGateway::start(&endpoints).await;
    let before = gw.gateway.as_ref().unwrap().config();
    let changed = format!("server:\n  shutdown_grace: 3s\n  header_timeout: 7s\n  workers: 3\n{endpoints}");
    // The base YAML already has `plugins:` and `delivery:` sections; extend them in place.
    let text = format!("{}{changed}", crate::support::base_yaml(gw.dir.path()))
        .replace(
            "plugins:\n",
            "plugins:\n  call_timeout: 250ms\n  memory: 48MiB\n  max_output: 2MiB\n",
        )
        .replace("delivery:\n", "delivery:\n  max_in_flight: 77\n");
    std::fs::write(gw.config_path(), text).unwrap();
    let outcome = gw.reloader().reload_from_file().await;
    assert_eq!(
        outcome,
        hookgate::ReloadOutcome::Applied {
            added: 0,
            removed: 0,
            changed: 0,
            needs_restart: vec![
                "server.header_timeout",
                "server.shutdown_grace",
                "server.workers",
                "plugins.call_timeout",
                "plugins.memory",
                "plugins.max_output",
            ],
        }
    );
    let (_, status) = gw.get("/v1/status").await;
    assert_eq!(status["last_reload"]["ok"], true, "{status}");
    assert_eq!(status["config_differs_from_file"], true, "{status}");
    assert_eq!(
        status["last_reload"]["needs_restart"],
        json!([
            "server.header_timeout",
            "server.shutdown_grace",
            "server.workers",
            "plugins.call_timeout",
            "plugins.memory",
            "plugins.max_output"
        ])
    );

    let after = gw.gateway.as_ref().unwrap().config();
    assert_eq!(after.delivery.max_in_flight, 77, "reloadable: applied");
    assert_eq!(after.server.shutdown_grace, before.server.shutdown_grace);
    assert_eq!(after.server.header_timeout, before.server.header_timeout);
    assert_eq!(after.server.workers, before.server.workers);
    assert_eq!(after.plugins.call_timeout, before.plugins.call_timeout);
    assert_eq!(after.plugins.memory_bytes, before.plugins.memory_bytes);
    assert_eq!(after.plugins.max_output_bytes, before.plugins.max_output_bytes);
    let logs = crate::support::captured_logs();
    for key in [
        "server.shutdown_grace",
        "server.header_timeout",
        "server.workers",
        "plugins.call_timeout",
        "plugins.memory",
        "plugins.max_output",
    ] {
        assert!(
            logs.lines()
                .any(|l| l.contains("changes only with a restart") && l.contains(key)),
            "no restart warning for {key}"
        );
    }
}

/// `server.workers` sets the real binary's worker threads (one, then three, where the default
/// would run one per CPU), and `/v1/status` says how many run.
#[tokio::test]
async fn the_real_binary_runs_as_many_worker_threads_as_server_workers_names() {
    let dir = tempfile::tempdir().unwrap();
    for (server, expected) in [("  workers: 1\n", 1), ("  workers: 3\n", 3)] {
        let gw = crate::binary::RealGateway::start_with_server(dir.path(), server, "", &[]).await;
        let (status, body) = gw.get("/v1/status").await;
        assert_eq!(status, 200);
        assert_eq!(body["workers"], expected, "{body}");
    }
}
