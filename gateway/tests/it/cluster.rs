//! Three real gateway processes on one PostgreSQL schema (127.0.0.1–3). These run in the
//! suite's PostgreSQL pass (`tests/postgres.rs`); on SQLite there is no cluster to test.

use std::collections::HashSet;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::support::{PG_TEST_KEY, Received, Reply, Sink, postgres_url_for};

const WAIT: Duration = Duration::from_secs(30);
/// Short, so that taking over a dead node's endpoints takes seconds.
const LEASE: Duration = Duration::from_secs(2);

/// Kills the child with SIGKILL when dropped, so a failing test leaves no process behind.
struct Node {
    child: Option<Child>,
    base: String,
    config: std::path::PathBuf,
    log: std::path::PathBuf,
    args: Vec<String>,
}

impl Node {
    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        self.child = Some(
            Command::new(env!("CARGO_BIN_EXE_hookgate"))
                .args(["serve", "--config"])
                .arg(&self.config)
                .args(&self.args)
                .stdout(Stdio::null())
                .stderr(log)
                .spawn()
                .unwrap(),
        );
    }

    fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the node as an operator would (SIGTERM) and waits until it has exited.
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let status = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
            let exit = child.wait().unwrap();
            assert!(exit.success(), "a clean stop exits 0: {exit}");
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}

/// One cluster at a time: three nodes under load take 50 of the server's connections and
/// both cores.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct Cluster {
    nodes: Vec<Node>,
    http: reqwest::Client,
    /// The `application_name` of the nodes' database connections.
    app_name: String,
    _dir: tempfile::TempDir,
    /// Dropped last, once the nodes are gone.
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

impl Cluster {
    /// Three nodes delivering to `endpoints` paths of `sink`, retrying every 500 ms for 30 s
    /// (so that what a dead node left is soon due again), settled.
    async fn patient(sink: &Sink, endpoints: usize) -> Option<Cluster> {
        let policy = format!(
            "policies:\n  patient:\n    schedule: [0s{}]\n    jitter: 0\n",
            ", 500ms".repeat(60)
        );
        let yaml = endpoints_yaml(sink, endpoints, "    policy: patient\n");
        let cluster = Cluster::start(&policy, &yaml, &[]).await?;
        cluster.wait_settled(endpoints as u32).await;
        Some(cluster)
    }

