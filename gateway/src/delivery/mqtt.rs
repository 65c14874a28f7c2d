//! MQTT 5: `mqtt://[user:pass@]host:port/TOPIC/LEVELS` (`mqtts://` for TLS). A message is a
//! QoS 1 publish, delivered when the broker's PUBACK says success (or that no one subscribes:
//! the broker still took it); any other PUBACK reason is `rejected`. The headers travel as
//! user properties, the content type as the content-type property.
//!
//! On `rumqttc` (its `v5` client): one connection per broker and credentials, whose event
//! loop runs in a task of the link. The client numbers publishes itself and reports each
//! number as it sends it, in the order the publishes were queued, so the link queues a waiter
//! per publish in that same order and hands it the PUBACK of its number. When the connection
//! breaks, every waiting publish fails with `connect` and the next attempt connects anew.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use rumqttc::{Outgoing, TlsConfiguration, Transport};
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::broker::{
    About, Answer, Broker, BrokerAddress, BrokerTarget, Dialer, Failure, Live, decoded_path, header_pairs,
    opened,
};
use super::{OutgoingMessage, UrlError};

/// Publishes queued in the client at once, beyond which an attempt fails instead of waiting.
const QUEUE: usize = 1024;

/// A topic on an MQTT broker.
#[derive(Clone, Debug, PartialEq)]
pub struct MqttTarget {
    pub server: BrokerAddress,
    pub topic: String,
    pub(super) shown: String,
}

impl BrokerTarget for MqttTarget {
    fn parse(url: &url::Url) -> Result<MqttTarget, UrlError> {
        let (server, shown) = opened(url, "mqtts", [1883, 8883], &[])?;
        let topic = decoded_path(url)?;
        if topic.is_empty() {
            return Err(UrlError::Target(format!(
                "`{shown}` names no topic (mqtt://host:port/TOPIC/LEVELS)"
            )));
        }
        if topic.contains(['+', '#', '\0']) {
            return Err(UrlError::Target(format!(
                "`{topic}` is not a topic to publish to: no wildcards"
            )));
        }
        Ok(MqttTarget { server, topic, shown })
    }

    fn about(&self) -> About<'_> {
        About::new("mqtt", &self.server, &self.shown).goes_to("topic", &self.topic)
    }
}

type Waiter = oneshot::Sender<Result<String, Failure>>;

/// Publishes sent and not yet acknowledged: queued (number not known yet), then by number.
#[derive(Default)]
struct Waiters {
    queued: VecDeque<Waiter>,
    by_pkid: HashMap<u16, Waiter>,
    closed: bool,
}

impl Waiters {
    fn fail_all(&mut self, failure: &Failure) {
        self.closed = true;
        for waiter in self.queued.drain(..).chain(self.by_pkid.drain().map(|(_, w)| w)) {
            let _ = waiter.send(Err(failure.clone()));
        }
    }
}

#[derive(Clone)]
pub(super) struct MqttLink {
    client: AsyncClient,
    waiters: Arc<Mutex<Waiters>>,
    /// Ends the event loop's task when the last handle to the link goes.
    _task: Arc<AbortOnDrop>,
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl MqttLink {
    fn lock(&self) -> std::sync::MutexGuard<'_, Waiters> {
        lock(&self.waiters)
    }
}

fn lock(waiters: &Mutex<Waiters>) -> std::sync::MutexGuard<'_, Waiters> {
    waiters.lock().unwrap_or_else(|p| p.into_inner())
}

impl Live for MqttLink {
    fn is_open(&self) -> bool {
        !self.lock().closed
    }
}

/// Publishes with QoS 1 over one connection per broker and credentials.
pub(super) struct Mqtt;

impl Broker for Mqtt {
    type Target = MqttTarget;
    type Key = BrokerAddress;
    type Link = MqttLink;

    fn key(target: &MqttTarget) -> BrokerAddress {
        target.server.clone()
    }

    async fn dial(dialer: &Dialer, target: &MqttTarget, deadline: Instant) -> Result<MqttLink, Failure> {
        connect(dialer, &target.server, deadline).await
    }

    async fn send(
        link: &MqttLink,
        target: &MqttTarget,
        msg: &OutgoingMessage,
        deadline: Instant,
    ) -> Result<Answer, Failure> {
        let mut properties = PublishProperties::default();
        for (name, value) in header_pairs(&msg.headers) {
            if name == "content-type" {
                properties.content_type = Some(value.clone());
            }
            properties.user_properties.push((name, value));
        }
        let (done, acked) = oneshot::channel();
        {
            // Queued in the order the client will number them.
            let mut waiters = link.lock();
            if waiters.closed {
                return Err(Failure::connect(format!(
                    "the connection to {} is closed",
                    target.server
                )));
            }
            link.client
                .try_publish_with_properties(
                    target.topic.clone(),
                    QoS::AtLeastOnce,
                    false,
                    msg.body.clone(),
                    properties,
                )
                .map_err(|e| Failure::connect(format!("publish to {}: {e}", target.server)))?;
            waiters.queued.push_back(done);
        }
        let reason = tokio::time::timeout_at(deadline, acked)
            .await
            .map_err(|_| Failure::timeout("no PUBACK within the attempt's timeout"))?
            .unwrap_or_else(|_| Err(Failure::connect("the connection to the broker broke")))?;
        Ok(Answer {
            fields: vec![
                ("topic".to_owned(), target.topic.clone()),
                ("puback".to_owned(), reason.clone()),
            ],
            summary: format!("PUBACK: {reason}"),
        })
    }
}

