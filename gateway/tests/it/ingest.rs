use std::time::Duration;

use base64::Engine;
use hmac::{Hmac, Mac};
use serde_json::json;
use sha2::Sha256;

use crate::support::{Reply, Sink, TestGateway};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const WAIT: Duration = Duration::from_secs(10);

/// Whether `signature` (a `webhook-signature` value) holds a `v1` signature by `secret`.
pub(crate) fn verify(secret: &str, id: &str, ts: &str, body: &[u8], signature: &str) -> bool {
    let key = base64::engine::general_purpose::STANDARD
        .decode(secret.trim_start_matches("whsec_"))
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.").as_bytes());
    mac.update(body);
    let expected = format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    );
    signature.split(' ').any(|s| s == expected)
}

#[tokio::test]
async fn events_fan_out_to_subscribed_endpoints_by_type_filter() {
    let orders = Sink::start().await;
    let everything = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  shop: {{}}\n  other: {{}}\nendpoints:\n  orders:\n    url: {}\n    topics: [shop]\n    types: ['order.*']\n  all:\n    url: {}\n    topics: [shop, other]\n",
        orders.url("/o"),
        everything.url("/a")
    ))
    .await;
    let a = gw.ingest("shop", "order.created", json!({"n": 1})).await;
    assert_eq!(a["deliveries"], 2);
    let b = gw.ingest("shop", "user.created", json!({"n": 2})).await;
    assert_eq!(b["deliveries"], 1);
    let c = gw.ingest("other", "order.created", json!({"n": 3})).await;
    assert_eq!(c["deliveries"], 1);

    let got = everything.wait_for(3, WAIT).await;
    let mut ns: Vec<i64> = got.iter().map(|r| r.json()["n"].as_i64().unwrap()).collect();
    ns.sort();
    assert_eq!(ns, vec![1, 2, 3]);
    let got = orders.wait_for(1, WAIT).await;
    assert_eq!(got[0].json(), json!({"n": 1}));
    // Nothing else arrives for `orders`: the other two events were filtered out.
    gw.wait_until(&format!("/v1/events/{}", c["id"].as_str().unwrap()), WAIT, |e| {
        e["deliveries"][0]["status"] == "succeeded"
    })
    .await;
    assert_eq!(orders.count(), 1);
}

#[tokio::test]
async fn deliveries_carry_standard_webhooks_headers_and_a_valid_signature() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    secret: {SECRET}\n    headers: {{ X-Team: billing }}\n",
        sink.url("/hook")
    ))
    .await;
    let accepted = gw
        .ingest("t", "order.created", json!({"test": 2432232314u64}))
        .await;
    let r = &sink.wait_for(1, WAIT).await[0];
    assert_eq!(r.path, "/hook");
    assert_eq!(r.header("webhook-id"), accepted["id"].as_str().unwrap());
    assert_eq!(r.header("hookgate-delivery-attempt"), "1");
    assert_eq!(r.header("content-type"), "application/json");
    assert_eq!(r.header("x-team"), "billing");
    let ts = r.header("webhook-timestamp");
    assert!(ts.parse::<i64>().unwrap() > 1_600_000_000);
    assert!(
        verify(
            SECRET,
            r.header("webhook-id"),
            ts,
            &r.body,
            r.header("webhook-signature")
        ),
        "{:?}",
        r.headers
    );
    // The payload is delivered byte for byte as given.
    assert_eq!(&r.body[..], br#"{"test":2432232314}"#);
}

#[tokio::test]
async fn two_secrets_while_rotating_send_two_signatures() {
    let sink = Sink::start().await;
    let second = "whsec_dGhlLW5ldy1zZWNyZXQtZm9yLXJvdGF0aW9u";
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    secret: [{SECRET}, {second}]\n",
        sink.url("/")
    ))
    .await;
    gw.ingest("t", "x", json!({})).await;
    let r = &sink.wait_for(1, WAIT).await[0];
    let sig = r.header("webhook-signature");
    assert_eq!(sig.split(' ').count(), 2, "{sig}");
    let (id, ts) = (r.header("webhook-id"), r.header("webhook-timestamp"));
    assert!(verify(SECRET, id, ts, &r.body, sig));
    assert!(verify(second, id, ts, &r.body, sig));
}

#[tokio::test]
async fn a_raw_body_is_delivered_with_its_own_content_type() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    let (status, body) = gw
        .send(
            gw.post_builder("/v1/topics/t/events")
                .header("content-type", "text/csv")
                .header("event-type", "report.ready")
                .header("event-id", "report-7")
                .body("a,b\n1,2\n"),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["id"], "report-7");
    let r = &sink.wait_for(1, WAIT).await[0];
    assert_eq!(r.header("content-type"), "text/csv");
    assert_eq!(r.header("webhook-id"), "report-7");
    assert_eq!(&r.body[..], b"a,b\n1,2\n");
    // Without an Event-Type a raw body is refused.
    let (status, body) = gw
        .send(
            gw.post_builder("/v1/topics/t/events")
                .header("content-type", "text/plain")
                .body("hi"),
        )
        .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["code"], "missing_event_type");
}

#[tokio::test]
async fn a_batch_is_committed_and_delivered_whole() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    let events: Vec<_> = (0..5)
        .map(|i| json!({"type": "x", "payload": {"i": i}}))
        .collect();
    let (status, body) = gw
        .post("/v1/topics/t/events/batch", json!({"events": events}))
        .await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["ids"].as_array().unwrap().len(), 5);
    assert_eq!(body["deliveries"], 5);
    sink.wait_for(5, WAIT).await;
}

