//! Where an endpoint's messages go: one [`Destination`], chosen here from the URL's scheme and
//! nowhere else. Each kind parses its own URL form in its own file; what they share — a
//! broker's address with its credentials — is [`BrokerAddress`].
//!
//! A destination is what the config validated, the attempt sends to and the API shows, so it
//! never prints a password: `Display` and `Debug` show the URL with its credentials masked.

use std::fmt;

use http::Uri;

use super::amqp::AmqpTarget;
use super::mqtt::MqttTarget;
use super::nats::NatsTarget;
use super::redis::RedisTarget;
use crate::model::Secret;

/// Where an endpoint's messages go (README "Destinations").
#[derive(Clone, PartialEq)]
pub enum Destination {
    /// `http://`, `https://`: a `POST` to the URL.
    Http(Uri),
    /// `nats://`, `tls://`: a JetStream publish to a subject.
    Nats(NatsTarget),
    /// `amqp://`, `amqps://`: a confirmed publish to an exchange with a routing key.
    Amqp(AmqpTarget),
    /// `redis://`, `rediss://`: an `XADD` to a stream.
    Redis(RedisTarget),
    /// `mqtt://`, `mqtts://`: an MQTT 5 publish with QoS 1 to a topic.
    Mqtt(MqttTarget),
}

impl Destination {
    /// The destination a URL names, or why it names none. The reason never repeats a
    /// password.
    pub fn parse(text: &str) -> Result<Destination, String> {
        let scheme = text
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase())
            .unwrap_or_default();
        match scheme.as_str() {
            "http" | "https" => parse_http(text).map(Destination::Http),
            "nats" | "tls" => NatsTarget::parse(&broker_url(text)?).map(Destination::Nats),
            "amqp" | "amqps" => AmqpTarget::parse(&broker_url(text)?).map(Destination::Amqp),
            "redis" | "rediss" => RedisTarget::parse(&broker_url(text)?).map(Destination::Redis),
            "mqtt" | "mqtts" => MqttTarget::parse(&broker_url(text)?).map(Destination::Mqtt),
            _ => Err(format!(
                "`{}` must start with http://, https://, nats://, tls://, amqp://, amqps://, \
                 redis://, rediss://, mqtt:// or mqtts://",
                masked_text(text)
            )),
        }
    }

    /// The transport's name as the API shows it: `http`, `nats`, `amqp`, `redis` or `mqtt`.
    pub fn kind(&self) -> &'static str {
        match self {
            Destination::Http(_) => "http",
            Destination::Nats(_) => "nats",
            Destination::Amqp(_) => "amqp",
            Destination::Redis(_) => "redis",
            Destination::Mqtt(_) => "mqtt",
        }
    }

    /// The host the transport connects to, as written (an IP literal keeps its brackets).
    pub fn host(&self) -> Option<&str> {
        match self {
            Destination::Http(url) => url.host(),
            Destination::Nats(t) => Some(&t.server.host),
            Destination::Amqp(t) => Some(&t.server.host),
            Destination::Redis(t) => Some(&t.server.host),
            Destination::Mqtt(t) => Some(&t.server.host),
        }
    }

    /// What a broker puts the message into, for people: `subject orders.created`,
    /// `exchange shop, routing key orders`, `stream orders`, `topic shop/orders`. None for
    /// HTTP, whose answer is a status code.
    pub fn target(&self) -> Option<String> {
        match self {
            Destination::Http(_) => None,
            Destination::Nats(t) => Some(format!("subject {}", t.subject)),
            Destination::Amqp(t) => Some(t.describe()),
            Destination::Redis(t) => Some(format!("stream {}", t.stream)),
            Destination::Mqtt(t) => Some(format!("topic {}", t.topic)),
        }
    }

    /// For traces: the messaging system (OpenTelemetry's `messaging.system`) and the name of
    /// the destination the message goes to; None for HTTP.
    pub fn messaging(&self) -> Option<(&'static str, &str)> {
        match self {
            Destination::Http(_) => None,
            Destination::Nats(t) => Some(("nats", &t.subject)),
            Destination::Amqp(t) if t.exchange.is_empty() => Some(("rabbitmq", "amq.default")),
            Destination::Amqp(t) => Some(("rabbitmq", &t.exchange)),
            Destination::Redis(t) => Some(("redis", &t.stream)),
            Destination::Mqtt(t) => Some(("mqtt", &t.topic)),
        }
    }

    /// Whether this is an HTTP(S) destination, the only kind with `auth`, `tls` and `proxy`.
    pub fn is_http(&self) -> bool {
        matches!(self, Destination::Http(_))
    }

    /// The URL with any credentials shown as `***`.
    pub fn masked(&self) -> String {
        match self {
            Destination::Http(url) => masked_uri(url),
            Destination::Nats(t) => t.shown.clone(),
            Destination::Amqp(t) => t.shown.clone(),
            Destination::Redis(t) => t.shown.clone(),
            Destination::Mqtt(t) => t.shown.clone(),
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.masked())
    }
}

