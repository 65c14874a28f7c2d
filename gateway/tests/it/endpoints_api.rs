//! Endpoints created, changed and deleted through the API (`source: api`): kept in the store,
//! validated like the config file's, signed with the secret the API handed out, and rotated
//! with an overlap on the gateway's clock.

use std::sync::Arc;
use std::time::Duration;

use hookgate::clock::ManualClock;
use serde_json::{Value, json};

use crate::ingest::verify;
use crate::support::{Reply, Sink, TestGateway, WAIT, deliveries_of, endpoint};

const TOPICS: &str = "topics:\n  orders: {}\n";

async fn create(gw: &TestGateway, body: Value) -> Value {
    let (status, created) = gw.post("/v1/endpoints", body).await;
    assert_eq!(status, 201, "{created}");
    created
}

/// The signatures a delivery carries, and whether `secret` made one of them.
fn signed_by(received: &crate::support::Received, secret: &str) -> bool {
    verify(
        secret,
        received.header("webhook-id"),
        received.header("webhook-timestamp"),
        &received.body,
        received.header("webhook-signature"),
    )
}

#[tokio::test]
async fn an_endpoint_created_through_the_api_gets_signed_deliveries_and_survives_restart_and_reload() {
    let sink = Sink::start().await;
    let mut gw = TestGateway::start(TOPICS).await;
    let created = create(
        &gw,
        json!({"name": "shop", "url": sink.url("/shop"), "topics": ["orders"], "description": "the shop"}),
    )
    .await;
    assert_eq!(created["source"], "api");
    assert_eq!(created["description"], "the shop");
    let secret = created["secret"].as_str().unwrap().to_owned();
    assert!(secret.starts_with("whsec_"), "{created}");

    gw.ingest("orders", "order.created", json!({"n": 1})).await;
    let received = sink.wait_for(1, WAIT).await;
    assert!(
        signed_by(&received[0], &secret),
        "signed with the returned secret"
    );

    // The secret is shown once: never again.
    let shown = endpoint(&gw, "shop").await;
    assert_eq!(shown["source"], "api");
    assert!(shown["secret"].is_null(), "{shown}");
    assert!(!shown.to_string().contains(&secret));

    // A restart reads it back from the store; a reload of the file keeps it.
    gw.stop().await;
    let dir = gw.dir.clone();
    let gw = TestGateway::start_in(dir, TOPICS, ManualClock::new(gw.now())).await;
    assert_eq!(endpoint(&gw, "shop").await["source"], "api");
    assert!(matches!(
        gw.reloader().reload_from_file().await,
        hookgate::ReloadOutcome::Applied { .. }
    ));
    gw.ingest("orders", "order.created", json!({"n": 2})).await;
    let received = sink.wait_for(2, WAIT).await;
    assert!(signed_by(&received[1], &secret));

    // Without a name: `ep_<ulid>`.
    let unnamed = create(&gw, json!({"url": sink.url("/x"), "topics": ["orders"]})).await;
    assert!(unnamed["name"].as_str().unwrap().starts_with("ep_"), "{unnamed}");
}

