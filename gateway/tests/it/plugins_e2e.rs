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

/// The endpoint's configured headers are credentials the plugins never see: a transform that
/// writes every header it was given into its log and its error leaks nothing, and neither a
/// transform nor a signer can replace the gateway's own headers or smuggle hop-by-hop ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugins_cannot_see_leak_or_forge_the_gateways_headers() {
    const TOKEN: &str = "Bearer tok-4f9c2e7d1a";
    const TEAM: &str = "team-credential-77";
    const SECRET: &str = "whsec_c2VjcmV0LWtleS1ieXRlcw==";
    let forged = [
        "webhook-id",
        "webhook-timestamp",
        "webhook-signature",
        "hookgate-delivery-attempt",
        "authorization",
        "x-team",
        "content-type",
    ];
    let sink = Sink::start().await;
    let dir = dir_with_plugins(&["header-games", "forge-headers"]).await;
    let endpoint = |name: &str, binding: &str| {
        format!(
            "  {name}:\n    url: {}\n    topics: [t]\n    policy: once\n    secret: \"{SECRET}\"\n    headers: {{ Authorization: \"{TOKEN}\", X-Team: \"{TEAM}\" }}\n    {binding}\n",
            sink.url(&format!("/{name}"))
        )
    };
    let mut yaml =
        "policies:\n  once:\n    schedule: [0s, 1h]\n    jitter: 0\ntopics:\n  t: {}\nendpoints:\n"
            .to_owned();
    yaml.push_str(&endpoint("games", "transform: { plugin: header-games }"));
    yaml.push_str(&endpoint(
        "leaky",
        "transform: { plugin: header-games, config: { fail: yes } }",
    ));
    yaml.push_str(&endpoint("signs", "signer: { plugin: forge-headers }"));
    for name in forged {
        yaml.push_str(&endpoint(
            &format!("forges-{name}"),
            &format!("signer: {{ plugin: forge-headers, config: {{ forge: {name} }} }}"),
        ));
    }
    let gw = TestGateway::start_in(dir, &yaml, clock()).await;
    let accepted = gw.ingest("t", "x", json!({"n": 1})).await;
    let id = accepted["id"].as_str().unwrap();
    let received = sink.wait_for(2, WAIT).await;
    let at = |path: &str| received.iter().find(|r| r.path == path).unwrap();

    let games = at("/games");
    assert_eq!(
        games.header("x-seen"),
        "content-type",
        "the transform saw only the content type"
    );
    assert_eq!(games.header("x-transformed"), "yes");
    assert_eq!(games.header("webhook-id"), id);
    assert_eq!(games.header("hookgate-delivery-attempt"), "1");
    assert_eq!(games.header("authorization"), TOKEN);
    assert_eq!(games.header("x-team"), TEAM);
    for dropped in ["x-hop-secret", "expect", "transfer-encoding"] {
        assert!(
            games.headers.get(dropped).is_none(),
            "{dropped} reached the receiver"
        );
    }

    let signs = at("/signs");
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(&signs.body);
    assert_eq!(
        signs.header("x-forge-signature"),
        hex::encode(mac.finalize().into_bytes())
    );
    assert_eq!(signs.header("webhook-id"), id);
    assert_eq!(signs.header("authorization"), TOKEN);
    for dropped in ["x-hop-secret", "expect", "keep-alive", "upgrade", "te"] {
        assert!(
            signs.headers.get(dropped).is_none(),
            "{dropped} reached the receiver"
        );
    }

    // Each forging signer fails its own attempt, naming the header; nothing is sent.
    let mut records = Vec::new();
    for name in forged {
        let list = gw
            .wait_until(&format!("/v1/deliveries?endpoint=forges-{name}"), WAIT, |l| {
                l["deliveries"][0]["attempt_count"] == 1
            })
            .await;
        let delivery = list["deliveries"][0]["id"].as_str().unwrap();
        let (_, d) = gw.get(&format!("/v1/deliveries/{delivery}")).await;
        let error = d["attempts"][0]["error"].as_str().unwrap();
        assert_eq!(d["attempts"][0]["error_kind"], "plugin_error", "{d}");
        assert!(
            error.contains("invalid_output") && error.contains(&format!("`{name}`")),
            "{error}"
        );
        records.push(d.to_string());
    }
    let list = gw
        .wait_until("/v1/deliveries?endpoint=leaky", WAIT, |l| {
            l["deliveries"][0]["attempt_count"] == 1
        })
        .await;
    let leaky = list["deliveries"][0]["id"].as_str().unwrap();
    let (_, d) = gw.get(&format!("/v1/deliveries/{leaky}")).await;
    assert!(
        d["attempts"][0]["error"]
            .as_str()
            .unwrap()
            .contains("leak: headers I was given"),
        "{d}"
    );
    records.push(d.to_string());
    assert_eq!(sink.count(), 2, "only the two honest endpoints were contacted");

    // No credential, in any form, in an attempt record or a log line; the plugin did try.
    let logs = crate::support::captured_logs();
    assert!(
        logs.contains("headers I was given: content-type="),
        "the plugin's log line is there"
    );
    let b64 = |s: &str| base64::Engine::encode(&base64::engine::general_purpose::STANDARD, s);
    for credential in [
        TOKEN,
        TEAM,
        SECRET,
        "tok-4f9c2e7d1a",
        &b64(TOKEN),
        &b64(TEAM),
        &b64(SECRET),
        "secret-key-bytes",
    ] {
        assert!(!logs.contains(credential), "{credential} in the log");
        for record in &records {
            assert!(!record.contains(credential), "{credential} in {record}");
        }
    }
}

