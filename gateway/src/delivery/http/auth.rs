//! Outbound credentials of an endpoint (`auth:`): a bearer token, HTTP basic, or OAuth2 client
//! credentials. They become the request's `Authorization` header inside the sender, after every
//! plugin has run, so no plugin ever sees them; the attempt record shows the header masked.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderValue, Uri};

use crate::model::Secret;

/// How an endpoint authenticates the gateway's requests.
#[derive(Debug, Clone, PartialEq)]
pub enum OutboundAuth {
    /// `Authorization: Bearer TOKEN`.
    Bearer(Secret),
    /// `Authorization: Basic base64(username:password)`.
    Basic { username: String, password: Secret },
    /// A token from an OAuth2 token endpoint (client-credentials grant), sent as a bearer token.
    OAuth2(OAuth2Client),
}

/// An OAuth2 client of the client-credentials grant.
#[derive(Debug, Clone, PartialEq)]
pub struct OAuth2Client {
    /// Checked against the SSRF rules like any delivery URL.
    pub token_url: Uri,
    pub client_id: String,
    pub client_secret: Secret,
    pub scope: Option<String>,
    /// Asked for by some providers (Auth0) instead of, or besides, a scope.
    pub audience: Option<String>,
}

impl OutboundAuth {
    /// The `Authorization` value of a static credential; None for OAuth2, whose token is fetched.
    pub(super) fn static_header(&self) -> Option<HeaderValue> {
        match self {
            OutboundAuth::Bearer(token) => Some(bearer(token.expose())),
            OutboundAuth::Basic { username, password } => {
                let pair = format!("{username}:{}", password.expose());
                Some(sensitive(format!("Basic {}", STANDARD.encode(pair))))
            }
            OutboundAuth::OAuth2(_) => None,
        }
    }
}

/// `Bearer TOKEN`, marked sensitive (never indexed by HTTP/2 header compression).
pub(super) fn bearer(token: &str) -> HeaderValue {
    sensitive(format!("Bearer {token}"))
}

fn sensitive(value: String) -> HeaderValue {
    // Config validation refuses tokens and passwords that cannot be in a header; an OAuth2
    // token is checked when it arrives. An invalid value here sends no credential at all.
    let mut value = HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static(""));
    value.set_sensitive(true);
    value
}

/// Whether `text` can be sent in an `Authorization` header (visible ASCII and spaces).
pub fn header_safe(text: &str) -> bool {
    !text.is_empty() && text.bytes().all(|b| b == b' ' || b.is_ascii_graphic())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn static_credentials_make_the_standard_header_values() {
        let b = OutboundAuth::Bearer(Secret::new("t0ken"));
        assert_eq!(b.static_header().unwrap(), "Bearer t0ken");
        assert!(b.static_header().unwrap().is_sensitive());
        let basic = OutboundAuth::Basic {
            username: "Aladdin".into(),
            password: Secret::new("open sesame"),
        };
        // RFC 7617's example.
        assert_eq!(
            basic.static_header().unwrap(),
            "Basic QWxhZGRpbjpvcGVuIHNlc2FtZQ=="
        );
    }

    #[test]
    fn debug_output_never_shows_a_credential() {
        let auth = OutboundAuth::OAuth2(OAuth2Client {
            token_url: "https://idp.example/token".parse().unwrap(),
            client_id: "id".into(),
            client_secret: Secret::new("client-secret-value"),
            scope: None,
            audience: None,
        });
        assert!(!format!("{auth:?}").contains("client-secret-value"));
    }
}
