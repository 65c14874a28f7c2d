//! What the console reads besides the resources themselves: activity and backlog
//! (`/v1/stats`), delivery log filters, a replay's count before it is sent, policy charts.

use std::time::Duration;

use reqwest::Method;
use serde_json::json;

use crate::support::{Reply, START, Sink, TestGateway, WAIT, deliveries_of};

#[tokio::test]
async fn stats_count_finished_deliveries_per_bucket_and_the_backlog_per_tenant() {
    let ok = Sink::start().await;
    let failing = Sink::start().await;
    failing.always(Reply::status(500));
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [admin, {{key: acme-key, tenant: acme}}]\npolicies:\n  once:\n    schedule: [0s]\n\
         topics:\n  t: {{}}\nendpoints:\n  good:\n    url: {}\n    topics: [t]\n    tenant: acme\n\
         \x20 bad:\n    url: {}\n    topics: [t]\n    policy: once\n    dead_letter: true\n",
        ok.url("/"),
        failing.url("/")
    ))
    .await;
    for _ in 0..3 {
        let (status, _) = gw
            .post(
                "/v1/topics/t/events",
                json!({"type": "x", "payload": {}, "tenant": "acme"}),
            )
            .await;
        assert_eq!(status, 202);
    }
    ok.wait_for(3, WAIT).await;
    failing.wait_for(3, WAIT).await;
    gw.wait_until("/v1/deliveries?status=dead", WAIT, |v| {
        v["deliveries"].as_array().unwrap().len() == 3
    })
    .await;
    gw.wait_until("/v1/deliveries?status=succeeded", WAIT, |v| {
        v["deliveries"].as_array().unwrap().len() == 3
    })
    .await;

    let (status, hour) = gw.get("/v1/stats").await;
    assert_eq!(status, 200, "{hour}");
    assert_eq!(hour["period"], "hour");
    let buckets = hour["buckets"].as_array().unwrap();
    assert_eq!(buckets.len(), 60);
    let last = &buckets[59];
    assert_eq!(
        (last["succeeded"].as_u64(), last["failed"].as_u64()),
        (Some(3), Some(3)),
        "{hour}"
    );
    assert_eq!(hour["dead"], 3);
    assert_eq!(hour["pending"], 0);
    assert_eq!(hour["endpoints"]["active"].as_u64(), Some(2), "{hour}");

    // An hour later the minute buckets have moved on; the day's hour bucket still holds them.
    gw.advance(Duration::from_secs(3600)).await;
    let (_, hour) = gw.get("/v1/stats?period=hour").await;
    assert!(
        hour["buckets"]
            .as_array()
            .unwrap()
            .iter()
            .all(|b| b["succeeded"] == 0)
    );
    let (_, day) = gw.get("/v1/stats?period=day").await;
    let total: u64 = day["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["succeeded"].as_u64().unwrap())
        .sum();
    assert_eq!(
        (day["buckets"].as_array().unwrap().len(), total),
        (24, 3),
        "{day}"
    );

    // A tenant sees its own: acme's endpoint succeeded; the dead ones are the internal endpoint's.
    let (_, mine) = gw
        .call_as(Some("acme-key"), Method::GET, "/v1/stats?period=day", None)
        .await;
    let failed: u64 = mine["buckets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["failed"].as_u64().unwrap())
        .sum();
    assert_eq!((failed, mine["dead"].as_u64()), (0, Some(0)), "{mine}");
    assert_eq!(mine["endpoints"]["active"].as_u64(), Some(1));
    let (status, _) = gw.get("/v1/stats?period=week").await;
    assert_eq!(status, 400);
}

/// An outage stays on the overview after its deliveries were recovered: the buckets count the
/// attempts that failed, not only the deliveries whose status is still `failed` or `dead` (the
/// issue's overview read "0 failed in the last hour" after three dead letters were redriven).
#[tokio::test]
async fn failed_attempts_stay_counted_after_their_deliveries_are_redriven() {
    let sink = Sink::start().await;
    sink.always(Reply::status(500));
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [admin, {{key: acme-key, tenant: acme}}, {{key: other-key, tenant: other}}]\n\
         policies:\n  once:\n    schedule: [0s]\ntopics:\n  t: {{}}\nendpoints:\n  flaky:\n    url: {}\n\
         \x20   topics: [t]\n    tenant: acme\n    policy: once\n    dead_letter: true\n",
        sink.url("/")
    ))
    .await;
    for n in 0..3 {
        let (status, _) = gw
            .post(
                "/v1/topics/t/events",
                json!({"type": "x", "payload": {"n": n}, "tenant": "acme"}),
            )
            .await;
        assert_eq!(status, 202);
    }
    gw.wait_until("/v1/deliveries?status=dead", WAIT, |v| {
        v["deliveries"].as_array().unwrap().len() == 3
    })
    .await;
    sink.always(Reply::status(200));
    let (status, body) = gw.post("/v1/endpoints/flaky/redrive", json!({})).await;
    assert_eq!(status, 202, "{body}");
    gw.wait_until("/v1/deliveries?status=succeeded", WAIT, |v| {
        v["deliveries"].as_array().unwrap().len() == 3
    })
    .await;

    let sums = |stats: &serde_json::Value| {
        let sum = |key: &str| -> u64 {
            stats["buckets"]
                .as_array()
                .unwrap()
                .iter()
                .map(|b| b[key].as_u64().unwrap())
                .sum()
        };
        (sum("succeeded"), sum("failed"), sum("failed_attempts"))
    };
    let (_, hour) = gw.get("/v1/stats").await;
    assert_eq!(sums(&hour), (3, 0, 3), "{hour}");
    assert_eq!(hour["dead"], 0);
    let (_, day) = gw.get("/v1/stats?period=day").await;
    assert_eq!(sums(&day), (3, 0, 3), "{day}");
    // A tenant counts its own endpoints' failed attempts only.
    let (_, acme) = gw.call_as(Some("acme-key"), Method::GET, "/v1/stats", None).await;
    assert_eq!(sums(&acme), (3, 0, 3), "{acme}");
    let (_, other) = gw
        .call_as(Some("other-key"), Method::GET, "/v1/stats", None)
        .await;
    assert_eq!(sums(&other), (0, 0, 0), "{other}");
}

