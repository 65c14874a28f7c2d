//! HTTP(S): one `POST` per attempt over a pooled keep-alive client, the transport of
//! `http://` and `https://` destinations. Beside it: the endpoint's credentials (`auth`,
//! `oauth2`), its client certificate and proxy (`route`), and `Retry-After` (`retry_after`).

pub(super) mod auth;
mod oauth2;
mod retry_after;
pub(super) mod route;

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use http::header::{
    AUTHORIZATION, CONNECTION, CONTENT_LENGTH, HOST, LOCATION, RETRY_AFTER, TE, TRANSFER_ENCODING, UPGRADE,
    USER_AGENT,
};
use http::uri::Scheme;
use http::{HeaderMap, HeaderName, HeaderValue, Method, Request, StatusCode, Uri};
use http_body_util::{BodyExt as _, Full};
use hyper::body::Incoming;
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use self::auth::{OutboundAuth, bearer};
use self::oauth2::{TokenCache, TokenError};
pub use self::retry_after::{RETRY_AFTER_CAP, parse_retry_after};
use self::route::{ClientIdentity, Route, RouteKey};
use super::connector::{GuardedConnector, ProxyAddr, SharedAllowList};
use super::masked::{masked_text, masked_uri, recorded};
use super::sender::{Connections, OutgoingMessage, SenderOptions};
use super::{DeliveryError, Resolve, UrlError, describe_io};
use crate::model::{ErrorKind, Exchange, Outcome, Secret, Timestamp};

/// How much of a failed response's body is kept for the attempt's error text.
pub const BODY_EXCERPT_BYTES: usize = 200;

/// How much of a response body the attempt record keeps.
pub const RECORDED_BODY_BYTES: usize = 4 * 1024;

/// Idle pooled connections are closed after this long: under the 60 s idle timeout of common
/// load balancers and servers, so the gateway closes first and rarely writes into a
/// connection the receiver is tearing down.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(55);

/// Headers that describe one connection rather than the message. hyper writes its own
/// `Host`, `Content-Length` and framing; a caller's copies would contradict them (and are
/// illegal over HTTP/2).
const CONNECTION_LEVEL_HEADERS: [HeaderName; 8] = [
    HOST,
    CONTENT_LENGTH,
    TRANSFER_ENCODING,
    CONNECTION,
    UPGRADE,
    TE,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
];

/// An `http://` or `https://` destination: the URL, and how the request is made — the method,
/// the endpoint's credentials (added after every plugin ran) and its route (client
/// certificate, proxy). None of it is a broker's: a broker's credentials are in its URL.
#[derive(Clone, PartialEq)]
pub struct HttpTarget {
    pub url: Uri,
    /// `POST`, unless a transform chose `PUT` or `PATCH` for one message.
    pub method: Method,
    /// The endpoint's credentials, added as `Authorization` after every plugin ran.
    pub auth: Option<Arc<OutboundAuth>>,
    /// The endpoint's client certificate and proxy.
    pub route: Route,
}

impl HttpTarget {
    /// An absolute URL with a host; `POST`, no credentials, the default route. The reason
    /// never repeats a password.
    pub(super) fn parse(text: &str) -> Result<HttpTarget, UrlError> {
        let url: Uri = text
            .parse()
            .map_err(|e: http::uri::InvalidUri| UrlError::NotAUrl {
                url: masked_text(text),
                reason: e.to_string(),
            })?;
        if url.host().is_none_or(str::is_empty) {
            return Err(UrlError::NoHost(masked_uri(&url)));
        }
        Ok(HttpTarget {
            url,
            method: Method::POST,
            auth: None,
            route: Route::default(),
        })
    }

    /// The URL with any credentials shown as `***`.
    pub fn masked(&self) -> String {
        masked_uri(&self.url)
    }
}

impl fmt::Debug for HttpTarget {
    /// The URL masked, and whether there are credentials, never what they are.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpTarget")
            .field("url", &self.masked())
            .field("method", &self.method)
            .field("auth", &self.auth.is_some())
            .field("route", &self.route)
            .finish()
    }
}

pub(super) type HttpClient = Client<HttpsConnector<GuardedConnector>, Full<Bytes>>;

