//! The SSRF guard on the wire: a `tower::Service<Uri>` connector that hyper-rustls wraps.
//!
//! Per new connection it resolves the host **once** (or takes a literal IP, bracketed IPv6
//! included), judges every answer with [`ssrf::check`] against the allow list current at that
//! moment, and connects only to addresses it judged allowed — never a second lookup, so a DNS
//! answer that flips between check and connect (rebinding) cannot reach a blocked address.
//! Blocked answers are dropped; when nothing allowed remains the attempt fails with
//! `blocked_address`. Several allowed addresses are tried happy-eyeballs style: the next one
//! starts when the previous failed or has not connected within [`CONNECT_STAGGER`].
//!
//! Through an egress proxy the same holds: the target is resolved and judged here, and the
//! proxy is asked to `CONNECT` to the judged address itself, never to the name, so the proxy
//! cannot resolve it to somewhere else. The proxy's own address is the operator's choice and
//! is not judged.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use arc_swap::ArcSwap;
use futures_util::StreamExt as _;
use futures_util::stream::FuturesUnordered;
use http::Uri;
use hyper_util::rt::TokioIo;
use ipnet::IpNet;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

use super::masked::masked_text;
use super::{DeliveryError, Resolve, ssrf};

/// How long one address gets before the next one is tried in parallel (RFC 8305 suggests
/// 250 ms).
pub const CONNECT_STAGGER: Duration = Duration::from_millis(250);

/// Upper bound on one TCP connect. The attempt's own timeout normally ends it much earlier;
/// this only bounds a connect that hyper keeps running for its pool after the attempt is over.
pub const CONNECT_CAP: Duration = Duration::from_secs(30);

/// The longest proxy answer to a `CONNECT` that is read.
const MAX_PROXY_HEAD_BYTES: usize = 8 * 1024;

/// The allow list, shared with [`super::Sender`] so a config reload takes effect on the next
/// connection without rebuilding anything.
pub type SharedAllowList = Arc<ArcSwap<Vec<IpNet>>>;

/// Resolves, judges and connects; see the module doc.
#[derive(Clone, Debug)]
pub struct GuardedConnector {
    resolver: Arc<dyn Resolve>,
    allow: SharedAllowList,
    proxy: Option<ProxyAddr>,
}

impl GuardedConnector {
    pub fn new(resolver: Arc<dyn Resolve>, allow: SharedAllowList) -> Self {
        GuardedConnector {
            resolver,
            allow,
            proxy: None,
        }
    }

    /// The same guard, tunnelling every connection through `proxy` with `CONNECT`.
    pub fn through(mut self, proxy: Option<ProxyAddr>) -> Self {
        self.proxy = proxy;
        self
    }

    /// Opens a TCP connection to the URL's host, or says which rule refused it.
    pub async fn connect(&self, uri: &Uri) -> Result<TcpStream, DeliveryError> {
        let port = port_of(uri)?;
        let host = uri.host().ok_or(DeliveryError::NoHost)?;
        self.connect_to(host, port).await
    }

    /// Opens a TCP connection to `host:port` (a broker's address), or says which rule refused
    /// it.
    pub async fn connect_to(&self, host: &str, port: u16) -> Result<TcpStream, DeliveryError> {
        let allowed = self.judge(host, port).await?;
        let stream = match &self.proxy {
            None => connect_first(allowed).await?,
            Some(proxy) => self.tunnel(proxy, allowed[0]).await?,
        };
        // Webhook requests are small and latency matters more than packet count.
        stream
            .set_nodelay(true)
            .map_err(|source| DeliveryError::Connect {
                addr: stream
                    .peer_addr()
                    .unwrap_or_else(|_| SocketAddr::from(([0; 4], port))),
                source,
            })?;
        Ok(stream)
    }

    /// Resolves `host` once and returns the addresses the allow list lets through, families
    /// interleaved; never empty. For clients that dial by themselves: they get an address
    /// judged here, never the name.
    pub async fn judge(&self, host: &str, port: u16) -> Result<Vec<SocketAddr>, DeliveryError> {
        let resolved = self.resolve(host).await?;
        let allow = self.allow.load();
        let mut allowed = Vec::with_capacity(resolved.len());
        let mut first_refusal = None;
        for ip in resolved {
            match ssrf::check(ip, &allow) {
                // A mapped address is dialled as the IPv4 address it stands for: the check
                // judged that address, and it works whether or not the host has dual-stack
                // sockets.
                Ok(()) => allowed.push(SocketAddr::new(ip.to_canonical(), port)),
                Err(reason) => {
                    if first_refusal.is_none() {
                        first_refusal = Some(DeliveryError::BlockedAddress { addr: ip, reason });
                    }
                }
            }
        }
        if allowed.is_empty() {
            return Err(first_refusal.unwrap_or_else(|| DeliveryError::NoAddress {
                host: host.to_owned(),
            }));
        }
        Ok(interleave_families(allowed))
    }

