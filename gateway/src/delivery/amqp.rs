//! RabbitMQ (AMQP 0-9-1): `amqp://user:pass@host:port/VHOST?exchange=X&routing_key=K`
//! (`amqps://` for TLS; VHOST url-encoded, `%2f` for `/`; `exchange` empty or absent for the
//! default exchange). A message is published persistent and mandatory on a channel in
//! confirm mode, and is delivered when the broker acks it; a `basic.return` (no queue took it)
//! or a nack is a failure of kind `rejected`, and so is a channel the broker closed (an
//! exchange that does not exist).
//!
//! On `amqprs`: a pure-Tokio client whose TLS takes a connector and the name to verify apart
//! from the address it dials, so the judged address and the URL's host name both hold. One
//! connection per broker, vhost and credentials, with a confirm channel per exchange on it.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use amqprs::callbacks::{ChannelCallback, ConnectionCallback};
use amqprs::channel::{BasicPublishArguments, Channel, ConfirmSelectArguments};
use amqprs::connection::{Connection, OpenConnectionArguments};
use amqprs::{Ack, BasicProperties, Cancel, Close, CloseChannel, FieldTable, FieldValue, Nack, Return};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::broker::{
    About, Answer, Broker, BrokerAddress, BrokerTarget, Dialer, Failure, Live, decoded_path, header_pairs,
    opened,
};
use super::{OutgoingMessage, UrlError};

/// The longest exchange name or routing key AMQP carries (a short string).
const MAX_NAME_BYTES: usize = 255;

/// An exchange and routing key on a RabbitMQ virtual host.
#[derive(Clone, Debug, PartialEq)]
pub struct AmqpTarget {
    pub server: BrokerAddress,
    pub vhost: String,
    /// Empty: the default exchange, which routes by queue name.
    pub exchange: String,
    pub routing_key: String,
    pub(super) shown: String,
}

impl BrokerTarget for AmqpTarget {
    fn parse(url: &url::Url) -> Result<AmqpTarget, UrlError> {
        let (server, shown) = opened(url, "amqps", [5672, 5671], &["exchange", "routing_key"])?;
        let query: BTreeMap<String, String> = url.query_pairs().into_owned().collect();
        let exchange = query.get("exchange").cloned().unwrap_or_default();
        let routing_key = query.get("routing_key").cloned().unwrap_or_default();
        for (key, value) in [("exchange", &exchange), ("routing_key", &routing_key)] {
            if value.len() > MAX_NAME_BYTES {
                return Err(UrlError::Target(format!(
                    "`{shown}`: {key} is longer than {MAX_NAME_BYTES} bytes"
                )));
            }
        }
        if exchange.is_empty() && routing_key.is_empty() {
            return Err(UrlError::Target(format!(
                "`{shown}` names neither an exchange nor a routing key (the default exchange \
                 routes by queue name: ?routing_key=QUEUE)"
            )));
        }
        let vhost = match decoded_path(url)? {
            path if path.is_empty() => "/".to_owned(),
            path => path,
        };
        Ok(AmqpTarget {
            server,
            vhost,
            exchange,
            routing_key,
            shown,
        })
    }

    fn about(&self) -> About<'_> {
        let exchange = match self.exchange.as_str() {
            "" => "amq.default",
            exchange => exchange,
        };
        About::new("amqp", &self.server, &self.shown).goes_to("exchange", exchange)
    }

    /// `exchange shop, routing key orders`, or `default exchange, routing key jobs`.
    fn describe(&self) -> String {
        if self.exchange.is_empty() {
            format!("default exchange, routing key {}", self.routing_key)
        } else {
            format!("exchange {}, routing key {}", self.exchange, self.routing_key)
        }
    }

    /// RabbitMQ is the system OpenTelemetry names for AMQP 0-9-1.
    fn messaging(&self) -> (&'static str, &str) {
        ("rabbitmq", self.about().goes_to.1)
    }
}

/// Which broker connection a target needs: address, credentials and virtual host.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct LinkKey {
    server: BrokerAddress,
    vhost: String,
}

