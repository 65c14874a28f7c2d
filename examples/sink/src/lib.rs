//! `hookgate-sink`: a fast HTTP/1.1 webhook receiver for load tests and benchmarks.
//!
//! - Answers 200, or a chosen status for a chosen fraction of requests (flaky mode, for soak
//!   tests of retries); a request to `/status/NNN` is always answered `NNN`, so one sink can
//!   stand for a healthy endpoint and a failing one at once.
//! - Optionally verifies Standard Webhooks signatures with a secret ([`verify`]); a request
//!   that does not verify is answered 400, as a careful receiver would.
//! - Counts requests, answers and distinct `webhook-id`s, and serves them as JSON on
//!   `GET /stats` (`POST /stats/reset` zeroes them) so a harness in another process can read them;
//!   `GET /ids` lists the distinct `webhook-id`s it answered with a 2xx, one per line, so a
//!   harness can check which events arrived, not only how many.
//! - Optionally prints every request (method, path, headers, body) to standard output
//!   ([`SinkOptions::print`]): what a plugin author wants to see of a transformed request.
//!
//! Kept lean on purpose: the sink shares the machine with the gateway it measures, so every
//! microsecond it spends is one the gateway does not get.

pub mod verify;

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

pub use verify::{Verifier, VerifyError};

/// How the sink behaves.
#[derive(Debug, Clone)]
pub struct SinkOptions {
    pub listen: SocketAddr,
    /// Share of webhook requests answered `fail_status` instead of 200, in `[0, 1]`. The
    /// failures are spread evenly (every 10th request at 0.1), so runs are repeatable.
    pub fail_fraction: f64,
    pub fail_status: u16,
    /// Verify Standard Webhooks signatures with this secret (`whsec_…` or any string).
    pub secret: Option<String>,
    /// Print each webhook request to standard output ([`format_request`]).
    pub print: bool,
}

impl SinkOptions {
    /// A sink on 127.0.0.1 with an OS-chosen port that answers 200 to everything.
    pub fn loopback() -> SinkOptions {
        SinkOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            fail_fraction: 0.0,
            fail_status: 503,
            secret: None,
            print: false,
        }
    }
}

/// What the sink has seen since it started or was last reset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stats {
    /// Webhook requests received (not counting `/stats`).
    pub requests: u64,
    /// Of those, answered with a 2xx.
    pub answered_ok: u64,
    /// Of those, answered with anything else (flaky mode, `/status/NNN`, bad signature).
    pub answered_error: u64,
    /// Distinct `webhook-id` values seen.
    pub distinct_ids: u64,
    /// Distinct `webhook-id` values answered with a 2xx at least once: the events delivered.
    #[serde(default)]
    pub distinct_ids_ok: u64,
    /// Requests without a `webhook-id` header.
    pub without_id: u64,
    pub signatures_valid: u64,
    pub signatures_invalid: u64,
    pub body_bytes: u64,
    /// When the first and the last request since the reset arrived, in µs since the Unix epoch.
    pub first_request_unix_us: Option<u64>,
    pub last_request_unix_us: Option<u64>,
}

#[derive(Default)]
struct Counters {
    requests: AtomicU64,
    answered_ok: AtomicU64,
    answered_error: AtomicU64,
    without_id: AtomicU64,
    signatures_valid: AtomicU64,
    signatures_invalid: AtomicU64,
    body_bytes: AtomicU64,
    /// 0 means "none yet".
    first_us: AtomicU64,
    last_us: AtomicU64,
    ids: Mutex<HashSet<Box<[u8]>>>,
    ok_ids: Mutex<HashSet<Box<[u8]>>>,
}

impl Counters {
    fn snapshot(&self) -> Stats {
        let nonzero = |v: u64| (v != 0).then_some(v);
        Stats {
            requests: self.requests.load(Ordering::Relaxed),
            answered_ok: self.answered_ok.load(Ordering::Relaxed),
            answered_error: self.answered_error.load(Ordering::Relaxed),
            distinct_ids: self.ids.lock().expect("ids lock").len() as u64,
            distinct_ids_ok: self.ok_ids.lock().expect("ids lock").len() as u64,
            without_id: self.without_id.load(Ordering::Relaxed),
            signatures_valid: self.signatures_valid.load(Ordering::Relaxed),
            signatures_invalid: self.signatures_invalid.load(Ordering::Relaxed),
            body_bytes: self.body_bytes.load(Ordering::Relaxed),
            first_request_unix_us: nonzero(self.first_us.load(Ordering::Relaxed)),
            last_request_unix_us: nonzero(self.last_us.load(Ordering::Relaxed)),
        }
    }

    fn reset(&self) {
        for c in [
            &self.requests,
            &self.answered_ok,
            &self.answered_error,
            &self.without_id,
            &self.signatures_valid,
            &self.signatures_invalid,
            &self.body_bytes,
            &self.first_us,
            &self.last_us,
        ] {
            c.store(0, Ordering::Relaxed);
        }
        self.ids.lock().expect("ids lock").clear();
        self.ok_ids.lock().expect("ids lock").clear();
    }

