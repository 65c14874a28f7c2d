use std::time::Duration;

use serde_json::json;

use crate::support::{Sink, TestGateway};

async fn gateway() -> (TestGateway, Sink) {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    (gw, sink)
}

async fn post_with_key(
    gw: &TestGateway,
    key: &str,
    body: serde_json::Value,
) -> (u16, serde_json::Value, bool) {
    let response = gw
        .post_builder("/v1/topics/t/events")
        .header("idempotency-key", key)
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let replayed = response.headers().contains_key("idempotent-replayed");
    (status, response.json().await.unwrap_or_default(), replayed)
}

#[tokio::test]
async fn the_same_key_and_body_answer_the_same_and_create_nothing_new() {
    let (gw, sink) = gateway().await;
    let body = json!({"type": "order.created", "payload": {"n": 1}});
    let (s1, a1, r1) = post_with_key(&gw, "k-1", body.clone()).await;
    let (s2, a2, r2) = post_with_key(&gw, "k-1", body.clone()).await;
    assert_eq!((s1, r1), (202, false));
    assert_eq!((s2, r2), (202, true));
    assert_eq!(a1, a2);
    sink.wait_for(1, Duration::from_secs(10)).await;
    let (_, list) = gw.get("/v1/deliveries").await;
    assert_eq!(list["deliveries"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn the_same_key_with_another_body_is_422() {
    let (gw, _sink) = gateway().await;
    let (s1, _, _) = post_with_key(&gw, "k-2", json!({"type": "x", "payload": 1})).await;
    let (s2, a2, _) = post_with_key(&gw, "k-2", json!({"type": "x", "payload": 2})).await;
    assert_eq!((s1, s2), (202, 422));
    assert_eq!(a2["error"]["code"], "idempotency_key_reused");
}

#[tokio::test]
async fn keys_are_scoped_per_api_key() {
    let sink = Sink::start().await;
    let mut gw = TestGateway::start(&format!(
        "server:\n  api_keys: [alice, bob]\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    gw.api_key = None; // each request below names its own key
    let body = json!({"type": "x", "payload": 1});
    let mut ids = Vec::new();
    for key in ["alice", "bob"] {
        let r = gw
            .post_builder("/v1/topics/t/events")
            .bearer_auth(key)
            .header("idempotency-key", "shared")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 202);
        let v: serde_json::Value = r.json().await.unwrap();
        ids.push(v["id"].as_str().unwrap().to_owned());
    }
    assert_ne!(ids[0], ids[1], "two callers' keys must not collide");
}

#[tokio::test]
async fn concurrent_requests_with_one_key_create_one_event() {
    let (gw, sink) = gateway().await;
    let body = json!({"type": "x", "payload": {"n": 1}});
    let requests = (0..24).map(|_| post_with_key(&gw, "race", body.clone()));
    let answers = futures_util::future::join_all(requests).await;
    let fresh = answers.iter().filter(|(s, _, r)| *s == 202 && !r).count();
    let others_ok = answers.iter().all(|(s, _, r)| (*s == 202) || (*s == 409 && !r));
    assert_eq!(fresh, 1, "{answers:?}");
    assert!(
        others_ok,
        "only 202 (first or replayed) and 409 (in use) are allowed: {answers:?}"
    );
    for (s, a, _) in &answers {
        if *s == 409 {
            assert_eq!(a["error"]["code"], "idempotency_key_in_use");
        }
    }
    sink.wait_for(1, Duration::from_secs(10)).await;
    let (_, list) = gw.get("/v1/deliveries").await;
    assert_eq!(list["deliveries"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn a_key_survives_a_restart() {
    let (mut gw, _sink) = gateway().await;
    let body = json!({"type": "x", "payload": 1});
    let (_, first, _) = post_with_key(&gw, "k-restart", body.clone()).await;
    gw.stop().await;
    let dir = gw.dir.clone();
    let sink = Sink::start().await;
    let gw2 = TestGateway::start_in(
        dir,
        &format!(
            "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
            sink.url("/")
        ),
        gw.clock.clone(),
    )
    .await;
    let (status, again, replayed) = post_with_key(&gw2, "k-restart", body).await;
    assert_eq!((status, replayed), (202, true));
    assert_eq!(again, first);
}
