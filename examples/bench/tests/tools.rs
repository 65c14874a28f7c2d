//! The measuring tools against a real gateway, at toy scale: the load generator's counts and
//! the sink's agree with what the gateway accepted, and every delivery verifies.

use std::sync::Arc;
use std::time::Duration;

use hookgate::clock::SystemClock;
use hookgate::{Gateway, GatewayOptions};
use hookgate_loadgen::{Api, Client, Shape, Stop, Target, closed_loop, open_loop, wait_for_sink};
use hookgate_sink::{Sink, SinkOptions};

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn loadgen_and_sink_measure_a_real_gateway() {
    let sink = Sink::start(SinkOptions {
        secret: Some(SECRET.into()),
        ..SinkOptions::loopback()
    })
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let yaml = format!(
        "storage:\n  path: {d}/hookgate.db\nplugins:\n  dir: {d}/plugins\n  bundled: false\ndelivery:\n  allow_networks: [127.0.0.0/8]\n\
         topics:\n  orders: {{}}\nendpoints:\n  a: {{url: '{}', topics: [orders], secret: {SECRET}}}\n  \
         b: {{url: '{}', topics: [orders], secret: {SECRET}}}\n",
        sink.url("/a"),
        sink.url("/b")
    );
    let config = hookgate::config::load_str(&yaml, "bench.yaml", None, |_| None).unwrap();
    let mut options = GatewayOptions::new(config, Arc::new(SystemClock));
    options.listener = Some(std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    let gateway = Gateway::start(options).await.unwrap();

    let client = Client::new(8);
    let target = Target {
        base_url: format!("http://{}", gateway.addr()),
        topic: "orders".into(),
        api: Api::Native,
        api_key: None,
        event_type: "order.paid".into(),
        payload_bytes: 300,
        record_ids: true,
    };
    let batches = closed_loop(&client, &target, Shape::Batch(20), 2, Stop::Requests(5))
        .await
        .unwrap();
    assert_eq!(
        (batches.requests, batches.events_accepted, batches.errors),
        (5, 100, 0)
    );
    assert_eq!(batches.deliveries, 200, "fan-out to both endpoints");
    assert_eq!(batches.latency_us.len(), 5);

    let singles = open_loop(
        &client,
        &target,
        Shape::Single,
        50.0,
        Duration::from_millis(200),
        64,
    )
    .await
    .unwrap();
    assert_eq!(
        (singles.requests, singles.events_accepted, singles.dropped),
        (10, 10, 0)
    );

    let stats = wait_for_sink(&client, &sink.url("/stats"), 220, Duration::from_secs(30))
        .await
        .unwrap();
    assert_eq!(stats.answered_ok, 220);
    assert_eq!(
        stats.distinct_ids, 110,
        "one webhook-id per event, shared by its two deliveries"
    );
    assert_eq!((stats.signatures_valid, stats.signatures_invalid), (220, 0));
    // The ids the load generator was given back are exactly the ids the receiver acknowledged.
    let mut accepted: Vec<String> = batches
        .accepted_ids
        .iter()
        .chain(&singles.accepted_ids)
        .cloned()
        .collect();
    accepted.sort();
    assert_eq!(accepted.len(), 110);
    assert_eq!(accepted, sink.ok_ids());
    assert_eq!(stats.distinct_ids_ok, 110);
    assert!(
        stats.body_bytes >= 220 * 250,
        "payloads arrive whole: {}",
        stats.body_bytes
    );
    gateway.shutdown().await;
}