/// Sends HTTP attempts. Cheap to clone: every clone shares the pooled keep-alive clients, the
/// TLS configuration, the allow list and the OAuth2 tokens.
#[derive(Clone)]
pub(super) struct HttpSender {
    inner: Arc<Inner>,
}

struct Inner {
    /// The client of the default route. Swapped for a fresh pool when the allow list loses
    /// networks (see [`Sender::set_allow_networks`]).
    client: ArcSwap<HttpClient>,
    /// The clients of routes with a client certificate or a proxy of their own, made when an
    /// endpoint first needs one; emptied with the default pool.
    routes: Mutex<HashMap<RouteKey, Arc<HttpClient>>>,
    roots: Arc<rustls::RootCertStore>,
    resolver: Arc<dyn Resolve>,
    allow: SharedAllowList,
    default_proxy: Option<ProxyAddr>,
    tokens: TokenCache,
    max_idle_per_host: usize,
    user_agent: HeaderValue,
    max_response_body_bytes: usize,
}

impl fmt::Debug for HttpSender {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sender")
            .field("allow_networks", &**self.inner.allow.load())
            .field("max_idle_per_host", &self.inner.max_idle_per_host)
            .field("user_agent", &self.inner.user_agent)
            .field("max_response_body_bytes", &self.inner.max_response_body_bytes)
            .field("proxy", &self.inner.default_proxy)
            .finish()
    }
}

impl HttpSender {
    /// An HTTP sender on the shared roots, resolver and allow list.
    pub(super) fn new(
        opts: &SenderOptions,
        roots: Arc<rustls::RootCertStore>,
        resolver: Arc<dyn Resolve>,
        allow: SharedAllowList,
    ) -> Result<HttpSender, DeliveryError> {
        let user_agent =
            HeaderValue::from_str(&opts.user_agent).map_err(|_| DeliveryError::InvalidUserAgent)?;
        let client = make_client(
            &roots,
            &resolver,
            &allow,
            None,
            opts.proxy.clone(),
            opts.max_idle_per_host,
        )?;
        let inner = Inner {
            client: ArcSwap::from_pointee(client),
            routes: Mutex::new(HashMap::new()),
            roots,
            resolver,
            allow,
            default_proxy: opts.proxy.clone(),
            tokens: TokenCache::default(),
            max_idle_per_host: opts.max_idle_per_host,
            user_agent,
            max_response_body_bytes: opts.max_response_body_bytes,
        };
        Ok(HttpSender {
            inner: Arc::new(inner),
        })
    }
}

impl Connections for HttpSender {
    /// Replaces the pools, whose idle keep-alive connections were judged under an allow list
    /// that has lost a network since; attempts already running finish on their connection.
    fn drop_connections(&self) {
        // Building the default route's client succeeded at start with the same inputs.
        if let Ok(client) = self.inner.build_client(None, self.inner.default_proxy.clone()) {
            self.inner.client.store(Arc::new(client));
        }
        self.inner.routes().clear();
    }
}

