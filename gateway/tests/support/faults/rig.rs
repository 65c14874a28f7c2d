//! A cluster under test: nodes on a private PostgreSQL server, each behind its own proxy, one
//! receiver for every endpoint, and loaders that post events and keep what was acknowledged.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::checker::{self, Acked, Freeze, Limits, Restart, Verdict};
use super::http::{self, Reply};
use super::node::Node;
use super::pg::PrivatePostgres;
use super::proxy::Proxy;

/// The storage key every node of a rig's database has (PostgreSQL needs one in the config).
const STORAGE_KEY: &str = "ZmF1bHQgcmlnIHN0b3JhZ2Uga2V5LCAzMiBieXRlcyE=";
use super::receiver::Receiver;

/// One endpoint of the rig: `/name` on the receiver, topic `t`.
#[derive(Debug, Clone, Default)]
pub(crate) struct EndpointSpec {
    pub(crate) name: String,
    pub(crate) ordered: bool,
    pub(crate) max_in_flight: Option<usize>,
    pub(crate) max_per_second: Option<u32>,
}

impl EndpointSpec {
    pub(crate) fn plain(name: &str) -> EndpointSpec {
        EndpointSpec {
            name: name.into(),
            ..EndpointSpec::default()
        }
    }
}

pub(crate) struct RigOptions {
    pub(crate) nodes: usize,
    pub(crate) lease: Duration,
    pub(crate) endpoints: Vec<EndpointSpec>,
    /// How long the receiver takes to answer each request.
    pub(crate) receiver_takes: Duration,
    /// Runs a node: `program args… serve --config FILE`.
    pub(crate) program: PathBuf,
    pub(crate) program_args: Vec<String>,
    /// `storage.max_connections` of each node.
    pub(crate) max_connections: usize,
}

pub(crate) struct Rig {
    pub(crate) nodes: Vec<Node>,
    /// `proxies[i]` stands between node `i` and the database.
    pub(crate) proxies: Vec<Proxy>,
    pub(crate) receiver: Receiver,
    pub(crate) lease: Duration,
    pub(crate) endpoints: Vec<EndpointSpec>,
    pub(crate) freezes: Vec<Freeze>,
    pub(crate) restarts: Vec<Restart>,
    /// The database the nodes share, straight (not through a proxy).
    pub(crate) db_url: String,
    _dir: tempfile::TempDir,
}

const WAIT: Duration = Duration::from_secs(60);

impl Rig {
    /// Creates `database` on `pg` and starts the nodes on it; returns once every node answers
    /// and every endpoint's lease is held.
    pub(crate) async fn start(pg: &PrivatePostgres, database: &str, options: RigOptions) -> Rig {
        pg.create_database(database)
            .await
            .expect("a database for the run");
        let dir = tempfile::tempdir().expect("temp dir");
        let receiver = Receiver::start(options.receiver_takes).await;
        let mut nodes = Vec::new();
        let mut proxies = Vec::new();
        for i in 0..options.nodes {
            let name = format!("node-{i}");
            let proxy = Proxy::start(pg.addr()).await;
            let port = std::net::TcpListener::bind("127.0.0.1:0")
                .and_then(|l| l.local_addr())
                .expect("a free port")
                .port();
            let config = dir.path().join(format!("{name}.yaml"));
            std::fs::write(
                &config,
                node_config(
                    &name,
                    port,
                    proxy.addr.port(),
                    database,
                    &options,
                    &receiver,
                    dir.path(),
                ),
            )
            .expect("node config");
            let mut node = Node::new(
                &name,
                format!("127.0.0.1:{port}"),
                config,
                dir.path().join(format!("{name}.log")),
                options.program.clone(),
                options.program_args.clone(),
            );
            node.spawn();
            nodes.push(node);
            proxies.push(proxy);
        }
        let rig = Rig {
            nodes,
            proxies,
            receiver,
            lease: options.lease,
            endpoints: options.endpoints,
            freezes: Vec::new(),
            restarts: Vec::new(),
            db_url: pg.url(database),
            _dir: dir,
        };
        for i in 0..rig.nodes.len() {
            rig.wait_healthy(i).await;
        }
        // The first node up takes every endpoint; they move to their nodes within a turn or two
        // of the last one joining.
        tokio::time::sleep(rig.lease).await;
        rig.wait_leased().await;
        rig
    }