    /// A connection to `target` through `proxy`: TCP to the proxy, `CONNECT target`, a 2xx.
    async fn tunnel(&self, proxy: &ProxyAddr, target: SocketAddr) -> Result<TcpStream, DeliveryError> {
        let refused = |detail: String| DeliveryError::Proxy {
            proxy: proxy.to_string(),
            detail,
        };
        let addrs = self
            .resolve(&proxy.host)
            .await?
            .into_iter()
            .map(|ip| SocketAddr::new(ip, proxy.port))
            .collect();
        let mut stream = connect_first(interleave_families(addrs)).await?;
        let handshake = async {
            let request = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n");
            stream.write_all(request.as_bytes()).await?;
            read_head(&mut stream).await
        };
        let head = match tokio::time::timeout(CONNECT_CAP, handshake).await {
            Ok(Ok(head)) => head,
            Ok(Err(e)) => {
                return Err(refused(format!(
                    "CONNECT to {target}: {}",
                    super::describe_io(&e)
                )));
            }
            Err(_) => return Err(refused(format!("CONNECT to {target}: no answer"))),
        };
        let status_line = head.lines().next().unwrap_or_default();
        let code = status_line.split_whitespace().nth(1).unwrap_or_default();
        if !(code.len() == 3 && code.starts_with('2')) {
            let shown: String = status_line.chars().take(100).collect();
            return Err(refused(format!("CONNECT to {target} answered `{shown}`")));
        }
        Ok(stream)
    }

    async fn resolve(&self, host: &str) -> Result<Vec<IpAddr>, DeliveryError> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return Ok(vec![ip]);
        }
        let addrs = self
            .resolver
            .resolve(bare)
            .await
            .map_err(|source| DeliveryError::Dns {
                host: bare.to_owned(),
                source,
            })?;
        if addrs.is_empty() {
            return Err(DeliveryError::NoAddress {
                host: bare.to_owned(),
            });
        }
        Ok(addrs)
    }
}

impl tower::Service<Uri> for GuardedConnector {
    type Response = TokioIo<TcpStream>;
    type Error = DeliveryError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let this = self.clone();
        Box::pin(async move { this.connect(&uri).await.map(TokioIo::new) })
    }
}

/// Reads a proxy's answer head one byte at a time, so that nothing of the tunnel that follows
/// is consumed.
async fn read_head(stream: &mut TcpStream) -> io::Result<String> {
    let mut head = Vec::with_capacity(128);
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() >= MAX_PROXY_HEAD_BYTES {
            return Err(io::Error::new(io::ErrorKind::InvalidData, "answer head too long"));
        }
        head.push(stream.read_u8().await?);
    }
    Ok(String::from_utf8_lossy(&head).into_owned())
}

/// The port to connect to: explicit, or the scheme's default. Other schemes are refused here
/// too, so the connector is safe even when used without [`super::validate_url`].
fn port_of(uri: &Uri) -> Result<u16, DeliveryError> {
    let default = match uri.scheme_str() {
        Some("http") => 80,
        Some("https") => 443,
        other => {
            return Err(DeliveryError::UnsupportedScheme(other.unwrap_or("").to_owned()));
        }
    };
    Ok(uri.port_u16().unwrap_or(default))
}

/// Alternates address families, starting with the resolver's first choice (RFC 8305 §4), so
/// a broken IPv6 path costs one stagger, not one per IPv6 address.
fn interleave_families(addrs: Vec<SocketAddr>) -> Vec<SocketAddr> {
    let first_is_v6 = addrs.first().is_some_and(SocketAddr::is_ipv6);
    let (mut preferred, mut other): (Vec<_>, Vec<_>) =
        addrs.into_iter().partition(|a| a.is_ipv6() == first_is_v6);
    preferred.reverse();
    other.reverse();
    let mut out = Vec::with_capacity(preferred.len() + other.len());
    loop {
        match (preferred.pop(), other.pop()) {
            (None, None) => return out,
            (a, b) => out.extend(a.into_iter().chain(b)),
        }
    }
}

/// Happy-eyeballs-ish: start with the first address; start the next one as soon as one fails
/// or after [`CONNECT_STAGGER`] without an answer; the first connection wins, the others are
/// dropped. When all fail, the last failure is reported.
async fn connect_first(addrs: Vec<SocketAddr>) -> Result<TcpStream, DeliveryError> {
    let mut queue = addrs.into_iter().peekable();
    let mut running = FuturesUnordered::new();
    let mut last_failure = None;
    loop {
        if running.is_empty() {
            match queue.next() {
                Some(addr) => running.push(connect_one(addr)),
                None => {
                    return Err(last_failure.unwrap_or_else(|| DeliveryError::Connect {
                        addr: SocketAddr::from(([0; 4], 0)),
                        source: io::Error::new(io::ErrorKind::NotFound, "no address to try"),
                    }));
                }
            }
        }
        let more_to_try = queue.peek().is_some();
        tokio::select! {
            done = running.next() => match done {
                Some(Ok(stream)) => return Ok(stream),
                Some(Err(failure)) => {
                    last_failure = Some(failure);
                    if let Some(addr) = queue.next() {
                        running.push(connect_one(addr));
                    }
                }
                None => {}
            },
            () = tokio::time::sleep(CONNECT_STAGGER), if more_to_try => {
                if let Some(addr) = queue.next() {
                    running.push(connect_one(addr));
                }
            }
        }
    }
}

