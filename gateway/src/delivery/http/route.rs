//! How an endpoint is reached beyond its URL: a client certificate for mutual TLS and an
//! egress proxy. Endpoints with the same route share one pooled client.

use std::fmt;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest as _, Sha256};

use super::super::connector::ProxyAddr;

/// Why a client certificate and key cannot be used; never any key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdentityError {
    #[error("client_cert is not a PEM certificate file ({0})")]
    NotPem(String),
    #[error("client_cert holds no `BEGIN CERTIFICATE` block")]
    NoCertificate,
    #[error("client_key holds no PEM private key (PKCS#8, RSA or EC)")]
    NoKey,
    #[error("client_key does not fit client_cert: {0}")]
    Mismatch(String),
}

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
    pub fn from_pem(cert_pem: &[u8], key_pem: &[u8]) -> Result<ClientIdentity, IdentityError> {
        use rustls::pki_types::pem::PemObject as _;
        let chain = CertificateDer::pem_slice_iter(cert_pem)
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| IdentityError::NotPem(e.to_string()))?;
        if chain.is_empty() {
            return Err(IdentityError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(key_pem).map_err(|_| IdentityError::NoKey)?;
        let provider = rustls::crypto::ring::default_provider();
        rustls::sign::CertifiedKey::from_der(chain.clone(), key.clone_key(), &provider)
            .map_err(|e| IdentityError::Mismatch(e.to_string()))?;
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
