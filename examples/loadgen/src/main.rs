//! `hookgate-loadgen`: drives a running gateway and prints events/s and latency percentiles;
//! with `--sink-stats`, also end-to-end deliveries/s.
//!
//! ```text
//! hookgate-loadgen --gateway http://127.0.0.1:8080 --topic orders --concurrency 64 --duration 10s
//! hookgate-loadgen --topic orders --batch 100 --concurrency 4 --count 1000 \
//!     --sink-stats http://127.0.0.1:9000/stats
//! hookgate-loadgen --topic orders --rate 2000 --duration 10s --accepted-ids accepted.txt
//! ```

use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use hookgate_loadgen::{
    Api, Client, Shape, Stop, Target, closed_loop, open_loop, sink_stats, unix_us, wait_for_sink,
};

#[derive(Debug, Parser)]
#[command(
    name = "hookgate-loadgen",
    version,
    about = "Drives a running hookgate and measures it"
)]
struct Args {
    /// The gateway's base URL.
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    gateway: String,
    /// The topic of hookgate's own API the events go to.
    #[arg(long, required_unless_present = "svix_app")]
    topic: Option<String>,
    /// Send Svix messages to this application (`POST /api/v1/app/{app}/msg`) instead. Svix's
    /// answer names no deliveries: `--sink-stats` then waits for one delivery per message.
    #[arg(long, conflicts_with_all = ["topic", "batch"])]
    svix_app: Option<String>,
    #[arg(long, env = "HOOKGATE_API_KEY")]
    api_key: Option<String>,
    #[arg(long, default_value = "bench.event")]
    event_type: String,
    /// Approximate size of each event's JSON.
    #[arg(long, default_value_t = 200)]
    payload_bytes: usize,
    /// Send batches of this many events instead of single events.
    #[arg(long)]
    batch: Option<usize>,
    /// Requests in flight at once (closed loop).
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Offered request rate per second (open loop) instead of a closed loop.
    #[arg(long)]
    rate: Option<f64>,
    /// How long to send.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "10s")]
    duration: Duration,
    /// Send exactly this many requests instead (closed loop).
    #[arg(long, conflicts_with = "rate")]
    count: Option<u64>,
    /// A hookgate-sink's `/stats` URL: also wait until it received every delivery and print
    /// end-to-end deliveries/s.
    #[arg(long)]
    sink_stats: Option<String>,
    /// How long to wait for the sink.
    #[arg(long, value_parser = humantime::parse_duration, default_value = "300s")]
    sink_timeout: Duration,
    /// Write the id of every accepted event to this file, one per line.
    #[arg(long)]
    accepted_ids: Option<std::path::PathBuf>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(run(args))
}

async fn run(args: Args) -> ExitCode {
    let target = Target {
        base_url: args.gateway.clone(),
        topic: args.topic.clone().unwrap_or_default(),
        api: args.svix_app.clone().map_or(Api::Native, |app| Api::Svix { app }),
        api_key: args.api_key.clone(),
        event_type: args.event_type.clone(),
        payload_bytes: args.payload_bytes,
        record_ids: args.accepted_ids.is_some(),
    };
    let shape = args.batch.map_or(Shape::Single, Shape::Batch);
    let client = Client::new(args.concurrency.max(64));
    let sink_before = match &args.sink_stats {
        Some(url) => match sink_stats(&client, url).await {
            Ok(s) => Some(s),
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        },
        None => None,
    };
    let started_us = unix_us();
    let report = match args.rate {
        Some(rate) => open_loop(&client, &target, shape, rate, args.duration, 4096).await,
        None => {
            let stop = args.count.map_or(Stop::After(args.duration), Stop::Requests);
            closed_loop(&client, &target, shape, args.concurrency, stop).await
        }
    };
    let report = match report {
        Ok(r) => r,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    println!("{}", report.summary());
    if let Some(path) = &args.accepted_ids {
        let mut text = report.accepted_ids.join("\n");
        if !text.is_empty() {
            text.push('\n');
        }
        if let Err(e) = std::fs::write(path, text) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
    }
    if let (Some(url), Some(before)) = (&args.sink_stats, sink_before) {
        let deliveries = match target.api {
            Api::Svix { .. } => report.events_accepted,
            _ => report.deliveries,
        };
        let expected = before.answered_ok + deliveries;
        match wait_for_sink(&client, url, expected, args.sink_timeout).await {
            Ok(after) => {
                let end_us = after.last_request_unix_us.unwrap_or_else(unix_us);
                let secs = end_us.saturating_sub(started_us) as f64 / 1e6;
                println!(
                    "end to end: {} deliveries in {:.2} s: {:.0} deliveries/s (signatures bad: {})",
                    deliveries,
                    secs,
                    deliveries as f64 / secs.max(1e-9),
                    after.signatures_invalid - before.signatures_invalid
                );
            }
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        }
    }
    if report.errors > 0 {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}
