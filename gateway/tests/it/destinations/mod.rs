//! Endpoints whose URL names a broker (README "Destinations"), against the real brokers.
//!
//! Each broker's address comes from the environment: `HOOKGATE_TEST_NATS` (e.g.
//! `nats://127.0.0.1:4222`, with JetStream), `HOOKGATE_TEST_AMQP`
//! (`amqp://guest:guest@127.0.0.1:5672`), `HOOKGATE_TEST_REDIS` (`redis://127.0.0.1:6379`) and
//! `HOOKGATE_TEST_MQTT` (`mqtt://127.0.0.1:1883`, MQTT 5). Without it a test says it was
//! skipped; with `HOOKGATE_TEST_BROKERS_REQUIRED=1` (set by CI) it fails instead. Each test
//! makes its own stream, exchange and queue, key or topic names and removes what it made.
//!
//! The consumers use each broker's own client (async-nats, amqprs, redis, rumqttc) and check
//! signatures with the Standard Webhooks project's verifier (`standardwebhooks`). What every
//! kind must do is written once in `common`, each kind's file runs it with its fixture.

mod amqp;
pub mod common;
mod crash;
mod mqtt;
mod nats;
pub mod redis;
mod secrets;
mod tls;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// The broker named by `var`, or None (the test is skipped) when it is not set; fails when
/// `HOOKGATE_TEST_BROKERS_REQUIRED` is set.
pub fn broker(var: &str) -> Option<url::Url> {
    match std::env::var(var) {
        Ok(text) => Some(url::Url::parse(&text).unwrap_or_else(|e| panic!("{var}={text}: {e}"))),
        Err(_) => {
            assert!(
                std::env::var_os("HOOKGATE_TEST_BROKERS_REQUIRED").is_none(),
                "HOOKGATE_TEST_BROKERS_REQUIRED is set but {var} is not"
            );
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPED {}: needs {var}",
                std::thread::current().name().unwrap_or("a broker test")
            );
            None
        }
    }
}

/// The broker's `host:port`, resolved.
pub fn address_of(url: &url::Url) -> SocketAddr {
    let host = url.host_str().expect("a broker URL has a host");
    let port = url.port_or_known_default().or(match url.scheme() {
        "nats" => Some(4222),
        "amqp" => Some(5672),
        "redis" => Some(6379),
        "mqtt" => Some(1883),
        _ => None,
    });
    std::net::ToSocketAddrs::to_socket_addrs(&(host, port.expect("a broker port")))
        .unwrap()
        .next()
        .unwrap()
}

/// A name no other test run uses: `hgtest_<ulid>`.
pub fn unique() -> String {
    format!("hgtest_{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// A loopback port where nothing listens (a broker that is down).
pub fn closed_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One message as a consumer got it: its headers (or stream fields, or user properties) and
/// body.
#[derive(Debug, Clone)]
pub struct Got {
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Got {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Whether the Standard Webhooks project's own verifier accepts the message's signature.
    pub fn verified_by(&self, secret: &str) -> Result<(), String> {
        let mut headers = http::HeaderMap::new();
        for (name, value) in &self.headers {
            if let (Ok(name), Ok(value)) = (
                http::HeaderName::from_bytes(name.as_bytes()),
                http::HeaderValue::from_str(value),
            ) {
                headers.append(name, value);
            }
        }
        let webhook = standardwebhooks::Webhook::new(secret).map_err(|e| e.to_string())?;
        webhook.verify(&self.body, &headers).map_err(|e| e.to_string())
    }
}

/// A TCP relay in front of a broker, which a test can take down (every connection closed, new
/// ones closed at once) and bring back: a broker that fails and recovers, on the real broker.
pub struct Relay {
    pub addr: SocketAddr,
    down: Arc<AtomicBool>,
    connections: Arc<Mutex<Vec<JoinHandle<()>>>>,
    accept: JoinHandle<()>,
}

impl Relay {
    pub async fn start(upstream: SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let down = Arc::new(AtomicBool::new(false));
        let connections: Arc<Mutex<Vec<JoinHandle<()>>>> = Arc::default();
        let accept = {
            let (down, connections) = (down.clone(), connections.clone());
            tokio::spawn(async move {
                loop {
                    let Ok((mut client, _)) = listener.accept().await else {
                        return;
                    };
                    if down.load(Ordering::SeqCst) {
                        drop(client);
                        continue;
                    }
                    let relay = tokio::spawn(async move {
                        if let Ok(mut server) = TcpStream::connect(upstream).await {
                            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                        }
                    });
                    connections.lock().unwrap().push(relay);
                }
            })
        };
        Relay {
            addr,
            down,
            connections,
            accept,
        }
    }

    /// The broker is gone: open connections are cut, new ones closed at once.
    pub fn down(&self) {
        self.down.store(true, Ordering::SeqCst);
        for connection in self.connections.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    pub fn up(&self) {
        self.down.store(false, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
        self.down();
    }
}

/// A TLS front for a broker: it presents `pki`'s `localhost` certificate and relays the
/// decrypted stream to the broker, so that `amqps://`, `rediss://` and `mqtts://` are tested
/// against the real broker behind it.
pub async fn tls_front(upstream: SocketAddr, pki: &crate::tls::TestPki) -> (SocketAddr, JoinHandle<()>) {
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(pki.server_key.clone().into());
    let config =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![pki.server_cert.clone()], key)
            .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(client).await else {
                    return;
                };
                if let Ok(mut server) = TcpStream::connect(upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut server).await;
                }
            });
        }
    });
    (addr, task)
}

/// What every broker fixture offers the common tests.
pub trait Fixture {
    /// The kind as the API names it.
    const KIND: &'static str;
    /// The real broker's address.
    fn broker_addr(&self) -> SocketAddr;
    /// An endpoint URL for this fixture's target, reaching the broker at `addr`.
    fn url(&self, addr: SocketAddr) -> String;
    /// An endpoint URL the broker refuses every message for.
    fn refused_url(&self, addr: SocketAddr) -> String;
    /// What the target holds now, oldest first.
    fn received(&self) -> impl std::future::Future<Output = Vec<Got>>;
    /// Removes what the fixture made on the broker.
    fn cleanup(self) -> impl std::future::Future<Output = ()>;
}
