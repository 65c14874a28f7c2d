//! Signs a request the way Stripe signs its webhooks:
//! `Stripe-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>">`.
//!
//! While the endpoint's secret is being rotated, one `v1=` entry per key is sent (newest
//! first), as Stripe does during its own secret rolls, so receivers holding either secret
//! accept the request. The timestamp is the gateway's `now-ms`, never a clock read here.
//!
//! Stripe keys its HMAC with the whole secret string, `whsec_` prefix included (it is not
//! base64 to be decoded): so does this signer, and `stripe.Webhook.construct_event` accepts it.

wit_bindgen::generate!({ world: "signer", path: "../../wit" });

use hookgate::plugin::crypto::{HashAlgorithm, KeyForm, hmac, rotating_keys};

struct StripeSignature;

impl Guest for StripeSignature {
    fn sign(
        _endpoint: EndpointInfo,
        delivery: DeliveryInfo,
        message: &OutgoingMessage,
        key: &SigningKey,
    ) -> Result<Edits, PluginError> {
        let timestamp_s = delivery.now_ms / 1000;
        let mut signed_payload = format!("{timestamp_s}.").into_bytes();
        signed_payload.extend_from_slice(&message.body());

        let mut value = format!("t={timestamp_s}");
        for mac in std::iter::once(hmac(
            key,
            KeyForm::AsWritten,
            HashAlgorithm::Sha256,
            &signed_payload,
        ))
        .chain(
            rotating_keys()
                .iter()
                .map(|k| hmac(k, KeyForm::AsWritten, HashAlgorithm::Sha256, &signed_payload)),
        ) {
            value.push_str(",v1=");
            value.push_str(&hex(&mac));
        }
        Ok(Edits {
            remove_headers: Vec::new(),
            set_headers: vec![("Stripe-Signature".to_owned(), value.into_bytes())],
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

export!(StripeSignature);
