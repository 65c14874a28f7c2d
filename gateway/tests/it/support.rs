//! Test harness: a recording sink on 127.0.0.1:0, a gateway on a temp dir with a manual clock,
//! and small helpers to call the API. Waiting is event-driven (notifications with a timeout),
//! never a fixed sleep.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use hookgate::clock::{Clock, ManualClock};
use hookgate::model::Timestamp;
use hookgate::{Gateway, GatewayOptions};
use serde_json::{Value, json};
use tokio::sync::Notify;

/// One request the sink received.
#[derive(Debug, Clone)]
pub struct Received {
    pub method: axum::http::Method,
    pub path: String,
    pub headers: HeaderMap,
    pub body: Bytes,
    /// The status the sink answered with.
    pub status: u16,
    /// When it arrived.
    pub at: std::time::Instant,
}

impl Received {
    pub fn header(&self, name: &str) -> &str {
        self.headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or("")
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }
}

/// What the sink answers: a status, extra headers, a body, and an optional delay (for
/// timeouts).
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub delay: Option<Duration>,
}

impl Reply {
    pub fn status(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: String::new(),
            delay: None,
        }
    }

    pub fn with_body(mut self, body: &str) -> Self {
        self.body = body.to_owned();
        self
    }

    pub fn with_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.into(), value.into()));
        self
    }

    pub fn delayed(mut self, by: Duration) -> Self {
        self.delay = Some(by);
        self
    }
}

#[derive(Default)]
struct SinkState {
    received: Mutex<Vec<Received>>,
    /// Replies to use in order; when empty, `default` answers.
    script: Mutex<VecDeque<Reply>>,
    default: Mutex<Option<Reply>>,
    /// Answers by the request's body before the script, when it answers at all.
    rule: Mutex<Option<ReplyRule>>,
    notify: Notify,
    /// TCP connections accepted so far.
    connections: AtomicUsize,
    /// Requests being answered now, and the most there ever were at once.
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

/// A reply chosen by the request's body (None: the script or the default answers).
pub type ReplyRule = Arc<dyn Fn(&[u8]) -> Option<Reply> + Send + Sync>;

/// Counts a request as in flight until it is answered or its client hangs up.
struct InFlight<'a>(&'a SinkState);

