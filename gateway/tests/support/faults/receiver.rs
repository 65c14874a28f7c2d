//! The endpoints' server: answers every request after a fixed time with 200, and records
//! each one (path, `webhook-id`, the sending node's `x-node` header, the event's key and
//! sequence number, when it arrived and ended) and how many requests of a path ran at once.

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;

/// One request the receiver saw.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) path: String,
    /// The `webhook-id` header: the event id.
    pub(crate) id: String,
    /// The `x-node` header each node's endpoints send.
    pub(crate) node: String,
    pub(crate) key: Option<String>,
    pub(crate) seq: u64,
    pub(crate) arrived: Instant,
    pub(crate) ended: Instant,
}

#[derive(Default)]
struct Record {
    seen: Vec<Seen>,
    /// Per path: requests running now, and the most at once.
    running: HashMap<String, (usize, usize)>,
}

pub(crate) struct Receiver {
    pub(crate) addr: std::net::SocketAddr,
    record: Arc<Mutex<Record>>,
    task: tokio::task::JoinHandle<()>,
}

impl Receiver {
    /// Listens on a free port of 127.0.0.1; every request takes `takes` before its 200.
    pub(crate) async fn start(takes: Duration) -> Receiver {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("receiver listens");
        let addr = listener.local_addr().expect("receiver address");
        let record: Arc<Mutex<Record>> = Arc::default();
        let task = {
            let record = record.clone();
            tokio::spawn(async move {
                loop {
                    let Ok((stream, _)) = listener.accept().await else {
                        continue;
                    };
                    let record = record.clone();
                    tokio::spawn(async move {
                        let service = service_fn(move |req| answer(req, record.clone(), takes));
                        let _ = http1::Builder::new()
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    });
                }
            })
        };
        Receiver { addr, record, task }
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }

    /// Every request so far, in the order they arrived.
    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.record.lock().unwrap().seen.clone()
    }

    pub(crate) fn count(&self) -> usize {
        self.record.lock().unwrap().seen.len()
    }

    /// The most requests of each path that ran at once.
    pub(crate) fn most_at_once(&self) -> HashMap<String, usize> {
        let record = self.record.lock().unwrap();
        record
            .running
            .iter()
            .map(|(p, (_, most))| (p.clone(), *most))
            .collect()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn answer(
    req: Request<hyper::body::Incoming>,
    record: Arc<Mutex<Record>>,
    takes: Duration,
) -> Result<Response<Full<Bytes>>, Infallible> {
    let arrived = Instant::now();
    let path = req.uri().path().to_owned();
    let header = |name: &str| {
        req.headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    };
    let (id, node) = (header("webhook-id"), header("x-node"));
    // Counted from here until the answer is written or the sender hangs up (a killed node:
    // hyper then drops this future), whichever comes first.
    let mut running = Running {
        record: record.clone(),
        path: path.clone(),
        index: None,
    };
    {
        let mut record = record.lock().unwrap();
        let count = record.running.entry(path.clone()).or_default();
        count.0 += 1;
        count.1 = count.1.max(count.0);
    }
    let body = req
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let payload: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
    {
        let mut record = record.lock().unwrap();
        running.index = Some(record.seen.len());
        record.seen.push(Seen {
            path,
            id,
            node,
            key: payload["key"].as_str().map(str::to_owned),
            seq: payload["seq"].as_u64().unwrap_or(0),
            arrived,
            ended: arrived,
        });
    }
    tokio::time::sleep(takes.saturating_sub(arrived.elapsed())).await;
    drop(running);
    Ok(Response::new(Full::new(Bytes::from_static(b"ok"))))
}

/// A request being answered: when it ends (answered, or dropped because its sender went away)
/// it stops counting as running, and its end is noted.
struct Running {
    record: Arc<Mutex<Record>>,
    path: String,
    index: Option<usize>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let mut record = self.record.lock().unwrap();
        if let Some(count) = record.running.get_mut(&self.path) {
            count.0 -= 1;
        }
        if let Some(seen) = self.index.and_then(|i| record.seen.get_mut(i)) {
            seen.ended = Instant::now();
        }
    }
}
