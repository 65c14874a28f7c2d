//! End to end against real servers on loopback. No test sends a packet anywhere else: names
//! resolve through a scripted resolver (or `/etc/hosts` for `localhost`), and non-loopback
//! answers are only ever judged, never dialled.

use std::collections::HashMap;
use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::http::{HeaderMap, HeaderValue, Request, Response, StatusCode, Uri};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use ipnet::IpNet;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

use super::*;
use crate::model::{ErrorKind, Outcome, Timestamp};

const NOW: Timestamp = Timestamp::from_millis(1_700_000_000_000);

// ---------------------------------------------------------------------------------------
// Fixtures
// ---------------------------------------------------------------------------------------

#[derive(Clone, Debug)]
struct Seen {
    path: String,
    headers: HeaderMap,
    body: Bytes,
}

type Responder = Arc<dyn Fn(&str) -> Response<Full<Bytes>> + Send + Sync>;

/// An HTTP/1 server on `ip:port` that records every request and every accepted connection.
struct TestServer {
    addr: SocketAddr,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl TestServer {
    async fn start(respond: impl Fn(&str) -> Response<Full<Bytes>> + Send + Sync + 'static) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        Self::serve(listener, Arc::new(respond))
    }

    async fn ok() -> Self {
        Self::start(|_| response(200, &[], "ok")).await
    }

    fn serve(listener: TcpListener, respond: Responder) -> Self {
        let addr = listener.local_addr().unwrap();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (seen2, connections2) = (seen.clone(), connections.clone());
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                connections2.fetch_add(1, Ordering::SeqCst);
                let (seen, respond) = (seen2.clone(), respond.clone());
                let service = service_fn(move |req: Request<Incoming>| {
                    let (seen, respond) = (seen.clone(), respond.clone());
                    async move {
                        let (parts, body) = req.into_parts();
                        let body = body.collect().await.map(|b| b.to_bytes()).unwrap_or_default();
                        let path = parts.uri.path().to_owned();
                        seen.lock().unwrap().push(Seen {
                            path: path.clone(),
                            headers: parts.headers,
                            body,
                        });
                        Ok::<_, Infallible>(respond(&path))
                    }
                });
                conns.spawn(async move {
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        TestServer {
            addr,
            seen,
            connections,
            task,
        }
    }

    fn url(&self, path: &str) -> Uri {
        format!("http://{}{path}", self.addr).parse().unwrap()
    }

    fn port(&self) -> u16 {
        self.addr.port()
    }

    fn seen(&self) -> Vec<Seen> {
        self.seen.lock().unwrap().clone()
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A listener that runs `on_accept` for each connection (raw TCP, for misbehaving servers).
struct RawServer {
    addr: SocketAddr,
    task: JoinHandle<()>,
}

impl RawServer {
    async fn start<F, Fut>(on_accept: F) -> Self
    where
        F: Fn(TcpStream) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(async move {
            let mut conns = tokio::task::JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                conns.spawn(on_accept(stream));
            }
        });
        RawServer { addr, task }
    }

    fn url(&self, scheme: &str) -> Uri {
        format!("{scheme}://{}/hook", self.addr).parse().unwrap()
    }
}

impl Drop for RawServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn response(status: u16, headers: &[(&'static str, String)], body: &'static str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from_static(body.as_bytes())));
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    for (name, value) in headers {
        r.headers_mut()
            .insert(*name, HeaderValue::from_str(value).unwrap());
    }
    r
}

/// Answers from a script: the n-th lookup of a name gets the n-th answer (the last one
/// repeats). Unknown names fail like NXDOMAIN. Never touches the network.
#[derive(Debug, Default)]
struct ScriptedResolver {
    script: HashMap<String, Vec<Vec<IpAddr>>>,
    calls: Mutex<HashMap<String, usize>>,
}

impl ScriptedResolver {
    fn new(entries: &[(&str, &[&[&str]])]) -> Arc<Self> {
        let script = entries
            .iter()
            .map(|(name, answers)| {
                let answers = answers
                    .iter()
                    .map(|ips| ips.iter().map(|ip| ip.parse().unwrap()).collect())
                    .collect();
                (name.to_string(), answers)
            })
            .collect();
        Arc::new(ScriptedResolver {
            script,
            calls: Mutex::default(),
        })
    }

    fn calls(&self, name: &str) -> usize {
        self.calls.lock().unwrap().get(name).copied().unwrap_or(0)
    }
}

impl Resolve for ScriptedResolver {
    fn resolve(&self, host: &str) -> ResolveFuture {
        let n = {
            let mut calls = self.calls.lock().unwrap();
            let n = calls.entry(host.to_owned()).or_default();
            *n += 1;
            *n - 1
        };
        let answer = self
            .script
            .get(host)
            .map(|answers| answers[n.min(answers.len() - 1)].clone());
        Box::pin(async move { answer.ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no such host")) })
    }
}

fn nets(list: &[&str]) -> Vec<IpNet> {
    list.iter().map(|s| s.parse().unwrap()).collect()
}

fn options(allow: &[&str]) -> SenderOptions {
    SenderOptions {
        allow_networks: nets(allow),
        max_idle_per_host: 8,
        extra_roots: Vec::new(),
        user_agent: "hookgate/0.1".to_owned(),
        max_response_body_bytes: 64 * 1024,
        proxy: None,
    }
}

fn sender(allow: &[&str]) -> Sender {
    Sender::with_resolver(options(allow), ScriptedResolver::new(&[])).unwrap()
}

fn request(url: Uri) -> OutgoingMessage {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", HeaderValue::from_static("application/json"));
    OutgoingMessage {
        destination: Destination::Http(HttpTarget {
            url,
            method: ::http::Method::POST,
            auth: None,
            route: Route::default(),
        }),
        message_id: "msg_1".to_owned(),
        headers,
        body: Bytes::from_static(br#"{"n":1}"#),
        timeout: Duration::from_secs(5),
        masked: Vec::new(),
    }
}

/// The HTTP target of a message built by [`request`], to give it credentials or a route.
fn http_of(req: &mut OutgoingMessage) -> &mut HttpTarget {
    match &mut req.destination {
        Destination::Http(target) => target,
        other => panic!("not an HTTP destination: {other:?}"),
    }
}

fn kind_of(outcome: &Outcome) -> Option<ErrorKind> {
    outcome.error_kind()
}

/// Fails unless `outcome` failed with `kind`, showing it.
#[track_caller]
fn assert_kind(outcome: &Outcome, kind: ErrorKind) {
    assert_eq!(kind_of(outcome), Some(kind), "{outcome:?}");
}

/// Whether a POST to the test server's `/` through `sender` was delivered.
async fn delivered(sender: &Sender, server: &TestServer) -> bool {
    sender
        .send(request(server.url("/")), NOW)
        .await
        .outcome
        .is_success()
}

fn detail_of(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Failed { detail, .. } => detail,
        Outcome::Delivered { .. } => "",
    }
}

/// Reads until the end of a request head, so a raw server answers only after being asked.
async fn read_request_head(stream: &mut TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 1024];
    while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// A loopback port with nothing listening on it.
async fn closed_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    listener.local_addr().unwrap().port()
}

// ---------------------------------------------------------------------------------------
// Outcomes
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn a_2xx_is_delivered_with_the_body_intact() {
    let server = TestServer::start(|_| response(204, &[], "")).await;
    let result = sender(&["127.0.0.0/8"])
        .send(request(server.url("/hook")), NOW)
        .await;
    assert_eq!(result.outcome, Outcome::Delivered { status: Some(204) });
    let seen = server.seen();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].path, "/hook");
    assert_eq!(seen[0].body, Bytes::from_static(br#"{"n":1}"#));
    assert!(result.duration < Duration::from_secs(5));
}

#[tokio::test]
async fn headers_sent_are_the_callers_plus_user_agent_host_and_content_length() {
    let server = TestServer::ok().await;
    let mut req = request(server.url("/hook"));
    req.headers
        .insert("webhook-id", HeaderValue::from_static("msg_1"));
    req.headers.insert("x-team", HeaderValue::from_static("billing"));
    // Connection-level headers from the caller are replaced by hyper's own.
    req.headers
        .insert("content-length", HeaderValue::from_static("999"));
    req.headers
        .insert("connection", HeaderValue::from_static("close"));
    let result = sender(&["127.0.0.0/8"]).send(req, NOW).await;
    assert_eq!(result.outcome, Outcome::Delivered { status: Some(200) });

    let seen = server.seen();
    let h = &seen[0].headers;
    let mut names: Vec<&str> = h.keys().map(|k| k.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "content-length",
            "content-type",
            "host",
            "user-agent",
            "webhook-id",
            "x-team"
        ]
    );
    assert_eq!(h["content-type"], "application/json");
    assert_eq!(h["webhook-id"], "msg_1");
    assert_eq!(h["x-team"], "billing");
    assert_eq!(h["user-agent"], "hookgate/0.1");
    assert_eq!(h["content-length"], "7");
    assert_eq!(h["host"], server.addr.to_string().as_str());
}

#[tokio::test]
async fn a_callers_user_agent_wins() {
    let server = TestServer::ok().await;
    let mut req = request(server.url("/"));
    req.headers
        .insert("user-agent", HeaderValue::from_static("billing-hooks/2"));
    sender(&["127.0.0.0/8"]).send(req, NOW).await;
    assert_eq!(server.seen()[0].headers["user-agent"], "billing-hooks/2");
}

#[tokio::test]
async fn the_standard_headers_arrive_as_signed() {
    let server = TestServer::ok().await;
    let secret = crate::model::Secret::new("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    let body = br#"{"test": 2432232314}"#;
    let mut req = request(server.url("/"));
    req.body = Bytes::from_static(body);
    req.headers.extend(signing::standard_headers(
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        1_614_265_330,
        1,
        &[secret],
        body,
        Some(signing::SignatureScheme::Hmac),
    ));
    sender(&["127.0.0.0/8"]).send(req, NOW).await;
    let h = &server.seen()[0].headers;
    assert_eq!(h["webhook-id"], "msg_p5jXN8AQM9LWM0D4loKWxJek");
    assert_eq!(h["webhook-timestamp"], "1614265330");
    assert_eq!(
        h["webhook-signature"],
        "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
    );
    assert_eq!(h["hookgate-delivery-attempt"], "1");
}

#[tokio::test]
async fn a_302_fails_as_redirect_and_its_target_is_never_requested() {
    let server = TestServer::start(|path| match path {
        "/hook" => response(302, &[("location", "/elsewhere".to_owned())], ""),
        _ => response(200, &[], "should never be asked"),
    })
    .await;
    let result = sender(&["127.0.0.0/8"])
        .send(request(server.url("/hook")), NOW)
        .await;
    let Outcome::Failed {
        kind,
        status,
        retry_after,
        detail,
    } = result.outcome
    else {
        panic!("a redirect must fail");
    };
    assert_eq!(
        (kind, status, retry_after),
        (ErrorKind::Redirect, Some(302), None)
    );
    assert!(detail.contains("/elsewhere"), "{detail}");
    let paths: Vec<String> = server.seen().into_iter().map(|s| s.path).collect();
    assert_eq!(paths, ["/hook"]);
}

#[tokio::test]
async fn a_500_with_retry_after_seconds_sets_retry_after() {
    let server = TestServer::start(|_| response(500, &[("retry-after", "120".to_owned())], "boom")).await;
    let result = sender(&["127.0.0.0/8"]).send(request(server.url("/")), NOW).await;
    assert_eq!(
        result.outcome,
        Outcome::Failed {
            kind: ErrorKind::HttpStatus,
            status: Some(500),
            retry_after: Some(NOW.plus(Duration::from_secs(120))),
            detail: "HTTP 500 Internal Server Error: boom".to_owned(),
        }
    );
}

#[tokio::test]
async fn a_429_with_an_http_date_sets_retry_after() {
    let in_an_hour = NOW.plus(Duration::from_secs(3600));
    let date = httpdate::fmt_http_date(in_an_hour.to_system_time());
    let server = TestServer::start(move |_| response(429, &[("retry-after", date.clone())], "")).await;
    let result = sender(&["127.0.0.0/8"]).send(request(server.url("/")), NOW).await;
    let Outcome::Failed {
        kind,
        status,
        retry_after,
        ..
    } = result.outcome
    else {
        panic!("429 is a failure");
    };
    assert_eq!(kind, ErrorKind::HttpStatus);
    assert_eq!(status, Some(429));
    assert_eq!(retry_after, Some(in_an_hour));
}

#[tokio::test]
async fn a_503_with_garbage_retry_after_has_none() {
    let server = TestServer::start(|_| response(503, &[("retry-after", "whenever".to_owned())], "")).await;
    let result = sender(&["127.0.0.0/8"]).send(request(server.url("/")), NOW).await;
    let Outcome::Failed {
        status, retry_after, ..
    } = result.outcome
    else {
        panic!()
    };
    assert_eq!((status, retry_after), (Some(503), None));
}

#[tokio::test]
async fn a_404_is_an_http_status_failure_without_retry_after() {
    let server =
        TestServer::start(|_| response(404, &[("retry-after", "60".to_owned())], "no such hook")).await;
    let result = sender(&["127.0.0.0/8"]).send(request(server.url("/")), NOW).await;
    assert_eq!(
        result.outcome,
        Outcome::Failed {
            kind: ErrorKind::HttpStatus,
            status: Some(404),
            retry_after: None,
            detail: "HTTP 404 Not Found: no such hook".to_owned(),
        }
    );
}

#[tokio::test]
async fn a_server_that_never_answers_times_out_within_the_timeout() {
    // Accepts, then holds the connection open without a word.
    let server = RawServer::start(|stream| async move {
        let _held = stream;
        std::future::pending::<()>().await;
    })
    .await;
    let mut req = request(server.url("http"));
    req.timeout = Duration::from_millis(200);
    let result = sender(&["127.0.0.0/8"]).send(req, NOW).await;
    assert_eq!(kind_of(&result.outcome), Some(ErrorKind::Timeout));
    assert_eq!(detail_of(&result.outcome), "no response within 200 ms");
    assert!(
        result.duration >= Duration::from_millis(200),
        "{:?}",
        result.duration
    );
    assert!(result.duration < Duration::from_secs(2), "{:?}", result.duration);
}

#[tokio::test]
async fn a_2xx_head_in_time_counts_even_if_the_body_never_finishes() {
    let server = RawServer::start(|mut stream| async move {
        read_request_head(&mut stream).await;
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 1000\r\n\r\npartial")
            .await;
        std::future::pending::<()>().await;
    })
    .await;
    let mut req = request(server.url("http"));
    req.timeout = Duration::from_millis(200);
    let result = sender(&["127.0.0.0/8"]).send(req, NOW).await;
    assert_eq!(result.outcome, Outcome::Delivered { status: Some(200) });
    assert!(result.duration < Duration::from_secs(2));
}

#[tokio::test]
async fn a_closed_port_is_a_connect_failure() {
    let port = closed_port().await;
    let url = format!("http://127.0.0.1:{port}/").parse().unwrap();
    let result = sender(&["127.0.0.0/8"]).send(request(url), NOW).await;
    assert_eq!(kind_of(&result.outcome), Some(ErrorKind::Connect));
    assert!(
        detail_of(&result.outcome).contains("connection refused"),
        "{}",
        detail_of(&result.outcome)
    );
}

#[tokio::test]
async fn a_connection_dropped_before_the_response_is_a_connect_failure() {
    let server = RawServer::start(|stream| async move { drop(stream) }).await;
    let result = sender(&["127.0.0.0/8"])
        .send(request(server.url("http")), NOW)
        .await;
    assert_kind(&result.outcome, ErrorKind::Connect);
}

#[tokio::test]
async fn https_to_a_plain_http_server_is_a_tls_failure() {
    let server = TestServer::ok().await;
    let url = format!("https://{}/", server.addr).parse().unwrap();
    let result = sender(&["127.0.0.0/8"]).send(request(url), NOW).await;
    assert_kind(&result.outcome, ErrorKind::Tls);
    assert!(detail_of(&result.outcome).starts_with("TLS handshake failed"));
    assert!(server.seen().is_empty());
}

#[tokio::test]
async fn a_server_closing_during_the_tls_handshake_is_a_tls_failure() {
    let server = RawServer::start(|stream| async move { drop(stream) }).await;
    let result = sender(&["127.0.0.0/8"])
        .send(request(server.url("https")), NOW)
        .await;
    assert_kind(&result.outcome, ErrorKind::Tls);
    assert!(detail_of(&result.outcome).starts_with("TLS handshake failed"));
}

#[tokio::test]
async fn a_huge_error_body_is_cut_off_and_only_excerpted() {
    static BIG: std::sync::LazyLock<&'static str> =
        std::sync::LazyLock::new(|| Box::leak("x".repeat(1 << 20).into_boxed_str()));
    let server = TestServer::start(|_| response(500, &[], *BIG)).await;
    let result = sender(&["127.0.0.0/8"]).send(request(server.url("/")), NOW).await;
    let detail = detail_of(&result.outcome);
    assert!(
        detail.starts_with("HTTP 500 Internal Server Error: xxx"),
        "{detail}"
    );
    assert!(detail.len() <= 40 + BODY_EXCERPT_BYTES, "{}", detail.len());
}

#[tokio::test]
async fn other_schemes_are_refused_without_any_connection() {
    let server = TestServer::ok().await;
    let url = format!("ftp://{}/", server.addr).parse().unwrap();
    let result = sender(&["127.0.0.0/8"]).send(request(url), NOW).await;
    assert_eq!(kind_of(&result.outcome), Some(ErrorKind::BlockedAddress));
    assert_eq!(server.connections(), 0);
}

// ---------------------------------------------------------------------------------------
// Keep-alive and hot reload
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn sequential_sends_reuse_one_keep_alive_connection() {
    let server = TestServer::ok().await;
    let sender = sender(&["127.0.0.0/8"]);
    for _ in 0..5 {
        let result = sender.clone().send(request(server.url("/")), NOW).await;
        assert!(result.outcome.is_success());
    }
    assert_eq!(server.seen().len(), 5);
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn revoking_an_allowed_network_also_stops_reuse_of_pooled_connections() {
    let server = TestServer::ok().await;
    let sender = sender(&["127.0.0.0/8"]);
    assert!(delivered(&sender, &server).await);

    sender.set_allow_networks(Vec::new());
    let blocked = sender.send(request(server.url("/")), NOW).await;
    assert_eq!(kind_of(&blocked.outcome), Some(ErrorKind::BlockedAddress));
    assert_eq!(server.seen().len(), 1, "the pooled connection must not be reused");

    sender.set_allow_networks(nets(&["127.0.0.0/8"]));
    assert!(delivered(&sender, &server).await);
    assert_eq!(sender.allow_networks(), nets(&["127.0.0.0/8"]));
}

#[tokio::test]
async fn widening_the_allow_list_keeps_the_pool() {
    let server = TestServer::ok().await;
    let sender = sender(&["127.0.0.0/8"]);
    assert!(delivered(&sender, &server).await);
    sender.set_allow_networks(nets(&["127.0.0.0/8", "10.0.0.0/8"]));
    assert!(delivered(&sender, &server).await);
    assert_eq!(server.connections(), 1);
}

// ---------------------------------------------------------------------------------------
// SSRF guard, end to end (loopback spellings only)
// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn loopback_spellings_are_blocked_without_an_allow_list_and_never_reached() {
    let server = TestServer::ok().await;
    // `localhost` goes through the system resolver, i.e. /etc/hosts.
    let sender = Sender::new(options(&[])).unwrap();
    for url in [
        format!("http://127.0.0.1:{}/", server.port()),
        format!("http://localhost:{}/", server.port()),
        format!("http://[::ffff:127.0.0.1]:{}/", server.port()),
        format!("http://[::1]:{}/", server.port()),
    ] {
        let result = sender.send(request(url.parse().unwrap()), NOW).await;
        assert_eq!(kind_of(&result.outcome), Some(ErrorKind::BlockedAddress), "{url}");
        assert!(detail_of(&result.outcome).contains("loopback"), "{url}");
    }
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn an_ipv4_mapped_loopback_url_is_allowed_by_the_ipv4_entry() {
    let server = TestServer::ok().await;
    let url = format!("http://[::ffff:127.0.0.1]:{}/", server.port())
        .parse()
        .unwrap();
    let result = sender(&["127.0.0.0/8"]).send(request(url), NOW).await;
    assert_eq!(result.outcome, Outcome::Delivered { status: Some(200) });
}

#[tokio::test]
async fn localhost_is_reachable_once_loopback_is_allowed() {
    let server = TestServer::ok().await;
    let sender = Sender::new(options(&["127.0.0.0/8"])).unwrap();
    let url = format!("http://localhost:{}/", server.port()).parse().unwrap();
    let result = sender.send(request(url), NOW).await;
    assert_eq!(result.outcome, Outcome::Delivered { status: Some(200) });
}

#[tokio::test]
async fn a_name_that_does_not_resolve_is_a_dns_failure() {
    let resolver = ScriptedResolver::new(&[]);
    let sender = Sender::with_resolver(options(&["127.0.0.0/8"]), resolver.clone()).unwrap();
    let url = "http://nowhere.invalid/hook".parse().unwrap();
    let result = sender.send(request(url), NOW).await;
    assert_eq!(kind_of(&result.outcome), Some(ErrorKind::Dns));
    assert!(detail_of(&result.outcome).contains("nowhere.invalid"));
    assert_eq!(resolver.calls("nowhere.invalid"), 1);
}

#[tokio::test]
async fn an_empty_dns_answer_is_a_dns_failure() {
    let resolver = ScriptedResolver::new(&[("empty.test", &[&[]])]);
    let sender = Sender::with_resolver(options(&[]), resolver).unwrap();
    let result = sender
        .send(request("http://empty.test/".parse().unwrap()), NOW)
        .await;
    assert_eq!(kind_of(&result.outcome), Some(ErrorKind::Dns));
}

#[tokio::test]
async fn a_public_name_resolving_to_private_addresses_is_blocked() {
    // Judged only: these addresses are refused before any connect.
    let resolver = ScriptedResolver::new(&[
        ("hooks.example.com", &[&["10.0.0.5"]]),
        ("metadata.example.com", &[&["169.254.169.254"]]),
        ("mapped.example.com", &[&["::ffff:192.168.1.1"]]),
        ("six.example.com", &[&["fd00::1", "fe80::1"]]),
    ]);
    let sender = Sender::with_resolver(options(&["127.0.0.0/8"]), resolver).unwrap();
    for (host, reason) in [
        ("hooks.example.com", "10.0.0.5: private network"),
        ("metadata.example.com", "cloud metadata"),
        ("mapped.example.com", "private network"),
        ("six.example.com", "unique-local"),
    ] {
        let url = format!("https://{host}/hook").parse().unwrap();
        let result = sender.send(request(url), NOW).await;
        assert_eq!(
            kind_of(&result.outcome),
            Some(ErrorKind::BlockedAddress),
            "{host}"
        );
        assert!(
            detail_of(&result.outcome).contains(reason),
            "{host}: {:?}",
            result.outcome
        );
    }
}

/// A second server on 127.0.0.2 with the same port as `server`: the address a rebinding
/// answer points to. It must never see a connection.
async fn decoy_for(server: &TestServer) -> TestServer {
    let addr = SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), server.port()));
    let listener = TcpListener::bind(addr)
        .await
        .expect("127.0.0.2 is loopback on Linux");
    TestServer::serve(listener, Arc::new(|_| response(200, &[], "decoy")))
}

#[tokio::test]
async fn dns_answers_are_pinned_a_second_different_answer_is_never_used() {
    let server = TestServer::ok().await;
    let decoy = decoy_for(&server).await;
    let resolver = ScriptedResolver::new(&[("rebind.test", &[&["127.0.0.1"], &["127.0.0.2"]])]);
    let sender = Sender::with_resolver(options(&["127.0.0.1/32"]), resolver.clone()).unwrap();
    let url: Uri = format!("http://rebind.test:{}/", server.port()).parse().unwrap();
    let result = sender.send(request(url), NOW).await;
    assert_eq!(result.outcome, Outcome::Delivered { status: Some(200) });
    assert_eq!(resolver.calls("rebind.test"), 1, "one lookup per connection");
    assert_eq!(server.seen().len(), 1);
    assert_eq!(decoy.connections(), 0);
}

#[tokio::test]
async fn a_blocked_first_answer_is_final_even_if_a_later_lookup_would_pass() {
    let server = TestServer::ok().await;
    let resolver = ScriptedResolver::new(&[("flip.test", &[&["10.1.2.3"], &["127.0.0.1"]])]);
    let sender = Sender::with_resolver(options(&["127.0.0.0/8"]), resolver.clone()).unwrap();
    let url: Uri = format!("http://flip.test:{}/", server.port()).parse().unwrap();
    let result = sender.send(request(url), NOW).await;
    assert_eq!(kind_of(&result.outcome), Some(ErrorKind::BlockedAddress));
    assert_eq!(resolver.calls("flip.test"), 1);
    assert_eq!(server.connections(), 0);
}

#[tokio::test]
async fn blocked_answers_are_dropped_and_only_allowed_ones_are_dialled() {
    let server = TestServer::ok().await;
    let decoy = decoy_for(&server).await;
    // 127.0.0.2 comes first but is outside the allow list.
    let resolver = ScriptedResolver::new(&[("mixed.test", &[&["127.0.0.2", "127.0.0.1"]])]);
    let sender = Sender::with_resolver(options(&["127.0.0.1/32"]), resolver).unwrap();
    let url: Uri = format!("http://mixed.test:{}/", server.port()).parse().unwrap();
    let result = sender.send(request(url), NOW).await;
    assert_eq!(result.outcome, Outcome::Delivered { status: Some(200) });
    assert_eq!(decoy.connections(), 0);
    assert_eq!(server.connections(), 1);
}

#[tokio::test]
async fn an_unreachable_first_address_falls_back_to_the_next() {
    let server = TestServer::ok().await;
    let port = server.port();
    // 127.0.0.3 has no listener on this port: refused at once, then 127.0.0.1 is tried.
    let resolver = ScriptedResolver::new(&[("two.test", &[&["127.0.0.3", "127.0.0.1"]])]);
    let sender = Sender::with_resolver(options(&["127.0.0.0/8"]), resolver).unwrap();
    let url: Uri = format!("http://two.test:{port}/").parse().unwrap();
    let result = sender.send(request(url), NOW).await;
    assert_eq!(result.outcome, Outcome::Delivered { status: Some(200) });
}

// ---------------------------------------------------------------------------------------
// TLS: verified against Mozilla's roots plus `delivery.ca_certs`
// ---------------------------------------------------------------------------------------

#[path = "../../tests/support/tls.rs"]
pub(crate) mod tls;
use tls::{test_pki, tls_server};

fn tls_sender(extra_roots: Vec<rustls::pki_types::CertificateDer<'static>>) -> Sender {
    let resolver = ScriptedResolver::new(&[("localhost", &[&["127.0.0.1"]])]);
    let opts = SenderOptions {
        extra_roots,
        ..options(&["127.0.0.0/8"])
    };
    Sender::with_resolver(opts, resolver).unwrap()
}

#[tokio::test]
async fn https_to_a_server_of_a_configured_ca_is_delivered() {
    let pki = test_pki();
    let (port, served) = tls_server(&pki).await;
    let url: Uri = format!("https://localhost:{port}/hooks").parse().unwrap();
    let result = tls_sender(vec![pki.ca.clone()]).send(request(url), NOW).await;
    assert_eq!(result.outcome, Outcome::Delivered { status: Some(200) });
    assert_eq!(served.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn https_to_a_server_of_an_unknown_ca_is_a_tls_failure() {
    let pki = test_pki();
    let (port, served) = tls_server(&pki).await;
    let url: Uri = format!("https://localhost:{port}/hooks").parse().unwrap();
    let result = tls_sender(Vec::new()).send(request(url), NOW).await;
    assert_kind(&result.outcome, ErrorKind::Tls);
    assert!(
        detail_of(&result.outcome).contains("UnknownIssuer"),
        "{}",
        detail_of(&result.outcome)
    );
    assert_eq!(
        served.load(Ordering::SeqCst),
        0,
        "nothing may pass an untrusted handshake"
    );
}

#[tokio::test]
async fn a_certificate_for_another_name_is_a_tls_failure_even_from_a_trusted_ca() {
    let pki = test_pki();
    let (port, served) = tls_server(&pki).await;
    // The certificate says `localhost`; the endpoint is reached by its address.
    let url: Uri = format!("https://127.0.0.1:{port}/hooks").parse().unwrap();
    let result = tls_sender(vec![pki.ca.clone()]).send(request(url), NOW).await;
    assert_kind(&result.outcome, ErrorKind::Tls);
    assert_eq!(served.load(Ordering::SeqCst), 0);
}

// ---------------------------------------------------------------------------------------
// Credentials and proxies
// ---------------------------------------------------------------------------------------

fn oauth2(token_url: Uri) -> Arc<OutboundAuth> {
    Arc::new(OutboundAuth::OAuth2(OAuth2Client {
        token_url,
        client_id: "id".into(),
        client_secret: crate::model::Secret::new("client-secret"),
        scope: None,
        audience: None,
    }))
}

#[tokio::test]
async fn the_token_url_passes_the_ssrf_guard_and_a_refusal_is_an_auth_failure() {
    let idp = TestServer::start(|_| response(200, &[], r#"{"access_token":"t"}"#)).await;
    let target = TestServer::ok().await;
    let mut req = request(target.url("/hook"));
    http_of(&mut req).auth = Some(oauth2(idp.url("/token")));
    // Nothing is allowed: the token request is refused before it leaves.
    let result = sender(&[]).send(req, NOW).await;
    assert_eq!(kind_of(&result.outcome), Some(ErrorKind::Auth), "{result:?}");
    let Outcome::Failed { detail, .. } = &result.outcome else {
        unreachable!()
    };
    assert!(detail.contains("blocked address 127.0.0.1"), "{detail}");
    assert!(idp.seen().is_empty() && target.seen().is_empty());
    assert!(result.exchange.request_headers.is_empty(), "nothing was sent");
}

#[tokio::test]
async fn a_proxy_that_refuses_the_tunnel_fails_the_attempt_as_connect() {
    let proxy = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let proxy_port = proxy.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = proxy.accept().await {
            let mut head = Vec::new();
            while !head.ends_with(b"\r\n\r\n") {
                let Ok(b) = stream.read_u8().await else { break };
                head.push(b);
            }
            let _ = stream.write_all(b"HTTP/1.1 403 Forbidden\r\n\r\n").await;
        }
    });
    let target = TestServer::ok().await;
    let mut req = request(target.url("/hook"));
    http_of(&mut req).route.proxy = Some(ProxyAddr {
        host: "127.0.0.1".into(),
        port: proxy_port,
    });
    let result = sender(&["127.0.0.0/8"]).send(req, NOW).await;
    assert_eq!(kind_of(&result.outcome), Some(ErrorKind::Connect), "{result:?}");
    let Outcome::Failed { detail, .. } = &result.outcome else {
        unreachable!()
    };
    assert!(
        detail.contains(&format!("proxy 127.0.0.1:{proxy_port}")) && detail.contains("403"),
        "{detail}"
    );
    assert!(target.seen().is_empty());
}

// ---------------------------------------------------------------------------------------
// Broker destinations: the same SSRF guard (loopback spellings only)
// ---------------------------------------------------------------------------------------

/// A message for a broker URL.
fn message_to(url: &str) -> OutgoingMessage {
    let mut req = request("http://unused.invalid/".parse().unwrap());
    req.destination = Destination::parse(url).unwrap();
    req
}

#[tokio::test]
async fn a_broker_at_a_blocked_address_is_never_dialled() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(AtomicUsize::new(0));
    let counter = accepted.clone();
    let _server = tokio::spawn(async move {
        while let Ok((_stream, _)) = listener.accept().await {
            counter.fetch_add(1, Ordering::SeqCst);
        }
    });
    let resolver = ScriptedResolver::new(&[("broker.test", &[&["127.0.0.1"]])]);
    let sender = Sender::with_resolver(options(&[]), resolver).unwrap();
    for url in [
        format!("nats://127.0.0.1:{port}/orders"),
        format!("amqp://guest:guest@broker.test:{port}/%2f?exchange=x&routing_key=k"),
        format!("redis://[::ffff:127.0.0.1]:{port}/0?stream=s"),
        format!("mqtt://broker.test:{port}/shop/orders"),
    ] {
        let result = sender.send(message_to(&url), NOW).await;
        assert_eq!(kind_of(&result.outcome), Some(ErrorKind::BlockedAddress), "{url}");
        assert!(detail_of(&result.outcome).contains("loopback"), "{url}");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_broker_that_refuses_the_connection_is_a_connect_failure_and_the_next_attempt_fails_at_once() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let sender = sender(&["127.0.0.0/8"]);
    let url = format!("redis://127.0.0.1:{port}/0?stream=s");
    let first = sender.send(message_to(&url), NOW).await;
    assert_eq!(kind_of(&first.outcome), Some(ErrorKind::Connect), "{first:?}");
    assert_eq!(first.outcome.status_code(), None);
    let second = sender.send(message_to(&url), NOW).await;
    assert_eq!(kind_of(&second.outcome), Some(ErrorKind::Connect));
    assert!(
        detail_of(&second.outcome).contains("next connection try"),
        "{second:?}"
    );
}
