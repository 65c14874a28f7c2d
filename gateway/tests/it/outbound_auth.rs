//! Endpoints behind credentials: an OAuth2 token server and an API that demands its tokens,
//! both on loopback. Tokens are fetched once for many deliveries, again when they expire on
//! the gateway's clock, and once when the API refuses one; a wrong client secret fails the
//! attempt with `auth`. Bearer and basic credentials arrive as sent and are masked in the
//! attempt record. No credential reaches the logs or any API answer.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::ops::leak_forms;
use crate::support::{Reply, Sink, TestGateway, WAIT, captured_logs};

const CLIENT_ID: &str = "hookgate-client";

/// A token server (`POST /token`, client-credentials grant) and an API (`POST /api`) that
/// accepts only the tokens it issued and has not revoked.
#[derive(Clone)]
struct Idp {
    base: String,
    state: Arc<IdpState>,
}

struct IdpState {
    client_secret: String,
    fetches: AtomicUsize,
    valid: Mutex<Vec<String>>,
    issued: Mutex<Vec<String>>,
    forms: Mutex<Vec<HashMap<String, String>>>,
    /// The `Authorization` of every request the API answered 2xx.
    accepted: Mutex<Vec<String>>,
    refused: AtomicUsize,
}

async fn token(State(idp): State<Arc<IdpState>>, body: Bytes) -> Response {
    let form: HashMap<String, String> = serde_urlencoded::from_bytes(&body).unwrap();
    idp.forms.lock().unwrap().push(form.clone());
    let field = |k: &str| form.get(k).map(String::as_str).unwrap_or("");
    if field("grant_type") != "client_credentials"
        || field("client_id") != CLIENT_ID
        || field("client_secret") != idp.client_secret
    {
        // The description echoes what was presented: the gateway must not pass it on.
        let refusal = json!({"error": "invalid_client", "error_description": format!("bad secret {}", field("client_secret"))});
        return (StatusCode::UNAUTHORIZED, axum::Json(refusal)).into_response();
    }
    let n = idp.fetches.fetch_add(1, Ordering::SeqCst) + 1;
    let token = format!("issued-access-token-{n}-{}", ulid::Ulid::new());
    idp.valid.lock().unwrap().push(token.clone());
    idp.issued.lock().unwrap().push(token.clone());
    axum::Json(json!({"access_token": token, "token_type": "Bearer", "expires_in": 3600})).into_response()
}

async fn api(State(idp): State<Arc<IdpState>>, headers: HeaderMap) -> StatusCode {
    let presented = headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let valid = idp
        .valid
        .lock()
        .unwrap()
        .iter()
        .any(|t| presented == format!("Bearer {t}"));
    if valid {
        idp.accepted.lock().unwrap().push(presented);
        StatusCode::OK
    } else {
        idp.refused.fetch_add(1, Ordering::SeqCst);
        StatusCode::UNAUTHORIZED
    }
}

impl Idp {
    async fn start(client_secret: &str) -> Idp {
        let state = Arc::new(IdpState {
            client_secret: client_secret.to_owned(),
            fetches: AtomicUsize::new(0),
            valid: Mutex::default(),
            issued: Mutex::default(),
            forms: Mutex::default(),
            accepted: Mutex::default(),
            refused: AtomicUsize::new(0),
        });
        let app = axum::Router::new()
            .route("/token", axum::routing::post(token))
            .route("/api", axum::routing::post(api))
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Idp { base, state }
    }

    fn fetches(&self) -> usize {
        self.state.fetches.load(Ordering::SeqCst)
    }

    fn accepted(&self) -> Vec<String> {
        self.state.accepted.lock().unwrap().clone()
    }

    fn issued(&self) -> Vec<String> {
        self.state.issued.lock().unwrap().clone()
    }

    /// The API stops accepting every token issued so far.
    fn revoke_all(&self) {
        self.state.valid.lock().unwrap().clear();
    }

