//! The `hookgate` command line (README "Command line"): `serve`, `config check|schema`, `policy
//! preview`, `plugin check`, and the operator commands that talk to a running gateway's API.

mod migrate;
mod ops;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;

use crate::clock::{Clock, ScaledClock, SystemClock};
use crate::config::{self, Config};
use crate::supervisor::{Gateway, GatewayOptions};

#[derive(Debug, Parser)]
#[command(
    name = "hookgate",
    version,
    about = "A webhook delivery gateway",
    propagate_version = true
)]
pub struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Log format on stderr.
    #[arg(long, global = true, value_enum, default_value_t = LogFormat::Human, env = "HOOKGATE_LOG_FORMAT")]
    log_format: LogFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum, PartialEq, Eq)]
enum LogFormat {
    Human,
    Json,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the gateway. Without --config: the embedded default (loopback, ./data/hookgate.db).
    Serve {
        #[arg(long)]
        config: Option<PathBuf>,
        /// Run the clock this many times faster (3600: one real second is one simulated hour).
        /// For trying out schedules and for tests; every time the API shows is simulated.
        #[arg(long, value_parser = parse_time_scale)]
        time_scale: Option<f64>,
        /// Do not watch the config file; reload only on SIGHUP.
        #[arg(long)]
        no_watch: bool,
    },
    /// Check or describe config files.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Show what a retry policy will do.
    Policy {
        #[command(subcommand)]
        command: PolicyCommand,
    },
    /// Inspect WebAssembly plugins.
    Plugin {
        #[command(subcommand)]
        command: PluginCommand,
    },
    #[command(flatten)]
    Ops(ops::OpsCommand),
    /// Copy a stopped gateway's SQLite store into an empty PostgreSQL database (ids kept),
    /// to move it onto `storage.url`.
    Migrate {
        /// The SQLite file (`storage.path`).
        #[arg(long)]
        from: PathBuf,
        /// The PostgreSQL URL; from the environment if not given, so that no password lands
        /// in the shell history.
        #[arg(long, env = "HOOKGATE_MIGRATE_TO", hide_env_values = true)]
        to: String,
    },
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate a config file: exit 0, or print `file:line: path: reason` lines and exit 1.
    Check { file: PathBuf },
    /// Print the JSON Schema of the config file (for editor completion and checking).
    Schema,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Print a policy's planned attempts (without jitter, deadline applied).
    Preview {
        name: String,
        #[arg(long)]
        config: Option<PathBuf>,
        /// Also draw the waits as an SVG chart into this file.
        #[arg(long)]
        svg: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum PluginCommand {
    /// Compile and validate a plugin, print its world, imports, size and compile time, and run
    /// it once on a sample input.
    Check { file: PathBuf },
}

fn parse_time_scale(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        _ => Err(format!("`{s}` is not a positive number")),
    }
}

fn init_logging(format: LogFormat) {
    let filter = EnvFilter::try_from_env("HOOKGATE_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// The `hookgate` binary's entry point.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.log_format);
    match cli.command {
        Command::Serve {
            config,
            time_scale,
            no_watch,
        } => serve(config.as_deref(), time_scale, !no_watch),
        Command::Config {
            command: ConfigCommand::Check { file },
        } => match config::load_file(&file) {
            Ok(c) => {
                println!(
                    "{}: ok ({} topics, {} endpoints, {} policies)",
                    file.display(),
                    c.topics.len(),
                    c.endpoints.len(),
                    c.policies.len()
                );
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::Config {
            command: ConfigCommand::Schema,
        } => {
            println!(
                "{}",
                serde_json::to_string_pretty(&config::json_schema()).expect("serializes")
            );
            ExitCode::SUCCESS
        }
        Command::Policy {
            command: PolicyCommand::Preview { name, config, svg },
        } => preview(&name, config.as_deref(), svg.as_deref()),
        Command::Plugin {
            command: PluginCommand::Check { file },
        } => match crate::plugins::check_file(&file, &crate::plugins::PluginLimits::default()) {
            Ok(report) => {
                println!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e:#}", file.display());
                ExitCode::FAILURE
            }
        },
        Command::Ops(command) => ops::run(command),
        Command::Migrate { from, to } => migrate::run(&from, &to),
    }
}

fn load_config(path: Option<&Path>) -> Result<Config, ExitCode> {
    match path {
        None => Ok(Config::embedded_default()),
        Some(p) => config::load_file(p).map_err(|e| {
            eprintln!("{e}");
            ExitCode::FAILURE
        }),
    }
}

fn preview(name: &str, config: Option<&Path>, svg: Option<&Path>) -> ExitCode {
    let config = match load_config(config) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(policy) = config.policies.get(name) else {
        let known: Vec<&str> = config.policies.keys().map(String::as_str).collect();
        eprintln!("no policy `{name}` (known: {})", known.join(", "));
        return ExitCode::FAILURE;
    };
    print!("{}", crate::policy::render_preview_table(policy));
    if let Some(path) = svg {
        if let Err(e) = std::fs::write(path, crate::charts::render_preview_svg(policy)) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        println!("chart written to {}", path.display());
    }
    ExitCode::SUCCESS
}

fn serve(config_path: Option<&Path>, time_scale: Option<f64>, watch_config: bool) -> ExitCode {
    let config = match load_config(config_path) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if config_path.is_none() {
        tracing::info!("no --config: running on the embedded default (loopback, ./data/hookgate.db)");
    }
    let clock: Arc<dyn Clock> = match time_scale {
        Some(f) => {
            tracing::info!(factor = f, "simulated time: the clock runs {f}x faster");
            Arc::new(ScaledClock::new(f))
        }
        None => Arc::new(SystemClock),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let mut options = GatewayOptions::new(config, clock);
        options.watch_config = watch_config;
        let gateway = match Gateway::start(options).await {
            Ok(g) => g,
            Err(e) => {
                eprintln!("hookgate could not start: {e:#}");
                return ExitCode::FAILURE;
            }
        };
        wait_for_stop_signal(&gateway).await;
        gateway.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// Returns on SIGTERM or SIGINT; reloads the config on SIGHUP.
async fn wait_for_stop_signal(gateway: &Gateway) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int), Ok(mut hup)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
        signal(SignalKind::hangup()),
    ) else {
        tracing::error!("cannot install signal handlers; stop with Ctrl-C");
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    let reloader = gateway.reloader();
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = hup.recv() => {
                tracing::info!("SIGHUP: reloading the config");
                reloader.reload_from_file();
            }
        }
    }
}
