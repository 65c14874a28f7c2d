use std::time::Duration;

use serde_json::json;

use crate::support::{Reply, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(10);

async fn post(gw: &TestGateway, n: u32, key: Option<&str>) {
    let mut body = json!({"type": "x", "payload": {"n": n}});
    if let Some(key) = key {
        body["ordering_key"] = json!(key);
    }
    let (status, answer) = gw.post("/v1/topics/t/events", body).await;
    assert_eq!(status, 202, "{answer}");
}

fn ns(sink: &Sink) -> Vec<u64> {
    sink.received()
        .iter()
        .map(|r| r.json()["n"].as_u64().unwrap())
        .collect()
}

#[tokio::test]
async fn an_ordered_endpoint_holds_a_key_until_its_head_is_delivered() {
    let sink = Sink::start().await;
    // The first delivery fails once; everything else succeeds.
    sink.script([Reply::status(503)]);
    let gw = TestGateway::start(&format!(
        "policies:\n  p:\n    schedule: [0s, 10s]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: p\n    ordered: true\n",
        sink.url("/")
    ))
    .await;
    post(&gw, 1, Some("order-7")).await;
    sink.wait_for(1, WAIT).await;
    post(&gw, 2, Some("order-7")).await;
    post(&gw, 3, Some("order-8")).await;
    post(&gw, 4, None).await;
    // Other keys and unkeyed events are not blocked…
    sink.wait_for(3, WAIT).await;
    gw.wait_until("/v1/deliveries?status=succeeded", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 2
    })
    .await;
    let mut first = ns(&sink);
    first.sort();
    assert_eq!(first, vec![1, 3, 4]);
    // …but event 2 waits behind event 1's retry.
    gw.advance(Duration::from_secs(10)).await;
    sink.wait_for(5, WAIT).await;
    let order = ns(&sink);
    let pos = |n: u64| order.iter().rposition(|x| *x == n).unwrap();
    assert!(pos(1) < pos(2), "event 2 overtook event 1: {order:?}");
    gw.wait_until("/v1/deliveries?status=succeeded", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 4
    })
    .await;
}

#[tokio::test]
async fn a_key_is_released_when_its_head_finally_fails() {
    let sink = Sink::start().await;
    sink.script([Reply::status(500)]);
    let gw = TestGateway::start(&format!(
        "policies:\n  once:\n    schedule: [0s]\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: once\n    ordered: true\n",
        sink.url("/")
    ))
    .await;
    post(&gw, 1, Some("k")).await;
    post(&gw, 2, Some("k")).await;
    sink.wait_for(2, WAIT).await;
    assert_eq!(ns(&sink), vec![1, 2]);
    gw.wait_until("/v1/deliveries?status=failed", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 1
    })
    .await;
    gw.wait_until("/v1/deliveries?status=succeeded", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 1
    })
    .await;
}

#[tokio::test]
async fn without_ordered_the_same_key_is_delivered_concurrently() {
    let sink = Sink::start().await;
    sink.script([Reply::status(503)]);
    let gw = TestGateway::start(&format!(
        "policies:\n  p:\n    schedule: [0s, 1h]\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: p\n",
        sink.url("/")
    ))
    .await;
    post(&gw, 1, Some("k")).await;
    sink.wait_for(1, WAIT).await;
    post(&gw, 2, Some("k")).await;
    sink.wait_for(2, WAIT).await;
    assert_eq!(ns(&sink), vec![1, 2]);
}

#[tokio::test]
async fn order_holds_across_a_restart() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let yaml = format!(
        "policies:\n  p:\n    schedule: [0s, 1m, 1m]\n    jitter: 0\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: p\n    ordered: true\n",
        sink.url("/")
    );
    let mut gw = TestGateway::start(&yaml).await;
    post(&gw, 1, Some("k")).await;
    sink.wait_for(1, WAIT).await;
    post(&gw, 2, Some("k")).await;
    gw.wait_until("/v1/deliveries", WAIT, |l| {
        l["deliveries"][1]["attempt_count"] == 1
    })
    .await;
    gw.stop().await;
    sink.always(Reply::status(200));
    let gw = TestGateway::start_in(gw.dir.clone(), &yaml, gw.clock.clone()).await;
    // After the restart, event 2 (due now) must still wait for event 1 (due in a minute).
    gw.advance(Duration::from_secs(60)).await;
    sink.wait_for(3, WAIT).await;
    gw.wait_until("/v1/deliveries?status=succeeded", WAIT, |l| {
        l["deliveries"].as_array().unwrap().len() == 2
    })
    .await;
    assert_eq!(ns(&sink), vec![1, 1, 2]);
}
