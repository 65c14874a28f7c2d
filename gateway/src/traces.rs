//! Distributed traces: the W3C trace context in (`traceparent` on ingestion) and out
//! (`traceparent` on every webhook), and the OpenTelemetry spans of ingestion requests and
//! attempts, exported over OTLP/HTTP when `telemetry.otlp_endpoint` is set.
//!
//! The ids are always made, exporting or not: they are a few random bytes, and they give every
//! webhook its `traceparent` and every attempt record its `trace_id`. Span data is built only
//! when an exporter is configured ([`Traces::is_exporting`]).
//!
//! Export never slows or fails delivery. A finished span goes into a bounded queue with a
//! non-blocking `try_send`; when the queue is full the span is dropped and counted
//! (`hookgate_trace_spans_dropped_total{reason="queue_full"}`). One task, owned by the gateway,
//! takes what is queued in batches and sends each batch to the collector; a batch the
//! collector refuses or never answers (within [`EXPORT_TIMEOUT`]) is dropped and counted
//! (`reason="export_failed"`), never retried into a growing backlog.
//!
//! The spans are built as `SpanData` directly rather than through an SDK tracer: the gateway
//! picks its own ids (the attempt's span id is in the webhook before the span ends) and its
//! own timestamps, and nothing runs per span but building that struct.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use opentelemetry::trace::{SpanContext, SpanKind, Status, TraceFlags, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanExporter, SpanLinks};
use rand::Rng;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::TelemetryConfig;
use crate::model::{EventTrace, SpanId, TraceId};
use crate::telemetry::Metrics;

/// The W3C trace context header.
pub const TRACEPARENT: HeaderName = HeaderName::from_static("traceparent");

/// Spans sent to the collector in one request at most.
const MAX_EXPORT_BATCH: usize = 512;
/// How long one export may take before its batch is dropped.
pub const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the last export at shutdown may take.
const FINAL_EXPORT_TIMEOUT: Duration = Duration::from_secs(2);
/// The largest collector answer read.
const MAX_RESPONSE_BYTES: usize = 64 * 1024;

/// A random trace id, never the invalid all-zero one.
pub fn new_trace_id() -> TraceId {
    TraceId::from(rand::rng().random_range(1..=u128::MAX))
}

/// A random span id, never the invalid all-zero one.
pub fn new_span_id() -> SpanId {
    SpanId::from(rand::rng().random_range(1..=u64::MAX))
}

/// The trace id and parent span id of a W3C `traceparent` header, or None when it is not a
/// valid one (the W3C rule: then the receiver starts a new trace). Version `00` must be exactly
/// 55 characters; a later version may carry more after a `-`; `ff` is never valid.
pub fn parse_traceparent(value: &[u8]) -> Option<(TraceId, SpanId)> {
    let text = std::str::from_utf8(value).ok()?.trim_matches([' ', '\t']);
    let lower_hex = |s: &str| {
        !s.is_empty()
            && s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    };
    if text.len() < 55 {
        return None;
    }
    let (head, rest) = text.split_at(55);
    let version = &head[0..2];
    if !lower_hex(version) || version == "ff" || (version == "00" && !rest.is_empty()) {
        return None;
    }
    if !rest.is_empty() && !rest.starts_with('-') {
        return None;
    }
    let bytes = head.as_bytes();
    if bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
        return None;
    }
    let (trace, span, flags) = (&head[3..35], &head[36..52], &head[53..55]);
    if !lower_hex(trace) || !lower_hex(span) || !lower_hex(flags) {
        return None;
    }
    let trace_id = TraceId::from_hex(trace).ok()?;
    let span_id = SpanId::from_hex(span).ok()?;
    (trace_id != TraceId::INVALID && span_id != SpanId::INVALID).then_some((trace_id, span_id))
}

/// The `traceparent` value naming `span` of `trace`, sampled: `00-<trace>-<span>-01`.
pub fn traceparent(trace: TraceId, span: SpanId) -> HeaderValue {
    HeaderValue::from_str(&format!("00-{trace}-{span}-01")).expect("hex digits and dashes")
}

/// The gateway's traces: ids for everyone, and the span queue when an exporter is configured.
/// Cheap to clone.
#[derive(Clone, Default)]
pub struct Traces {
    export: Option<Arc<Export>>,
}

struct Export {
    queue: mpsc::Sender<SpanData>,
    scope: InstrumentationScope,
    dropped_queue_full: metrics::Counter,
}

