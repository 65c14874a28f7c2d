//! NATS JetStream: `nats://[user:pass@]host:port/SUBJECT` (`tls://` for TLS). A message is
//! delivered when the stream that covers the subject answered a PubAck; its `Nats-Msg-Id` is
//! the event id, so the stream's de-duplication window drops the copy a retry or a restart
//! sends again. The gateway creates no stream.
//!
//! On `async-nats`, the NATS project's own client: one connection per server and credentials,
//! which the client keeps reconnecting with its own backoff; while it is down, attempts fail
//! at once with `connect`. Servers the broker announces are ignored: only the judged address
//! is dialled.

use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::broker::{
    About, Answer, Broker, BrokerAddress, BrokerTarget, Dialer, Failure, Live, decoded_path, header_pairs,
    opened,
};
use super::{OutgoingMessage, UrlError};

/// A JetStream subject on a NATS server.
#[derive(Clone, Debug, PartialEq)]
pub struct NatsTarget {
    pub server: BrokerAddress,
    pub subject: String,
    pub(super) shown: String,
}

impl BrokerTarget for NatsTarget {
    fn parse(url: &url::Url) -> Result<NatsTarget, UrlError> {
        let (server, shown) = opened(url, "tls", [4222, 4222], &[])?;
        let subject = decoded_path(url)?;
        if subject.is_empty() {
            return Err(UrlError::Target(format!(
                "`{shown}` names no subject (nats://host:port/SUBJECT)"
            )));
        }
        let bad_token = subject.split('.').any(|token| {
            token.is_empty() || token == "*" || token == ">" || token.chars().any(char::is_whitespace)
        });
        if bad_token {
            return Err(UrlError::Target(format!(
                "`{subject}` is not a subject to publish to: tokens separated by `.`, no spaces, \
                 no wildcards"
            )));
        }
        Ok(NatsTarget {
            server,
            subject,
            shown,
        })
    }

    fn about(&self) -> About<'_> {
        About::new("nats", &self.server, &self.shown).goes_to("subject", &self.subject)
    }
}

/// A client and whether its connection is up, as its events say: a publish waiting for its
/// PubAck fails with `connect` the moment the connection goes down.
#[derive(Clone)]
pub(super) struct NatsLink {
    client: async_nats::Client,
    up: watch::Receiver<bool>,
}

impl Live for NatsLink {
    fn is_open(&self) -> bool {
        // Down: the client reconnects by itself (with its backoff); the link is kept and the
        // attempts fail meanwhile.
        true
    }
}

/// JetStream over one client per server and credentials.
pub(super) struct Nats;

impl Broker for Nats {
    type Target = NatsTarget;
    type Key = BrokerAddress;
    type Link = NatsLink;

    fn key(target: &NatsTarget) -> BrokerAddress {
        target.server.clone()
    }

    async fn dial(dialer: &Dialer, target: &NatsTarget, deadline: Instant) -> Result<NatsLink, Failure> {
        connect(dialer, &target.server, deadline).await
    }

    async fn send(
        link: &NatsLink,
        target: &NatsTarget,
        msg: &OutgoingMessage,
        deadline: Instant,
    ) -> Result<Answer, Failure> {
        let mut up = link.up.clone();
        if !*up.borrow_and_update() {
            return Err(Failure::connect(format!(
                "the connection to {} is down; the client is reconnecting",
                target.server
            )));
        }
        let mut context = async_nats::jetstream::new(link.client.clone());
        context.set_timeout(deadline.saturating_duration_since(Instant::now()));
        let ack = async {
            let pending = context
                .send_publish(target.subject.clone(), publish_message(msg))
                .await
                .map_err(|e| publish_failure(&e))?;
            pending.await.map_err(|e| publish_failure(&e))
        };
        let lost = async {
            let _ = up.wait_for(|up| !*up).await;
        };
        let ack = tokio::select! {
            ack = tokio::time::timeout_at(deadline, ack) => {
                ack.map_err(|_| Failure::timeout("no PubAck within the attempt's timeout"))??
            }
            () = lost => {
                return Err(Failure::connect(format!(
                    "the connection to {} broke before the PubAck",
                    target.server
                )));
            }
        };
        Ok(answer(target, &ack))
    }
}

