//! OAuth2 client credentials (RFC 6749 section 4.4) for endpoints behind a token: one token per
//! client, fetched when first needed, kept until shortly before it expires (on the gateway's
//! clock), and fetched again when the endpoint refuses it with a 401. Concurrent attempts wait
//! for one fetch instead of each making their own.
//!
//! The token request goes out through the endpoint's own client, so the SSRF guard, the proxy
//! and the client certificate apply to it as to a delivery. A failure is the attempt's failure
//! with kind `auth`; its text names the token URL's host and the server's OAuth error code,
//! never a credential or the server's free text.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::header::{ACCEPT, CONTENT_TYPE, USER_AGENT};
use http::{HeaderValue, Method, Request};
use http_body_util::{BodyExt as _, Full, Limited};
use sha2::{Digest as _, Sha256};

use super::auth::{OAuth2Client, header_safe};
use super::{HttpClient, classify_client_error};
use crate::model::{Secret, Timestamp};

/// A token is renewed this long before the server says it expires (at most half its lifetime),
/// so that it does not run out between being picked and being checked by the receiver.
pub(super) const EXPIRY_MARGIN: Duration = Duration::from_secs(30);

/// The largest token response read.
const MAX_TOKEN_RESPONSE_BYTES: usize = 64 * 1024;

#[derive(Clone)]
struct Token {
    value: Secret,
    /// None when the server gave no `expires_in`: kept until the endpoint refuses it.
    renew_at: Option<Timestamp>,
}

type Slot = Arc<tokio::sync::Mutex<Option<Token>>>;

/// Why an attempt has no token: the attempt's `auth` failure. The text names the token URL's
/// host and the server's OAuth error code, never a credential or the server's free text.
#[derive(Debug, thiserror::Error)]
pub(super) enum TokenError {
    #[error("OAuth2 token request to {url}: {why}")]
    Failed { url: String, why: TokenFailure },
    #[error("no OAuth2 token within the attempt's timeout")]
    Timeout,
}

/// What went wrong with a token request.
#[derive(Debug, thiserror::Error)]
pub(super) enum TokenFailure {
    /// The request got no answer (its text is the connection's failure).
    #[error("{0}")]
    Request(String),
    #[error("the response could not be read")]
    Unreadable,
    /// The server refused, with RFC 6749's `error` code when it gave a plain one.
    #[error("HTTP {status}{}", code.as_ref().map(|c| format!(" ({c})")).unwrap_or_default())]
    Refused { status: u16, code: Option<String> },
    /// A success whose body holds no usable token.
    #[error("{0}")]
    Answer(&'static str),
}

/// The tokens of every OAuth2 client the gateway's endpoints use.
#[derive(Default)]
pub(super) struct TokenCache {
    slots: Mutex<HashMap<[u8; 32], Slot>>,
}

impl TokenCache {
    /// A token for `client` that is not `rejected`: the cached one while it is fresh, else a new
    /// one from the token server.
    pub(super) async fn token(
        &self,
        client: &OAuth2Client,
        http: &HttpClient,
        user_agent: &HeaderValue,
        now: Timestamp,
        rejected: Option<&Secret>,
    ) -> Result<Secret, TokenError> {
        let slot = self.slot(client);
        let mut cached = slot.lock().await;
        if let Some(token) = cached.as_ref()
            && token.renew_at.is_none_or(|at| now < at)
            && Some(&token.value) != rejected
        {
            return Ok(token.value.clone());
        }
        let token = fetch(client, http, user_agent, now).await?;
        let value = token.value.clone();
        *cached = Some(token);
        Ok(value)
    }

