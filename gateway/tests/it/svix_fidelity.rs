//! The Svix API answers what svix-server answers, call by call: each test names the Svix
//! behaviour it pins (paths with a trailing slash, its health ping, 401 for tokens it does not
//! know, its list filters, orders and iterators, its validation of endpoints and its checks
//! of paths against bodies). The mapping itself is in `svix_api`; Svix's SDKs in `svix_sdk`.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::{Reply, Sink, TestGateway, WAIT};

const ADMIN: &str = "admin";

async fn gateway(server: &str) -> TestGateway {
    TestGateway::start(&format!(
        "server:\n  api_keys: [{ADMIN}, {{key: acme-key, tenant: acme}}]\n{server}"
    ))
    .await
}

async fn call(gw: &TestGateway, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
    gw.call_as(Some(ADMIN), method, path, body).await
}

/// An application `uid` with an event type of the catalog, `kind`.
async fn application(gw: &TestGateway, uid: &str, kind: &str) {
    let (status, app) = call(
        gw,
        Method::POST,
        "/api/v1/app",
        Some(json!({"name": uid, "uid": uid})),
    )
    .await;
    assert_eq!(status, 201, "{app}");
    let (status, ty) = call(
        gw,
        Method::PUT,
        &format!("/api/v1/event-type/{kind}"),
        Some(json!({"description": kind})),
    )
    .await;
    assert!([200, 201].contains(&status), "{ty}");
}

/// The `loc` of a 422's first item.
fn loc(body: &Value) -> Value {
    body["detail"][0]["loc"].clone()
}

