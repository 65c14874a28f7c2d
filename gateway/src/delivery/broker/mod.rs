//! What the broker destinations share, and the one trait each of them implements.
//!
//! A broker kind (`nats.rs`, `amqp.rs`, `redis.rs`, `mqtt.rs` beside this folder) is a
//! [`Broker`]: its target type (parsed from its URL form, [`BrokerTarget`]), how it dials a
//! connection to its broker, and how it sends one message on that connection and reads the
//! broker's [`Answer`]. [`BrokerSender`] does the rest the same way for every kind: one
//! long-lived connection per broker (`links`), dialled to an address the SSRF guard judged
//! with TLS that checks the URL's host name (`dial`), and the attempt's outcome and record
//! from the answer ([`finish`]). `address` reads the URL parts every kind reads alike.

mod address;
mod dial;
mod links;

use std::future::Future;
use std::hash::Hash;

use http::HeaderMap;
use tokio::time::Instant;

pub use self::address::BrokerAddress;
pub(super) use self::address::{broker_url, decoded_path, opened};
pub(super) use self::dial::Dialer;
use self::links::Links;
pub(super) use self::links::{Failure, Live};
use super::OutgoingMessage;
use super::masked::recorded;
use super::sender::Connections;
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

/// A broker destination kind: its target, how to dial its broker, how to send one message.
pub(super) trait Broker: Send + Sync + 'static {
    /// What an endpoint's URL names on the broker (a subject, an exchange, a stream, a topic).
    type Target: BrokerTarget + Sync;
    /// Which connection a target needs: targets with the same key share one.
    type Key: Eq + Hash + Clone + Send + Sync + 'static;
    /// One connection to a broker: a cheap handle, shared by every attempt that needs it.
    type Link: Live + Sync;

    fn key(target: &Self::Target) -> Self::Key;

    /// A new connection for `target` to an address the dialer's guard judged, by `deadline`.
    fn dial(
        dialer: &Dialer,
        target: &Self::Target,
        deadline: Instant,
    ) -> impl Future<Output = Result<Self::Link, Failure>> + Send;

    /// One message on `link`: what the broker answered when it took it, or why it did not.
    fn send(
        link: &Self::Link,
        target: &Self::Target,
        msg: &OutgoingMessage,
        deadline: Instant,
    ) -> impl Future<Output = Result<Answer, Failure>> + Send;
}

/// A broker target as people and traces see it; the kind's URL form is read in `parse`.
pub(super) trait BrokerTarget {
    /// The target an URL of this kind names, or why it names none (never repeating a password).
    fn parse(url: &url::Url) -> Result<Self, super::UrlError>
    where
        Self: Sized;
    /// What every broker target has to show.
    fn about(&self) -> About<'_>;
    /// What the broker puts the message into, for people: `subject orders.created`.
    fn describe(&self) -> String {
        let (what, name) = self.about().goes_to;
        format!("{what} {name}")
    }
    /// OpenTelemetry's `messaging.system` and the destination's name.
    fn messaging(&self) -> (&'static str, &str) {
        let about = self.about();
        (about.kind, about.goes_to.1)
    }
}

/// What a broker target shows of itself ([`BrokerTarget::about`]).
pub(super) struct About<'a> {
    /// The transport's name as the API shows it: `nats`, `amqp`, `redis`, `mqtt`.
    pub kind: &'static str,
    pub server: &'a BrokerAddress,
    /// The URL with its credentials masked.
    pub shown: &'a str,
    /// What the message goes into and its name: `("subject", "orders.created")`.
    pub goes_to: (&'static str, &'a str),
}

impl<'a> About<'a> {
    pub(super) fn new(kind: &'static str, server: &'a BrokerAddress, shown: &'a str) -> Self {
        About {
            kind,
            server,
            shown,
            goes_to: ("", ""),
        }
    }

    pub(super) fn goes_to(self, what: &'static str, name: &'a str) -> Self {
        About {
            goes_to: (what, name),
            ..self
        }
    }
}

/// Sends to the targets of one broker kind over one connection per [`Broker::Key`].
pub(super) struct BrokerSender<B: Broker> {
    links: Links<B::Key, B::Link>,
}

impl<B: Broker> BrokerSender<B> {
    pub(super) fn new() -> Self {
        BrokerSender { links: Links::new() }
    }

    /// One attempt: the target's connection (dialled now if there is none), the message on
    /// it, and the outcome and record of what the broker answered.
    pub(super) async fn send(
        &self,
        dialer: &Dialer,
        target: &B::Target,
        msg: &OutgoingMessage,
        deadline: Instant,
    ) -> (Outcome, Exchange) {
        let answer = async {
            let dial = || B::dial(dialer, target, deadline);
            let link = self.links.get(&B::key(target), deadline, dial).await?;
            B::send(&link, target, msg, deadline).await
        };
        finish(msg, answer.await)
    }
}

impl<B: Broker> Connections for BrokerSender<B> {
    fn drop_connections(&self) {
        self.links.clear();
    }
}

/// The message's headers as the broker gets them: lowercase names and text values, without
/// the ones that only mean something to an HTTP connection. A value that is not UTF-8 is
/// sent lossily: brokers' header values are text.
pub(in crate::delivery) fn header_pairs(headers: &HeaderMap) -> Vec<(String, String)> {
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
fn finish(msg: &OutgoingMessage, answer: Result<Answer, Failure>) -> (Outcome, Exchange) {
    let sent: HeaderMap = msg
        .headers
        .iter()
        .filter(|(name, _)| !HTTP_ONLY_HEADERS.contains(&name.as_str()))
        .map(|(name, value)| (name.clone(), value.clone()))
        .collect();
    let mut exchange = Exchange {
        request_headers: recorded(&sent, &msg.masked),
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
pub(in crate::delivery) struct Answer {
    pub(in crate::delivery) fields: Vec<(String, String)>,
    pub(in crate::delivery) summary: String,
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