impl<'a> InFlight<'a> {
    fn enter(state: &'a SinkState) -> InFlight<'a> {
        let now = state.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        state.max_in_flight.fetch_max(now, Ordering::SeqCst);
        InFlight(state)
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An HTTP receiver that records every request.
#[derive(Clone)]
pub struct Sink {
    pub addr: std::net::SocketAddr,
    state: Arc<SinkState>,
    _server: Arc<tokio::task::JoinHandle<()>>,
}

async fn sink_handler(
    State(state): State<Arc<SinkState>>,
    method: axum::http::Method,
    uri: axum::http::Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let _in_flight = InFlight::enter(&state);
    let ruled = state.rule.lock().unwrap().as_ref().and_then(|rule| rule(&body));
    let reply = match ruled {
        Some(reply) => reply,
        None => {
            let scripted = state.script.lock().unwrap().pop_front();
            scripted
                .or_else(|| state.default.lock().unwrap().clone())
                .unwrap_or_else(|| Reply::status(200))
        }
    };
    state.received.lock().unwrap().push(Received {
        method,
        path: uri.path().to_owned(),
        headers,
        body,
        status: reply.status,
        at: std::time::Instant::now(),
    });
    state.notify.notify_waiters();
    if let Some(delay) = reply.delay {
        tokio::time::sleep(delay).await;
    }
    let mut response = (StatusCode::from_u16(reply.status).unwrap(), reply.body).into_response();
    for (k, v) in reply.headers {
        response.headers_mut().insert(
            axum::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            axum::http::HeaderValue::from_str(&v).unwrap(),
        );
    }
    response
}

impl Sink {
    pub async fn start() -> Sink {
        let state = Arc::new(SinkState::default());
        let app = axum::Router::new()
            .fallback(sink_handler)
            .with_state(state.clone());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let counted = state.clone();
        let listener = axum::serve::ListenerExt::tap_io(listener, move |_| {
            counted.connections.fetch_add(1, Ordering::Relaxed);
        });
        let server = tokio::spawn(async move {
            axum::serve(listener, app).await.unwrap();
        });
        Sink {
            addr,
            state,
            _server: Arc::new(server),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Answer the next requests with these replies, in order.
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.state.script.lock().unwrap().extend(replies);
    }

    /// Answer the requests whose body `rule` picks by its reply, before the script.
    pub fn rule(&self, rule: impl Fn(&[u8]) -> Option<Reply> + Send + Sync + 'static) {
        *self.state.rule.lock().unwrap() = Some(Arc::new(rule));
    }

    /// Answer every request (after the script) with this reply.
    pub fn always(&self, reply: Reply) {
        *self.state.default.lock().unwrap() = Some(reply);
    }

    pub fn received(&self) -> Vec<Received> {
        self.state.received.lock().unwrap().clone()
    }

    /// TCP connections the sink has accepted (keep-alive reuse keeps this low).
    pub fn connections(&self) -> usize {
        self.state.connections.load(Ordering::Relaxed)
    }

    /// The most requests the sink was answering at once.
    pub fn max_in_flight(&self) -> usize {
        self.state.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn count(&self) -> usize {
        self.state.received.lock().unwrap().len()
    }

    /// Waits until at least `n` requests arrived (or panics after `within` of real time).
    pub async fn wait_for(&self, n: usize, within: Duration) -> Vec<Received> {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = self.state.notify.notified();
            if self.count() >= n {
                return self.received();
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                panic!("the sink got {} requests, expected {n}", self.count());
            }
        }
    }
}

/// A gateway on a temp dir with a manual clock, listening on 127.0.0.1:0.
pub struct TestGateway {
    pub gateway: Option<Gateway>,
    pub clock: ManualClock,
    pub dir: Arc<tempfile::TempDir>,
    pub base: String,
    pub http: reqwest::Client,
    pub api_key: Option<String>,
}

/// A fixed start time, so tests read naturally: 2026-01-01T00:00:00Z.
pub const START: Timestamp = Timestamp::from_millis(1_767_225_600_000);

/// The storage key of the suite's PostgreSQL schemas (PostgreSQL needs one in the config;
/// SQLite makes its own key file).
pub const PG_TEST_KEY: &str = "aXQgc3VpdGUgcG9zdGdyZXNxbCBzdG9yYWdlIGtleSE=";

/// The YAML every test config starts with: loopback allowed, storage in the temp dir.
/// On PostgreSQL (see [`postgres_url_for`]) `storage.url` names the test's own schema.
pub fn base_yaml(dir: &std::path::Path) -> String {
    // A few connections each: the suite runs many gateways at once on one server.
    let url = postgres_url_for(dir).map_or(String::new(), |url| {
        format!("  url: {url}\n  max_connections: 3\n  encryption_key: {PG_TEST_KEY}\n")
    });
    format!(
        "storage:\n  path: {}/hookgate.db\n{url}plugins:\n  dir: {}/plugins\n  bundled: false\ndelivery:\n  allow_networks: [127.0.0.0/8]\n  timeout: 2s\n",
        dir.display(),
        dir.display()
    )
}

impl TestGateway {
    /// Starts a gateway with `base_yaml` + `yaml`.
    pub async fn start(yaml: &str) -> TestGateway {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        Self::start_in(dir, yaml, ManualClock::new(START)).await
    }

    pub async fn start_in(dir: Arc<tempfile::TempDir>, yaml: &str, clock: ManualClock) -> TestGateway {
        Self::start_with(dir, yaml, clock, |_| {}).await
    }

    /// Like [`TestGateway::start_in`], letting the test adjust the options (file watching…).
    pub async fn start_with(
        dir: Arc<tempfile::TempDir>,
        yaml: &str,
        clock: ManualClock,
        adjust: impl FnOnce(&mut GatewayOptions),
    ) -> TestGateway {
        capture_logs();
        std::fs::create_dir_all(dir.path().join("plugins")).unwrap();
        let text = format!("{}{yaml}", base_yaml(dir.path()));
        let path = dir.path().join("hookgate.yaml");
        std::fs::write(&path, &text).unwrap();
        let config =
            hookgate::config::load_file(&path).unwrap_or_else(|e| panic!("test config invalid:\n{e}"));
        let api_key = config.server.api_keys.first().map(|k| k.key.expose().to_owned());
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut options = GatewayOptions::new(config, Arc::new(clock.clone()));
        options.listener = Some(listener);
        adjust(&mut options);
        let gateway = Gateway::start(options).await.unwrap();
        let base = format!("http://{}", gateway.addr());
        TestGateway {
            gateway: Some(gateway),
            clock,
            dir,
            base,
            http: reqwest::Client::new(),
            api_key,
        }
    }

    pub fn now(&self) -> Timestamp {
        self.clock.now()
    }

    /// Moves the gateway's clock forward; sleepers due by then wake. First waits until the
    /// scheduler has settled, so that an attempt running now is planned at the time it ends,
    /// not after the jump.
    pub async fn advance(&self, by: Duration) {
        self.settle().await;
        self.clock.advance(by);
    }

    /// Like [`TestGateway::advance`], to a time.
    pub async fn advance_to(&self, to: Timestamp) {
        self.settle().await;
        self.clock.set(to);
    }

    /// Waits (bounded) until the scheduler has nothing to do at the current time.
    pub async fn settle(&self) {
        let gateway = self.gateway.as_ref().expect("running");
        let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
        while !gateway.scheduler_idle() {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the scheduler did not settle"
            );
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        if let Some(key) = &self.api_key {
            r = r.bearer_auth(key);
        }
        r
    }

    pub async fn send(&self, builder: reqwest::RequestBuilder) -> (u16, Value) {
        let response = builder
            .send()
            .await
            .unwrap_or_else(|e| panic!("request failed: {e:?}"));
        let status = response.status().as_u16();
        let bytes = response
            .bytes()
            .await
            .unwrap_or_else(|e| panic!("reading the answer ({status}) failed: {e:?}"));
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null))
    }

    /// Calls the API with `key` (None: no `Authorization`) instead of the gateway's first key.
    pub async fn call_as(
        &self,
        key: Option<&str>,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut r = self.http.request(method, format!("{}{path}", self.base));
        if let Some(key) = key {
            r = r.bearer_auth(key);
        }
        if let Some(body) = body {
            r = r.json(&body);
        }
        self.send(r).await
    }

    pub async fn patch(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(self.request(reqwest::Method::PATCH, path).json(&body))
            .await
    }

    pub async fn delete(&self, path: &str) -> (u16, Value) {
        self.send(self.request(reqwest::Method::DELETE, path)).await
    }

    /// `GET /metrics`: the Prometheus text (open, no key).
    pub async fn metrics_text(&self) -> String {
        self.http
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.request(reqwest::Method::GET, path)).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(self.request(reqwest::Method::POST, path).json(&body))
            .await
    }

    /// Like [`TestGateway::post`], also returning the `Retry-After` header.
    pub async fn post_with_retry_after(&self, path: &str, body: Value) -> (u16, Value, Option<String>) {
        let response = self
            .request(reqwest::Method::POST, path)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get("retry-after")
            .map(|v| v.to_str().unwrap().to_owned());
        let body = response.json().await.unwrap_or(Value::Null);
        (status, body, retry_after)
    }

    pub fn post_builder(&self, path: &str) -> reqwest::RequestBuilder {
        self.request(reqwest::Method::POST, path)
    }

    /// Ingests one structured event; panics unless the gateway answered 202.
    pub async fn ingest(&self, topic: &str, event_type: &str, payload: Value) -> Value {
        let (status, body) = self
            .post(
                &format!("/v1/topics/{topic}/events"),
                serde_json::json!({"type": event_type, "payload": payload}),
            )
            .await;
        assert_eq!(status, 202, "{body}");
        body
    }

    /// Polls the API (no clock movement) until `check` holds for the value at `path`.
    pub async fn wait_until(&self, path: &str, within: Duration, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let (_, body) = self.get(path).await;
            if check(&body) {
                return body;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("condition on {path} not met in {within:?}; last answer: {body}");
            }
            tokio::task::yield_now().await;
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    pub fn config_path(&self) -> std::path::PathBuf {
        self.dir.path().join("hookgate.yaml")
    }

    /// Rewrites the config file with `base_yaml` + `yaml` (not applied until a reload).
    pub fn write_config(&self, yaml: &str) {
        std::fs::write(
            self.config_path(),
            format!("{}{yaml}", base_yaml(self.dir.path())),
        )
        .unwrap();
    }

    pub fn reloader(&self) -> hookgate::Reloader {
        self.gateway.as_ref().expect("running").reloader()
    }

    /// Stops the gateway (graceful shutdown), keeping the temp dir.
    pub async fn stop(&mut self) {
        if let Some(g) = self.gateway.take() {
            g.shutdown().await;
        }
    }
}

impl Drop for TestGateway {
    fn drop(&mut self) {
        if self.gateway.is_some() {
            // Tests that forget to stop still leave no writer thread behind for long: the
            // runtime shuts the tasks down; the temp dir goes with the last Arc.
            let _ = self.gateway.take();
        }
    }
}

/// Every log line of this test process, at debug level, so tests can check what was (and was
/// not) logged.
static LOGS: std::sync::OnceLock<Arc<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();

#[derive(Clone)]
struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

pub fn capture_logs() {
    LOGS.get_or_init(|| {
        let buffer = Arc::new(Mutex::new(Vec::new()));
        let sink = LogSink(buffer.clone());
        let _ = tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("hookgate=debug,info"))
            .with_writer(move || sink.clone())
            .with_ansi(false)
            .try_init();
        buffer
    });
}

/// The value of the series whose line starts with `series ` in a Prometheus text (0 when it
/// is absent).
pub fn metric(text: &str, series: &str) -> f64 {
    let prefix = format!("{series} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .map_or(0.0, |v| v.trim().parse().unwrap())
}

/// The log lines captured so far.
pub fn captured_logs() -> String {
    LOGS.get()
        .map(|b| String::from_utf8_lossy(&b.lock().unwrap()).into_owned())
        .unwrap_or_default()
}

// ---------------------------------------------------------------------------------------------
// Reading the API: waits and barriers shared by the behaviour tests.

/// How long a test waits for something the gateway does by itself.
pub const WAIT: Duration = Duration::from_secs(10);
pub fn time(v: &Value) -> Timestamp {
    Timestamp::parse_rfc3339(v.as_str().unwrap_or_else(|| panic!("not a time: {v}"))).unwrap()
}

/// A sink on the `probe` topic that always answers 200, used as a barrier: once a probe event
/// has been sent, the scheduler has run a full turn (timers included) after everything the test
/// did before it.
pub struct Probe {
    sink: Sink,
}

impl Probe {
    pub async fn start() -> Probe {
        Probe {
            sink: Sink::start().await,
        }
    }

    /// The YAML lines of the probe's topic and endpoint (to put under `topics:` and
    /// `endpoints:`).
    pub fn topic_yaml(&self) -> &'static str {
        "  probe: {}\n"
    }

    pub fn endpoint_yaml(&self) -> String {
        format!(
            "  probe:\n    url: {}\n    topics: [probe]\n",
            self.sink.url("/probe")
        )
    }

    /// Returns once the scheduler has handled a turn that started after this call.
    pub async fn barrier(&self, gw: &TestGateway) {
        let before = self.sink.count();
        gw.ingest("probe", "probe", json!({})).await;
        self.sink.wait_for(before + 1, WAIT).await;
    }
}

pub async fn endpoint(gw: &TestGateway, name: &str) -> Value {
    let (status, body) = gw.get(&format!("/v1/endpoints/{name}")).await;
    assert_eq!(status, 200, "{body}");
    body
}

/// Waits until the endpoint is in `state` and its history (written by the store, after the
/// in-memory state) ends with that state.
pub async fn wait_state(gw: &TestGateway, name: &str, state: &str) -> Value {
    gw.wait_until(&format!("/v1/endpoints/{name}"), WAIT, |e| {
        e["state"] == state
            && e["history"]
                .as_array()
                .and_then(|h| h.last())
                .is_some_and(|last| last["state"] == state)
    })
    .await
}

pub async fn wait_failures(gw: &TestGateway, name: &str, n: u64) -> Value {
    gw.wait_until(&format!("/v1/endpoints/{name}"), WAIT, |e| {
        e["consecutive_failures"].as_u64() == Some(n)
    })
    .await
}

/// Every delivery of an endpoint, newest first.
pub async fn deliveries_of(gw: &TestGateway, name: &str) -> Vec<Value> {
    let (_, list) = gw
        .get(&format!("/v1/deliveries?endpoint={name}&limit=1000"))
        .await;
    list["deliveries"].as_array().unwrap().clone()
}

// ---------------------------------------------------------------------------------------------
// The store under the suite: SQLite, or PostgreSQL when `tests/postgres.rs` runs the suite.

/// The prefix of every schema the suite creates; `tests/postgres.rs` drops them afterwards.
pub const TEST_SCHEMA_PREFIX: &str = "hg_it_";

/// Whether this run of the suite is on PostgreSQL: `tests/postgres.rs` runs the whole suite
/// again with `HOOKGATE_TEST_BACKEND=postgres` and `HOOKGATE_TEST_POSTGRES` set.
pub fn on_postgres() -> bool {
    std::env::var("HOOKGATE_TEST_BACKEND").is_ok_and(|b| b == "postgres")
}

/// On PostgreSQL, the URL of the schema that belongs to the test directory `dir` (created on
/// first use, so a restarted gateway finds its data again); None on SQLite.
pub fn postgres_url_for(dir: &std::path::Path) -> Option<String> {
    use std::hash::{Hash, Hasher};
    if !on_postgres() {
        return None;
    }
    let admin =
        std::env::var("HOOKGATE_TEST_POSTGRES").expect("HOOKGATE_TEST_POSTGRES with the postgres backend");
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    dir.hash(&mut hasher);
    let name = format!("{TEST_SCHEMA_PREFIX}{:016x}", hasher.finish());
    static CREATED: Mutex<Vec<String>> = Mutex::new(Vec::new());
    let mut created = CREATED.lock().unwrap();
    if !created.contains(&name) {
        create_schema(&admin, &name);
        created.push(name.clone());
    }
    let sep = if admin.contains('?') { '&' } else { '?' };
    Some(format!("{admin}{sep}options=-c%20search_path%3D{name}"))
}

/// Creates a schema from a thread of its own (the caller may be inside a runtime).
fn create_schema(admin: &str, name: &str) {
    let (admin, sql) = (admin.to_owned(), format!("CREATE SCHEMA IF NOT EXISTS {name}"));
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
                .await
                .expect("connect to HOOKGATE_TEST_POSTGRES");
            tokio::spawn(connection);
            client.batch_execute(&sql).await.expect("create the test schema");
        });
    })
    .join()
    .unwrap();
}