    async fn wait_accepted(&self, n: usize) -> Vec<String> {
        let deadline = tokio::time::Instant::now() + WAIT;
        while self.accepted().len() < n {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the API accepted {} requests, expected {n}",
                self.accepted().len()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        self.accepted()
    }

    fn endpoint_yaml(&self, name: &str, client_secret: &str) -> String {
        format!(
            "  {name}:\n    url: {}/api\n    topics: [t]\n    auth:\n      oauth2:\n        token_url: {}/token\n        client_id: {CLIENT_ID}\n        client_secret: {client_secret}\n        scope: webhooks.write\n        audience: https://api.example\n",
            self.base, self.base
        )
    }
}

/// The newest delivery's detail once it has `attempts` attempts and is no longer delivering.
async fn newest_delivery(gw: &TestGateway, endpoint: &str, attempts: u64) -> Value {
    let list = gw
        .wait_until(&format!("/v1/deliveries?endpoint={endpoint}"), WAIT, |l| {
            l["deliveries"][0]["attempt_count"] == attempts && l["deliveries"][0]["status"] != "delivering"
        })
        .await;
    let id = list["deliveries"][0]["id"].as_str().unwrap().to_owned();
    gw.get(&format!("/v1/deliveries/{id}")).await.1
}

#[tokio::test]
async fn an_oauth2_token_is_fetched_once_then_again_after_expiry_and_after_a_401() {
    let secret = "oauth-client-secret-never-shown";
    let idp = Idp::start(secret).await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n{}",
        idp.endpoint_yaml("e", secret)
    ))
    .await;

    // Many deliveries at once, one token.
    for i in 0..8 {
        gw.ingest("t", "x", json!({"i": i})).await;
    }
    let accepted = idp.wait_accepted(8).await;
    assert_eq!(idp.fetches(), 1, "one fetch for concurrent deliveries");
    assert!(
        accepted
            .iter()
            .all(|a| *a == format!("Bearer {}", idp.issued()[0]))
    );
    let form = idp.state.forms.lock().unwrap()[0].clone();
    assert_eq!(form["scope"], "webhooks.write");
    assert_eq!(form["audience"], "https://api.example");

    // Still fresh a little before its hour is up, renewed once it is (gateway clock).
    gw.advance(Duration::from_secs(3500)).await;
    gw.ingest("t", "x", json!({})).await;
    idp.wait_accepted(9).await;
    assert_eq!(idp.fetches(), 1);
    gw.advance(Duration::from_secs(100)).await;
    gw.ingest("t", "x", json!({})).await;
    let accepted = idp.wait_accepted(10).await;
    assert_eq!(idp.fetches(), 2, "renewed after expiry");
    assert_eq!(accepted[9], format!("Bearer {}", idp.issued()[1]));

    // The API refuses the token: one new token, the same attempt sent again and delivered.
    idp.revoke_all();
    gw.ingest("t", "x", json!({})).await;
    let accepted = idp.wait_accepted(11).await;
    assert_eq!(idp.fetches(), 3, "one new token after the 401");
    assert_eq!(accepted[10], format!("Bearer {}", idp.issued()[2]));
    assert_eq!(idp.state.refused.load(Ordering::SeqCst), 1);
    let detail = newest_delivery(&gw, "e", 1).await;
    assert_eq!(detail["status"], "succeeded", "{detail}");
    assert_eq!(detail["attempts"].as_array().unwrap().len(), 1, "{detail}");
}

#[tokio::test]
async fn a_wrong_client_secret_fails_the_attempt_with_kind_auth() {
    let idp = Idp::start("the-right-secret").await;
    let wrong = "a-wrong-client-secret";
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n{}",
        idp.endpoint_yaml("e", wrong)
    ))
    .await;
    gw.ingest("t", "x", json!({})).await;
    let detail = newest_delivery(&gw, "e", 1).await;
    let attempt = &detail["attempts"][0];
    assert_eq!(attempt["error_kind"], "auth", "{detail}");
    let error = attempt["error"].as_str().unwrap();
    assert!(
        error.contains("HTTP 401") && error.contains("invalid_client"),
        "{error}"
    );
    assert!(!detail.to_string().contains(wrong), "{detail}");
    assert_eq!(detail["status"], "pending", "retried by policy: {detail}");
    assert!(idp.accepted().is_empty());
    assert_eq!(
        idp.state.refused.load(Ordering::SeqCst),
        0,
        "the API was never called"
    );
    // A test call says the same.
    let (_, test) = gw.post("/v1/endpoints/e/test", json!({})).await;
    assert_eq!(test["error_kind"], "auth", "{test}");
}

