use serde_json::json;

use crate::support::{Sink, TestGateway};

#[tokio::test]
async fn api_keys_guard_the_api_but_not_health_and_metrics() {
    let sink = Sink::start().await;
    let mut gw = TestGateway::start(&format!(
        "server:\n  api_keys: [key-one, key-two]\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    let key = gw.api_key.take();
    let (status, body) = gw
        .post("/v1/topics/t/events", json!({"type": "x", "payload": 1}))
        .await;
    assert_eq!(status, 401);
    assert_eq!(body["error"]["code"], "unauthorized");
    let (status, _) = gw
        .send(
            gw.post_builder("/v1/topics/t/events")
                .bearer_auth("wrong")
                .json(&json!({"type": "x", "payload": 1})),
        )
        .await;
    assert_eq!(status, 403);
    let (status, _) = gw
        .send(
            gw.post_builder("/v1/topics/t/events")
                .bearer_auth("key-two")
                .json(&json!({"type": "x", "payload": 1})),
        )
        .await;
    assert_eq!(status, 202);
    assert_eq!(gw.get("/healthz").await.0, 200);
    assert_eq!(gw.get("/v1/deliveries").await.0, 401);
    gw.api_key = key;
    assert_eq!(gw.get("/v1/deliveries").await.0, 200);
}

#[tokio::test]
async fn per_key_rate_limits_answer_429_with_retry_after() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [k]\n  rate_limit_per_key: 2\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    let mut statuses = Vec::new();
    let mut retry_after = None;
    for _ in 0..6 {
        let response = gw
            .post_builder("/v1/topics/t/events")
            .json(&json!({"type": "x", "payload": 1}))
            .send()
            .await
            .unwrap();
        if response.status() == 429 {
            retry_after = response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned());
        }
        statuses.push(response.status().as_u16());
    }
    assert!(
        statuses.iter().filter(|s| **s == 202).count() >= 2,
        "{statuses:?}"
    );
    assert!(statuses.contains(&429), "{statuses:?}");
    assert!(retry_after.unwrap().parse::<u64>().unwrap() >= 1);
}
