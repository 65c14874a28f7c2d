//! The transports: one attempt of one delivery to its destination (README "How delivery
//! works", "Destinations").
//!
//! - [`Destination`] is where an endpoint's messages go, chosen from the URL's scheme in
//!   [`Destination::parse`]; [`Sender::send`] takes an [`OutgoingMessage`] (headers and a body)
//!   there by the transport of its kind and answers an [`Outcome`](crate::model::Outcome).
//!   A new kind is a file here, a variant of [`Destination`], and its arm in `parse` and in
//!   `send` (ARCHITECTURE.md, "Where to add a feature").
//! - `http/` owns one pooled keep-alive client (hyper + rustls): a whole-request timeout in
//!   real time, redirects never followed, the response's status deciding; beside it an
//!   endpoint's credentials ([`http::auth`], bearer, basic, OAuth2 client credentials with a
//!   token cache), its client certificate and proxy ([`http::route`], each distinct route with
//!   a pooled client of its own), and [`parse_retry_after`], which turns a receiver's
//!   `Retry-After` into an absolute, capped time.
//! - `nats`, `amqp`, `redis` and `mqtt` are the broker kinds: each a `broker::Broker` (dial a
//!   connection, send one message on it, read the broker's answer), sent through one
//!   long-lived connection per broker, dialled to an address the SSRF guard judged, with TLS
//!   that checks the URL's host name (`broker/`).
//! - [`connector`] is the SSRF guard on the wire: it resolves a host once, judges every
//!   address with [`ssrf::check`], and connects only to an address it judged, so a DNS answer
//!   that changes between check and connect (rebinding) cannot reach a blocked address.
//! - [`signing`] produces the Standard Webhooks headers, for every kind; `masked` is what
//!   people see of URLs and recorded headers.
//!
//! Name resolution goes through the [`Resolve`] trait so that tests never query real DNS.

mod amqp;
mod broker;
pub mod connector;
mod destination;
mod http;
mod masked;
mod mqtt;
mod nats;
mod redis;
mod resolve;
mod sender;
pub mod signing;
pub mod ssrf;

#[cfg(test)]
pub(crate) mod tests;

use std::io;
use std::net::{IpAddr, SocketAddr};

pub use self::amqp::AmqpTarget;
pub use self::broker::BrokerAddress;
pub use self::connector::{ProxyAddr, ProxyError};
pub use self::destination::Destination;
pub use self::http::auth::{OAuth2Client, OutboundAuth, header_safe};
pub use self::http::route::{ClientIdentity, IdentityError, Route};
pub use self::http::{
    BODY_EXCERPT_BYTES, HttpTarget, POOL_IDLE_TIMEOUT, RECORDED_BODY_BYTES, RETRY_AFTER_CAP,
    parse_retry_after, validate_url,
};
pub use self::masked::masked_uri;
pub use self::mqtt::MqttTarget;
pub use self::nats::NatsTarget;
pub use self::redis::RedisTarget;
pub use self::resolve::{Resolve, ResolveFuture, SystemResolver};
pub use self::sender::{OutgoingMessage, SendResult, Sender, SenderOptions};

use crate::model::ErrorKind;

/// Everything that can go wrong in this module. The connector's variants carry the attempt's
/// [`ErrorKind`] (see [`DeliveryError::kind`]); their text is safe to record on an attempt: it
/// names hosts and addresses, never headers, bodies or secrets.
#[derive(Debug, thiserror::Error)]
pub enum DeliveryError {
    /// The TLS client configuration could not be built.
    #[error("TLS client configuration: {0}")]
    TlsConfig(#[from] rustls::Error),
    /// `SenderOptions::user_agent` is not a valid header value.
    #[error("user agent is not a valid header value")]
    InvalidUserAgent,
    /// A signing secret is unusable; the text says why without repeating the secret.
    #[error("invalid signing secret: {0}")]
    InvalidSecret(&'static str),
    /// An HTTP request goes only to an `http` or `https` URL.
    #[error("unsupported URL scheme `{0}` (only http and https)")]
    UnsupportedScheme(String),
    /// The URL names no host to connect to.
    #[error("URL has no host")]
    NoHost,
    /// Name resolution failed.
    #[error("DNS lookup of {host} failed: {source}")]
    Dns { host: String, source: io::Error },
    /// Name resolution succeeded with an empty answer.
    #[error("DNS lookup of {host} returned no address")]
    NoAddress { host: String },
    /// Every address the host resolved to is refused by the SSRF guard.
    #[error("blocked address {addr}: {reason}")]
    BlockedAddress { addr: IpAddr, reason: &'static str },
    /// No TCP connection could be made to any allowed address (the last failure is shown).
    #[error("connect to {addr}: {}", describe_io(source))]
    Connect { addr: SocketAddr, source: io::Error },
    /// The egress proxy did not open a tunnel to the target.
    #[error("proxy {proxy}: {detail}")]
    Proxy { proxy: String, detail: String },
}

impl DeliveryError {
    /// The attempt error kind this error stands for, when it is an attempt's failure
    /// rather than a setup mistake.
    pub fn kind(&self) -> Option<ErrorKind> {
        match self {
            DeliveryError::TlsConfig(_)
            | DeliveryError::InvalidUserAgent
            | DeliveryError::InvalidSecret(_) => None,
            DeliveryError::UnsupportedScheme(_) | DeliveryError::BlockedAddress { .. } => {
                Some(ErrorKind::BlockedAddress)
            }
            DeliveryError::NoHost | DeliveryError::Dns { .. } | DeliveryError::NoAddress { .. } => {
                Some(ErrorKind::Dns)
            }
            DeliveryError::Connect { .. } | DeliveryError::Proxy { .. } => Some(ErrorKind::Connect),
        }
    }
}

/// Why a URL names no destination. Every URL in it is shown with its credentials masked, so
/// the text never repeats a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UrlError {
    /// The scheme is none of the destination kinds'.
    #[error("`{0}` must start with {known}", known = destination::KNOWN_SCHEMES)]
    UnknownScheme(String),
    /// The text does not parse as a URL.
    #[error("`{url}` is not a URL: {reason}")]
    NotAUrl { url: String, reason: String },
    #[error("`{0}` has no host")]
    NoHost(String),
    /// A broker URL with a `#fragment`, which no broker kind reads.
    #[error("`{0}` may not have a #fragment")]
    Fragment(String),
    #[error("the URL's credentials are not UTF-8")]
    CredentialsNotUtf8,
    #[error("the URL's path is not UTF-8")]
    PathNotUtf8,
    /// A query key the kind does not read: a typo is an error, not a silent default.
    #[error("`{url}`: unknown query key `{key}` (known: {known})")]
    UnknownQueryKey { url: String, key: String, known: String },
    /// The URL is well formed but does not name what its kind needs (a subject, a stream…).
    #[error("{0}")]
    Target(String),
}

/// Short, stable words for the socket errors an operator sees most, instead of the OS text
/// with its error number.
pub(crate) fn describe_io(e: &io::Error) -> String {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => "connection refused".to_owned(),
        io::ErrorKind::ConnectionReset => "connection reset".to_owned(),
        io::ErrorKind::ConnectionAborted => "connection aborted".to_owned(),
        io::ErrorKind::HostUnreachable => "host unreachable".to_owned(),
        io::ErrorKind::NetworkUnreachable => "network unreachable".to_owned(),
        io::ErrorKind::TimedOut => "connect timed out".to_owned(),
        io::ErrorKind::AddrNotAvailable => "address not available".to_owned(),
        _ => e.to_string(),
    }
}