/// A connection, and a confirm channel per exchange on it: the broker closes a channel that
/// publishes to an exchange that does not exist, which must not take the other endpoints'
/// publishes on that connection with it.
#[derive(Clone)]
pub(super) struct AmqpLink {
    connection: Arc<Closing>,
    /// Set when the connection's callback saw it close or went away with it.
    broken: Arc<AtomicBool>,
    channels: Arc<tokio::sync::Mutex<HashMap<String, ConfirmChannel>>>,
}

impl Live for AmqpLink {
    fn is_open(&self) -> bool {
        self.connection.0.is_open() && !self.broken.load(Ordering::SeqCst)
    }
}

/// A channel in confirm mode and the publishes waiting for their confirm.
#[derive(Clone)]
struct ConfirmChannel {
    channel: Channel,
    confirms: Arc<Mutex<Confirms>>,
    /// Held from numbering a publish to handing it to the connection, so that tags follow the
    /// order in which the broker receives the publishes.
    publishing: Arc<tokio::sync::Mutex<()>>,
}

impl ConfirmChannel {
    fn lock(&self) -> std::sync::MutexGuard<'_, Confirms> {
        self.confirms.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn is_open(&self) -> bool {
        self.channel.is_open() && !self.lock().closed
    }
}

/// The link's connection, closed when the last handle to the link goes (a link is replaced
/// when its connection broke), so that it does not linger.
struct Closing(Connection);

impl Drop for Closing {
    fn drop(&mut self) {
        let connection = self.0.clone();
        if connection.is_open()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            runtime.spawn(async move {
                let _ = connection.close().await;
            });
        }
    }
}

/// Marks the link broken when the broker closes the connection or its reader goes.
struct ConnectionWatch(Arc<AtomicBool>);

impl Drop for ConnectionWatch {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl ConnectionCallback for ConnectionWatch {
    async fn close(&mut self, _connection: &Connection, _close: Close) -> Result<(), amqprs::error::Error> {
        self.0.store(true, Ordering::SeqCst);
        Ok(())
    }

    async fn blocked(&mut self, _connection: &Connection, _reason: String) {}

    async fn unblocked(&mut self, _connection: &Connection) {}

    async fn secret_updated(&mut self, _connection: &Connection) {}
}

/// The channel's publishes by delivery tag (1, 2, … in publish order, as the broker numbers
/// them in confirm mode), and the returns waiting for their publish's confirm.
#[derive(Default)]
struct Confirms {
    next_tag: u64,
    waiting: BTreeMap<u64, Waiting>,
    closed: bool,
}

struct Waiting {
    /// What the publish was sent as, to match a `basic.return` to it: the broker returns the
    /// message's properties, exchange and routing key, not its tag.
    message_id: String,
    exchange: String,
    routing_key: String,
    returned: Option<String>,
    done: oneshot::Sender<Result<(), Failure>>,
}

impl Confirms {
    /// Ends the publishes an ack or nack covers: `tag` alone, or every one up to it.
    fn settle(&mut self, tag: u64, multiple: bool, acked: bool) {
        let tags: Vec<u64> = if multiple {
            self.waiting.range(..=tag).map(|(t, _)| *t).collect()
        } else {
            vec![tag]
        };
        for tag in tags {
            let Some(waiting) = self.waiting.remove(&tag) else {
                continue;
            };
            let result = match (acked, waiting.returned) {
                (true, None) => Ok(()),
                (_, Some(reason)) => Err(Failure::rejected(reason)),
                (false, None) => Err(Failure::rejected("the broker nacked the message")),
            };
            let _ = waiting.done.send(result);
        }
    }

