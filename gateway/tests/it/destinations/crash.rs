//! `kill -9` of the real gateway while it delivers to all four brokers loses no acknowledged
//! event: what the killed process had not published yet is published after the restart
//! (at least once), and JetStream stores each event once however often it was published.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::json;

use super::amqp::AmqpFixture;
use super::mqtt::MqttFixture;
use super::nats::NatsFixture;
use super::redis::RedisFixture;
use super::{Fixture, Got, Relay};
use crate::binary::RealGateway;

const PER_PHASE: usize = 40;
const PATIENCE: Duration = Duration::from_secs(30);

fn ids_of(got: &[Got]) -> BTreeSet<String> {
    got.iter()
        .filter_map(|m| m.header("webhook-id").map(str::to_owned))
        .collect()
}

async fn ingest(gw: &RealGateway, phase: usize, acked: &mut Vec<String>) {
    for n in 0..PER_PHASE {
        let (status, body) = gw
            .post(
                "/v1/topics/t/events",
                json!({"type": "x", "payload": {"phase": phase, "n": n}}),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        acked.push(body["id"].as_str().unwrap().to_owned());
    }
}

/// Waits (real time) until the fixture holds every id of `want`.
async fn wait_all<F: Fixture>(f: &F, want: &BTreeSet<String>) -> Vec<Got> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let got = f.received().await;
        if ids_of(&got).is_superset(want) {
            return got;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{}: {} of {} acknowledged events arrived",
            F::KIND,
            ids_of(&got).intersection(want).count(),
            want.len()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_mid_stream_to_brokers_loses_nothing_acknowledged() {
    let (Some(nats), Some(amqp), Some(redis), Some(mqtt)) = (
        NatsFixture::new().await,
        AmqpFixture::new().await,
        RedisFixture::new().await,
        MqttFixture::new().await,
    ) else {
        return;
    };
    let relays = [
        Relay::start(nats.broker_addr()).await,
        Relay::start(amqp.broker_addr()).await,
        Relay::start(redis.broker_addr()).await,
        Relay::start(mqtt.broker_addr()).await,
    ];
    let urls = [
        nats.url(relays[0].addr),
        amqp.url(relays[1].addr),
        redis.url(relays[2].addr),
        mqtt.url(relays[3].addr),
    ];
    let dir = tempfile::tempdir().unwrap();
    let mut yaml = format!(
        "delivery:\n  allow_networks: [127.0.0.0/8]\n  timeout: 2s\npolicies:\n  patient:\n    schedule: [0s{}]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n",
        ", 300ms".repeat(90)
    );
    for (kind, url) in ["nats", "amqp", "redis", "mqtt"].iter().zip(&urls) {
        yaml.push_str(&format!(
            "  {kind}:\n    url: '{url}'\n    topics: [t]\n    policy: patient\n"
        ));
    }

    let mut acked = Vec::new();
    let gw = RealGateway::start(dir.path(), &yaml, &[]).await;
    ingest(&gw, 0, &mut acked).await;
    let first: BTreeSet<String> = acked.iter().cloned().collect();
    wait_all(&nats, &first).await;
    // The brokers become unreachable: what is acknowledged now stays pending…
    for relay in &relays {
        relay.down();
    }
    ingest(&gw, 1, &mut acked).await;
    // …when the gateway dies.
    drop(gw);
    let all: BTreeSet<String> = acked.iter().cloned().collect();
    assert!(
        !ids_of(&nats.received().await).is_superset(&all),
        "everything was published before the kill: the test killed nothing mid-stream"
    );

    for relay in &relays {
        relay.up();
    }
    let _gw = RealGateway::start(dir.path(), &yaml, &[]).await;
    wait_all(&nats, &all).await;
    wait_all(&amqp, &all).await;
    wait_all(&redis, &all).await;
    wait_all(&mqtt, &all).await;
    // At least once everywhere; exactly once in JetStream, which drops a copy by its
    // Nats-Msg-Id.
    assert_eq!(nats.stored().await, all.len() as u64);
    nats.cleanup().await;
    amqp.cleanup().await;
    redis.cleanup().await;
    mqtt.cleanup().await;
}
