//! `hookgate-loadgen`: drives a running gateway's ingestion API and measures it.
//!
//! Two ways to load it:
//! - [`closed_loop`]: `concurrency` workers each send a request, wait for the answer, send the
//!   next — the throughput the gateway sustains at that concurrency;
//! - [`open_loop`]: requests start at a fixed offered rate whatever the answers do, so a slow
//!   answer cannot hold back the next request (no coordinated omission) — the latency a client
//!   sees at that rate.
//!
//! Either sends single events (`POST /v1/topics/{topic}/events`) or batches
//! (`.../events/batch`), or single Svix messages (`POST /api/v1/app/{app}/msg`). Latency is
//! measured per request, from the moment it is handed to the connection until the whole answer
//! is read, into an HDR histogram in microseconds.
//! [`wait_for_sink`] then follows a `hookgate-sink`'s `/stats` until every delivery arrived,
//! for end-to-end rates.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use hdrhistogram::Histogram;
use hookgate_sink::Stats;
use http::{Method, Request, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;

/// Errors of the load generator's own making (not the gateway's answers, which are counted).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("invalid URL `{0}`")]
    BadUrl(String),
    #[error("the Svix API takes one message per request: no batches")]
    SvixBatch,
    #[error("the sink's stats at {url} could not be read: {reason}")]
    SinkStats { url: String, reason: String },
    #[error("the sink saw {seen} of {expected} deliveries within {waited:?}")]
    SinkTimeout {
        seen: u64,
        expected: u64,
        waited: Duration,
    },
}

