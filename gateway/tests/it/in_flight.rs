//! `delivery.max_in_flight`, the limit on attempts at once over all endpoints: with more due
//! deliveries than it allows, spread over endpoints whose own limits are higher, the receiver
//! never has more than that many requests open, and still gets every delivery.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::support::{Reply, START, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn never_more_attempts_in_flight_than_the_global_limit() {
    const GLOBAL: usize = 3;
    const EVENTS: usize = 8;
    let sink = Sink::start().await;
    // Every answer takes a while, so that due attempts pile up behind the limit.
    sink.always(Reply::status(200).delayed(Duration::from_millis(100)));
    let endpoints: String = ["a", "b", "c"]
        .iter()
        .map(|name| {
            format!(
                "  {name}:\n    url: {}\n    topics: [t]\n    max_in_flight: 8\n",
                sink.url(&format!("/{name}"))
            )
        })
        .collect();
    let yaml = format!("topics:\n  t: {{}}\nendpoints:\n{endpoints}");
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let gw = TestGateway::start_with(dir, &yaml, hookgate::clock::ManualClock::new(START), |o| {
        o.config.delivery.max_in_flight = GLOBAL as u32;
    })
    .await;
    for i in 0..EVENTS {
        gw.ingest("t", "x", json!({"i": i})).await;
    }
    sink.wait_for(3 * EVENTS, WAIT).await;
    gw.wait_until("/v1/deliveries?status=succeeded&limit=100", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 3 * EVENTS
    })
    .await;
    // 24 attempts of 100 ms each through 3 slots: the limit was reached, and never passed.
    assert_eq!(sink.max_in_flight(), GLOBAL);
    assert_eq!(sink.count(), 3 * EVENTS);
}
