//! Tenants: events reach only their tenant's endpoints (and those without a tenant); a
//! tenant's key or console token sees and changes only its own, on every route of the API.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Sink, TestGateway, WAIT};

const ADMIN: &str = "admin-key";
const ACME: &str = "acme-key";
const GLOBEX: &str = "globex-key";

/// Three endpoints on one topic: one per tenant and an internal one without a tenant.
async fn gateway(sinks: &[&Sink; 3]) -> TestGateway {
    TestGateway::start(&format!(
        "server:\n  api_keys:\n    - {ADMIN}\n    - {{key: {ACME}, tenant: acme}}\n    - {{key: {GLOBEX}, tenant: globex}}\n\
         topics:\n  t: {{}}\nendpoints:\n  acme-hooks:\n    url: {}\n    topics: [t]\n    tenant: acme\n\
         \x20 globex-hooks:\n    url: {}\n    topics: [t]\n    tenant: globex\n  audit:\n    url: {}\n    topics: [t]\n",
        sinks[0].url("/acme"),
        sinks[1].url("/globex"),
        sinks[2].url("/audit"),
    ))
    .await
}

async fn ingest_as(gw: &TestGateway, key: &str, body: Value) -> (u16, Value) {
    gw.call_as(Some(key), Method::POST, "/v1/topics/t/events", Some(body))
        .await
}

#[tokio::test]
async fn a_tenants_event_reaches_its_endpoints_and_the_internal_ones_only() {
    let (acme, globex, audit) = (Sink::start().await, Sink::start().await, Sink::start().await);
    let gw = gateway(&[&acme, &globex, &audit]).await;

    let (status, a) = ingest_as(&gw, ADMIN, json!({"type": "x", "payload": {}, "tenant": "acme"})).await;
    assert_eq!((status, a["deliveries"].as_u64()), (202, Some(2)), "{a}");
    let (status, b) = ingest_as(&gw, ADMIN, json!({"type": "x", "payload": {}})).await;
    assert_eq!(
        (status, b["deliveries"].as_u64()),
        (202, Some(1)),
        "no tenant: internal only"
    );
    // A tenant's key gives its events its tenant.
    let (status, c) = ingest_as(&gw, GLOBEX, json!({"type": "x", "payload": {}})).await;
    assert_eq!((status, c["deliveries"].as_u64()), (202, Some(2)), "{c}");
    let (status, refused) =
        ingest_as(&gw, GLOBEX, json!({"type": "x", "payload": {}, "tenant": "acme"})).await;
    assert_eq!(
        (status, refused["error"]["code"].as_str()),
        (403, Some("tenant_mismatch"))
    );

    audit.wait_for(3, WAIT).await;
    acme.wait_for(1, WAIT).await;
    globex.wait_for(1, WAIT).await;
    gw.settle().await;
    assert_eq!(acme.count(), 1);
    assert_eq!(globex.count(), 1);
    let (_, event) = gw
        .call_as(
            Some(ADMIN),
            Method::GET,
            &format!("/v1/events/{}", a["id"].as_str().unwrap()),
            None,
        )
        .await;
    assert_eq!(event["tenant"], "acme");
}

/// The ids of globex's things, for the route walk.
struct Theirs {
    event: String,
    delivery: String,
    /// Its Svix application's id, and an attempt of its delivery.
    app: String,
    attempt: String,
}

fn fill(path: &str, theirs: &Theirs) -> String {
    path.replace(
        "/v1/deliveries/{id}",
        &format!("/v1/deliveries/{}", theirs.delivery),
    )
    .replace("/v1/events/{id}", &format!("/v1/events/{}", theirs.event))
    .replace("/v1/endpoints/{name}", "/v1/endpoints/globex-hooks")
    .replace("/v1/policies/{name}", "/v1/policies/standard")
    .replace("/v1/event-types/{name}", "/v1/event-types/x")
    .replace("{topic}", "t")
    .replace("{tenant}", "globex")
    // The Svix API: globex's application, endpoint, message and attempt.
    .replace("{app_id}", &theirs.app)
    .replace("{endpoint_id}", "globex-hooks")
    .replace("{msg_id}", &theirs.event)
    .replace("{attempt_id}", &theirs.attempt)
    .replace("{event_type_name}", "x")
}

/// A body that asks for globex where a route takes one.
fn body_for(path: &str) -> Value {
    let event = json!({"type": "x", "payload": {}, "tenant": "globex"});
    match path {
        "/v1/topics/{topic}/events" => event,
        "/v1/topics/{topic}/events/batch" => json!({"events": [event]}),
        "/v1/endpoints/{name}/replay" => json!({"since": "2026-01-01T00:00:00Z"}),
        _ => json!({"url": "http://127.0.0.1:9/x", "topics": ["t"], "tenant": "globex"}),
    }
}