#[tokio::test]
async fn a_patched_url_takes_the_next_attempt_and_a_delete_ends_waiting_deliveries() {
    let old = Sink::start().await;
    old.always(Reply::status(500));
    let new = Sink::start().await;
    let gw = TestGateway::start(TOPICS).await;
    create(
        &gw,
        json!({"name": "shop", "url": old.url("/old"), "topics": ["orders"]}),
    )
    .await;

    gw.ingest("orders", "order.created", json!({"n": 1})).await;
    old.wait_for(1, WAIT).await;
    let (status, patched) = gw
        .patch(
            "/v1/endpoints/shop",
            json!({"url": new.url("/new"), "headers": {"x-shop": "1"}}),
        )
        .await;
    assert_eq!(status, 200, "{patched}");
    assert!(patched["secret"].is_null());
    gw.advance(Duration::from_secs(60)).await;
    let received = new.wait_for(1, WAIT).await;
    assert_eq!(received[0].path, "/new");
    assert_eq!(received[0].header("x-shop"), "1");

    // A merge patch's null removes a key.
    let (status, _) = gw.patch("/v1/endpoints/shop", json!({"headers": null})).await;
    assert_eq!(status, 200);

    // Delete while a delivery waits for its retry: it ends `endpoint_removed`, still readable.
    new.always(Reply::status(500));
    gw.ingest("orders", "order.created", json!({"n": 2})).await;
    new.wait_for(2, WAIT).await;
    gw.settle().await;
    let (status, _) = gw.delete("/v1/endpoints/shop").await;
    assert_eq!(status, 204);
    let deliveries = gw
        .wait_until("/v1/deliveries?endpoint=shop", WAIT, |v| {
            v["deliveries"][0]["status"] == "failed"
        })
        .await;
    assert_eq!(deliveries["deliveries"][0]["last_error"], "endpoint_removed");
    let (status, _) = gw.get("/v1/endpoints/shop").await;
    assert_eq!(status, 404);
    let (status, _) = gw.delete("/v1/endpoints/shop").await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn a_rotated_secret_signs_beside_the_new_one_until_the_overlap_ends() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(TOPICS).await;
    let first = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    create(
        &gw,
        json!({"name": "shop", "url": sink.url("/s"), "topics": ["orders"], "secret": first}),
    )
    .await;
    let (status, rotated) = gw
        .post("/v1/endpoints/shop/secret/rotate", json!({"overlap": "1h"}))
        .await;
    assert_eq!(status, 200, "{rotated}");
    let second = rotated["secret"].as_str().unwrap().to_owned();
    assert_ne!(second, first);
    assert_eq!(rotated["signing_secrets"], 2);

    gw.ingest("orders", "order.created", json!({"n": 1})).await;
    let received = sink.wait_for(1, WAIT).await;
    assert_eq!(received[0].header("webhook-signature").split(' ').count(), 2);
    assert!(signed_by(&received[0], first) && signed_by(&received[0], &second));

    gw.advance(Duration::from_secs(3601)).await;
    assert_eq!(endpoint(&gw, "shop").await["signing_secrets"], 1);
    gw.ingest("orders", "order.created", json!({"n": 2})).await;
    let received = sink.wait_for(2, WAIT).await;
    assert_eq!(received[1].header("webhook-signature").split(' ').count(), 1);
    assert!(signed_by(&received[1], &second) && !signed_by(&received[1], first));

    // An overlap of 0s retires the old secret at once.
    let (status, _) = gw
        .post(
            "/v1/endpoints/shop/secret/rotate",
            json!({"secret": first, "overlap": "0s"}),
        )
        .await;
    assert_eq!(status, 200);
    assert_eq!(endpoint(&gw, "shop").await["signing_secrets"], 1);
}

