//! What every broker destination must do, written once; each kind's module runs these with
//! its fixture.

use std::time::Duration;

use serde_json::{Value, json};

use super::{Fixture, Got, Relay, closed_port};
use crate::support::{TestGateway, WAIT, deliveries_of, wait_state};

pub const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

/// Waits (real time) until the fixture's target holds `n` messages.
pub async fn wait_received<F: Fixture>(f: &F, n: usize) -> Vec<Got> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let got = f.received().await;
        if got.len() >= n {
            return got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: the consumer got {} messages, expected {n}",
            F::KIND,
            got.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn ingest_with_key(gw: &TestGateway, key: &str, n: u64) -> String {
    let (status, body) = gw
        .post(
            "/v1/topics/t/events",
            json!({"type": "order.created", "payload": {"n": n}, "ordering_key": key}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    body["id"].as_str().unwrap().to_owned()
}

/// An event arrives once, with the webhook headers, its type and ordering key as the
/// transport's headers, a signature the Standard Webhooks verifier accepts, and the attempt
/// record and the test call say where it went and what the broker answered.
pub async fn arrives_signed<F: Fixture>(f: F) {
    let url = f.url(f.broker_addr());
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: '{url}'\n    topics: [t]\n    secret: {SECRET}\n    headers: {{ x-tenant-route: blue }}\n"
    ))
    .await;
    let id = ingest_with_key(&gw, "cart-7", 1).await;
    let got = wait_received(&f, 1).await;
    assert_eq!(got.len(), 1, "{got:?}");
    let message = &got[0];
    assert_eq!(
        serde_json::from_slice::<Value>(&message.body).unwrap(),
        json!({"n": 1})
    );
    assert_eq!(message.header("webhook-id"), Some(id.as_str()));
    assert!(message.header("webhook-timestamp").is_some());
    assert_eq!(message.header("content-type"), Some("application/json"));
    assert_eq!(message.header("hookgate-event-type"), Some("order.created"));
    assert_eq!(message.header("hookgate-ordering-key"), Some("cart-7"));
    assert_eq!(message.header("hookgate-delivery-attempt"), Some("1"));
    assert_eq!(message.header("x-tenant-route"), Some("blue"));
    message
        .verified_by(SECRET)
        .unwrap_or_else(|e| panic!("{}: the verifier refused the signature: {e}", F::KIND));

    // The delivery log: no status code, where it went and what the broker said.
    let delivery = &deliveries_of(&gw, "e").await[0];
    let detail = gw
        .wait_until(
            &format!("/v1/deliveries/{}", delivery["id"].as_str().unwrap()),
            WAIT,
            |d| d["status"] == "succeeded",
        )
        .await;
    let attempt = &detail["attempts"][0];
    assert_eq!(attempt["status_code"], Value::Null, "{attempt}");
    assert!(
        attempt["response_body"].as_str().is_some_and(|s| !s.is_empty()),
        "{attempt}"
    );
    assert!(
        !attempt["response_headers"].as_array().unwrap().is_empty(),
        "{attempt}"
    );
    let sent: Vec<&str> = attempt["request_headers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|h| h["name"] == "webhook-signature" || h["name"] == "x-tenant-route")
        .map(|h| h["value"].as_str().unwrap())
        .collect();
    assert_eq!(sent, ["[masked]", "[masked]"], "{attempt}");

    let (_, endpoint) = gw.get("/v1/endpoints/e").await;
    assert_eq!(endpoint["kind"], F::KIND, "{endpoint}");
    assert!(endpoint["target"].as_str().is_some(), "{endpoint}");
    let (status, tested) = gw.post("/v1/endpoints/e/test", json!({})).await;
    assert_eq!(status, 200, "{tested}");
    assert_eq!(tested["delivered"], true, "{tested}");
    assert_eq!(tested["kind"], F::KIND, "{tested}");
    assert_eq!(tested["target"], endpoint["target"], "{tested}");
    assert!(
        tested["answer"].as_str().is_some_and(|a| !a.is_empty()),
        "{tested}"
    );
    wait_received(&f, 2).await;
    f.cleanup().await;
}

/// A message the broker refuses is `rejected`, retried by the policy, and dead-lettered when
/// the policy is spent.
pub async fn refused_is_retried_then_dead_lettered<F: Fixture>(f: F) {
    let url = f.refused_url(f.broker_addr());
    let gw = TestGateway::start(&format!(
        "policies:\n  thrice:\n    schedule: [0s, 1s, 1s]\n    jitter: 0\n    retry_on: sns\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: '{url}'\n    topics: [t]\n    policy: thrice\n    dead_letter: true\n"
    ))
    .await;
    ingest_with_key(&gw, "k", 1).await;
    let id = deliveries_of(&gw, "e").await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    for n in 1..=3u64 {
        gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
            d["attempt_count"] == n && d["status"] != "delivering"
        })
        .await;
        gw.advance(Duration::from_secs(1)).await;
    }
    let detail = gw
        .wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| d["status"] == "dead")
        .await;
    let attempts = detail["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 3, "{detail}");
    for attempt in attempts {
        assert_eq!(attempt["error_kind"], "rejected", "{attempt}");
        assert_eq!(attempt["status_code"], Value::Null, "{attempt}");
    }
    f.cleanup().await;
}