    /// Ends every waiting publish with `failure` (the channel or connection is gone).
    fn fail_all(&mut self, failure: &Failure) {
        self.closed = true;
        for (_, waiting) in std::mem::take(&mut self.waiting) {
            let _ = waiting.done.send(Err(failure.clone()));
        }
    }
}

/// Turns the broker's confirms, returns and channel close into the waiting publishes' ends.
struct ConfirmCallback(Arc<Mutex<Confirms>>);

impl ConfirmCallback {
    fn lock(&self) -> std::sync::MutexGuard<'_, Confirms> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Drop for ConfirmCallback {
    /// The channel's dispatcher is gone with the connection: nothing will confirm now.
    fn drop(&mut self) {
        self.lock().fail_all(&Failure::connect(
            "the connection to the broker broke before the confirm",
        ));
    }
}

#[async_trait::async_trait]
impl ChannelCallback for ConfirmCallback {
    async fn close(&mut self, _channel: &Channel, close: CloseChannel) -> Result<(), amqprs::error::Error> {
        let reason = format!("the broker closed the channel: {close}");
        self.lock().fail_all(&Failure::rejected(reason));
        Ok(())
    }

    async fn cancel(&mut self, _channel: &Channel, _cancel: Cancel) -> Result<(), amqprs::error::Error> {
        Ok(())
    }

    async fn flow(&mut self, _channel: &Channel, active: bool) -> Result<bool, amqprs::error::Error> {
        Ok(active)
    }

    async fn publish_ack(&mut self, _channel: &Channel, ack: Ack) {
        self.lock().settle(ack.delivery_tag(), ack.mutiple(), true);
    }

    async fn publish_nack(&mut self, _channel: &Channel, nack: Nack) {
        self.lock().settle(nack.delivery_tag(), nack.multiple(), false);
    }

    async fn publish_return(
        &mut self,
        _channel: &Channel,
        ret: Return,
        properties: BasicProperties,
        _content: Vec<u8>,
    ) {
        let message_id = properties.message_id().cloned().unwrap_or_default();
        let mut confirms = self.lock();
        let returned = confirms.waiting.values_mut().find(|w| {
            w.returned.is_none()
                && w.message_id == message_id
                && w.exchange == *ret.exchange()
                && w.routing_key == *ret.routing_key()
        });
        if let Some(waiting) = returned {
            waiting.returned = Some(format!(
                "returned by the broker: {} {}",
                ret.reply_code(),
                ret.reply_text()
            ));
        }
    }
}

/// Publishes with confirms over one connection per broker, credentials and virtual host.
pub(super) struct Amqp;

impl Broker for Amqp {
    type Target = AmqpTarget;
    type Key = LinkKey;
    type Link = AmqpLink;

    fn key(target: &AmqpTarget) -> LinkKey {
        LinkKey {
            server: target.server.clone(),
            vhost: target.vhost.clone(),
        }
    }

    async fn dial(dialer: &Dialer, target: &AmqpTarget, _deadline: Instant) -> Result<AmqpLink, Failure> {
        connect(dialer, target).await
    }

