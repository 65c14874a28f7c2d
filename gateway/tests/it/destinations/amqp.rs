//! RabbitMQ destinations: an exchange and a queue bound to it of the test's own, and an
//! exchange no queue is bound to (the broker returns what is published there); the consumer
//! reads the queue with amqprs.

use std::net::SocketAddr;
use std::sync::Mutex;

use amqprs::FieldValue;
use amqprs::channel::{
    BasicGetArguments, Channel, ExchangeDeclareArguments, ExchangeDeleteArguments, QueueBindArguments,
    QueueDeclareArguments, QueueDeleteArguments,
};
use amqprs::connection::{Connection, OpenConnectionArguments};

use super::{Fixture, Got, address_of, broker, common, unique};

pub struct AmqpFixture {
    broker: SocketAddr,
    credentials: String,
    connection: Connection,
    channel: Channel,
    exchange: String,
    unbound: String,
    queue: String,
    got: Mutex<Vec<Got>>,
}

impl AmqpFixture {
    pub async fn new() -> Option<AmqpFixture> {
        let url = broker("HOOKGATE_TEST_AMQP")?;
        let broker = address_of(&url);
        let (user, pass) = (url.username().to_owned(), url.password().unwrap_or("").to_owned());
        let args = OpenConnectionArguments::new(&broker.ip().to_string(), broker.port(), &user, &pass);
        let connection = Connection::open(&args).await.expect("RabbitMQ is reachable");
        let channel = connection.open_channel(None).await.unwrap();
        let name = unique();
        let (exchange, unbound, queue) = (
            format!("{name}.x"),
            format!("{name}.unbound"),
            format!("{name}.q"),
        );
        for x in [&exchange, &unbound] {
            channel
                .exchange_declare(ExchangeDeclareArguments::new(x, "direct"))
                .await
                .unwrap();
        }
        channel
            .queue_declare(QueueDeclareArguments::new(&queue))
            .await
            .unwrap();
        channel
            .queue_bind(QueueBindArguments::new(&queue, &exchange, "orders"))
            .await
            .unwrap();
        Some(AmqpFixture {
            broker,
            credentials: format!("{user}:{pass}"),
            connection,
            channel,
            exchange,
            unbound,
            queue,
            got: Mutex::default(),
        })
    }
}

fn text(value: &FieldValue) -> String {
    match value {
        FieldValue::S(s) => s.as_ref().clone(),
        other => other.to_string(),
    }
}

impl Fixture for AmqpFixture {
    const KIND: &'static str = "amqp";

    fn broker_addr(&self) -> SocketAddr {
        self.broker
    }

    fn url(&self, addr: SocketAddr) -> String {
        format!(
            "amqp://{}@{addr}/%2f?exchange={}&routing_key=orders",
            self.credentials, self.exchange
        )
    }

    /// No queue is bound to this exchange: the broker returns the message.
    fn refused_url(&self, addr: SocketAddr) -> String {
        format!(
            "amqp://{}@{addr}/%2f?exchange={}&routing_key=orders",
            self.credentials, self.unbound
        )
    }

    async fn received(&self) -> Vec<Got> {
        let mut args = BasicGetArguments::new(&self.queue);
        args.no_ack = true;
        while let Some((_, properties, body)) = self.channel.basic_get(args.clone()).await.unwrap() {
            let mut headers: Vec<(String, String)> = properties
                .headers()
                .map(|table| {
                    table
                        .as_ref()
                        .iter()
                        .map(|(name, value)| (name.as_ref().clone(), text(value)))
                        .collect()
                })
                .unwrap_or_default();
            if let Some(id) = properties.message_id() {
                headers.push(("amqp-message-id".to_owned(), id.clone()));
            }
            if properties.delivery_mode() == Some(2) {
                headers.push(("amqp-persistent".to_owned(), "true".to_owned()));
            }
            self.got.lock().unwrap().push(Got { headers, body });
        }
        self.got.lock().unwrap().clone()
    }

    async fn cleanup(self) {
        let _ = self
            .channel
            .queue_delete(QueueDeleteArguments::new(&self.queue))
            .await;
        for x in [&self.exchange, &self.unbound] {
            let _ = self
                .channel
                .exchange_delete(ExchangeDeleteArguments::new(x))
                .await;
        }
        let _ = self.channel.close().await;
        let _ = self.connection.close().await;
    }
}

#[tokio::test]
async fn events_arrive_signed_with_their_headers() {
    let Some(f) = AmqpFixture::new().await else { return };
    common::arrives_signed(f).await;
}

#[tokio::test]
async fn published_persistent_with_the_event_id_as_message_id() {
    let Some(f) = AmqpFixture::new().await else { return };
    let url = f.url(f.broker_addr());
    let gw = crate::support::TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: '{url}'\n    topics: [t]\n"
    ))
    .await;
    let event = gw.ingest("t", "x", serde_json::json!({"n": 1})).await;
    let got = common::wait_received(&f, 1).await;
    assert_eq!(got[0].header("amqp-message-id"), event["id"].as_str());
    assert_eq!(got[0].header("amqp-persistent"), Some("true"));
    f.cleanup().await;
}

#[tokio::test]
async fn an_unroutable_message_is_retried_then_dead_lettered() {
    let Some(f) = AmqpFixture::new().await else { return };
    common::refused_is_retried_then_dead_lettered(f).await;
}

#[tokio::test]
async fn a_broker_that_is_down_degrades_the_endpoint() {
    let Some(f) = AmqpFixture::new().await else { return };
    common::down_degrades_the_endpoint(f).await;
}

#[tokio::test]
async fn per_key_order_holds_under_retries() {
    let Some(f) = AmqpFixture::new().await else { return };
    common::per_key_order_holds_under_retries(f).await;
}

#[tokio::test]
async fn an_exchange_that_does_not_exist_is_rejected_and_the_next_message_gets_through() {
    let Some(f) = AmqpFixture::new().await else { return };
    let missing = f
        .url(f.broker_addr())
        .replace(&f.exchange, &format!("{}.missing", f.exchange));
    let good = f.url(f.broker_addr());
    let gw = crate::support::TestGateway::start(&format!(
        "policies:\n  once:\n    schedule: [0s]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  missing:\n    url: '{missing}'\n    topics: [t]\n    policy: once\n  good:\n    url: '{good}'\n    topics: [t]\n    policy: once\n"
    ))
    .await;
    for n in 0..3 {
        gw.ingest("t", "x", serde_json::json!({"n": n})).await;
    }
    common::wait_received(&f, 3).await;
    for delivery in crate::support::deliveries_of(&gw, "missing").await {
        let id = delivery["id"].as_str().unwrap();
        let detail = gw
            .wait_until(&format!("/v1/deliveries/{id}"), crate::support::WAIT, |d| {
                d["status"] == "failed"
            })
            .await;
        let attempt = &detail["attempts"][0];
        assert_eq!(attempt["error_kind"], "rejected", "{attempt}");
        assert!(
            attempt["error"].as_str().unwrap().contains("NOT_FOUND"),
            "{attempt}"
        );
    }
    f.cleanup().await;
}
