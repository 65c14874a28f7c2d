//! `hookgate-bench`: one command that reproduces every performance figure of hookgate.
//!
//! ```text
//! cargo run --release -p hookgate-bench -- [--runs 3] [--quick] [--json FILE] [--charts DIR]
//!                                           [--only ingest,filters,e2e,latency,lateness,backlog,customers,ordering,plugins,svix,js,postgres,brokers]
//!                                           [--postgres postgres://…]
//!                                           [--nats URL --amqp URL --redis URL --mqtt URL]
//! cargo run --release -p hookgate-bench -- --only faults [--freeze-runs 20] [--random-minutes 10]
//! ```
//!
//! Each scenario starts a gateway in its own process (this executable with the hidden
//! `__gateway` subcommand) on a temp dir, with a `hookgate-sink` in this process as the
//! receiver and `hookgate-loadgen` as the client, and every figure is the median of `--runs`
//! runs. Everything listens on 127.0.0.1 only.

mod brokers;
mod child;
mod cluster;
mod customers;
mod faults;
mod floor;
mod ordering;
mod prom;
mod report;
mod scenarios;
mod svg;
mod svix;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use hookgate_loadgen::{Client, Shape};

use crate::cluster::{Nodes, PgSingle};
use crate::report::Results;

/// The gateway binary's allocator, for the gateways this executable runs (`__gateway`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;
use crate::scenarios::{Bench, Scale};

