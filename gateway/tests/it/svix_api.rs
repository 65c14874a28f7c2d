//! The Svix API in hookgate's terms (docs/svix.md): an application is a tenant, its endpoints
//! are `api` endpoints of topic `svix`, its messages events of that tenant, and endpoints made
//! through it send `svix-*` headers beside the `webhook-*` ones, with the same values. Also
//! Svix's shapes of errors, and its idempotency-key. (The official SDKs drive it in
//! `svix_sdk`.)

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Sink, TestGateway, WAIT};

const ADMIN: &str = "admin";

async fn gateway(yaml: &str) -> TestGateway {
    TestGateway::start(&format!(
        "server:\n  api_keys: [{ADMIN}, {{key: acme-key, tenant: acme}}]\n{yaml}"
    ))
    .await
}

async fn call(gw: &TestGateway, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    gw.call_as(Some(ADMIN), method, path, body).await
}

#[tokio::test]
async fn an_application_is_a_tenant_and_its_messages_are_events_of_the_svix_topic() {
    let (svix_sink, plain_sink) = (Sink::start().await, Sink::start().await);
    // An internal endpoint of the file on the same topic: every tenant's events, no svix-*.
    let gw = gateway(&format!(
        "endpoints:\n  audit:\n    url: {}\n    topics: [svix]\n",
        plain_sink.url("/audit")
    ))
    .await;
    let (status, app) = call(
        &gw,
        Method::POST,
        "/api/v1/app",
        Some(json!({"name": "Acme", "uid": "acme"})),
    )
    .await;
    assert_eq!(status, 201, "{app}");
    let (status, _) = call(
        &gw,
        Method::POST,
        "/api/v1/event-type",
        Some(json!({"name": "user.signup", "description": "A user signed up"})),
    )
    .await;
    assert_eq!(status, 201);
    let (status, ep) = call(
        &gw,
        Method::POST,
        "/api/v1/app/acme/endpoint",
        Some(
            json!({"url": svix_sink.url("/acme"), "filterTypes": ["user.signup"], "channels": ["eu"],
                    "rateLimit": 5, "uid": "main"}),
        ),
    )
    .await;
    assert_eq!(status, 201, "{ep}");
    let ep_id = ep["id"].as_str().unwrap();
    assert_eq!(ep["filterTypes"], json!(["user.signup"]));
    assert_eq!(ep["rateLimit"], 5);

    // In hookgate's own API: an endpoint of tenant acme on topic svix.
    let (_, view) = call(&gw, Method::GET, &format!("/v1/endpoints/{ep_id}"), None).await;
    assert_eq!(view["tenant"], "acme");
    assert_eq!(view["topics"], json!(["svix"]));
    assert_eq!(view["types"], json!(["user.signup"]));
    assert_eq!(view["channels"], json!(["eu"]));
    assert_eq!(view["max_per_second"], 5.0);
    assert_eq!(view["source"], "api");

    let (status, msg) = call(
        &gw,
        Method::POST,
        "/api/v1/app/acme/msg",
        Some(
            json!({"eventType": "user.signup", "payload": {"id": 1}, "channels": ["eu"],
                    "eventId": "signup-1", "tags": ["t1"]}),
        ),
    )
    .await;
    assert_eq!(status, 202, "{msg}");
    let msg_id = msg["id"].as_str().unwrap();
    let (_, event) = call(&gw, Method::GET, &format!("/v1/events/{msg_id}"), None).await;
    assert_eq!(event["topic"], "svix");
    assert_eq!(event["tenant"], "acme");
    assert_eq!(event["channels"], json!(["eu"]));
    assert_eq!(event["svix_event_id"], "signup-1");
    assert_eq!(event["tags"], json!(["t1"]));

    // On the wire: svix-* beside webhook-*, the same values; not on the file's endpoint.
    let got = svix_sink.wait_for(1, WAIT).await;
    for (svix, standard) in [
        ("svix-id", "webhook-id"),
        ("svix-timestamp", "webhook-timestamp"),
        ("svix-signature", "webhook-signature"),
    ] {
        assert_eq!(got[0].header(svix), got[0].header(standard), "{svix}");
    }
    assert_eq!(got[0].header("svix-id"), msg_id);
    let audit = plain_sink.wait_for(1, WAIT).await;
    assert!(
        audit[0].headers.get("svix-id").is_none(),
        "a file endpoint without `svix`"
    );

    // An event of tenant acme through hookgate's own API is a message of the application.
    let (status, own) = call(
        &gw,
        Method::POST,
        "/v1/topics/svix/events",
        Some(json!({"type": "user.signup", "payload": {"id": 2}, "tenant": "acme", "channels": ["eu"]})),
    )
    .await;
    assert_eq!(status, 202, "{own}");
    let (_, list) = call(&gw, Method::GET, "/api/v1/app/acme/msg?limit=1", None).await;
    assert_eq!(list["data"][0]["id"], own["id"], "{list}");
    assert_eq!(list["done"], false);
    let (_, rest) = call(
        &gw,
        Method::GET,
        &format!(
            "/api/v1/app/acme/msg?iterator={}",
            list["iterator"].as_str().unwrap()
        ),
        None,
    )
    .await;
    assert_eq!(rest["data"][0]["id"], msg_id);
    assert_eq!(rest["done"], true);
    svix_sink.wait_for(2, WAIT).await;

    // The same eventId again is a conflict, and the first message is found by it.
    let (status, dup) = call(
        &gw,
        Method::POST,
        "/api/v1/app/acme/msg",
        Some(json!({"eventType": "user.signup", "payload": {}, "eventId": "signup-1"})),
    )
    .await;
    assert_eq!((status, dup["code"].as_str()), (409, Some("conflict")), "{dup}");
    let (_, found) = call(&gw, Method::GET, "/api/v1/app/acme/msg/signup-1", None).await;
    assert_eq!(found["id"], msg_id);

    // Deleting the application deletes its endpoints; its events stay readable.
    let (status, _) = call(&gw, Method::DELETE, "/api/v1/app/acme", None).await;
    assert_eq!(status, 204);
    let (status, _) = call(&gw, Method::GET, &format!("/v1/endpoints/{ep_id}"), None).await;
    assert_eq!(status, 404);
    let (status, _) = call(&gw, Method::GET, &format!("/v1/events/{msg_id}"), None).await;
    assert_eq!(status, 200);
}

