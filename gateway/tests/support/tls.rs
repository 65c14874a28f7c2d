//! TLS fixtures shared by the delivery unit tests and the integration tests: a private CA
//! with a certificate for `localhost` and a client certificate, and HTTPS servers on
//! 127.0.0.1 that present it (one of them requiring a client certificate of the CA).

#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;

/// A private CA, a certificate for `localhost` it signed, and a client certificate it signed.
pub struct TestPki {
    pub ca: CertificateDer<'static>,
    pub ca_pem: String,
    pub server_cert: CertificateDer<'static>,
    pub server_key: Vec<u8>,
    pub client_cert_pem: String,
    pub client_key_pem: String,
}

pub fn test_pki() -> TestPki {
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "hookgate test CA");
    ca_params.key_usages = vec![
        rcgen::KeyUsagePurpose::KeyCertSign,
        rcgen::KeyUsagePurpose::DigitalSignature,
    ];
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, rcgen::KeyPair::generate().unwrap()).unwrap();
    let server_key = rcgen::KeyPair::generate().unwrap();
    let server_cert = rcgen::CertificateParams::new(vec!["localhost".to_owned()])
        .unwrap()
        .signed_by(&server_key, &*ca)
        .unwrap();
    let client_key = rcgen::KeyPair::generate().unwrap();
    let mut client_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    client_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "hookgate test client");
    client_params.extended_key_usages = vec![rcgen::ExtendedKeyUsagePurpose::ClientAuth];
    let client_cert = client_params.signed_by(&client_key, &*ca).unwrap();
    TestPki {
        ca: ca.der().clone(),
        ca_pem: ca.pem(),
        server_cert: server_cert.der().clone(),
        server_key: server_key.serialize_der(),
        client_cert_pem: client_cert.pem(),
        client_key_pem: client_key.serialize_pem(),
    }
}

/// An HTTPS server on 127.0.0.1 presenting `pki`'s `localhost` certificate; it answers 200
/// and counts the requests that got through the handshake. Returns its port and the count.
pub async fn tls_server(pki: &TestPki) -> (u16, Arc<AtomicUsize>) {
    serve(pki, rustls::server::WebPkiClientVerifier::no_client_auth()).await
}

/// Like [`tls_server`], refusing any client without a certificate signed by `pki`'s CA.
pub async fn mtls_server(pki: &TestPki) -> (u16, Arc<AtomicUsize>) {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(pki.ca.clone()).unwrap();
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()
    .unwrap();
    serve(pki, verifier).await
}

async fn serve(
    pki: &TestPki,
    client_verifier: Arc<dyn rustls::server::danger::ClientCertVerifier>,
) -> (u16, Arc<AtomicUsize>) {
    let key = PrivateKeyDer::Pkcs8(pki.server_key.clone().into());
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_client_cert_verifier(client_verifier)
            .with_single_cert(vec![pki.server_cert.clone()], key)
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let served = Arc::new(AtomicUsize::new(0));
    let counter = served.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, counter) = (acceptor.clone(), counter.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(stream).await else {
                    return;
                };
                let service = service_fn(move |_req: Request<Incoming>| {
                    counter.fetch_add(1, Ordering::SeqCst);
                    async { Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(b"ok")))) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    (port, served)
}
