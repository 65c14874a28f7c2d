//! MQTT 5 destinations: a topic of the test's own with a subscriber (rumqttc) that collects
//! what arrives, and a `$SYS/…` topic, which brokers refuse to clients (Mosquitto answers the
//! PUBACK with "not authorized").

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};

use super::{Fixture, Got, address_of, broker, common, unique};

pub struct MqttFixture {
    broker: SocketAddr,
    topic: String,
    got: Arc<Mutex<Vec<Got>>>,
    client: AsyncClient,
    subscriber: tokio::task::JoinHandle<()>,
}

impl MqttFixture {
    pub async fn new() -> Option<MqttFixture> {
        let url = broker("HOOKGATE_TEST_MQTT")?;
        let broker = address_of(&url);
        let name = unique();
        let topic = format!("{name}/orders");
        let mut options =
            MqttOptions::new(format!("{name}-consumer"), broker.ip().to_string(), broker.port());
        options.set_keep_alive(Duration::from_secs(30));
        let (client, mut eventloop) = AsyncClient::new(options, 64);
        client.subscribe(&topic, QoS::AtLeastOnce).await.unwrap();
        // Subscribed once the broker acknowledged it: nothing published after is missed.
        loop {
            match eventloop.poll().await.expect("Mosquitto is reachable") {
                Event::Incoming(Packet::SubAck(_)) => break,
                _ => continue,
            }
        }
        let got: Arc<Mutex<Vec<Got>>> = Arc::default();
        let collected = got.clone();
        let subscriber = tokio::spawn(async move {
            while let Ok(event) = eventloop.poll().await {
                if let Event::Incoming(Packet::Publish(publish)) = event {
                    let headers = publish.properties.map(|p| p.user_properties).unwrap_or_default();
                    collected.lock().unwrap().push(Got {
                        headers,
                        body: publish.payload.to_vec(),
                    });
                }
            }
        });
        Some(MqttFixture {
            broker,
            topic,
            got,
            client,
            subscriber,
        })
    }
}

impl Fixture for MqttFixture {
    const KIND: &'static str = "mqtt";

    fn broker_addr(&self) -> SocketAddr {
        self.broker
    }

    fn url(&self, addr: SocketAddr) -> String {
        format!("mqtt://{addr}/{}", self.topic)
    }

    /// Clients may not publish to `$SYS`: the broker refuses it in its PUBACK.
    fn refused_url(&self, addr: SocketAddr) -> String {
        format!("mqtt://{addr}/$SYS/{}", unique())
    }

    async fn received(&self) -> Vec<Got> {
        self.got.lock().unwrap().clone()
    }

    async fn cleanup(self) {
        let _ = self.client.disconnect().await;
        self.subscriber.abort();
    }
}

#[tokio::test]
async fn events_arrive_signed_with_their_headers() {
    let Some(f) = MqttFixture::new().await else { return };
    common::arrives_signed(f).await;
}

#[tokio::test]
async fn a_refused_publish_is_retried_then_dead_lettered() {
    let Some(f) = MqttFixture::new().await else { return };
    common::refused_is_retried_then_dead_lettered(f).await;
}

#[tokio::test]
async fn a_broker_that_is_down_degrades_the_endpoint() {
    let Some(f) = MqttFixture::new().await else { return };
    common::down_degrades_the_endpoint(f).await;
}

#[tokio::test]
async fn per_key_order_holds_under_retries() {
    let Some(f) = MqttFixture::new().await else { return };
    common::per_key_order_holds_under_retries(f).await;
}