    pub(crate) fn paths(&self) -> Vec<String> {
        self.endpoints.iter().map(|e| format!("/{}", e.name)).collect()
    }

    pub(crate) fn limits(&self) -> HashMap<String, Limits> {
        self.endpoints
            .iter()
            .map(|e| {
                (
                    format!("/{}", e.name),
                    Limits {
                        ordered: e.ordered,
                        max_in_flight: e.max_in_flight,
                        max_per_second: e.max_per_second,
                    },
                )
            })
            .collect()
    }

    pub(crate) async fn wait_healthy(&self, i: usize) {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Ok(r) = http::request(
                &self.nodes[i].addr,
                "GET",
                "/healthz",
                None,
                Duration::from_secs(2),
            )
            .await
                && r.status == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let node = &self.nodes[i];
        panic!(
            "{} did not come up (process state {}, frozen by the test: {}); its log:\n{}",
            node.name,
            node.state(),
            node.is_frozen(),
            node.log_text()
        );
    }

    /// Waits until every endpoint's lease is held by some node, as the database says.
    pub(crate) async fn wait_leased(&self) {
        let deadline = Instant::now() + WAIT;
        loop {
            let held = self
                .sql_count("SELECT count(*) FROM endpoint_leases WHERE expires_at > (extract(epoch from now()) * 1000)::bigint")
                .await;
            if held == Some(self.endpoints.len() as i64) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "the endpoints' leases were never all held ({held:?})"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    async fn sql_count(&self, sql: &str) -> Option<i64> {
        let (client, connection) = tokio_postgres::connect(&self.db_url, tokio_postgres::NoTls)
            .await
            .ok()?;
        let driver = tokio::spawn(connection);
        let n = client.query_one(sql, &[]).await.ok().map(|r| r.get(0));
        drop(client);
        let _ = driver.await;
        n
    }

    /// Posts one event through node `i`.
    pub(crate) async fn post(
        &self,
        i: usize,
        id: &str,
        key: Option<&str>,
        seq: u64,
        timeout: Duration,
    ) -> Result<Reply, String> {
        let body = event_body(id, key, seq);
        http::request(
            &self.nodes[i].addr,
            "POST",
            "/v1/topics/t/events",
            Some(body.as_bytes()),
            timeout,
        )
        .await
    }

    /// Posts events `(id, seq)` of one key through node `i` in one batch (all or none).
    pub(crate) async fn post_batch(
        &self,
        i: usize,
        events: &[(String, u64)],
        key: Option<&str>,
        timeout: Duration,
    ) -> Result<Reply, String> {
        let events: Vec<serde_json::Value> = events
            .iter()
            .map(|(id, seq)| serde_json::from_str(&event_body(id, key, *seq)).expect("an event body"))
            .collect();
        let body = serde_json::json!({ "events": events }).to_string();
        http::request(
            &self.nodes[i].addr,
            "POST",
            "/v1/topics/t/events/batch",
            Some(body.as_bytes()),
            timeout,
        )
        .await
    }

    pub(crate) async fn metrics(&self, i: usize) -> String {
        http::request(
            &self.nodes[i].addr,
            "GET",
            "/metrics",
            None,
            Duration::from_secs(10),
        )
        .await
        .map(|r| r.text())
        .unwrap_or_default()
    }

    /// SIGSTOP, remembered for the checker's count of duplicates and of the rate.
    pub(crate) fn freeze(&mut self, i: usize) {
        self.nodes[i].freeze();
        self.freezes.push(Freeze {
            node: self.nodes[i].name.clone(),
            at: Instant::now(),
            thawed: None,
        });
    }

    /// Starts a killed node again, remembered for the checker's count of the rate.
    pub(crate) fn respawn(&mut self, i: usize) {
        self.nodes[i].spawn();
        self.restarts.push(Restart {
            node: self.nodes[i].name.clone(),
            at: Instant::now(),
        });
    }

    /// SIGCONT, remembered with the node's latest freeze.
    pub(crate) fn thaw(&mut self, i: usize) {
        self.nodes[i].thaw();
        let name = &self.nodes[i].name;
        if let Some(freeze) = self.freezes.iter_mut().rev().find(|f| &f.node == name) {
            freeze.thawed.get_or_insert_with(Instant::now);
        }
    }

    /// The node that sent the latest request to `path`.
    pub(crate) fn last_sender(&self, path: &str) -> Option<String> {
        let mut seen = self.receiver.seen();
        seen.sort_by_key(|s| s.arrived);
        seen.iter().rev().find(|s| s.path == path).map(|s| s.node.clone())
    }

    pub(crate) fn node_index(&self, name: &str) -> usize {
        self.nodes
            .iter()
            .position(|n| n.name == name)
            .expect("a node of the rig")
    }

    /// Waits (up to `within`) until every acknowledged event reached every endpoint; true if
    /// it did.
    pub(crate) async fn wait_delivered(&self, acked: &[Acked], within: Duration) -> bool {
        let paths = self.paths();
        let deadline = Instant::now() + within;
        loop {
            let seen = self.receiver.seen();
            let got: std::collections::HashSet<(&str, &str)> =
                seen.iter().map(|s| (s.path.as_str(), s.id.as_str())).collect();
            if acked
                .iter()
                .all(|a| paths.iter().all(|p| got.contains(&(p.as_str(), a.id.as_str()))))
            {
                return true;
            }
            if Instant::now() >= deadline {
                self.say_missing(acked, &got, within);
                return false;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Says on stderr, at once, which acknowledged deliveries had not arrived and how each
    /// node's log ended: a failing run's message may be cut, this comes before it.
    fn say_missing(&self, acked: &[Acked], got: &std::collections::HashSet<(&str, &str)>, within: Duration) {
        let paths = self.paths();
        let missing: Vec<(&str, &str)> = acked
            .iter()
            .flat_map(|a| paths.iter().map(move |p| (p.as_str(), a.id.as_str())))
            .filter(|k| !got.contains(k))
            .collect();
        eprintln!(
            "{} acknowledged deliveries had not arrived after {within:?}, among them {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        );
        for node in &self.nodes {
            let log = node.log_text();
            let lines: Vec<&str> = log.lines().collect();
            for line in &lines[lines.len().saturating_sub(15)..] {
                eprintln!("{} log: {line}", node.name);
            }
        }
    }

    pub(crate) fn verdict(&self, acked: &[Acked]) -> Verdict {
        checker::check(
            acked,
            &self.paths(),
            &self.receiver.seen(),
            &self.receiver.most_at_once(),
            &self.limits(),
            &self.freezes,
            &self.restarts,
        )
    }

    /// Every node's warnings and errors, for a failing run's message.
    pub(crate) fn problems_in_logs(&self) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            for line in node
                .log_text()
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            {
                out.push_str(&format!("{}: {line}\n", node.name));
            }
        }
        out
    }
}

fn event_body(id: &str, key: Option<&str>, seq: u64) -> String {
    let mut body = serde_json::json!({"type": "x", "id": id, "payload": {"key": key, "seq": seq}});
    if let Some(key) = key {
        body["ordering_key"] = key.into();
    }
    body.to_string()
}

fn node_config(
    name: &str,
    port: u16,
    db_port: u16,
    database: &str,
    options: &RigOptions,
    receiver: &Receiver,
    dir: &std::path::Path,
) -> String {
    let mut endpoints = String::new();
    for e in &options.endpoints {
        endpoints.push_str(&format!(
            "  {n}:\n    url: {u}\n    topics: [t]\n    policy: patient\n    headers: {{ x-node: {name} }}\n",
            n = e.name,
            u = receiver.url(&format!("/{}", e.name)),
        ));
        if e.ordered {
            endpoints.push_str("    ordered: true\n");
        }
        if let Some(n) = e.max_in_flight {
            endpoints.push_str(&format!("    max_in_flight: {n}\n"));
        }
        if let Some(n) = e.max_per_second {
            endpoints.push_str(&format!("    max_per_second: {n}\n"));
        }
    }
    format!(
        "server:\n  listen: 127.0.0.1:{port}\n  workers: 1\n\
         storage:\n  url: \"postgres://postgres@127.0.0.1:{db_port}/{database}?application_name=hookgate-{name}\"\n  max_connections: {maxc}\n  encryption_key: {STORAGE_KEY}\n\
         cluster:\n  lease: {lease}ms\n  node_id: {name}\n\
         plugins:\n  dir: {d}/plugins-{name}\n  bundled: false\n  cache_dir: {d}/cache-{name}\n\
         delivery:\n  allow_networks: [127.0.0.0/8]\n\
         policies:\n  patient:\n    schedule: [0s{retries}]\n    jitter: 0\n\
         topics:\n  t: {{}}\nendpoints:\n{endpoints}",
        maxc = options.max_connections,
        lease = options.lease.as_millis(),
        d = dir.display(),
        retries = ", 300ms".repeat(100),
    )
}

/// Clients that post events until stopped, each its own ordering key, one event at a time:
/// an event is posted again (same id, to the next node after a failure) until a node
/// acknowledges it, so the key's events are acknowledged in their order. 409 counts as
/// acknowledged: the id was committed by an earlier try whose answer was lost.
pub(crate) struct Load {
    pub(crate) acked: Arc<Mutex<Vec<Acked>>>,
    /// Every answer: (node, status or None for no answer, had Retry-After, when sent).
    pub(crate) answers: Arc<Mutex<Vec<Answer>>>,
    stop: Arc<AtomicBool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

#[derive(Debug, Clone)]
pub(crate) struct Answer {
    pub(crate) node: usize,
    pub(crate) status: Option<u16>,
    pub(crate) retry_after: bool,
    pub(crate) sent: Instant,
}

impl Load {
    /// `clients` clients, client `c` posting key `{tag}-k{c}` to node `c % nodes` first, each
    /// at most `per_second` events a second, each request given up after `timeout`.
    pub(crate) fn start(rig: &Rig, tag: &str, clients: usize, per_second: f64, timeout: Duration) -> Load {
        let acked: Arc<Mutex<Vec<Acked>>> = Arc::default();
        let answers: Arc<Mutex<Vec<Answer>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let addrs: Vec<String> = rig.nodes.iter().map(|n| n.addr.clone()).collect();
        let tasks = (0..clients)
            .map(|c| {
                let client = Client {
                    addrs: addrs.clone(),
                    key: format!("{tag}-k{c}"),
                    node: c % addrs.len(),
                    gap: Duration::from_secs_f64(1.0 / per_second),
                    timeout,
                    acked: acked.clone(),
                    answers: answers.clone(),
                    stop: stop.clone(),
                };
                tokio::spawn(client.run())
            })
            .collect();
        Load {
            acked,
            answers,
            stop,
            tasks,
        }
    }

    /// Stops the clients (each finishes the event it is posting) and answers what was
    /// acknowledged.
    pub(crate) async fn stop(self) -> Vec<Acked> {
        self.stop.store(true, Ordering::SeqCst);
        for t in self.tasks {
            let _ = t.await;
        }
        self.acked.lock().unwrap().clone()
    }

    pub(crate) fn acked_count(&self) -> usize {
        self.acked.lock().unwrap().len()
    }
}

struct Client {
    addrs: Vec<String>,
    key: String,
    node: usize,
    gap: Duration,
    timeout: Duration,
    acked: Arc<Mutex<Vec<Acked>>>,
    answers: Arc<Mutex<Vec<Answer>>>,
    stop: Arc<AtomicBool>,
}

impl Client {
    async fn run(mut self) {
        for seq in 0.. {
            if self.stop.load(Ordering::SeqCst) {
                return;
            }
            let started = Instant::now();
            let id = format!("{}-{seq}", self.key);
            let body = event_body(&id, Some(&self.key), seq);
            loop {
                let sent = Instant::now();
                let reply = http::request(
                    &self.addrs[self.node],
                    "POST",
                    "/v1/topics/t/events",
                    Some(body.as_bytes()),
                    self.timeout,
                )
                .await;
                let status = reply.as_ref().ok().map(|r| r.status);
                self.answers.lock().unwrap().push(Answer {
                    node: self.node,
                    status,
                    retry_after: reply.as_ref().is_ok_and(|r| r.header("retry-after").is_some()),
                    sent,
                });
                if matches!(status, Some(202 | 409)) {
                    self.acked.lock().unwrap().push(Acked {
                        id: id.clone(),
                        key: Some(self.key.clone()),
                        seq,
                    });
                    break;
                }
                // Refused or no answer: the next node, after a moment.
                self.node = (self.node + 1) % self.addrs.len();
                tokio::time::sleep(Duration::from_millis(100)).await;
                if self.stop.load(Ordering::SeqCst) && status.is_none() {
                    // Stopping: an event whose fate is unknown is not counted as acknowledged.
                    return;
                }
            }
            tokio::time::sleep(self.gap.saturating_sub(started.elapsed())).await;
        }
    }
}
