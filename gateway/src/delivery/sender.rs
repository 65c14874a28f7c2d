//! [`Sender`]: the transport seam. One message — headers and a body — goes to its
//! [`Destination`] by the transport of the destination's kind, and comes back as the
//! [`Outcome`] the retry planner and the health machine understand, with the exchange for the
//! attempt record. This file is the one place that dispatches on the kind, and the one place
//! that drops every kind's connections when the allow list shrinks ([`Connections`]).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::{HeaderMap, HeaderName};
use ipnet::IpNet;

use super::amqp::Amqp;
use super::broker::{BrokerSender, Dialer};
use super::connector::{GuardedConnector, ProxyAddr, SharedAllowList};
use super::destination::Destination;
use super::http::HttpSender;
use super::mqtt::Mqtt;
use super::nats::Nats;
use super::redis::Redis;
use super::{DeliveryError, Resolve, SystemResolver};
use crate::model::{Exchange, Outcome, Timestamp};

/// Longest timeout honoured for one attempt; larger values are clamped (keeps the deadline
/// arithmetic far from overflow).
const MAX_ATTEMPT_TIMEOUT: Duration = Duration::from_secs(24 * 60 * 60);

/// How the shared transports behave.
#[derive(Clone, Debug)]
pub struct SenderOptions {
    /// CIDRs exempt from the private-address block (`delivery.allow_networks`).
    pub allow_networks: Vec<IpNet>,
    /// Idle keep-alive HTTP connections kept per host.
    pub max_idle_per_host: usize,
    /// Certificate authorities trusted besides Mozilla's roots (`delivery.ca_certs`), for
    /// HTTPS and the brokers' TLS alike.
    pub extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>,
    /// Sent as `User-Agent` unless the request carries its own, e.g. `hookgate/0.1`.
    pub user_agent: String,
    /// At most this much of an HTTP response body is read (and discarded) so the connection
    /// can be reused; a longer body closes the connection instead.
    pub max_response_body_bytes: usize,
    /// The egress proxy of HTTP endpoints without one of their own (`delivery.proxy`).
    pub proxy: Option<ProxyAddr>,
}

/// One attempt's message: headers and a body for a destination. `headers` go out as given
/// (HTTP headers, NATS headers, AMQP headers, stream fields or MQTT user properties). What
/// only one kind needs (an HTTP request's method, credentials and route) is in the kind's
/// target inside the [`Destination`], not here.
pub struct OutgoingMessage {
    pub destination: Destination,
    /// The event's id: JetStream's `Nats-Msg-Id` and AMQP's `message-id`.
    pub message_id: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// Whole-attempt timeout, real time.
    pub timeout: Duration,
    /// Headers whose values the attempt record masks, besides `Authorization`,
    /// `Proxy-Authorization` and `webhook-signature` (e.g. the endpoint's configured headers,
    /// a signer plugin's signatures).
    pub masked: Vec<HeaderName>,
}

impl fmt::Debug for OutgoingMessage {
    /// Header values may carry credentials (an endpoint's custom `Authorization`), so only
    /// their names are shown.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OutgoingMessage")
            .field("destination", &self.destination)
            .field("header_names", &self.headers.keys().collect::<Vec<_>>())
            .field("body_len", &self.body.len())
            .field("timeout", &self.timeout)
            .finish()
    }
}

/// What one attempt came to, how long it took in real time, and what went over the wire.
#[derive(Clone, Debug, PartialEq)]
pub struct SendResult {
    pub outcome: Outcome,
    pub duration: Duration,
    /// The headers sent (credentials and signatures masked) and the answer: an HTTP
    /// response's head and first bytes, or what the broker said.
    pub exchange: Exchange,
}

/// Sends attempts by every transport. Cheap to clone: every clone shares the HTTP pools, the
/// broker connections, the TLS roots, the allow list and the OAuth2 tokens.
#[derive(Clone)]
pub struct Sender {
    inner: Arc<Transports>,
}

struct Transports {
    allow: SharedAllowList,
    dialer: Dialer,
    http: HttpSender,
    nats: BrokerSender<Nats>,
    amqp: BrokerSender<Amqp>,
    redis: BrokerSender<Redis>,
    mqtt: BrokerSender<Mqtt>,
}

