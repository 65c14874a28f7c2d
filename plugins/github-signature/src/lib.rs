//! Signs a request the way GitHub signs its webhooks:
//! `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
//!
//! The HMAC is computed by the host with the endpoint's key handle, so the secret never
//! enters this plugin's memory. The key is the secret exactly as written, as GitHub uses it
//! (a `whsec_` prefix included), so GitHub's own verifiers accept the signature. Only the
//! body is read from the lent request; its headers are never copied in.

wit_bindgen::generate!({ world: "signer", path: "../../wit" });

use hookgate::plugin::crypto::{HashAlgorithm, KeyForm, hmac};

struct GithubSignature;

impl Guest for GithubSignature {
    fn sign(
        _endpoint: EndpointInfo,
        _delivery: DeliveryInfo,
        message: &OutgoingMessage,
        key: &SigningKey,
    ) -> Result<Edits, PluginError> {
        let mac = hmac(key, KeyForm::AsWritten, HashAlgorithm::Sha256, &message.body());
        let value = format!("sha256={}", hex(&mac));
        Ok(Edits {
            remove_headers: Vec::new(),
            set_headers: vec![("X-Hub-Signature-256".to_owned(), value.into_bytes())],
            body: None,
        })
    }
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0x0f)] as char);
    }
    out
}

export!(GithubSignature);