impl std::fmt::Debug for Traces {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traces")
            .field("exporting", &self.is_exporting())
            .finish()
    }
}

/// The span of one ingestion request, from its first byte to its answer.
#[derive(Debug, Clone)]
pub struct IngestSpan {
    /// What the request's events store: this span's trace and id.
    pub trace: EventTrace,
    /// The app's span, when the request carried a valid `traceparent`.
    parent: Option<SpanId>,
    started: SystemTime,
}

impl IngestSpan {
    pub fn trace_id(&self) -> TraceId {
        self.trace.trace_id
    }
}

/// What an attempt span says, gathered by the attempt pipeline.
#[derive(Debug)]
pub struct AttemptSpan<'a> {
    pub trace_id: TraceId,
    pub span_id: SpanId,
    /// The ingestion span, or None for an attempt at the root of its trace.
    pub parent: Option<SpanId>,
    pub started: SystemTime,
    pub ended: SystemTime,
    pub event_id: &'a str,
    pub delivery_id: &'a str,
    pub endpoint: &'a str,
    pub attempt: u32,
    pub status_code: Option<u16>,
    /// A broker attempt's messaging system and destination name (see
    /// `Destination::messaging`); None for HTTP.
    pub messaging: Option<(&'static str, &'a str)>,
    /// The error kind of a failed attempt.
    pub error_kind: Option<&'static str>,
    /// The failure's detail, as the span's status message.
    pub error: Option<&'a str>,
    /// Time spent in plugins during the attempt.
    pub plugin_time: Option<Duration>,
}

impl Traces {
    /// Traces that make ids and export nothing.
    pub fn disabled() -> Traces {
        Traces::default()
    }

    /// The traces of `config`, with the task that exports them (None when nothing is
    /// exported). The task belongs to the caller, which runs it until shutdown.
    pub fn start(
        config: Option<&TelemetryConfig>,
        extra_roots: &[rustls::pki_types::CertificateDer<'static>],
        metrics: &Metrics,
    ) -> anyhow::Result<(Traces, Option<ExportTask>)> {
        let Some(config) = config else {
            return Ok((Traces::disabled(), None));
        };
        let mut exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(CollectorClient::new(extra_roots)?)
            .with_endpoint(config.traces_url.to_string())
            .with_protocol(opentelemetry_otlp::Protocol::HttpBinary)
            .with_timeout(EXPORT_TIMEOUT)
            // A failed batch is dropped, not retried: retries would build a backlog behind a
            // collector that is down, and the exporter's retry waits could block a runtime
            // thread.
            .with_retry_policy(opentelemetry_otlp::RetryPolicy::disabled())
            .build()
            .map_err(|e| anyhow::anyhow!("building the OTLP exporter: {e}"))?;
        exporter.set_resource(
            &opentelemetry_sdk::Resource::builder_empty()
                .with_service_name(config.service_name.clone())
                .build(),
        );
        Ok(Self::with_exporter(exporter, config.max_queue_spans, metrics))
    }

    /// Traces that queue up to `max_queue` spans for `exporter`.
    pub fn with_exporter<E: SpanExporter + 'static>(
        exporter: E,
        max_queue: usize,
        metrics: &Metrics,
    ) -> (Traces, Option<ExportTask>) {
        let (queue, spans) = mpsc::channel(max_queue.max(1));
        let traces = Traces {
            export: Some(Arc::new(Export {
                queue,
                scope: InstrumentationScope::builder("hookgate")
                    .with_version(env!("CARGO_PKG_VERSION"))
                    .build(),
                dropped_queue_full: metrics.trace_spans_dropped("queue_full"),
            })),
        };
        let task = ExportTask {
            spans,
            export: {
                let exporter = Arc::new(exporter);
                Box::new(move |batch| {
                    let exporter = exporter.clone();
                    Box::pin(async move { exporter.export(batch).await })
                })
            },
            dropped_export_failed: metrics.trace_spans_dropped("export_failed"),
            exported: metrics.trace_spans_exported(),
            final_timeout: FINAL_EXPORT_TIMEOUT,
        };
        (traces, Some(task))
    }

    /// Whether spans are exported; when not, nobody needs to build one.
    pub fn is_exporting(&self) -> bool {
        self.export.is_some()
    }