    /// The ids answered with a 2xx, one per line, sorted.
    fn ok_ids_text(&self) -> Vec<u8> {
        let mut ids: Vec<Box<[u8]>> = self.ok_ids.lock().expect("ids lock").iter().cloned().collect();
        ids.sort_unstable();
        let mut text = Vec::with_capacity(ids.iter().map(|id| id.len() + 1).sum());
        for id in ids {
            text.extend_from_slice(&id);
            text.push(b'\n');
        }
        text
    }
}

struct State {
    counters: Counters,
    verifier: Option<Verifier>,
    fail_fraction: f64,
    fail_status: StatusCode,
    print: bool,
}

/// A running sink. Dropping it without [`Sink::shutdown`] stops it too (the accept loop is
/// cancelled with its connections).
pub struct Sink {
    addr: SocketAddr,
    state: Arc<State>,
    shutdown: CancellationToken,
    server: Option<tokio::task::JoinHandle<()>>,
}

/// Errors starting a sink.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("fail_status {0} is not an HTTP status code")]
    BadStatus(u16),
    #[error("fail_fraction {0} is not within [0, 1]")]
    BadFraction(f64),
}

impl Sink {
    /// Binds and starts serving on the current tokio runtime.
    pub async fn start(options: SinkOptions) -> Result<Sink, SinkError> {
        let fail_status = StatusCode::from_u16(options.fail_status)
            .map_err(|_| SinkError::BadStatus(options.fail_status))?;
        if !(0.0..=1.0).contains(&options.fail_fraction) {
            return Err(SinkError::BadFraction(options.fail_fraction));
        }
        let listener = TcpListener::bind(options.listen)
            .await
            .map_err(|source| SinkError::Listen {
                addr: options.listen,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| SinkError::Listen {
            addr: options.listen,
            source,
        })?;
        let state = Arc::new(State {
            counters: Counters::default(),
            verifier: options.secret.as_deref().map(Verifier::new),
            fail_fraction: options.fail_fraction,
            fail_status,
            print: options.print,
        });
        let shutdown = CancellationToken::new();
        let server = tokio::spawn(accept_loop(listener, state.clone(), shutdown.clone()));
        Ok(Sink {
            addr,
            state,
            shutdown,
            server: Some(server),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://{addr}{path}`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    pub fn stats(&self) -> Stats {
        self.state.counters.snapshot()
    }

    /// Webhook requests received so far (cheaper than [`Sink::stats`]).
    pub fn requests(&self) -> u64 {
        self.state.counters.requests.load(Ordering::Relaxed)
    }

    /// Requests answered with a 2xx so far.
    pub fn answered_ok(&self) -> u64 {
        self.state.counters.answered_ok.load(Ordering::Relaxed)
    }

    /// The distinct `webhook-id`s answered with a 2xx, sorted (what `GET /ids` serves).
    pub fn ok_ids(&self) -> Vec<String> {
        String::from_utf8_lossy(&self.state.counters.ok_ids_text())
            .lines()
            .map(str::to_owned)
            .collect()
    }

    pub fn reset(&self) {
        self.state.counters.reset();
    }

    /// Stops accepting and closes every connection.
    pub async fn shutdown(mut self) {
        self.shutdown.cancel();
        if let Some(server) = self.server.take() {
            let _ = server.await;
        }
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.shutdown.cancel();
    }
}

async fn accept_loop(listener: TcpListener, state: Arc<State>, shutdown: CancellationToken) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let _ = stream.set_nodelay(true);
                let state = state.clone();
                connections.spawn(async move {
                    let service = service_fn(move |req| handle(state.clone(), req));
                    // A client that hangs up mid-request is not the sink's problem.
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        }
    }
    connections.shutdown().await;
}

fn unix_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as u64)
}

fn respond(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut response = Response::new(Full::new(body));
    *response.status_mut() = status;
    response
}

/// The sink's own endpoints (`/stats`, `/stats/reset`, `/ids`); `None` for a webhook request.
fn control(state: &State, method: &Method, path: &str) -> Option<Response<Full<Bytes>>> {
    let (body, content_type) = match (method, path) {
        (&Method::GET, "/stats") => (
            serde_json::to_vec(&state.counters.snapshot()).expect("stats serialize"),
            "application/json",
        ),
        (&Method::POST, "/stats/reset") => {
            state.counters.reset();
            return Some(respond(StatusCode::NO_CONTENT, Bytes::new()));
        }
        (&Method::GET, "/ids") => (state.counters.ok_ids_text(), "text/plain; charset=utf-8"),
        _ => return None,
    };
    let mut response = respond(StatusCode::OK, Bytes::from(body));
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, http::HeaderValue::from_static(content_type));
    Some(response)
}

