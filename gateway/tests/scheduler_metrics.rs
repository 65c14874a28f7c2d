#![allow(unreachable_pub)]

//! The scheduler reports how late attempts start against their planned time
//! (`hookgate_attempt_lateness_seconds`), the figure the benchmark's lateness target is about.
//!
//! A test binary of its own: the metrics recorder is process-wide, and in the shared
//! integration binary other tests' gateways render it at the same time. A histogram value
//! recorded while another rendering drains the histogram can be missing from the next
//! rendering (seen once in a CI run under load), so the count compared here must have no
//! other readers.

#[allow(dead_code)]
#[path = "it/support.rs"]
mod support;

use std::time::Duration;

use serde_json::json;

use crate::support::{Reply, Sink, TestGateway};

/// The cumulative count of the lateness histogram's bucket `le`, from the Prometheus text.
async fn lateness_bucket(gw: &TestGateway, le: &str) -> u64 {
    let text = gw
        .http
        .get(format!("{}/metrics", gw.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let prefix = format!("hookgate_attempt_lateness_seconds_bucket{{le=\"{le}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0, |v| v.trim().parse().unwrap())
}

#[tokio::test]
async fn a_retry_started_late_is_recorded_with_its_lateness() {
    let sink = Sink::start().await;
    sink.script([Reply::status(503)]);
    let gw = TestGateway::start(&format!(
        "policies:\n  fixed: {{schedule: [0s, 10s], jitter: 0}}\ntopics:\n  t: {{}}\n\
         endpoints:\n  e: {{url: {}, topics: [t], policy: fixed}}\n",
        sink.url("/hook")
    ))
    .await;
    gw.ingest("t", "x", json!({})).await;
    sink.wait_for(1, Duration::from_secs(10)).await;
    gw.wait_until("/v1/deliveries", Duration::from_secs(10), |v| {
        v["deliveries"][0]["attempt_count"] == 1
    })
    .await;
    // Other tests of this binary share the process-wide recorder, so compare the count of
    // attempts at least a second late before and after rather than absolute counts.
    let between =
        async |gw: &TestGateway| lateness_bucket(gw, "+Inf").await - lateness_bucket(gw, "1.0005").await;
    let before = between(&gw).await;

    // The retry is planned 10 s after the first attempt; the clock jumps 13 s at once, so
    // the scheduler starts it 3 s late.
    gw.advance(Duration::from_secs(13)).await;
    sink.wait_for(2, Duration::from_secs(10)).await;
    let after = between(&gw).await;
    assert!(after > before, "lateness of 3 s not recorded: {before} → {after}");
}
