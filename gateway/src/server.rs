//! The API's HTTP server: the accept loop, the limits that keep slow or hostile clients from
//! holding the gateway's resources, and graceful shutdown.
//!
//! Clients are untrusted, so every resource a connection can hold is bounded:
//!
//! - **connections**: at most [`ServerLimits::max_connections`] at once; beyond that the accept
//!   loop waits and new connections queue in the kernel's backlog, instead of each taking
//!   buffers and a task;
//! - **time to send the headers** (HTTP/1): a client that trickles its headers (slowloris) or
//!   keeps an idle keep-alive connection is disconnected after `server.header_timeout`;
//! - **header size and count**: a head over [`ServerLimits::max_header_bytes`] or with more
//!   than 100 fields (hyper's limit) is answered 431 without reaching a handler;
//! - **time to send the body**: `server.body_timeout` from the moment the head is in; after it
//!   the body yields [`ServerError::BodyTimedOut`], which the API answers with 408.
//!
//! Shutdown stops accepting at once (the listener is closed), lets requests in progress
//! finish within the grace period, closes idle connections, and then drops what is left.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use hyper::body::{Body as HttpBody, Frame, Incoming, SizeHint};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio::time::{Instant, Sleep};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// How much of the gateway one client may hold, and for how long.
#[derive(Debug, Clone)]
pub struct ServerLimits {
    /// HTTP/1: time to send a request head, and the idle time of a keep-alive connection.
    pub header_timeout: Duration,
    /// Time to send a request body, counted from the moment its head is in.
    pub body_timeout: Duration,
    /// The request line and headers together (HTTP/1), or the header list (HTTP/2).
    pub max_header_bytes: usize,
    /// Open connections at once.
    pub max_connections: usize,
    /// Concurrent requests on one HTTP/2 connection.
    pub max_streams_per_connection: u32,
    /// How long shutdown waits for requests in progress.
    pub grace: Duration,
}

impl ServerLimits {
    /// The gateway's limits for the given timeouts: 64 KiB of headers (real clients send a few
    /// hundred bytes), 4096 connections, 256 streams per HTTP/2 connection.
    pub fn new(header_timeout: Duration, body_timeout: Duration, grace: Duration) -> Self {
        ServerLimits {
            header_timeout,
            body_timeout,
            max_header_bytes: 64 * 1024,
            max_connections: 4096,
            max_streams_per_connection: 256,
            grace,
        }
    }
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum ServerError {
    /// The client did not send the whole body in time.
    #[error("the request body was not received within {after_ms} ms")]
    BodyTimedOut { after_ms: u64 },
}

/// Whether `error`, or an error it wraps, is a body that arrived too slowly.
pub fn is_body_timeout(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source()).any(|e| {
        matches!(
            e.downcast_ref::<ServerError>(),
            Some(ServerError::BodyTimedOut { .. })
        )
    })
}

/// Serves `router` on `listener` until `shutdown` is cancelled, then shuts down gracefully.
pub async fn serve(listener: TcpListener, router: Router, limits: ServerLimits, shutdown: CancellationToken) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        // The read buffer caps the head: a longer one is answered 431 (the body streams through).
        .max_buf_size(limits.max_header_bytes.max(8192))
        .keep_alive(true);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX))
        .max_concurrent_streams(limits.max_streams_per_connection)
        // Pings find peers that vanished without closing; a dead connection is dropped.
        .keep_alive_interval(Duration::from_secs(30))
        .keep_alive_timeout(Duration::from_secs(20));

    let builder = Arc::new(builder);
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    loop {
        let slot = tokio::select! {
            _ = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
        };
        let stream = loop {
            tokio::select! {
                _ = shutdown.cancelled() => break None,
                // Reap finished connections so the set holds only open ones.
                Some(_) = connections.join_next(), if !connections.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok((stream, _)) => break Some(stream),
                    Err(e) if is_per_connection(&e) => {}
                    Err(e) => {
                        // Out of file descriptors or similar: wait a moment rather than spin.
                        tracing::warn!(error = %e, "accepting a connection failed");
                        tokio::select! {
                            _ = shutdown.cancelled() => break None,
                            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
                        }
                    }
                },
            }
        };
        let Some(stream) = stream else { break };
        let _ = stream.set_nodelay(true);
        let service = request_service(router.clone(), limits.body_timeout);
        let (builder, watcher, header_timeout) = (builder.clone(), graceful.watcher(), limits.header_timeout);
        let stopping = shutdown.clone();
        connections.spawn(async move {
            // Not yet watched by `graceful`: a silent client must not hold up shutdown either.
            let known = tokio::select! {
                known = protocol_known_in_time(&stream, header_timeout) => known,
                _ = stopping.cancelled() => false,
            };
            if !known {
                return;
            }
            let connection = watcher.watch(builder.serve_connection(TokioIo::new(stream), service));
            if let Err(e) = connection.await {
                // Clients hanging up, header timeouts and malformed requests end up here.
                tracing::debug!(error = %e, "API connection ended with an error");
            }
            drop(slot);
        });
    }
    drop(listener);
    tokio::select! {
        _ = graceful.shutdown() => {}
        _ = tokio::time::sleep(limits.grace) => {
            tracing::warn!(
                open = connections.len(),
                "API requests still running after the grace period; closing their connections"
            );
        }
    }
    connections.shutdown().await;
}