    /// Starts the span of an ingestion request, continuing the app's trace when `headers`
    /// carry a valid `traceparent`.
    pub fn start_ingest(&self, headers: &HeaderMap) -> IngestSpan {
        let parent = headers
            .get(TRACEPARENT)
            .and_then(|v| parse_traceparent(v.as_bytes()));
        IngestSpan {
            trace: EventTrace {
                trace_id: parent.map_or_else(new_trace_id, |(trace, _)| trace),
                span_id: Some(new_span_id()),
            },
            parent: parent.map(|(_, span)| span),
            started: SystemTime::now(),
        }
    }

    /// Ends an ingestion span: the request's answer `status` and the events it stored (none
    /// when it failed or replayed an earlier answer).
    pub fn end_ingest(&self, span: IngestSpan, path: &str, topic: &str, event_ids: &[String], status: u16) {
        let Some(export) = &self.export else { return };
        let mut attributes = vec![
            KeyValue::new("http.request.method", "POST"),
            KeyValue::new("url.path", path.to_owned()),
            KeyValue::new("hookgate.topic", topic.to_owned()),
            KeyValue::new("hookgate.event_count", event_ids.len() as i64),
            KeyValue::new("http.response.status_code", i64::from(status)),
        ];
        if let [id] = event_ids {
            attributes.push(KeyValue::new("hookgate.event_id", id.clone()));
        } else if !event_ids.is_empty() {
            let ids: Vec<opentelemetry::StringValue> = event_ids.iter().map(|id| id.clone().into()).collect();
            attributes.push(KeyValue::new(
                "hookgate.event_ids",
                opentelemetry::Value::Array(ids.into()),
            ));
        }
        let status = if status >= 500 {
            Status::error(format!("answered {status}"))
        } else {
            Status::Unset
        };
        export.send(SpanData {
            span_context: span_context(span.trace.trace_id, span.trace.span_id.unwrap_or(SpanId::INVALID)),
            parent_span_id: span.parent.unwrap_or(SpanId::INVALID),
            parent_span_is_remote: span.parent.is_some(),
            span_kind: SpanKind::Server,
            name: Cow::Borrowed("ingest"),
            start_time: span.started,
            end_time: SystemTime::now(),
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: export.scope.clone(),
        });
    }

    /// Records an attempt's span.
    pub fn attempt(&self, span: AttemptSpan<'_>) {
        let Some(export) = &self.export else { return };
        let mut attributes = vec![
            KeyValue::new("hookgate.event_id", span.event_id.to_owned()),
            KeyValue::new("hookgate.delivery_id", span.delivery_id.to_owned()),
            KeyValue::new("hookgate.endpoint", span.endpoint.to_owned()),
            KeyValue::new("hookgate.attempt", i64::from(span.attempt)),
        ];
        match span.messaging {
            None => attributes.push(KeyValue::new("http.request.method", "POST")),
            Some((system, destination)) => {
                attributes.push(KeyValue::new("messaging.system", system));
                attributes.push(KeyValue::new(
                    "messaging.destination.name",
                    destination.to_owned(),
                ));
                attributes.push(KeyValue::new("messaging.operation.type", "send"));
            }
        }
        if let Some(code) = span.status_code {
            attributes.push(KeyValue::new("http.response.status_code", i64::from(code)));
        }
        if let Some(kind) = span.error_kind {
            attributes.push(KeyValue::new("error.type", kind));
        }
        if let Some(took) = span.plugin_time {
            attributes.push(KeyValue::new(
                "hookgate.plugin_time_ms",
                took.as_secs_f64() * 1000.0,
            ));
        }
        let status = match (span.error_kind, span.error) {
            (Some(_), Some(detail)) => Status::error(detail.to_owned()),
            (Some(kind), None) => Status::error(kind),
            _ => Status::Unset,
        };
        export.send(SpanData {
            span_context: span_context(span.trace_id, span.span_id),
            parent_span_id: span.parent.unwrap_or(SpanId::INVALID),
            parent_span_is_remote: false,
            span_kind: SpanKind::Client,
            name: Cow::Borrowed("attempt"),
            start_time: span.started,
            end_time: span.ended,
            attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: export.scope.clone(),
        });
    }
}

impl Export {
    /// Queues a span, or drops and counts it when the queue is full: never waits.
    fn send(&self, span: SpanData) {
        match self.queue.try_send(span) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => self.dropped_queue_full.increment(1),
            // The export task has ended: the gateway is stopping.
            Err(mpsc::error::TrySendError::Closed(_)) => {}
        }
    }
}