async fn handle(state: Arc<State>, req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if let Some(response) = control(&state, req.method(), req.uri().path()) {
        return Ok(response);
    }
    let fixed_status = req
        .uri()
        .path()
        .strip_prefix("/status/")
        .and_then(|s| s.parse::<u16>().ok())
        .and_then(|s| StatusCode::from_u16(s).ok());
    let (parts, body) = req.into_parts();
    let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
    if state.print {
        print_request(&parts, &body);
    }

    let c = &state.counters;
    let n = c.requests.fetch_add(1, Ordering::Relaxed);
    let now_us = unix_us();
    let _ = c
        .first_us
        .compare_exchange(0, now_us, Ordering::Relaxed, Ordering::Relaxed);
    c.last_us.fetch_max(now_us, Ordering::Relaxed);
    c.body_bytes.fetch_add(body.len() as u64, Ordering::Relaxed);

    let id = parts.headers.get("webhook-id").map(|v| v.as_bytes());
    match id {
        Some(id) => {
            c.ids.lock().expect("ids lock").insert(id.into());
        }
        None => {
            c.without_id.fetch_add(1, Ordering::Relaxed);
        }
    }

    let mut status = StatusCode::OK;
    if let Some(verifier) = &state.verifier {
        let h = |name: &str| parts.headers.get(name).map(|v| v.as_bytes());
        let verdict = verifier.verify(
            id,
            h("webhook-timestamp"),
            h("webhook-signature"),
            &body,
            (now_us / 1_000_000) as i64,
        );
        if verdict.is_ok() {
            c.signatures_valid.fetch_add(1, Ordering::Relaxed);
        } else {
            c.signatures_invalid.fetch_add(1, Ordering::Relaxed);
            status = StatusCode::BAD_REQUEST;
        }
    }
    if let Some(fixed) = fixed_status {
        status = fixed;
    } else if status == StatusCode::OK && fails(n, state.fail_fraction) {
        status = state.fail_status;
    }
    if status.is_success() {
        c.answered_ok.fetch_add(1, Ordering::Relaxed);
        if let Some(id) = id {
            c.ok_ids.lock().expect("ids lock").insert(id.into());
        }
    } else {
        c.answered_error.fetch_add(1, Ordering::Relaxed);
    }
    Ok(respond(status, Bytes::new()))
}

/// One request as text: `METHOD path`, a `name: value` line per header (in the order they
/// came), a blank line, and the body (bytes that are not UTF-8 shown as `\u{FFFD}`).
pub fn format_request(
    method: &Method,
    path_and_query: &str,
    headers: &http::HeaderMap,
    body: &[u8],
) -> String {
    let mut text = format!("{method} {path_and_query}\n");
    for (name, value) in headers {
        text.push_str(name.as_str());
        text.push_str(": ");
        text.push_str(&String::from_utf8_lossy(value.as_bytes()));
        text.push('\n');
    }
    text.push('\n');
    text.push_str(&String::from_utf8_lossy(body));
    if !body.ends_with(b"\n") {
        text.push('\n');
    }
    text
}

/// Writes one request to standard output in one piece, so that concurrent requests do not
/// interleave, followed by a separator line.
fn print_request(parts: &http::request::Parts, body: &[u8]) {
    use std::io::Write as _;
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let text = format_request(&parts.method, path, &parts.headers, body);
    let mut out = std::io::stdout().lock();
    // A closed stdout (a pipe whose reader left) must not stop the sink from answering.
    let _ = out.write_all(text.as_bytes());
    let _ = out.write_all(b"---\n");
    let _ = out.flush();
}

/// Whether request number `n` (0-based) is one of the failing share: the failures are spread
/// evenly, exactly `floor(n·fraction)` among the first `n` requests.
fn fails(n: u64, fraction: f64) -> bool {
    fraction > 0.0 && ((n + 1) as f64 * fraction).floor() > (n as f64 * fraction).floor()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failures_are_spread_evenly_and_exactly() {
        let failed = (0..1000).filter(|n| fails(*n, 0.1)).count();
        assert_eq!(failed, 100);
        assert!((0..1000).all(|n| !fails(n, 0.0)));
        assert!((0..1000).all(|n| fails(n, 1.0)));
        // Never two in a row at 10 %.
        assert!(!(0..999).any(|n| fails(n, 0.1) && fails(n + 1, 0.1)));
    }

    #[test]
    fn a_request_prints_as_its_method_path_headers_and_body() {
        let mut headers = http::HeaderMap::new();
        headers.insert("webhook-id", http::HeaderValue::from_static("evt_1"));
        headers.append("x-team", http::HeaderValue::from_static("payments"));
        let text = format_request(&Method::POST, "/hooks?a=1", &headers, br#"{"n":1}"#);
        assert_eq!(
            text,
            "POST /hooks?a=1\nwebhook-id: evt_1\nx-team: payments\n\n{\"n\":1}\n"
        );
        let binary = format_request(&Method::PUT, "/", &http::HeaderMap::new(), &[0xff, b'\n']);
        assert_eq!(binary, "PUT /\n\n\u{FFFD}\n");
    }
}
