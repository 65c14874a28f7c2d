//! `amqps://`, `rediss://` and `mqtts://`: the gateway speaks TLS to the broker, verifies its
//! certificate for the URL's host name against `delivery.ca_certs` (here a private CA), and
//! refuses a certificate that does not name the host. The broker is the real one behind a
//! TLS front (NATS upgrades to TLS inside its own protocol, so a front cannot stand in for it).

use std::net::SocketAddr;
use std::sync::Arc;

use serde_json::json;

use super::amqp::AmqpFixture;
use super::mqtt::MqttFixture;
use super::redis::RedisFixture;
use super::{Fixture, tls_front};
use crate::support::{START, TestGateway, WAIT, deliveries_of};
use crate::tls::test_pki;

/// `url` with its scheme made the TLS one and its address `host:port`.
fn over_tls(url: &str, scheme: &str, host: &str, port: u16) -> String {
    let (_, rest) = url.split_once("://").unwrap();
    let (authority, path) = rest.split_at(rest.find('/').unwrap());
    let credentials = authority
        .rsplit_once('@')
        .map(|(c, _)| format!("{c}@"))
        .unwrap_or_default();
    format!("{scheme}://{credentials}{host}:{port}{path}")
}

async fn tls_case<F: Fixture>(f: F, scheme: &str) {
    let pki = test_pki();
    let (front, _task) = tls_front(f.broker_addr(), &pki).await;
    let plain = f.url(SocketAddr::from(([127, 0, 0, 1], front.port())));
    let good = over_tls(&plain, scheme, "localhost", front.port());
    // The certificate names `localhost`, not the address.
    let wrong_name = over_tls(&plain, scheme, "127.0.0.1", front.port());
    let ca = pki.ca.clone();
    let gw = TestGateway::start_with(
        Arc::new(tempfile::tempdir().unwrap()),
        &format!(
            "policies:\n  once:\n    schedule: [0s]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  good:\n    url: '{good}'\n    topics: [t]\n    policy: once\n  wrong-name:\n    url: '{wrong_name}'\n    topics: [t]\n    policy: once\n"
        ),
        hookgate::clock::ManualClock::new(START),
        move |o| o.config.delivery.extra_roots.push(ca),
    )
    .await;
    let event = gw.ingest("t", "x", json!({"n": 1})).await;
    let got = super::common::wait_received(&f, 1).await;
    assert_eq!(got[0].header("webhook-id"), event["id"].as_str(), "{scheme}");
    let delivery = deliveries_of(&gw, "wrong-name").await[0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let detail = gw
        .wait_until(&format!("/v1/deliveries/{delivery}"), WAIT, |d| {
            d["status"] == "failed"
        })
        .await;
    assert_eq!(detail["attempts"][0]["error_kind"], "tls", "{scheme}: {detail}");
    assert_eq!(
        f.received().await.len(),
        1,
        "{scheme}: the wrong name got nothing through"
    );
    f.cleanup().await;
}

#[tokio::test]
async fn amqps_verifies_the_brokers_certificate_for_the_host_name() {
    let Some(f) = AmqpFixture::new().await else { return };
    tls_case(f, "amqps").await;
}

#[tokio::test]
async fn rediss_verifies_the_servers_certificate_for_the_host_name() {
    let Some(f) = RedisFixture::new().await else {
        return;
    };
    tls_case(f, "rediss").await;
}

#[tokio::test]
async fn mqtts_verifies_the_brokers_certificate_for_the_host_name() {
    let Some(f) = MqttFixture::new().await else { return };
    tls_case(f, "mqtts").await;
}