impl HttpSender {
    /// One attempt: `POST url` with `body` and exactly the caller's `headers`, plus
    /// `Authorization` from the endpoint's credentials, `User-Agent` (unless given), `Host` and
    /// `Content-Length`; connection-level headers the caller passes (`Host`,
    /// `Content-Length`, `Transfer-Encoding`, `Connection`, …) are dropped because hyper owns
    /// them. Never follows redirects. With OAuth2, a 401 fetches a new token and sends the
    /// request once more.
    ///
    /// The timeout covers fetching a token, connect, TLS, sending, the response head and
    /// reading the body, in real time. Once a response head is in, the status decides the
    /// outcome even if the body is still trickling when time runs out: a receiver that
    /// answered 2xx in time has the event (README "How delivery works"), and the unread rest
    /// only costs the connection.
    ///
    /// `now` (the gateway clock, maybe simulated) turns `Retry-After` into an absolute time
    /// and tells whether an OAuth2 token is still fresh.
    ///
    /// Outcome mapping: 2xx → `Delivered`; 3xx → `Failed{Redirect}`; any other status →
    /// `Failed{HttpStatus}` with `retry_after` for 429 and 5xx; timeout → `Timeout`; DNS
    /// failure → `Dns`; refused/reset/unreachable, a proxy that refuses the tunnel →
    /// `Connect`; TLS handshake or certificate → `Tls`; SSRF refusal or a non-http(s) URL →
    /// `BlockedAddress`; no OAuth2 token → `Auth`. `detail` is short text for people: never a
    /// header, never a secret.
    pub(super) async fn send(
        &self,
        target: &HttpTarget,
        req: &OutgoingMessage,
        now: Timestamp,
        timeout: Duration,
        deadline: tokio::time::Instant,
    ) -> (Outcome, Exchange) {
        if let Err(e) = validate_url(&target.url) {
            let kind = e.kind().unwrap_or(ErrorKind::BlockedAddress);
            return (failed(kind, None, None, e.to_string()), Exchange::default());
        }
        let client = match self.client_for(&target.route) {
            Ok(client) => client,
            Err(e) => {
                return (
                    failed(ErrorKind::Tls, None, None, e.to_string()),
                    Exchange::default(),
                );
            }
        };
        let mut rejected = None;
        loop {
            let credential = match self
                .credential(target, &client, now, rejected.as_ref(), deadline)
                .await
            {
                Ok(credential) => credential,
                Err(outcome) => return (outcome, Exchange::default()),
            };
            let header = credential.as_ref().map(|c| c.header.clone());
            let (outcome, exchange) = self
                .exchange(&client, target, req, header, now, timeout, deadline)
                .await;
            // One new token per attempt: a receiver that refuses a fresh one refuses it.
            match credential.and_then(|c| c.oauth_token) {
                Some(token) if outcome.status_code() == Some(401) && rejected.is_none() => {
                    rejected = Some(token);
                }
                _ => return (outcome, exchange),
            }
        }
    }

    /// The `Authorization` value of the endpoint's credentials (fetching an OAuth2 token that
    /// is not `rejected` when needed, by `deadline`), or the attempt's `auth` failure.
    async fn credential(
        &self,
        target: &HttpTarget,
        client: &HttpClient,
        now: Timestamp,
        rejected: Option<&Secret>,
        deadline: tokio::time::Instant,
    ) -> Result<Option<Credential>, Outcome> {
        let Some(auth) = target.auth.as_deref() else {
            return Ok(None);
        };
        let OutboundAuth::OAuth2(oauth) = auth else {
            return Ok(auth.static_header().map(|header| Credential {
                header,
                oauth_token: None,
            }));
        };
        let tokens = &self.inner.tokens;
        let token = tokio::time::timeout_at(
            deadline,
            tokens.token(oauth, client, &self.inner.user_agent, now, rejected),
        )
        .await
        .unwrap_or(Err(TokenError::Timeout))
        .map_err(|e| failed(ErrorKind::Auth, None, None, e.to_string()))?;
        Ok(Some(Credential {
            header: bearer(token.expose()),
            oauth_token: Some(token),
        }))
    }

    /// Sends the request once and reads the answer.
    #[allow(clippy::too_many_arguments)]
    async fn exchange(
        &self,
        client: &HttpClient,
        target: &HttpTarget,
        req: &OutgoingMessage,
        authorization: Option<HeaderValue>,
        now: Timestamp,
        timeout: Duration,
        deadline: tokio::time::Instant,
    ) -> (Outcome, Exchange) {
        let request = self.build_request(target, req, authorization);
        let mut exchange = Exchange {
            request_headers: recorded(request.headers(), &req.masked),
            ..Exchange::default()
        };
        let response = match tokio::time::timeout_at(deadline, client.request(request)).await {
            Err(_) => {
                let detail = format!("no response within {} ms", timeout.as_millis());
                return (failed(ErrorKind::Timeout, None, None, detail), exchange);
            }
            Ok(Err(e)) => {
                let (kind, detail) = classify_client_error(&e);
                return (failed(kind, None, None, detail), exchange);
            }
            Ok(Ok(response)) => response,
        };
        let (head, body) = response.into_parts();
        let kept = drain_body(body, self.inner.max_response_body_bytes, deadline).await;
        exchange.response_headers = recorded(&head.headers, &[]);
        exchange.response_body = Some(String::from_utf8_lossy(&kept).into_owned());
        let excerpt = &kept[..kept.len().min(BODY_EXCERPT_BYTES)];
        (
            outcome_of_response(head.status, &head.headers, excerpt, now),
            exchange,
        )
    }

