use std::time::Duration;

use serde_json::json;

use crate::support::{Reply, Sink, TestGateway, captured_logs};

const WAIT: Duration = Duration::from_secs(10);

fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines().filter(|l| !l.starts_with('#')).find_map(|line| {
        let (key, value) = line.rsplit_once(' ')?;
        let matches = key.starts_with(name)
            && (key.len() == name.len() || key[name.len()..].starts_with('{'))
            && labels.iter().all(|(k, v)| key.contains(&format!("{k}=\"{v}\"")));
        if matches { value.parse().ok() } else { None }
    })
}

#[tokio::test]
async fn metrics_move_with_traffic() {
    let sink = Sink::start().await;
    sink.script([Reply::status(500)]);
    // Names unique to this test: the metrics registry is shared by the whole test process.
    let gw = TestGateway::start(&format!(
        "policies:\n  quick:\n    schedule: [0s, 1s]\n    jitter: 0\ntopics:\n  metrics-topic: {{}}\nendpoints:\n  metrics-ep:\n    url: {}\n    topics: [metrics-topic]\n    policy: quick\n",
        sink.url("/")
    ))
    .await;
    for _ in 0..3 {
        gw.ingest("metrics-topic", "x", json!({})).await;
    }
    sink.wait_for(3, WAIT).await;
    // The failed first attempt is planned before the clock moves.
    gw.wait_until("/v1/deliveries?status=pending", WAIT, |l| {
        l["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .any(|d| d["attempt_count"] == 1)
    })
    .await;
    gw.advance(Duration::from_secs(1)).await;
    sink.wait_for(4, WAIT).await;
    gw.wait_until("/v1/deliveries?status=succeeded", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 3
    })
    .await;
    let text = reqwest::get(format!("{}/metrics", gw.base))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(
        metric(
            &text,
            "hookgate_events_ingested_total",
            &[("topic", "metrics-topic")]
        ),
        Some(3.0),
        "{text}"
    );
    assert_eq!(
        metric(
            &text,
            "hookgate_attempts_total",
            &[("endpoint", "metrics-ep"), ("outcome", "delivered")]
        ),
        Some(3.0)
    );
    assert_eq!(
        metric(
            &text,
            "hookgate_attempts_total",
            &[("endpoint", "metrics-ep"), ("outcome", "http_status")]
        ),
        Some(1.0)
    );
    assert_eq!(
        metric(
            &text,
            "hookgate_deliveries_total",
            &[("endpoint", "metrics-ep"), ("status", "succeeded")]
        ),
        Some(3.0)
    );
    // An active endpoint has no state gauge of its own (a million endpoints would make four
    // million series); the count per state has it.
    assert_eq!(
        metric(
            &text,
            "hookgate_endpoint_state",
            &[("endpoint", "metrics-ep"), ("state", "active")]
        ),
        None
    );
    assert_eq!(
        metric(&text, "hookgate_endpoints", &[("state", "active")]),
        Some(1.0)
    );
    assert!(
        metric(
            &text,
            "hookgate_attempt_duration_seconds_count",
            &[("endpoint", "metrics-ep")]
        )
        .unwrap()
            >= 4.0
    );
    assert!(metric(&text, "hookgate_writer_commit_seconds_count", &[]).unwrap() >= 1.0);
    assert!(text.contains("# TYPE hookgate_queue_depth gauge"), "{text}");
}

/// A node lists itself in `/v1/cluster` with its leases as soon as it serves: on SQLite the one
/// node delivers every endpoint; on PostgreSQL, alone on its schema, its first turn took them all.
#[tokio::test]
async fn the_cluster_view_counts_this_nodes_leases_as_soon_as_it_serves() {
    let sink = Sink::start().await;
    let endpoints: String = (0..3)
        .map(|i| format!("  lease-{i}:\n    url: {}\n    topics: [t]\n", sink.url("/")))
        .collect();
    let gw = TestGateway::start(&format!("topics:\n  t: {{}}\nendpoints:\n{endpoints}")).await;
    let (status, body) = gw.get("/v1/cluster").await;
    assert_eq!(status, 200, "{body}");
    let nodes = body["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{body}");
    assert_eq!(nodes[0]["leases"], 3, "{body}");
}

