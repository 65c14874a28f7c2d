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

/// The API reads durations with the file's grammar and says why one is refused: a month is
/// not a unit in an endpoint's `timeout`, a console token's `ttl` or a rotation's `overlap`.
#[tokio::test]
async fn durations_in_the_api_follow_the_files_grammar() {
    let (gw, sink) = gateway().await;
    let (status, answer) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "monthly", "url": sink.url("/"), "topics": ["t"], "timeout": "1M"}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["problems"][0]["path"], "timeout", "{answer}");
    let reason = answer["error"]["problems"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("`1M`: months are not a unit: use 30d"),
        "{reason}"
    );

    let (status, answer) = gw
        .post("/v1/tenants/acme/console-token", json!({"ttl": "1.5h"}))
        .await;
    assert_eq!((status, code(&answer)), (400, "invalid_ttl"), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("ttl: `1.5h`: whole numbers only: write 1h 30m"),
        "{message}"
    );

    let (status, created) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "rotating", "url": sink.url("/"), "topics": ["t"]}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    let (status, answer) = gw
        .post(
            "/v1/endpoints/rotating/secret/rotate",
            json!({"overlap": "2 weeks"}),
        )
        .await;
    assert_eq!((status, code(&answer)), (400, "invalid_overlap"), "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("overlap: `2 weeks`: weeks are not a unit: use 14d"),
        "{message}"
    );
    let (status, answer) = gw
        .post(
            "/v1/endpoints/rotating/secret/rotate",
            json!({"overlap": "1h 30m"}),
        )
        .await;
    assert_eq!(status, 200, "{answer}");
}

/// Every refusal of the HTTP API has the JSON error shape, axum's own included: a query
/// string that does not deserialize, a path parameter that does not decode, a body that is not
/// JSON or is too large, a method a route does not have (with `Allow`). The Svix API keeps
/// Svix's shape.
#[tokio::test]
async fn refusals_of_the_framework_are_json_errors_too() {
    let (gw, _sink) = gateway().await;
    let answer = |method: &str, path: &str| {
        gw.http
            .request(method.parse().unwrap(), format!("{}{path}", gw.base))
    };
    let json_error = |response: reqwest::Response| async move {
        let status = response.status().as_u16();
        let allow = response
            .headers()
            .get("allow")
            .map(|v| v.to_str().unwrap().to_owned());
        let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
        assert_eq!(content_type, "application/json", "{status}");
        let body: serde_json::Value = response.json().await.unwrap();
        (status, body, allow)
    };

    let (status, body, _) = json_error(answer("GET", "/v1/deliveries/summary").send().await.unwrap()).await;
    assert_eq!((status, code(&body)), (400, "invalid_query"), "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("missing field `endpoint`"),
        "{body}"
    );

    let (status, body, _) = json_error(answer("GET", "/v1/deliveries?limit=abc").send().await.unwrap()).await;
    assert_eq!((status, code(&body)), (400, "invalid_query"), "{body}");
    assert_eq!(
        body["error"]["message"], "query parameter `limit`: invalid digit found in string",
        "{body}"
    );

    let (status, body, _) = json_error(answer("GET", "/v1/endpoints/%FF").send().await.unwrap()).await;
    assert_eq!((status, code(&body)), (400, "invalid_path"), "{body}");

    let (status, body, allow) = json_error(answer("DELETE", "/v1/stats").send().await.unwrap()).await;
    assert_eq!((status, code(&body)), (405, "method_not_allowed"), "{body}");
    assert_eq!(
        body["error"]["message"],
        "`DELETE` is not a method of `/v1/stats`"
    );
    assert_eq!(allow.as_deref(), Some("GET,HEAD"));

    let (status, body, _) =
        json_error(answer("POST", "/v1/event-types").body("{}").send().await.unwrap()).await;
    assert_eq!((status, code(&body)), (415, "unsupported_media_type"), "{body}");
    let (status, body, _) = json_error(
        answer("POST", "/v1/event-types")
            .header("content-type", "application/json")
            .body(r#"{"name": "#)
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, code(&body)), (400, "malformed_body"), "{body}");

    // Over axum's 2 MB limit for the bodies the API reads whole.
    let (status, body, _) = json_error(
        answer("POST", "/v1/endpoints")
            .header("content-type", "application/json")
            .body(vec![b' '; 3 << 20])
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((status, code(&body)), (413, "payload_too_large"), "{body}");

    // The OpenAPI document still describes the parameters these extractors read.
    let (_, doc) = gw.get("/openapi.json").await;
    let names = |path: &str| -> Vec<String> {
        doc["paths"][path]["get"]["parameters"]
            .as_array()
            .unwrap_or_else(|| panic!("no parameters for {path}"))
            .iter()
            .map(|p| p["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(names("/v1/endpoints/{name}").contains(&"name".to_owned()));
    assert!(names("/v1/deliveries").contains(&"limit".to_owned()));

    // Svix's API answers a wrong method in Svix's shape.
    let (status, body, _) = json_error(answer("PUT", "/api/v1/app").send().await.unwrap()).await;
    assert_eq!(status, 405, "{body}");
    assert_eq!(body["code"], "method_not_allowed", "{body}");
}