impl fmt::Debug for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Destination({})", self.masked())
    }
}

fn parse_http(text: &str) -> Result<Uri, String> {
    let uri: Uri = text
        .parse()
        .map_err(|e| format!("`{}` is not a URL: {e}", masked_text(text)))?;
    if uri.host().is_none_or(str::is_empty) {
        return Err(format!("`{}` has no host", masked_uri(&uri)));
    }
    Ok(uri)
}

fn broker_url(text: &str) -> Result<url::Url, String> {
    let url = url::Url::parse(text).map_err(|e| format!("`{}` is not a URL: {e}", masked_text(text)))?;
    if url.host_str().is_none_or(str::is_empty) {
        return Err(format!("`{}` has no host", masked_text(text)));
    }
    if url.fragment().is_some() {
        return Err(format!("`{}` may not have a #fragment", masked_text(text)));
    }
    Ok(url)
}

/// `https://user:pass@host/x` → `https://***@host/x`: credentials in URLs are secrets.
pub fn masked_uri(url: &Uri) -> String {
    masked_text(&url.to_string())
}

/// A broker URL as text, credentials masked.
pub(super) fn masked_url(url: &url::Url) -> String {
    masked_text(url.as_str())
}

/// The URL text with everything between `://` and the authority's last `@` shown as `***`.
fn masked_text(text: &str) -> String {
    let Some((scheme, rest)) = text.split_once("://") else {
        return text.to_owned();
    };
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..authority_end];
    match authority.rfind('@') {
        Some(at) => format!("{scheme}://***@{}", &rest[at + 1..]),
        None => text.to_owned(),
    }
}

/// A broker's address and credentials, from a URL's authority. Endpoints with the same
/// address (credentials included) share one connection.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct BrokerAddress {
    /// From the scheme: `tls`, `amqps`, `rediss`, `mqtts`.
    pub tls: bool,
    /// As written; an IPv6 literal keeps its brackets.
    pub host: String,
    pub port: u16,
    pub username: Option<String>,
    pub password: Option<Secret>,
}

impl BrokerAddress {
    /// The address of `url`, with `default_port` when it names none.
    pub(super) fn from_url(url: &url::Url, tls: bool, default_port: u16) -> Result<Self, String> {
        let decode = |s: &str| {
            percent_encoding::percent_decode_str(s)
                .decode_utf8()
                .map(|s| s.into_owned())
                .map_err(|_| "the URL's credentials are not UTF-8".to_owned())
        };
        let username = match url.username() {
            "" => None,
            user => Some(decode(user)?),
        };
        let password = match url.password() {
            None => None,
            Some(pass) => Some(Secret::new(decode(pass)?)),
        };
        Ok(BrokerAddress {
            tls,
            host: url.host_str().unwrap_or_default().to_owned(),
            port: url.port().unwrap_or(default_port),
            username,
            password,
        })
    }

    /// The host without IPv6 brackets, as a resolver or TLS takes it.
    pub fn bare_host(&self) -> &str {
        self.host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(&self.host)
    }
}

impl fmt::Debug for BrokerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BrokerAddress")
            .field("tls", &self.tls)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("username", &self.username)
            .field("password", &self.password.as_ref().map(|_| "***"))
            .finish()
    }
}

impl fmt::Display for BrokerAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// A URL path segment list, percent-decoded, without the leading `/`.
pub(super) fn decoded_path(url: &url::Url) -> Result<String, String> {
    let path = url.path().strip_prefix('/').unwrap_or(url.path());
    percent_encoding::percent_decode_str(path)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| "the URL's path is not UTF-8".to_owned())
}