impl Transports {
    /// Every transport's connections.
    fn connections(&self) -> [&dyn Connections; 5] {
        [&self.http, &self.nats, &self.amqp, &self.redis, &self.mqtt]
    }
}

/// The connections a transport keeps open between attempts: pooled keep-alive HTTP
/// connections, one long-lived connection per broker.
pub(super) trait Connections: Send + Sync {
    /// Closes them all (the allow list lost a network: a connection made under the old list
    /// may reach an address that is now refused); the next attempt makes a new one.
    fn drop_connections(&self);
}

impl fmt::Debug for Sender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("allow_networks", &**self.inner.allow.load())
            .field("http", &self.inner.http)
            .finish_non_exhaustive()
    }
}

impl Sender {
    /// A sender resolving names with the operating system's resolver.
    pub fn new(opts: SenderOptions) -> Result<Sender, DeliveryError> {
        Sender::with_resolver(opts, Arc::new(SystemResolver))
    }

    /// A sender resolving names with `resolver` (tests answer without touching DNS).
    pub fn with_resolver(opts: SenderOptions, resolver: Arc<dyn Resolve>) -> Result<Sender, DeliveryError> {
        let allow: SharedAllowList = Arc::new(ArcSwap::from_pointee(opts.allow_networks.clone()));
        // Mozilla's roots via webpki-roots: the same trust everywhere the gateway runs, not
        // whatever the host's store happens to hold; plus the CAs the config names.
        let mut roots = rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for cert in &opts.extra_roots {
            roots.add(cert.clone())?;
        }
        let roots = Arc::new(roots);
        let http = HttpSender::new(&opts, roots.clone(), resolver.clone(), allow.clone())?;
        let dialer = Dialer {
            guard: GuardedConnector::new(resolver, allow.clone()),
            roots,
        };
        Ok(Sender {
            inner: Arc::new(Transports {
                allow,
                dialer,
                http,
                nats: BrokerSender::new(),
                amqp: BrokerSender::new(),
                redis: BrokerSender::new(),
                mqtt: BrokerSender::new(),
            }),
        })
    }

    /// Replaces the allow list (config hot reload). New connections are judged against it at
    /// once. When a network is *removed*, the HTTP pools and the broker connections are
    /// replaced too, because a connection made under the old list would otherwise keep
    /// reaching a now-forbidden address; attempts already running finish on theirs.
    pub fn set_allow_networks(&self, nets: Vec<IpNet>) {
        let old = self.inner.allow.swap(Arc::new(nets));
        let new = self.inner.allow.load();
        let revoked = old
            .iter()
            .any(|old_net| !new.iter().any(|new_net| new_net.contains(old_net)));
        if revoked {
            for transport in self.inner.connections() {
                transport.drop_connections();
            }
        }
    }

    /// The allow list in force.
    pub fn allow_networks(&self) -> Vec<IpNet> {
        self.inner.allow.load().as_ref().clone()
    }

    /// One attempt: the message to its destination, within its timeout (real time: connect,
    /// TLS, sending and the answer), never waiting past it.
    ///
    /// `now` (the gateway clock, maybe simulated) turns an HTTP `Retry-After` into an
    /// absolute time and tells whether an OAuth2 token is still fresh. See each transport for
    /// what counts as delivered; every failure is an [`Outcome::Failed`] whose `detail` is
    /// short text for people, never a header or a secret.
    pub async fn send(&self, msg: OutgoingMessage, now: Timestamp) -> SendResult {
        let started = Instant::now();
        let timeout = msg.timeout.min(MAX_ATTEMPT_TIMEOUT);
        let deadline = tokio::time::Instant::from_std(started) + timeout;
        let t = &self.inner;
        let (outcome, exchange) = match &msg.destination {
            Destination::Http(target) => t.http.send(target, &msg, now, timeout, deadline).await,
            Destination::Nats(target) => t.nats.send(&t.dialer, target, &msg, deadline).await,
            Destination::Amqp(target) => t.amqp.send(&t.dialer, target, &msg, deadline).await,
            Destination::Redis(target) => t.redis.send(&t.dialer, target, &msg, deadline).await,
            Destination::Mqtt(target) => t.mqtt.send(&t.dialer, target, &msg, deadline).await,
        };
        SendResult {
            outcome,
            duration: started.elapsed(),
            exchange,
        }
    }
}