/// Why a [`Client`] request got no 2xx answer.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("invalid URL `{0}`")]
    BadUrl(String),
    #[error("{0}")]
    Method(#[from] http::method::InvalidMethod),
    #[error("{0}")]
    Request(#[from] http::Error),
    #[error("{0}")]
    Send(#[from] hyper_util::client::legacy::Error),
    #[error("{0}")]
    Body(#[from] hyper::Error),
    #[error("{url} answered {status}")]
    Status { url: String, status: http::StatusCode },
}

/// What to send and where.
#[derive(Debug, Clone)]
pub struct Target {
    /// `http://host:port` of the gateway.
    pub base_url: String,
    pub topic: String,
    /// Which of the gateway's APIs the events go through.
    pub api: Api,
    pub api_key: Option<String>,
    pub event_type: String,
    /// Approximate size of each event's JSON payload.
    pub payload_bytes: usize,
    /// Keep the id of every accepted event ([`Report::accepted_ids`]), e.g. to check later
    /// that each one reached the receiver.
    pub record_ids: bool,
}

/// The API a run sends its events through.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Api {
    /// hookgate's own: `POST /v1/topics/{topic}/events`, with `tenant` in the event when set.
    #[default]
    Native,
    /// hookgate's own, each event of this tenant.
    NativeTenant(String),
    /// Svix's message create, `POST /api/v1/app/{app}/msg`: the event's type as `eventType`,
    /// the same payload. Its `202` names no deliveries (the report counts none).
    Svix { app: String },
}

/// One event per request, or `n` per batch request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Shape {
    Single,
    Batch(usize),
}

impl Shape {
    pub fn events_per_request(self) -> u64 {
        match self {
            Shape::Single => 1,
            Shape::Batch(n) => n as u64,
        }
    }
}

/// When a closed loop stops.
#[derive(Debug, Clone, Copy)]
pub enum Stop {
    After(Duration),
    Requests(u64),
}

/// A pooled HTTP/1.1 client, one keep-alive connection per concurrent request.
#[derive(Clone)]
pub struct Client {
    inner: HyperClient<HttpConnector, Full<Bytes>>,
}

impl Client {
    pub fn new(max_connections: usize) -> Client {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let inner = HyperClient::builder(TokioExecutor::new())
            .pool_max_idle_per_host(max_connections.max(1))
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        Client { inner }
    }

    /// GETs `url` and returns the body when the answer is a 2xx.
    pub async fn get(&self, url: &str) -> Result<Bytes, ClientError> {
        let uri: http::Uri = url.parse().map_err(|_| ClientError::BadUrl(url.to_owned()))?;
        let request = Request::get(uri).body(Full::new(Bytes::new()))?;
        self.send(url, request).await
    }

    /// POSTs the JSON `body` to `url` and returns the answer's body when it is a 2xx.
    pub async fn post_json(&self, url: &str, body: Bytes) -> Result<Bytes, ClientError> {
        self.post_json_as(None, url, body).await
    }

    /// [`Client::post_json`], with `Authorization: Bearer <key>` when a key is given.
    pub async fn post_json_as(
        &self,
        key: Option<&str>,
        url: &str,
        body: Bytes,
    ) -> Result<Bytes, ClientError> {
        let uri: http::Uri = url.parse().map_err(|_| ClientError::BadUrl(url.to_owned()))?;
        let mut request = Request::post(uri).header(http::header::CONTENT_TYPE, "application/json");
        if let Some(key) = key {
            request = request.header(http::header::AUTHORIZATION, format!("Bearer {key}"));
        }
        self.send(url, request.body(Full::new(body))?).await
    }

    /// Sends `body` to `url` with `method` (`PATCH`, `DELETE`, …; a JSON body unless empty)
    /// and returns the answer's body when it is a 2xx.
    pub async fn request(&self, method: &str, url: &str, body: Bytes) -> Result<Bytes, ClientError> {
        let uri: http::Uri = url.parse().map_err(|_| ClientError::BadUrl(url.to_owned()))?;
        let method = http::Method::from_bytes(method.as_bytes())?;
        let mut request = Request::builder().method(method).uri(uri);
        if !body.is_empty() {
            request = request.header(http::header::CONTENT_TYPE, "application/json");
        }
        let request = request.body(Full::new(body))?;
        self.send(url, request).await
    }

    async fn send(&self, url: &str, request: Request<Full<Bytes>>) -> Result<Bytes, ClientError> {
        let response = self.inner.request(request).await?;
        let status = response.status();
        let body = response.into_body().collect().await?.to_bytes();
        if status.is_success() {
            Ok(body)
        } else {
            Err(ClientError::Status {
                url: url.to_owned(),
                status,
            })
        }
    }
}

/// The prepared request of a run: the same body every time, so the generator spends its CPU on
/// sending rather than on building JSON (the gateway generates a fresh event id for each).
#[derive(Clone)]
struct Prepared {
    uri: http::Uri,
    body: Bytes,
    auth: Option<http::HeaderValue>,
    record_ids: bool,
}

/// One event's JSON, `payload_bytes` long in all: hookgate's event shape, or Svix's message.
fn event_json(target: &Target) -> String {
    let head = match &target.api {
        Api::Native => format!(r#""type":"{}""#, target.event_type),
        Api::NativeTenant(tenant) => format!(r#""type":"{}","tenant":"{tenant}""#, target.event_type),
        Api::Svix { .. } => format!(r#""eventType":"{}""#, target.event_type),
    };
    let fixed = r#"{,"payload":{"order":12345,"status":"paid","data":""}}"#.len() + head.len();
    let pad = "x".repeat(target.payload_bytes.saturating_sub(fixed));
    format!(r#"{{{head},"payload":{{"order":12345,"status":"paid","data":"{pad}"}}}}"#)
}

fn prepare(target: &Target, shape: Shape) -> Result<Prepared, LoadError> {
    let (path, body) = match (shape, &target.api) {
        (Shape::Single, Api::Svix { app }) => (format!("/api/v1/app/{app}/msg"), event_json(target)),
        (Shape::Batch(_), Api::Svix { .. }) => return Err(LoadError::SvixBatch),
        (Shape::Single, _) => (format!("/v1/topics/{}/events", target.topic), event_json(target)),
        (Shape::Batch(n), _) => {
            let one = event_json(target);
            let events = vec![one; n.max(1)].join(",");
            (
                format!("/v1/topics/{}/events/batch", target.topic),
                format!(r#"{{"events":[{events}]}}"#),
            )
        }
    };
    let url = format!("{}{path}", target.base_url.trim_end_matches('/'));
    let uri = url.parse().map_err(|_| LoadError::BadUrl(url.clone()))?;
    let auth = match &target.api_key {
        Some(key) => Some(
            http::HeaderValue::from_str(&format!("Bearer {key}"))
                .map_err(|_| LoadError::BadUrl("the API key is not a valid header value".into()))?,
        ),
        None => None,
    };
    Ok(Prepared {
        uri,
        body: Bytes::from(body),
        auth,
        record_ids: target.record_ids,
    })
}

/// What one request came to.
struct Sample {
    /// HTTP status; 0 when the request failed on the wire.
    status: u16,
    latency: Duration,
    /// `deliveries` from a 202 answer.
    deliveries: u64,
    /// The accepted events' ids, when the run records them.
    ids: Vec<String>,
}

/// A 202 answer: `id` for a single event, `ids` for a batch.
#[derive(Deserialize)]
struct AcceptedAnswer {
    #[serde(default)]
    deliveries: u64,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    ids: Vec<String>,
}

#[derive(Deserialize)]
struct DeliveriesOnly {
    #[serde(default)]
    deliveries: u64,
}

/// `deliveries` of a 202 answer, and the accepted ids if `record_ids`.
fn read_accepted(body: &[u8], record_ids: bool) -> (u64, Vec<String>) {
    if !record_ids {
        return (
            serde_json::from_slice::<DeliveriesOnly>(body).map_or(0, |a| a.deliveries),
            Vec::new(),
        );
    }
    match serde_json::from_slice::<AcceptedAnswer>(body) {
        Ok(a) => {
            let mut ids = a.ids;
            ids.extend(a.id);
            (a.deliveries, ids)
        }
        Err(_) => (0, Vec::new()),
    }
}

async fn send_one(client: &Client, prepared: &Prepared) -> Sample {
    let mut builder = Request::builder()
        .method(Method::POST)
        .uri(prepared.uri.clone())
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(auth) = &prepared.auth {
        builder = builder.header(header::AUTHORIZATION, auth.clone());
    }
    let request = builder
        .body(Full::new(prepared.body.clone()))
        .expect("a valid request");
    let started = Instant::now();
    let answer = async {
        let response = client.inner.request(request).await.ok()?;
        let status = response.status().as_u16();
        let body = response.into_body().collect().await.ok()?.to_bytes();
        Some((status, body))
    }
    .await;
    let latency = started.elapsed();
    match answer {
        Some((status, body)) => {
            let (deliveries, ids) = if status == 202 {
                read_accepted(&body, prepared.record_ids)
            } else {
                (0, Vec::new())
            };
            Sample {
                status,
                latency,
                deliveries,
                ids,
            }
        }
        None => Sample {
            status: 0,
            latency,
            deliveries: 0,
            ids: Vec::new(),
        },
    }
}

fn new_histogram() -> Histogram<u64> {
    // 1 µs … 60 s at 3 significant digits.
    Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid histogram bounds")
}

/// The result of a run.
#[derive(Debug, Clone)]
pub struct Report {
    pub shape: Shape,
    pub requests: u64,
    /// Events in requests answered 202.
    pub events_accepted: u64,
    /// Deliveries the gateway said it created (the sum of `deliveries` in 202 answers).
    pub deliveries: u64,
    /// Requests answered with anything but 202, or failed on the wire.
    pub errors: u64,
    /// Answers by status; 0 stands for a transport failure.
    pub statuses: BTreeMap<u16, u64>,
    pub elapsed: Duration,
    /// Open loop only: requests not started because `max_outstanding` were still unanswered.
    pub dropped: u64,
    /// Open loop only: how far the generator fell behind its schedule at worst.
    pub max_schedule_lag: Duration,
    /// Latency of every request, in µs.
    pub latency_us: Histogram<u64>,
    /// The ids of the accepted events, when [`Target::record_ids`] is set.
    pub accepted_ids: Vec<String>,
}

impl Report {
    fn new(shape: Shape) -> Report {
        Report {
            shape,
            requests: 0,
            events_accepted: 0,
            deliveries: 0,
            errors: 0,
            statuses: BTreeMap::new(),
            elapsed: Duration::ZERO,
            dropped: 0,
            max_schedule_lag: Duration::ZERO,
            latency_us: new_histogram(),
            accepted_ids: Vec::new(),
        }
    }

    fn record(&mut self, sample: Sample) {
        self.requests += 1;
        *self.statuses.entry(sample.status).or_default() += 1;
        if sample.status == 202 {
            self.events_accepted += self.shape.events_per_request();
            self.deliveries += sample.deliveries;
        } else {
            self.errors += 1;
        }
        let _ = self.latency_us.record((sample.latency.as_micros() as u64).max(1));
        self.accepted_ids.extend(sample.ids);
    }

    fn merge(&mut self, other: Report) {
        self.requests += other.requests;
        self.events_accepted += other.events_accepted;
        self.deliveries += other.deliveries;
        self.errors += other.errors;
        for (status, n) in other.statuses {
            *self.statuses.entry(status).or_default() += n;
        }
        let _ = self.latency_us.add(&other.latency_us);
        self.accepted_ids.extend(other.accepted_ids);
    }

    /// Accepted events per second of the run.
    pub fn events_per_s(&self) -> f64 {
        self.events_accepted as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The latency at quantile `q` (0.5, 0.99, 0.999).
    pub fn latency(&self, q: f64) -> Duration {
        Duration::from_micros(self.latency_us.value_at_quantile(q))
    }

    /// A one-paragraph human summary.
    pub fn summary(&self) -> String {
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        let mut text = format!(
            "{} requests, {} events accepted in {:.2} s: {:.0} events/s ({:.0} requests/s)\n\
             latency p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms\n\
             answers: {}",
            self.requests,
            self.events_accepted,
            self.elapsed.as_secs_f64(),
            self.events_per_s(),
            self.requests as f64 / self.elapsed.as_secs_f64().max(1e-9),
            ms(self.latency(0.5)),
            ms(self.latency(0.99)),
            ms(self.latency(0.999)),
            self.latency_us.max() as f64 / 1000.0,
            self.statuses
                .iter()
                .map(|(s, n)| if *s == 0 {
                    format!("transport error ×{n}")
                } else {
                    format!("{s} ×{n}")
                })
                .collect::<Vec<_>>()
                .join(", "),
        );
        if self.dropped > 0 || !self.max_schedule_lag.is_zero() {
            text.push_str(&format!(
                "\nnot started (too many outstanding): {}, worst schedule lag {:.2} ms",
                self.dropped,
                ms(self.max_schedule_lag)
            ));
        }
        text
    }
}

/// `concurrency` workers send back to back until `stop`.
pub async fn closed_loop(
    client: &Client,
    target: &Target,
    shape: Shape,
    concurrency: usize,
    stop: Stop,
) -> Result<Report, LoadError> {
    let prepared = Arc::new(prepare(target, shape)?);
    let claimed = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let mut workers = JoinSet::new();
    for _ in 0..concurrency.max(1) {
        let (client, prepared, claimed) = (client.clone(), prepared.clone(), claimed.clone());
        workers.spawn(async move {
            let mut report = Report::new(shape);
            loop {
                let go = match stop {
                    Stop::After(d) => started.elapsed() < d,
                    Stop::Requests(n) => claimed.fetch_add(1, Ordering::Relaxed) < n,
                };
                if !go {
                    break;
                }
                report.record(send_one(&client, &prepared).await);
            }
            report
        });
    }
    let mut total = Report::new(shape);
    while let Some(done) = workers.join_next().await {
        if let Ok(report) = done {
            total.merge(report);
        }
    }
    total.elapsed = started.elapsed();
    Ok(total)
}

/// Starts requests at `rate_per_s` for `duration`, each on its own task, whatever the answers
/// do. At most `max_outstanding` may be unanswered; beyond that a request is counted as
/// dropped instead of piling up without bound.
pub async fn open_loop(
    client: &Client,
    target: &Target,
    shape: Shape,
    rate_per_s: f64,
    duration: Duration,
    max_outstanding: usize,
) -> Result<Report, LoadError> {
    let prepared = Arc::new(prepare(target, shape)?);
    let interval = Duration::from_secs_f64(1.0 / rate_per_s.max(1e-3));
    let total_requests = (duration.as_secs_f64() * rate_per_s).round() as u64;
    let mut report = Report::new(shape);
    let mut in_flight: JoinSet<Sample> = JoinSet::new();
    let started = tokio::time::Instant::now();
    for i in 0..total_requests {
        let due = started + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due).await;
        report.max_schedule_lag = report.max_schedule_lag.max(due.elapsed());
        while let Some(done) = in_flight.try_join_next() {
            if let Ok(sample) = done {
                report.record(sample);
            }
        }
        if in_flight.len() >= max_outstanding {
            report.dropped += 1;
            continue;
        }
        let (client, prepared) = (client.clone(), prepared.clone());
        in_flight.spawn(async move { send_one(&client, &prepared).await });
    }
    while let Some(done) = in_flight.join_next().await {
        if let Ok(sample) = done {
            report.record(sample);
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Microseconds since the Unix epoch, the time base of the sink's stats.
pub fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

/// Reads a sink's `/stats`.
pub async fn sink_stats(client: &Client, stats_url: &str) -> Result<Stats, LoadError> {
    let body = client.get(stats_url).await.map_err(|e| LoadError::SinkStats {
        url: stats_url.to_owned(),
        reason: e.to_string(),
    })?;
    serde_json::from_slice(&body).map_err(|e| LoadError::SinkStats {
        url: stats_url.to_owned(),
        reason: e.to_string(),
    })
}

/// Polls a sink until it has answered `expected_ok` requests with a 2xx (counted from its
/// last reset), then returns its stats; gives up after `within`.
pub async fn wait_for_sink(
    client: &Client,
    stats_url: &str,
    expected_ok: u64,
    within: Duration,
) -> Result<Stats, LoadError> {
    let deadline = Instant::now() + within;
    loop {
        let stats = sink_stats(client, stats_url).await?;
        if stats.answered_ok >= expected_ok {
            return Ok(stats);
        }
        if Instant::now() > deadline {
            return Err(LoadError::SinkTimeout {
                seen: stats.answered_ok,
                expected: expected_ok,
                waited: within,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(bytes: usize) -> Target {
        Target {
            base_url: "http://127.0.0.1:1/".into(),
            topic: "orders".into(),
            api: Api::Native,
            api_key: Some("k".into()),
            event_type: "order.paid".into(),
            payload_bytes: bytes,
            record_ids: false,
        }
    }

    #[test]
    fn the_payload_has_the_asked_size_and_is_valid_json() {
        for size in [0, 100, 1024] {
            let json = event_json(&target(size));
            let v: serde_json::Value = serde_json::from_str(&json).unwrap();
            assert_eq!(v["type"], "order.paid");
            let payload = serde_json::to_string(&v["payload"]).unwrap();
            if size >= 100 {
                let whole = json.len() as i64;
                assert!((whole - size as i64).abs() <= 2, "{size} → {whole}");
            }
            assert!(payload.contains("paid"));
        }
    }

    #[test]
    fn a_svix_message_goes_to_its_application_with_its_event_type_and_the_asked_size() {
        let t = Target {
            api: Api::Svix { app: "acme".into() },
            ..target(1024)
        };
        let p = prepare(&t, Shape::Single).unwrap();
        assert_eq!(p.uri.path(), "/api/v1/app/acme/msg");
        let v: serde_json::Value = serde_json::from_slice(&p.body).unwrap();
        assert_eq!(v["eventType"], "order.paid");
        assert!(v.get("type").is_none());
        assert!((p.body.len() as i64 - 1024).abs() <= 2, "{}", p.body.len());
        assert!(matches!(prepare(&t, Shape::Batch(2)), Err(LoadError::SvixBatch)));
        let native = Target {
            api: Api::NativeTenant("acme".into()),
            ..target(1024)
        };
        let v: serde_json::Value =
            serde_json::from_slice(&prepare(&native, Shape::Single).unwrap().body).unwrap();
        assert_eq!(
            (v["type"].as_str(), v["tenant"].as_str()),
            (Some("order.paid"), Some("acme"))
        );
    }

    #[test]
    fn a_batch_body_holds_n_events_and_goes_to_the_batch_path() {
        let p = prepare(&target(50), Shape::Batch(3)).unwrap();
        assert_eq!(p.uri.path(), "/v1/topics/orders/events/batch");
        let v: serde_json::Value = serde_json::from_slice(&p.body).unwrap();
        assert_eq!(v["events"].as_array().unwrap().len(), 3);
        assert_eq!(p.auth.unwrap(), "Bearer k");
    }

    #[test]
    fn accepted_ids_are_read_from_single_and_batch_answers_when_asked() {
        let single = br#"{"id":"evt_1","deliveries":2}"#;
        let batch = br#"{"ids":["evt_2","evt_3"],"deliveries":4}"#;
        assert_eq!(read_accepted(single, true), (2, vec!["evt_1".to_owned()]));
        assert_eq!(
            read_accepted(batch, true),
            (4, vec!["evt_2".to_owned(), "evt_3".to_owned()])
        );
        assert_eq!(read_accepted(single, false), (2, Vec::new()));
        assert_eq!(read_accepted(b"not json", true), (0, Vec::new()));
    }
}