#[tokio::test]
async fn the_openapi_document_describes_every_route_and_every_route_in_it_exists() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    let (status, doc) = gw.get("/openapi.json").await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    let paths = doc["paths"].as_object().unwrap();
    for (path, method) in [
        ("/v1/topics/{topic}/events", "post"),
        ("/v1/topics/{topic}/events/batch", "post"),
        ("/v1/events/{id}", "get"),
        ("/v1/endpoints", "get"),
        ("/v1/endpoints", "post"),
        ("/v1/endpoints/{name}", "get"),
        ("/v1/endpoints/{name}", "patch"),
        ("/v1/endpoints/{name}", "delete"),
        ("/v1/endpoints/{name}/secret/rotate", "post"),
        ("/v1/tenants/{tenant}/console-token", "post"),
        ("/v1/endpoints/{name}/test", "post"),
        ("/v1/endpoints/{name}/reenable", "post"),
        ("/v1/endpoints/{name}/replay", "post"),
        ("/v1/endpoints/{name}/redrive", "post"),
        ("/v1/deliveries", "get"),
        ("/v1/deliveries/{id}", "get"),
        ("/v1/deliveries/{id}/redeliver", "post"),
        ("/v1/policies/{name}/preview", "get"),
        ("/healthz", "get"),
        ("/metrics", "get"),
        ("/v1/status", "get"),
    ] {
        assert!(
            paths.get(path).and_then(|p| p.get(method)).is_some(),
            "{method} {path} is not documented"
        );
    }
    // Every documented route is served (a 404 here would be the router's fallback).
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            let concrete = path
                .replace("{topic}", "t")
                .replace("{name}", "e")
                .replace("{id}", "dlv_1")
                .replace("{tenant}", "acme");
            let url = format!("{}{concrete}", gw.base);
            let response = match method.as_str() {
                "get" => gw.http.get(&url).send().await.unwrap(),
                "post" => gw
                    .http
                    .post(&url)
                    .body("{}")
                    .header("content-type", "application/json")
                    .send()
                    .await
                    .unwrap(),
                "patch" => gw
                    .http
                    .patch(&url)
                    .body("{}")
                    .header("content-type", "application/json")
                    .send()
                    .await
                    .unwrap(),
                "put" => gw
                    .http
                    .put(&url)
                    .body("{}")
                    .header("content-type", "application/json")
                    .send()
                    .await
                    .unwrap(),
                "delete" => gw.http.delete(&url).send().await.unwrap(),
                other => panic!("unexpected method {other}"),
            };
            // Under /api/v1/ the Svix API answers the routes it does not serve with 501.
            assert_ne!(response.status(), 501, "{method} {path}");
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            assert_ne!(body["error"]["code"], "route_not_found", "{method} {path}");
        }
    }
}

#[tokio::test]
async fn shutdown_lets_an_attempt_in_flight_finish_and_records_it() {
    let sink = Sink::start().await;
    sink.script([Reply::status(200).delayed(Duration::from_millis(300))]);
    let yaml = format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    );
    let mut gw = TestGateway::start(&yaml).await;
    gw.ingest("t", "x", json!({})).await;
    sink.wait_for(1, WAIT).await; // the attempt is now in flight
    gw.stop().await;
    let gw2 = TestGateway::start_in(gw.dir.clone(), &yaml, gw.clock.clone()).await;
    let (_, list) = gw2.get("/v1/deliveries").await;
    assert_eq!(list["deliveries"][0]["status"], "succeeded", "{list}");
    assert_eq!(sink.count(), 1);
}

#[tokio::test]
async fn an_attempt_cut_off_by_the_grace_period_is_retried_after_restart() {
    let sink = Sink::start().await;
    sink.script([Reply::status(200).delayed(Duration::from_secs(3))]);
    let yaml = format!(
        "server:\n  shutdown_grace: 100ms\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    );
    let mut gw = TestGateway::start(&yaml).await;
    gw.ingest("t", "x", json!({})).await;
    sink.wait_for(1, WAIT).await;
    gw.stop().await;
    let gw2 = TestGateway::start_in(gw.dir.clone(), &yaml, gw.clock.clone()).await;
    sink.wait_for(2, WAIT).await;
    gw2.wait_until("/v1/deliveries", WAIT, |l| {
        l["deliveries"][0]["status"] == "succeeded"
    })
    .await;
    // The receiver can tell the two apart only by the attempt; the event id is the same.
    let got = sink.received();
    assert_eq!(got[0].header("webhook-id"), got[1].header("webhook-id"));
}

/// Every form a secret could leak in: as configured, the key bytes a `whsec_` secret stands
/// for, and those in base64 and hex (upper and lower case).
pub(crate) fn leak_forms(secret: &str) -> Vec<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
    let mut raws = vec![secret.as_bytes().to_vec()];
    if let Some(body) = secret
        .strip_prefix("whsec_")
        .or_else(|| secret.strip_prefix("whsk_"))
    {
        raws.push(body.as_bytes().to_vec());
        raws.push(STANDARD.decode(body).unwrap());
    }
    let mut forms = Vec::new();
    for raw in raws {
        forms.push(String::from_utf8_lossy(&raw).into_owned());
        forms.push(STANDARD.encode(&raw).trim_end_matches('=').to_owned());
        forms.push(URL_SAFE_NO_PAD.encode(&raw));
        forms.push(hex::encode(&raw));
        forms.push(hex::encode_upper(&raw));
    }
    forms
}

