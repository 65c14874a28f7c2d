//! Standard Webhooks `v1a` signatures: an endpoint with `signature: ed25519` signs with its
//! `whsk_` key, its API view shows the `whpk_` public key, and the signature verifies with
//! `ed25519-dalek` — an implementation independent of the gateway's (ring).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signature, SigningKey, VerifyingKey};
use serde_json::json;

use crate::support::{Sink, TestGateway, WAIT, endpoint};

#[tokio::test]
async fn a_v1a_signature_verifies_with_an_independent_ed25519_implementation() {
    let seed = [0x2au8; 32];
    let signing = SigningKey::from_bytes(&seed);
    let whsk = format!("whsk_{}", STANDARD.encode(seed));
    let whpk = format!("whpk_{}", STANDARD.encode(signing.verifying_key().as_bytes()));
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    signature: ed25519\n    secret: {whsk}\n",
        sink.url("/")
    ))
    .await;

    let view = endpoint(&gw, "e").await;
    assert_eq!(view["signature"], "ed25519", "{view}");
    assert_eq!(view["public_keys"], json!([whpk]), "{view}");
    assert!(!view.to_string().contains(&whsk[5..]), "{view}");

    gw.ingest("t", "order.created", json!({"id": 42})).await;
    let request = sink.wait_for(1, WAIT).await.remove(0);
    let signature = request.header("webhook-signature");
    let encoded = signature
        .strip_prefix("v1a,")
        .unwrap_or_else(|| panic!("not v1a: {signature}"));
    let signature = Signature::from_slice(&STANDARD.decode(encoded).unwrap()).unwrap();
    let public = STANDARD
        .decode(
            view["public_keys"][0]
                .as_str()
                .unwrap()
                .strip_prefix("whpk_")
                .unwrap(),
        )
        .unwrap();
    let public = VerifyingKey::from_bytes(&public.try_into().unwrap()).unwrap();
    let signed = |body: &[u8]| {
        let mut content = format!(
            "{}.{}.",
            request.header("webhook-id"),
            request.header("webhook-timestamp")
        )
        .into_bytes();
        content.extend_from_slice(body);
        content
    };
    assert!(public.verify_strict(&signed(&request.body), &signature).is_ok());
    assert!(
        public.verify_strict(&signed(b"{\"id\":43}"), &signature).is_err(),
        "a changed body must not verify"
    );
}

#[test]
fn ed25519_needs_whsk_keys_and_hmac_refuses_them() {
    let whsk = format!("whsk_{}", STANDARD.encode([1u8; 32]));
    let load = |extra: &str| {
        let yaml = format!(
            "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: https://example.com/\n    topics: [t]\n{extra}"
        );
        hookgate::config::load_str(&yaml, "test.yaml", None, |_| None)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert_eq!(load(&format!("    signature: ed25519\n    secret: {whsk}\n")), "");
    let err = load("    signature: ed25519\n    secret: whsec_c2VjcmV0\n");
    assert!(
        err.contains("endpoints.e.secret: ") && err.contains("an ed25519 key starts with `whsk_`"),
        "{err}"
    );
    let err = load("    signature: ed25519\n");
    assert!(err.contains("hookgate keygen ed25519"), "{err}");
    let err = load(&format!("    secret: {whsk}\n"));
    assert!(err.contains("signs only with `signature: ed25519`"), "{err}");
    assert!(!err.contains(&whsk[5..]), "{err}");
}
