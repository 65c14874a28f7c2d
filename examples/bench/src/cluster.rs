//! The PostgreSQL figures: end-to-end delivery (batch ingestion, fan-out to 10) on one node and
//! on three nodes sharing one database, beside the SQLite figures of the same run. Each run gets
//! a fresh schema in the database of `--postgres`, dropped afterwards.
//!
//! Three nodes on one machine run as an operator would run them there: the cores split between
//! them (`server.workers`). They also run once with a worker thread per core each, as a node
//! left at its default would, to show what oversubscribing the cores costs, and once apart: three
//! single nodes on a schema each, the same cores split the same way, which share nothing. The
//! cluster against the nodes apart is what coordinating costs; the nodes apart against one node
//! is what running three processes on the same cores costs.

use std::time::Duration;

use anyhow::{Context, bail};
use hookgate_loadgen::{Client, Shape, Stop, closed_loop, unix_us};
use hookgate_sink::{Sink, SinkOptions};

use crate::child::{GatewayProcess, cpu_by_process, cpu_since, micros_each};
use crate::report::Target;
use crate::scenarios::{BENCH_STORAGE_KEY, Bench, SECRET, Site, ensure_no_errors, target, wait_until};

const ENDPOINTS: usize = 10;
const BATCH: u64 = 100;
/// Batch requests in flight at once, over all nodes: one node or three get the same clients
/// (as behind a load balancer), so that the figures compare the nodes, not the load offered.
const CLIENTS: usize = 6;

/// How the nodes of a run share the machine.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Nodes {
    /// One node, a worker thread per core (the default).
    One,
    /// This many nodes, the cores split between them: at least one worker thread each.
    Shared(usize),
    /// This many nodes, each with a worker thread per core (the default), more than the cores.
    PerCore(usize),
    /// This many single nodes on a schema each, sharing nothing, the cores split like
    /// `Shared`: the control that tells coordinating from running several processes.
    Apart(usize),
}

impl Nodes {
    fn count(self) -> usize {
        match self {
            Nodes::One => 1,
            Nodes::Shared(n) | Nodes::PerCore(n) | Nodes::Apart(n) => n,
        }
    }

    /// How many schemas the nodes use: one each when apart, else one for all.
    fn schemas(self) -> usize {
        match self {
            Nodes::Apart(n) => n,
            Nodes::One | Nodes::Shared(_) | Nodes::PerCore(_) => 1,
        }
    }

    /// `server.workers` for each node; None: the default.
    fn workers(self) -> Option<usize> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        match self {
            Nodes::Shared(n) | Nodes::Apart(n) => Some((cores / n).max(1)),
            Nodes::One | Nodes::PerCore(_) => None,
        }
    }

    /// The figure's key and label, and its target.
    fn figure(self) -> (&'static str, String, Option<Target>) {
        let what = "PostgreSQL, end to end, fan-out to 10";
        let each = format!("{} worker thread(s) each", self.workers().unwrap_or(1));
        match self {
            Nodes::One => (ONE_NODE_KEY, format!("{what}, 1 node"), Target::at_least(5000.0)),
            Nodes::Shared(n) => (CLUSTER_KEY, format!("{what}, {n} nodes, {each}"), None),
            Nodes::PerCore(n) => (
                PER_CORE_KEY,
                format!("{what}, {n} nodes, a worker thread per core each"),
                None,
            ),
            Nodes::Apart(n) => (
                APART_KEY,
                format!("{what}, {n} single nodes apart (a schema each), {each}"),
                None,
            ),
        }
    }
}

/// The keys of the deliveries/s figures, which the cluster chart draws.
pub(crate) const ONE_NODE_KEY: &str = "pg_e2e_fanout_10";
pub(crate) const CLUSTER_KEY: &str = "pg_e2e_fanout_10_cluster";
pub(crate) const PER_CORE_KEY: &str = "pg_e2e_fanout_10_cluster_per_core";
pub(crate) const APART_KEY: &str = "pg_e2e_fanout_10_apart";

/// A schema of its own for one run, dropped when the run ends.
pub(crate) struct Schema {
    admin: String,
    name: String,
}

impl Schema {
    pub(crate) async fn create(admin: &str) -> anyhow::Result<Schema> {
        let name = format!("hg_bench_{}", std::process::id() ^ unix_us() as u32);
        run_sql(admin, &format!("CREATE SCHEMA {name}")).await?;
        Ok(Schema {
            admin: admin.to_owned(),
            name,
        })
    }

    pub(crate) fn url(&self) -> String {
        let sep = if self.admin.contains('?') { '&' } else { '?' };
        format!("{}{sep}options=-c%20search_path%3D{}", self.admin, self.name)
    }

    pub(crate) async fn drop(self) -> anyhow::Result<()> {
        run_sql(&self.admin, &format!("DROP SCHEMA {} CASCADE", self.name)).await
    }
}

