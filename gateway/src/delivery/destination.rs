//! Where an endpoint's messages go: one [`Destination`], chosen here from the URL's scheme and
//! nowhere else. Each kind reads its own URL form in its own file (`http/`, `nats.rs`,
//! `amqp.rs`, `redis.rs`, `mqtt.rs`); this file only picks the kind, and asks a broker kind
//! what people and traces see of it through [`BrokerTarget`].
//!
//! A destination is what the config validated, the attempt sends to and the API shows, so it
//! never prints a password: `Display` and `Debug` show the URL with its credentials masked.

use std::fmt;

use http::Method;

use super::UrlError;
use super::amqp::AmqpTarget;
use super::broker::{BrokerTarget, broker_url};
use super::http::HttpTarget;
use super::masked::masked_text;
use super::mqtt::MqttTarget;
use super::nats::NatsTarget;
use super::redis::RedisTarget;

/// The schemes [`Destination::parse`] knows, as its error names them.
pub(super) const KNOWN_SCHEMES: &str = "http://, https://, nats://, tls://, amqp://, amqps://, \
    redis://, rediss://, mqtt:// or mqtts://";

/// Where an endpoint's messages go (README "Destinations").
#[derive(Clone, PartialEq)]
pub enum Destination {
    /// `http://`, `https://`: a `POST` to the URL.
    Http(HttpTarget),
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
    pub fn parse(text: &str) -> Result<Destination, UrlError> {
        let scheme = text
            .split_once("://")
            .map(|(scheme, _)| scheme.to_ascii_lowercase())
            .unwrap_or_default();
        match scheme.as_str() {
            "http" | "https" => HttpTarget::parse(text).map(Destination::Http),
            "nats" | "tls" => NatsTarget::parse(&broker_url(text)?).map(Destination::Nats),
            "amqp" | "amqps" => AmqpTarget::parse(&broker_url(text)?).map(Destination::Amqp),
            "redis" | "rediss" => RedisTarget::parse(&broker_url(text)?).map(Destination::Redis),
            "mqtt" | "mqtts" => MqttTarget::parse(&broker_url(text)?).map(Destination::Mqtt),
            _ => Err(UrlError::UnknownScheme(masked_text(text))),
        }
    }

    /// A broker destination as every broker kind describes itself; None for HTTP.
    fn broker(&self) -> Option<&dyn BrokerTarget> {
        match self {
            Destination::Http(_) => None,
            Destination::Nats(t) => Some(t),
            Destination::Amqp(t) => Some(t),
            Destination::Redis(t) => Some(t),
            Destination::Mqtt(t) => Some(t),
        }
    }

    /// The HTTP target, when this is an HTTP(S) destination.
    pub fn http(&self) -> Option<&HttpTarget> {
        match self {
            Destination::Http(target) => Some(target),
            _ => None,
        }
    }

    /// The transport's name as the API shows it: `http`, `nats`, `amqp`, `redis` or `mqtt`.
    pub fn kind(&self) -> &'static str {
        self.broker().map_or("http", |t| t.about().kind)
    }

    /// The host the transport connects to, as written (an IP literal keeps its brackets).
    pub fn host(&self) -> Option<&str> {
        match self.broker() {
            None => self.http().and_then(|t| t.url.host()),
            Some(t) => Some(&t.about().server.host),
        }
    }

    /// What a broker puts the message into, for people: `subject orders.created`,
    /// `exchange shop, routing key orders`, `stream orders`, `topic shop/orders`. None for
    /// HTTP, whose answer is a status code.
    pub fn target(&self) -> Option<String> {
        self.broker().map(BrokerTarget::describe)
    }

    /// For traces: the messaging system (OpenTelemetry's `messaging.system`) and the name of
    /// the destination the message goes to; None for HTTP.
    pub fn messaging(&self) -> Option<(&'static str, &str)> {
        self.broker().map(BrokerTarget::messaging)
    }

    /// This destination with `method` for an HTTP request (a transform may choose `PUT` or
    /// `PATCH` for one message); a broker message has no method, and its copy is unchanged.
    pub fn with_method(&self, method: Method) -> Destination {
        let mut copy = self.clone();
        if let Destination::Http(http) = &mut copy {
            http.method = method;
        }
        copy
    }

    /// Whether this is an HTTP(S) destination, the only kind with `auth`, `tls` and `proxy`.
    pub fn is_http(&self) -> bool {
        matches!(self, Destination::Http(_))
    }

    /// The URL with any credentials shown as `***`.
    pub fn masked(&self) -> String {
        match self.broker() {
            None => self.http().map(HttpTarget::masked).unwrap_or_default(),
            Some(t) => t.about().shown.to_owned(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Secret;

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
        assert!(!bad.to_string().contains("hunter2"), "{bad}");
        let bad = Destination::parse("gopher://u:hunter2@127.0.0.1/").unwrap_err();
        assert!(!bad.to_string().contains("hunter2"), "{bad}");
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

    #[test]
    fn each_scheme_has_its_ports_and_traces_name_the_system() {
        for (url, tls, port, messaging) in [
            ("nats://h/a.b", false, 4222, ("nats", "a.b")),
            ("tls://h/a.b", true, 4222, ("nats", "a.b")),
            (
                "amqp://h/?exchange=shop&routing_key=k",
                false,
                5672,
                ("rabbitmq", "shop"),
            ),
            (
                "amqps://h/?routing_key=k",
                true,
                5671,
                ("rabbitmq", "amq.default"),
            ),
            ("redis://h/?stream=s", false, 6379, ("redis", "s")),
            ("rediss://h/?stream=s", true, 6379, ("redis", "s")),
            ("mqtt://h/a/b", false, 1883, ("mqtt", "a/b")),
            ("mqtts://h/a/b", true, 8883, ("mqtt", "a/b")),
        ] {
            let d = Destination::parse(url).unwrap();
            let about = d.broker().unwrap().about();
            assert_eq!((about.server.tls, about.server.port), (tls, port), "{url}");
            assert_eq!(d.host(), Some("h"), "{url}");
            assert_eq!(d.messaging(), Some(messaging), "{url}");
        }
        let refused = Destination::parse("mqtt://h/a/b?qos=2").unwrap_err();
        assert!(refused.to_string().contains("qos"), "{refused}");
    }
}