    /// Waits until `n` more events are acknowledged; fails with the nodes' warnings when
    /// ingestion stalls.
    async fn wait_acked(&self, acked: &Acked, n: usize) {
        let before = acked.lock().unwrap().len();
        let deadline = Instant::now() + WAIT;
        while acked.lock().unwrap().len() < before + n {
            assert!(
                Instant::now() < deadline,
                "ingestion stalled:\n{}",
                self.problems()
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The warnings and errors in every node's log.
    fn problems(&self) -> String {
        let mut out = String::new();
        for (i, node) in self.nodes.iter().enumerate() {
            for line in node
                .log()
                .lines()
                .filter(|l| l.contains("WARN") || l.contains("ERROR"))
            {
                out.push_str(&format!("node {i}: {line}\n"));
            }
        }
        out
    }

    /// Three nodes on one schema, with `extra` config and `endpoints`, started and healthy.
    async fn start(extra: &str, endpoints: &str, args: &[&str]) -> Option<Cluster> {
        let dir = tempfile::tempdir().unwrap();
        let url = postgres_url_for(dir.path())?;
        let turn = ONE_AT_A_TIME.lock().await;
        let schema = url.rsplit("search_path%3D").next().unwrap().to_owned();
        let app_name = format!("hookgate_{schema}");
        let url = format!("{url}&application_name={app_name}");
        let mut nodes = Vec::new();
        for i in 1..=3 {
            let ip = format!("127.0.0.{i}");
            let port = std::net::TcpListener::bind(format!("{ip}:0"))
                .unwrap()
                .local_addr()
                .unwrap()
                .port();
            let config = dir.path().join(format!("node{i}.yaml"));
            std::fs::write(
                &config,
                format!(
                    "server:\n  listen: {ip}:{port}\nstorage:\n  url: \"{url}\"\n  max_connections: 8\n  encryption_key: {PG_TEST_KEY}\ncluster:\n  lease: {}ms\n  node_id: node-{i}\n\
                     plugins:\n  dir: {d}/plugins\n  bundled: false\n  cache_dir: {d}/cache\ndelivery:\n  allow_networks: [127.0.0.0/8]\n\
                     {extra}topics:\n  t: {{}}\nendpoints:\n{endpoints}",
                    LEASE.as_millis(),
                    d = dir.path().display()
                ),
            )
            .unwrap();
            let mut node = Node {
                child: None,
                base: format!("http://{ip}:{port}"),
                log: dir.path().join(format!("node{i}.log")),
                config,
                args: args.iter().map(|a| a.to_string()).collect(),
            };
            node.spawn();
            nodes.push(node);
        }
        let cluster = Cluster {
            nodes,
            http: reqwest::Client::new(),
            app_name,
            _dir: dir,
            _turn: turn,
        };
        for i in 0..3 {
            cluster.wait_healthy(i).await;
        }
        Some(cluster)
    }

    async fn wait_healthy(&self, i: usize) {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if let Ok(r) = self
                .http
                .get(format!("{}/healthz", self.nodes[i].base))
                .send()
                .await
                && r.status() == 200
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("node {i} did not come up; its log:\n{}", self.nodes[i].log());
    }

    /// Waits until `check` holds for the answer at `path` on every node.
    async fn wait_on_every_node(&self, what: &str, path: &str, check: impl Fn(&Value) -> bool) {
        for i in 0..self.nodes.len() {
            let deadline = Instant::now() + WAIT;
            loop {
                let answer = self.get(i, path).await;
                if check(&answer) {
                    break;
                }
                assert!(Instant::now() < deadline, "node {i} never {what}: {answer}");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }

    async fn get(&self, i: usize, path: &str) -> Value {
        let url = format!("{}{path}", self.nodes[i].base);
        self.http.get(url).send().await.unwrap().json().await.unwrap()
    }

    /// Node `i`'s `GET /metrics`.
    async fn metrics_text(&self, i: usize) -> String {
        let url = format!("{}/metrics", self.nodes[i].base);
        self.http.get(url).send().await.unwrap().text().await.unwrap()
    }

    /// Ends every database connection of the nodes, as a database restart would.
    async fn terminate_connections(&self) -> u64 {
        let admin = std::env::var("HOOKGATE_TEST_POSTGRES").unwrap();
        let (client, connection) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(connection);
        let rows = client
            .query(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = $1",
                &[&self.app_name],
            )
            .await
            .unwrap();
        rows.len() as u64
    }

    /// Posts an event through node `i`; true when it was acknowledged (202).
    async fn post(&self, i: usize, body: Value) -> bool {
        let url = format!("{}/v1/topics/t/events", self.nodes[i].base);
        let sent = self
            .http
            .post(url)
            .json(&body)
            .timeout(Duration::from_secs(30))
            .send()
            .await;
        matches!(sent, Ok(r) if r.status() == 202)
    }

    /// Waits until every node lists all three, with every endpoint's lease held by one of them.
    async fn wait_settled(&self, endpoints: u32) {
        let deadline = Instant::now() + WAIT;
        loop {
            let mut settled = true;
            for i in 0..3 {
                let nodes = self.get(i, "/v1/cluster").await;
                let leases: Vec<u64> = nodes["nodes"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|n| n["leases"].as_u64().unwrap())
                    .collect();
                // With three endpoints or more, each node holds some (rendezvous hashing of
                // these names happens to give each node a share).
                let shared = endpoints < 3 || leases.iter().all(|l| *l > 0);
                settled &= leases.len() == 3 && leases.iter().sum::<u64>() == u64::from(endpoints) && shared;
            }
            if settled {
                return;
            }
            assert!(Instant::now() < deadline, "the cluster never settled");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// Waits until each of `paths` answered a request for each of `ids` with a 2xx; returns what
/// the sink got.
async fn wait_all_delivered(sink: &Sink, ids: &[String], paths: &[String]) -> Vec<Received> {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let received = sink.received();
        let delivered: HashSet<(&str, &str)> = received
            .iter()
            .filter(|r| (200..300).contains(&r.status))
            .map(|r| (r.path.as_str(), r.header("webhook-id")))
            .collect();
        let lost: Vec<(&String, &String)> = paths
            .iter()
            .flat_map(|p| ids.iter().map(move |id| (p, id)))
            .filter(|(p, id)| !delivered.contains(&(p.as_str(), id.as_str())))
            .collect();
        if lost.is_empty() {
            return received;
        }
        assert!(
            Instant::now() < deadline,
            "{} acknowledged deliveries never arrived, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

type Acked = Arc<Mutex<Vec<String>>>;

/// Two clients per live node posting `{tag}-n{node}-w{w}-{i}` until `stop` or their node dies.
fn start_loaders(
    cluster: &Cluster,
    live: &[usize],
    tag: &str,
    acked: &Acked,
    stop: &Arc<std::sync::atomic::AtomicBool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut loaders = Vec::new();
    for &node in live {
        for w in 0..2 {
            let url = format!("{}/v1/topics/t/events", cluster.nodes[node].base);
            let (http, acked, stop, tag) =
                (cluster.http.clone(), acked.clone(), stop.clone(), tag.to_owned());
            loaders.push(tokio::spawn(async move {
                for i in 0.. {
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        return;
                    }
                    let id = format!("{tag}-n{node}-w{w}-{i}");
                    let body = json!({"type": "x", "payload": {"i": i}, "id": id});
                    match http
                        .post(&url)
                        .json(&body)
                        .timeout(Duration::from_secs(30))
                        .send()
                        .await
                    {
                        Ok(r) if r.status() == 202 => acked.lock().unwrap().push(id),
                        Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                        Err(_) => return,
                    }
                }
            }));
        }
    }
    loaders
}

fn endpoints_yaml(sink: &Sink, n: usize, extra: &str) -> String {
    (0..n)
        .map(|i| {
            format!(
                "  e{i}:\n    url: {}\n    topics: [t]\n{extra}",
                sink.url(&format!("/e{i}"))
            )
        })
        .collect()
}

/// Kill -9 one node at a time under ingestion through all three: every acknowledged event
/// arrives; the dead node's endpoints are taken over within a lease and a turn or so.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_nodes_under_load_loses_no_acknowledged_event() {
    let sink = Sink::start().await;
    let endpoints = 9;
    let Some(mut cluster) = Cluster::patient(&sink, endpoints).await else {
        return;
    };
    let acked: Acked = Arc::default();
    let mut takeovers = Vec::new();
    for round in 0..3 {
        let victim = (round * 2 + 1) % 3;
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let loaders = start_loaders(&cluster, &[0, 1, 2], &format!("r{round}"), &acked, &stop);
        cluster.wait_acked(&acked, 300).await;
        cluster.nodes[victim].kill();
        let killed_at = Instant::now();
        let count_at_kill = sink.count();
        // The survivors' loaders go on: every endpoint must receive again, the victim's too.
        let deadline = killed_at + WAIT;
        let takeover = loop {
            let received = sink.received();
            let paths: HashSet<&str> = received[count_at_kill..]
                .iter()
                .filter(|r| r.status == 200)
                .map(|r| r.path.as_str())
                .collect();
            if paths.len() == endpoints {
                break received.last().unwrap().at.duration_since(killed_at);
            }
            assert!(
                Instant::now() < deadline,
                "the victim's endpoints were not taken over: {paths:?}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        takeovers.push(takeover);
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for l in loaders {
            let _ = l.await;
        }
        cluster.nodes[victim].spawn();
        cluster.wait_healthy(victim).await;
    }
    let acked = acked.lock().unwrap().clone();
    let paths: Vec<String> = (0..endpoints).map(|i| format!("/e{i}")).collect();
    let received = wait_all_delivered(&sink, &acked, &paths).await;
    // Every acknowledged delivery arrived (an event whose 202 was lost with a killed node may
    // arrive too: it was committed). Repeats are attempts cut short or not yet recorded at a
    // kill.
    let ok: Vec<(&str, &str)> = received
        .iter()
        .filter(|r| r.status == 200)
        .map(|r| (r.path.as_str(), r.header("webhook-id")))
        .collect();
    let distinct: HashSet<&(&str, &str)> = ok.iter().collect();
    println!(
        "acknowledged {} deliveries, {} arrived ({} distinct, {} repeated); takeover after each kill: {takeovers:?} (lease {LEASE:?})",
        acked.len() * endpoints,
        ok.len(),
        distinct.len(),
        ok.len() - distinct.len()
    );
    // Taking over waits for the lease to lapse, then for a survivor's next turn.
    for t in &takeovers {
        assert!(*t < LEASE * 4, "a takeover took {t:?}");
    }
    // Repeats: attempts running or not yet recorded when their node died, at most the
    // in-flight limit and a feeder batch per endpoint and kill.
    assert!(
        ok.len() - distinct.len() < 3 * endpoints * 100,
        "{} repeats",
        ok.len() - distinct.len()
    );
}

/// An endpoint limited to 10/s gets about 10/s from the whole cluster, not 10/s per node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rate_limit_holds_for_the_whole_cluster() {
    let sink = Sink::start().await;
    let endpoint = format!(
        "  e:\n    url: {}\n    topics: [t]\n    max_per_second: 10\n",
        sink.url("/")
    );
    let Some(cluster) = Cluster::start("", &endpoint, &[]).await else {
        return;
    };
    cluster.wait_settled(1).await;
    let n = 40;
    for i in 0..n {
        assert!(
            cluster
                .post(i % 3, json!({"type": "x", "payload": {"i": i}}))
                .await
        );
    }
    let received = sink.wait_for(n, WAIT).await;
    // The last 20, past any initial burst: 10/s per node would be 30/s.
    let span = received[n - 1].at.duration_since(received[n - 20].at);
    let rate = 19.0 / span.as_secs_f64();
    println!("{n} deliveries through three nodes, the last 20 at {rate:.1}/s");
    assert!((5.0..14.0).contains(&rate), "{rate:.1}/s");
}

/// One ordering key's events, accepted by the three nodes in turn, arrive in that order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordered_key_arrives_in_order_through_three_nodes() {
    let sink = Sink::start().await;
    let endpoint = format!(
        "  e:\n    url: {}\n    topics: [t]\n    ordered: true\n    policy: fast\n",
        sink.url("/")
    );
    let fast = format!(
        "policies:\n  fast:\n    schedule: [0s{}]\n    jitter: 0\n",
        ", 200ms".repeat(10)
    );
    let Some(cluster) = Cluster::start(&fast, &endpoint, &[]).await else {
        return;
    };
    cluster.wait_settled(1).await;
    // Every fifth attempt fails once: a retry must hold the key's later events back.
    sink.script((0..60).map(|i| Reply::status(if i % 5 == 2 { 503 } else { 200 })));
    let n = 45;
    for i in 0..n {
        let body = json!({"type": "x", "payload": {"i": i}, "ordering_key": "k"});
        assert!(cluster.post(i % 3, body).await);
    }
    let deadline = Instant::now() + WAIT * 2;
    let order: Vec<i64> = loop {
        let got: Vec<i64> = sink
            .received()
            .iter()
            .filter(|r| r.status == 200)
            .map(|r| r.json()["i"].as_i64().unwrap())
            .collect();
        if got.len() >= n {
            break got;
        }
        assert!(Instant::now() < deadline, "only {} of {n} arrived", got.len());
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(order, (0..n as i64).collect::<Vec<_>>());
}

/// A failing endpoint degrades and, three (simulated) days later, pauses: once, although the
/// pause timer runs on every node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pause_timer_fires_once_in_a_cluster() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let extra = format!(
        "health:\n  degrade_after_failures: 2\n  pause_after: 3d\n  pause_min_failures: 3\n\
         policies:\n  slow:\n    schedule: [0s{}]\n    jitter: 0\n",
        ", 12h".repeat(12)
    );
    let endpoint = format!(
        "  e:\n    url: {}\n    topics: [t]\n    policy: slow\n",
        sink.url("/")
    );
    let Some(cluster) = Cluster::start(&extra, &endpoint, &["--time-scale", "86400"]).await else {
        return;
    };
    cluster.wait_settled(1).await;
    assert!(cluster.post(0, json!({"type": "x", "payload": {}})).await);
    let deadline = Instant::now() + WAIT;
    loop {
        let ep = cluster.get(1, "/v1/endpoints/e").await;
        if ep["state"] == "paused" {
            break;
        }
        assert!(Instant::now() < deadline, "never paused: {ep}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Give the other nodes' timers time to fire too (a simulated day is a second).
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ep = cluster.get(2, "/v1/endpoints/e").await;
    let states: Vec<&str> = ep["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["state"].as_str().unwrap())
        .collect();
    assert_eq!(states.iter().filter(|s| **s == "paused").count(), 1, "{states:?}");
    assert_eq!(
        states.iter().filter(|s| **s == "degraded").count(),
        1,
        "{states:?}"
    );
}

/// The database ends every connection of the nodes, twice, under ingestion: what was
/// acknowledged is delivered, and the nodes reconnect by themselves (their pools and their
/// notice streams) and go on ingesting and delivering.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_reconnect_when_the_database_drops_their_connections() {
    let sink = Sink::start().await;
    let endpoints = 9;
    let Some(cluster) = Cluster::patient(&sink, endpoints).await else {
        return;
    };
    let acked: Acked = Arc::default();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let loaders = start_loaders(&cluster, &[0, 1, 2], "d", &acked, &stop);
    let mut terminated = 0;
    for _ in 0..2 {
        cluster.wait_acked(&acked, 200).await;
        terminated += cluster.terminate_connections().await;
    }
    cluster.wait_acked(&acked, 200).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in loaders {
        let _ = l.await;
    }
    // Each node answers for itself again, and delivers what any node takes.
    for i in 0..3 {
        assert!(
            cluster
                .post(i, json!({"type": "x", "payload": {}, "id": format!("after-{i}")}))
                .await
        );
        acked.lock().unwrap().push(format!("after-{i}"));
    }
    let acked = acked.lock().unwrap().clone();
    let paths: Vec<String> = (0..endpoints).map(|i| format!("/e{i}")).collect();
    wait_all_delivered(&sink, &acked, &paths).await;
    println!(
        "{terminated} connections ended twice over; {} events acknowledged, all delivered",
        acked.len()
    );
    assert!(terminated >= 6, "only {terminated} connections were ended");
}

/// An endpoint created through one node's API runs on every node: another node takes its
/// events and delivers them, a change through a third applies everywhere, and a delete
/// anywhere removes it everywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endpoint_created_through_one_node_runs_on_all() {
    let sink = Sink::start().await;
    let Some(cluster) = Cluster::start(
        "",
        "  base:\n    url: http://127.0.0.1:9/unused\n    topics: [t]\n",
        &[],
    )
    .await
    else {
        return;
    };
    let call = |i: usize, method: reqwest::Method, path: &str, body: Option<Value>| {
        let mut request = cluster
            .http
            .request(method, format!("{}{path}", cluster.nodes[i].base));
        if let Some(body) = body {
            request = request.json(&body);
        }
        request.send()
    };
    let created = call(
        0,
        reqwest::Method::POST,
        "/v1/endpoints",
        Some(json!({"name": "shared", "url": sink.url("/first"), "topics": ["t"], "types": ["y"]})),
    )
    .await
    .unwrap();
    assert_eq!(created.status(), 201);
    // Every node learns of it (a notice, then a read of the store).
    let shared = "/v1/endpoints/shared";
    cluster
        .wait_on_every_node("learned of the endpoint", shared, |v| v["name"] == "shared")
        .await;
    assert!(cluster.post(1, json!({"type": "y", "payload": {"n": 1}})).await);
    let received = sink.wait_for(1, WAIT).await;
    assert_eq!(received[0].path, "/first");

    let patched = call(
        2,
        reqwest::Method::PATCH,
        "/v1/endpoints/shared",
        Some(json!({"url": sink.url("/second")})),
    )
    .await
    .unwrap();
    assert_eq!(patched.status(), 200);
    cluster
        .wait_on_every_node("took the new URL", shared, |v| {
            v["url"].as_str().is_some_and(|u| u.ends_with("/second"))
        })
        .await;
    assert!(cluster.post(0, json!({"type": "y", "payload": {"n": 2}})).await);
    let received = sink.wait_for(2, WAIT).await;
    assert_eq!(received[1].path, "/second");

    let deleted = call(1, reqwest::Method::DELETE, "/v1/endpoints/shared", None)
        .await
        .unwrap();
    assert_eq!(deleted.status(), 204);
    cluster
        .wait_on_every_node("dropped the deleted endpoint", shared, |v| {
            v["error"]["code"] == "endpoint_not_found"
        })
        .await;
}

/// Deliveries a node takes in from another node's commits come with their events: once the
/// cluster has settled, no attempt on any node reads its event back from the database.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deliveries_from_other_nodes_come_with_their_events() {
    let sink = Sink::start().await;
    // Nine names that rendezvous hashing spreads over all three nodes.
    let endpoints = 9;
    let yaml = endpoints_yaml(&sink, endpoints, "");
    let Some(cluster) = Cluster::start("", &yaml, &[]).await else {
        return;
    };
    cluster.wait_settled(endpoints as u32).await;
    let events = 30;
    for i in 0..events {
        assert!(
            cluster
                .post(i % 3, json!({"type": "x", "payload": {"i": i}}))
                .await
        );
    }
    sink.wait_for(events * endpoints, WAIT).await;
    let mut attempts_per_node = Vec::new();
    for (i, node) in cluster.nodes.iter().enumerate() {
        let text = cluster.metrics_text(i).await;
        assert_eq!(
            crate::support::metric(&text, "hookgate_event_reads_total"),
            0.0,
            "an attempt read its event back on {}",
            node.base
        );
        let attempts: f64 = text
            .lines()
            .filter(|l| l.starts_with("hookgate_attempts_total{"))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum();
        attempts_per_node.push(attempts);
    }
    // Every node delivered some, so every node took in deliveries the others accepted.
    assert!(
        attempts_per_node.iter().all(|a| *a > 0.0),
        "attempts per node: {attempts_per_node:?}"
    );
}

/// `GET /v1/cluster` and `hookgate cluster` tell a live node from a dead one: after `kill -9` a
/// node reads `lapsed` once a lease has passed without its heartbeat (not alive with a stale
/// "last seen" for an hour), one stopped with SIGTERM reads `left` and holds no lease, and a
/// node that comes back is `alive` again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_node_reads_lapsed_and_a_stopped_one_left() {
    let sink = Sink::start().await;
    let Some(mut cluster) = Cluster::start("", &endpoints_yaml(&sink, 3, ""), &[]).await else {
        return;
    };
    let states = |answer: &Value| -> Vec<(String, String)> {
        answer["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| {
                (
                    n["id"].as_str().unwrap().to_owned(),
                    n["state"].as_str().unwrap().to_owned(),
                )
            })
            .collect()
    };
    let pairs = |list: &[(&str, &str)]| -> Vec<(String, String)> {
        list.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
    };
    let all_alive = pairs(&[("node-1", "alive"), ("node-2", "alive"), ("node-3", "alive")]);
    cluster
        .wait_on_every_node("listed every node alive", "/v1/cluster", |a| {
            states(a) == all_alive
        })
        .await;

    cluster.nodes[2].kill();
    let killed = Instant::now();
    let lapsed = pairs(&[("node-1", "alive"), ("node-2", "alive"), ("node-3", "lapsed")]);
    let deadline = Instant::now() + WAIT;
    loop {
        let answer = cluster.get(0, "/v1/cluster").await;
        if states(&answer) == lapsed {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the killed node never lapsed: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        killed.elapsed() >= LEASE.mul_f64(0.5),
        "lapsed only once its lease ran out, not at once: {:?}",
        killed.elapsed()
    );
    let out = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["cluster", "--url", &cluster.nodes[0].base])
        .output()
        .unwrap();
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = |id: &str| {
        table
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_default()
            .to_owned()
    };
    assert!(table.lines().next().unwrap().contains("STATE"), "{table}");
    assert!(row("node-3").contains(" lapsed "), "{table}");
    assert!(row("node-1").contains(" alive "), "{table}");

    // Back under the same id: alive again, with its new start time.
    let first_start = cluster.get(0, "/v1/cluster").await["nodes"][2]["started_at"].clone();
    cluster.nodes[2].spawn();
    cluster.wait_healthy(2).await;
    cluster
        .wait_on_every_node("listed the node back alive", "/v1/cluster", |a| {
            states(a) == all_alive
        })
        .await;
    let restarted = cluster.get(0, "/v1/cluster").await;
    let started = |v: &Value| crate::support::time(v);
    assert!(
        started(&restarted["nodes"][2]["started_at"]) > started(&first_start),
        "the restart shows: {restarted}"
    );

    cluster.nodes[1].stop();
    let left = pairs(&[("node-1", "alive"), ("node-2", "left"), ("node-3", "alive")]);
    let deadline = Instant::now() + WAIT;
    loop {
        let answer = cluster.get(0, "/v1/cluster").await;
        if states(&answer) == left {
            assert_eq!(
                answer["nodes"][1]["leases"], 0,
                "it gave its leases back: {answer}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the stopped node never read left: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The two alive nodes share the three endpoints; the one that left has no part in it.
    let deadline = Instant::now() + WAIT;
    loop {
        let answer = cluster.get(0, "/v1/cluster").await;
        let held = |i: usize| answer["nodes"][i]["leases"].as_u64().unwrap();
        if held(0) + held(2) == 3 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "its endpoints were never taken over: {answer}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Ordered delivery steered through any node: the blocked key shows the same on every node,
/// and `retry`, `skip` and `release` sent to each node in turn take effect on the node that
/// delivers the endpoint, whichever that is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordering_keys_are_seen_and_steered_through_every_node() {
    let sink = Sink::start().await;
    sink.rule(|body| {
        let v: Value = serde_json::from_slice(body).ok()?;
        (v["n"] == 1).then(|| Reply::status(503))
    });
    let endpoints = format!(
        "  e:\n    url: {}\n    topics: [t]\n    types: [x]\n    ordered: true\n    dead_letter: true\n    policy: slow\n  h:\n    url: {}\n    topics: [t]\n    types: [held]\n    ordered: true\n    dead_letter: true\n    on_final_failure: hold\n    policy: once\n",
        sink.url("/e"),
        sink.url("/h")
    );
    let policies =
        "policies:\n  slow:\n    schedule: [0s, 1h, 1h]\n    jitter: 0\n  once:\n    schedule: [0s]\n";
    let Some(cluster) = Cluster::start(policies, &endpoints, &[]).await else {
        return;
    };
    cluster.wait_settled(2).await;
    let at = |path: &'static str| -> Vec<i64> {
        sink.received()
            .iter()
            .filter(|r| r.path == path)
            .map(|r| r.json()["n"].as_i64().unwrap())
            .collect()
    };
    let action = |i: usize, path: String, body: Value| {
        let url = format!("{}{path}", cluster.nodes[i].base);
        let http = cluster.http.clone();
        async move {
            let r = http.post(url).json(&body).send().await.unwrap();
            let status = r.status().as_u16();
            (status, r.json::<Value>().await.unwrap())
        }
    };
    for n in 1..=3 {
        assert!(
            cluster
                .post(
                    n % 3,
                    json!({"type": "x", "payload": {"n": n}, "ordering_key": "a"})
                )
                .await
        );
    }
    cluster
        .wait_on_every_node(
            "showed key a blocked",
            "/v1/endpoints/e/ordering-keys?state=blocked",
            |l| l["keys"][0]["state"] == "blocked" && l["keys"][0]["waiting"] == 2,
        )
        .await;
    // Retry through one node, skip through another.
    let (status, answer) = action(1, "/v1/endpoints/e/ordering-keys/a/retry".into(), json!({})).await;
    assert_eq!(
        (status, &answer["applied"]),
        (200, &json!(true)),
        "{answer}\n{}",
        cluster.problems()
    );
    cluster
        .wait_on_every_node(
            "saw the retry",
            "/v1/endpoints/e/ordering-keys?state=blocked",
            |l| l["keys"][0]["head"]["attempt_count"] == 2,
        )
        .await;
    let listed = cluster
        .get(2, "/v1/endpoints/e/ordering-keys?state=blocked")
        .await;
    let head = listed["keys"][0]["head"]["delivery_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (status, answer) = action(
        2,
        "/v1/endpoints/e/ordering-keys/a/skip".into(),
        json!({"delivery_id": head}),
    )
    .await;
    assert_eq!((status, &answer["applied"]), (200, &json!(true)), "{answer}");
    let deadline = Instant::now() + WAIT;
    while at("/e") != [1, 1, 2, 3] {
        assert!(Instant::now() < deadline, "key a sent {:?}", at("/e"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The same skip again, through a third node: nothing more happens.
    let (status, answer) = action(
        0,
        "/v1/endpoints/e/ordering-keys/a/skip".into(),
        json!({"delivery_id": head}),
    )
    .await;
    assert_eq!((status, &answer["applied"]), (200, &json!(false)), "{answer}");

    // Held past the final failure, released through each node in turn until one applies it.
    for n in 1..=2 {
        assert!(
            cluster
                .post(
                    n % 3,
                    json!({"type": "held", "payload": {"n": n}, "ordering_key": "k"})
                )
                .await
        );
    }
    cluster
        .wait_on_every_node(
            "showed key k held",
            "/v1/endpoints/h/ordering-keys?state=blocked",
            |l| l["keys"][0]["state"] == "held" && l["keys"][0]["waiting"] == 1,
        )
        .await;
    assert_eq!(at("/h"), [1]);
    let (status, answer) = action(1, "/v1/endpoints/h/ordering-keys/k/release".into(), json!({})).await;
    assert_eq!((status, &answer["applied"]), (200, &json!(true)), "{answer}");
    let deadline = Instant::now() + WAIT;
    while at("/h") != [1, 2] {
        assert!(Instant::now() < deadline, "key k sent {:?}", at("/h"));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    cluster
        .wait_on_every_node("showed no key", "/v1/endpoints/h/ordering-keys?state=all", |l| {
            l["keys"].as_array().is_some_and(|k| k.is_empty())
        })
        .await;
    assert!(!cluster.problems().contains("ERROR"), "{}", cluster.problems());
}