#[tokio::test]
async fn svix_trims_a_trailing_slash_from_every_path() {
    let gw = gateway("").await;
    let (status, app) = call(
        &gw,
        Method::POST,
        "/api/v1/app/",
        Some(json!({"name": "A", "uid": "a"})),
    )
    .await;
    assert_eq!(status, 201, "{app}");
    let (status, ty) = call(
        &gw,
        Method::POST,
        "/api/v1/event-type/",
        Some(json!({"name": "order.paid", "description": "paid"})),
    )
    .await;
    assert_eq!(status, 201, "{ty}");
    let sink = Sink::start().await;
    let (status, ep) = call(
        &gw,
        Method::POST,
        "/api/v1/app/a/endpoint/",
        Some(json!({"url": sink.url("/a")})),
    )
    .await;
    assert_eq!(status, 201, "{ep}");
    let (status, msg) = call(
        &gw,
        Method::POST,
        "/api/v1/app/a/msg/",
        Some(json!({"eventType": "order.paid", "payload": {}})),
    )
    .await;
    assert_eq!(status, 202, "{msg}");
    // The query survives the trim.
    let (status, list) = call(&gw, Method::GET, "/api/v1/app/?limit=1", None).await;
    assert_eq!(
        (status, list["data"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{list}"
    );
    let (status, got) = call(&gw, Method::GET, "/api/v1/app/a/", None).await;
    assert_eq!((status, got["uid"].as_str()), (200, Some("a")), "{got}");
    // hookgate's own API keeps its paths as they are.
    let (status, _) = call(&gw, Method::GET, "/v1/endpoints/", None).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn svix_s_ping_is_open_and_a_token_it_does_not_know_is_401() {
    let gw = gateway("").await;
    let (status, _) = gw.call_as(None, Method::GET, "/api/v1/health/ping", None).await;
    assert_eq!(status, 204);
    let (status, _) = gw.call_as(None, Method::GET, "/api/v1/health/ping/", None).await;
    assert_eq!(status, 204);
    for token in ["nope", "hgc_not-a-token"] {
        let (status, body) = gw.call_as(Some(token), Method::GET, "/api/v1/app", None).await;
        assert_eq!(
            (status, body["code"].as_str()),
            (401, Some("authentication_failed")),
            "{token}: {body}"
        );
    }
    // hookgate's own API keeps its 403 for a wrong key.
    let (status, _) = gw.call_as(Some("nope"), Method::GET, "/v1/endpoints", None).await;
    assert_eq!(status, 403);
}

#[tokio::test]
async fn svix_s_portal_tokens_cannot_list_applications_and_dashboard_access_takes_null() {
    let gw = gateway("").await;
    application(&gw, "acme", "order.paid").await;
    let (status, access) = gw
        .send(
            gw.post_builder("/api/v1/auth/dashboard-access/acme")
                .bearer_auth(ADMIN)
                .header("content-type", "application/json")
                .body("null"),
        )
        .await;
    assert_eq!(status, 200, "{access}");
    let token = access["token"].as_str().unwrap();
    let (status, list) = gw.call_as(Some(token), Method::GET, "/api/v1/app", None).await;
    assert_eq!(
        (status, list["code"].as_str()),
        (403, Some("insufficient access")),
        "{list}"
    );
    let (status, _) = gw
        .call_as(Some(token), Method::GET, "/api/v1/app/acme", None)
        .await;
    assert_eq!(status, 200, "the portal's own application");
    // A tenant's API key still lists its own application.
    let (status, mine) = gw
        .call_as(Some("acme-key"), Method::GET, "/api/v1/app", None)
        .await;
    assert_eq!(
        (status, mine["data"].as_array().map(Vec::len)),
        (200, Some(1)),
        "{mine}"
    );
}

#[tokio::test]
async fn svix_refuses_a_body_uid_other_than_the_path_s_and_files_messages_under_the_path() {
    let gw = gateway("").await;
    let (status, body) = call(
        &gw,
        Method::PUT,
        "/api/v1/app/initech",
        Some(json!({"name": "Initech", "uid": "other"})),
    )
    .await;
    assert_eq!((status, loc(&body)), (422, json!(["body", "uid"])), "{body}");
    let message = |uid: Option<&str>| {
        let mut application = json!({"name": "Made by a message"});
        if let Some(uid) = uid {
            application["uid"] = json!(uid);
        }
        json!({"eventType": "x.y", "payload": {}, "application": application})
    };
    let (status, body) = call(
        &gw,
        Method::POST,
        "/api/v1/app/made/msg",
        Some(message(Some("elsewhere"))),
    )
    .await;
    assert_eq!((status, loc(&body)), (422, json!(["body", "uid"])), "{body}");
    let (status, _) = call(&gw, Method::GET, "/api/v1/app/elsewhere", None).await;
    assert_eq!(status, 404, "nothing was filed under the body's application");
    let (status, msg) = call(&gw, Method::POST, "/api/v1/app/made/msg", Some(message(None))).await;
    assert_eq!(status, 202, "{msg}");
    let (_, found) = call(
        &gw,
        Method::GET,
        &format!("/api/v1/app/made/msg/{}", msg["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(found["id"], msg["id"], "the message is the path application's");
}

#[tokio::test]
async fn svix_answers_an_oversized_message_413_after_reading_it() {
    let gw = gateway("  max_body: 1MiB\n").await;
    application(&gw, "acme", "order.paid").await;
    // 8 MiB: far more than the socket buffers hold, so a 413 sent before the body is read
    // would meet a client still writing, and it would see a broken pipe instead.
    let payload = "x".repeat(8 << 20);
    let (status, body) = gw
        .send(
            gw.post_builder("/api/v1/app/acme/msg")
                .bearer_auth(ADMIN)
                .json(&json!({"eventType": "order.paid", "payload": {"blob": payload}})),
        )
        .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (413, Some("payload_too_large")),
        "{body}"
    );
}

#[tokio::test]
async fn svix_replays_the_first_answer_of_an_idempotency_key_whatever_the_body() {
    let gw = gateway("").await;
    application(&gw, "acme", "order.paid").await;
    let send = |n: u32| {
        gw.send(
            gw.post_builder("/api/v1/app/acme/msg")
                .bearer_auth(ADMIN)
                .header("idempotency-key", "key-1")
                .json(&json!({"eventType": "order.paid", "payload": {"n": n}})),
        )
    };
    let (status, first) = send(1).await;
    assert_eq!(status, 202, "{first}");
    let (status, again) = send(2).await;
    assert_eq!((status, &again["id"]), (202, &first["id"]), "{again}");
    assert_eq!(again["payload"], json!({"n": 1}));
    let (_, list) = call(&gw, Method::GET, "/api/v1/app/acme/msg", None).await;
    assert_eq!(list["data"].as_array().unwrap().len(), 1, "{list}");
}

#[tokio::test]
async fn svix_validates_endpoints_filters_headers_and_metadata_as_it_does() {
    let gw = gateway("").await;
    application(&gw, "acme", "order.paid").await;
    let sink = Sink::start().await;
    let url = sink.url("/acme");
    let refused = [
        (
            json!({"url": url, "filterTypes": []}),
            json!(["body", "filterTypes"]),
        ),
        (json!({"url": url, "channels": []}), json!(["body", "channels"])),
        (
            json!({"url": url, "filterTypes": ["no.such.type"]}),
            json!(["body", "filterTypes"]),
        ),
        (
            json!({"url": url, "headers": {"svix-id": "x"}}),
            json!(["body", "headers"]),
        ),
        (
            json!({"url": url, "headers": {"X-Amzn-Trace-Id": "x"}}),
            json!(["body", "headers"]),
        ),
        (
            json!({"url": url, "headers": {"content-type": "text/plain"}}),
            json!(["body", "headers"]),
        ),
        (json!({"url": url, "version": 0}), json!(["body", "version"])),
    ];
    for (input, at) in refused {
        let (status, body) = call(
            &gw,
            Method::POST,
            "/api/v1/app/acme/endpoint",
            Some(input.clone()),
        )
        .await;
        assert_eq!((status, loc(&body)), (422, at), "{input}: {body}");
    }
    // An archived type is refused like one that does not exist.
    let (status, _) = call(
        &gw,
        Method::POST,
        "/api/v1/event-type",
        Some(json!({"name": "old.one", "description": "old"})),
    )
    .await;
    assert_eq!(status, 201);
    let (status, _) = call(&gw, Method::DELETE, "/api/v1/event-type/old.one", None).await;
    assert_eq!(status, 204);
    let (status, body) = call(
        &gw,
        Method::POST,
        "/api/v1/app/acme/endpoint",
        Some(json!({"url": url, "filterTypes": ["old.one"]})),
    )
    .await;
    assert_eq!(status, 422, "{body}");

    let (status, ep) = call(
        &gw,
        Method::POST,
        "/api/v1/app/acme/endpoint",
        Some(json!({"url": url, "filterTypes": ["order.paid"], "metadata": {"team": "ops", "tier": "1"}, "version": 2})),
    )
    .await;
    assert_eq!(
        (status, &ep["version"]),
        (201, &json!(2)),
        "Svix keeps an endpoint's version: {ep}"
    );
    let path = format!("/api/v1/app/acme/endpoint/{}", ep["id"].as_str().unwrap());
    let (status, body) = call(
        &gw,
        Method::PUT,
        &format!("{path}/headers"),
        Some(json!({"headers": {"Svix-Foo": "1"}})),
    )
    .await;
    assert_eq!((status, loc(&body)), (422, json!(["body", "headers"])), "{body}");
    let (_, patched) = call(
        &gw,
        Method::PATCH,
        &path,
        Some(json!({"metadata": {"team": "dev"}})),
    )
    .await;
    assert_eq!(
        patched["metadata"],
        json!({"team": "dev"}),
        "a patch replaces the map"
    );
    let (_, cleared) = call(&gw, Method::PATCH, &path, Some(json!({"metadata": {}}))).await;
    assert_eq!(cleared["metadata"], json!({}), "{cleared}");
    let (status, body) = call(&gw, Method::PATCH, &path, Some(json!({"channels": []}))).await;
    assert_eq!((status, loc(&body)), (422, json!(["body", "channels"])), "{body}");
}

#[tokio::test]
async fn svix_recovers_at_most_its_window_and_sends_its_ping_example() {
    let gw = gateway("").await;
    application(&gw, "acme", "order.paid").await;
    let sink = Sink::start().await;
    let (_, ep) = call(
        &gw,
        Method::POST,
        "/api/v1/app/acme/endpoint",
        Some(json!({"url": sink.url("/acme")})),
    )
    .await;
    let path = format!("/api/v1/app/acme/endpoint/{}", ep["id"].as_str().unwrap());
    let since = gw.now().minus(Duration::from_secs(8 * 24 * 3600)).to_rfc3339();
    let (status, body) = call(
        &gw,
        Method::POST,
        &format!("{path}/recover"),
        Some(json!({"since": since})),
    )
    .await;
    assert_eq!((status, loc(&body)), (422, json!(["body", "since"])), "{body}");

    let (status, sent) = call(
        &gw,
        Method::POST,
        &format!("{path}/send-example"),
        Some(json!({"eventType": "svix.ping"})),
    )
    .await;
    assert_eq!(status, 200, "{sent}");
    assert_eq!(sent["payload"], json!({"success": true}));
    let got = sink.wait_for(1, WAIT).await;
    assert_eq!(got[0].json(), json!({"success": true}));
    // A type without an example: Svix's 400; a type it does not know: 404.
    let (status, body) = call(
        &gw,
        Method::POST,
        &format!("{path}/send-example"),
        Some(json!({"eventType": "order.paid"})),
    )
    .await;
    assert_eq!(
        (status, body["code"].as_str()),
        (400, Some("invalid_scheme")),
        "{body}"
    );
    let (status, _) = call(
        &gw,
        Method::POST,
        &format!("{path}/send-example"),
        Some(json!({"eventType": "no.such"})),
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn svix_pages_back_with_prev_iterator_and_refuses_a_malformed_iterator() {
    let gw = gateway("").await;
    for uid in ["a1", "a2", "a3", "a4", "a5"] {
        let (status, _) = call(
            &gw,
            Method::POST,
            "/api/v1/app",
            Some(json!({"name": uid, "uid": uid})),
        )
        .await;
        assert_eq!(status, 201);
    }
    let uids = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["uid"].as_str().unwrap().to_owned())
            .collect()
    };
    let (_, first) = call(&gw, Method::GET, "/api/v1/app?limit=2", None).await;
    assert_eq!(
        uids(&first),
        ["a1", "a2"],
        "oldest first, as Svix lists applications"
    );
    let next = first["iterator"].as_str().unwrap();
    let (_, second) = call(
        &gw,
        Method::GET,
        &format!("/api/v1/app?limit=2&iterator={next}"),
        None,
    )
    .await;
    assert_eq!(uids(&second), ["a3", "a4"]);
    let back = second["prevIterator"].as_str().unwrap();
    assert!(back.starts_with('-'), "{second}");
    let (_, again) = call(
        &gw,
        Method::GET,
        &format!("/api/v1/app?limit=2&iterator={back}"),
        None,
    )
    .await;
    assert_eq!(uids(&again), ["a1", "a2"], "paging back gives the page before");
    assert_eq!(again["done"], true, "and ends there: {again}");
    let (_, newest) = call(&gw, Method::GET, "/api/v1/app?limit=2&order=descending", None).await;
    assert_eq!(uids(&newest), ["a5", "a4"]);

    for list in ["/api/v1/app", "/api/v1/app/a1/endpoint", "/api/v1/app/a1/msg"] {
        let (status, body) = call(&gw, Method::GET, &format!("{list}?iterator=%25%25garbage"), None).await;
        assert_eq!(
            (status, loc(&body)),
            (422, json!(["query", "iterator"])),
            "{list}: {body}"
        );
    }
}

#[tokio::test]
async fn svix_s_per_endpoint_lists_filter_show_a_retry_as_sending_and_list_endpoints_in_creation_order() {
    let gw = gateway("").await;
    application(&gw, "acme", "order.paid").await;
    call(
        &gw,
        Method::POST,
        "/api/v1/event-type",
        Some(json!({"name": "order.shipped", "description": "s"})),
    )
    .await;
    let (failing, fine) = (Sink::start().await, Sink::start().await);
    failing.always(Reply::status(500));
    let (_, first) = call(
        &gw,
        Method::POST,
        "/api/v1/app/acme/endpoint",
        Some(json!({"url": failing.url("/f")})),
    )
    .await;
    let (_, second) = call(
        &gw,
        Method::POST,
        "/api/v1/app/acme/endpoint",
        Some(json!({"url": fine.url("/ok")})),
    )
    .await;
    let (ep1, ep2) = (first["id"].as_str().unwrap(), second["id"].as_str().unwrap());
    let send = |kind: &str, channels: Value| {
        call(
            &gw,
            Method::POST,
            "/api/v1/app/acme/msg",
            Some(json!({"eventType": kind, "payload": {}, "channels": channels})),
        )
    };
    let (_, paid) = send("order.paid", json!(["eu"])).await;
    let (_, shipped) = send("order.shipped", json!(["us"])).await;
    fine.wait_for(2, WAIT).await;
    failing.wait_for(2, WAIT).await;
    gw.settle().await;

    // The failing endpoint's messages wait for their retry: Svix shows them as sending (3).
    let (_, waiting) = call(
        &gw,
        Method::GET,
        &format!("/api/v1/app/acme/endpoint/{ep1}/msg"),
        None,
    )
    .await;
    let statuses: Vec<&Value> = waiting["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| &m["status"])
        .collect();
    assert_eq!(statuses, [&json!(3), &json!(3)], "{waiting}");
    let (_, by_status) = call(
        &gw,
        Method::GET,
        &format!("/api/v1/app/acme/endpoint/{ep2}/msg?status=3"),
        None,
    )
    .await;
    assert_eq!(by_status["data"], json!([]), "{by_status}");

    let ids = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let ep2_msgs = format!("/api/v1/app/acme/endpoint/{ep2}/msg");
    let (_, eu) = call(&gw, Method::GET, &format!("{ep2_msgs}?channel=eu"), None).await;
    assert_eq!(ids(&eu), [paid["id"].as_str().unwrap()]);
    let (_, typed) = call(
        &gw,
        Method::GET,
        &format!("{ep2_msgs}?event_types=order.shipped"),
        None,
    )
    .await;
    assert_eq!(ids(&typed), [shipped["id"].as_str().unwrap()]);
    let later = gw.now().plus(Duration::from_secs(1)).to_rfc3339();
    let (_, after) = call(&gw, Method::GET, &format!("{ep2_msgs}?after={later}"), None).await;
    assert_eq!(after["data"], json!([]), "{after}");
    let (_, before) = call(&gw, Method::GET, &format!("{ep2_msgs}?before={later}"), None).await;
    assert_eq!(ids(&before).len(), 2, "{before}");
    let attempts = format!("/api/v1/app/acme/attempt/endpoint/{ep2}");
    let (_, eu_attempts) = call(&gw, Method::GET, &format!("{attempts}?channel=eu"), None).await;
    let msg_ids: Vec<&Value> = eu_attempts["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["msgId"])
        .collect();
    assert_eq!(msg_ids, [&paid["id"]], "{eu_attempts}");
    let (_, none) = call(&gw, Method::GET, &format!("{attempts}?after={later}"), None).await;
    assert_eq!(none["data"], json!([]), "{none}");

    // A message's endpoints in the order they were made, as Svix lists them.
    let (_, endpoints) = call(
        &gw,
        Method::GET,
        &format!("/api/v1/app/acme/msg/{}/endpoint", paid["id"].as_str().unwrap()),
        None,
    )
    .await;
    assert_eq!(ids(&endpoints), [ep1, ep2], "{endpoints}");
    assert_eq!(endpoints["data"][0]["status"], 3);
}

#[tokio::test]
async fn svix_keeps_every_rotated_out_secret_signing_for_its_grace_period() {
    let gw = gateway("").await;
    application(&gw, "acme", "order.paid").await;
    let sink = Sink::start().await;
    let keys = [
        "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
        "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
        "whsec_b2xkIHNlY3JldCBvbmUgdHdvIHRocmVlIQ==",
    ];
    let (_, ep) = call(
        &gw,
        Method::POST,
        "/api/v1/app/acme/endpoint",
        Some(json!({"url": sink.url("/acme"), "secret": keys[0]})),
    )
    .await;
    let path = format!("/api/v1/app/acme/endpoint/{}", ep["id"].as_str().unwrap());
    for key in &keys[1..] {
        let (status, rotated) = call(
            &gw,
            Method::POST,
            &format!("{path}/secret/rotate"),
            Some(json!({"key": key})),
        )
        .await;
        assert_eq!((status, rotated["key"].as_str()), (200, Some(*key)), "{rotated}");
        gw.advance(Duration::from_secs(3600)).await;
    }
    let send = |n: u32| {
        call(
            &gw,
            Method::POST,
            "/api/v1/app/acme/msg",
            Some(json!({"eventType": "order.paid", "payload": {"n": n}})),
        )
    };
    let signed_by = |got: &crate::support::Received| -> Vec<bool> {
        keys.iter()
            .map(|key| {
                crate::ingest::verify(
                    key,
                    got.header("svix-id"),
                    got.header("svix-timestamp"),
                    &got.body,
                    got.header("svix-signature"),
                )
            })
            .collect()
    };
    send(1).await;
    let got = sink.wait_for(1, WAIT).await;
    assert_eq!(
        signed_by(&got[0]),
        [true, true, true],
        "two rotations in a day: all three sign"
    );
    // 24 h after the first rotation only the first rotated-out secret has ended.
    gw.advance(Duration::from_secs(22 * 3600 + 1)).await;
    send(2).await;
    let got = sink.wait_for(2, WAIT).await;
    assert_eq!(signed_by(&got[1]), [false, true, true]);
}

#[tokio::test]
async fn svix_takes_ed25519_whsk_secrets_and_shows_their_public_key() {
    use base64::Engine as _;
    let gw = gateway("").await;
    application(&gw, "acme", "order.paid").await;
    let sink = Sink::start().await;
    let seed = [7u8; 32];
    let encode = |bytes: &[u8]| base64::engine::general_purpose::STANDARD.encode(bytes);
    let whsk = format!("whsk_{}", encode(&seed));
    let whpk = format!(
        "whpk_{}",
        encode(
            ed25519_dalek::SigningKey::from_bytes(&seed)
                .verifying_key()
                .as_bytes()
        )
    );
    let (status, ep) = call(
        &gw,
        Method::POST,
        "/api/v1/app/acme/endpoint",
        Some(json!({"url": sink.url("/acme"), "secret": whsk})),
    )
    .await;
    assert_eq!(status, 201, "{ep}");
    let path = format!("/api/v1/app/acme/endpoint/{}", ep["id"].as_str().unwrap());
    let (_, secret) = call(&gw, Method::GET, &format!("{path}/secret"), None).await;
    assert_eq!(
        secret["key"],
        json!(whpk),
        "the public key, never the private one"
    );
    call(
        &gw,
        Method::POST,
        "/api/v1/app/acme/msg",
        Some(json!({"eventType": "order.paid", "payload": {}})),
    )
    .await;
    let got = sink.wait_for(1, WAIT).await;
    assert!(
        got[0].header("svix-signature").starts_with("v1a,"),
        "{}",
        got[0].header("svix-signature")
    );
    // A key of the other kind is refused by rotation, which keeps the kind.
    let (status, body) = call(
        &gw,
        Method::POST,
        &format!("{path}/secret/rotate"),
        Some(json!({"key": "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"})),
    )
    .await;
    assert_eq!((status, loc(&body)), (422, json!(["body", "key"])), "{body}");
    let (status, rotated) = call(
        &gw,
        Method::POST,
        &format!("{path}/secret/rotate"),
        Some(json!({})),
    )
    .await;
    assert_eq!(status, 200, "{rotated}");
    assert!(rotated["key"].as_str().unwrap().starts_with("whpk_"), "{rotated}");
}

/// Pages `list` two at a time: the second page's `prevIterator` gives the first page again (and
/// is done there), as svix-server pages back; a malformed iterator is its 422.
async fn pages_back(gw: &TestGateway, list: &str) {
    let ids = |page: &Value| -> Vec<String> {
        let data = page["data"]
            .as_array()
            .unwrap_or_else(|| panic!("{list}: {page}"));
        data.iter()
            .map(|x| x["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let (status, first) = call(gw, Method::GET, &format!("{list}?limit=2"), None).await;
    assert_eq!((status, ids(&first).len()), (200, 2), "{list}: {first}");
    let next = first["iterator"].as_str().unwrap();
    let (_, second) = call(gw, Method::GET, &format!("{list}?limit=2&iterator={next}"), None).await;
    assert!(!ids(&second).is_empty(), "{list}: {second}");
    assert!(
        ids(&second).iter().all(|id| !ids(&first).contains(id)),
        "{list}: {second}"
    );
    let back = second["prevIterator"]
        .as_str()
        .unwrap_or_else(|| panic!("{list}: {second}"));
    assert!(back.starts_with('-'), "{list}: {second}");
    let (_, again) = call(gw, Method::GET, &format!("{list}?limit=2&iterator={back}"), None).await;
    assert_eq!(
        ids(&again),
        ids(&first),
        "{list}: paging back gives the page before"
    );
    assert_eq!(again["done"], true, "{list}: and ends there: {again}");
    let (status, body) = call(gw, Method::GET, &format!("{list}?iterator=-%25%25garbage"), None).await;
    assert_eq!(
        (status, loc(&body)),
        (422, json!(["query", "iterator"])),
        "{list}: {body}"
    );
}

#[tokio::test]
async fn svix_pages_back_through_messages_attempts_and_their_endpoints() {
    let gw = gateway("").await;
    application(&gw, "acme", "order.paid").await;
    let sinks = [Sink::start().await, Sink::start().await, Sink::start().await];
    let mut endpoints = Vec::new();
    for sink in &sinks {
        let body = json!({"url": sink.url("/hook")});
        let (status, ep) = call(&gw, Method::POST, "/api/v1/app/acme/endpoint", Some(body)).await;
        assert_eq!(status, 201, "{ep}");
        endpoints.push(ep["id"].as_str().unwrap().to_owned());
    }
    let mut messages = Vec::new();
    for n in 0..5 {
        let body = json!({"eventType": "order.paid", "payload": {"n": n}});
        let (status, msg) = call(&gw, Method::POST, "/api/v1/app/acme/msg", Some(body)).await;
        assert_eq!(status, 202, "{msg}");
        messages.push(msg["id"].as_str().unwrap().to_owned());
    }
    for sink in &sinks {
        sink.wait_for(5, WAIT).await;
    }
    let ep = &endpoints[0];
    let attempts = format!("/api/v1/app/acme/attempt/endpoint/{ep}?limit=250");
    let deadline = tokio::time::Instant::now() + WAIT;
    while call(&gw, Method::GET, &attempts, None).await.1["data"]
        .as_array()
        .map_or(0, Vec::len)
        < 5
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the attempts were not recorded"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let msg = &messages[0];
    for list in [
        "/api/v1/app/acme/msg".to_owned(),
        format!("/api/v1/app/acme/attempt/endpoint/{ep}"),
        format!("/api/v1/app/acme/attempt/msg/{msg}"),
        format!("/api/v1/app/acme/msg/{msg}/endpoint"),
        format!("/api/v1/app/acme/endpoint/{ep}/msg"),
    ] {
        pages_back(&gw, &list).await;
    }
}

/// svix-server's app portal tokens carry `featureFlags`: such a token sees the event types
/// without a flag and those whose flag it holds; to it, another flagged type does not exist
/// (404). An API key sees every type.
#[tokio::test]
async fn svix_portal_tokens_see_only_the_event_types_their_feature_flags_allow() {
    let gw = gateway("").await;
    application(&gw, "acme", "plain.a").await;
    for body in [
        json!({"name": "beta.b", "description": "b", "featureFlags": ["beta"]}),
        json!({"name": "internal.c", "description": "c", "featureFlag": "internal"}),
    ] {
        let (status, ty) = call(&gw, Method::POST, "/api/v1/event-type", Some(body)).await;
        assert_eq!(status, 201, "{ty}");
    }
    let token = |flags: Value| {
        let gw = &gw;
        async move {
            let path = "/api/v1/auth/app-portal-access/acme";
            let (status, access) = call(gw, Method::POST, path, Some(json!({"featureFlags": flags}))).await;
            assert_eq!(status, 200, "{access}");
            access["token"].as_str().unwrap().to_owned()
        }
    };
    let names = |list: &Value| -> Vec<String> {
        let data = list["data"].as_array().unwrap_or_else(|| panic!("{list}"));
        data.iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let beta = token(json!(["beta"])).await;
    let (status, list) = gw
        .call_as(Some(&beta), Method::GET, "/api/v1/event-type", None)
        .await;
    assert_eq!(
        (status, names(&list)),
        (200, vec!["beta.b".to_owned(), "plain.a".to_owned()])
    );
    let (status, _) = gw
        .call_as(Some(&beta), Method::GET, "/api/v1/event-type/beta.b", None)
        .await;
    assert_eq!(status, 200);
    let (status, body) = gw
        .call_as(Some(&beta), Method::GET, "/api/v1/event-type/internal.c", None)
        .await;
    assert_eq!(
        (status, body["code"].clone()),
        (404, json!("not_found")),
        "{body}"
    );

    let plain = token(Value::Null).await;
    let (_, list) = gw
        .call_as(Some(&plain), Method::GET, "/api/v1/event-type?limit=1", None)
        .await;
    assert_eq!(
        names(&list),
        ["plain.a"],
        "a page is filled past the hidden types: {list}"
    );
    assert_eq!(list["done"], true, "{list}");
    let (_, list) = call(&gw, Method::GET, "/api/v1/event-type", None).await;
    assert_eq!(names(&list), ["beta.b", "internal.c", "plain.a"]);
}

/// svix-server's `DELETE /msg/{msg}/content` (`message.expunge_content`): 204, the message
/// stays with its payload shown as `{"expired": true}`, and it can no longer be resent (a
/// clear 409, nothing sent). It is an organization's call (403 for a tenant's key); while a
/// delivery of the message still waits for an attempt hookgate answers 409, as that attempt
/// would send the payload.
#[tokio::test]
async fn svix_expunges_a_message_s_content_and_never_sends_it_again() {
    let gw = gateway("").await;
    application(&gw, "acme", "order.paid").await;
    let (sink, failing) = (Sink::start().await, Sink::start().await);
    failing.always(Reply::status(500));
    let body = json!({"url": sink.url("/hook"), "filterTypes": ["order.paid"]});
    let (status, ep) = call(&gw, Method::POST, "/api/v1/app/acme/endpoint", Some(body)).await;
    assert_eq!(status, 201, "{ep}");
    let ep = ep["id"].as_str().unwrap().to_owned();
    let message = json!({"eventType": "order.paid", "payload": {"card": "4242"}});
    let (status, msg) = call(&gw, Method::POST, "/api/v1/app/acme/msg", Some(message)).await;
    assert_eq!(status, 202, "{msg}");
    let msg = msg["id"].as_str().unwrap().to_owned();
    sink.wait_for(1, WAIT).await;
    let delivered = format!("/api/v1/app/acme/msg/{msg}/endpoint");
    let deadline = tokio::time::Instant::now() + WAIT;
    while call(&gw, Method::GET, &delivered, None).await.1["data"][0]["status"] != 0 {
        assert!(tokio::time::Instant::now() < deadline, "the delivery did not end");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let content = format!("/api/v1/app/acme/msg/{msg}/content");
    let (status, body) = gw.call_as(Some("acme-key"), Method::DELETE, &content, None).await;
    assert_eq!(status, 403, "a tenant's key may not expunge: {body}");
    let (status, body) = call(&gw, Method::DELETE, &content, None).await;
    assert_eq!(status, 204, "{body}");
    let (status, shown) = call(&gw, Method::GET, &format!("/api/v1/app/acme/msg/{msg}"), None).await;
    assert_eq!(status, 200);
    assert_eq!(shown["payload"], json!({"expired": true}), "{shown}");
    assert_eq!(shown["eventType"], "order.paid");
    let resend = format!("/api/v1/app/acme/msg/{msg}/endpoint/{ep}/resend");
    let (status, body) = call(&gw, Method::POST, &resend, None).await;
    // svix-server: 400 `missing_payload` for a resend of a message whose payload is gone.
    assert_eq!(
        (status, body["code"].clone()),
        (400, json!("missing_payload")),
        "{body}"
    );
    assert_eq!(sink.count(), 1, "nothing was sent again");

    // A message whose delivery still waits for a retry keeps its content.
    let body = json!({"url": failing.url("/hook"), "filterTypes": ["order.paid"]});
    let (status, _) = call(&gw, Method::POST, "/api/v1/app/acme/endpoint", Some(body)).await;
    assert_eq!(status, 201);
    let message = json!({"eventType": "order.paid", "payload": {"n": 2}});
    let (_, retried) = call(&gw, Method::POST, "/api/v1/app/acme/msg", Some(message)).await;
    failing.wait_for(1, WAIT).await;
    let content = format!("/api/v1/app/acme/msg/{}/content", retried["id"].as_str().unwrap());
    let (status, body) = call(&gw, Method::DELETE, &content, None).await;
    assert_eq!((status, body["code"].clone()), (409, json!("conflict")), "{body}");
}

/// The event types page back by name as svix-server's reversible iterator does: the second
/// page's `prevIterator` (`-` and its first name) gives the first page again, and is done there.
#[tokio::test]
async fn svix_event_types_page_back_by_name() {
    let gw = gateway("").await;
    for name in ["a.one", "b.two", "c.three", "d.four", "e.five"] {
        let body = json!({"name": name, "description": name});
        let (status, made) = call(&gw, Method::POST, "/api/v1/event-type", Some(body)).await;
        assert_eq!(status, 201, "{made}");
    }
    let names = |page: &Value| -> Vec<String> {
        page["data"]
            .as_array()
            .unwrap_or_else(|| panic!("{page}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_owned())
            .collect()
    };
    let list = "/api/v1/event-type?limit=2";
    let (_, first) = call(&gw, Method::GET, list, None).await;
    assert_eq!(names(&first), ["a.one", "b.two"], "{first}");
    let next = first["iterator"].as_str().unwrap();
    let (_, second) = call(&gw, Method::GET, &format!("{list}&iterator={next}"), None).await;
    assert_eq!(names(&second), ["c.three", "d.four"], "{second}");
    assert_eq!(second["prevIterator"], "-c.three", "{second}");
    let (_, back) = call(&gw, Method::GET, &format!("{list}&iterator=-c.three"), None).await;
    assert_eq!(names(&back), ["a.one", "b.two"], "{back}");
    assert_eq!(back["done"], true, "{back}");
    let (status, bad) = call(&gw, Method::GET, &format!("{list}&iterator=-%25%25"), None).await;
    assert_eq!((status, loc(&bad)), (422, json!(["query", "iterator"])), "{bad}");
}

/// A message finds its application without a store read when the application had a message
/// a moment ago; an application deleted through this node is gone for the next message at
/// once, as svix-server answers: 404.
#[tokio::test]
async fn svix_answers_404_to_a_message_for_an_application_deleted_a_moment_ago() {
    let gw = gateway("").await;
    application(&gw, "acme", "order.paid").await;
    let message = json!({"eventType": "order.paid", "payload": {"n": 1}});
    for _ in 0..2 {
        let (status, body) = call(&gw, Method::POST, "/api/v1/app/acme/msg", Some(message.clone())).await;
        assert_eq!(status, 202, "{body}");
    }
    let (status, _) = call(&gw, Method::DELETE, "/api/v1/app/acme", None).await;
    assert_eq!(status, 204);
    let (status, body) = call(&gw, Method::POST, "/api/v1/app/acme/msg", Some(message)).await;
    assert_eq!(
        (status, body["code"].as_str()),
        (404, Some("not_found")),
        "{body}"
    );
}