#[tokio::test]
async fn the_event_and_delivery_log_show_what_happened() {
    let sink = Sink::start().await;
    sink.script([Reply::status(500)]);
    let gw = TestGateway::start(&format!(
        "policies:\n  fast:\n    schedule: [0s, 10s]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: fast\n",
        sink.url("/")
    ))
    .await;
    let accepted = gw.ingest("t", "order.created", json!({"a": 1})).await;
    let id = accepted["id"].as_str().unwrap();
    let event = gw
        .wait_until(&format!("/v1/events/{id}"), WAIT, |e| {
            e["deliveries"][0]["attempt_count"] == 1
        })
        .await;
    assert_eq!(event["type"], "order.created");
    assert_eq!(event["payload"], json!({"a": 1}));
    let delivery = &event["deliveries"][0];
    assert_eq!(delivery["status"], "pending");
    assert!(
        delivery["last_error"].as_str().unwrap().contains("http_status"),
        "{delivery}"
    );
    let next =
        hookgate::model::Timestamp::parse_rfc3339(delivery["next_attempt_at"].as_str().unwrap()).unwrap();
    assert_eq!(next, gw.now().plus(Duration::from_secs(10)));

    gw.advance(Duration::from_secs(10)).await;
    sink.wait_for(2, WAIT).await;
    let dlv = delivery["id"].as_str().unwrap();
    let one = gw
        .wait_until(&format!("/v1/deliveries/{dlv}"), WAIT, |d| {
            d["status"] == "succeeded"
        })
        .await;
    let attempts = one["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2);
    assert_eq!(attempts[0]["n"], 1);
    assert_eq!(attempts[0]["status_code"], 500);
    assert_eq!(attempts[0]["error_kind"], "http_status");
    assert_eq!(attempts[1]["n"], 2);
    assert_eq!(attempts[1]["status_code"], 200);
    assert!(attempts[1]["error_kind"].is_null());

    let (_, list) = gw.get("/v1/deliveries?endpoint=e&status=succeeded").await;
    assert_eq!(list["deliveries"].as_array().unwrap().len(), 1);
    assert!(list["next_cursor"].is_null());
    let (_, none) = gw.get("/v1/deliveries?status=failed").await;
    assert!(none["deliveries"].as_array().unwrap().is_empty());
}

#[tokio::test]
async fn the_delivery_log_pages_newest_first() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    for i in 0..5 {
        gw.ingest("t", "x", json!({"i": i})).await;
    }
    let (_, page1) = gw.get("/v1/deliveries?limit=2").await;
    let ids1: Vec<&str> = page1["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids1, vec!["dlv_5", "dlv_4"]);
    let cursor = page1["next_cursor"].as_str().unwrap();
    let (_, page2) = gw.get(&format!("/v1/deliveries?limit=2&cursor={cursor}")).await;
    let ids2: Vec<&str> = page2["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids2, vec!["dlv_3", "dlv_2"]);
    let (_, page3) = gw
        .get(&format!(
            "/v1/deliveries?limit=2&cursor={}",
            page2["next_cursor"].as_str().unwrap()
        ))
        .await;
    assert_eq!(page3["deliveries"].as_array().unwrap().len(), 1);
    assert!(page3["next_cursor"].is_null());
}

/// With no config file, a newcomer's first event is accepted: the embedded default has a
/// `default` topic, listed by `GET /v1/topics`, and the event is stored and readable. The
/// bundled plugins serve without a plugin folder (the README's `js` transformations need them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_default_accepts_a_first_event_on_its_default_topic() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = hookgate::config::Config::embedded_default();
    assert!(config.plugins.bundled, "the bundled plugins are on by default");
    // Everything else stays the embedded default's; only the files go to the temp dir.
    config.storage.path = dir.path().join("hookgate.db");
    config.plugins.dir = dir.path().join("plugins");
    config.plugins.cache_dir = dir.path().join("plugin-cache");
    let mut options = hookgate::GatewayOptions::new(
        config,
        std::sync::Arc::new(hookgate::clock::ManualClock::new(crate::support::START)),
    );
    options.listener = Some(std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    let gateway = hookgate::Gateway::start(options).await.unwrap();
    let base = format!("http://{}", gateway.addr());
    let http = reqwest::Client::new();
    let get = |path: String| {
        let request = http.get(format!("{base}{path}"));
        async move {
            let answer = request.send().await.unwrap();
            answer.json::<serde_json::Value>().await.unwrap()
        }
    };

    let topics = get("/v1/topics".into()).await;
    // The default topic, and the built-in one of the Svix API.
    assert_eq!(
        topics["topics"],
        json!([{"name": "default", "policy": null, "subscribers": 0},
               {"name": "svix", "policy": null, "subscribers": 0}])
    );
    let answer = http
        .post(format!("{base}/v1/topics/default/events"))
        .json(&json!({"type": "hello", "payload": {"first": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 202);
    let accepted: serde_json::Value = answer.json().await.unwrap();
    assert_eq!(accepted["deliveries"], 0);
    let event = get(format!("/v1/events/{}", accepted["id"].as_str().unwrap())).await;
    assert_eq!(event["payload"], json!({"first": true}));

    let plugins = get("/v1/plugins".into()).await;
    let loaded: Vec<(&str, &str)> = plugins["plugins"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["world"].as_str().unwrap()))
        .collect();
    assert_eq!(
        loaded,
        [
            ("cloudevents", "transformer"),
            ("decorrelated-jitter", "backoff"),
            ("github-signature", "signer"),
            ("js", "transformer"),
            ("redact", "transformer"),
            ("sns-envelope", "transformer"),
            ("stripe-signature", "signer"),
        ],
        "{plugins}"
    );
    gateway.shutdown().await;
}
