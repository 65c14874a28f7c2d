//! The scenarios behind each figure. Every run starts a fresh gateway process on a fresh temp
//! dir (real SQLite file, WAL, `synchronous=FULL`) and an in-process sink, so runs do not
//! inherit each other's database or caches.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hookgate_loadgen::{
    Api, Client, Report, Shape, Stop, Target as LoadTarget, closed_loop, open_loop, unix_us,
};
use hookgate_sink::{Sink, SinkOptions};
use serde_json::Value;

use crate::child::{GatewayProcess, cpu_by_process, cpu_since, micros_each};
use crate::floor::NullServer;
use crate::prom::{self, Histogram};
use crate::report::{Results, Target};

/// The Standard Webhooks test secret; the sink verifies every end-to-end delivery with it.
pub(crate) const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// The storage key of the PostgreSQL runs (`storage.url` needs one).
pub(crate) const BENCH_STORAGE_KEY: &str = "YmVuY2ggc3RvcmFnZSBrZXksIG9ubHkgZm9yIGJlbmM=";
const READY_WITHIN: Duration = Duration::from_secs(120);
const MIB: f64 = 1024.0 * 1024.0;
/// Measured rounds of each endpoint in the plugin scenario.
const PLUGIN_ROUNDS: usize = 3;

/// How big each scenario is.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scale {
    pub(crate) ingest_for: Duration,
    pub(crate) e2e_events: u64,
    pub(crate) fanout_events: u64,
    pub(crate) latency_for: Duration,
    pub(crate) latency_rate: f64,
    pub(crate) parked: u64,
    pub(crate) probe_for: Duration,
    pub(crate) backlog: u64,
    pub(crate) plugin_events: u64,
    /// Endpoints of the `customers` scenario.
    pub(crate) customers: usize,
}

impl Scale {
    pub(crate) fn full() -> Scale {
        Scale {
            ingest_for: Duration::from_secs(5),
            e2e_events: 100_000,
            fanout_events: 20_000,
            latency_for: Duration::from_secs(10),
            latency_rate: 2000.0,
            parked: 100_000,
            probe_for: Duration::from_secs(10),
            backlog: 1_000_000,
            plugin_events: 20_000,
            customers: 1_000_000,
        }
    }

    /// A tenth of everything: a smoke run that still exercises every scenario.
    pub(crate) fn quick() -> Scale {
        Scale {
            ingest_for: Duration::from_secs(1),
            e2e_events: 10_000,
            fanout_events: 2_000,
            latency_for: Duration::from_secs(2),
            latency_rate: 2000.0,
            parked: 10_000,
            probe_for: Duration::from_secs(2),
            backlog: 100_000,
            plugin_events: 2_000,
            customers: 100_000,
        }
    }
}

pub(crate) struct Bench {
    pub(crate) client: Client,
    pub(crate) scale: Scale,
    pub(crate) work_root: PathBuf,
    /// Where the bundled plugins were built (`plugins/target/wasm32-wasip2/release`).
    pub(crate) plugin_build: PathBuf,
    pub(crate) results: Results,
    pub(crate) verbose: bool,
    /// This run's loopback floor (requests/s), once measured: throughputs are also recorded
    /// as a share of it.
    pub(crate) floor: Option<f64>,
    /// A PostgreSQL URL the single-event steps' gateways store into instead of SQLite (set by
    /// the `postgres` scenario for its single-event steps, None otherwise).
    pub(crate) postgres: Option<String>,
}

/// A temp dir with a config file for one gateway.
pub(crate) struct Site {
    dir: tempfile::TempDir,
    config: PathBuf,
}

impl Site {
    pub(crate) fn new(root: &Path, body: &str) -> anyhow::Result<Site> {
        Site::with_storage(root, |d| format!("storage:\n  path: {d}/hookgate.db\n"), body)
    }

    /// A site whose config names its own storage (a PostgreSQL URL): no SQLite file.
    pub(crate) fn without_sqlite(root: &Path, body: &str) -> anyhow::Result<Site> {
        Site::with_storage(root, |_| String::new(), body)
    }

    /// A temp dir under `root` with a config: `head` (given the dir), the plugin folder and
    /// its cache in the dir, loopback delivery, then `body`.
    fn with_storage(root: &Path, head: impl Fn(&str) -> String, body: &str) -> anyhow::Result<Site> {
        std::fs::create_dir_all(root)?;
        let dir = tempfile::Builder::new()
            .prefix("hookgate-bench-")
            .tempdir_in(root)?;
        let d = dir.path().display().to_string();
        let yaml = format!(
            "{}plugins:\n  dir: {d}/plugins\n  bundled: false\n  cache_dir: {d}/cache\ndelivery:\n  allow_networks: [127.0.0.0/8]\n{body}",
            head(&d)
        );
        let config = dir.path().join("hookgate.yaml");
        std::fs::write(&config, yaml)?;
        Ok(Site { dir, config })
    }

    /// Starts a gateway on this site; its log goes to `log` (outside the temp dir, so it is
    /// still there to read when a run fails).
    async fn start(&self, log: &Path) -> anyhow::Result<GatewayProcess> {
        GatewayProcess::spawn(&self.config, log, READY_WITHIN).await
    }

    fn database_bytes(&self) -> u64 {
        ["hookgate.db", "hookgate.db-wal"]
            .iter()
            .filter_map(|f| std::fs::metadata(self.dir.path().join(f)).ok())
            .map(|m| m.len())
            .sum()
    }
}

/// What an end-to-end run measured: deliveries/s, and CPU per delivery in µs of the gateway
/// and, on PostgreSQL, of the database server's processes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Delivered {
    pub(crate) rate: f64,
    pub(crate) cpu_us: f64,
    pub(crate) db_cpu_us: Option<f64>,
}