/// The store of a test directory, opened directly (the gateway must be stopped): SQLite, or
/// the directory's PostgreSQL schema when the suite runs on PostgreSQL.
pub async fn open_store(dir: &std::path::Path) -> Arc<dyn hookgate::store::Store> {
    use hookgate::store::{PgStore, SqliteOptions, SqliteStore};
    match postgres_url_for(dir) {
        Some(url) => Arc::new(
            PgStore::open(
                &url,
                &hookgate::telemetry::Metrics::new(),
                "test-reader",
                pg_test_sealer(),
            )
            .await
            .unwrap(),
        ),
        None => Arc::new(SqliteStore::open(SqliteOptions::new(dir.join("hookgate.db"))).unwrap()),
    }
}

/// The keys of [`PG_TEST_KEY`].
pub fn pg_test_sealer() -> hookgate::store::Sealer {
    let key = hookgate::store::EncryptionKey::from_base64(PG_TEST_KEY).unwrap();
    hookgate::store::Sealer::new(key, Vec::new())
}

/// An ingestion item for a store opened with [`open_store`]: the event `id` of `event_type`
/// on topic `t`, an empty JSON object received at `at`, to endpoint `e`.
pub fn item_for_e(id: &str, event_type: &str, at: Timestamp) -> hookgate::store::IngestItem {
    hookgate::store::IngestItem {
        event: Arc::new(hookgate::model::Event {
            id: id.into(),
            topic: "t".into(),
            event_type: event_type.into(),
            content_type: "application/json".into(),
            payload: "{}".into(),
            ordering_key: None,
            received_at: at,
            tenant: None,
            trace: None,
            labels: Default::default(),
        }),
        endpoints: vec![hookgate::store::Target::untenanted("e")],
    }
}

/// The rows in each of `tables` of the test directory's store (the SQLite file or the
/// PostgreSQL schema), read beside the running gateway.
pub async fn row_counts(dir: &std::path::Path, tables: &[&str]) -> Vec<i64> {
    let count = |table: &str| format!("SELECT count(*) FROM {table}");
    if let Some(url) = postgres_url_for(dir) {
        let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let mut out = Vec::new();
        for table in tables {
            out.push(client.query_one(&count(table), &[]).await.unwrap().get(0));
        }
        return out;
    }
    let db = rusqlite::Connection::open_with_flags(
        dir.join("hookgate.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .unwrap();
    tables
        .iter()
        .map(|table| db.query_row(&count(table), [], |r| r.get(0)).unwrap())
        .collect()
}
