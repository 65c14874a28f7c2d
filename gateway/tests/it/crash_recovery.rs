use std::collections::HashMap;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::support::{Reply, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test]
async fn pending_deliveries_survive_a_restart() {
    let sink = Sink::start().await;
    sink.always(Reply::status(503));
    let yaml = format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    );
    let mut gw = TestGateway::start(&yaml).await;
    for i in 0..3 {
        gw.ingest("t", "x", json!({"i": i})).await;
    }
    sink.wait_for(3, WAIT).await;
    gw.wait_until("/v1/deliveries?status=pending", WAIT, |l| {
        l["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["attempt_count"] == 1)
            .count()
            == 3
    })
    .await;
    gw.stop().await;

    sink.always(Reply::status(200));
    let gw = TestGateway::start_in(gw.dir.clone(), &yaml, gw.clock.clone()).await;
    // The standard second attempt comes 30 s ± 20 % after the first.
    gw.advance(Duration::from_secs(37)).await;
    sink.wait_for(6, WAIT).await;
    // Every delivery read back, so that a failure shows what state each one is in.
    gw.wait_until("/v1/deliveries", WAIT, |l| {
        l["deliveries"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|d| d["status"] == "succeeded")
            .count()
            == 3
    })
    .await;
    let attempts: Vec<String> = sink
        .received()
        .iter()
        .map(|r| r.header("hookgate-delivery-attempt").to_owned())
        .collect();
    assert_eq!(attempts.iter().filter(|a| *a == "2").count(), 3, "{attempts:?}");
}

/// The queue is rebuilt from the store a page at a time (10 000 deliveries per read): every
/// page is taken in, the last one partly full. (Without the pages after the first the queue
/// holds 10 000 and the wait times out.)
#[tokio::test]
async fn a_restart_rebuilds_the_queue_from_every_page_of_pending_deliveries() {
    use hookgate::store::IngestBatch;

    const PENDING: usize = 10_050;
    let sink = Sink::start().await;
    // One attempt goes out and is never answered within the test; the throttle holds the
    // rest in the queue, so the queue's depth is the number of deliveries rebuilt.
    sink.always(Reply::status(200).delayed(Duration::from_secs(120)));
    let yaml = format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n    max_per_second: 1\n",
        sink.url("/")
    );
    let mut gw = TestGateway::start(&yaml).await;
    gw.stop().await;

    let store = crate::support::open_store(gw.dir.path()).await;
    for first in (0..PENDING).step_by(1_000) {
        let items = (first..PENDING.min(first + 1_000))
            .map(|i| crate::support::item_for_e(&format!("evt_{i}"), "x", gw.now()));
        let batch = IngestBatch {
            items: items.collect(),
            idempotency: None,
            now: gw.now(),
        };
        store.ingest(batch).await.unwrap();
    }
    assert_eq!(store.pending_deliveries().await.unwrap().len(), PENDING);
    store.close().await;
    drop(store);

    // A single node has rebuilt its queue before it answers; in a cluster (the suite's run on
    // PostgreSQL) the node reads the endpoint's deliveries when it takes the lease, just after.
    let gw = TestGateway::start_in(gw.dir.clone(), &yaml, gw.clock.clone()).await;
    gw.wait_until("/v1/status", WAIT, |s| s["queue_depth"] == PENDING as u64)
        .await;
}

/// Kills the child with SIGKILL when dropped, so a failing test leaves no process behind.
struct Killer(Child);

impl Drop for Killer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn spawn_gateway(config: &std::path::Path, log: &std::path::Path, args: &[&str]) -> Killer {
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)
        .unwrap();
    Killer(
        Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .args(["serve", "--config"])
            .arg(config)
            .args(args)
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    )
}

async fn get_json(http: &reqwest::Client, url: &str) -> serde_json::Value {
    http.get(url).send().await.unwrap().json().await.unwrap()
}

async fn wait_healthy(http: &reqwest::Client, base: &str) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while tokio::time::Instant::now() < deadline {
        if let Ok(r) = http.get(format!("{base}/healthz")).send().await
            && r.status() == 200
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    panic!("the gateway did not come up at {base}");
}

/// Acknowledged event ids, in the order of their acknowledgement.
type Acked = Arc<Mutex<Vec<String>>>;

/// Four clients posting events with ids `r{round}-w{worker}-{i}` until the gateway stops
/// answering (a refused request is not acknowledged and the next one follows); each id
/// answered 202 goes into `acked`.
fn start_loaders(
    http: &reqwest::Client,
    base: &str,
    round: usize,
    acked: &Acked,
) -> Vec<tokio::task::JoinHandle<()>> {
    (0..4)
        .map(|worker| {
            let (http, base, acked) = (http.clone(), base.to_owned(), acked.clone());
            tokio::spawn(async move {
                for i in 0.. {
                    let id = format!("r{round}-w{worker}-{i}");
                    let sent = http
                        .post(format!("{base}/v1/topics/t/events"))
                        .json(&json!({"type": "x", "payload": {"i": i}, "id": id}))
                        .timeout(Duration::from_secs(30))
                        .send()
                        .await;
                    match sent {
                        Ok(r) if r.status() == 202 => acked.lock().unwrap().push(id),
                        // Refused for now (a busy machine): not acknowledged; go on.
                        Ok(_) => tokio::time::sleep(Duration::from_millis(10)).await,
                        // Killed mid-request: not acknowledged, so no promise was made.
                        Err(_) => return,
                    }
                }
            })
        })
        .collect()
}

