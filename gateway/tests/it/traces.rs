//! OpenTelemetry traces: a test OTLP/HTTP collector on loopback receives the ingestion span
//! and the attempt spans in one trace (the app's, when it sent a `traceparent`); every webhook
//! carries the `traceparent` of its attempt span and every attempt record its `trace_id`; a
//! collector that is down or never answers changes nothing in delivery, and what it costs in
//! spans is counted.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{Value, json};
use tokio::sync::Notify;

use crate::support::{Reply, Sink, TestGateway, WAIT, metric};

/// One span as the collector got it, with its resource's `service.name`.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    span: Span,
}

impl Got {
    fn trace_id(&self) -> String {
        hex::encode(&self.span.trace_id)
    }

    fn span_id(&self) -> String {
        hex::encode(&self.span.span_id)
    }

    fn parent_span_id(&self) -> String {
        hex::encode(&self.span.parent_span_id)
    }

    fn attr(&self, key: &str) -> Option<AnyValue> {
        attribute(&self.span.attributes, key)
    }

    fn int(&self, key: &str) -> Option<i64> {
        match self.attr(key)? {
            AnyValue::IntValue(n) => Some(n),
            other => panic!("{key} is {other:?}"),
        }
    }

    fn text(&self, key: &str) -> Option<String> {
        match self.attr(key)? {
            AnyValue::StringValue(s) => Some(s),
            other => panic!("{key} is {other:?}"),
        }
    }
}

fn attribute(attributes: &[KeyValue], key: &str) -> Option<AnyValue> {
    attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| kv.value.clone()?.value)
}

#[derive(Default)]
struct CollectorState {
    spans: Mutex<Vec<Got>>,
    requests: Mutex<Vec<String>>,
    /// Answer this status instead of taking the spans.
    refuse_with: Mutex<Option<u16>>,
    notify: Notify,
}

/// An OTLP/HTTP receiver: decodes each `ExportTraceServiceRequest` it is sent.
struct Collector {
    addr: std::net::SocketAddr,
    state: Arc<CollectorState>,
    _server: tokio::task::JoinHandle<()>,
}

async fn collect(
    State(state): State<Arc<CollectorState>>,
    uri: axum::http::Uri,
    headers: axum::http::HeaderMap,
    body: Bytes,
) -> axum::http::StatusCode {
    let content_type = headers
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    state
        .requests
        .lock()
        .unwrap()
        .push(format!("{} {content_type}", uri.path()));
    if let Some(status) = *state.refuse_with.lock().unwrap() {
        return axum::http::StatusCode::from_u16(status).unwrap();
    }
    let request = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
    let mut spans = state.spans.lock().unwrap();
    for resource_spans in request.resource_spans {
        let service = resource_spans
            .resource
            .as_ref()
            .and_then(|r| attribute(&r.attributes, "service.name"))
            .map(|v| match v {
                AnyValue::StringValue(s) => s,
                other => panic!("service.name is {other:?}"),
            })
            .unwrap_or_default();
        for scope_spans in resource_spans.scope_spans {
            for span in scope_spans.spans {
                spans.push(Got {
                    service: service.clone(),
                    span,
                });
            }
        }
    }
    state.notify.notify_waiters();
    axum::http::StatusCode::OK
}

impl Collector {
    async fn start() -> Collector {
        let state = Arc::new(CollectorState::default());
        let app = axum::Router::new().fallback(collect).with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Collector {
            addr,
            state,
            _server: server,
        }
    }

    /// Waits until at least `n` spans arrived (or panics after `within` of real time).
    async fn wait_for(&self, n: usize, within: Duration) -> Vec<Got> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.state.notify.notified();
            {
                let spans = self.state.spans.lock().unwrap();
                if spans.len() >= n {
                    return spans.clone();
                }
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!(
                    "the collector got {} spans, expected {n}",
                    self.state.spans.lock().unwrap().len()
                );
            }
        }
    }
}

fn yaml(sink: &Sink, collector: &str, extra_telemetry: &str) -> String {
    format!(
        "telemetry:\n  otlp_endpoint: {collector}\n  service_name: checkout-hooks\n{extra_telemetry}\
         policies:\n  quick:\n    schedule: [0s, 1s]\n    jitter: 0\n\
         topics:\n  t: {{}}\n\
         endpoints:\n  e:\n    url: {}\n    topics: [t]\n    policy: quick\n",
        sink.url("/hook")
    )
}