    fn build_request(
        &self,
        target: &HttpTarget,
        req: &OutgoingMessage,
        authorization: Option<HeaderValue>,
    ) -> Request<Full<Bytes>> {
        let mut headers = req.headers.clone();
        for name in &CONNECTION_LEVEL_HEADERS {
            headers.remove(name);
        }
        if !headers.contains_key(USER_AGENT) {
            headers.insert(USER_AGENT, self.inner.user_agent.clone());
        }
        if let Some(value) = authorization {
            headers.insert(AUTHORIZATION, value);
        }
        let mut request = Request::new(Full::new(req.body.clone()));
        *request.method_mut() = target.method.clone();
        *request.uri_mut() = target.url.clone();
        *request.headers_mut() = headers;
        request
    }

    /// The pooled client of a route: the default one, or one made for the route's client
    /// certificate and proxy.
    fn client_for(&self, route: &Route) -> Result<Arc<HttpClient>, DeliveryError> {
        if route.identity.is_none() && route.proxy.is_none() {
            return Ok(self.inner.client.load_full());
        }
        let proxy = route.proxy.clone().or_else(|| self.inner.default_proxy.clone());
        let key = RouteKey {
            identity: route.identity.as_ref().map(|id| id.fingerprint()),
            proxy: proxy.clone(),
        };
        let mut routes = self.inner.routes();
        if let Some(client) = routes.get(&key) {
            return Ok(client.clone());
        }
        let client = Arc::new(self.inner.build_client(route.identity.as_deref(), proxy)?);
        routes.insert(key, client.clone());
        Ok(client)
    }
}

/// An `Authorization` value, and the OAuth2 token in it (to renew it after a 401).
struct Credential {
    header: HeaderValue,
    oauth_token: Option<Secret>,
}

impl Inner {
    fn routes(&self) -> std::sync::MutexGuard<'_, HashMap<RouteKey, Arc<HttpClient>>> {
        self.routes.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn build_client(
        &self,
        identity: Option<&ClientIdentity>,
        proxy: Option<ProxyAddr>,
    ) -> Result<HttpClient, DeliveryError> {
        make_client(
            &self.roots,
            &self.resolver,
            &self.allow,
            identity,
            proxy,
            self.max_idle_per_host,
        )
    }
}

/// A pooled client over the SSRF-guarded connector, with a client certificate and a proxy
/// when given.
fn make_client(
    roots: &Arc<rustls::RootCertStore>,
    resolver: &Arc<dyn Resolve>,
    allow: &SharedAllowList,
    identity: Option<&ClientIdentity>,
    proxy: Option<ProxyAddr>,
    max_idle_per_host: usize,
) -> Result<HttpClient, DeliveryError> {
    // The builder sets ALPN (h2, http/1.1) on this config from the versions enabled below.
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(tls_config(roots.clone(), identity)?)
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(GuardedConnector::new(resolver.clone(), allow.clone()).through(proxy));
    Ok(Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(max_idle_per_host)
        .pool_idle_timeout(POOL_IDLE_TIMEOUT)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector))
}

fn tls_config(
    roots: Arc<rustls::RootCertStore>,
    identity: Option<&ClientIdentity>,
) -> Result<rustls::ClientConfig, rustls::Error> {
    let builder =
        rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()?
            .with_root_certificates(roots);
    match identity {
        None => Ok(builder.with_no_client_auth()),
        Some(id) => builder.with_client_auth_cert(id.chain(), id.key()),
    }
}

/// `Ok` for an absolute `http` or `https` URL with a host: the only URLs the gateway
/// delivers to. Configuration can call this to refuse bad endpoint URLs at load time.
pub fn validate_url(url: &Uri) -> Result<(), DeliveryError> {
    match url.scheme() {
        Some(s) if *s == Scheme::HTTP || *s == Scheme::HTTPS => {}
        other => {
            return Err(DeliveryError::UnsupportedScheme(
                other.map(|s| s.as_str().to_owned()).unwrap_or_default(),
            ));
        }
    }
    match url.host() {
        Some(h) if !h.is_empty() => Ok(()),
        _ => Err(DeliveryError::NoHost),
    }
}