/// The HTTP/2 connection preface; its first bytes are how HTTP/1 and HTTP/2 are told apart.
const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Waits until the client has sent enough to tell HTTP/1 from HTTP/2, for at most `within`.
///
/// The protocol detection reads before HTTP/1's header timer starts, so without this a client
/// that connects and sends nothing (or a few bytes of the HTTP/2 preface) would hold its
/// connection slot forever. False: the client was too slow, or hung up.
async fn protocol_known_in_time(stream: &tokio::net::TcpStream, within: Duration) -> bool {
    let decided = async {
        let mut seen = [0u8; 24];
        loop {
            let n = stream.peek(&mut seen).await?;
            if n == 0 {
                return Ok(false);
            }
            if n == seen.len() || seen[..n] != H2_PREFACE[..n] {
                return Ok(true);
            }
            // A partial preface (rare: clients send it whole). Peeking does not consume, so
            // readiness stays set; look again shortly instead of spinning.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    matches!(
        tokio::time::timeout(within, decided).await,
        Ok(Ok::<bool, std::io::Error>(true))
    )
}

/// Errors that concern one connection only; the listener is fine.
fn is_per_connection(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(e.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset)
}

/// The router as a hyper service, with each request's body under its deadline.
fn request_service(
    router: Router,
    body_timeout: Duration,
) -> impl hyper::service::Service<
    http::Request<Incoming>,
    Response = http::Response<axum::body::Body>,
    Error = Infallible,
    Future = impl Future<Output = Result<http::Response<axum::body::Body>, Infallible>> + Send + 'static,
> + Clone {
    hyper::service::service_fn(move |request: http::Request<Incoming>| {
        let deadline = Instant::now() + body_timeout;
        let request =
            request.map(|body| axum::body::Body::new(DeadlineBody::new(body, deadline, body_timeout)));
        router.clone().oneshot(request)
    })
}

/// A request body that fails with [`ServerError::BodyTimedOut`] once its deadline has passed.
/// The timer is armed only when the body is not ready at once, so a body that is already in
/// (the usual case) costs no timer.
struct DeadlineBody {
    inner: Incoming,
    deadline: Instant,
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
}

impl DeadlineBody {
    fn new(inner: Incoming, deadline: Instant, timeout: Duration) -> Self {
        DeadlineBody {
            inner,
            deadline,
            timeout,
            sleep: None,
        }
    }
}

impl HttpBody for DeadlineBody {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame.map(|r| r.map_err(Into::into)));
        }
        let deadline = this.deadline;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if sleep.as_mut().poll(cx).is_ready() {
            let after_ms = u64::try_from(this.timeout.as_millis()).unwrap_or(u64::MAX);
            return Poll::Ready(Some(Err(Box::new(ServerError::BodyTimedOut { after_ms }))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_timeout_is_found_through_wrapping_errors() {
        let timed_out = axum::Error::new(ServerError::BodyTimedOut { after_ms: 5 });
        assert!(is_body_timeout(&timed_out));
        let other = axum::Error::new(std::io::Error::other("reset"));
        assert!(!is_body_timeout(&other));
    }
}