/// Waits until `n` events are acknowledged; fails (with the gateway's log) instead of hanging
/// when the loaders stopped short of it.
async fn wait_acked(acked: &Acked, n: usize, log: &std::path::Path) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while acked.lock().unwrap().len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "only {} of {n} events were acknowledged; the gateway's log:\n{}",
            acked.lock().unwrap().len(),
            std::fs::read_to_string(log).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Index of the first request for each webhook-id the sink answered with a 2xx.
fn first_success(received: &[crate::support::Received]) -> HashMap<String, usize> {
    let mut first = HashMap::new();
    for (i, r) in received.iter().enumerate() {
        if (200..300).contains(&r.status) {
            first.entry(r.header("webhook-id").to_owned()).or_insert(i);
        }
    }
    first
}

/// Waits until the sink answered a request for each of `ids` with a 2xx; returns what it got.
async fn wait_all_delivered(sink: &Sink, ids: &[String]) -> Vec<crate::support::Received> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let received = sink.received();
        let delivered = first_success(&received);
        let lost: Vec<&String> = ids.iter().filter(|id| !delivered.contains_key(*id)).collect();
        if lost.is_empty() {
            return received;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} acknowledged events never arrived, e.g. {:?}",
            lost.len(),
            &lost[..lost.len().min(5)]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

const PER_ROUND: usize = 150;
/// Of each round's events, how many are acknowledged while the receiver refuses everything.
const REFUSED_PER_ROUND: usize = 75;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_under_load_loses_no_acknowledged_event() {
    let sink = Sink::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let config = dir.path().join("hookgate.yaml");
    // Retries every 500 ms for 15 s: what was refused before a kill is due again soon after.
    let schedule = format!("[0s{}]", ", 500ms".repeat(30));
    std::fs::write(
        &config,
        binary_config(
            dir.path(),
            port,
            &format!("policies:\n  patient:\n    schedule: {schedule}\n    jitter: 0\n"),
            &format!(
                "  e:\n    url: {}\n    topics: [t]\n    policy: patient\n",
                sink.url("/")
            ),
        ),
    )
    .unwrap();
    let log = dir.path().join("gateway.log");
    let http = reqwest::Client::new();
    let acked: Acked = Arc::default();
    // For each kill: the sink's request count then, and the events acknowledged while the
    // receiver refused, which the killed process cannot have delivered.
    let mut kills: Vec<(usize, Vec<String>)> = Vec::new();

    for round in 0..3 {
        let child = spawn_gateway(&config, &log, &[]);
        wait_healthy(&http, &base).await;
        // The receiver is back: what earlier runs left pending can be delivered now.
        sink.always(Reply::status(200));
        let loaders = start_loaders(&http, &base, round, &acked);
        let target = (round + 1) * PER_ROUND;
        wait_acked(&acked, target - REFUSED_PER_ROUND, &log).await;
        // The receiver goes down: from here on, everything acknowledged stays pending.
        sink.always(Reply::status(503));
        let refused_from = acked.lock().unwrap().len();
        wait_acked(&acked, target, &log).await;
        drop(child); // SIGKILL, mid-load, with deliveries pending
        // Acknowledged since the receiver went down and not delivered before it did (a 202
        // can reach its client after the delivery it started was answered).
        let delivered_before = first_success(&sink.received());
        let refused: Vec<String> = acked.lock().unwrap()[refused_from..]
            .iter()
            .filter(|id| !delivered_before.contains_key(*id))
            .cloned()
            .collect();
        kills.push((sink.count(), refused));
        for l in loaders {
            let _ = l.await;
        }
    }

    let _final = spawn_gateway(&config, &log, &[]);
    wait_healthy(&http, &base).await;
    sink.always(Reply::status(200));
    let acked = acked.lock().unwrap().clone();
    let received = wait_all_delivered(&sink, &acked).await;
    // Each kill left acknowledged events undelivered, and a later run delivered every one.
    let delivered = first_success(&received);
    for (kill, (boundary, refused)) in kills.iter().enumerate() {
        assert!(!refused.is_empty(), "kill {kill}: nothing was pending");
        for id in refused {
            assert!(
                delivered[id] >= *boundary,
                "kill {kill}: {id} was delivered before it"
            );
        }
    }
    let ok = received.iter().filter(|r| (200..300).contains(&r.status)).count();
    let duplicates = ok - delivered.len();
    println!(
        "acknowledged {}, delivered {} distinct, {} carried over a kill, {duplicates} duplicates",
        acked.len(),
        delivered.len(),
        kills.iter().map(|(_, r)| r.len()).sum::<usize>()
    );
    // At-least-once: duplicates happen only for attempts cut short by a kill.
    assert!(duplicates <= 3 * 64, "{duplicates} duplicates");
}

