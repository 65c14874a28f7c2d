//! Standard Webhooks signing (README "How delivery works"): what lets a receiver check that a
//! request came from the gateway and was not replayed from long ago.
//!
//! The signed content is `"{webhook-id}.{webhook-timestamp}.{body}"`, the signature
//! `v1,<base64(HMAC-SHA256(key, content))>`, or with `signature: ed25519`
//! `v1a,<base64(Ed25519(private key, content))>`: receivers then verify with the `whpk_` public
//! key and hold nothing that could forge a request. While a secret is rotated the endpoint lists
//! several secrets and every one of them signs, separated by one space, so receivers holding
//! either the old or the new secret accept the request during the grace period.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use hmac::{Hmac, Mac};
use http::{HeaderMap, HeaderName, HeaderValue};
use ring::signature::{Ed25519KeyPair, KeyPair as _};
use sha2::Sha256;

use super::DeliveryError;
use crate::model::Secret;

/// The prefix of a Standard Webhooks secret; what follows it is the base64 of the key.
pub const WHSEC_PREFIX: &str = "whsec_";
/// The prefix of a Standard Webhooks Ed25519 private key: the base64 of its 32-byte seed (or of
/// the seed followed by the public key, 64 bytes).
pub const WHSK_PREFIX: &str = "whsk_";
/// The prefix of a Standard Webhooks Ed25519 public key: the base64 of its 32 bytes.
pub const WHPK_PREFIX: &str = "whpk_";

/// How an endpoint's secrets sign (`signature:`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SignatureScheme {
    /// `v1`: HMAC-SHA256 with a shared secret.
    #[default]
    Hmac,
    /// `v1a`: Ed25519 with a `whsk_` private key.
    Ed25519,
}

pub const WEBHOOK_ID: HeaderName = HeaderName::from_static("webhook-id");
pub const WEBHOOK_TIMESTAMP: HeaderName = HeaderName::from_static("webhook-timestamp");
pub const WEBHOOK_SIGNATURE: HeaderName = HeaderName::from_static("webhook-signature");
pub const DELIVERY_ATTEMPT: HeaderName = HeaderName::from_static("hookgate-delivery-attempt");

/// Secrets are written by hand into YAML; some tools drop base64 padding, so both spellings
/// decode to the same key.
const LENIENT_BASE64: GeneralPurpose = GeneralPurpose::new(
    &base64::alphabet::STANDARD,
    GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent),
);

/// The HMAC key of a secret: the base64-decoded rest of a `whsec_` secret (the Standard
/// Webhooks convention); for any other secret — and, as a fallback, for a `whsec_` secret
/// whose rest is not base64 — its UTF-8 bytes, as GitHub and Stripe use theirs.
///
/// Configuration should refuse malformed `whsec_` secrets up front with [`validate_secret`],
/// so the fallback only keeps signing total.
pub fn signing_key(secret: &Secret) -> Vec<u8> {
    let text = secret.expose();
    if let Some(encoded) = text.strip_prefix(WHSEC_PREFIX)
        && let Ok(key) = LENIENT_BASE64.decode(encoded)
    {
        return key;
    }
    text.as_bytes().to_vec()
}

/// `Ok` unless the secret is a `whsec_` secret whose key does not decode (or is empty).
/// The error never contains the secret.
pub fn validate_secret(secret: &Secret) -> Result<(), DeliveryError> {
    match secret.expose().strip_prefix(WHSEC_PREFIX) {
        None => {
            if secret.expose().is_empty() {
                Err(DeliveryError::InvalidSecret("the secret is empty"))
            } else {
                Ok(())
            }
        }
        Some(encoded) => match LENIENT_BASE64.decode(encoded) {
            Ok(key) if !key.is_empty() => Ok(()),
            Ok(_) => Err(DeliveryError::InvalidSecret("nothing follows `whsec_`")),
            Err(_) => Err(DeliveryError::InvalidSecret(
                "what follows `whsec_` is not valid base64",
            )),
        },
    }
}