/// Each kind of thread's sleeps (so: wake-ups) between `before` and `after`, per delivery:
/// `1.14 in all: hookgate-schedu 0.68, hookgate-syncer 0.19, ...`, most first.
fn sleeps_per_delivery(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
    deliveries: u64,
) -> String {
    let mut rows: Vec<(f64, &str)> = after
        .iter()
        .map(|(kind, n)| {
            let n = n.saturating_sub(before.get(kind).copied().unwrap_or(0));
            (n as f64 / deliveries.max(1) as f64, kind.as_str())
        })
        .filter(|(per, _)| *per >= 0.005)
        .collect();
    rows.sort_by(|a, b| b.0.total_cmp(&a.0));
    let total: f64 = rows.iter().map(|(per, _)| per).sum();
    let each: Vec<String> = rows
        .iter()
        .map(|(per, kind)| format!("{kind} {per:.2}"))
        .collect();
    format!("{total:.2} in all: {}", each.join(", "))
}

pub(crate) fn target(gw: &GatewayProcess, topic: &str, payload_bytes: usize) -> LoadTarget {
    LoadTarget {
        base_url: gw.base_url(),
        topic: topic.into(),
        api: Api::Native,
        api_key: None,
        event_type: "order.paid".into(),
        payload_bytes,
        record_ids: false,
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Polls `check` every 2 ms until it holds; fails after `within`.
pub(crate) async fn wait_until(
    what: &str,
    within: Duration,
    mut check: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    while !check() {
        if Instant::now() > deadline {
            bail!("timed out after {within:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    Ok(())
}

pub(crate) fn ensure_no_errors(report: &Report, what: &str) -> anyhow::Result<()> {
    if report.errors > 0 {
        bail!("{what}: {} requests failed: {:?}", report.errors, report.statuses);
    }
    Ok(())
}

impl Bench {
    /// Starts a gateway on `site` with its log under `<work dir>/logs/<name>.log`, and gives
    /// the run a fresh client: a pooled connection to a stopped gateway must not be reused
    /// when the next gateway happens to get the same port.
    pub(crate) async fn start(&mut self, site: &Site, name: &str) -> anyhow::Result<GatewayProcess> {
        let logs = self.work_root.join("logs");
        std::fs::create_dir_all(&logs)?;
        self.client = Client::new(256);
        site.start(&logs.join(format!("{name}.log"))).await
    }

    /// Starts another gateway on `site` beside those running (a cluster node); the client is
    /// kept.
    pub(crate) async fn start_more(&mut self, site: &Site, name: &str) -> anyhow::Result<GatewayProcess> {
        let logs = self.work_root.join("logs");
        std::fs::create_dir_all(&logs)?;
        site.start(&logs.join(format!("{name}.log"))).await
    }

    pub(crate) fn say(&self, text: &str) {
        if self.verbose {
            eprintln!("  {text}");
        }
    }

    pub(crate) async fn get_json(&self, url: &str) -> anyhow::Result<Value> {
        let body = self.client.get(url).await.map_err(anyhow::Error::msg)?;
        Ok(serde_json::from_slice(&body)?)
    }

    async fn queue_depth(&self, gw: &GatewayProcess) -> anyhow::Result<u64> {
        let status = self.get_json(&format!("{}/v1/status", gw.base_url())).await?;
        status["queue_depth"]
            .as_u64()
            .context("queue_depth in /v1/status")
    }

    /// The loopback floor of this run (see `floor.rs`): requests/s of 1 KiB single-event
    /// POSTs at 64 clients to a server that does nothing else.
    pub(crate) async fn floor(&mut self) -> anyhow::Result<()> {
        let server = NullServer::start().await?;
        self.client = Client::new(256);
        let t = LoadTarget {
            base_url: server.base_url(),
            topic: "floor".into(),
            api: Api::Native,
            api_key: None,
            event_type: "order.paid".into(),
            payload_bytes: 1024,
            record_ids: false,
        };
        let report = self.timed(&t, Shape::Single, 64, "loopback floor").await?;
        let rate = report.events_per_s();
        self.say(&format!("loopback floor {rate:.0} requests/s"));
        self.floor = Some(rate);
        self.results.record(
            "loopback_floor",
            "loopback floor: 1 KiB POST → 202, 64 clients, Rust client and server",
            "requests/s",
            rate,
            None,
        );
        Ok(())
    }

    /// A closed loop for `scale.ingest_for` after a short warm-up (connections, statement
    /// caches, the WAL file); every request must have been answered 202.
    pub(crate) async fn timed(
        &self,
        t: &LoadTarget,
        shape: Shape,
        concurrency: usize,
        what: &str,
    ) -> anyhow::Result<Report> {
        let warm = Stop::After(Duration::from_millis(300));
        closed_loop(&self.client, t, shape, concurrency, warm).await?;
        let timed = Stop::After(self.scale.ingest_for);
        let report = closed_loop(&self.client, t, shape, concurrency, timed).await?;
        ensure_no_errors(&report, what)?;
        self.say(&report.summary().replace('\n', "\n  "));
        Ok(report)
    }

    /// Records `rate` as a share of this run's floor, when there is one.
    fn record_share(&mut self, key: &str, label: &str, rate: f64, target: Option<Target>) {
        if let Some(floor) = self.floor {
            self.results.record(
                &format!("{key}_share"),
                &format!("{label} — share of the floor"),
                "× floor",
                rate / floor,
                target,
            );
        }
    }

    /// An ingestion figure: events/s, its share of the floor, and the latency p50 and p99.
    fn record_ingest(&mut self, key: &str, label: &str, report: &Report, targets: [Option<Target>; 2]) {
        let rate = report.events_per_s();
        let [target, share_target] = targets;
        self.record_share(key, label, rate, share_target);
        let r = &mut self.results;
        r.record(key, label, "events/s", rate, target);
        for (q, name) in [(0.5, "p50"), (0.99, "p99")] {
            r.record(
                &format!("{key}_{name}"),
                &format!("{label} — {name}"),
                "ms",
                ms(report.latency(q)),
                None,
            );
        }
    }

    /// A receiver that verifies every signature, and a site whose topic `orders` `endpoints`
    /// endpoints subscribe to, each on a path of its own.
    async fn subscribed_site(&self, endpoints: usize) -> anyhow::Result<(Sink, Site)> {
        self.subscribed_site_with(endpoints, "").await
    }

    /// Like [`Bench::subscribed_site`], each endpoint with these keys too (`, filter: {…}`).
    async fn subscribed_site_with(&self, endpoints: usize, keys: &str) -> anyhow::Result<(Sink, Site)> {
        let sink = Sink::start(SinkOptions {
            secret: Some(SECRET.into()),
            ..SinkOptions::loopback()
        })
        .await?;
        let mut yaml = String::from("topics:\n  orders: {}\nendpoints:\n");
        for i in 0..endpoints {
            yaml.push_str(&format!(
                "  e{i}: {{url: '{}', topics: [orders], secret: {SECRET}{keys}}}\n",
                sink.url(&format!("/hook/{i}"))
            ));
        }
        Ok((sink, self.site_on_store(&yaml)?))
    }

    /// A site with `body`, on the store in use: SQLite, or the PostgreSQL schema of the
    /// `postgres` scenario's step.
    pub(crate) fn site_on_store(&self, body: &str) -> anyhow::Result<Site> {
        match &self.postgres {
            Some(url) => Site::without_sqlite(
                &self.work_root,
                &format!("storage:\n  url: \"{url}\"\n  encryption_key: {BENCH_STORAGE_KEY}\n{body}"),
            ),
            None => Site::new(&self.work_root, body),
        }
    }

    /// A figure's key and label as they are on the store in use: prefixed on PostgreSQL.
    pub(crate) fn on_store(&self, key: &str, label: &str) -> (String, String) {
        match self.postgres {
            Some(_) => (format!("pg_{key}"), format!("PostgreSQL, {label}")),
            None => (key.to_owned(), label.to_owned()),
        }
    }

    /// Single-event ingestion at 64 clients into a topic ten endpoints subscribe to, 1 KiB
    /// payloads, with a content filter on each endpoint or without: what filters cost at
    /// fan-out. Every filter lets every event through (three conditions: on the type, a
    /// string and a number of the payload), so both runs deliver the same; the difference is
    /// the filters' evaluation (and the one parse of each payload that the filtered run pays).
    pub(crate) async fn ingest_filtered(&mut self, filtered: bool) -> anyhow::Result<()> {
        let keys = if filtered {
            ", filter: {type: {$startsWith: 'order.'}, payload.status: {$in: [paid, shipped]}, payload.order: {$gte: 1000}}"
        } else {
            ""
        };
        let (_sink, site) = self.subscribed_site_with(10, keys).await?;
        let name = if filtered {
            "ingest-filters"
        } else {
            "ingest-no-filters"
        };
        let gw = self.start(&site, name).await?;
        let t = target(&gw, "orders", 1024);
        let report = self.timed(&t, Shape::Single, 64, name).await?;
        gw.stop().await?;
        if report.deliveries != report.events_accepted * 10 {
            bail!(
                "{} deliveries for {} events to 10 endpoints: a filter refused some",
                report.deliveries,
                report.events_accepted
            );
        }
        let (key, label) = if filtered {
            (
                "ingest_10_filtered_c64",
                "ingest, single 1 KiB events, 10 endpoints with content filters, 64 clients",
            )
        } else {
            (
                "ingest_10_unfiltered_c64",
                "ingest, single 1 KiB events, 10 endpoints without filters, 64 clients",
            )
        };
        self.record_ingest(key, label, &report, [None, None]);
        Ok(())
    }

    /// Single-event ingestion at 64 clients into a topic one endpoint subscribes to, with
    /// 1 KiB payloads, while the gateway delivers them: the headline ingest figure.
    pub(crate) async fn ingest_subscribed(&mut self) -> anyhow::Result<()> {
        let (_sink, site) = self.subscribed_site(1).await?;
        let gw = self.start(&site, "ingest-subscribed").await?;
        let t = target(&gw, "orders", 1024);
        let report = self
            .timed(&t, Shape::Single, 64, "ingest with a subscriber")
            .await?;
        gw.stop().await?;
        let (key, label) = self.on_store(
            "ingest_subscribed_c64",
            "ingest, single 1 KiB events, 1 subscriber, 64 clients",
        );
        let share_target = if self.postgres.is_some() {
            None
        } else {
            Target::at_least(0.18)
        };
        self.record_ingest(&key, &label, &report, [None, share_target]);
        Ok(())
    }

    /// Ingestion alone (a topic nobody subscribes to): events/s and latency, closed loop.
    pub(crate) async fn ingest(&mut self, shape: Shape, concurrency: usize) -> anyhow::Result<()> {
        let site = Site::new(&self.work_root, "topics:\n  ingest: {}\n")?;
        let gw = self.start(&site, &format!("ingest-{concurrency}")).await?;
        let t = target(&gw, "ingest", 200);
        let report = self.timed(&t, shape, concurrency, "ingest").await?;
        gw.stop().await?;
        let (key, label, target) = match shape {
            Shape::Single => (
                format!("ingest_single_c{concurrency}"),
                format!(
                    "ingest, single 200 B events, no subscriber, {concurrency} client{}",
                    if concurrency == 1 { "" } else { "s" }
                ),
                (concurrency == 64).then(|| Target::at_least(8000.0)).flatten(),
            ),
            Shape::Batch(n) => (
                "ingest_batch".to_owned(),
                format!("ingest, batches of {n}, no subscriber, {concurrency} clients"),
                None,
            ),
        };
        self.record_ingest(&key, &label, &report, [target, None]);
        Ok(())
    }

    /// Ingestion of `requests` requests of `shape` at `concurrency` into `endpoints`
    /// subscribers until the sink has every delivery (after `warm` requests through to it):
    /// deliveries/s from the first request to the last delivery, and the gateway's CPU time per
    /// delivery, in µs.
    pub(crate) async fn through_sink(
        &mut self,
        endpoints: usize,
        (shape, concurrency): (Shape, usize),
        warm: u64,
        requests: u64,
    ) -> anyhow::Result<Delivered> {
        let (sink, site) = self.subscribed_site(endpoints).await?;
        let gw = self
            .start(&site, &format!("e2e-{endpoints}-c{concurrency}"))
            .await?;
        let t = target(&gw, "orders", 200);
        let warm = closed_loop(&self.client, &t, shape, concurrency, Stop::Requests(warm)).await?;
        ensure_no_errors(&warm, "warm-up")?;
        wait_until("the warm-up deliveries", Duration::from_secs(30), || {
            sink.answered_ok() >= warm.deliveries
        })
        .await?;
        sink.reset();

        let cpu_before = gw.cpu_time()?;
        let sleeps_before = gw.sleeps_by_thread();
        let db_before = self.postgres.as_ref().map(|_| cpu_by_process("postgres"));
        let started_us = unix_us();
        let report = closed_loop(&self.client, &t, shape, concurrency, Stop::Requests(requests)).await?;
        ensure_no_errors(&report, "end-to-end ingest")?;
        let expected = report.deliveries;
        if expected != report.events_accepted * endpoints as u64 {
            bail!(
                "{} deliveries for {} events to {endpoints} endpoints",
                expected,
                report.events_accepted
            );
        }
        wait_until("every delivery at the sink", Duration::from_secs(600), || {
            sink.answered_ok() >= expected
        })
        .await?;
        let stats = sink.stats();
        let cpu = gw.cpu_time()? - cpu_before;
        let sleeps = sleeps_per_delivery(&sleeps_before, &gw.sleeps_by_thread(), expected);
        let db_cpu = db_before.map(|before| cpu_since(&before, "postgres"));
        let seconds = stats
            .last_request_unix_us
            .unwrap_or_else(unix_us)
            .saturating_sub(started_us) as f64
            / 1e6;
        gw.stop().await?;
        if stats.signatures_invalid > 0 || stats.distinct_ids != report.events_accepted {
            bail!(
                "the sink saw {} bad signatures and {} distinct ids for {} events",
                stats.signatures_invalid,
                stats.distinct_ids,
                report.events_accepted
            );
        }
        let delivered = Delivered {
            rate: expected as f64 / seconds,
            cpu_us: micros_each(cpu, expected),
            db_cpu_us: db_cpu.map(|cpu| micros_each(cpu, expected)),
        };
        self.say(&format!(
            "{expected} deliveries in {seconds:.2} s = {:.0}/s; ingest {:.0} events/s; gateway CPU {:.1} µs/delivery, database {:?}",
            delivered.rate,
            report.events_per_s(),
            delivered.cpu_us,
            delivered.db_cpu_us,
        ));
        self.say(&format!("wake-ups per delivery by thread: {sleeps}"));
        Ok(delivered)
    }

    /// An end-to-end figure: deliveries/s, its share of the floor, the gateway's CPU per
    /// delivery and, on PostgreSQL, the database server's.
    fn record_delivered(
        &mut self,
        key: &str,
        label: &str,
        measured: Delivered,
        targets: [Option<Target>; 2],
    ) {
        let [target, share_target] = targets;
        self.record_share(key, label, measured.rate, share_target);
        let r = &mut self.results;
        r.record(key, label, "deliveries/s", measured.rate, target);
        r.record(
            &format!("{key}_cpu"),
            &format!("{label} — gateway CPU per delivery"),
            "µs",
            measured.cpu_us,
            None,
        );
        if let Some(db_cpu_us) = measured.db_cpu_us {
            r.record(
                &format!("{key}_db_cpu"),
                &format!("{label} — database server CPU per delivery"),
                "µs",
                db_cpu_us,
                None,
            );
        }
    }

    /// Batch ingestion into `endpoints` subscribers until the sink has every delivery.
    pub(crate) async fn end_to_end(&mut self, endpoints: usize, events: u64) -> anyhow::Result<()> {
        let batch = 100u64;
        // Warm-up: one batch through to the sink.
        let measured = self
            .through_sink(
                endpoints,
                (Shape::Batch(batch as usize), 4),
                1,
                events.div_ceil(batch),
            )
            .await?;
        if endpoints == 1 {
            self.record_delivered(
                "e2e_1_endpoint",
                "end to end, 1 endpoint, batch ingestion",
                measured,
                [Target::at_least(10_000.0), Target::at_least(0.35)],
            );
        } else {
            let label = format!("end to end, fan-out to {endpoints}");
            self.record_delivered("e2e_fanout_10", &label, measured, [None, None]);
        }
        Ok(())
    }

    /// Single-event ingestion at 64 clients (no batches) into one endpoint until the sink has
    /// every delivery.
    pub(crate) async fn end_to_end_single(&mut self, events: u64) -> anyhow::Result<()> {
        let measured = self.through_sink(1, (Shape::Single, 64), 640, events).await?;
        let (key, label) = self.on_store("e2e_single", "end to end, 1 endpoint, single events, 64 clients");
        // On SQLite: 20× what Svix delivers on this machine with the same client (≈ 960/s).
        let target = if self.postgres.is_some() {
            None
        } else {
            Target::at_least(19_000.0)
        };
        self.record_delivered(&key, &label, measured, [target, None]);
        Ok(())
    }

    /// Single events at a fixed offered rate (open loop) while they are delivered to one
    /// endpoint: the latency a client sees.
    pub(crate) async fn latency_at_rate(&mut self) -> anyhow::Result<()> {
        let rate = self.scale.latency_rate;
        let sink = Sink::start(SinkOptions::loopback()).await?;
        let yaml = format!(
            "topics:\n  orders: {{}}\nendpoints:\n  e: {{url: '{}', topics: [orders], secret: {SECRET}}}\n",
            sink.url("/hook")
        );
        let site = Site::new(&self.work_root, &yaml)?;
        let gw = self.start(&site, "latency").await?;
        let t = target(&gw, "orders", 200);
        open_loop(
            &self.client,
            &t,
            Shape::Single,
            rate,
            Duration::from_secs(1),
            4096,
        )
        .await?;
        let report = open_loop(
            &self.client,
            &t,
            Shape::Single,
            rate,
            self.scale.latency_for,
            4096,
        )
        .await?;
        ensure_no_errors(&report, "fixed-rate ingest")?;
        let delivered = report.deliveries;
        wait_until("the deliveries", Duration::from_secs(60), || {
            sink.answered_ok() >= delivered
        })
        .await?;
        gw.stop().await?;
        self.say(&report.summary().replace('\n', "\n  "));
        let label = format!("ingest at {rate:.0}/s offered");
        let r = &mut self.results;
        r.record(
            "latency_2000_p50",
            &format!("{label} — p50"),
            "ms",
            ms(report.latency(0.5)),
            None,
        );
        r.record(
            "latency_2000_p99",
            &format!("{label} — p99"),
            "ms",
            ms(report.latency(0.99)),
            Target::at_most(10.0),
        );
        r.record(
            "latency_2000_p999",
            &format!("{label} — p99.9"),
            "ms",
            ms(report.latency(0.999)),
            None,
        );
        r.record(
            "latency_2000_achieved",
            &format!("{label} — achieved"),
            "events/s",
            report.events_per_s(),
            None,
        );
        Ok(())
    }

    /// The gateway's histogram `name`, read from `/metrics` now.
    async fn histogram(&self, gw: &GatewayProcess, name: &str) -> anyhow::Result<Histogram> {
        Ok(Histogram::parse(&self.metrics_text(gw).await?, name))
    }

    /// The gateway's counter `name` (summed over its labels), read from `/metrics` now.
    pub(crate) async fn counter(&self, gw: &GatewayProcess, name: &str) -> anyhow::Result<f64> {
        Ok(prom::counter(&self.metrics_text(gw).await?, name))
    }

    async fn metrics_text(&self, gw: &GatewayProcess) -> anyhow::Result<String> {
        let text = self
            .client
            .get(&format!("{}/metrics", gw.base_url()))
            .await
            .map_err(anyhow::Error::msg)?;
        Ok(String::from_utf8_lossy(&text).into_owned())
    }

    /// Parks `parked` deliveries as pending retries an hour out, then runs probe deliveries
    /// whose retries are planned exactly (1 s apart, no jitter) and reads how late the
    /// scheduler starts them from `hookgate_attempt_lateness_seconds`.
    pub(crate) async fn lateness(&mut self) -> anyhow::Result<()> {
        let parked = self.scale.parked;
        let sink = Sink::start(SinkOptions::loopback()).await?;
        let yaml = format!(
            "policies:\n  park: {{schedule: [0s, 1h], jitter: 0}}\n  \
             probe: {{schedule: [0s, 1s, 1s, 1s, 1s, 1s, 1s, 1s, 1s], jitter: 0}}\n\
             topics:\n  parked: {{}}\n  probe: {{}}\nendpoints:\n  \
             parked: {{url: '{}', topics: [parked], policy: park}}\n  \
             probe: {{url: '{}', topics: [probe], policy: probe}}\n",
            sink.url("/status/503"),
            sink.url("/status/503")
        );
        let site = Site::new(&self.work_root, &yaml)?;
        let gw = self.start(&site, "lateness").await?;
        let load = closed_loop(
            &self.client,
            &target(&gw, "parked", 100),
            Shape::Batch(1000),
            2,
            Stop::Requests(parked.div_ceil(1000)),
        )
        .await?;
        ensure_no_errors(&load, "parking")?;
        wait_until(
            "every parked delivery's first attempt",
            Duration::from_secs(600),
            || sink.requests() >= load.deliveries,
        )
        .await?;
        // Let the last outcomes be planned (an hour out) before the probes start.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let pending = self.queue_depth(&gw).await?;
        let before = self.histogram(&gw, "hookgate_attempt_lateness_seconds").await?;

        let probes = open_loop(
            &self.client,
            &target(&gw, "probe", 100),
            Shape::Single,
            100.0,
            self.scale.probe_for,
            1024,
        )
        .await?;
        ensure_no_errors(&probes, "probes")?;
        let expected = load.deliveries + probes.deliveries * 9;
        wait_until("every probe attempt", Duration::from_secs(120), || {
            sink.requests() >= expected
        })
        .await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let during = self
            .histogram(&gw, "hookgate_attempt_lateness_seconds")
            .await?
            .since(&before);
        gw.stop().await?;

        // Edges sit half-way between whole milliseconds: the edge below 10 ms names the value.
        let as_ms = |edge: Option<f64>| {
            edge.map_or(f64::NAN, |e| {
                if e < 0.01 {
                    (e * 1000.0 - 0.5).round()
                } else {
                    e * 1000.0
                }
            })
        };
        let p50 = as_ms(during.quantile_upper_edge(0.5));
        let p99 = as_ms(during.quantile_upper_edge(0.99));
        let p999 = as_ms(during.quantile_upper_edge(0.999));
        self.say(&format!(
            "{pending} pending while {} probe attempts ran: lateness p50 {p50} ms, p99 {p99} ms, p99.9 {p999} ms",
            during.count()
        ));
        let label = format!("scheduler lateness, {} pending", fmt_count(pending));
        let r = &mut self.results;
        r.record(
            "lateness_pending",
            "pending deliveries during the probe",
            "deliveries",
            pending as f64,
            None,
        );
        r.record("lateness_p50", &format!("{label} — p50"), "ms", p50, None);
        r.record(
            "lateness_p99",
            &format!("{label} — p99"),
            "ms",
            p99,
            Target::at_most(5.0),
        );
        r.record("lateness_p999", &format!("{label} — p99.9"), "ms", p999, None);
        Ok(())
    }

    /// A backlog of `backlog` pending deliveries (the endpoint takes 1 per second): resident
    /// memory with it in the queue, then a restart — until the gateway answers, and until
    /// deliveries resume.
    pub(crate) async fn backlog(&mut self) -> anyhow::Result<()> {
        let n = self.scale.backlog;
        let sink = Sink::start(SinkOptions::loopback()).await?;
        let yaml = format!(
            "topics:\n  backlog: {{}}\nendpoints:\n  slow: {{url: '{}', topics: [backlog], max_per_second: 1}}\n",
            sink.url("/hook")
        );
        let site = Site::new(&self.work_root, &yaml)?;
        let gw = self.start(&site, "backlog").await?;
        let idle = gw.memory()?;
        let load = closed_loop(
            &self.client,
            &target(&gw, "backlog", 100),
            Shape::Batch(1000),
            2,
            Stop::Requests(n.div_ceil(1000)),
        )
        .await?;
        ensure_no_errors(&load, "backlog ingest")?;
        // Committed deliveries reach the scheduler right after their commit.
        let deadline = Instant::now() + Duration::from_secs(60);
        let mut pending = 0;
        while Instant::now() < deadline {
            pending = self.queue_depth(&gw).await?;
            if pending + 1000 >= load.deliveries {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let live = gw.memory()?;
        let shutdown = gw.stop().await?;
        let db_bytes = site.database_bytes();

        sink.reset();
        let spawned_us = unix_us();
        let gw = self.start(&site, "backlog-restarted").await?;
        wait_until(
            "the first delivery after the restart",
            Duration::from_secs(120),
            || sink.requests() >= 1,
        )
        .await?;
        let resumed_us = sink
            .stats()
            .first_request_unix_us
            .context("the first request's time")?;
        let restored = self.queue_depth(&gw).await?;
        let restarted = gw.memory()?;
        // The allocator returns freed memory a while after it was freed (mimalloc: a second
        // for a page, ten for an arena's), at a later allocation: this says how much of the
        // figure above is such memory.
        tokio::time::sleep(Duration::from_secs(12)).await;
        let settled = gw.memory()?;
        let ready = gw.start_time;
        gw.stop().await?;

        let resume_s = resumed_us.saturating_sub(spawned_us) as f64 / 1e6;
        self.say(&format!(
            "ingested {} events at {:.0}/s; {pending} pending; RSS idle {:.0} MiB, with backlog {:.0} MiB (peak {:.0}); \
             database {:.0} MiB; shutdown {:.2} s; restart: ready {:.2} s, deliveries resumed {resume_s:.2} s, \
             {restored} restored, RSS {:.0} MiB (peak {:.0}; 12 s later {:.0})",
            load.events_accepted,
            load.events_per_s(),
            idle.rss_bytes as f64 / MIB,
            live.rss_bytes as f64 / MIB,
            live.peak_rss_bytes as f64 / MIB,
            db_bytes as f64 / MIB,
            shutdown.as_secs_f64(),
            ready.as_secs_f64(),
            restarted.rss_bytes as f64 / MIB,
            restarted.peak_rss_bytes as f64 / MIB,
            settled.rss_bytes as f64 / MIB,
        ));
        let count = fmt_count(n);
        let r = &mut self.results;
        r.record(
            "backlog_ingest",
            &format!("ingest of {count} events, batches of 1000"),
            "events/s",
            load.events_per_s(),
            None,
        );
        r.record(
            "rss_backlog_live",
            &format!("RSS with {count} pending, after ingesting them"),
            "MiB",
            live.rss_bytes as f64 / MIB,
            Target::at_most(300.0),
        );
        r.record(
            "rss_backlog_restarted",
            &format!("RSS with {count} pending, after a restart"),
            "MiB",
            restarted.rss_bytes as f64 / MIB,
            Target::at_most(300.0),
        );
        r.record(
            "restart_ready",
            &format!("restart with {count} pending, until the API answers"),
            "s",
            ready.as_secs_f64(),
            None,
        );
        r.record(
            "restart_resume",
            &format!("restart with {count} pending, until deliveries resume"),
            "s",
            resume_s,
            Target::at_most(5.0),
        );
        r.record(
            "shutdown",
            &format!("graceful shutdown with {count} pending"),
            "s",
            shutdown.as_secs_f64(),
            None,
        );
        Ok(())
    }

    /// Copies the built components `names` into `site`'s plugin folder (which it returns), or
    /// says to build them first.
    fn install_plugins(&self, site: &Site, names: &[&str]) -> anyhow::Result<PathBuf> {
        let plugin_dir = site.dir.path().join("plugins");
        std::fs::create_dir_all(&plugin_dir)?;
        for name in names {
            // Cargo names the artifacts with `_`; the gateway treats `-` and `_` alike.
            let wasm = self.plugin_build.join(format!("{}.wasm", name.replace('-', "_")));
            if !wasm.exists() {
                bail!(
                    "{} is not built: run `cargo build --release` in plugins/ first",
                    wasm.display()
                );
            }
            std::fs::copy(&wasm, plugin_dir.join(format!("{name}.wasm")))?;
        }
        Ok(plugin_dir)
    }

    /// The same 1 KiB deliveries without plugins (Standard Webhooks signing in the host) and
    /// with a transform (`cloudevents`) and a signer (`github-signature`): the difference in
    /// the gateway's CPU time per delivery, and the plugin time each attempt recorded.
    pub(crate) async fn plugins(&mut self) -> anyhow::Result<()> {
        let sink = Sink::start(SinkOptions::loopback()).await?;
        let yaml = format!(
            "topics:\n  plain: {{}}\n  plugged: {{}}\nendpoints:\n  \
             plain: {{url: '{}', topics: [plain], secret: {SECRET}}}\n  \
             plugged:\n    url: '{}'\n    topics: [plugged]\n    secret: bench-secret\n    \
             transform: {{plugin: cloudevents, config: {{source: /bench}}}}\n    \
             signer: {{plugin: github-signature}}\n",
            sink.url("/plain"),
            sink.url("/plugged")
        );
        let site = Site::new(&self.work_root, &yaml)?;
        self.install_plugins(&site, &["cloudevents", "github-signature"])?;
        let gw = self.start(&site, "plugins").await?;
        let measured = self.alternate(&gw, &sink, ["plain", "plugged"], [0, 2]).await?;
        gw.stop().await?;
        let (cpu_per_delivery, rates) = (measured.cpu_us, measured.rates);
        let plugin_us = measured.plugin_us[1];
        let overhead = cpu_per_delivery[1] - cpu_per_delivery[0];
        self.say(&format!(
            "gateway CPU per 1 KiB delivery: {:.1} µs without plugins, {:.1} µs with transform + signer; \
             the two plugin calls took {:.1} µs per delivery",
            cpu_per_delivery[0], cpu_per_delivery[1], plugin_us
        ));
        self.say(&format!(
            "end to end: {:.0} deliveries/s without plugins, {:.0} with transform + signer ({:.2}×)",
            rates[0],
            rates[1],
            rates[1] / rates[0]
        ));
        let r = &mut self.results;
        r.record(
            "plugin_rate_none",
            "end to end, 1 KiB, batches of 100, no plugin",
            "deliveries/s",
            rates[0],
            None,
        );
        r.record(
            "plugin_rate_both",
            "end to end, 1 KiB, batches of 100, transform + signer",
            "deliveries/s",
            rates[1],
            None,
        );
        r.record(
            "plugin_rate_ratio",
            "end to end with transform + signer — share of the same without plugins",
            "×",
            rates[1] / rates[0],
            Target::at_least(0.8),
        );
        r.record(
            "plugin_cpu_none",
            "gateway CPU per 1 KiB delivery, no plugin",
            "µs",
            cpu_per_delivery[0],
            None,
        );
        r.record(
            "plugin_cpu_both",
            "gateway CPU per 1 KiB delivery, transform + signer",
            "µs",
            cpu_per_delivery[1],
            None,
        );
        r.record(
            "plugin_overhead_cpu",
            "plugin overhead per delivery (CPU difference)",
            "µs",
            overhead,
            Target::at_most(25.0),
        );
        r.record(
            "plugin_call_time",
            "plugin calls' own time per delivery (transform + signer, in the gateway)",
            "µs",
            plugin_us,
            Target::at_most(25.0),
        );
        Ok(())
    }

    /// 1 KiB deliveries to two topics, warmed once each and then measured alternately,
    /// [`PLUGIN_ROUNDS`] rounds each: a difference of two whole-process figures is noisy, and
    /// alternating spreads the machine's moods. `calls` is how many plugin calls one delivery
    /// of each topic makes (checked against the call histogram; 0 for none).
    async fn alternate(
        &mut self,
        gw: &GatewayProcess,
        sink: &Sink,
        topics: [&str; 2],
        calls: [u64; 2],
    ) -> anyhow::Result<Alternated> {
        let events = self.scale.plugin_events;
        let mut cpu_samples: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        let mut rate_samples: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
        // The plugin calls' own time (`hookgate_plugin_call_duration_seconds`, ns resolution)
        // and the deliveries it was spent on, per topic.
        let mut plugin_seconds = [0.0f64; 2];
        let mut deliveries = [0u64; 2];
        for i in 0..2 * (1 + PLUGIN_ROUNDS) {
            let (side, topic, measured) = (i % 2, topics[i % 2], i >= 2);
            let count = if measured { events } else { 200 };
            let base = sink.answered_ok();
            let calls_before = self
                .histogram(gw, "hookgate_plugin_call_duration_seconds")
                .await?;
            let cpu_before = gw.cpu_time()?;
            let started = Instant::now();
            let report = closed_loop(
                &self.client,
                &target(gw, topic, 1024),
                Shape::Batch(100),
                4,
                Stop::Requests(count / 100),
            )
            .await?;
            ensure_no_errors(&report, topic)?;
            let expected = base + report.deliveries;
            wait_until(
                "the plugin scenario's deliveries",
                Duration::from_secs(300),
                || sink.answered_ok() >= expected,
            )
            .await?;
            if sink.stats().answered_error > 0 {
                bail!("the sink refused deliveries of `{topic}`");
            }
            if !measured {
                continue;
            }
            rate_samples[side].push(report.deliveries as f64 / started.elapsed().as_secs_f64());
            let cpu = micros_each(gw.cpu_time()? - cpu_before, report.deliveries);
            cpu_samples[side].push(cpu);
            let made = self
                .histogram(gw, "hookgate_plugin_call_duration_seconds")
                .await?
                .since(&calls_before);
            if made.count() != calls[side] * report.deliveries {
                bail!(
                    "{} plugin calls for {} deliveries of `{topic}`, expected {} each",
                    made.count(),
                    report.deliveries,
                    calls[side]
                );
            }
            plugin_seconds[side] += made.sum;
            deliveries[side] += report.deliveries;
        }
        Ok(Alternated {
            rates: rate_samples.map(|samples| crate::report::median(&samples)),
            cpu_us: cpu_samples.map(|samples| crate::report::median(&samples)),
            plugin_us: [0, 1].map(|side| plugin_seconds[side] * 1e6 / deliveries[side].max(1) as f64),
        })
    }

    /// The same 1 KiB deliveries through the Rust `cloudevents` transform and through a
    /// JavaScript transformation of the same shape (an envelope around the payload, a header)
    /// run by the bundled `js` plugin: what a Svix-style script costs beside compiled Rust.
    pub(crate) async fn js_transform(&mut self) -> anyhow::Result<()> {
        let sink = Sink::start(SinkOptions::loopback()).await?;
        let yaml = format!(
            "topics:\n  ce: {{}}\n  js: {{}}\nendpoints:\n  \
             ce:\n    url: '{}'\n    topics: [ce]\n    secret: {SECRET}\n    \
             transform: {{plugin: cloudevents, config: {{source: /bench}}}}\n  \
             js:\n    url: '{}'\n    topics: [js]\n    secret: {SECRET}\n    \
             transform: {{plugin: envelope}}\n",
            sink.url("/ce"),
            sink.url("/js")
        );
        let site = Site::new(&self.work_root, &yaml)?;
        let plugin_dir = self.install_plugins(&site, &["cloudevents", "js"])?;
        std::fs::write(plugin_dir.join("envelope.js"), JS_ENVELOPE)?;
        let gw = self.start(&site, "js").await?;
        let measured = self.alternate(&gw, &sink, ["ce", "js"], [1, 1]).await?;
        gw.stop().await?;
        let [ce, js] = measured.plugin_us;
        self.say(&format!(
            "per 1 KiB delivery: the cloudevents transform's call {ce:.1} µs, the JavaScript one's {js:.1} µs; \
             gateway CPU {:.1} µs and {:.1} µs; {:.0} and {:.0} deliveries/s",
            measured.cpu_us[0], measured.cpu_us[1], measured.rates[0], measured.rates[1]
        ));
        let r = &mut self.results;
        r.record(
            "js_rate_cloudevents",
            "end to end, 1 KiB, batches of 100, Rust cloudevents transform",
            "deliveries/s",
            measured.rates[0],
            None,
        );
        r.record(
            "js_rate_js",
            "end to end, 1 KiB, batches of 100, JavaScript transform",
            "deliveries/s",
            measured.rates[1],
            None,
        );
        r.record(
            "js_cpu_cloudevents",
            "gateway CPU per 1 KiB delivery, Rust cloudevents transform",
            "µs",
            measured.cpu_us[0],
            None,
        );
        r.record(
            "js_cpu_js",
            "gateway CPU per 1 KiB delivery, JavaScript transform",
            "µs",
            measured.cpu_us[1],
            None,
        );
        r.record(
            "js_call_cloudevents",
            "cloudevents transform call per delivery",
            "µs",
            ce,
            None,
        );
        r.record(
            "js_call_js",
            "JavaScript transform call per delivery",
            "µs",
            js,
            None,
        );
        Ok(())
    }
}

/// What [`Bench::alternate`] measured, per topic: the median deliveries/s and gateway CPU µs
/// per delivery over the rounds, and the plugin calls' own µs per delivery.
struct Alternated {
    rates: [f64; 2],
    cpu_us: [f64; 2],
    plugin_us: [f64; 2],
}

/// The JavaScript the `js` scenario runs: an envelope like the cloudevents transform's.
const JS_ENVELOPE: &str = r#"function handler(webhook) {
  webhook.payload = {
    specversion: "1.0",
    type: webhook.eventType,
    source: "/bench",
    datacontenttype: "application/json",
    data: webhook.payload,
  };
  webhook.headers["content-type"] = "application/cloudevents+json; charset=utf-8";
  return webhook;
}
"#;

/// `1 000 000`, `100 000`.
pub(crate) fn fmt_count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(' ');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::{fmt_count, sleeps_per_delivery};

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(fmt_count(1_000_000), "1 000 000");
        assert_eq!(fmt_count(950), "950");
        assert_eq!(fmt_count(12_345), "12 345");
    }

    #[test]
    fn wake_ups_are_counted_per_delivery_since_before_most_first() {
        let map = |rows: &[(&str, u64)]| rows.iter().map(|(k, n)| (k.to_string(), *n)).collect();
        let before = map(&[("hookgate-writer", 100), ("tokio-rt-worker", 1_000)]);
        // A thread that started meanwhile counts from zero; one below half a per cent is left out.
        let after = map(&[
            ("hookgate-writer", 300),
            ("tokio-rt-worker", 1_500),
            ("hookgate-syncer", 1_000),
            ("notify-rs debou", 4),
        ]);
        assert_eq!(
            sleeps_per_delivery(&before, &after, 1_000),
            "1.70 in all: hookgate-syncer 1.00, tokio-rt-worker 0.50, hookgate-writer 0.20"
        );
    }
}
