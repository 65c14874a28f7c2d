use std::time::Duration;

use hookgate::model::Timestamp;
use serde_json::{Value, json};

use crate::support::{Reply, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(10);

fn endpoint_yaml(sink: &Sink, extra: &str) -> String {
    format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n{extra}",
        sink.url("/hook")
    )
}

fn time(v: &Value) -> Timestamp {
    Timestamp::parse_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}"))).unwrap()
}

/// Waits until the delivery has `n` attempts recorded and returns it.
async fn after_attempts(gw: &TestGateway, id: &str, n: u64) -> Value {
    gw.wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| {
        d["attempt_count"].as_u64() == Some(n) && d["status"] != "delivering"
    })
    .await
}

async fn first_delivery(gw: &TestGateway) -> String {
    let (_, list) = gw.get("/v1/deliveries").await;
    list["deliveries"][0]["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn the_standard_schedule_waits_within_jitter_and_ends_at_the_72_hour_deadline() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let gw = TestGateway::start(&endpoint_yaml(&sink, "")).await;
    let received_at = gw.now();
    gw.ingest("t", "x", json!({})).await;
    let id = first_delivery(&gw).await;

    let waits_s = [30u64, 120, 600, 3_600, 14_400, 43_200, 86_400, 172_800];
    let deadline = received_at.plus(Duration::from_secs(72 * 3600));
    let mut last_attempt_at = received_at;
    for (i, wait) in waits_s.iter().enumerate() {
        let attempts = (i + 1) as u64;
        let d = after_attempts(&gw, &id, attempts).await;
        assert_eq!(d["status"], "pending", "{d}");
        let next = time(&d["next_attempt_at"]);
        let planned = next.since(last_attempt_at).as_secs_f64();
        let nominal = *wait as f64;
        if next == deadline {
            // The 9th attempt would fall after 72 h: it is brought forward to the deadline.
            assert_eq!(attempts, 8, "only the last attempt is clamped");
        } else {
            assert!(
                planned >= nominal * 0.8 - 0.001 && planned <= nominal * 1.2 + 0.001,
                "attempt {}: wait {planned} s for {nominal} s",
                attempts + 1
            );
        }
        gw.advance_to(next).await;
        sink.wait_for(attempts as usize + 1, WAIT).await;
        last_attempt_at = next;
    }
    let d = gw
        .wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| d["status"] == "failed")
        .await;
    assert_eq!(d["attempt_count"], 9);
    let attempts = d["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 9);
    assert_eq!(time(&attempts[8]["started_at"]), deadline);
    assert!(d["last_error"].as_str().unwrap().contains("http_status"), "{d}");
    // Every attempt said which one it was.
    let numbers: Vec<String> = sink
        .received()
        .iter()
        .map(|r| r.header("hookgate-delivery-attempt").to_owned())
        .collect();
    assert_eq!(numbers, (1..=9).map(|n| n.to_string()).collect::<Vec<_>>());
}

#[tokio::test]
async fn a_redirect_is_a_failure_and_is_not_followed() {
    let sink = Sink::start().await;
    sink.always(Reply::status(302).with_header("location", "/elsewhere"));
    let gw = TestGateway::start(&endpoint_yaml(&sink, "")).await;
    gw.ingest("t", "x", json!({})).await;
    let id = first_delivery(&gw).await;
    let d = after_attempts(&gw, &id, 1).await;
    assert_eq!(d["attempts"][0]["error_kind"], "redirect");
    assert_eq!(d["attempts"][0]["status_code"], 302);
    assert_eq!(d["status"], "pending");
    assert!(sink.received().iter().all(|r| r.path == "/hook"));
}

#[tokio::test]
async fn a_slow_endpoint_times_out() {
    let sink = Sink::start().await;
    sink.always(Reply::status(200).delayed(Duration::from_secs(5)));
    let gw = TestGateway::start(&endpoint_yaml(&sink, "    timeout: 200ms\n")).await;
    gw.ingest("t", "x", json!({})).await;
    let id = first_delivery(&gw).await;
    let d = after_attempts(&gw, &id, 1).await;
    assert_eq!(d["attempts"][0]["error_kind"], "timeout");
    assert!(d["attempts"][0]["duration_ms"].as_u64().unwrap() < 2_000);
}

#[tokio::test]
async fn retry_after_in_seconds_pushes_the_next_attempt_back() {
    let sink = Sink::start().await;
    sink.script([Reply::status(429).with_header("retry-after", "7200")]);
    let gw = TestGateway::start(&endpoint_yaml(&sink, "")).await;
    gw.ingest("t", "x", json!({})).await;
    let id = first_delivery(&gw).await;
    let d = after_attempts(&gw, &id, 1).await;
    // The standard wait is 30 s ± 20 %; the receiver asked for two hours.
    assert_eq!(
        time(&d["next_attempt_at"]),
        gw.now().plus(Duration::from_secs(7200))
    );
}

#[tokio::test]
async fn retry_after_as_an_http_date_is_honoured_and_capped_at_24_hours() {
    let sink = Sink::start().await;
    let gw_start = crate::support::START;
    let in_an_hour = httpdate::fmt_http_date(gw_start.plus(Duration::from_secs(3600)).to_system_time());
    let in_a_week = httpdate::fmt_http_date(gw_start.plus(Duration::from_secs(7 * 86_400)).to_system_time());
    sink.script([
        Reply::status(503).with_header("retry-after", &in_an_hour),
        Reply::status(503).with_header("retry-after", &in_a_week),
    ]);
    let gw = TestGateway::start(&endpoint_yaml(&sink, "")).await;
    gw.ingest("t", "x", json!({})).await;
    let id = first_delivery(&gw).await;
    let d = after_attempts(&gw, &id, 1).await;
    let next = time(&d["next_attempt_at"]);
    assert_eq!(next, gw_start.plus(Duration::from_secs(3600)));
    gw.advance_to(next).await;
    let d = after_attempts(&gw, &id, 2).await;
    assert_eq!(
        time(&d["next_attempt_at"]),
        next.plus(Duration::from_secs(86_400))
    );
}

#[tokio::test]
async fn a_user_schedule_policy_sets_the_waits() {
    let sink = Sink::start().await;
    sink.always(Reply::status(500));
    let gw = TestGateway::start(&format!(
        "policies:\n  quick:\n    schedule: [0s, 1s, 5s]\n    jitter: 0\n{}",
        endpoint_yaml(&sink, "    policy: quick\n")
    ))
    .await;
    let t0 = gw.now();
    gw.ingest("t", "x", json!({})).await;
    let id = first_delivery(&gw).await;
    let d = after_attempts(&gw, &id, 1).await;
    assert_eq!(time(&d["next_attempt_at"]), t0.plus(Duration::from_secs(1)));
    gw.advance(Duration::from_secs(1)).await;
    let d = after_attempts(&gw, &id, 2).await;
    assert_eq!(time(&d["next_attempt_at"]), t0.plus(Duration::from_secs(6)));
    gw.advance(Duration::from_secs(5)).await;
    let d = gw
        .wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| d["status"] == "failed")
        .await;
    assert_eq!(d["attempt_count"], 3);
}

#[tokio::test]
async fn under_sns_classification_a_404_is_permanent() {
    let sink = Sink::start().await;
    sink.always(Reply::status(404));
    let gw = TestGateway::start(&format!(
        "policies:\n  strict:\n    schedule: [0s, 1s, 5s]\n    retry_on: sns\n{}",
        endpoint_yaml(&sink, "    policy: strict\n")
    ))
    .await;
    gw.ingest("t", "x", json!({})).await;
    let id = first_delivery(&gw).await;
    let d = gw
        .wait_until(&format!("/v1/deliveries/{id}"), WAIT, |d| d["status"] == "failed")
        .await;
    assert_eq!(d["attempt_count"], 1);
    assert!(d["last_error"].as_str().unwrap().contains("permanent"), "{d}");
}
