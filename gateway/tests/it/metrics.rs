//! `GET /metrics`: each gateway renders its own recorder, so the figures here are exact even
//! with dozens of gateways running in this process.

use std::time::Duration;

use serde_json::json;

use crate::support::{Reply, Sink, TestGateway};

/// The value of the series whose line starts with `series ` (0 when it is absent).
async fn value(gw: &TestGateway, series: &str) -> f64 {
    crate::support::metric(&gw.metrics_text().await, series)
}

/// The scheduler reports how late attempts start against their planned time
/// (`hookgate_attempt_lateness_seconds`), the figure the benchmark's lateness target is about.
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
    let late = async |gw: &TestGateway| {
        value(gw, "hookgate_attempt_lateness_seconds_bucket{le=\"+Inf\"}").await
            - value(gw, "hookgate_attempt_lateness_seconds_bucket{le=\"1.0005\"}").await
    };
    assert_eq!(late(&gw).await, 0.0, "the first attempt started on time");

    // The retry is planned 10 s after the first attempt; the clock jumps 13 s at once, so
    // the scheduler starts it 3 s late.
    gw.advance(Duration::from_secs(13)).await;
    sink.wait_for(2, Duration::from_secs(10)).await;
    gw.wait_until("/v1/deliveries", Duration::from_secs(10), |v| {
        v["deliveries"][0]["status"] == "succeeded"
    })
    .await;
    assert_eq!(
        late(&gw).await,
        1.0,
        "exactly one attempt started more than 1 s late"
    );
}

/// Two gateways in one process count separately: what one ingests never shows in the other's
/// figures (a process-wide recorder mixed them).
#[tokio::test]
async fn two_gateways_in_one_process_keep_their_own_figures() {
    let yaml = "topics:\n  shared_name: {}\n";
    let (one, two) = (TestGateway::start(yaml).await, TestGateway::start(yaml).await);
    for _ in 0..3 {
        one.ingest("shared_name", "x", json!({})).await;
    }
    two.ingest("shared_name", "x", json!({})).await;
    let series = "hookgate_events_ingested_total{topic=\"shared_name\"}";
    assert_eq!(value(&one, series).await, 3.0);
    assert_eq!(value(&two, series).await, 1.0);
}