/// The message as JetStream takes it: the headers, the body, the event id as `Nats-Msg-Id`.
fn publish_message(msg: &OutgoingMessage) -> async_nats::jetstream::message::PublishMessage {
    let mut headers = async_nats::HeaderMap::new();
    for (name, value) in header_pairs(&msg.headers) {
        headers.append(name.as_str(), value.as_str());
    }
    async_nats::jetstream::message::PublishMessage::build()
        .payload(msg.body.clone())
        .headers(headers)
        .message_id(&msg.message_id)
}

/// What the stream's PubAck said.
fn answer(target: &NatsTarget, ack: &async_nats::jetstream::publish::PublishAck) -> Answer {
    Answer {
        fields: vec![
            ("subject".to_owned(), target.subject.clone()),
            ("stream".to_owned(), ack.stream.clone()),
            ("seq".to_owned(), ack.sequence.to_string()),
            ("duplicate".to_owned(), ack.duplicate.to_string()),
        ],
        summary: format!(
            "PubAck: stream {}, sequence {}{}",
            ack.stream,
            ack.sequence,
            if ack.duplicate {
                " (a duplicate: the stream had it already)"
            } else {
                ""
            }
        ),
    }
}

fn publish_failure(e: &async_nats::jetstream::context::PublishError) -> Failure {
    use async_nats::jetstream::context::PublishErrorKind as Kind;
    match e.kind() {
        Kind::StreamNotFound => Failure::rejected("no JetStream stream covers the subject"),
        Kind::TimedOut => Failure::timeout("no PubAck within the attempt's timeout"),
        Kind::BrokenPipe => Failure::connect("the connection broke before the PubAck"),
        _ => Failure::rejected(format!("JetStream refused the message: {e}")),
    }
}

/// A client for `server`, connected to the address the guard judged.
async fn connect(dialer: &Dialer, server: &BrokerAddress, deadline: Instant) -> Result<NatsLink, Failure> {
    let addr = dialer.judged(server).await?;
    let (up_tx, up) = watch::channel(true);
    let mut options = async_nats::ConnectOptions::new()
        .event_callback(move |event| {
            let up_tx = up_tx.clone();
            async move {
                match event {
                    async_nats::Event::Connected => up_tx.send_replace(true),
                    async_nats::Event::Disconnected | async_nats::Event::Closed => up_tx.send_replace(false),
                    _ => return,
                };
            }
        })
        // The same shape as the other transports' backoff: 100 ms doubling to 10 s.
        .reconnect_delay_callback(|attempts| {
            Duration::from_millis(100)
                .saturating_mul(1 << attempts.min(16))
                .min(Duration::from_secs(10))
        })
        .ignore_discovered_servers()
        .retain_servers_order()
        .name("hookgate")
        .connection_timeout(
            deadline
                .saturating_duration_since(Instant::now())
                .max(Duration::from_millis(1)),
        )
        // The attempt bounds every wait; the client's own request timeout is not used.
        .request_timeout(None);
    match (&server.username, &server.password) {
        (Some(user), Some(pass)) => {
            options = options.user_and_password(user.clone(), pass.expose().to_owned());
        }
        (Some(token), None) => options = options.token(token.clone()),
        _ => {}
    }
    if server.tls {
        options = options
            .require_tls(true)
            .tls_client_config(dialer.tls_config(server)?);
    }
    let addr: async_nats::ServerAddr = format!("nats://{addr}")
        .parse()
        .map_err(|e| Failure::connect(format!("the address {addr}: {e}")))?;
    let client = options.connect(addr).await.map_err(|e| {
        use async_nats::ConnectErrorKind as Kind;
        match e.kind() {
            Kind::Tls => Failure {
                kind: crate::model::ErrorKind::Tls,
                detail: format!("TLS with {server}: {e}"),
            },
            Kind::Authentication | Kind::AuthorizationViolation => {
                Failure::connect(format!("{server} refused the credentials"))
            }
            _ => Failure::connect(format!("connect to {server}: {e}")),
        }
    })?;
    Ok(NatsLink { client, up })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<NatsTarget, UrlError> {
        NatsTarget::parse(&url::Url::parse(text).unwrap())
    }

    #[test]
    fn a_subject_is_required_and_may_not_be_a_wildcard() {
        assert_eq!(
            parse("nats://h/orders.created").unwrap().subject,
            "orders.created"
        );
        assert!(parse("tls://h/orders").unwrap().server.tls);
        for bad in [
            "nats://h/",
            "nats://h/orders.*",
            "nats://h/orders.>",
            "nats://h/a..b",
            "nats://h/a%20b",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert!(
            parse("nats://h/x?stream=y").is_err(),
            "unknown query keys are refused"
        );
    }
}