async fn wait_delivered(gw: &TestGateway, n: usize) -> Vec<Value> {
    gw.wait_until("/v1/deliveries", WAIT, |list| {
        let all = list["deliveries"].as_array().cloned().unwrap_or_default();
        all.len() == n && all.iter().all(|d| d["status"] == "succeeded")
    })
    .await["deliveries"]
        .as_array()
        .unwrap()
        .clone()
}

#[tokio::test]
async fn ingestion_and_attempt_spans_continue_the_apps_trace_and_the_webhooks_carry_it() {
    let collector = Collector::start().await;
    let sink = Sink::start().await;
    sink.script([Reply::status(503)]);
    let gw = TestGateway::start(&yaml(&sink, &format!("http://{}", collector.addr), "")).await;

    let app_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let app_span = "00f067aa0ba902b7";
    let (status, accepted) = gw
        .send(
            gw.post_builder("/v1/topics/t/events")
                .header("traceparent", format!("00-{app_trace}-{app_span}-01"))
                .json(&json!({"type": "order.created", "payload": {"id": 42}})),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let event_id = accepted["id"].as_str().unwrap().to_owned();

    // The first attempt fails (503); the second, a second later, succeeds.
    sink.wait_for(1, WAIT).await;
    gw.advance(Duration::from_secs(1)).await;
    let webhooks = sink.wait_for(2, WAIT).await;
    let delivery = wait_delivered(&gw, 1).await.remove(0);
    let delivery_id = delivery["id"].as_str().unwrap().to_owned();

    let spans = collector.wait_for(3, WAIT).await;
    assert_eq!(spans.len(), 3, "{spans:#?}");
    assert!(spans.iter().all(|s| s.trace_id() == app_trace), "{spans:#?}");
    assert!(spans.iter().all(|s| s.service == "checkout-hooks"), "{spans:#?}");
    let ingest = spans
        .iter()
        .find(|s| s.span.name == "ingest")
        .expect("an ingestion span");
    assert_eq!(
        ingest.parent_span_id(),
        app_span,
        "the ingestion span's parent is the app's"
    );
    assert_eq!(
        ingest.text("hookgate.event_id").as_deref(),
        Some(event_id.as_str())
    );
    assert_eq!(ingest.int("http.response.status_code"), Some(202));

    let mut attempts: Vec<&Got> = spans.iter().filter(|s| s.span.name == "attempt").collect();
    attempts.sort_by_key(|s| s.int("hookgate.attempt"));
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    for (i, attempt) in attempts.iter().enumerate() {
        assert_eq!(
            attempt.parent_span_id(),
            ingest.span_id(),
            "attempts are children of the ingestion"
        );
        assert_eq!(attempt.int("hookgate.attempt"), Some(i as i64 + 1));
        assert_eq!(
            attempt.text("hookgate.event_id").as_deref(),
            Some(event_id.as_str())
        );
        assert_eq!(
            attempt.text("hookgate.delivery_id").as_deref(),
            Some(delivery_id.as_str())
        );
        assert_eq!(attempt.text("hookgate.endpoint").as_deref(), Some("e"));
        // Each webhook names its own attempt's span.
        assert_eq!(
            webhooks[i].header("traceparent"),
            format!("00-{app_trace}-{}-01", attempt.span_id())
        );
    }
    assert_eq!(attempts[0].int("http.response.status_code"), Some(503));
    assert_eq!(attempts[0].text("error.type").as_deref(), Some("http_status"));
    assert_eq!(attempts[1].int("http.response.status_code"), Some(200));
    assert_eq!(attempts[1].attr("error.type"), None);

    // The attempt records and the event show the trace.
    let (_, detail) = gw.get(&format!("/v1/deliveries/{delivery_id}")).await;
    let recorded: Vec<&Value> = detail["attempts"].as_array().unwrap().iter().collect();
    assert_eq!(recorded.len(), 2, "{detail}");
    assert!(recorded.iter().all(|a| a["trace_id"] == app_trace), "{detail}");
    let (_, event) = gw.get(&format!("/v1/events/{event_id}")).await;
    assert_eq!(event["trace_id"], app_trace, "{event}");

    // OTLP/HTTP with protobuf, to the traces path under the configured base URL.
    let requests = collector.state.requests.lock().unwrap().clone();
    assert!(
        requests.iter().all(|r| r == "/v1/traces application/x-protobuf"),
        "{requests:?}"
    );
    let logs = crate::support::captured_logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("attempt failed") && l.contains(app_trace)),
        "the failed attempt's log line names its trace"
    );
}

