//! Channels, Svix's second routing dimension, through hookgate's own API and YAML: an endpoint
//! without channels receives every event; an endpoint with channels receives only events that
//! name one of them, so never an event without channels. Replays keep the rule.

use serde_json::json;

use crate::support::{Sink, TestGateway, WAIT};

#[tokio::test]
async fn an_event_reaches_the_endpoints_of_its_channels_and_the_endpoints_without_channels() {
    let (eu, both, all) = (Sink::start().await, Sink::start().await, Sink::start().await);
    let gw = TestGateway::start(&format!(
        "topics:\n  orders: {{}}\nendpoints:\n  eu:\n    url: {}\n    topics: [orders]\n    channels: [eu]\n\
         \x20 both:\n    url: {}\n    topics: [orders]\n    channels: [eu, us]\n  all:\n    url: {}\n    topics: [orders]\n",
        eu.url("/eu"),
        both.url("/both"),
        all.url("/all"),
    ))
    .await;
    let post = |body| gw.post("/v1/topics/orders/events", body);
    let (status, on_eu) = post(json!({"type": "o", "payload": {"n": 1}, "channels": ["eu"]})).await;
    assert_eq!(status, 202, "{on_eu}");
    assert_eq!(on_eu["deliveries"], 3);
    let (_, on_us) = post(json!({"type": "o", "payload": {"n": 2}, "channels": ["us", "apac"]})).await;
    assert_eq!(on_us["deliveries"], 2, "both and all");
    let (_, none) = post(json!({"type": "o", "payload": {"n": 3}})).await;
    assert_eq!(none["deliveries"], 1, "only the endpoint without channels");
    let (_, other) = post(json!({"type": "o", "payload": {"n": 4}, "channels": ["apac"]})).await;
    assert_eq!(other["deliveries"], 1);

    all.wait_for(4, WAIT).await;
    both.wait_for(2, WAIT).await;
    eu.wait_for(1, WAIT).await;
    gw.settle().await;
    assert_eq!((eu.count(), both.count(), all.count()), (1, 2, 4));

    // The event keeps its channels; a raw body names them in a header.
    let (_, event) = gw
        .get(&format!("/v1/events/{}", on_us["id"].as_str().unwrap()))
        .await;
    assert_eq!(event["channels"], json!(["us", "apac"]), "{event}");
    let (status, raw) = gw
        .send(
            gw.post_builder("/v1/topics/orders/events")
                .header("content-type", "text/plain")
                .header("event-type", "o")
                .header("event-channels", "us")
                .body("hello"),
        )
        .await;
    assert_eq!(status, 202, "{raw}");
    assert_eq!(raw["deliveries"], 2);

    // An endpoint's view shows its channels.
    let (_, view) = gw.get("/v1/endpoints/both").await;
    assert_eq!(view["channels"], json!(["eu", "us"]));
}

#[tokio::test]
async fn bad_channels_are_refused_and_nothing_is_stored() {
    let gw = TestGateway::start("topics:\n  orders: {}\n").await;
    let too_many = json!({"type": "o", "payload": {}, "channels": ["a", "b", "c", "d", "e", "f"]});
    let (status, answer) = gw.post("/v1/topics/orders/events", too_many).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "invalid_channels");
    let (status, answer) = gw
        .post(
            "/v1/topics/orders/events",
            json!({"type": "o", "payload": {}, "channels": ["no spaces"]}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    let (status, answer) = gw
        .post(
            "/v1/endpoints",
            json!({"url": "http://127.0.0.1:9/x", "topics": ["orders"], "channels": ["bad channel"]}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["problems"][0]["path"], "channels[0]", "{answer}");
}

#[tokio::test]
async fn a_replay_sends_only_the_events_of_the_endpoints_channels() {
    let sink = Sink::start().await;
    let gw = TestGateway::start("topics:\n  orders: {}\n").await;
    for (n, channels) in [(1, json!(["eu"])), (2, json!(["us"])), (3, json!([]))] {
        let (status, _) = gw
            .post(
                "/v1/topics/orders/events",
                json!({"type": "o", "payload": {"n": n}, "channels": channels}),
            )
            .await;
        assert_eq!(status, 202);
    }
    // An endpoint made afterwards, for the eu channel, replays the window.
    let (status, created) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "late", "url": sink.url("/late"), "topics": ["orders"], "channels": ["eu"]}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let (status, replayed) = gw
        .send(
            gw.post_builder("/v1/endpoints/late/replay")
                .header("idempotency-key", "late-1")
                .json(&json!({"since": crate::support::START.to_rfc3339()})),
        )
        .await;
    assert_eq!(status, 202, "{replayed}");
    let received = sink.wait_for(1, WAIT).await;
    gw.settle().await;
    assert_eq!(sink.count(), 1, "only the eu event");
    let body: serde_json::Value = serde_json::from_slice(&received[0].body).unwrap();
    assert_eq!(body, json!({"n": 1}));
}

#[tokio::test]
async fn an_endpoint_switched_off_by_its_owner_receives_nothing() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  orders: {{}}\nendpoints:\n  off:\n    url: {}\n    topics: [orders]\n    disabled: true\n",
        sink.url("/off")
    ))
    .await;
    let (_, accepted) = gw
        .post("/v1/topics/orders/events", json!({"type": "o", "payload": {}}))
        .await;
    assert_eq!(accepted["deliveries"], 0);
    let (_, view) = gw.get("/v1/endpoints/off").await;
    assert_eq!(view["disabled"], true);
}