/// Refuses query keys a kind does not know, so that a typo is a config error, not a silent
/// default.
pub(super) fn known_query_keys(url: &url::Url, known: &[&str]) -> Result<(), String> {
    for (key, _) in url.query_pairs() {
        if !known.contains(&key.as_ref()) {
            return Err(format!(
                "unknown query key `{key}` (known: {})",
                if known.is_empty() {
                    "none".to_owned()
                } else {
                    known.join(", ")
                }
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scheme_chooses_the_kind() {
        for (url, kind) in [
            ("https://example.com/hook", "http"),
            ("HTTP://example.com/hook", "http"),
            ("nats://127.0.0.1:4222/orders.created", "nats"),
            ("tls://nats.example.com/orders", "nats"),
            (
                "amqp://guest:guest@127.0.0.1:5672/%2f?exchange=shop&routing_key=orders",
                "amqp",
            ),
            (
                "amqps://rabbit.example.com/shop?exchange=&routing_key=orders",
                "amqp",
            ),
            ("redis://127.0.0.1:6379/0?stream=orders", "redis"),
            ("rediss://cache.example.com/?stream=orders&maxlen=1000", "redis"),
            ("mqtt://127.0.0.1:1883/shop/orders", "mqtt"),
            ("mqtts://broker.example.com/shop/orders", "mqtt"),
        ] {
            let d = Destination::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            assert_eq!(d.kind(), kind, "{url}");
        }
    }

    #[test]
    fn unknown_schemes_and_urls_without_host_are_refused() {
        for bad in [
            "ftp://x/",
            "file:///etc/passwd",
            "nats:///orders",
            "/relative",
            "kafka://k/t",
        ] {
            assert!(Destination::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn passwords_never_show() {
        for url in [
            "https://user:hunter2@example.com/hook?x=1",
            "nats://user:hunter2@127.0.0.1/orders",
            "amqp://guest:hunter2@127.0.0.1/%2f?exchange=x&routing_key=k",
            "redis://:hunter2@127.0.0.1/0?stream=s",
            "mqtt://u:hunter2@127.0.0.1/a/b",
        ] {
            let d = Destination::parse(url).unwrap();
            for shown in [d.to_string(), format!("{d:?}"), d.masked()] {
                assert!(!shown.contains("hunter2"), "{shown}");
                assert!(
                    shown.contains("***@127.0.0.1") || shown.contains("***@example.com"),
                    "{shown}"
                );
            }
        }
        let bad = Destination::parse("nats://u:hunter2@127.0.0.1/").unwrap_err();
        assert!(!bad.contains("hunter2"), "{bad}");
        let bad = Destination::parse("gopher://u:hunter2@127.0.0.1/").unwrap_err();
        assert!(!bad.contains("hunter2"), "{bad}");
    }

    #[test]
    fn a_broker_address_takes_the_default_port_and_decoded_credentials() {
        let Destination::Nats(t) = Destination::parse("nats://a%40b:p%2Fq@[::1]/x").unwrap() else {
            panic!("nats")
        };
        assert_eq!(t.server.port, 4222);
        assert_eq!(t.server.bare_host(), "::1");
        assert_eq!(t.server.username.as_deref(), Some("a@b"));
        assert_eq!(t.server.password.as_ref().map(Secret::expose), Some("p/q"));
        assert!(!t.server.tls);
    }

    #[test]
    fn targets_read_as_what_the_broker_holds() {
        let target = |url: &str| Destination::parse(url).unwrap().target();
        assert_eq!(target("https://example.com/x"), None);
        assert_eq!(
            target("nats://h/orders.created").unwrap(),
            "subject orders.created"
        );
        assert_eq!(target("redis://h/?stream=orders").unwrap(), "stream orders");
        assert_eq!(target("mqtt://h/shop/orders").unwrap(), "topic shop/orders");
        assert_eq!(
            target("amqp://h/%2f?exchange=shop&routing_key=orders").unwrap(),
            "exchange shop, routing key orders"
        );
        assert_eq!(
            target("amqp://h/?routing_key=jobs").unwrap(),
            "default exchange, routing key jobs"
        );
    }
}