#[tokio::test]
async fn the_delivery_log_filters_by_event_type_and_time() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    gw.ingest("t", "order.created", json!({})).await;
    gw.advance(Duration::from_secs(60)).await;
    let middle = gw.now();
    gw.ingest("t", "order.paid", json!({})).await;
    gw.ingest("t", "order.created", json!({})).await;
    sink.wait_for(3, WAIT).await;

    let (_, created) = gw.get("/v1/deliveries?event_type=order.created").await;
    assert_eq!(created["deliveries"].as_array().unwrap().len(), 2, "{created}");
    let since = middle.to_rfc3339();
    let (_, recent) = gw.get(&format!("/v1/deliveries?since={since}")).await;
    assert_eq!(recent["deliveries"].as_array().unwrap().len(), 2, "{recent}");
    let (_, early) = gw.get(&format!("/v1/deliveries?until={since}")).await;
    assert_eq!(early["deliveries"].as_array().unwrap().len(), 1, "{early}");
    let (_, both) = gw
        .get(&format!("/v1/deliveries?since={since}&event_type=order.created"))
        .await;
    assert_eq!(both["deliveries"].as_array().unwrap().len(), 1, "{both}");
    let (status, body) = gw.get("/v1/deliveries?since=yesterday").await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (400, Some("invalid_time"))
    );
}

#[tokio::test]
async fn a_replay_preview_counts_what_a_replay_would_send_and_sends_nothing() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    types: ['order.*']\n",
        sink.url("/")
    ))
    .await;
    for event_type in ["order.created", "user.created", "order.paid"] {
        gw.ingest("t", event_type, json!({})).await;
    }
    sink.wait_for(2, WAIT).await;
    gw.settle().await;
    let since = START.to_rfc3339();
    let (status, preview) = gw
        .get(&format!("/v1/endpoints/e/replay/preview?since={since}"))
        .await;
    assert_eq!(status, 200, "{preview}");
    assert_eq!(preview["events"], 2, "the type filter holds");
    assert!(preview["continue_from"].is_null());
    gw.settle().await;
    assert_eq!(sink.count(), 2, "nothing sent");
    assert_eq!(deliveries_of(&gw, "e").await.len(), 2, "nothing queued");
    let (status, _) = gw
        .get("/v1/endpoints/e/replay/preview?since=2020-01-01T00:00:00Z")
        .await;
    assert_eq!(status, 400, "more than 7 days back");
    let (status, _) = gw
        .get(&format!("/v1/endpoints/nope/replay/preview?since={since}"))
        .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_policy_chart_is_served_as_svg() {
    let gw = TestGateway::start("topics:\n  t: {}\n").await;
    let response = gw
        .http
        .get(format!("{}/v1/policies/standard/chart.svg", gw.base))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "image/svg+xml");
    let body = response.text().await.unwrap();
    assert!(body.starts_with("<svg") && body.contains("</svg>"), "{body}");
    let (status, _) = gw.get("/v1/policies/nope/chart.svg").await;
    assert_eq!(status, 404);
}