fn failed(kind: ErrorKind, status: Option<u16>, retry_after: Option<Timestamp>, detail: String) -> Outcome {
    Outcome::Failed {
        kind,
        status,
        retry_after,
        detail,
    }
}

/// The status decides: 2xx delivered, 3xx a redirect (never followed), anything else an HTTP
/// failure; `Retry-After` counts only on 429 and 5xx (README "How delivery works").
fn outcome_of_response(status: StatusCode, headers: &HeaderMap, excerpt: &[u8], now: Timestamp) -> Outcome {
    let code = status.as_u16();
    if status.is_success() {
        return Outcome::Delivered { status: Some(code) };
    }
    let status_text = match status.canonical_reason() {
        Some(reason) => format!("HTTP {code} {reason}"),
        None => format!("HTTP {code}"),
    };
    if status.is_redirection() {
        let detail = match headers.get(LOCATION).and_then(|v| v.to_str().ok()) {
            Some(target) => format!(
                "{status_text}: redirect to {} not followed",
                truncate_chars(target, BODY_EXCERPT_BYTES)
            ),
            None => format!("{status_text}: redirects are not followed"),
        };
        return failed(ErrorKind::Redirect, Some(code), None, detail);
    }
    let retry_after = if code == 429 || status.is_server_error() {
        headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| parse_retry_after(v, now))
    } else {
        None
    };
    let text = excerpt_text(excerpt);
    let detail = if text.is_empty() {
        status_text
    } else {
        format!("{status_text}: {text}")
    };
    failed(ErrorKind::HttpStatus, Some(code), retry_after, detail)
}

/// Reads the body until its end, `max_bytes`, or `deadline`, whichever comes first, and
/// returns its first [`RECORDED_BODY_BYTES`]. Reading to the end lets the connection return to
/// the pool; stopping early drops it, which closes it.
async fn drain_body(mut body: Incoming, max_bytes: usize, deadline: tokio::time::Instant) -> Vec<u8> {
    let mut excerpt = Vec::new();
    let mut read_bytes = 0usize;
    while read_bytes < max_bytes {
        let frame = match tokio::time::timeout_at(deadline, body.frame()).await {
            Ok(Some(Ok(frame))) => frame,
            Ok(None) | Ok(Some(Err(_))) | Err(_) => break,
        };
        if let Ok(data) = frame.into_data() {
            let room = RECORDED_BODY_BYTES.saturating_sub(excerpt.len());
            excerpt.extend_from_slice(&data[..data.len().min(room)]);
            read_bytes = read_bytes.saturating_add(data.len());
        }
    }
    excerpt
}

/// A body excerpt fit for a one-line error text: lossy UTF-8, control characters as spaces.
fn excerpt_text(excerpt: &[u8]) -> String {
    let text: String = String::from_utf8_lossy(excerpt)
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    text.trim().to_owned()
}

fn truncate_chars(s: &str, max_chars: usize) -> &str {
    match s.char_indices().nth(max_chars) {
        Some((at, _)) => &s[..at],
        None => s,
    }
}

