//! Console tokens: what a product hands its customer so that the console opens for that
//! customer's tenant alone, until the token expires.
//!
//! A token is `hgc_<payload>.<mac>`: the payload (base64url JSON: tenant, expiry, key id) and
//! an HMAC-SHA256 over it. The first signing key signs; every key verifies the tokens that name
//! its id, so a new key can be put in front while the tokens of the old one live out their time
//! (README "Webhooks for your customers").

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use ring::hmac;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::config::ServerConfig;
use crate::model::{Secret, Timestamp};

pub use crate::model::CONSOLE_TOKEN_PREFIX;

/// Why a presented token opens nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenError {
    /// Well formed and signed, but past its expiry.
    Expired,
    /// Not a token this gateway signed (or signed with a key it no longer has).
    Invalid,
}

/// A verified token: whose it is and until when it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct TokenClaims {
    pub(crate) tenant: String,
    pub(crate) expires_at: Timestamp,
    /// The feature flags of a Svix app portal's token: the flagged event types it may see.
    pub(crate) feature_flags: Vec<String>,
}

#[derive(Serialize, Deserialize)]
struct Payload {
    /// The tenant.
    t: String,
    /// Expiry, milliseconds since the epoch.
    e: i64,
    /// The signing key's id.
    k: String,
    /// The feature flags (left out when none, so that tokens without any read as before).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    f: Vec<String>,
}

/// The keys that sign and verify console tokens, the signing one first.
pub(crate) struct TokenKeys {
    keys: Vec<(String, hmac::Key)>,
}

impl TokenKeys {
    /// `server.console_keys`, or keys derived from the admin API keys (so rotating those as
    /// documented rotates these too); with neither, `fallback`, a key of this process.
    pub(crate) fn of(server: &ServerConfig, fallback: &Secret) -> TokenKeys {
        let derived: Vec<Secret>;
        let secrets: &[Secret] = if !server.console_keys.is_empty() {
            &server.console_keys
        } else {
            derived = server
                .api_keys
                .iter()
                .filter(|k| k.tenant.is_none())
                .map(|k| {
                    let tag = hmac::sign(
                        &hmac::Key::new(hmac::HMAC_SHA256, k.key.expose().as_bytes()),
                        b"hookgate console tokens",
                    );
                    Secret::new(hex::encode(tag.as_ref()))
                })
                .collect();
            if derived.is_empty() {
                std::slice::from_ref(fallback)
            } else {
                &derived
            }
        };
        let keys = secrets
            .iter()
            .map(|s| {
                let id = hex::encode(&Sha256::digest(s.expose().as_bytes())[..4]);
                (id, hmac::Key::new(hmac::HMAC_SHA256, s.expose().as_bytes()))
            })
            .collect();
        TokenKeys { keys }
    }

    pub(crate) fn issue(&self, tenant: &str, expires_at: Timestamp) -> String {
        self.issue_with_flags(tenant, expires_at, &[])
    }

    /// A token that also holds `feature_flags` (Svix's app portal `featureFlags`).
    pub(crate) fn issue_with_flags(
        &self,
        tenant: &str,
        expires_at: Timestamp,
        feature_flags: &[String],
    ) -> String {
        let (id, key) = &self.keys[0];
        let payload = Payload {
            t: tenant.to_owned(),
            e: expires_at.as_millis(),
            k: id.clone(),
            f: feature_flags.to_vec(),
        };
        let payload = B64.encode(serde_json::to_vec(&payload).expect("a payload serializes"));
        let mac = B64.encode(hmac::sign(key, payload.as_bytes()).as_ref());
        format!("{CONSOLE_TOKEN_PREFIX}{payload}.{mac}")
    }

