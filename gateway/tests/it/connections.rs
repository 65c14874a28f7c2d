//! Outgoing connections: keep-alive connections are reused across the endpoints that share a
//! host, however many attempts run at once.

use std::time::Duration;

use serde_json::json;

use crate::support::{Reply, Sink, TestGateway};

const ENDPOINTS: usize = 10;
/// `delivery.max_in_flight_per_endpoint`'s default.
const PER_ENDPOINT: usize = 16;
const EVENTS: usize = 100;

/// Ten endpoints on one host, each allowed 16 attempts at once (the default): up to 160
/// requests to that host are in flight together. The connections opened for the first wave
/// go back to the pool afterwards, so a second wave of the same size opens none — an idle cap
/// below the concurrency (it was 64 per host) closed and reopened connections on every wave,
/// and a fan-out to one customer's API cost a TCP handshake per delivery.
#[tokio::test]
async fn endpoints_sharing_a_host_reuse_their_connections() {
    let sink = Sink::start().await;
    // Slow answers make the attempts overlap, so each wave really holds 160 connections.
    sink.always(Reply::status(200).delayed(Duration::from_millis(20)));
    let mut yaml = String::from("topics:\n  t: {}\nendpoints:\n");
    for i in 0..ENDPOINTS {
        yaml.push_str(&format!(
            "  e{i}:\n    url: {}\n    topics: [t]\n",
            sink.url(&format!("/e{i}"))
        ));
    }
    let gw = TestGateway::start(&yaml).await;

    let mut after_wave = Vec::new();
    for wave in 1..=2 {
        let events: Vec<_> = (0..EVENTS)
            .map(|i| json!({"type": "order.created", "payload": {"wave": wave, "n": i}}))
            .collect();
        let (status, body) = gw
            .post("/v1/topics/t/events/batch", json!({"events": events}))
            .await;
        assert_eq!(status, 202, "{body}");
        sink.wait_for(wave * EVENTS * ENDPOINTS, Duration::from_secs(60))
            .await;
        after_wave.push(sink.connections());
    }
    let (first, second) = (after_wave[0], after_wave[1]);
    assert!(
        first >= PER_ENDPOINT,
        "the first wave used only {first} connections: the attempts did not overlap"
    );
    assert_eq!(
        second,
        first,
        "the second wave of {} deliveries opened {} new connections instead of reusing the {first} \
         of the first",
        EVENTS * ENDPOINTS,
        second - first
    );
}