pub(crate) async fn run_sql(url: &str, sql: &str) -> anyhow::Result<()> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .context("connecting to --postgres")?;
    let driver = tokio::spawn(connection);
    client.batch_execute(sql).await?;
    drop(client);
    let _ = driver.await;
    Ok(())
}

/// The single-event figures measured again on PostgreSQL: each request its own commit there,
/// unless concurrent requests share one (the store's group commit).
#[derive(Debug, Clone, Copy)]
pub(crate) enum PgSingle {
    /// Single 1 KiB events at 64 clients into a topic one endpoint subscribes to.
    Ingest,
    /// Single events at 64 clients until the sink has every delivery.
    EndToEnd,
    /// The `svix` scenario: Svix's message create beside hookgate's own ingest.
    Svix,
}

impl Bench {
    /// A single-event step on a fresh schema of `admin`, figures prefixed `pg_`.
    pub(crate) async fn postgres_single(&mut self, admin: &str, step: PgSingle) -> anyhow::Result<()> {
        let schema = Schema::create(admin).await?;
        self.postgres = Some(schema.url());
        let result = match step {
            PgSingle::Ingest => self.ingest_subscribed().await,
            PgSingle::EndToEnd => self.end_to_end_single(self.scale.e2e_events).await,
            PgSingle::Svix => self.svix_path().await,
        };
        self.postgres = None;
        schema.drop().await?;
        result
    }

    /// Fan-out to 10 endpoints through the gateways of `nodes` on PostgreSQL (one schema, or
    /// one each when apart), each ingesting an equal share in batches from an equal share of
    /// [`CLIENTS`]: deliveries/s from the first request to the last delivery, and the CPU time
    /// per delivery of the nodes and of a local database server.
    pub(crate) async fn postgres_e2e(
        &mut self,
        admin: &str,
        nodes: Nodes,
        events: u64,
    ) -> anyhow::Result<()> {
        let mut schemas = Vec::new();
        let result = async {
            for _ in 0..nodes.schemas() {
                schemas.push(Schema::create(admin).await?);
            }
            let urls: Vec<String> = schemas.iter().map(Schema::url).collect();
            self.postgres_run(&urls, nodes, events).await
        }
        .await;
        for schema in schemas {
            schema.drop().await?;
        }
        let (rate, cpu_us, db_cpu_us) = result?;
        let (key, label, target) = nodes.figure();
        self.results.record(key, &label, "deliveries/s", rate, target);
        match nodes {
            Nodes::Shared(n) => self.record_ratio(
                "pg_cluster_vs_one_node",
                &format!("PostgreSQL, {n} nodes' rate ÷ 1 node's, same run"),
                (ONE_NODE_KEY, CLUSTER_KEY),
                Target::at_least(1.0),
            ),
            Nodes::Apart(n) => self.record_ratio(
                "pg_cluster_vs_apart",
                &format!("PostgreSQL, {n} nodes' rate in a cluster ÷ apart, same run"),
                (APART_KEY, CLUSTER_KEY),
                None,
            ),
            Nodes::One | Nodes::PerCore(_) => {}
        }
        self.results.record(
            &format!("{key}_cpu"),
            &format!("{label} — gateway CPU per delivery (all nodes)"),
            "µs",
            cpu_us,
            None,
        );
        if let Some(db_cpu_us) = db_cpu_us {
            self.results.record(
                &format!("{key}_db_cpu"),
                &format!("{label} — database server CPU per delivery"),
                "µs",
                db_cpu_us,
                None,
            );
        }
        Ok(())
    }

    /// Records `over ÷ under` of this run, when both figures have one.
    fn record_ratio(&mut self, key: &str, label: &str, (under, over): (&str, &str), target: Option<Target>) {
        if let Some(ratio) = self.results.last_ratio(under, over) {
            self.results.record(key, label, "×", ratio, target);
        }
    }