#[tokio::test]
async fn errors_have_svix_s_shapes() {
    let gw = gateway("").await;
    let (status, none) = gw.call_as(None, Method::GET, "/api/v1/app", None).await;
    assert_eq!(
        (status, none["code"].as_str()),
        (401, Some("authentication_failed")),
        "{none}"
    );
    let (status, wrong) = gw.call_as(Some("nope"), Method::GET, "/api/v1/app", None).await;
    assert_eq!(status, 401, "{wrong}");
    assert!(wrong["detail"].is_string(), "{wrong}");
    let (status, missing) = call(&gw, Method::GET, "/api/v1/app/nope", None).await;
    assert_eq!((status, missing["code"].as_str()), (404, Some("not_found")));
    // A body that does not fit: 422 with where.
    let (status, invalid) = call(&gw, Method::POST, "/api/v1/app", Some(json!({"name": 7}))).await;
    assert_eq!(status, 422, "{invalid}");
    assert_eq!(invalid["detail"][0]["loc"], json!(["body", "name"]), "{invalid}");
    let (status, invalid) = call(&gw, Method::POST, "/api/v1/app", Some(json!({"uid": "x"}))).await;
    assert_eq!(status, 422, "{invalid}");
    let (status, limit) = call(&gw, Method::GET, "/api/v1/app?limit=251", None).await;
    assert_eq!(status, 422, "{limit}");
    // The cloud's calls answer 501; a path that is not Svix's answers Svix's 404.
    let (status, cloud) = call(&gw, Method::GET, "/api/v1/stream", None).await;
    assert_eq!(
        (status, cloud["code"].as_str()),
        (501, Some("not_implemented")),
        "{cloud}"
    );
    let (status, cloud) = call(
        &gw,
        Method::POST,
        "/api/v1/app/x/msg/precheck/active",
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 501, "{cloud}");
    let (status, unknown) = call(&gw, Method::GET, "/api/v1/nothing-here", None).await;
    assert_eq!((status, unknown["code"].as_str()), (404, Some("not_found")));
    let (status, _) = gw.call_as(None, Method::GET, "/api/v1/health", None).await;
    assert_eq!(status, 204, "health needs no key");
}

#[tokio::test]
async fn an_idempotency_key_answers_the_first_creation_again() {
    let gw = gateway("").await;
    let create = || {
        gw.send(
            gw.post_builder("/api/v1/app")
                .bearer_auth(ADMIN)
                .header("idempotency-key", "auto_4f0c")
                .json(&json!({"name": "Once"})),
        )
    };
    let (status, first) = create().await;
    assert_eq!(status, 201, "{first}");
    let (status, again) = create().await;
    assert_eq!(status, 201, "{again}");
    assert_eq!(first["id"], again["id"]);
    let (_, list) = call(&gw, Method::GET, "/api/v1/app", None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "{list}");
}

/// Svix's SDKs are generated from an OpenAPI document whose every answer is typed; so is
/// hookgate's `/openapi.json` for the Svix API: every `/api/v1` operation's 2xx answer with a
/// body names its schema (a 204 has none), and every schema it names is in the document.
#[tokio::test]
async fn every_svix_operation_s_answer_has_a_schema_in_the_openapi_document() {
    let gw = gateway("").await;
    let (status, doc) = gw.get("/openapi.json").await;
    assert_eq!(status, 200);
    let schemas = doc["components"]["schemas"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    let mut operations = 0;
    let mut untyped = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        if !path.starts_with("/api/v1/") {
            continue;
        }
        for (method, operation) in item.as_object().unwrap() {
            operations += 1;
            let responses = operation["responses"].as_object().unwrap();
            let success: Vec<_> = responses
                .iter()
                .filter(|(code, _)| code.starts_with('2'))
                .collect();
            assert!(!success.is_empty(), "{method} {path} documents no 2xx answer");
            for (code, response) in success {
                if code == "204" {
                    continue;
                }
                let schema = &response["content"]["application/json"]["schema"];
                if schema.is_null() {
                    untyped.push(format!("{method} {path} {code}"));
                }
                let text = schema.to_string();
                for name in text.split("#/components/schemas/").skip(1) {
                    let name = name.split('"').next().unwrap();
                    assert!(
                        schemas.contains_key(name),
                        "{method} {path}: `{name}` is not in the document"
                    );
                }
            }
        }
    }
    assert!(operations >= 38, "only {operations} Svix operations documented");
    assert!(untyped.is_empty(), "answers without a schema: {untyped:#?}");
}