/// What a PUBACK reason means: the broker took the message (its reason as text), or refused it.
fn puback(reason: PubAckReason) -> Result<String, Failure> {
    match reason {
        PubAckReason::Success => Ok("success".to_owned()),
        PubAckReason::NoMatchingSubscribers => Ok("success, no matching subscribers".to_owned()),
        other => Err(Failure::rejected(format!(
            "the broker refused the message: PUBACK {other:?}"
        ))),
    }
}

/// A client connected to the judged address (its CONNACK received), with its event loop
/// running in the link's task.
async fn connect(dialer: &Dialer, server: &BrokerAddress, deadline: Instant) -> Result<MqttLink, Failure> {
    let addr = dialer.judged(server).await?;
    let client_id = format!("hookgate-{}", ulid::Ulid::new());
    let mut options = MqttOptions::new(client_id, addr.ip().to_string(), addr.port());
    options
        .set_keep_alive(Duration::from_secs(30))
        .set_clean_start(true)
        .set_request_channel_capacity(QUEUE)
        .set_connection_timeout(
            deadline
                .saturating_duration_since(Instant::now())
                .as_secs()
                .max(1),
        );
    if let Some(user) = &server.username {
        let pass = server.password.as_ref().map_or("", |p| p.expose());
        options.set_credentials(user.clone(), pass.to_owned());
    }
    if server.tls {
        let config = Arc::new(dialer.tls_config(server)?);
        options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(config)));
    }
    let (client, mut eventloop) = AsyncClient::new(options, QUEUE);
    loop {
        match eventloop.poll().await {
            Ok(Event::Incoming(Packet::ConnAck(_))) => break,
            Ok(_) => {}
            Err(e @ rumqttc::v5::ConnectionError::Tls(_)) => {
                return Err(Failure {
                    kind: crate::model::ErrorKind::Tls,
                    detail: format!("TLS with {server}: {e}"),
                });
            }
            Err(e) => return Err(Failure::connect(format!("connect to {server}: {e}"))),
        }
    }
    let waiters = Arc::new(Mutex::new(Waiters::default()));
    let task = tokio::spawn(drive(eventloop, waiters.clone(), server.to_string()));
    Ok(MqttLink {
        client,
        waiters,
        _task: Arc::new(AbortOnDrop(task)),
    })
}

/// Runs the connection: numbers the queued publishes as the client sends them, answers them
/// with their PUBACKs, and fails them all when the connection ends.
async fn drive(mut eventloop: EventLoop, waiters: Arc<Mutex<Waiters>>, server: String) {
    loop {
        match eventloop.poll().await {
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) => {
                let mut waiters = lock(&waiters);
                if let Some(waiter) = waiters.queued.pop_front() {
                    waiters.by_pkid.insert(pkid, waiter);
                }
            }
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                if let Some(waiter) = lock(&waiters).by_pkid.remove(&ack.pkid) {
                    let _ = waiter.send(puback(ack.reason));
                }
            }
            Ok(Event::Incoming(Packet::Disconnect(disconnect))) => {
                let failure = Failure::connect(format!(
                    "{server} closed the connection: {:?}",
                    disconnect.reason_code
                ));
                lock(&waiters).fail_all(&failure);
                return;
            }
            Ok(_) => {}
            Err(e) => {
                let failure = Failure::connect(format!("the connection to {server} broke: {e}"));
                lock(&waiters).fail_all(&failure);
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<MqttTarget, UrlError> {
        MqttTarget::parse(&url::Url::parse(text).unwrap())
    }

    #[test]
    fn a_topic_is_required_and_may_not_be_a_wildcard() {
        let t = parse("mqtt://h/shop/orders").unwrap();
        assert_eq!((t.topic.as_str(), t.server.port), ("shop/orders", 1883));
        assert_eq!(parse("mqtts://h/x").unwrap().server.port, 8883);
        for bad in [
            "mqtt://h/",
            "mqtt://h/shop/+",
            "mqtt://h/shop/%23",
            "mqtt://h/a?qos=2",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn only_success_reasons_are_delivered() {
        assert!(puback(PubAckReason::Success).is_ok());
        assert!(puback(PubAckReason::NoMatchingSubscribers).is_ok());
        for refused in [
            PubAckReason::NotAuthorized,
            PubAckReason::QuotaExceeded,
            PubAckReason::TopicNameInvalid,
        ] {
            assert_eq!(
                puback(refused).unwrap_err().kind,
                crate::model::ErrorKind::Rejected
            );
        }
    }

    #[test]
    fn a_broken_connection_fails_queued_and_numbered_publishes() {
        let mut waiters = Waiters::default();
        let (a, mut ra) = oneshot::channel();
        let (b, mut rb) = oneshot::channel();
        waiters.queued.push_back(a);
        waiters.by_pkid.insert(7, b);
        waiters.fail_all(&Failure::connect("gone"));
        assert!(ra.try_recv().unwrap().is_err());
        assert!(rb.try_recv().unwrap().is_err());
        assert!(waiters.closed);
    }
}