    fn slot(&self, client: &OAuth2Client) -> Slot {
        let mut slots = self.slots.lock().unwrap_or_else(|p| p.into_inner());
        slots.entry(cache_key(client)).or_default().clone()
    }
}

/// Clients differing in any field (a rotated secret included) have tokens of their own.
fn cache_key(client: &OAuth2Client) -> [u8; 32] {
    let mut hasher = Sha256::new();
    for part in [
        client.token_url.to_string().as_str(),
        &client.client_id,
        client.client_secret.expose(),
        client.scope.as_deref().unwrap_or("\u{0}"),
        client.audience.as_deref().unwrap_or("\u{0}"),
    ] {
        hasher.update((part.len() as u64).to_be_bytes());
        hasher.update(part.as_bytes());
    }
    hasher.finalize().into()
}

/// The token URL as error texts show it: scheme, host, port and path, never user info or query.
fn shown_url(client: &OAuth2Client) -> String {
    let url = &client.token_url;
    let port = url.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
    format!(
        "{}://{}{port}{}",
        url.scheme_str().unwrap_or("http"),
        url.host().unwrap_or(""),
        url.path()
    )
}

async fn fetch(
    client: &OAuth2Client,
    http: &HttpClient,
    user_agent: &HeaderValue,
    now: Timestamp,
) -> Result<Token, TokenError> {
    let failed = |why: TokenFailure| TokenError::Failed {
        url: shown_url(client),
        why,
    };
    let response = http
        .request(token_request(client, user_agent))
        .await
        .map_err(|e| failed(TokenFailure::Request(classify_client_error(&e).1)))?;
    let status = response.status();
    let body = Limited::new(response.into_body(), MAX_TOKEN_RESPONSE_BYTES)
        .collect()
        .await
        .map(|b| b.to_bytes())
        .map_err(|_| failed(TokenFailure::Unreadable))?;
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    if !status.is_success() {
        return Err(failed(TokenFailure::Refused {
            status: status.as_u16(),
            code: oauth_error_code(&json).map(str::to_owned),
        }));
    }
    token_of(&json, now).map_err(|why| failed(TokenFailure::Answer(why)))
}

fn token_request(client: &OAuth2Client, user_agent: &HeaderValue) -> Request<Full<Bytes>> {
    let mut form = vec![
        ("grant_type", "client_credentials"),
        ("client_id", client.client_id.as_str()),
        ("client_secret", client.client_secret.expose()),
    ];
    if let Some(scope) = &client.scope {
        form.push(("scope", scope));
    }
    if let Some(audience) = &client.audience {
        form.push(("audience", audience));
    }
    let body = serde_urlencoded::to_string(&form).unwrap_or_default();
    let mut request = Request::new(Full::new(Bytes::from(body)));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = client.token_url.clone();
    let headers = request.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/x-www-form-urlencoded"),
    );
    headers.insert(ACCEPT, HeaderValue::from_static("application/json"));
    headers.insert(USER_AGENT, user_agent.clone());
    request
}

/// RFC 6749's `error` code of a refusal, when it is a short plain word.
fn oauth_error_code(json: &serde_json::Value) -> Option<&str> {
    json.get("error")
        .and_then(|e| e.as_str())
        .filter(|c| c.len() <= 64 && c.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_'))
}

/// The token of a successful answer and when to renew it.
fn token_of(json: &serde_json::Value, now: Timestamp) -> Result<Token, &'static str> {
    let value = json
        .get("access_token")
        .and_then(|t| t.as_str())
        .ok_or("the response has no access_token")?;
    if !header_safe(value) {
        return Err("the access_token cannot be sent in a header");
    }
    if let Some(kind) = json.get("token_type").and_then(|t| t.as_str())
        && !kind.eq_ignore_ascii_case("bearer")
    {
        return Err("the token_type is not bearer");
    }
    let lifetime = match json.get("expires_in") {
        Some(serde_json::Value::Number(n)) => n.as_u64(),
        Some(serde_json::Value::String(s)) => s.parse().ok(),
        _ => None,
    };
    let renew_at = lifetime.map(|secs| {
        let lifetime = Duration::from_secs(secs.min(365 * 24 * 3600));
        now.plus(lifetime - EXPIRY_MARGIN.min(lifetime / 2))
    });
    Ok(Token {
        value: Secret::new(value),
        renew_at,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_700_000_000_000);

    #[test]
    fn a_token_is_renewed_shortly_before_it_expires() {
        let t = token_of(
            &json!({"access_token": "a", "token_type": "Bearer", "expires_in": 3600}),
            NOW,
        )
        .unwrap();
        assert_eq!(t.renew_at, Some(NOW.plus(Duration::from_secs(3570))));
        let short = token_of(&json!({"access_token": "a", "expires_in": "20"}), NOW).unwrap();
        assert_eq!(short.renew_at, Some(NOW.plus(Duration::from_secs(10))));
        let forever = token_of(&json!({"access_token": "a"}), NOW).unwrap();
        assert_eq!(forever.renew_at, None);
    }

    #[test]
    fn a_failure_reads_as_the_token_url_and_what_went_wrong() {
        let refused = TokenError::Failed {
            url: "https://idp.example/token".to_owned(),
            why: TokenFailure::Refused {
                status: 401,
                code: Some("invalid_client".to_owned()),
            },
        };
        assert_eq!(
            refused.to_string(),
            "OAuth2 token request to https://idp.example/token: HTTP 401 (invalid_client)"
        );
        let bare = TokenFailure::Refused {
            status: 500,
            code: None,
        };
        assert_eq!(bare.to_string(), "HTTP 500");
        assert_eq!(
            TokenError::Timeout.to_string(),
            "no OAuth2 token within the attempt's timeout"
        );
    }

    #[test]
    fn unusable_answers_are_refused_without_echoing_them() {
        for (answer, why) in [
            (json!({"token_type": "bearer"}), "no access_token"),
            (json!({"access_token": "a\nb"}), "cannot be sent"),
            (json!({"access_token": "a", "token_type": "mac"}), "not bearer"),
        ] {
            let Err(err) = token_of(&answer, NOW) else {
                panic!("{answer} was accepted")
            };
            assert!(err.contains(why), "{err}");
        }
        assert_eq!(
            oauth_error_code(&json!({"error": "invalid_client"})),
            Some("invalid_client")
        );
        assert_eq!(oauth_error_code(&json!({"error": "secret is abc def"})), None);
    }
}
