//! The event type catalog through hookgate's own API: kept in the store, read by tenants,
//! changed by admins, and a type's JSON Schema checked against every payload of that type
//! (the ingestion API and the Svix API alike).

use reqwest::Method;
use serde_json::json;

use crate::support::{Sink, TestGateway, WAIT};

const KEYS: &str = "server:\n  api_keys: [admin, {key: acme, tenant: acme}]\n";

async fn call(
    gw: &TestGateway,
    method: Method,
    path: &str,
    body: Option<serde_json::Value>,
) -> (u16, serde_json::Value) {
    gw.call_as(Some("admin"), method, path, body).await
}

fn schema() -> serde_json::Value {
    json!({"1": {"type": "object", "required": ["email"], "properties": {"email": {"type": "string", "format": "email"}}},
           "2": {"type": "object", "required": ["email", "name"],
                 "properties": {"email": {"type": "string"}, "name": {"type": "string"}}}})
}

#[tokio::test]
async fn a_type_with_a_schema_refuses_payloads_that_break_its_latest_version() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "{KEYS}topics:\n  users: {{}}\nendpoints:\n  crm:\n    url: {}\n    topics: [users]\n",
        sink.url("/crm")
    ))
    .await;
    let (status, created) = call(
        &gw,
        Method::POST,
        "/v1/event-types",
        Some(json!({"name": "user.signup", "description": "A user signed up", "schemas": schema()})),
    )
    .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["schemas"], schema());

    // Version 2 is the latest: `name` is required.
    let event = |payload| json!({"type": "user.signup", "payload": payload});
    let (status, refused) = call(
        &gw,
        Method::POST,
        "/v1/topics/users/events",
        Some(event(json!({"email": "a@b.c"}))),
    )
    .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "payload_schema_mismatch");
    let message = refused["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("user.signup") && message.contains("name"),
        "{message}"
    );
    let (status, refused) = call(
        &gw,
        Method::POST,
        "/v1/topics/users/events",
        Some(event(json!({"email": 7, "name": "Ann"}))),
    )
    .await;
    assert_eq!(status, 400);
    assert!(
        refused["error"]["message"].as_str().unwrap().contains("/email"),
        "{refused}"
    );
    // A batch with one bad event stores none.
    let (status, _) = call(
        &gw,
        Method::POST,
        "/v1/topics/users/events/batch",
        Some(json!({"events": [event(json!({"email": "a@b.c", "name": "A"})), event(json!({}))]})),
    )
    .await;
    assert_eq!(status, 400);

    let (status, accepted) = call(
        &gw,
        Method::POST,
        "/v1/topics/users/events",
        Some(event(json!({"email": "a@b.c", "name": "Ann"}))),
    )
    .await;
    assert_eq!(status, 202, "{accepted}");
    // Types without a schema, and types not in the catalog, take any payload.
    let (status, _) = call(
        &gw,
        Method::POST,
        "/v1/topics/users/events",
        Some(json!({"type": "user.other", "payload": [1, 2]})),
    )
    .await;
    assert_eq!(status, 202);
    sink.wait_for(2, WAIT).await;
    gw.settle().await;
    assert_eq!(sink.count(), 2, "nothing refused was delivered");

    // Without its schema the type takes the payload it refused.
    let (status, changed) = call(
        &gw,
        Method::PATCH,
        "/v1/event-types/user.signup",
        Some(json!({"schemas": null, "deprecated": true})),
    )
    .await;
    assert_eq!(status, 200, "{changed}");
    assert!(changed["schemas"].is_null() && changed["deprecated"] == true);
    let (status, _) = call(
        &gw,
        Method::POST,
        "/v1/topics/users/events",
        Some(event(json!({"email": 7}))),
    )
    .await;
    assert_eq!(status, 202);
}

#[tokio::test]
async fn the_catalog_is_listed_by_name_and_archived_types_are_hidden_unless_asked_for() {
    let gw = TestGateway::start(KEYS).await;
    for name in ["b.two", "a.one", "c.three"] {
        let (status, _) = gw
            .call_as(
                Some("admin"),
                Method::POST,
                "/v1/event-types",
                Some(json!({"name": name, "description": name})),
            )
            .await;
        assert_eq!(status, 201);
    }
    let (status, taken) = gw
        .call_as(
            Some("admin"),
            Method::POST,
            "/v1/event-types",
            Some(json!({"name": "a.one"})),
        )
        .await;
    assert_eq!(
        (status, taken["error"]["code"].as_str()),
        (409, Some("event_type_exists"))
    );
    let (status, bad) = gw
        .call_as(
            Some("admin"),
            Method::POST,
            "/v1/event-types",
            Some(json!({"name": "bad name", "schemas": {"1": {"type": "colour"}}})),
        )
        .await;
    assert_eq!(
        (status, bad["error"]["code"].as_str()),
        (400, Some("invalid_event_type"))
    );
    let (status, _) = gw
        .call_as(Some("admin"), Method::DELETE, "/v1/event-types/b.two", None)
        .await;
    assert_eq!(status, 204);

    // A tenant reads the catalog, one page at a time.
    let (_, first) = gw
        .call_as(Some("acme"), Method::GET, "/v1/event-types?limit=1", None)
        .await;
    assert_eq!(first["event_types"][0]["name"], "a.one");
    let cursor = first["next_cursor"].as_str().unwrap();
    let (_, rest) = gw
        .call_as(
            Some("acme"),
            Method::GET,
            &format!("/v1/event-types?cursor={cursor}"),
            None,
        )
        .await;
    let names: Vec<&str> = rest["event_types"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["c.three"], "the archived type is hidden: {rest}");
    assert!(rest["next_cursor"].is_null());
    let (_, all) = gw
        .call_as(
            Some("acme"),
            Method::GET,
            "/v1/event-types?include_archived=true",
            None,
        )
        .await;
    assert_eq!(all["event_types"].as_array().unwrap().len(), 3);
    assert_eq!(all["event_types"][1]["archived"], true);
    // ...and changes nothing.
    let (status, _) = gw
        .call_as(
            Some("acme"),
            Method::POST,
            "/v1/event-types",
            Some(json!({"name": "x.y"})),
        )
        .await;
    assert_eq!(status, 403);
    let (status, _) = gw
        .call_as(Some("acme"), Method::DELETE, "/v1/event-types/a.one", None)
        .await;
    assert_eq!(status, 403);
    // Expunged, it is gone.
    let (status, _) = gw
        .call_as(
            Some("admin"),
            Method::DELETE,
            "/v1/event-types/a.one?expunge=true",
            None,
        )
        .await;
    assert_eq!(status, 204);
    let (status, _) = gw
        .call_as(Some("admin"), Method::GET, "/v1/event-types/a.one", None)
        .await;
    assert_eq!(status, 404);
}