#[tokio::test]
async fn static_credentials_arrive_as_configured_and_the_attempt_record_masks_them() {
    let sink = Sink::start().await;
    let long_body = "b".repeat(5000);
    sink.script([Reply::status(503)
        .with_header("x-reply", "kept")
        .with_body(&long_body)]);
    let gw = TestGateway::start(&format!(
        "policies:\n  quick:\n    schedule: [0s, 1s]\n    jitter: 0\ntopics:\n  t: {{}}\n  b: {{}}\nendpoints:\n  basic:\n    url: {}\n    topics: [t]\n    policy: quick\n    secret: whsec_c2VjcmV0LWtleS1mb3ItbWFza2luZw==\n    headers: {{ X-Api-Key: configured-header-credential }}\n    auth: {{ basic: {{ username: hook-user, password: basic-password-value }} }}\n  bearer:\n    url: {}\n    topics: [b]\n    auth: {{ bearer: bearer-token-value }}\n",
        sink.url("/basic"),
        sink.url("/bearer"),
    ))
    .await;
    // One at a time, so that the scripted 503 answers the `basic` endpoint.
    let accepted = gw.ingest("t", "x", json!({"n": 1})).await;
    sink.wait_for(1, WAIT).await;
    gw.ingest("b", "x", json!({})).await;
    let received = sink.wait_for(2, WAIT).await;
    let of = |path: &str| received.iter().find(|r| r.path == path).unwrap().clone();
    let basic = STANDARD.encode("hook-user:basic-password-value");
    assert_eq!(of("/basic").header("authorization"), format!("Basic {basic}"));
    assert_eq!(of("/bearer").header("authorization"), "Bearer bearer-token-value");

    let detail = newest_delivery(&gw, "basic", 1).await;
    let attempt = &detail["attempts"][0];
    let header = |list: &Value, name: &str| -> Option<String> {
        list.as_array()?
            .iter()
            .find(|h| h["name"] == name)
            .map(|h| h["value"].as_str().unwrap().to_owned())
    };
    let sent = &attempt["request_headers"];
    for masked in ["authorization", "webhook-signature", "x-api-key"] {
        assert_eq!(
            header(sent, masked).as_deref(),
            Some("[masked]"),
            "{masked}: {sent}"
        );
    }
    assert_eq!(
        header(sent, "webhook-id"),
        accepted["id"].as_str().map(str::to_owned)
    );
    assert_eq!(header(sent, "content-type").as_deref(), Some("application/json"));
    assert_eq!(
        header(&attempt["response_headers"], "x-reply").as_deref(),
        Some("kept")
    );
    assert_eq!(attempt["response_body"].as_str(), Some(&long_body[..4096]));
    assert_eq!(attempt["status_code"], 503);
    let text = detail.to_string();
    for credential in [
        "basic-password-value",
        basic.as_str(),
        "configured-header-credential",
    ] {
        assert!(!text.contains(credential), "{credential} in {text}");
    }
    let ep = crate::support::endpoint(&gw, "basic").await;
    assert_eq!(ep["auth"], "basic", "{ep}");
    // The OpenAPI document describes the new fields.
    let (_, doc) = gw.get("/openapi.json").await;
    let schemas = &doc["components"]["schemas"];
    for field in ["request_headers", "response_headers", "response_body"] {
        assert!(schemas["AttemptView"]["properties"][field].is_object(), "{field}");
    }
    for field in ["public_keys", "auth", "client_certificate", "proxy", "signature"] {
        assert!(
            schemas["EndpointView"]["properties"][field].is_object(),
            "{field}"
        );
    }
}

/// Every credential of every kind, in every form it could take, stays out of the whole test
/// log and every API answer: endpoint views, delivery details (attempt records included),
/// test calls, the status and the OpenAPI document.
#[tokio::test]
async fn outbound_credentials_never_reach_the_logs_or_the_api() {
    let client_secret = "leak-check-oauth-client-secret";
    let idp = Idp::start(client_secret).await;
    let sink = Sink::start().await;
    let whsk = format!("whsk_{}", STANDARD.encode([0x5au8; 32]));
    let credentials = [
        "leak-check-bearer-token",
        "leak-check-basic-password",
        "leak-check-header-value",
        client_secret,
        &whsk,
    ];
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n{}  bearer:\n    url: {}\n    topics: [t]\n    auth: {{ bearer: {} }}\n    headers: {{ X-Api-Key: {} }}\n  basic:\n    url: {}\n    topics: [t]\n    auth: {{ basic: {{ username: u, password: {} }} }}\n  signed:\n    url: {}\n    topics: [t]\n    signature: ed25519\n    secret: {whsk}\n",
        idp.endpoint_yaml("oauth", client_secret),
        sink.url("/bearer"),
        credentials[0],
        credentials[2],
        sink.url("/basic"),
        credentials[1],
        sink.url("/signed"),
    ))
    .await;
    gw.ingest("t", "x", json!({})).await;
    idp.wait_accepted(1).await;
    sink.wait_for(3, WAIT).await;
    let mut answers = String::new();
    for name in ["oauth", "bearer", "basic", "signed"] {
        newest_delivery(&gw, name, 1).await;
        let (_, test) = gw.post(&format!("/v1/endpoints/{name}/test"), json!({})).await;
        assert_eq!(test["delivered"], true, "{name}: {test}");
        answers.push_str(&test.to_string());
        answers.push_str(&crate::support::endpoint(&gw, name).await.to_string());
    }
    let (_, list) = gw.get("/v1/deliveries").await;
    for d in list["deliveries"].as_array().unwrap() {
        let (_, detail) = gw
            .get(&format!("/v1/deliveries/{}", d["id"].as_str().unwrap()))
            .await;
        assert!(
            detail["attempts"][0]["request_headers"]
                .as_array()
                .is_some_and(|h| !h.is_empty())
        );
        answers.push_str(&detail.to_string());
    }
    for path in ["/v1/endpoints", "/v1/deliveries", "/v1/status", "/openapi.json"] {
        answers.push_str(&gw.get(path).await.1.to_string());
    }
    let logs = captured_logs();
    let basic = STANDARD.encode("u:leak-check-basic-password");
    let tokens = idp.issued();
    assert!(!tokens.is_empty());
    let all: Vec<&str> = credentials
        .iter()
        .copied()
        .chain([basic.as_str()])
        .chain(tokens.iter().map(String::as_str))
        .collect();
    for (what, text) in [("logs", &logs), ("API answers", &answers)] {
        for credential in &all {
            for form in leak_forms(credential) {
                assert!(!text.contains(&form), "a credential is in the {what} as `{form}`");
            }
        }
    }
}