/// Every route of the OpenAPI document, called with acme's key on globex's things: nothing of
/// globex in any answer, nothing of globex changed.
#[tokio::test]
async fn a_tenant_key_sees_and_changes_nothing_of_another_tenant_on_any_route() {
    let (acme, globex, audit) = (Sink::start().await, Sink::start().await, Sink::start().await);
    let gw = gateway(&[&acme, &globex, &audit]).await;
    let (_, theirs) = ingest_as(
        &gw,
        GLOBEX,
        json!({"type": "x", "payload": {"secret-ish": "globex-data"}}),
    )
    .await;
    let (_, _) = ingest_as(&gw, ACME, json!({"type": "x", "payload": {}})).await;
    globex.wait_for(1, WAIT).await;
    acme.wait_for(1, WAIT).await;
    audit.wait_for(2, WAIT).await;
    gw.settle().await;
    let event = theirs["id"].as_str().unwrap().to_owned();
    let (_, listed) = gw
        .call_as(
            Some(ADMIN),
            Method::GET,
            "/v1/deliveries?endpoint=globex-hooks",
            None,
        )
        .await;
    let delivery = listed["deliveries"][0]["id"].as_str().unwrap().to_owned();
    // globex as a Svix application (its uid is the tenant), and its catalog entry.
    let (status, app) = gw
        .call_as(
            Some(ADMIN),
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": "Globex", "uid": "globex"})),
        )
        .await;
    assert_eq!(status, 201, "{app}");
    let app = app["id"].as_str().unwrap().to_owned();
    let (_, attempts) = gw
        .call_as(
            Some(ADMIN),
            Method::GET,
            &format!("/api/v1/app/{app}/attempt/msg/{event}"),
            None,
        )
        .await;
    let attempt = attempts["data"][0]["id"].as_str().unwrap().to_owned();
    let (status, _) = gw
        .call_as(
            Some(ADMIN),
            Method::POST,
            "/v1/event-types",
            Some(json!({"name": "x", "description": "the walk's type"})),
        )
        .await;
    assert_eq!(status, 201);
    let theirs = Theirs {
        event: event.clone(),
        delivery: delivery.clone(),
        app: app.clone(),
        attempt: attempt.clone(),
    };
    let globex_marks = [
        "globex",
        event.as_str(),
        delivery.as_str(),
        app.as_str(),
        attempt.as_str(),
    ];

    let (_, doc) = gw.call_as(None, Method::GET, "/openapi.json", None).await;
    let mut walked = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, _) in item.as_object().unwrap() {
            let method: Method = method.to_uppercase().parse().unwrap();
            let url = fill(path, &theirs);
            let (status, answer) = gw
                .call_as(Some(ACME), method.clone(), &url, Some(body_for(path)))
                .await;
            walked += 1;
            let text = answer.to_string();
            // An error may echo what was asked for; an answer must show nothing of globex.
            if (200..300).contains(&status) {
                for mark in globex_marks {
                    assert!(!text.contains(mark), "{method} {url} showed `{mark}`: {text}");
                }
            }
            // The event type catalog is every tenant's to read (and an admin's to change).
            let shared = ["/healthz", "/metrics", "/openapi.json", "/api/v1/health"].contains(&path.as_str())
                || path.starts_with("/v1/policies")
                || path.starts_with("/v1/event-types")
                || path.starts_with("/api/v1/event-type");
            if !shared && path.contains('{') {
                assert!(
                    [403, 404].contains(&status),
                    "{method} {url} answered {status} to another tenant's key: {text}"
                );
            }
            if path.starts_with("/v1/topics/{topic}/events")
                || path == "/v1/endpoints" && method == Method::POST
            {
                assert_eq!(status, 403, "{method} {url}: {text}");
            }
        }
    }
    assert!(walked >= 60, "the walk covered only {walked} routes");

    // Nothing of globex changed: its endpoint, its one delivery, its one event.
    let (status, ep) = gw
        .call_as(Some(GLOBEX), Method::GET, "/v1/endpoints/globex-hooks", None)
        .await;
    assert_eq!(status, 200);
    assert_eq!(ep["url"], globex.url("/globex"));
    let (_, mine) = gw
        .call_as(Some(GLOBEX), Method::GET, "/v1/deliveries", None)
        .await;
    assert_eq!(mine["deliveries"].as_array().unwrap().len(), 1, "{mine}");
    assert_eq!(mine["deliveries"][0]["attempt_count"], 1, "not redelivered");
    assert_eq!(globex.count(), 1);
    let (status, _) = gw
        .call_as(Some(ADMIN), Method::GET, &format!("/api/v1/app/{app}"), None)
        .await;
    assert_eq!(status, 200, "globex's application is still there");

    // And acme sees its own.
    let (_, mine) = gw.call_as(Some(ACME), Method::GET, "/v1/endpoints", None).await;
    let names: Vec<&str> = mine["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["acme-hooks"]);
    let (status, _) = gw
        .call_as(Some(ACME), Method::GET, "/v1/endpoints/acme-hooks", None)
        .await;
    assert_eq!(status, 200);
    let (_, mine) = gw.call_as(Some(ACME), Method::GET, "/v1/deliveries", None).await;
    let endpoints: Vec<&str> = mine["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["endpoint"].as_str().unwrap())
        .collect();
    assert_eq!(
        endpoints,
        ["acme-hooks"],
        "not the internal endpoint's delivery of acme's event"
    );
}

#[tokio::test]
async fn a_tenant_creates_and_manages_only_endpoints_of_its_own() {
    let (acme, globex, audit) = (Sink::start().await, Sink::start().await, Sink::start().await);
    let gw = gateway(&[&acme, &globex, &audit]).await;
    let (status, created) = gw
        .call_as(
            Some(ACME),
            Method::POST,
            "/v1/endpoints",
            Some(json!({"name": "acme-2", "url": acme.url("/two"), "topics": ["t"]})),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["tenant"], "acme");
    for key in [GLOBEX] {
        let (status, _) = gw
            .call_as(
                Some(key),
                Method::PATCH,
                "/v1/endpoints/acme-2",
                Some(json!({"types": ["y"]})),
            )
            .await;
        assert_eq!(status, 404);
        let (status, _) = gw
            .call_as(Some(key), Method::DELETE, "/v1/endpoints/acme-2", None)
            .await;
        assert_eq!(status, 404);
    }
    let (status, patched) = gw
        .call_as(
            Some(ACME),
            Method::PATCH,
            "/v1/endpoints/acme-2",
            Some(json!({"tenant": "globex"})),
        )
        .await;
    assert_eq!(status, 400, "the tenant does not change: {patched}");
    let (status, _) = gw
        .call_as(Some(ADMIN), Method::GET, "/v1/endpoints?tenant=acme", None)
        .await;
    assert_eq!(status, 200);
    let (_, listed) = gw
        .call_as(Some(ADMIN), Method::GET, "/v1/endpoints?tenant=acme", None)
        .await;
    assert_eq!(listed["endpoints"].as_array().unwrap().len(), 2, "{listed}");
    let (status, _) = gw
        .call_as(Some(ACME), Method::DELETE, "/v1/endpoints/acme-2", None)
        .await;
    assert_eq!(status, 204);
}

#[tokio::test]
async fn a_console_token_opens_one_tenant_until_it_expires() {
    let (acme, globex, audit) = (Sink::start().await, Sink::start().await, Sink::start().await);
    let gw = gateway(&[&acme, &globex, &audit]).await;
    let (status, issued) = gw
        .call_as(
            Some(ADMIN),
            Method::POST,
            "/v1/tenants/acme/console-token",
            Some(json!({"ttl": "1h"})),
        )
        .await;
    assert_eq!(status, 200, "{issued}");
    let token = issued["token"].as_str().unwrap().to_owned();
    assert!(token.starts_with("hgc_"));
    assert!(
        issued["url"]
            .as_str()
            .unwrap()
            .contains(&format!("/console/#token={token}")),
        "{issued}"
    );

    let (status, listed) = gw.call_as(Some(&token), Method::GET, "/v1/endpoints", None).await;
    assert_eq!(status, 200);
    assert_eq!(listed["endpoints"].as_array().unwrap().len(), 1);
    assert_eq!(listed["endpoints"][0]["name"], "acme-hooks");
    let (status, _) = gw
        .call_as(Some(&token), Method::GET, "/v1/endpoints/globex-hooks", None)
        .await;
    assert_eq!(status, 404);
    let (status, body) = gw.call_as(Some(&token), Method::GET, "/v1/status", None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (403, Some("admin_only"))
    );
    // Neither a token nor a tenant's key makes tokens.
    for key in [token.as_str(), ACME] {
        let (status, _) = gw
            .call_as(Some(key), Method::POST, "/v1/tenants/acme/console-token", None)
            .await;
        assert_eq!(status, 403);
    }
    // A token with a flipped byte is refused.
    let mut forged = token.clone().into_bytes();
    let last = forged.len() - 2;
    forged[last] = if forged[last] == b'A' { b'B' } else { b'A' };
    let (status, _) = gw
        .call_as(
            Some(&String::from_utf8(forged).unwrap()),
            Method::GET,
            "/v1/endpoints",
            None,
        )
        .await;
    assert_eq!(status, 403);

    gw.advance(Duration::from_secs(3600)).await;
    let (status, body) = gw.call_as(Some(&token), Method::GET, "/v1/endpoints", None).await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (401, Some("token_expired"))
    );
}