fn span_context(trace: TraceId, span: SpanId) -> SpanContext {
    SpanContext::new(trace, span, TraceFlags::SAMPLED, false, TraceState::NONE)
}

type ExportFuture = std::pin::Pin<Box<dyn Future<Output = opentelemetry_sdk::error::OTelSdkResult> + Send>>;
type ExportFn = Box<dyn Fn(Vec<SpanData>) -> ExportFuture + Send + Sync>;

/// The task that sends queued spans to the collector, one batch at a time.
pub struct ExportTask {
    spans: mpsc::Receiver<SpanData>,
    export: ExportFn,
    dropped_export_failed: metrics::Counter,
    exported: metrics::Counter,
    /// How long the last export at shutdown may take.
    final_timeout: Duration,
}

impl ExportTask {
    /// Exports until `shutdown`, then sends what is still queued once, briefly — unless the
    /// collector was not answering: shutdown never waits for a collector that is down.
    pub async fn run(mut self, shutdown: CancellationToken) {
        let mut batch = Vec::with_capacity(MAX_EXPORT_BATCH);
        let mut failing = false;
        loop {
            let received = tokio::select! {
                _ = shutdown.cancelled() => break,
                n = self.spans.recv_many(&mut batch, MAX_EXPORT_BATCH) => n,
            };
            if received == 0 {
                return;
            }
            let n = batch.len() as u64;
            let export = self.send(std::mem::take(&mut batch), EXPORT_TIMEOUT);
            let ok = tokio::select! {
                _ = shutdown.cancelled() => {
                    self.dropped_export_failed.increment(n);
                    failing = true;
                    break;
                }
                ok = export => ok,
            };
            if ok == failing {
                // Once per change, not once per batch: a collector that is down stays quiet.
                if ok {
                    tracing::info!("trace export works again");
                } else {
                    tracing::warn!("trace export failed; spans are dropped until the collector answers");
                }
                failing = !ok;
            }
        }
        let mut spans = self.spans;
        spans.close();
        while let Ok(span) = spans.try_recv() {
            batch.push(span);
        }
        if failing {
            self.dropped_export_failed.increment(batch.len() as u64);
            return;
        }
        for chunk in batch.chunks(MAX_EXPORT_BATCH) {
            if !send(
                &self.export,
                &self.exported,
                &self.dropped_export_failed,
                chunk.to_vec(),
                self.final_timeout,
            )
            .await
            {
                break;
            }
        }
    }

    /// Sends one batch; counts it as exported or dropped. True when the collector took it.
    async fn send(&self, batch: Vec<SpanData>, timeout: Duration) -> bool {
        send(
            &self.export,
            &self.exported,
            &self.dropped_export_failed,
            batch,
            timeout,
        )
        .await
    }
}

async fn send(
    export: &ExportFn,
    exported: &metrics::Counter,
    dropped: &metrics::Counter,
    batch: Vec<SpanData>,
    timeout: Duration,
) -> bool {
    let n = batch.len() as u64;
    match tokio::time::timeout(timeout, export(batch)).await {
        Ok(Ok(())) => {
            exported.increment(n);
            true
        }
        Ok(Err(e)) => {
            tracing::debug!(error = %e, spans = n, "trace export failed");
            dropped.increment(n);
            false
        }
        Err(_) => {
            tracing::debug!(spans = n, "trace export timed out");
            dropped.increment(n);
            false
        }
    }
}

/// The exporter's HTTP client: hyper, as the gateway's delivery client, over rustls with
/// Mozilla's roots and `delivery.ca_certs`. Not the SSRF-guarded connector: the collector is
/// the operator's own address, usually on a private network.
#[derive(Clone)]
struct CollectorClient {
    client: Client<hyper_rustls::HttpsConnector<HttpConnector>, Full<Bytes>>,
}

impl std::fmt::Debug for CollectorClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CollectorClient")
    }
}