/// The `webhook-signature` value: one `v1,<base64>` per secret, separated by one space.
/// Empty when `secrets` is empty.
pub fn standard_webhooks_signature(
    secrets: &[Secret],
    msg_id: &str,
    timestamp_s: i64,
    body: &[u8],
) -> String {
    let prefix = format!("{msg_id}.{timestamp_s}.");
    secrets
        .iter()
        .map(|secret| {
            let mut mac = Hmac::<Sha256>::new_from_slice(&signing_key(secret))
                .expect("HMAC-SHA256 accepts keys of any length");
            mac.update(prefix.as_bytes());
            mac.update(body);
            format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The Ed25519 key pair of a `whsk_` secret. The error never contains the secret.
pub fn ed25519_key(secret: &Secret) -> Result<Ed25519KeyPair, DeliveryError> {
    let encoded = secret
        .expose()
        .strip_prefix(WHSK_PREFIX)
        .ok_or(DeliveryError::InvalidSecret("an ed25519 key starts with `whsk_`"))?;
    let bytes = LENIENT_BASE64
        .decode(encoded)
        .map_err(|_| DeliveryError::InvalidSecret("what follows `whsk_` is not valid base64"))?;
    let pair = match bytes.len() {
        32 => Ed25519KeyPair::from_seed_unchecked(&bytes),
        64 => Ed25519KeyPair::from_seed_and_public_key(&bytes[..32], &bytes[32..]),
        _ => {
            return Err(DeliveryError::InvalidSecret(
                "a whsk_ key is 32 bytes (or 64: the seed and its public key)",
            ));
        }
    };
    pair.map_err(|_| DeliveryError::InvalidSecret("the whsk_ key's public half does not match it"))
}

/// The `whpk_` public key of a `whsk_` private key, for receivers to verify with.
pub fn ed25519_public_key(secret: &Secret) -> Result<String, DeliveryError> {
    let pair = ed25519_key(secret)?;
    Ok(format!(
        "{WHPK_PREFIX}{}",
        STANDARD.encode(pair.public_key().as_ref())
    ))
}

/// A new Ed25519 key pair: the `whsk_` private key (a secret) and its `whpk_` public key.
pub fn generate_ed25519() -> Result<(Secret, String), DeliveryError> {
    use ring::rand::{SecureRandom as _, SystemRandom};
    let mut seed = [0u8; 32];
    SystemRandom::new()
        .fill(&mut seed)
        .map_err(|_| DeliveryError::InvalidSecret("the system's random source failed"))?;
    let secret = Secret::new(format!("{WHSK_PREFIX}{}", STANDARD.encode(seed)));
    let public = ed25519_public_key(&secret)?;
    Ok((secret, public))
}

/// The `webhook-signature` value of Ed25519 keys: one `v1a,<base64>` per key, separated by
/// one space. A key that does not parse (refused when the config loads) signs nothing.
pub fn ed25519_signature(secrets: &[Secret], msg_id: &str, timestamp_s: i64, body: &[u8]) -> String {
    let mut content = format!("{msg_id}.{timestamp_s}.").into_bytes();
    content.extend_from_slice(body);
    secrets
        .iter()
        .filter_map(|secret| ed25519_key(secret).ok())
        .map(|pair| format!("v1a,{}", STANDARD.encode(pair.sign(&content).as_ref())))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The standard headers of one attempt: `webhook-id`, `webhook-timestamp`,
/// `webhook-signature` (only when `sign` names a scheme and there is at least one secret; a
/// signer plugin replaces it otherwise) and `Hookgate-Delivery-Attempt`.
///
/// A header value cannot hold control characters, so any in `msg_id` are sent
/// percent-encoded (`%0A`), and the signature covers exactly the id that is sent — the
/// receiver can always verify. Ingestion is expected to refuse such ids in the first place.
pub fn standard_headers(
    msg_id: &str,
    timestamp_s: i64,
    attempt: u32,
    secrets: &[Secret],
    body: &[u8],
    sign: Option<SignatureScheme>,
) -> HeaderMap {
    let sent_id = header_safe_id(msg_id);
    let mut headers = HeaderMap::with_capacity(4);
    headers.insert(
        WEBHOOK_ID,
        HeaderValue::from_bytes(sent_id.as_bytes()).expect("control characters were escaped"),
    );
    headers.insert(WEBHOOK_TIMESTAMP, HeaderValue::from(timestamp_s));
    let signature = match sign {
        _ if secrets.is_empty() => None,
        None => None,
        Some(SignatureScheme::Hmac) => {
            Some(standard_webhooks_signature(secrets, &sent_id, timestamp_s, body))
        }
        Some(SignatureScheme::Ed25519) => Some(ed25519_signature(secrets, &sent_id, timestamp_s, body)),
    };
    if let Some(signature) = signature.filter(|s| !s.is_empty()) {
        headers.insert(
            WEBHOOK_SIGNATURE,
            HeaderValue::from_str(&signature).expect("base64 and `v1,` are visible ASCII"),
        );
    }
    headers.insert(DELIVERY_ATTEMPT, HeaderValue::from(attempt));
    headers
}

fn header_safe_id(msg_id: &str) -> std::borrow::Cow<'_, str> {
    let forbidden = |c: char| (c.is_ascii_control() && c != '\t') || c == '%';
    if !msg_id.chars().any(|c| c.is_ascii_control() && c != '\t') {
        return std::borrow::Cow::Borrowed(msg_id);
    }
    let mut out = String::with_capacity(msg_id.len() + 8);
    for c in msg_id.chars() {
        if forbidden(c) {
            out.push_str(&format!("%{:02X}", c as u32));
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const VECTOR_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    const VECTOR_ID: &str = "msg_p5jXN8AQM9LWM0D4loKWxJek";
    const VECTOR_TS: i64 = 1_614_265_330;
    const VECTOR_BODY: &[u8] = br#"{"test": 2432232314}"#;
    const VECTOR_SIGNATURE: &str = "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=";

    #[test]
    fn matches_the_standard_webhooks_test_vector() {
        let sig =
            standard_webhooks_signature(&[Secret::new(VECTOR_SECRET)], VECTOR_ID, VECTOR_TS, VECTOR_BODY);
        assert_eq!(sig, VECTOR_SIGNATURE);
    }

    #[test]
    fn rotation_sends_one_signature_per_secret_separated_by_a_space() {
        let other = Secret::new("whsec_c2Vjb25kLXNlY3JldC1rZXk=");
        let sig = standard_webhooks_signature(
            &[Secret::new(VECTOR_SECRET), other.clone()],
            VECTOR_ID,
            VECTOR_TS,
            VECTOR_BODY,
        );
        let parts: Vec<&str> = sig.split(' ').collect();
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], VECTOR_SIGNATURE);
        assert!(parts[1].starts_with("v1,"));
        assert_ne!(parts[1], parts[0]);
        assert_eq!(
            parts[1],
            standard_webhooks_signature(&[other], VECTOR_ID, VECTOR_TS, VECTOR_BODY)
        );
    }

    #[test]
    fn key_is_decoded_whsec_or_raw_utf8_bytes() {
        assert_eq!(signing_key(&Secret::new("whsec_aGVsbG8=")), b"hello".to_vec());
        // Unpadded base64 decodes to the same key.
        assert_eq!(signing_key(&Secret::new("whsec_aGVsbG8")), b"hello".to_vec());
        assert_eq!(
            signing_key(&Secret::new("plain-secret")),
            b"plain-secret".to_vec()
        );
        // Not base64 after the prefix: the whole string's bytes, never a panic.
        assert_eq!(signing_key(&Secret::new("whsec_***")), b"whsec_***".to_vec());
    }

    #[test]
    fn validation_refuses_malformed_whsec_secrets_without_echoing_them() {
        assert!(validate_secret(&Secret::new(VECTOR_SECRET)).is_ok());
        assert!(validate_secret(&Secret::new("github-style-secret")).is_ok());
        for bad in ["whsec_", "whsec_not*base64!", ""] {
            let err = validate_secret(&Secret::new(bad)).unwrap_err().to_string();
            assert!(!bad.is_empty() || err.contains("empty"));
            assert!(!err.contains("base64!") && !err.contains("not*"), "{err}");
        }
    }

    #[test]
    fn standard_headers_carry_id_timestamp_signature_and_attempt() {
        let h = standard_headers(
            VECTOR_ID,
            VECTOR_TS,
            3,
            &[Secret::new(VECTOR_SECRET)],
            VECTOR_BODY,
            Some(SignatureScheme::Hmac),
        );
        assert_eq!(h.len(), 4);
        assert_eq!(h["webhook-id"], VECTOR_ID);
        assert_eq!(h["webhook-timestamp"], "1614265330");
        assert_eq!(h["webhook-signature"], VECTOR_SIGNATURE);
        assert_eq!(h["hookgate-delivery-attempt"], "3");
    }

    #[test]
    fn no_signature_without_secrets_or_when_a_plugin_signs() {
        let unsigned = standard_headers(
            VECTOR_ID,
            VECTOR_TS,
            1,
            &[],
            VECTOR_BODY,
            Some(SignatureScheme::Hmac),
        );
        assert!(!unsigned.contains_key("webhook-signature"));
        assert_eq!(unsigned["hookgate-delivery-attempt"], "1");
        let plugin_signs = standard_headers(
            VECTOR_ID,
            VECTOR_TS,
            1,
            &[Secret::new(VECTOR_SECRET)],
            VECTOR_BODY,
            None,
        );
        assert!(!plugin_signs.contains_key("webhook-signature"));
        assert_eq!(plugin_signs["webhook-id"], VECTOR_ID);
    }

    #[test]
    fn an_id_with_control_characters_is_escaped_and_signed_as_sent() {
        let secrets = [Secret::new(VECTOR_SECRET)];
        let h = standard_headers("evt\n1%", 10, 1, &secrets, b"{}", Some(SignatureScheme::Hmac));
        assert_eq!(h["webhook-id"], "evt%0A1%25");
        assert_eq!(
            h["webhook-signature"],
            standard_webhooks_signature(&secrets, "evt%0A1%25", 10, b"{}").as_str()
        );
    }

    #[test]
    fn ed25519_keys_sign_v1a_and_verify_with_their_public_key() {
        use ring::signature::{ED25519, UnparsedPublicKey};
        let (secret, public) = generate_ed25519().unwrap();
        assert!(secret.expose().starts_with(WHSK_PREFIX) && public.starts_with(WHPK_PREFIX));
        assert_eq!(ed25519_public_key(&secret).unwrap(), public);
        let h = standard_headers("msg_1", 10, 1, &[secret], b"{}", Some(SignatureScheme::Ed25519));
        let value = h["webhook-signature"].to_str().unwrap();
        let sig = STANDARD.decode(value.strip_prefix("v1a,").unwrap()).unwrap();
        let key = STANDARD
            .decode(public.strip_prefix(WHPK_PREFIX).unwrap())
            .unwrap();
        let key = UnparsedPublicKey::new(&ED25519, key);
        assert!(key.verify(b"msg_1.10.{}", &sig).is_ok());
        assert!(key.verify(b"msg_1.11.{}", &sig).is_err());
    }

    #[test]
    fn ed25519_keys_are_a_seed_or_a_seed_and_its_public_key() {
        let seed = [7u8; 32];
        let short = Secret::new(format!("whsk_{}", STANDARD.encode(seed)));
        let public = ed25519_key(&short).unwrap().public_key().as_ref().to_vec();
        let long = Secret::new(format!("whsk_{}", STANDARD.encode([&seed[..], &public].concat())));
        assert_eq!(
            ed25519_public_key(&long).unwrap(),
            ed25519_public_key(&short).unwrap()
        );
        let mismatched = Secret::new(format!(
            "whsk_{}",
            STANDARD.encode([[7u8; 32], [8u8; 32]].concat())
        ));
        for bad in [
            mismatched,
            Secret::new("whsk_AAAA"),
            Secret::new("whsec_AAAA"),
            Secret::new("whsk_***"),
        ] {
            let Err(err) = ed25519_key(&bad).map(|_| ()) else {
                panic!("a bad key was accepted")
            };
            let err = err.to_string();
            assert!(!err.contains("AAAA") && !err.contains("***"), "{err}");
        }
    }
}