#[derive(Debug, Parser)]
#[command(
    name = "hookgate-bench",
    version,
    about = "Reproduces hookgate's performance figures"
)]
struct Args {
    #[command(subcommand)]
    command: Option<Hidden>,
    /// Runs per figure; the table shows the median.
    #[arg(long, default_value_t = 3)]
    runs: usize,
    /// A tenth of every size, one second per timed phase: a smoke run.
    #[arg(long)]
    quick: bool,
    /// Only these scenarios (comma-separated): ingest, filters, e2e, latency, lateness,
    /// backlog, customers, ordering, plugins, svix, js, postgres, brokers, and faults (the
    /// cluster's fault runs, only when named).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
    /// Also write the results as JSON here.
    #[arg(long)]
    json: Option<PathBuf>,
    /// Also draw `bench-throughput.svg` and `bench-latency.svg` into this folder.
    #[arg(long)]
    charts: Option<PathBuf>,
    /// Where the gateways' temp dirs go (their SQLite files are fsync'd there: use a real disk).
    #[arg(long)]
    work_dir: Option<PathBuf>,
    /// A PostgreSQL database for the `postgres` scenario (a schema per run is created and
    /// dropped), e.g. postgres://postgres@127.0.0.1/test. Default: `HOOKGATE_BENCH_POSTGRES`.
    #[arg(long, env = "HOOKGATE_BENCH_POSTGRES")]
    postgres: Option<String>,
    /// The `brokers` scenario's NATS server (with JetStream), e.g. nats://127.0.0.1:4222.
    #[arg(long, env = "HOOKGATE_BENCH_NATS")]
    nats: Option<String>,
    /// Its RabbitMQ, e.g. amqp://guest:guest@127.0.0.1:5672.
    #[arg(long, env = "HOOKGATE_BENCH_AMQP")]
    amqp: Option<String>,
    /// Its Redis, e.g. redis://127.0.0.1:6379.
    #[arg(long, env = "HOOKGATE_BENCH_REDIS")]
    redis: Option<String>,
    /// Its MQTT 5 broker, e.g. mqtt://127.0.0.1:1883.
    #[arg(long, env = "HOOKGATE_BENCH_MQTT")]
    mqtt: Option<String>,
    /// Where the bundled plugins were built.
    #[arg(long)]
    plugin_build: Option<PathBuf>,
    /// Print each run's details on stderr.
    #[arg(long, short)]
    verbose: bool,
    /// `faults`: how many times the freeze of a node runs (each about half a minute).
    #[arg(long, default_value_t = 20)]
    freeze_runs: usize,
    /// `faults`: how long the randomized run of kills, freezes, cuts, delays and database
    /// restarts lasts.
    #[arg(long, default_value_t = 10.0)]
    random_minutes: f64,
    /// `faults`: the randomized run's seed (printed by every run; default: a new one).
    #[arg(long)]
    seed: Option<u64>,
    /// Measure nothing: print the table of an earlier `--json` file and, with `--charts`,
    /// draw its charts again.
    #[arg(long, value_name = "JSON")]
    redraw: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
enum Hidden {
    /// Runs a gateway on CONFIG until SIGTERM (the harness starts itself this way).
    #[command(name = "__gateway", hide = true)]
    Gateway { config: PathBuf },
    /// Runs the `hookgate` command line with these arguments (the fault runs' nodes).
    #[command(name = "__hookgate", hide = true)]
    Hookgate {
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
}

const SCENARIOS: &[&str] = &[
    "ingest",
    "filters",
    "e2e",
    "latency",
    "lateness",
    "backlog",
    "customers",
    "ordering",
    "plugins",
    "svix",
    "js",
    "postgres",
    "brokers",
    "faults",
];

fn main() -> ExitCode {
    let args = Args::parse();
    match &args.command {
        Some(Hidden::Gateway { config }) => return child::serve(config),
        Some(Hidden::Hookgate { args }) => {
            return hookgate::cli::main_from(
                std::iter::once("hookgate".to_owned()).chain(args.iter().cloned()),
            );
        }
        None => {}
    }
    if let Some(unknown) = args.only.iter().find(|s| !SCENARIOS.contains(&s.as_str())) {
        eprintln!("unknown scenario `{unknown}` (known: {})", SCENARIOS.join(", "));
        return ExitCode::FAILURE;
    }
    if let Some(json) = &args.redraw {
        return redraw(json, args.charts.as_deref());
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(args))
}

/// `2 × Intel(R) Xeon(R) Processor, 23.4 GiB, ext4`: what the figures were measured on.
fn machine() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name"))
        .and_then(|l| l.split_once(':'))
        .map_or("unknown CPU", |(_, m)| m.trim())
        .to_owned();
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let mem_kib: u64 = std::fs::read_to_string("/proc/meminfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|l| l.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    format!(
        "{cores} cores ({model}), {:.1} GiB RAM",
        mem_kib as f64 / 1024.0 / 1024.0
    )
}

/// The 1-minute load average: runnable threads, averaged; above the core count, the gateway
/// waited for CPU behind other work.
pub(crate) fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

async fn run(args: Args) -> ExitCode {
    // Correctness counts, not figures, and half an hour: only when asked for by name.
    if args.only.iter().any(|s| s == "faults") {
        let counted = faults::run(faults::FaultArgs {
            freeze_runs: args.freeze_runs,
            random_minutes: args.random_minutes,
            seed: args.seed,
        })
        .await;
        if args.only.len() == 1 {
            return counted;
        }
    }
    let args = Args {
        only: args.only.into_iter().filter(|s| s != "faults").collect(),
        ..args
    };
    let wanted = |name: &str| args.only.is_empty() || args.only.iter().any(|s| s == name);
    let workspace = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut bench = Bench {
        client: Client::new(256),
        scale: if args.quick { Scale::quick() } else { Scale::full() },
        work_root: args
            .work_dir
            .clone()
            .unwrap_or_else(|| workspace.join("target/bench-work")),
        plugin_build: args
            .plugin_build
            .clone()
            .unwrap_or_else(|| workspace.join("plugins/target/wasm32-wasip2/release")),
        results: Results::default(),
        verbose: args.verbose,
        floor: None,
        postgres: None,
    };
    let machine = machine();
    eprintln!("hookgate-bench on {machine}; {} run(s) per figure", args.runs);
    let brokers = match (&args.nats, &args.amqp, &args.redis, &args.mqtt) {
        (Some(nats), Some(amqp), Some(redis), Some(mqtt)) => Some(brokers::Brokers {
            nats: nats.clone(),
            amqp: amqp.clone(),
            redis: redis.clone(),
            mqtt: mqtt.clone(),
        }),
        _ => None,
    };

    let runs = args.runs.max(1);
    // Other work on the machine skews every figure; the load before each step goes on record.
    let mut loads: Vec<f64> = Vec::new();
    for run in 1..=runs {
        let mut steps: Vec<(&str, String)> = Vec::new();
        // Each run measures its own floor first: throughputs are shares of it.
        bench.floor = None;
        if ["ingest", "e2e"].iter().any(|s| wanted(s)) {
            steps.push(("floor", "loopback floor".into()));
        }
        if wanted("ingest") {
            steps.push(("ingest", "ingest single c=64, 1 subscriber, 1 KiB".into()));
            for c in [1, 16, 64] {
                steps.push(("ingest", format!("ingest single c={c}")));
            }
            steps.push(("ingest", "ingest batch".into()));
        }
        for (name, label) in [
            ("filters", "ingest, 10 endpoints without filters"),
            ("filters", "ingest, 10 endpoints with filters"),
            ("e2e", "end to end, 1 endpoint"),
            ("e2e", "end to end, single events"),
            ("e2e", "end to end, fan-out 10"),
            ("latency", "latency at a fixed rate"),
            ("lateness", "scheduler lateness"),
            ("backlog", "backlog memory and restart"),
            ("customers", "endpoints at customer scale"),
            ("ordering", "ordering keys at 1M waiting"),
            ("ordering", "PostgreSQL, ordering keys at 1M waiting"),
            ("plugins", "plugin overhead"),
            ("svix", "the Svix API beside hookgate's own"),
            ("js", "JavaScript transform beside cloudevents"),
            ("postgres", "PostgreSQL, ingest single c=64, 1 subscriber"),
            ("postgres", "PostgreSQL, end to end, single events"),
            ("postgres", "PostgreSQL, the Svix API beside hookgate's own"),
            ("postgres", "PostgreSQL, 1 node"),
            ("postgres", "PostgreSQL, 3 nodes"),
            ("postgres", "PostgreSQL, 3 nodes apart"),
            ("postgres", "PostgreSQL, 3 nodes, a thread per core each"),
            ("brokers", "end to end to each destination"),
        ] {
            // PostgreSQL and the brokers only when there are some; asked for by name without
            // them, the step fails.
            let possible = match name {
                "postgres" => args.postgres.is_some() || !args.only.is_empty(),
                "ordering" if label.starts_with("PostgreSQL") => args.postgres.is_some(),
                "brokers" => brokers.is_some() || !args.only.is_empty(),
                _ => true,
            };
            if wanted(name) && possible {
                steps.push((name, label.into()));
            }
        }
        for (name, label) in steps {
            let load = load_average();
            loads.push(load);
            eprintln!("[run {run}/{runs}] {label} (load average {load:.2})");
            let outcome = match label.as_str() {
                "loopback floor" => bench.floor().await,
                "ingest single c=64, 1 subscriber, 1 KiB" => bench.ingest_subscribed().await,
                "end to end, single events" => bench.end_to_end_single(bench.scale.e2e_events).await,
                "ingest single c=1" => bench.ingest(Shape::Single, 1).await,
                "ingest single c=16" => bench.ingest(Shape::Single, 16).await,
                "ingest single c=64" => bench.ingest(Shape::Single, 64).await,
                "ingest batch" => bench.ingest(Shape::Batch(100), 4).await,
                "ingest, 10 endpoints without filters" => bench.ingest_filtered(false).await,
                "ingest, 10 endpoints with filters" => bench.ingest_filtered(true).await,
                "end to end, 1 endpoint" => bench.end_to_end(1, bench.scale.e2e_events).await,
                "end to end, fan-out 10" => bench.end_to_end(10, bench.scale.fanout_events).await,
                "latency at a fixed rate" => bench.latency_at_rate().await,
                "scheduler lateness" => bench.lateness().await,
                "backlog memory and restart" => bench.backlog().await,
                "endpoints at customer scale" => bench.customers(args.postgres.as_deref()).await,
                "ordering keys at 1M waiting" => bench.ordering_keys(None).await,
                "PostgreSQL, ordering keys at 1M waiting" => {
                    bench.ordering_keys(args.postgres.as_deref()).await
                }
                "plugin overhead" => bench.plugins().await,
                "the Svix API beside hookgate's own" => bench.svix_path().await,
                "JavaScript transform beside cloudevents" => bench.js_transform().await,
                "end to end to each destination" => match &brokers {
                    Some(brokers) => bench.destinations(brokers).await,
                    None => Err(anyhow::anyhow!(
                        "needs --nats, --amqp, --redis and --mqtt (or HOOKGATE_BENCH_NATS, …)"
                    )),
                },
                pg => match &args.postgres {
                    Some(url) if pg.starts_with("PostgreSQL, ingest single") => {
                        bench.postgres_single(url, PgSingle::Ingest).await
                    }
                    Some(url) if pg.starts_with("PostgreSQL, end to end, single") => {
                        bench.postgres_single(url, PgSingle::EndToEnd).await
                    }
                    Some(url) if pg.starts_with("PostgreSQL, the Svix API") => {
                        bench.postgres_single(url, PgSingle::Svix).await
                    }
                    Some(url) => {
                        let layout = match pg {
                            "PostgreSQL, 1 node" => Nodes::One,
                            "PostgreSQL, 3 nodes" => Nodes::Shared(3),
                            "PostgreSQL, 3 nodes apart" => Nodes::Apart(3),
                            _ => Nodes::PerCore(3),
                        };
                        bench
                            .postgres_e2e(url, layout, bench.scale.fanout_events * 2)
                            .await
                    }
                    None => Err(anyhow::anyhow!(
                        "needs --postgres URL (or HOOKGATE_BENCH_POSTGRES)"
                    )),
                },
            };
            if let Err(e) = outcome {
                let why = format!("{name} ({label}): {e:#}");
                eprintln!("  failed: {why}");
                if !bench.results.skipped.contains(&why) {
                    bench.results.skipped.push(why);
                }
            }
        }
    }

    print!("\n{}", bench.results.table());
    println!(
        "load average before the steps: min {:.2}, median {:.2}, max {:.2} ({} cores)",
        loads.iter().copied().fold(f64::INFINITY, f64::min),
        report::median(&loads),
        loads.iter().copied().fold(0.0, f64::max),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    let mut ok = true;
    if let Some(path) = &args.json {
        let doc = serde_json::json!({
            "machine": machine,
            "runs": runs,
            "quick": args.quick,
            "figures": bench.results.figures,
            "skipped": bench.results.skipped,
            "load_average_before_each_step": loads,
        });
        match std::fs::write(path, serde_json::to_string_pretty(&doc).expect("serializes")) {
            Ok(()) => eprintln!("results written to {}", path.display()),
            Err(e) => {
                eprintln!("cannot write {}: {e}", path.display());
                ok = false;
            }
        }
    }
    if let Some(dir) = &args.charts {
        ok &= write_charts(dir, &bench.results, &machine);
    }
    if ok && bench.results.skipped.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn write_charts(dir: &Path, results: &Results, machine: &str) -> bool {
    let written = std::fs::create_dir_all(dir)
        .and_then(|()| {
            std::fs::write(
                dir.join("bench-throughput.svg"),
                svg::throughput_chart(results, machine),
            )
        })
        .and_then(|()| {
            std::fs::write(
                dir.join("bench-latency.svg"),
                svg::latency_chart(results, machine),
            )
        })
        .and_then(|()| {
            std::fs::write(
                dir.join("bench-floor-share.svg"),
                svg::floor_share_chart(results, machine),
            )
        })
        .and_then(|()| match svg::cluster_chart(results, machine) {
            Some(chart) => std::fs::write(dir.join("bench-cluster.svg"), chart),
            None => Ok(()),
        });
    match written {
        Ok(()) => {
            eprintln!("charts written to {}", dir.display());
            true
        }
        Err(e) => {
            eprintln!("cannot write the charts: {e}");
            false
        }
    }
}

/// `--redraw`: the table and charts of a results file written by `--json`.
fn redraw(json: &Path, charts: Option<&Path>) -> ExitCode {
    #[derive(serde::Deserialize)]
    struct Saved {
        machine: String,
        figures: Vec<report::Figure>,
        #[serde(default)]
        skipped: Vec<String>,
    }
    let saved: Saved = match std::fs::read(json)
        .map_err(|e| e.to_string())
        .and_then(|bytes| serde_json::from_slice(&bytes).map_err(|e| e.to_string()))
    {
        Ok(saved) => saved,
        Err(e) => {
            eprintln!("cannot read {}: {e}", json.display());
            return ExitCode::FAILURE;
        }
    };
    let results = Results {
        figures: saved.figures,
        skipped: saved.skipped,
    };
    println!("{}", results.table());
    match charts {
        Some(dir) if !write_charts(dir, &results, &saved.machine) => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    }
}
