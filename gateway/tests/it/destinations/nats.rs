//! NATS JetStream destinations: a stream of the test's own covering `<name>.>`; the consumer
//! reads the stream with async-nats.

use std::net::SocketAddr;
use std::time::Duration;

use async_nats::jetstream;

use super::{Fixture, Got, address_of, broker, common, unique};

pub struct NatsFixture {
    broker: SocketAddr,
    js: jetstream::Context,
    stream: String,
    prefix: String,
}

impl NatsFixture {
    pub async fn new() -> Option<NatsFixture> {
        let url = broker("HOOKGATE_TEST_NATS")?;
        let broker = address_of(&url);
        let client = async_nats::connect(broker.to_string())
            .await
            .expect("NATS is reachable");
        let js = jetstream::new(client);
        let name = unique();
        let config = jetstream::stream::Config {
            name: name.clone(),
            subjects: vec![format!("{name}.>")],
            duplicate_window: Duration::from_secs(120),
            ..Default::default()
        };
        // nats-server removes an account's stream folder with its last stream; a create that
        // races that removal (another test's stream deleted at the same moment) fails with
        // "error creating store for stream". Trying again makes the folder anew.
        let mut tries = 0;
        while let Err(e) = js.create_stream(config.clone()).await {
            tries += 1;
            assert!(tries < 5, "creating the test's stream: {e:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Some(NatsFixture {
            broker,
            js,
            stream: name.clone(),
            prefix: name,
        })
    }

    /// The messages the stream holds (each once: JetStream dropped the duplicates).
    pub async fn stored(&self) -> u64 {
        let mut stream = self.js.get_stream(&self.stream).await.unwrap();
        stream.info().await.unwrap().state.messages
    }
}

impl Fixture for NatsFixture {
    const KIND: &'static str = "nats";

    fn broker_addr(&self) -> SocketAddr {
        self.broker
    }

    fn url(&self, addr: SocketAddr) -> String {
        format!("nats://{addr}/{}.orders.created", self.prefix)
    }

    /// No stream covers this subject.
    fn refused_url(&self, addr: SocketAddr) -> String {
        format!("nats://{addr}/{}.nostream.orders", unique())
    }

    async fn received(&self) -> Vec<Got> {
        let stream = self.js.get_stream(&self.stream).await.unwrap();
        let mut got = Vec::new();
        let mut sequence = 1;
        while let Ok(message) = stream.get_raw_message(sequence).await {
            let headers = message
                .headers
                .iter()
                .flat_map(|(name, values)| {
                    values
                        .iter()
                        .map(move |value| (name.to_string(), value.to_string()))
                })
                .collect();
            got.push(Got {
                headers,
                body: message.payload.to_vec(),
            });
            sequence += 1;
        }
        got
    }

    async fn cleanup(self) {
        let _ = self.js.delete_stream(&self.stream).await;
    }
}

#[tokio::test]
async fn events_arrive_signed_with_their_headers() {
    let Some(f) = NatsFixture::new().await else { return };
    common::arrives_signed(f).await;
}

#[tokio::test]
async fn a_subject_without_a_stream_is_retried_then_dead_lettered() {
    let Some(f) = NatsFixture::new().await else { return };
    common::refused_is_retried_then_dead_lettered(f).await;
}

#[tokio::test]
async fn a_server_that_is_down_degrades_the_endpoint() {
    let Some(f) = NatsFixture::new().await else { return };
    common::down_degrades_the_endpoint(f).await;
}

#[tokio::test]
async fn per_key_order_holds_under_retries() {
    let Some(f) = NatsFixture::new().await else { return };
    common::per_key_order_holds_under_retries(f).await;
}

#[tokio::test]
async fn the_message_id_is_the_event_id_and_a_copy_is_dropped() {
    let Some(f) = NatsFixture::new().await else { return };
    let url = f.url(f.broker_addr());
    let gw = crate::support::TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: '{url}'\n    topics: [t]\n"
    ))
    .await;
    let event = gw.ingest("t", "x", serde_json::json!({"n": 1})).await;
    common::wait_received(&f, 1).await;
    let id = event["id"].as_str().unwrap();
    let got = f.received().await;
    assert_eq!(got[0].header("nats-msg-id"), Some(id));
    // A redelivery is the same message to JetStream: answered, not stored again.
    let delivery = crate::support::deliveries_of(&gw, "e").await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, _) = gw
        .post(
            &format!("/v1/deliveries/{delivery}/redeliver"),
            serde_json::json!({}),
        )
        .await;
    assert_eq!(status, 202);
    let detail = gw
        .wait_until(&format!("/v1/deliveries/{delivery}"), crate::support::WAIT, |d| {
            d["status"] == "succeeded" && d["round"] == 2
        })
        .await;
    let answer = &detail["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["round"] == 2)
        .unwrap()["response_body"];
    assert!(answer.as_str().unwrap().contains("duplicate"), "{detail}");
    assert_eq!(f.stored().await, 1);
    f.cleanup().await;
}