    /// Deliveries/s, the nodes' CPU per delivery, and the database server's when it runs on
    /// this machine (its `postgres` processes; None when none are seen).
    async fn postgres_run(
        &mut self,
        urls: &[String],
        layout: Nodes,
        events: u64,
    ) -> anyhow::Result<(f64, f64, Option<f64>)> {
        let nodes = layout.count();
        let sink = Sink::start(SinkOptions {
            secret: Some(SECRET.into()),
            ..SinkOptions::loopback()
        })
        .await?;
        let mut body = String::from("topics:\n  orders: {}\nendpoints:\n");
        if let Some(workers) = layout.workers() {
            body.insert_str(0, &format!("server:\n  workers: {workers}\n"));
        }
        for i in 0..ENDPOINTS {
            body.push_str(&format!(
                "  e{i}: {{url: '{}', topics: [orders], secret: {SECRET}}}\n",
                sink.url(&format!("/hook/{i}"))
            ));
        }
        let sites = urls
            .iter()
            .map(|url| {
                Site::without_sqlite(
                    &self.work_root,
                    &format!("storage:\n  url: \"{url}\"\n  encryption_key: {BENCH_STORAGE_KEY}\n{body}"),
                )
            })
            .collect::<anyhow::Result<Vec<Site>>>()?;
        let mut gateways: Vec<GatewayProcess> = Vec::new();
        for n in 0..nodes {
            let site = &sites[n % sites.len()];
            gateways.push(self.start_more(site, &format!("pg-{nodes}-node{n}")).await?);
        }
        // Every node's first turn has run when it is READY; a turn later the endpoints have
        // spread over the nodes.
        tokio::time::sleep(Duration::from_secs(if nodes > sites.len() { 6 } else { 0 })).await;
        let clients: Vec<Client> = (0..nodes).map(|_| Client::new(64)).collect();
        // A batch through each node, so that every node has sent to every endpoint it
        // delivers before the clock starts.
        let mut warmed = 0;
        for (gw, client) in gateways.iter().zip(&clients) {
            let warm = closed_loop(
                client,
                &target(gw, "orders", 200),
                Shape::Batch(BATCH as usize),
                1,
                Stop::Requests(1),
            )
            .await?;
            ensure_no_errors(&warm, "warm-up")?;
            warmed += warm.deliveries;
        }
        wait_until("the warm-up deliveries", Duration::from_secs(60), || {
            sink.answered_ok() >= warmed
        })
        .await?;
        sink.reset();

        let cpu_before: Duration = gateways
            .iter()
            .map(|g| g.cpu_time())
            .sum::<anyhow::Result<Duration>>()?;
        let db_before = cpu_by_process("postgres");
        let started_us = unix_us();
        let per_node = events.div_ceil(BATCH).div_ceil(nodes as u64);
        let loads = gateways.iter().zip(&clients).map(|(gw, client)| {
            let t = target(gw, "orders", 200);
            async move {
                closed_loop(
                    client,
                    &t,
                    Shape::Batch(BATCH as usize),
                    (CLIENTS / nodes).max(1),
                    Stop::Requests(per_node),
                )
                .await
            }
        });
        let mut expected = 0;
        for report in futures_util::future::join_all(loads).await {
            let report = report?;
            ensure_no_errors(&report, "PostgreSQL ingest")?;
            expected += report.deliveries;
        }
        wait_until("every delivery at the sink", Duration::from_secs(900), || {
            sink.answered_ok() >= expected
        })
        .await?;
        let stats = sink.stats();
        let cpu: Duration = gateways
            .iter()
            .map(|g| g.cpu_time())
            .sum::<anyhow::Result<Duration>>()?
            - cpu_before;
        let db_cpu = cpu_since(&db_before, "postgres");
        let mut event_reads = 0.0;
        for gw in &gateways {
            event_reads += self.counter(gw, "hookgate_event_reads_total").await?;
        }
        let mut splits = Vec::new();
        for gw in gateways.iter().take(sites.len()) {
            splits.push(self.lease_split(gw).await?);
        }
        let split = splits.join(" + ");
        let seconds = stats
            .last_request_unix_us
            .unwrap_or_else(unix_us)
            .saturating_sub(started_us) as f64
            / 1e6;
        for gw in gateways {
            gw.stop().await?;
        }
        if stats.signatures_invalid > 0 {
            bail!("the sink saw {} bad signatures", stats.signatures_invalid);
        }
        let rate = expected as f64 / seconds;
        let cpu_us = micros_each(cpu, expected);
        let db_cpu_us = (!db_before.is_empty()).then(|| micros_each(db_cpu, expected));
        self.say(&format!(
            "{layout:?}: {expected} deliveries in {seconds:.2} s = {rate:.0}/s; CPU {cpu_us:.1} µs/delivery, database {db_cpu_us:?}; \
             {event_reads} attempts read their event back; endpoints per node {split}"
        ));
        Ok((rate, cpu_us, db_cpu_us))
    }

    /// How the endpoints are spread over the nodes, most first (`4/3/3`): rendezvous hashing
    /// spreads 10 endpoints unevenly.
    async fn lease_split(&self, gw: &GatewayProcess) -> anyhow::Result<String> {
        let cluster = self.get_json(&format!("{}/v1/cluster", gw.base_url())).await?;
        let mut leases: Vec<u64> = cluster["nodes"]
            .as_array()
            .context("nodes in /v1/cluster")?
            .iter()
            .filter_map(|n| n["leases"].as_u64())
            .collect();
        leases.sort_unstable_by(|a, b| b.cmp(a));
        Ok(leases.iter().map(u64::to_string).collect::<Vec<_>>().join("/"))
    }
}