    /// The token's claims if one of the keys signed it and it has not expired at `now`.
    pub(crate) fn verify(&self, token: &str, now: Timestamp) -> Result<TokenClaims, TokenError> {
        let (payload, mac) = token
            .strip_prefix(CONSOLE_TOKEN_PREFIX)
            .and_then(|rest| rest.split_once('.'))
            .ok_or(TokenError::Invalid)?;
        let claims: Payload = B64
            .decode(payload)
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or(TokenError::Invalid)?;
        let mac = B64.decode(mac).map_err(|_| TokenError::Invalid)?;
        let (_, key) = self
            .keys
            .iter()
            .find(|(id, _)| *id == claims.k)
            .ok_or(TokenError::Invalid)?;
        hmac::verify(key, payload.as_bytes(), &mac).map_err(|_| TokenError::Invalid)?;
        let expires_at = Timestamp::from_millis(claims.e);
        if now >= expires_at {
            return Err(TokenError::Expired);
        }
        Ok(TokenClaims {
            tenant: claims.t,
            expires_at,
            feature_flags: claims.f,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ApiKey;

    fn server(api_keys: &[&str], console_keys: &[&str]) -> ServerConfig {
        let mut server = crate::config::Config::embedded_default().server;
        server.api_keys = api_keys
            .iter()
            .map(|k| ApiKey {
                key: Secret::new(*k),
                tenant: None,
            })
            .collect();
        server.console_keys = console_keys.iter().map(|k| Secret::new(*k)).collect();
        server
    }

    const T0: Timestamp = Timestamp::from_millis(1_767_225_600_000);

    #[test]
    fn a_token_holds_until_it_expires_and_only_for_its_tenant() {
        let keys = TokenKeys::of(&server(&["admin-key"], &[]), &Secret::new("x"));
        let until = Timestamp::from_millis(T0.as_millis() + 3_600_000);
        let token = keys.issue("acme", until);
        assert!(token.starts_with("hgc_"));
        let claims = keys.verify(&token, T0).unwrap();
        assert_eq!(claims.tenant, "acme");
        assert_eq!(keys.verify(&token, until), Err(TokenError::Expired));

        // Another tenant's name in the payload breaks the signature.
        let (payload, mac) = token.strip_prefix("hgc_").unwrap().split_once('.').unwrap();
        let mut forged: serde_json::Value = serde_json::from_slice(&B64.decode(payload).unwrap()).unwrap();
        forged["t"] = "globex".into();
        let forged = format!("hgc_{}.{mac}", B64.encode(forged.to_string()));
        assert_eq!(keys.verify(&forged, T0), Err(TokenError::Invalid));
        assert_eq!(keys.verify("hgc_nonsense", T0), Err(TokenError::Invalid));
    }

    /// A token's feature flags are signed with it: they are read back, and a token whose flags
    /// were added to is refused.
    #[test]
    fn a_token_s_feature_flags_are_signed() {
        let keys = TokenKeys::of(&server(&["admin-key"], &[]), &Secret::new("x"));
        let until = Timestamp::from_millis(T0.as_millis() + 3_600_000);
        let token = keys.issue_with_flags("acme", until, &["beta".to_owned()]);
        assert_eq!(keys.verify(&token, T0).unwrap().feature_flags, ["beta"]);
        assert!(
            keys.verify(&keys.issue("acme", until), T0)
                .unwrap()
                .feature_flags
                .is_empty()
        );
        let (payload, mac) = token.strip_prefix("hgc_").unwrap().split_once('.').unwrap();
        let mut forged: serde_json::Value = serde_json::from_slice(&B64.decode(payload).unwrap()).unwrap();
        forged["f"] = serde_json::json!(["beta", "internal"]);
        let forged = format!("hgc_{}.{mac}", B64.encode(forged.to_string()));
        assert_eq!(keys.verify(&forged, T0), Err(TokenError::Invalid));
    }

    /// Rotation: with a new key in front, old tokens still verify until their key is dropped;
    /// new tokens are signed by the new key.
    #[test]
    fn console_keys_rotate_without_invalidating_live_tokens() {
        let until = Timestamp::from_millis(T0.as_millis() + 60_000);
        let old = TokenKeys::of(&server(&[], &["old-key-0123456789"]), &Secret::new("x"));
        let old_token = old.issue("acme", until);
        let both = TokenKeys::of(
            &server(&[], &["new-key-0123456789", "old-key-0123456789"]),
            &Secret::new("x"),
        );
        assert!(both.verify(&old_token, T0).is_ok());
        let new_token = both.issue("acme", until);
        assert_eq!(old.verify(&new_token, T0), Err(TokenError::Invalid));
        let new_only = TokenKeys::of(&server(&[], &["new-key-0123456789"]), &Secret::new("x"));
        assert!(new_only.verify(&new_token, T0).is_ok());
        assert_eq!(new_only.verify(&old_token, T0), Err(TokenError::Invalid));
    }

    #[test]
    fn keys_derived_from_admin_keys_follow_their_rotation() {
        let until = Timestamp::from_millis(T0.as_millis() + 60_000);
        let one = TokenKeys::of(&server(&["admin-1"], &[]), &Secret::new("x"));
        let token = one.issue("acme", until);
        let rotated = TokenKeys::of(&server(&["admin-2", "admin-1"], &[]), &Secret::new("x"));
        assert!(rotated.verify(&token, T0).is_ok());
        let gone = TokenKeys::of(&server(&["admin-2"], &[]), &Secret::new("x"));
        assert_eq!(gone.verify(&token, T0), Err(TokenError::Invalid));
    }
}