/// Every read answer the API has about the one endpoint and its delivery, as one text.
async fn read_answers(gw: &TestGateway) -> String {
    let mut answers = String::new();
    for path in [
        "/v1/endpoints",
        "/v1/endpoints/e",
        "/v1/deliveries",
        "/v1/status",
        "/openapi.json",
    ] {
        let (status, body) = gw.get(path).await;
        assert_eq!(status, 200, "{path}: {body}");
        answers.push_str(&body.to_string());
    }
    let (_, list) = gw.get("/v1/deliveries").await;
    let id = list["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let (status, delivery) = gw.get(&format!("/v1/deliveries/{id}")).await;
    assert_eq!(status, 200);
    // The attempt records are there, failures included.
    assert_eq!(
        delivery["attempts"].as_array().map(Vec::len),
        Some(3),
        "{delivery}"
    );
    answers.push_str(&delivery.to_string());
    answers
}

#[tokio::test]
async fn secrets_and_api_keys_never_reach_the_logs_or_the_api() {
    let secret = "whsec_c2VjcmV0LXRoYXQtbXVzdC1uZXZlci1sZWFr";
    let key = "api-key-that-must-never-leak";
    let sink = Sink::start().await;
    // Two failed attempts, a success, then a failing test call: every error path.
    sink.script([
        Reply::status(500),
        Reply::status(401),
        Reply::status(200),
        Reply::status(502),
    ]);
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [{key}]\npolicies:\n  quick:\n    schedule: [0s, 1s, 1s]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    secret: {secret}\n    policy: quick\n",
        sink.url("/")
    ))
    .await;
    gw.ingest("t", "x", json!({})).await;
    for n in 1..=2u64 {
        sink.wait_for(n as usize, WAIT).await;
        gw.wait_until("/v1/deliveries", WAIT, |l| {
            l["deliveries"][0]["attempt_count"] == n
        })
        .await;
        gw.advance(Duration::from_secs(1)).await;
    }
    sink.wait_for(3, WAIT).await;
    // The third attempt's success is recorded a moment after the sink answered it.
    gw.wait_until("/v1/deliveries", WAIT, |l| {
        l["deliveries"][0]["status"] == "succeeded"
    })
    .await;
    let mut answers = String::new();
    // A wrong key: 403, and the answer names neither the key tried nor the right one.
    let forbidden = gw
        .http
        .get(format!("{}/v1/endpoints", gw.base))
        .bearer_auth("wrong")
        .send()
        .await
        .unwrap();
    assert_eq!(forbidden.status().as_u16(), 403);
    let forbidden: serde_json::Value = forbidden.json().await.unwrap();
    assert_eq!(forbidden["error"]["code"], "forbidden", "{forbidden}");
    answers.push_str(&forbidden.to_string());
    // A config file that does not load, with the secret in it: refused, and the refusal shows.
    std::fs::write(
        gw.config_path(),
        format!("server:\n  api_keys: [{key}]\n  nope: {secret}\n"),
    )
    .unwrap();
    gw.reloader().reload_from_file().await;
    let (status, body) = gw.get("/v1/status").await;
    assert_eq!(status, 200);
    assert_eq!(body["last_reload"]["ok"], false, "{body}");
    // A test call the receiver refuses.
    let (status, test) = gw.post("/v1/endpoints/e/test", json!({})).await;
    assert_eq!(status, 200, "{test}");
    assert_eq!(test["delivered"], false, "{test}");
    assert_eq!(test["status_code"], 502, "{test}");
    answers.push_str(&test.to_string());
    sink.wait_for(4, WAIT).await;
    answers.push_str(&read_answers(&gw).await);
    let logs = captured_logs();
    assert!(!logs.is_empty());
    for (what, text) in [("logs", &logs), ("API answers", &answers)] {
        for form in leak_forms(secret) {
            assert!(
                !text.contains(&form),
                "the endpoint secret is in the {what} as `{form}`"
            );
        }
        for form in leak_forms(key) {
            assert!(!text.contains(&form), "the API key is in the {what} as `{form}`");
        }
    }
}