async fn connect_one(addr: SocketAddr) -> Result<TcpStream, DeliveryError> {
    match tokio::time::timeout(CONNECT_CAP, TcpStream::connect(addr)).await {
        Ok(Ok(stream)) => Ok(stream),
        Ok(Err(source)) => Err(DeliveryError::Connect { addr, source }),
        Err(_) => Err(DeliveryError::Connect {
            addr,
            source: io::ErrorKind::TimedOut.into(),
        }),
    }
}

/// Why a proxy URL names no proxy; the URL is shown with any credentials masked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProxyError {
    #[error("`{url}` is not a URL: {reason}")]
    NotAUrl { url: String, reason: String },
    #[error("`{0}` must start with http:// (a CONNECT proxy)")]
    NotHttp(String),
    #[error("`{0}` has no host")]
    NoHost(String),
    #[error("proxy credentials in the URL are not supported")]
    Credentials,
    #[error("`{0}` may not have a path or query")]
    PathOrQuery(String),
}

/// An HTTP proxy that tunnels with `CONNECT`: `http://host:port`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ProxyAddr {
    pub host: String,
    pub port: u16,
}

impl ProxyAddr {
    /// `http://host:port` (port 80 when absent); no credentials, path or query.
    pub fn parse(text: &str) -> Result<ProxyAddr, ProxyError> {
        let shown = || masked_text(text);
        let uri: Uri = text
            .parse()
            .map_err(|e: http::uri::InvalidUri| ProxyError::NotAUrl {
                url: shown(),
                reason: e.to_string(),
            })?;
        if uri.scheme_str() != Some("http") {
            return Err(ProxyError::NotHttp(shown()));
        }
        let authority = uri.authority().ok_or_else(|| ProxyError::NoHost(shown()))?;
        if authority.as_str().contains('@') {
            return Err(ProxyError::Credentials);
        }
        if uri.path_and_query().is_some_and(|p| p.as_str() != "/") {
            return Err(ProxyError::PathOrQuery(shown()));
        }
        let host = authority.host();
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        Ok(ProxyAddr {
            host: host.to_owned(),
            port: authority.port_u16().unwrap_or(80),
        })
    }
}

impl fmt::Display for ProxyAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn families_alternate_starting_with_the_first_answer() {
        let got = interleave_families(vec![
            sa("[2606:4700::1]:443"),
            sa("[2606:4700::2]:443"),
            sa("[2606:4700::3]:443"),
            sa("1.1.1.1:443"),
        ]);
        assert_eq!(
            got,
            vec![
                sa("[2606:4700::1]:443"),
                sa("1.1.1.1:443"),
                sa("[2606:4700::2]:443"),
                sa("[2606:4700::3]:443"),
            ]
        );
        let v4_first = interleave_families(vec![sa("1.1.1.1:80"), sa("1.0.0.1:80"), sa("[::2]:80")]);
        assert_eq!(v4_first, vec![sa("1.1.1.1:80"), sa("[::2]:80"), sa("1.0.0.1:80")]);
    }

    #[test]
    fn ports_default_by_scheme_and_other_schemes_are_refused() {
        let uri = |s: &str| s.parse::<Uri>().unwrap();
        assert_eq!(port_of(&uri("http://example.com/")).unwrap(), 80);
        assert_eq!(port_of(&uri("https://example.com/")).unwrap(), 443);
        assert_eq!(port_of(&uri("https://example.com:8443/")).unwrap(), 8443);
        assert!(matches!(
            port_of(&uri("ftp://example.com/")),
            Err(DeliveryError::UnsupportedScheme(s)) if s == "ftp"
        ));
        assert!(matches!(
            port_of(&uri("/relative")),
            Err(DeliveryError::UnsupportedScheme(_))
        ));
    }

    #[test]
    fn proxies_are_plain_http_urls_with_a_host_and_nothing_else() {
        assert_eq!(
            ProxyAddr::parse("http://proxy.internal:3128").unwrap(),
            ProxyAddr {
                host: "proxy.internal".into(),
                port: 3128
            }
        );
        assert_eq!(
            ProxyAddr::parse("http://[::1]:8080/").unwrap().to_string(),
            "[::1]:8080"
        );
        assert_eq!(ProxyAddr::parse("http://p").unwrap().port, 80);
        for bad in [
            "https://p:443",
            "socks5://p:1080",
            "http://user:pw@p:3128",
            "http://p:3128/path",
            "p:3128",
        ] {
            let err = ProxyAddr::parse(bad).unwrap_err().to_string();
            assert!(!err.contains("pw"), "{err}");
        }
    }
}
