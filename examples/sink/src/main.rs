//! `hookgate-sink`: a fast local webhook receiver. See the library docs for what it does.
//!
//! ```text
//! hookgate-sink --listen 127.0.0.1:9000 [--secret whsec_…] [--fail-fraction 0.1 --fail-status 503]
//! hookgate-sink --print              # also print every request's method, path, headers and body
//! curl -s 127.0.0.1:9000/stats
//! curl -s 127.0.0.1:9000/ids         # the webhook-ids answered with a 2xx, one per line
//! ```

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use hookgate_sink::{Sink, SinkOptions};

#[derive(Debug, Parser)]
#[command(
    name = "hookgate-sink",
    version,
    about = "A fast local webhook receiver for load tests"
)]
struct Args {
    /// Address to listen on (loopback unless you know why not).
    #[arg(long, default_value = "127.0.0.1:9000")]
    listen: SocketAddr,
    /// Verify Standard Webhooks signatures with this secret; failures are answered 400.
    #[arg(long, env = "HOOKGATE_SINK_SECRET")]
    secret: Option<String>,
    /// Share of requests answered with --fail-status instead of 200 (flaky mode), 0…1.
    #[arg(long, default_value_t = 0.0)]
    fail_fraction: f64,
    #[arg(long, default_value_t = 503)]
    fail_status: u16,
    /// Do not print the rate every second.
    #[arg(long)]
    quiet: bool,
    /// Print every request to standard output: method, path, headers and body, then `---`.
    #[arg(long)]
    print: bool,
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
    runtime.block_on(async move {
        let sink = match Sink::start(SinkOptions {
            listen: args.listen,
            fail_fraction: args.fail_fraction,
            fail_status: args.fail_status,
            secret: args.secret,
            print: args.print,
        })
        .await
        {
            Ok(sink) => sink,
            Err(e) => {
                eprintln!("{e}");
                return ExitCode::FAILURE;
            }
        };
        eprintln!(
            "hookgate-sink listening on http://{} (stats: GET /stats, delivered ids: GET /ids)",
            sink.addr()
        );
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = 0u64;
        loop {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => break,
                _ = tick.tick() => {
                    if args.quiet {
                        continue;
                    }
                    let s = sink.stats();
                    if s.requests != last {
                        eprintln!(
                            "{:>8} req/s | total {} (ok {}, error {}) | distinct ids {} | signatures bad {}",
                            s.requests.saturating_sub(last), s.requests, s.answered_ok, s.answered_error,
                            s.distinct_ids, s.signatures_invalid
                        );
                        last = s.requests;
                    }
                }
            }
        }
        let s = sink.stats();
        eprintln!("stopping: {}", serde_json::to_string(&s).unwrap_or_default());
        sink.shutdown().await;
        ExitCode::SUCCESS
    })
}
