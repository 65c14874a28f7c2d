//! What the broker transports share: the SSRF guard applied to a broker's address, TLS that
//! checks the broker's certificate against the name in the URL, the message's headers as
//! text pairs, and the attempt's record.
//!
//! Broker clients dial by themselves, so they are handed an address the guard judged (never
//! the name, which could resolve elsewhere by the time they dial) and a TLS configuration
//! whose verifier checks the certificate against the URL's host name, whatever name the client
//! passes to rustls (an IP literal, then).

use std::net::SocketAddr;
use std::sync::Arc;

use http::HeaderMap;
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;

use super::connector::GuardedConnector;
use super::destination::BrokerAddress;
use super::links::Failure;
use super::{DeliveryError, OutgoingMessage};
use crate::model::{ErrorKind, Exchange, Outcome};

/// Headers that describe an HTTP connection, not the message: never sent to a broker.
const HTTP_ONLY_HEADERS: [&str; 7] = [
    "host",
    "content-length",
    "transfer-encoding",
    "connection",
    "upgrade",
    "te",
    "keep-alive",
];

/// Dials brokers: the SSRF guard and the trusted roots, shared with the HTTP client.
#[derive(Clone)]
pub(super) struct Dialer {
    pub(super) guard: GuardedConnector,
    pub(super) roots: Arc<rustls::RootCertStore>,
}

impl Dialer {
    /// The address to dial for `addr`: the first its host resolves to that the allow list
    /// lets through.
    pub(super) async fn judged(&self, addr: &BrokerAddress) -> Result<SocketAddr, Failure> {
        let judged = self
            .guard
            .judge(&addr.host, addr.port)
            .await
            .map_err(failure_of)?;
        Ok(judged[0])
    }

    /// A TCP connection to `addr`, to an address the guard judged.
    pub(super) async fn tcp(&self, addr: &BrokerAddress) -> Result<TcpStream, Failure> {
        self.guard
            .connect_to(&addr.host, addr.port)
            .await
            .map_err(failure_of)
    }

    /// A TLS client configuration that checks the broker's certificate against `addr`'s host
    /// name, whatever server name the client library passes to rustls.
    pub(super) fn tls_config(&self, addr: &BrokerAddress) -> Result<rustls::ClientConfig, Failure> {
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
pub(super) fn failure_of(e: DeliveryError) -> Failure {
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

/// The message's headers as the broker gets them: lowercase names and text values, without
/// the ones that only mean something to an HTTP connection. A value that is not UTF-8 is
/// sent lossily: brokers' header values are text.
pub(super) fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
    headers
        .iter()
        .filter(|(name, _)| !HTTP_ONLY_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| {
            (
                name.as_str().to_owned(),
                String::from_utf8_lossy(value.as_bytes()).into_owned(),
            )
        })
        .collect()
}

/// The attempt's outcome and record: the headers sent (masked as for HTTP) and, when the
/// broker answered, its answer as fields (what it went to first) and as one line.
pub(super) fn finish(msg: &OutgoingMessage, answer: Result<Answer, Failure>) -> (Outcome, Exchange) {
    let sent: HeaderMap = msg
        .headers
        .iter()
        .filter(|(name, _)| !HTTP_ONLY_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let mut exchange = Exchange {
        request_headers: super::http::recorded(&sent, &msg.masked),
        ..Exchange::default()
    };
    match answer {
        Ok(answer) => {
            exchange.response_headers = answer.fields;
            exchange.response_body = Some(answer.summary);
            (Outcome::Delivered { status: None }, exchange)
        }
        Err(failure) => {
            if let Some(answer) = failure_answer(&failure) {
                exchange.response_body = Some(answer);
            }
            (
                Outcome::Failed {
                    kind: failure.kind,
                    status: None,
                    retry_after: None,
                    detail: failure.detail,
                },
                exchange,
            )
        }
    }
}

/// A refusal is the broker's answer too: it shows where the response would.
fn failure_answer(failure: &Failure) -> Option<String> {
    (failure.kind == ErrorKind::Rejected).then(|| failure.detail.clone())
}

/// What a broker answered when it took the message: named fields (the subject, queue, stream
/// or topic first) and a line for people.
pub(super) struct Answer {
    pub(super) fields: Vec<(String, String)>,
    pub(super) summary: String,
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    #[test]
    fn http_connection_headers_stay_behind() {
        let mut headers = HeaderMap::new();
        headers.insert("content-length", HeaderValue::from_static("3"));
        headers.insert("host", HeaderValue::from_static("x"));
        headers.insert("webhook-id", HeaderValue::from_static("msg_1"));
        headers.insert("content-type", HeaderValue::from_static("application/json"));
        let pairs = header_pairs(&headers);
        let names: Vec<&str> = pairs.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["webhook-id", "content-type"]);
    }
}
