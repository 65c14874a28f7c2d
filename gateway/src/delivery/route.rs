//! How an endpoint is reached beyond its URL: a client certificate for mutual TLS and an
//! egress proxy. Endpoints with the same route share one pooled client.

use std::fmt;
use std::sync::Arc;

use http::Uri;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest as _, Sha256};

/// The client certificate chain and private key an endpoint presents (`tls:`), checked to
/// belong together when the config loads.
pub struct ClientIdentity {
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
    /// SHA-256 over the chain: names the identity in logs and keys the client pool.
    fingerprint: [u8; 32],
}

impl ClientIdentity {
    /// Reads a PEM certificate chain (leaf first) and a PEM private key (PKCS#8, PKCS#1 or
    /// SEC1), and checks that the key is the leaf's. The error never contains key material.
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<ClientIdentity, String> {
        use rustls::pki_types::pem::PemObject as _;
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("client_cert is not a PEM certificate file ({e})"))?;
        if chain.is_empty() {
            return Err("client_cert holds no `BEGIN CERTIFICATE` block".to_owned());
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem)
            .map_err(|_| "client_key holds no PEM private key (PKCS#8, RSA or EC)".to_owned())?;
        let provider = rustls::crypto::ring::default_provider();
        rustls::sign::CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider)
            .map_err(|e| format!("client_key does not fit client_cert: {e}"))?;
        let mut hasher = Sha256::new();
        for cert in &chain {
            hasher.update(cert.as_ref());
        }
        Ok(ClientIdentity {
            chain,
            key,
            fingerprint: hasher.finalize().into(),
        })
    }

    pub(super) fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.chain.clone()
    }

    pub(super) fn key(&self) -> PrivateKeyDer<'static> {
        self.key.clone_key()
    }

    pub(super) fn fingerprint(&self) -> [u8; 32] {
        self.fingerprint
    }
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ClientIdentity(sha256:{})",
            hex::encode(&self.fingerprint[..8])
        )
    }
}

impl PartialEq for ClientIdentity {
    fn eq(&self, other: &Self) -> bool {
        self.fingerprint == other.fingerprint
    }
}

/// An HTTP proxy that tunnels with `CONNECT`: `http://host:port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProxyAddr {
    pub host: String,
    pub port: u16,
}

impl ProxyAddr {
    /// `http://host:port` (port 80 when absent); no credentials, path or query.
    pub fn parse(text: &str) -> Result<ProxyAddr, String> {
        let uri: Uri = text.parse().map_err(|e| format!("`{text}` is not a URL: {e}"))?;
        if uri.scheme_str() != Some("http") {
            return Err(format!("`{text}` must start with http:// (a CONNECT proxy)"));
        }
        let authority = uri.authority().ok_or_else(|| format!("`{text}` has no host"))?;
        if authority.as_str().contains('@') {
            return Err("proxy credentials in the URL are not supported".to_owned());
        }
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(format!("`{text}` may not have a path or query"));
        }
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        Ok(ProxyAddr {
            host: host.to_owned(),
            port: authority.port_u16().unwrap_or(80),
        })
    }
}

impl fmt::Display for ProxyAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// An endpoint's way out: its client certificate and proxy, if any. The default route has
/// neither (and uses `delivery.proxy`, if set).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Route {
    pub identity: Option<Arc<ClientIdentity>>,
    pub proxy: Option<ProxyAddr>,
}

/// What tells two routes' clients apart in the pool.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(super) struct RouteKey {
    pub(super) identity: Option<[u8; 32]>,
    pub(super) proxy: Option<ProxyAddr>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxies_are_plain_http_urls_with_a_host_and_nothing_else() {
        assert_eq!(
            ProxyAddr::parse("http://proxy.internal:3128").unwrap(),
            ProxyAddr {
                host: "proxy.internal".into(),
                port: 3128
            }
        );
        assert_eq!(
            ProxyAddr::parse("http://[::1]:8080/").unwrap().to_string(),
            "[::1]:8080"
        );
        assert_eq!(ProxyAddr::parse("http://p").unwrap().port, 80);
        for bad in [
            "https://p:443",
            "socks5://p:1080",
            "http://user:pw@p:3128",
            "http://p:3128/path",
            "p:3128",
        ] {
            let err = ProxyAddr::parse(bad).unwrap_err();
            assert!(!err.contains("pw"), "{err}");
        }
    }
}