#[tokio::test]
async fn config_endpoints_are_read_only_and_a_name_clash_refuses_the_file() {
    let sink = Sink::start().await;
    let yaml = format!(
        "{TOPICS}endpoints:\n  billing:\n    url: {}\n    topics: [orders]\n",
        sink.url("/b")
    );
    let gw = TestGateway::start(&yaml).await;
    assert_eq!(endpoint(&gw, "billing").await["source"], "config");
    for (status, body) in [
        gw.patch("/v1/endpoints/billing", json!({"url": sink.url("/x")}))
            .await,
        gw.delete("/v1/endpoints/billing").await,
        gw.post("/v1/endpoints/billing/secret/rotate", json!({})).await,
    ] {
        assert_eq!(status, 409, "{body}");
        assert_eq!(body["error"]["code"], "endpoint_declared_in_config");
    }
    let (status, body) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "billing", "url": sink.url("/x"), "topics": ["orders"]}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("name_taken"))
    );

    create(
        &gw,
        json!({"name": "shop", "url": sink.url("/s"), "topics": ["orders"]}),
    )
    .await;
    let (status, body) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "shop", "url": sink.url("/s"), "topics": ["orders"]}),
        )
        .await;
    assert_eq!(
        (status, body["error"]["code"].as_str()),
        (409, Some("name_taken"))
    );

    // The file now declares `shop` too: refused, naming both; the API's endpoint runs on.
    gw.write_config(&format!(
        "{yaml}  shop:\n    url: {}\n    topics: [orders]\n",
        sink.url("/file-shop")
    ));
    match gw.reloader().reload_from_file().await {
        hookgate::ReloadOutcome::Refused { problems } => {
            let text = problems.join("\n");
            assert!(
                text.contains("endpoints.shop") && text.contains("created through the API"),
                "{text}"
            );
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(endpoint(&gw, "shop").await["source"], "api");

    // A file that drops the topic an API endpoint uses is refused too.
    gw.write_config("topics:\n  invoices: {}\n");
    assert!(matches!(
        gw.reloader().reload_from_file().await,
        hookgate::ReloadOutcome::Refused { .. }
    ));
}

#[tokio::test]
async fn bad_input_gets_a_clear_400_naming_the_field_and_changes_nothing() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(TOPICS).await;
    let url = sink.url("/x");
    let cases: Vec<(Value, &str, &str)> = vec![
        (
            json!({"url": "ftp://h/x", "topics": ["orders"]}),
            "invalid_endpoint",
            "url",
        ),
        (
            json!({"url": "not a url", "topics": ["orders"]}),
            "invalid_endpoint",
            "url",
        ),
        (json!({"url": url, "topics": []}), "invalid_endpoint", "topics"),
        (
            json!({"url": url, "topics": ["nope"]}),
            "invalid_endpoint",
            "topics[0]",
        ),
        (
            json!({"url": url, "topics": ["orders"], "policy": "gone"}),
            "invalid_endpoint",
            "policy",
        ),
        (
            json!({"url": url, "topics": ["orders"], "transform": "missing-plugin"}),
            "invalid_endpoint",
            "transform",
        ),
        (
            json!({"url": url, "topics": ["orders"], "types": ["a[b"]}),
            "invalid_endpoint",
            "types[0]",
        ),
        (
            json!({"url": url, "topics": ["orders"], "max_per_second": 0}),
            "invalid_endpoint",
            "max_per_second",
        ),
        (
            json!({"url": url, "topics": ["orders"], "timeout": "soon"}),
            "invalid_endpoint",
            "timeout",
        ),
        (
            json!({"url": url, "topics": ["orders"], "headers": {"webhook-id": "x"}}),
            "invalid_endpoint",
            "headers.webhook-id",
        ),
        (
            json!({"url": url, "topics": ["orders"], "secret": "whsec_"}),
            "invalid_endpoint",
            "secret",
        ),
        (
            json!({"url": url, "topics": ["orders"], "tenant": "a b"}),
            "invalid_endpoint",
            "tenant",
        ),
        (
            json!({"url": url, "topics": ["orders"], "name": "no spaces"}),
            "invalid_endpoint",
            "name",
        ),
        (
            json!({"url": url, "topics": ["orders"], "colour": "red"}),
            "invalid_endpoint",
            "colour",
        ),
        (
            json!({"url": url, "topics": "orders"}),
            "invalid_endpoint",
            "topics",
        ),
        (
            json!({"url": "http://10.1.2.3/hook", "topics": ["orders"]}),
            "blocked_address",
            "",
        ),
        (
            json!({"url": "http://[fd00::1]/hook", "topics": ["orders"]}),
            "blocked_address",
            "",
        ),
    ];
    for (body, code, path) in cases {
        let (status, answer) = gw.post("/v1/endpoints", body.clone()).await;
        assert_eq!(status, 400, "{body} → {answer}");
        assert_eq!(answer["error"]["code"], code, "{body} → {answer}");
        if code == "invalid_endpoint" {
            let paths: Vec<&str> = answer["error"]["problems"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["path"].as_str().unwrap())
                .collect();
            assert!(paths.contains(&path), "{body} → {answer}");
        }
    }
    let (status, answer) = gw
        .send(
            gw.post_builder("/v1/endpoints")
                .header("content-type", "application/json")
                .body("{not json"),
        )
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("malformed_body"))
    );

    // A PATCH that breaks the endpoint changes nothing either.
    create(&gw, json!({"name": "shop", "url": url, "topics": ["orders"]})).await;
    let (status, answer) = gw
        .patch("/v1/endpoints/shop", json!({"url": "http://192.168.1.1/x"}))
        .await;
    assert_eq!(
        (status, answer["error"]["code"].as_str()),
        (400, Some("blocked_address"))
    );
    let (status, _) = gw.patch("/v1/endpoints/shop", json!({"topics": ["nope"]})).await;
    assert_eq!(status, 400);
    let (status, _) = gw
        .post("/v1/endpoints/shop/secret/rotate", json!({"overlap": "forever"}))
        .await;
    assert_eq!(status, 400);
    let shop = endpoint(&gw, "shop").await;
    assert_eq!(shop["url"], url);
    assert_eq!(shop["topics"], json!(["orders"]));
    let (_, list) = gw.get("/v1/endpoints").await;
    assert_eq!(list["endpoints"].as_array().unwrap().len(), 1, "{list}");
    assert!(deliveries_of(&gw, "shop").await.is_empty());
}

/// What runs after a restart is what the store holds: a deleted endpoint stays deleted.
#[tokio::test]
async fn a_deleted_endpoint_stays_deleted_after_a_restart() {
    let sink = Sink::start().await;
    let mut gw = TestGateway::start(TOPICS).await;
    create(
        &gw,
        json!({"name": "a", "url": sink.url("/a"), "topics": ["orders"]}),
    )
    .await;
    create(
        &gw,
        json!({"name": "b", "url": sink.url("/b"), "topics": ["orders"]}),
    )
    .await;
    let (status, _) = gw.delete("/v1/endpoints/a").await;
    assert_eq!(status, 204);
    gw.stop().await;
    let dir: Arc<tempfile::TempDir> = gw.dir.clone();
    let gw = TestGateway::start_in(dir, TOPICS, ManualClock::new(gw.now())).await;
    let (_, list) = gw.get("/v1/endpoints").await;
    let names: Vec<&str> = list["endpoints"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["b"]);
}