#[tokio::test]
async fn a_batch_without_a_traceparent_starts_one_trace_for_its_events() {
    let collector = Collector::start().await;
    let sink = Sink::start().await;
    let gw = TestGateway::start(&yaml(&sink, &format!("http://{}/", collector.addr), "")).await;
    let (status, accepted) = gw
        .post(
            "/v1/topics/t/events/batch",
            json!({"events": [{"type": "a", "payload": {}}, {"type": "b", "payload": {}}]}),
        )
        .await;
    assert_eq!(status, 202, "{accepted}");
    let webhooks = sink.wait_for(2, WAIT).await;
    wait_delivered(&gw, 2).await;

    let spans = collector.wait_for(3, WAIT).await;
    let ingest = spans
        .iter()
        .find(|s| s.span.name == "ingest")
        .expect("an ingestion span");
    assert!(ingest.span.parent_span_id.is_empty(), "a new trace's root");
    assert_eq!(ingest.int("hookgate.event_count"), Some(2));
    let attempts: Vec<&Got> = spans.iter().filter(|s| s.span.name == "attempt").collect();
    assert_eq!(attempts.len(), 2, "{spans:#?}");
    for attempt in &attempts {
        assert_eq!(attempt.trace_id(), ingest.trace_id());
        assert_eq!(attempt.parent_span_id(), ingest.span_id());
    }
    for webhook in &webhooks {
        let traceparent = webhook.header("traceparent");
        assert!(
            traceparent.starts_with(&format!("00-{}-", ingest.trace_id())),
            "{traceparent}"
        );
    }
}

#[tokio::test]
async fn an_unreachable_collector_changes_nothing_in_delivery() {
    // A closed loopback port: every export fails at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = closed.local_addr().unwrap().port();
    drop(closed);
    let sink = Sink::start().await;
    let gw = TestGateway::start(&yaml(&sink, &format!("http://127.0.0.1:{port}"), "")).await;
    for n in 0..20 {
        gw.ingest("t", "x", json!({"n": n})).await;
    }
    let webhooks = sink.wait_for(20, WAIT).await;
    let deliveries = wait_delivered(&gw, 20).await;
    assert!(
        deliveries
            .iter()
            .all(|d| d["attempt_count"] == 1 && d["last_error"].is_null())
    );
    assert!(webhooks.iter().all(|w| w.header("traceparent").len() == 55));
    // The spans were not exported, and that is counted.
    let text = wait_counter(
        &gw,
        "hookgate_trace_spans_dropped_total{reason=\"export_failed\"}",
        1,
    )
    .await;
    assert_eq!(
        metric(&text, "hookgate_trace_spans_exported_total"),
        0.0,
        "{text}"
    );
}

