//! Dialling a broker: the SSRF guard applied to its address, and TLS that checks its
//! certificate against the name in the URL.
//!
//! Broker clients dial by themselves, so they are handed an address the guard judged (never
//! the name, which could resolve elsewhere by the time they dial) and a TLS configuration
//! whose verifier checks the certificate against the URL's host name, whatever name the client
//! passes to rustls (an IP literal, then).

use std::net::SocketAddr;
use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;

use super::super::DeliveryError;
use super::super::connector::GuardedConnector;
use super::address::BrokerAddress;
use super::links::Failure;
use crate::model::ErrorKind;

/// Dials brokers: the SSRF guard and the trusted roots, shared with the HTTP client.
#[derive(Clone)]
pub(in crate::delivery) struct Dialer {
    pub(in crate::delivery) guard: GuardedConnector,
    pub(in crate::delivery) roots: Arc<rustls::RootCertStore>,
}

impl Dialer {
    /// The address to dial for `addr`: the first its host resolves to that the allow list
    /// lets through.
    pub(in crate::delivery) async fn judged(&self, addr: &BrokerAddress) -> Result<SocketAddr, Failure> {
        let judged = self
            .guard
            .judge(&addr.host, addr.port)
            .await
            .map_err(failure_of)?;
        Ok(judged[0])
    }

    /// A TCP connection to `addr`, to an address the guard judged.
    pub(in crate::delivery) async fn tcp(&self, addr: &BrokerAddress) -> Result<TcpStream, Failure> {
        self.guard
            .connect_to(&addr.host, addr.port)
            .await
            .map_err(failure_of)
    }

    /// A TLS client configuration that checks the broker's certificate against `addr`'s host
    /// name, whatever server name the client library passes to rustls.
    pub(in crate::delivery) fn tls_config(
        &self,
        addr: &BrokerAddress,
    ) -> Result<rustls::ClientConfig, Failure> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let name = ServerName::try_from(addr.bare_host().to_owned())
            .map_err(|_| Failure::connect(format!("`{}` is not a TLS server name", addr.host)))?;
        let inner = WebPkiServerVerifier::builder_with_provider(self.roots.clone(), provider.clone())
            .build()
            .map_err(|e| tls_failure(e.to_string()))?;
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| tls_failure(e.to_string()))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NamedVerifier { inner, name }))
            .with_no_client_auth();
        Ok(config)
    }
}

fn tls_failure(detail: String) -> Failure {
    Failure {
        kind: ErrorKind::Tls,
        detail: format!("TLS: {detail}"),
    }
}

/// The failure an address check or a dial stands for.
pub(in crate::delivery) fn failure_of(e: DeliveryError) -> Failure {
    Failure {
        kind: e.kind().unwrap_or(ErrorKind::Connect),
        detail: e.to_string(),
    }
}

/// Verifies a certificate for one fixed name: the host of the endpoint's URL.
#[derive(Debug)]
struct NamedVerifier {
    inner: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl ServerCertVerifier for NamedVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        self.inner
            .verify_server_cert(end_entity, intermediates, &self.name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}