/// Maps a client error to its kind. Errors from our connector carry their kind; a rustls
/// error is `Tls`; any other failure while connecting happened after TCP was up, i.e. in the
/// TLS handshake (`Tls`); a failure after connecting (reset, closed early, garbled response)
/// is `Connect`.
pub(super) fn classify_client_error(err: &hyper_util::client::legacy::Error) -> (ErrorKind, String) {
    let mut innermost: &(dyn StdError + 'static) = err;
    let mut current: Option<&(dyn StdError + 'static)> = Some(err);
    while let Some(e) = current {
        if let Some(ours) = e.downcast_ref::<DeliveryError>()
            && let Some(kind) = ours.kind()
        {
            return (kind, ours.to_string());
        }
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return (ErrorKind::Tls, format!("TLS handshake failed: {tls}"));
        }
        innermost = e;
        // An io::Error's `source()` skips the error it wraps; `get_ref()` does not.
        current = match e.downcast_ref::<io::Error>() {
            Some(io_err) => io_err.get_ref().map(|inner| inner as &(dyn StdError + 'static)),
            None => e.source(),
        };
    }
    let cause = match innermost.downcast_ref::<io::Error>() {
        Some(io_err) => describe_io(io_err),
        None => innermost.to_string(),
    };
    if err.is_connect() {
        (ErrorKind::Tls, format!("TLS handshake failed: {cause}"))
    } else {
        (ErrorKind::Connect, format!("request failed: {cause}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const NOW: Timestamp = Timestamp::from_millis(1_700_000_000_000);

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (HeaderName::from_static(k), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn any_2xx_is_delivered() {
        for code in [200, 201, 202, 204, 299] {
            let status = StatusCode::from_u16(code).unwrap();
            assert_eq!(
                outcome_of_response(status, &HeaderMap::new(), b"", NOW),
                Outcome::Delivered { status: Some(code) }
            );
        }
    }

    #[test]
    fn a_3xx_is_a_redirect_failure_naming_its_target() {
        let out = outcome_of_response(
            StatusCode::FOUND,
            &headers(&[("location", "http://elsewhere.test/x")]),
            b"",
            NOW,
        );
        let Outcome::Failed {
            kind,
            status,
            retry_after,
            detail,
        } = out
        else {
            panic!("a redirect is a failure");
        };
        assert_eq!(kind, ErrorKind::Redirect);
        assert_eq!(status, Some(302));
        assert_eq!(retry_after, None);
        assert!(detail.contains("http://elsewhere.test/x"), "{detail}");
    }

    #[test]
    fn retry_after_counts_only_on_429_and_5xx() {
        let h = headers(&[("retry-after", "30")]);
        let want = Some(NOW.plus(Duration::from_secs(30)));
        for code in [429, 500, 503, 599] {
            let out = outcome_of_response(StatusCode::from_u16(code).unwrap(), &h, b"", NOW);
            assert_eq!(out.error_kind(), Some(ErrorKind::HttpStatus));
            let Outcome::Failed { retry_after, .. } = out else {
                unreachable!()
            };
            assert_eq!(retry_after, want, "{code}");
        }
        for code in [400, 404, 410, 418] {
            let out = outcome_of_response(StatusCode::from_u16(code).unwrap(), &h, b"", NOW);
            let Outcome::Failed {
                retry_after, status, ..
            } = out
            else {
                unreachable!()
            };
            assert_eq!(retry_after, None, "{code}");
            assert_eq!(status, Some(code));
        }
    }

    #[test]
    fn failure_detail_shows_status_and_a_one_line_body_excerpt() {
        let out = outcome_of_response(
            StatusCode::SERVICE_UNAVAILABLE,
            &HeaderMap::new(),
            b"  down for\r\nmaintenance \xff ",
            NOW,
        );
        let Outcome::Failed { detail, .. } = out else {
            unreachable!()
        };
        assert_eq!(
            detail,
            "HTTP 503 Service Unavailable: down for  maintenance \u{fffd}"
        );
        let bare = outcome_of_response(StatusCode::NOT_FOUND, &HeaderMap::new(), b"", NOW);
        let Outcome::Failed { detail, .. } = bare else {
            unreachable!()
        };
        assert_eq!(detail, "HTTP 404 Not Found");
    }

    #[test]
    fn only_absolute_http_and_https_urls_are_valid() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        assert!(validate_url(&uri("http://example.com/hook")).is_ok());
        assert!(validate_url(&uri("HTTPS://example.com/hook")).is_ok());
        for bad in [
            "ftp://example.com/",
            "file://localhost/etc/passwd",
            "gopher://x/",
            "/relative",
        ] {
            let err = validate_url(&uri(bad)).unwrap_err();
            assert_eq!(err.kind(), Some(ErrorKind::BlockedAddress), "{bad}");
        }
    }

    #[test]
    fn long_redirect_targets_are_cut_on_a_char_boundary() {
        let long = "é".repeat(300);
        assert_eq!(truncate_chars(&long, 200).chars().count(), 200);
        assert_eq!(truncate_chars("short", 200), "short");
    }
}