/// Hostile plugins bound to some endpoints (sleeping ones, a host-crypto burner) fail only
/// their own attempts, at their limits, while ingestion and the other endpoints — one without
/// a plugin, one with a harmless transform — keep the latency they have without them.
const STORM_EVENTS: usize = 5;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hostile_plugins_leave_ingestion_and_other_endpoints_at_their_normal_latency() {
    let good = Sink::start().await;
    let bad = Sink::start().await;
    let dir = dir_with_plugins(&["sleep-forever", "crypto-burn", "cloudevents"]).await;
    let mut yaml = format!(
        "policies:\n  once:\n    schedule: [0s, 1h]\n    jitter: 0\ntopics:\n  calm: {{}}\n  storm: {{}}\nendpoints:\n  plain:\n    url: {}\n    topics: [calm, storm]\n  ce:\n    url: {}\n    topics: [calm, storm]\n    transform: {{ plugin: cloudevents }}\n",
        good.url("/plain"),
        good.url("/ce"),
    );
    for i in 1..=5 {
        yaml.push_str(&format!(
            "  sleepy-{i}:\n    url: {}\n    topics: [storm]\n    policy: once\n    transform: {{ plugin: sleep-forever }}\n",
            bad.url("/")
        ));
    }
    for i in 1..=3 {
        yaml.push_str(&format!(
            "  burn-{i}:\n    url: {}\n    topics: [storm]\n    policy: once\n    secret: burn-secret\n    signer: {{ plugin: crypto-burn }}\n",
            bad.url("/")
        ));
    }
    // A wall-clock limit far above the good endpoints' latency, so that "did not wait for a
    // sleeping call" and "was slowed by sharing the CPU with the burners" cannot be confused.
    let wall = Duration::from_secs(3);
    let gw = TestGateway::start_with(dir, &yaml, clock(), |options| {
        options.config.plugins.call_wall_timeout = wall;
    })
    .await;
    // One event at a time: how long its 202 takes, and until both good endpoints have it.
    let round = |topic: &'static str, events: usize| {
        let (gw, good) = (&gw, &good);
        async move {
            let (mut ingest, mut deliver) = (Duration::ZERO, Duration::ZERO);
            for n in 0..events {
                let before = good.count();
                let started = std::time::Instant::now();
                gw.ingest(topic, "x", json!({"n": n})).await;
                ingest = ingest.max(started.elapsed());
                good.wait_for(before + 2, WAIT).await;
                deliver = deliver.max(started.elapsed());
            }
            (ingest, deliver)
        }
    };
    let (ingest_alone, deliver_alone) = round("calm", 10).await;
    let storm_started = std::time::Instant::now();
    let (ingest_storm, deliver_storm) = round("storm", STORM_EVENTS).await;
    let storm_took = storm_started.elapsed();
    eprintln!(
        "slowest 202: {ingest_alone:?} alone, {ingest_storm:?} beside hostile plugins; slowest \
         delivery to both good endpoints: {deliver_alone:?} alone, {deliver_storm:?} beside them \
         (the storm's events took {storm_took:?})"
    );
    // Each storm event's good deliveries ran beside that event's own sleeping calls (3 s each),
    // so a good delivery that waited for a sleeper would have taken three seconds or more.
    for (alone, storm) in [(ingest_alone, ingest_storm), (deliver_alone, deliver_storm)] {
        let generous = alone * 50 + Duration::from_millis(1500);
        assert!(
            storm < generous.min(wall),
            "{storm:?} beside hostile plugins, {alone:?} alone"
        );
    }

    // The hostile attempts failed at their limits: the sleepers at the 3 s wall-clock limit
    // (25 sleeping calls on the sleeper's 21 slots: some waited one round for a slot; and a
    // margin for a busy machine), the burners at their hashing budget, or at the wall-clock
    // limit when they waited too long for their turns to hash.
    for (endpoint, details) in [
        ("sleepy-1", &["timeout"][..]),
        ("sleepy-5", &["timeout"]),
        ("burn-2", &["crypto_budget", "timeout"]),
    ] {
        let list = gw
            .wait_until(
                &format!("/v1/deliveries?endpoint={endpoint}&limit=100"),
                WAIT,
                |l| {
                    let all = l["deliveries"].as_array().unwrap();
                    all.len() == STORM_EVENTS && all.iter().all(|d| d["attempt_count"] == 1)
                },
            )
            .await;
        for delivery in list["deliveries"].as_array().unwrap() {
            let id = delivery["id"].as_str().unwrap();
            let (_, d) = gw.get(&format!("/v1/deliveries/{id}")).await;
            let attempt = &d["attempts"][0];
            assert_eq!(attempt["error_kind"], "plugin_error", "{d}");
            let error = attempt["error"].as_str().unwrap();
            assert!(details.iter().any(|detail| error.contains(detail)), "{d}");
            let limit_and_margin = wall + Duration::from_secs(2);
            assert!(
                Duration::from_millis(attempt["duration_ms"].as_u64().unwrap()) < 2 * limit_and_margin,
                "{d}"
            );
        }
    }
    assert_eq!(bad.count(), 0);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transform_and_a_signer_shape_what_a_broker_receives_too() {
    use crate::destinations::Fixture as _;
    let Some(stream) = crate::destinations::redis::RedisFixture::new().await else {
        return;
    };
    let dir = dir_with_plugins(&["cloudevents", "github-signature"]).await;
    let gw = TestGateway::start_in(
        dir,
        &format!(
            "topics:\n  shop: {{}}\nendpoints:\n  ce:\n    url: '{}'\n    topics: [shop]\n    secret: \"It's a Secret to Everybody\"\n    transform: {{ plugin: cloudevents, config: {{ source: /shop }} }}\n    signer: {{ plugin: github-signature }}\n",
            stream.url(stream.broker_addr())
        ),
        clock(),
    )
    .await;
    let accepted = gw.ingest("shop", "order.created", json!({"id": 42})).await;
    let got = crate::destinations::common::wait_received(&stream, 1).await;
    let message = &got[0];
    let body: serde_json::Value = serde_json::from_slice(&message.body).unwrap();
    assert_eq!(body["specversion"], "1.0", "{body}");
    assert_eq!(body["source"], "/shop");
    let mut mac = Hmac::<Sha256>::new_from_slice(b"It's a Secret to Everybody").unwrap();
    mac.update(&message.body);
    assert_eq!(
        message.header("x-hub-signature-256"),
        Some(format!("sha256={}", hex::encode(mac.finalize().into_bytes())).as_str())
    );
    assert_eq!(message.header("webhook-signature"), None);
    assert_eq!(message.header("webhook-id"), accepted["id"].as_str());
    stream.cleanup().await;
}
