//! The loopback floor: what this machine does with nothing but a Rust HTTP client and server
//! on 127.0.0.1 — the same load generator POSTing the same 1 KiB single-event bodies at 64
//! connections to a hyper server that reads each body and answers `202` with no body. Every
//! throughput of the run is also reported as a share of it, so that figures from machines of
//! another speed can be compared.

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tokio::task::JoinSet;

/// A server that answers every request `202 Accepted` once its body is read.
pub(crate) struct NullServer {
    addr: SocketAddr,
    accept: tokio::task::JoinHandle<()>,
}

impl NullServer {
    pub(crate) async fn start() -> anyhow::Result<NullServer> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let accept = tokio::spawn(async move {
            let mut connections = JoinSet::new();
            while let Ok((stream, _)) = listener.accept().await {
                let _ = stream.set_nodelay(true);
                connections.spawn(async move {
                    let service = service_fn(|request: Request<hyper::body::Incoming>| async move {
                        let _ = request.into_body().collect().await;
                        let mut response = Response::new(Full::new(Bytes::new()));
                        *response.status_mut() = StatusCode::ACCEPTED;
                        Ok::<_, std::convert::Infallible>(response)
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Ok(NullServer { addr, accept })
    }

    pub(crate) fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for NullServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}