/// A broker that is down (a closed port) fails attempts with `connect` and degrades the
/// endpoint after five failures in a row, like a failing URL.
pub async fn down_degrades_the_endpoint<F: Fixture>(f: F) {
    let down = std::net::SocketAddr::from(([127, 0, 0, 1], closed_port()));
    let url = f.url(down);
    let gw = TestGateway::start(&format!(
        "policies:\n  once:\n    schedule: [0s]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: '{url}'\n    topics: [t]\n    policy: once\n"
    ))
    .await;
    for n in 0..5 {
        ingest_with_key(&gw, &format!("k{n}"), n).await;
    }
    let endpoint = wait_state(&gw, "e", "degraded").await;
    assert_eq!(endpoint["consecutive_failures"], 5, "{endpoint}");
    for delivery in deliveries_of(&gw, "e").await {
        let (_, detail) = gw
            .get(&format!("/v1/deliveries/{}", delivery["id"].as_str().unwrap()))
            .await;
        assert_eq!(detail["status"], "failed", "{detail}");
        assert_eq!(detail["attempts"][0]["error_kind"], "connect", "{detail}");
    }
    f.cleanup().await;
}

/// With `ordered: true`, a key's events reach the broker in ingestion order although the
/// broker went down under them and every one of them was retried.
pub async fn per_key_order_holds_under_retries<F: Fixture>(f: F) {
    let relay = Relay::start(f.broker_addr()).await;
    let url = f.url(relay.addr);
    let gw = TestGateway::start(&format!(
        "policies:\n  steady:\n    schedule: [0s{}]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: '{url}'\n    topics: [t]\n    policy: steady\n    ordered: true\n",
        ", 10s".repeat(60)
    ))
    .await;
    let first = ingest_with_key(&gw, "cart", 0).await;
    wait_received(&f, 1).await;
    relay.down();
    let mut ids = vec![first];
    for n in 1..6 {
        ids.push(ingest_with_key(&gw, "cart", n).await);
    }
    // The head of the key fails (the broker is gone) and holds the rest back.
    gw.wait_until("/v1/deliveries?endpoint=e&status=pending", WAIT, |l| {
        l["deliveries"]
            .as_array()
            .is_some_and(|d| d.iter().any(|d| d["attempt_count"] == 1))
    })
    .await;
    gw.advance(Duration::from_secs(10)).await;
    gw.settle().await;
    relay.up();
    // The gateway connects again after its backoff (real time): keep the schedule moving
    // until every event is through.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while f.received().await.len() < ids.len() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: the events did not get through after the broker came back",
            F::KIND
        );
        gw.advance(Duration::from_secs(10)).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let got = wait_received(&f, ids.len()).await;
    let order: Vec<&str> = got.iter().filter_map(|m| m.header("webhook-id")).collect();
    let mut distinct = order.clone();
    distinct.dedup();
    assert_eq!(distinct, ids.iter().map(String::as_str).collect::<Vec<_>>());
    let retried = deliveries_of(&gw, "e")
        .await
        .iter()
        .filter(|d| d["attempt_count"].as_u64() > Some(1))
        .count();
    assert!(retried >= 1, "the broker's outage retried nothing");
    f.cleanup().await;
}