/// Waits until the counter series reaches `at_least`; returns the metrics text then.
async fn wait_counter(gw: &TestGateway, series: &str, at_least: u64) -> String {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let text = gw.metrics_text().await;
        if metric(&text, series) >= at_least as f64 {
            return text;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{series} below {at_least}:\n{text}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test]
async fn a_refusing_collector_gets_each_batch_once_and_delivery_goes_on() {
    let collector = Collector::start().await;
    *collector.state.refuse_with.lock().unwrap() = Some(503);
    let sink = Sink::start().await;
    let gw = TestGateway::start(&yaml(&sink, &format!("http://{}", collector.addr), "")).await;
    gw.ingest("t", "x", json!({})).await;
    sink.wait_for(1, WAIT).await;
    wait_delivered(&gw, 1).await;
    // Both spans (ingestion and attempt) are dropped once their batch was refused...
    wait_counter(
        &gw,
        "hookgate_trace_spans_dropped_total{reason=\"export_failed\"}",
        2,
    )
    .await;
    // ...without a retry: a retry would wait inside the exporter and pile batches up behind
    // a collector that is down. One request per batch, and at most two batches.
    let requests = collector.state.requests.lock().unwrap().len();
    assert!(
        (1..=2).contains(&requests),
        "{requests} export requests for two spans"
    );
}

#[tokio::test]
async fn a_collector_that_never_answers_fills_the_bounded_queue_and_drops_are_counted() {
    // Accepts connections and never answers: an export waits for its timeout.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let held = Arc::new(Mutex::new(Vec::new()));
    let holder = held.clone();
    let _silent = tokio::spawn(async move {
        while let Ok((socket, _)) = silent.accept().await {
            holder.lock().unwrap().push(socket);
        }
    });
    let sink = Sink::start().await;
    let mut gw = TestGateway::start(&yaml(&sink, &format!("http://{addr}"), "  max_queue_spans: 1\n")).await;
    for n in 0..10 {
        gw.ingest("t", "x", json!({"n": n})).await;
    }
    sink.wait_for(10, WAIT).await;
    let deliveries = wait_delivered(&gw, 10).await;
    assert!(
        deliveries
            .iter()
            .all(|d| d["attempt_count"] == 1 && d["last_error"].is_null())
    );
    // 20 spans; one export in flight and a queue of one: most are dropped at once.
    let text = gw.metrics_text().await;
    assert!(
        metric(&text, "hookgate_trace_spans_dropped_total{reason=\"queue_full\"}") > 0.0,
        "{text}"
    );
    // Shutdown does not wait for the silent collector's export timeout.
    gw.stop().await;
}

#[test]
fn the_telemetry_section_is_checked_like_every_other() {
    let load = |section: &str| hookgate::config::load_str(section, "test.yaml", None, |_| None);
    let config = load("telemetry:\n  otlp_endpoint: http://collector:4318\n").unwrap();
    let telemetry = config.telemetry.expect("configured");
    assert_eq!(
        telemetry.traces_url.to_string(),
        "http://collector:4318/v1/traces"
    );
    assert_eq!(telemetry.service_name, "hookgate");
    let config = load("telemetry:\n  otlp_endpoint: https://otel.example.com/custom/traces\n").unwrap();
    assert_eq!(
        config.telemetry.unwrap().traces_url.to_string(),
        "https://otel.example.com/custom/traces"
    );
    assert!(load("topics:\n  t: {}\n").unwrap().telemetry.is_none());

    let err = |section: &str| load(section).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err("telemetry: {}\n").contains("telemetry.otlp_endpoint: required"));
    assert!(err("telemetry:\n  otlp_endpoint: ftp://x\n").contains("telemetry.otlp_endpoint: "));
    assert!(
        err("telemetry:\n  otlp_endpoint: http://c:4318\n  max_queue_spans: 0\n")
            .contains("telemetry.max_queue_spans: 0 is outside")
    );
    assert!(
        err("telemetry:\n  otlp_endpoint: http://c:4318\n  sample: 1\n").contains("sample"),
        "unknown keys are refused"
    );
    let refused = err(
        "topics:\n  t: {}\nendpoints:\n  e:\n    url: https://example.com/\n    topics: [t]\n    \
         headers:\n      traceparent: x\n",
    );
    assert!(
        refused.contains("endpoints.e.headers.traceparent: `traceparent` is set by the gateway"),
        "an endpoint cannot set traceparent: {refused}"
    );
}

#[tokio::test]
async fn a_broker_attempts_span_names_the_messaging_system_and_destination() {
    use crate::destinations::Fixture as _;
    let Some(stream) = crate::destinations::redis::RedisFixture::new().await else {
        return;
    };
    let collector = Collector::start().await;
    let gw = TestGateway::start(&format!(
        "telemetry:\n  otlp_endpoint: http://{}\ntopics:\n  t: {{}}\nendpoints:\n  e:\n    url: '{}'\n    topics: [t]\n",
        collector.addr,
        stream.url(stream.broker_addr())
    ))
    .await;
    gw.ingest("t", "x", json!({})).await;
    let spans = collector.wait_for(2, WAIT).await;
    let attempt = spans
        .iter()
        .find(|s| s.attr("hookgate.attempt").is_some())
        .expect("an attempt span");
    assert_eq!(attempt.text("messaging.system").as_deref(), Some("redis"));
    let name = attempt.text("messaging.destination.name").unwrap();
    assert!(name.starts_with("hgtest_"), "{name}");
    assert_eq!(attempt.text("messaging.operation.type").as_deref(), Some("send"));
    assert_eq!(attempt.attr("http.request.method"), None);
    assert_eq!(attempt.attr("http.response.status_code"), None);
    stream.cleanup().await;
}
