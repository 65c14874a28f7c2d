use serde_json::json;

use crate::support::{Sink, TestGateway};

async fn gateway() -> (TestGateway, Sink) {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "server:\n  max_body: 1KiB\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    (gw, sink)
}

fn code(body: &serde_json::Value) -> &str {
    body["error"]["code"].as_str().unwrap_or("<no error code>")
}

#[tokio::test]
async fn malformed_bodies_get_400_and_change_nothing() {
    let (gw, _sink) = gateway().await;
    for body in [
        r#"{"type": "x""#,
        r#"{"payload": {}}"#,
        r#"{"type": "", "payload": 1}"#,
        r#"[1,2]"#,
        r#"{"type":"x","payload":1,"colour":"blue"}"#,
    ] {
        let (status, answer) = gw
            .send(
                gw.post_builder("/v1/topics/t/events")
                    .header("content-type", "application/json")
                    .body(body),
            )
            .await;
        assert_eq!(status, 400, "{body} → {answer}");
        assert!(answer["error"]["message"].as_str().is_some_and(|m| !m.is_empty()));
    }
    let (_, list) = gw.get("/v1/deliveries").await;
    assert!(list["deliveries"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn deeply_nested_json_is_refused() {
    let (gw, _sink) = gateway().await;
    let deep = format!(
        r#"{{"type":"x","id":"too-deep","payload":{}1{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    let (status, body) = gw
        .send(
            gw.post_builder("/v1/topics/t/events")
                .header("content-type", "application/json")
                .body(deep),
        )
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(code(&body), "payload_too_deep", "{body}");
    // Nothing was written: no event under the id, no delivery, and no row in the database.
    let (status, body) = gw.get("/v1/events/too-deep").await;
    assert_eq!(status, 404, "{body}");
    let (_, list) = gw.get("/v1/deliveries").await;
    assert!(list["deliveries"].as_array().unwrap().is_empty(), "{list}");
    let tables = ["events", "deliveries", "idempotency"];
    let rows = crate::support::row_counts(gw.dir.path(), &tables).await;
    assert_eq!(rows, [0, 0, 0], "rows in {tables:?}");
}

#[tokio::test]
async fn an_unknown_topic_is_404() {
    let (gw, _sink) = gateway().await;
    let (status, body) = gw
        .post("/v1/topics/nope/events", json!({"type": "x", "payload": {}}))
        .await;
    assert_eq!(status, 404);
    assert_eq!(code(&body), "unknown_topic");
}

#[tokio::test]
async fn a_body_over_the_limit_is_413() {
    let (gw, _sink) = gateway().await;
    let big = "x".repeat(2048);
    let (status, body) = gw
        .post("/v1/topics/t/events", json!({"type": "x", "payload": big}))
        .await;
    assert_eq!(status, 413);
    assert_eq!(code(&body), "payload_too_large");
    // Also without a Content-Length (chunked): the limit holds while streaming.
    let chunks: Vec<Result<bytes::Bytes, std::io::Error>> = (0..64)
        .map(|_| Ok(bytes::Bytes::from(vec![b' '; 1024])))
        .collect();
    let stream = futures_util::stream::iter(chunks);
    let (status, _) = gw
        .send(
            gw.post_builder("/v1/topics/t/events")
                .header("content-type", "application/json")
                .body(reqwest::Body::wrap_stream(stream)),
        )
        .await;
    assert_eq!(status, 413);
}

#[tokio::test]
async fn batches_are_checked_whole() {
    let (gw, _sink) = gateway().await;
    let (status, body) = gw.post("/v1/topics/t/events/batch", json!({"events": []})).await;
    assert_eq!((status, code(&body)), (400, "empty_batch"));
    let one = json!({"type": "x", "payload": 1});
    let too_many: Vec<_> = (0..1001).map(|_| one.clone()).collect();
    // 1001 tiny events are over 1 KiB; allow the body, check the count.
    let sink = Sink::start().await;
    let big = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    let (status, body) = big
        .post("/v1/topics/t/events/batch", json!({"events": too_many}))
        .await;
    assert_eq!((status, code(&body)), (400, "batch_too_large"));
    // One bad event spoils the batch: nothing is written.
    let (status, _) = gw
        .post(
            "/v1/topics/t/events/batch",
            json!({"events": [one, {"type": "", "payload": 1}]}),
        )
        .await;
    assert_eq!(status, 400);
    let (_, list) = gw.get("/v1/deliveries").await;
    assert!(list["deliveries"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn a_duplicate_event_id_is_409_and_creates_nothing() {
    let (gw, sink) = gateway().await;
    let (status, first) = gw
        .post(
            "/v1/topics/t/events",
            json!({"type": "x", "payload": 1, "id": "ord-1"}),
        )
        .await;
    assert_eq!((status, first["id"].as_str()), (202, Some("ord-1")));
    let (status, body) = gw
        .post(
            "/v1/topics/t/events",
            json!({"type": "x", "payload": 2, "id": "ord-1"}),
        )
        .await;
    assert_eq!(status, 409);
    assert_eq!(code(&body), "duplicate_event");
    assert!(body["error"]["message"].as_str().unwrap().contains("ord-1"));
    // The existing event's id as a field, for clients that carry on with it.
    assert_eq!(body["error"]["id"], "ord-1");
    sink.wait_for(1, std::time::Duration::from_secs(10)).await;
    let (_, list) = gw.get("/v1/deliveries").await;
    assert_eq!(list["deliveries"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn unknown_ids_and_routes_are_404_with_a_json_error() {
    let (gw, _sink) = gateway().await;
    for path in [
        "/v1/events/nope",
        "/v1/deliveries/dlv_999",
        "/v1/deliveries/garbage",
        "/v1/endpoints/nope",
        "/v1/nothing",
    ] {
        let (status, body) = gw.get(path).await;
        assert_eq!(status, 404, "{path}");
        assert!(body["error"]["code"].is_string(), "{path}: {body}");
    }
    let (status, body) = gw.get("/v1/deliveries?status=lost").await;
    assert_eq!((status, code(&body)), (400, "invalid_status"));
}