/// A config for the real binary on a free port, storing in `dir`, delivering to `endpoints`.
fn binary_config(dir: &std::path::Path, port: u16, extra: &str, endpoints: &str) -> String {
    format!(
        "server:\n  listen: 127.0.0.1:{port}\nstorage:\n  path: {}/db/hookgate.db\nplugins:\n  dir: {}/plugins\n  bundled: false\ndelivery:\n  allow_networks: [127.0.0.0/8]\n{extra}topics:\n  t: {{}}\nendpoints:\n{endpoints}",
        dir.display(),
        dir.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_during_a_retry_wait_keeps_the_retry() {
    let sink = Sink::start().await;
    sink.script([Reply::status(503)]);
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let config = dir.path().join("hookgate.yaml");
    // The retry is an hour away in real time: the kill lands long before it.
    std::fs::write(
        &config,
        binary_config(
            dir.path(),
            port,
            "policies:\n  p:\n    schedule: [0s, 1h]\n    jitter: 0\n",
            &format!(
                "  e:\n    url: {}\n    topics: [t]\n    policy: p\n",
                sink.url("/")
            ),
        ),
    )
    .unwrap();
    let log = dir.path().join("gateway.log");
    let http = reqwest::Client::new();
    let child = spawn_gateway(&config, &log, &[]);
    wait_healthy(&http, &base).await;
    let r = http
        .post(format!("{base}/v1/topics/t/events"))
        .json(&json!({"type": "x", "payload": {}, "id": "retry-me"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 202);
    sink.wait_for(1, WAIT).await;
    // Wait until the failure and its planned retry are on disk, then kill before the retry.
    let deadline = tokio::time::Instant::now() + WAIT;
    let planned = loop {
        let list = get_json(&http, &format!("{base}/v1/deliveries")).await;
        let delivery = &list["deliveries"][0];
        if delivery["attempt_count"] == 1 && delivery["status"] == "pending" {
            break delivery["next_attempt_at"].clone();
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the first attempt was not recorded: {list}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    assert!(planned.is_string(), "no retry planned: {planned}");
    drop(child);
    // The process is gone and the retry was not sent: the kill came during the wait.
    assert_eq!(sink.count(), 1);
    // The restarted gateway's clock runs an hour per second, so the hour's wait passes in
    // about a second, and the planned retry is made.
    let _again = spawn_gateway(&config, &log, &["--time-scale", "3600"]);
    wait_healthy(&http, &base).await;
    let got = sink.wait_for(2, WAIT).await;
    assert_eq!(got[1].header("webhook-id"), "retry-me");
    assert_eq!(got[1].header("hookgate-delivery-attempt"), "2");
    assert_eq!(got[1].status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_right_after_a_config_reload_comes_back_on_the_file() {
    let old = Sink::start().await;
    let new = Sink::start().await;
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let base = format!("http://127.0.0.1:{port}");
    let config = dir.path().join("hookgate.yaml");
    let endpoint = |sink: &Sink| format!("  e:\n    url: {}\n    topics: [t]\n", sink.url("/"));
    std::fs::write(&config, binary_config(dir.path(), port, "", &endpoint(&old))).unwrap();
    let log = dir.path().join("gateway.log");
    let http = reqwest::Client::new();
    let child = spawn_gateway(&config, &log, &[]);
    wait_healthy(&http, &base).await;
    let post = |id: &'static str| {
        let (http, base) = (http.clone(), base.clone());
        async move {
            http.post(format!("{base}/v1/topics/t/events"))
                .json(&json!({"type": "x", "payload": {}, "id": id}))
                .send()
                .await
                .unwrap()
                .status()
        }
    };
    assert_eq!(post("before").await, 202);
    old.wait_for(1, WAIT).await;
    // Until its success is on disk, a kill would rightly send "before" again after the restart.
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let list = get_json(&http, &format!("{base}/v1/deliveries")).await;
        if list["deliveries"][0]["status"] == "succeeded" {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the delivery did not succeed: {list}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // Edit the file, signal a reload, and kill at once: whatever the reload got to, the
    // restarted gateway runs on the file, and nothing acknowledged is lost.
    std::fs::write(&config, binary_config(dir.path(), port, "", &endpoint(&new))).unwrap();
    let pid = child.0.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-HUP", &pid])
            .status()
            .unwrap()
            .success()
    );
    drop(child);
    let _again = spawn_gateway(&config, &log, &[]);
    wait_healthy(&http, &base).await;
    assert_eq!(post("after").await, 202);
    let got = new.wait_for(1, WAIT).await;
    assert_eq!(got[0].header("webhook-id"), "after");
    assert_eq!(old.count(), 1);
    let status = get_json(&http, &format!("{base}/v1/status")).await;
    assert!(status["config_file"].as_str().unwrap().ends_with("hookgate.yaml"));
}