    async fn send(
        link: &AmqpLink,
        target: &AmqpTarget,
        msg: &OutgoingMessage,
        deadline: Instant,
    ) -> Result<Answer, Failure> {
        let channel = tokio::time::timeout_at(deadline, channel_for(link, &target.exchange))
            .await
            .map_err(|_| Failure::timeout("no channel within the attempt's timeout"))??;
        let confirmed = publish(&channel, target, msg, deadline).await?;
        tokio::time::timeout_at(deadline, confirmed)
            .await
            .map_err(|_| Failure::timeout("no confirm within the attempt's timeout"))?
            .unwrap_or_else(|_| Err(Failure::connect("the connection to the broker broke")))?;
        let mut fields = if target.exchange.is_empty() {
            vec![("exchange".to_owned(), String::new())]
        } else {
            vec![("exchange".to_owned(), target.exchange.clone())]
        };
        fields.push(("routing_key".to_owned(), target.routing_key.clone()));
        fields.push(("answer".to_owned(), "basic.ack".to_owned()));
        Ok(Answer {
            fields,
            summary: format!("basic.ack: {} took the message", target.describe()),
        })
    }
}

/// Numbers the publish, sends it on `channel` in that order, and answers where its confirm
/// will arrive.
async fn publish(
    channel: &ConfirmChannel,
    target: &AmqpTarget,
    msg: &OutgoingMessage,
    deadline: Instant,
) -> Result<oneshot::Receiver<Result<(), Failure>>, Failure> {
    let (done, confirmed) = oneshot::channel();
    let Ok(publishing) = tokio::time::timeout_at(deadline, channel.publishing.lock()).await else {
        return Err(Failure::timeout(
            "no turn to publish within the attempt's timeout",
        ));
    };
    let tag = {
        let mut confirms = channel.lock();
        if confirms.closed {
            return Err(Failure::connect("the channel to the broker is closed"));
        }
        confirms.next_tag += 1;
        let tag = confirms.next_tag;
        confirms.waiting.insert(
            tag,
            Waiting {
                message_id: msg.message_id.clone(),
                exchange: target.exchange.clone(),
                routing_key: target.routing_key.clone(),
                returned: None,
                done,
            },
        );
        tag
    };
    let mut args = BasicPublishArguments::new(&target.exchange, &target.routing_key);
    args.mandatory = true;
    let sent = channel
        .channel
        .basic_publish(properties(msg), msg.body.to_vec(), args)
        .await;
    drop(publishing);
    if let Err(e) = sent {
        channel.lock().waiting.remove(&tag);
        return Err(Failure::connect(format!("publish to {}: {e}", target.server)));
    }
    Ok(confirmed)
}

/// Persistent, with the event id as message id, the content type, and every other header in
/// the headers table.
fn properties(msg: &OutgoingMessage) -> BasicProperties {
    let mut table = FieldTable::new();
    let mut content_type = None;
    for (name, value) in header_pairs(&msg.headers) {
        if name == "content-type" {
            content_type = Some(value.clone());
        }
        let (Ok(name), Ok(value)) = (name.as_str().try_into(), value.as_str().try_into()) else {
            continue;
        };
        table.insert(name, FieldValue::S(value));
    }
    let mut props = BasicProperties::default();
    props
        .with_persistence(true)
        .with_message_id(&msg.message_id)
        .with_headers(table);
    if let Some(content_type) = content_type {
        props.with_content_type(&content_type);
    }
    props.finish()
}

/// A connection to the judged address and a channel in confirm mode.
async fn connect(dialer: &Dialer, target: &AmqpTarget) -> Result<AmqpLink, Failure> {
    let server = &target.server;
    let addr = dialer.judged(server).await?;
    let host = match addr.ip() {
        std::net::IpAddr::V6(ip) => format!("[{ip}]"),
        std::net::IpAddr::V4(ip) => ip.to_string(),
    };
    let password = server.password.as_ref().map_or("guest", |p| p.expose());
    let username = server.username.as_deref().unwrap_or("guest");
    let mut args = OpenConnectionArguments::new(&host, addr.port(), username, password);
    args.virtual_host(&target.vhost).connection_name("hookgate");
    if server.tls {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(dialer.tls_config(server)?));
        args.tls_adaptor(amqprs::tls::TlsAdaptor::new(
            connector,
            server.bare_host().to_owned(),
        ));
    }
    let connection = Connection::open(&args).await.map_err(|e| {
        // amqprs reports a failed handshake as a network error with rustls's text.
        let text = e.to_string();
        if server.tls && (text.contains("certificate") || text.contains("handshake")) {
            Failure {
                kind: crate::model::ErrorKind::Tls,
                detail: format!("TLS with {server}: {text}"),
            }
        } else {
            Failure::connect(format!("connect to {server}: {text}"))
        }
    })?;
    let broken = Arc::new(AtomicBool::new(false));
    connection
        .register_callback(ConnectionWatch(broken.clone()))
        .await
        .map_err(|e| Failure::connect(format!("connect to {server}: {e}")))?;
    Ok(AmqpLink {
        connection: Arc::new(Closing(connection)),
        broken,
        channels: Arc::default(),
    })
}

