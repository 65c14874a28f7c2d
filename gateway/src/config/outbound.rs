//! Validating how an endpoint is reached and signed: `auth`, `tls`, `proxy`, `signature`.
//! A problem never repeats a credential or key.

use std::path::Path;
use std::sync::Arc;

use http::{HeaderName, HeaderValue, Uri};
use ipnet::IpNet;

use super::raw::{RawAuth, RawEndpointTls, RawOAuth2, RawSignature};
use super::validate::{Validator, read_pem_file};
use crate::delivery::header_safe;
use crate::delivery::signing::{self, SignatureScheme};
use crate::delivery::{ClientIdentity, OAuth2Client, OutboundAuth, ProxyAddr, Route};
use crate::model::Secret;

impl Validator<'_> {
    /// The endpoint's credentials. With `auth`, the endpoint's `headers` may not set
    /// `Authorization` too.
    pub(super) fn outbound_auth(
        &mut self,
        path: &str,
        raw: Option<RawAuth>,
        headers: &[(HeaderName, HeaderValue)],
        allow: &[IpNet],
    ) -> Option<OutboundAuth> {
        let raw = raw?;
        let path = format!("{path}.auth");
        if headers
            .iter()
            .any(|(name, _)| name == http::header::AUTHORIZATION)
        {
            self.problem(
                &path,
                "`headers` sets Authorization too; keep the credential in one place".into(),
            );
        }
        match raw {
            RawAuth::Bearer(token) => {
                self.header_safe(&format!("{path}.bearer"), &token)?;
                Some(OutboundAuth::Bearer(Secret::new(token)))
            }
            RawAuth::Basic(basic) => {
                if basic.username.contains(':') {
                    self.problem(&format!("{path}.basic.username"), "may not contain `:`".into());
                    return None;
                }
                self.header_safe(&format!("{path}.basic.username"), &basic.username)?;
                self.header_safe(&format!("{path}.basic.password"), &basic.password)?;
                Some(OutboundAuth::Basic {
                    username: basic.username,
                    password: Secret::new(basic.password),
                })
            }
            RawAuth::Oauth2(oauth) => self.oauth2(&format!("{path}.oauth2"), oauth, allow),
        }
    }

    /// The OAuth2 client; its token URL goes through the endpoint's route and the SSRF rules
    /// like a delivery, so an address they block is refused here too.
    fn oauth2(&mut self, path: &str, raw: RawOAuth2, allow: &[IpNet]) -> Option<OutboundAuth> {
        let url_path = format!("{path}.token_url");
        let token_url = self
            .parse(&url_path, &raw.token_url, |s| -> Result<Uri, String> {
                let uri: Uri = s.parse().map_err(|e| format!("`{s}` is not a URL: {e}"))?;
                crate::delivery::validate_url(&uri).map_err(|e| format!("`{s}`: {e}"))?;
                Ok(uri)
            })
            .filter(|uri| self.reachable(&url_path, uri, allow));
        let id_ok = self.not_empty(&format!("{path}.client_id"), &raw.client_id);
        let secret_ok = self.not_empty(&format!("{path}.client_secret"), &raw.client_secret);
        Some(OutboundAuth::OAuth2(OAuth2Client {
            token_url: token_url?,
            client_id: id_ok.then_some(raw.client_id)?,
            client_secret: Secret::new(secret_ok.then_some(raw.client_secret)?),
            scope: raw.scope,
            audience: raw.audience,
        }))
    }

    fn header_safe(&mut self, path: &str, value: &str) -> Option<()> {
        if header_safe(value) {
            return Some(());
        }
        self.problem(
            path,
            "must be non-empty visible ASCII (it is sent in a header)".into(),
        );
        None
    }

    fn not_empty(&mut self, path: &str, value: &str) -> bool {
        if value.trim().is_empty() {
            self.problem(path, "may not be empty".into());
            return false;
        }
        true
    }

    /// The client certificate (read and checked now, like `delivery.ca_certs`) and proxy.
    pub(super) fn route(
        &mut self,
        path: &str,
        tls: Option<RawEndpointTls>,
        proxy: Option<&str>,
        url: Option<&Uri>,
    ) -> Route {
        let identity = tls.and_then(|tls| self.client_identity(&format!("{path}.tls"), &tls, url));
        let proxy = proxy.and_then(|text| self.parse(&format!("{path}.proxy"), text, ProxyAddr::parse));
        Route {
            identity: identity.map(Arc::new),
            proxy,
        }
    }

    fn client_identity(
        &mut self,
        path: &str,
        tls: &RawEndpointTls,
        url: Option<&Uri>,
    ) -> Option<ClientIdentity> {
        if url.is_some_and(|u| u.scheme_str() != Some("https")) {
            self.problem(path, "a client certificate needs an https:// URL".into());
            return None;
        }
        let cert = self.pem_file(&format!("{path}.client_cert"), &tls.client_cert);
        let key = self.pem_file(&format!("{path}.client_key"), &tls.client_key);
        let (cert, key) = (cert?, key?);
        match ClientIdentity::from_pem(&cert, &key) {
            Ok(identity) => Some(identity),
            Err(why) => {
                self.problem(path, why.to_string());
                None
            }
        }
    }

    fn pem_file(&mut self, path: &str, file: &str) -> Option<Vec<u8>> {
        self.parse(path, file, |f| {
            read_pem_file(Path::new(f)).map_err(|why| format!("`{f}`: {why}"))
        })
    }

    /// The signature scheme. Ed25519 needs `whsk_` keys (and no signer plugin); HMAC refuses
    /// them, since a private key used as an HMAC secret would be shared with receivers.
    pub(super) fn signature(
        &mut self,
        path: &str,
        raw: Option<RawSignature>,
        secrets: &[String],
        has_signer: bool,
    ) -> SignatureScheme {
        let scheme = match raw {
            None | Some(RawSignature::Hmac) => SignatureScheme::Hmac,
            Some(RawSignature::Ed25519) => SignatureScheme::Ed25519,
        };
        let secret_path = |i: usize| match secrets.len() {
            1 => format!("{path}.secret"),
            _ => format!("{path}.secret[{i}]"),
        };
        match scheme {
            SignatureScheme::Hmac => {
                for (i, secret) in secrets.iter().enumerate() {
                    if secret.starts_with(signing::WHSK_PREFIX) {
                        self.problem(
                            &secret_path(i),
                            "a whsk_ key signs only with `signature: ed25519`".into(),
                        );
                    }
                }
            }
            SignatureScheme::Ed25519 => {
                if has_signer {
                    self.problem(
                        &format!("{path}.signature"),
                        "ed25519 signs in the gateway; it cannot be combined with a signer plugin".into(),
                    );
                }
                if secrets.is_empty() {
                    self.problem(
                        &format!("{path}.secret"),
                        "ed25519 needs a whsk_ private key (`hookgate keygen ed25519` makes one)".into(),
                    );
                }
                for (i, secret) in secrets.iter().enumerate() {
                    if let Err(e) = signing::ed25519_key(&Secret::new(secret.as_str())) {
                        self.problem(&secret_path(i), e.to_string());
                    }
                }
            }
        }
        scheme
    }
}