impl CollectorClient {
    fn new(extra_roots: &[rustls::pki_types::CertificateDer<'static>]) -> anyhow::Result<Self> {
        let mut roots = rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        for cert in extra_roots {
            roots.add(cert.clone())?;
        }
        let tls =
            rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()?
                .with_root_certificates(roots)
                .with_no_client_auth();
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config(tls)
            .https_or_http()
            .enable_http1()
            .build();
        Ok(CollectorClient {
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(2)
                .pool_timer(TokioTimer::new())
                .timer(TokioTimer::new())
                .build(connector),
        })
    }
}

#[async_trait::async_trait]
impl opentelemetry_http::HttpClient for CollectorClient {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, opentelemetry_http::HttpError> {
        let response = self.client.request(request.map(Full::new)).await?;
        let (parts, body) = response.into_parts();
        let body = http_body_util::Limited::new(body, MAX_RESPONSE_BYTES)
            .collect()
            .await?
            .to_bytes();
        Ok(http::Response::from_parts(parts, body))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_traceparent_is_read() {
        let (trace, span) =
            parse_traceparent(b"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(trace.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(span.to_string(), "00f067aa0ba902b7");
        // A later version may add fields after its own dash.
        assert!(
            parse_traceparent(b"01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra").is_some()
        );
    }

    #[test]
    fn an_invalid_traceparent_is_ignored() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473+-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x",
        ] {
            assert_eq!(parse_traceparent(bad.as_bytes()), None, "{bad}");
        }
    }

    #[test]
    fn traceparent_round_trips() {
        let (trace, span) = (new_trace_id(), new_span_id());
        let value = traceparent(trace, span);
        assert_eq!(value.len(), 55);
        assert_eq!(parse_traceparent(value.as_bytes()), Some((trace, span)));
    }

    #[test]
    fn an_ingestion_span_continues_the_apps_trace() {
        let mut headers = HeaderMap::new();
        headers.insert(
            TRACEPARENT,
            HeaderValue::from_static("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
        );
        let span = Traces::disabled().start_ingest(&headers);
        assert_eq!(span.trace_id().to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(
            span.parent.map(|s| s.to_string()).as_deref(),
            Some("00f067aa0ba902b7")
        );
        assert_ne!(span.trace.span_id, span.parent);
        let fresh = Traces::disabled().start_ingest(&HeaderMap::new());
        assert!(fresh.parent.is_none());
        assert_ne!(fresh.trace_id(), TraceId::INVALID);
    }

    /// An exporter that never finishes, like a collector that accepts and never answers.
    #[derive(Debug)]
    struct Stuck;

    impl SpanExporter for Stuck {
        async fn export(&self, _batch: Vec<SpanData>) -> opentelemetry_sdk::error::OTelSdkResult {
            std::future::pending().await
        }
    }

    fn attempt_span(traces: &Traces) {
        traces.attempt(AttemptSpan {
            trace_id: new_trace_id(),
            span_id: new_span_id(),
            parent: None,
            started: SystemTime::now(),
            ended: SystemTime::now(),
            event_id: "evt_1",
            delivery_id: "dlv_1",
            endpoint: "a",
            attempt: 1,
            status_code: Some(200),
            messaging: None,
            error_kind: None,
            error: None,
            plugin_time: None,
        });
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts_instead_of_waiting() {
        let metrics = Metrics::new();
        let (traces, task) = Traces::with_exporter(Stuck, 4, &metrics);
        // No task runs: the queue holds 4, the other 6 are dropped at once.
        for _ in 0..10 {
            attempt_span(&traces);
        }
        drop(task);
        let text = metrics.render();
        assert!(
            text.contains("hookgate_trace_spans_dropped_total{reason=\"queue_full\"} 6"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn a_stuck_collector_holds_one_batch_and_shutdown_does_not_wait_for_it() {
        let metrics = Metrics::new();
        let (traces, task) = Traces::with_exporter(Stuck, 2, &metrics);
        let shutdown = CancellationToken::new();
        let running = tokio::spawn(task.unwrap().run(shutdown.clone()));
        attempt_span(&traces);
        // The task takes the first span into its (stuck) export; then the queue fills.
        while traces.export.as_ref().unwrap().queue.capacity() < 2 {
            tokio::task::yield_now().await;
        }
        for _ in 0..5 {
            attempt_span(&traces);
        }
        let text = metrics.render();
        assert!(
            text.contains("hookgate_trace_spans_dropped_total{reason=\"queue_full\"} 3"),
            "{text}"
        );
        shutdown.cancel();
        running.await.unwrap();
        // Shutdown abandoned the stuck export and did not try the collector again: the span
        // in it and the two queued ones are counted.
        let text = metrics.render();
        assert!(
            text.contains("hookgate_trace_spans_dropped_total{reason=\"export_failed\"} 3"),
            "{text}"
        );
    }
}