/// The link's confirm channel for `exchange`, opened now when there is none or the broker
/// closed it.
async fn channel_for(link: &AmqpLink, exchange: &str) -> Result<ConfirmChannel, Failure> {
    let mut channels = link.channels.lock().await;
    if let Some(channel) = channels.get(exchange).filter(|c| c.is_open()) {
        return Ok(channel.clone());
    }
    let failed = |e: amqprs::error::Error| Failure::connect(format!("open a channel: {e}"));
    let connection = &link.connection.0;
    let channel = connection.open_channel(None).await.map_err(failed)?;
    let confirms = Arc::new(Mutex::new(Confirms::default()));
    channel
        .register_callback(ConfirmCallback(confirms.clone()))
        .await
        .map_err(failed)?;
    channel
        .confirm_select(ConfirmSelectArguments::default())
        .await
        .map_err(failed)?;
    let opened = ConfirmChannel {
        channel,
        confirms,
        publishing: Arc::default(),
    };
    // A channel this replaces was closed by the broker: nothing waits on it any more.
    channels.insert(exchange.to_owned(), opened.clone());
    Ok(opened)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<AmqpTarget, UrlError> {
        AmqpTarget::parse(&url::Url::parse(text).unwrap())
    }

    #[test]
    fn vhost_exchange_and_routing_key_come_from_the_url() {
        let t = parse("amqp://u:p@h/%2f?exchange=shop&routing_key=orders").unwrap();
        assert_eq!(
            (t.vhost.as_str(), t.exchange.as_str(), t.routing_key.as_str()),
            ("/", "shop", "orders")
        );
        assert_eq!(t.server.port, 5672);
        let t = parse("amqps://h/prod?routing_key=jobs").unwrap();
        assert_eq!((t.vhost.as_str(), t.exchange.as_str()), ("prod", ""));
        assert_eq!(t.server.port, 5671);
        assert!(t.server.tls);
        assert!(parse("amqp://h").unwrap_err().to_string().contains("neither"));
        assert!(
            parse("amqp://h/?exchange=x&queue=y").is_err(),
            "unknown query keys are refused"
        );
        assert!(parse(&format!("amqp://h/?exchange={}", "x".repeat(256))).is_err());
    }

    fn waiting(message_id: &str) -> (Waiting, oneshot::Receiver<Result<(), Failure>>) {
        let (done, rx) = oneshot::channel();
        let w = Waiting {
            message_id: message_id.to_owned(),
            exchange: "x".to_owned(),
            routing_key: "k".to_owned(),
            returned: None,
            done,
        };
        (w, rx)
    }

    #[test]
    fn a_multiple_ack_settles_every_publish_up_to_its_tag_and_a_returned_one_fails() {
        let mut confirms = Confirms::default();
        let mut answers = Vec::new();
        for (tag, id) in [(1, "a"), (2, "b"), (3, "c")] {
            let (w, rx) = waiting(id);
            confirms.waiting.insert(tag, w);
            answers.push(rx);
        }
        confirms.waiting.get_mut(&2).unwrap().returned = Some("returned: 312 NO_ROUTE".into());
        confirms.settle(2, true, true);
        assert_eq!(answers[0].try_recv().unwrap(), Ok(()));
        let failed = answers[1].try_recv().unwrap().unwrap_err();
        assert_eq!(failed.kind, crate::model::ErrorKind::Rejected);
        assert!(answers[2].try_recv().is_err(), "tag 3 is not settled yet");
        confirms.settle(3, false, false);
        assert_eq!(
            answers[2].try_recv().unwrap().unwrap_err().kind,
            crate::model::ErrorKind::Rejected
        );
    }

    #[test]
    fn a_lost_channel_fails_every_waiting_publish() {
        let mut confirms = Confirms::default();
        let (w, mut rx) = waiting("a");
        confirms.waiting.insert(1, w);
        confirms.fail_all(&Failure::connect("gone"));
        assert_eq!(
            rx.try_recv().unwrap().unwrap_err().kind,
            crate::model::ErrorKind::Connect
        );
        assert!(confirms.closed);
    }
}
