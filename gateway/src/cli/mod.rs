//! The `hookgate` command line (README "Command line"): `serve`, `config check|schema`, `policy
//! preview`, `plugin check|new`, and the operator commands that talk to a running gateway's API.

mod client;
mod import;

/// `println!` for a command's output: when the reader has gone (`hookgate deliveries | head`),
/// the command ends quietly instead of panicking on the broken pipe.
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            $crate::cli::stdout_failed(&e)
        }
    }};
}

mod migrate;
mod new_plugin;
mod ops;
mod storage;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, Parser, Subcommand, ValueEnum};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::filter::LevelFilter;

use crate::clock::{Clock, ScaledClock, SystemClock};
use crate::config::{self, Config};
use crate::supervisor::{Gateway, GatewayOptions};

/// The version and the commit the binary was built from (`hookgate --version`).
pub const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("HOOKGATE_COMMIT"),
    ")"
);

#[derive(Debug, Parser)]
#[command(
    name = "hookgate",
    version = VERSION,
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
        /// The config file (YAML; `hookgate config check FILE` validates it). Without it: the
        /// embedded default, on 127.0.0.1:8080 with ./data/hookgate.db and one topic,
        /// `default`.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// Run the clock this many times faster (3600: one real second is one simulated hour).
        /// For trying out schedules and for tests; every time the API shows is simulated.
        #[arg(long, value_parser = parse_time_scale)]
        time_scale: Option<f64>,
        /// Do not watch the config file; reload only on SIGHUP.
        #[arg(long)]
        no_watch: bool,
        /// Listen on ADDR (ip:port) instead of the file's `server.listen` or the embedded
        /// default's 127.0.0.1:8080; a reload keeps it. Without API keys it must be a loopback
        /// address.
        #[arg(long, value_name = "ADDR", env = "HOOKGATE_LISTEN")]
        listen: Option<std::net::SocketAddr>,
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
    /// Check plugins, or start a new one.
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
    /// Copy a running gateway's SQLite store to PATH: a consistent copy (the database as of one
    /// commit), made while it ingests. The copy's secrets stay encrypted: it is usable only
    /// with the store's key (README "Operations").
    Backup {
        /// The gateway's config file (for `storage.path`).
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
        /// The file to write (it must not exist).
        #[arg(long, value_name = "PATH")]
        to: PathBuf,
    },
    /// Commands on the store's encryption.
    Storage {
        #[command(subcommand)]
        command: StorageCommand,
    },
    /// Copy another webhook service's setup into a running hookgate.
    Import {
        #[command(subcommand)]
        source: ImportSource,
    },
    /// Make a key: `hookgate keygen ed25519` prints a `whsk_` private key (the endpoint's
    /// `secret` with `signature: ed25519`) and its `whpk_` public key (for the receiver);
    /// `hookgate keygen storage` a storage encryption key (`storage.encryption_key`).
    Keygen {
        /// The kind of key pair.
        #[arg(value_enum)]
        scheme: KeyScheme,
    },
    /// Print a shell completion script: `hookgate completions bash > /etc/bash_completion.d/hookgate`.
    Completions {
        /// The shell to complete for.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff): `hookgate man > hookgate.1`, or with --dir one page per
    /// command (`hookgate-serve.1`, …) written into that folder.
    Man {
        /// Write one page per command into this folder instead of printing one page.
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
enum ImportSource {
    /// From a Svix server (its cloud or self-hosted), through its API: event types,
    /// applications, endpoints with their secrets (receivers keep verifying) and endpoint
    /// headers. Idempotent: run it again to copy what changed.
    Svix(import::ImportSvix),
}

#[derive(Debug, Subcommand)]
enum StorageCommand {
    /// Encrypt every secret the store keeps again under `storage.encryption_key`, those under
    /// `storage.previous_encryption_keys` included; afterwards the previous keys can go. Safe
    /// while the gateway runs (give it the new key, the old one as previous, first).
    Rekey {
        /// The gateway's config file.
        #[arg(long, value_name = "FILE")]
        config: Option<PathBuf>,
    },
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum KeyScheme {
    Ed25519,
    /// A storage encryption key (`storage.encryption_key`): base64 of 32 random bytes.
    Storage,
}

#[derive(Debug, Subcommand)]
enum ConfigCommand {
    /// Validate a config file: exit 0, or print `file:line: path: reason` lines and exit 1.
    Check {
        /// The config file.
        file: PathBuf,
    },
    /// Print the JSON Schema of the config file (for editor completion and checking).
    Schema,
}

#[derive(Debug, Subcommand)]
enum PolicyCommand {
    /// Print a policy's planned attempts (without jitter, deadline applied).
    Preview {
        /// The policy: a preset (`standard`, `sns-http-default`…) or one of the config file's.
        name: String,
        /// The config file whose policies to look in; without it, the presets only.
        #[arg(long, value_name = "FILE")]
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
    Check {
        /// The plugin: a `.wasm` WebAssembly component, or a `.js` transformation for the
        /// `js` plugin (the bundled one, or `js.wasm` beside the file).
        file: PathBuf,
        /// A config entry for the sample call, as a binding's `config` would give it
        /// (`--config team=payments`); repeat for more. Lists and maps as JSON text.
        #[arg(long = "config", value_name = "KEY=VALUE", value_parser = parse_config_entry)]
        config: Vec<(String, String)>,
    },
    /// Write a new plugin project into folder NAME: a Rust crate on the plugin kit, a Python
    /// app for componentize-py, or a JavaScript transformation; it builds and passes `plugin
    /// check` as written.
    New {
        /// The plugin's name (lower-case letters, digits and `-`).
        name: String,
        /// What the plugin does: a transform, a signer or a backoff.
        #[arg(long, value_enum)]
        kind: new_plugin::Kind,
        /// The language to write it in (Python and JavaScript: transforms only).
        #[arg(long, value_enum, default_value = "rust")]
        lang: new_plugin::Lang,
        /// Where to create the folder NAME.
        #[arg(long, default_value = ".")]
        dir: PathBuf,
    },
}

/// Runs a one-off command's future on a runtime of its own, of one thread: a command waits on
/// one thing at a time. None when no runtime can start, which is said on stderr.
fn block_on<F: Future>(future: F) -> Option<F::Output> {
    match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(runtime) => Some(runtime.block_on(future)),
        Err(e) => {
            eprintln!("error: cannot start a runtime: {e}");
            None
        }
    }
}

/// A command-line value that clap's own parsers do not check; clap prints it with the flag.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum ArgError {
    #[error("`{0}` is not KEY=VALUE")]
    NotKeyValue(String),
    #[error("`{0}` is not a positive number")]
    NotPositive(String),
}

fn parse_config_entry(s: &str) -> Result<(String, String), ArgError> {
    match s.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => Ok((key.trim().to_owned(), value.to_owned())),
        _ => Err(ArgError::NotKeyValue(s.to_owned())),
    }
}

fn parse_time_scale(s: &str) -> Result<f64, ArgError> {
    match s.parse::<f64>() {
        Ok(f) if f.is_finite() && f > 0.0 => Ok(f),
        _ => Err(ArgError::NotPositive(s.to_owned())),
    }
}

/// The log directives for a `HOOKGATE_LOG` (or `RUST_LOG`) value. A bare level (`debug`)
/// is for hookgate's own modules; other crates (wasmtime, cranelift, hyper) stay at `warn`,
/// or quieter if the level is: their debug output is hundreds of thousands of lines per
/// plugin compiled. Anything else (`hookgate::scheduler=trace,wasmtime=debug`) is taken as
/// written. Unset or empty: `info` for hookgate.
fn log_directives(spec: Option<&str>) -> String {
    let spec = spec.map(str::trim).filter(|s| !s.is_empty()).unwrap_or("info");
    match spec.parse::<LevelFilter>() {
        Ok(level) => format!("hookgate={level},{}", level.min(LevelFilter::WARN)),
        Err(_) => spec.to_owned(),
    }
}

/// The filter of the log on stderr, from `HOOKGATE_LOG`, else `RUST_LOG`.
fn log_filter(spec: Option<&str>) -> EnvFilter {
    let directives = log_directives(spec);
    EnvFilter::try_new(&directives).unwrap_or_else(|e| {
        eprintln!("ignoring the log filter `{directives}`: {e}");
        EnvFilter::new(log_directives(None))
    })
}

fn init_logging(format: LogFormat) {
    let spec = std::env::var("HOOKGATE_LOG")
        .or_else(|_| std::env::var("RUST_LOG"))
        .ok();
    let filter = log_filter(spec.as_deref());
    // Colour only for a person at a terminal: a file or a pipe gets plain text.
    use std::io::IsTerminal as _;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Human => builder.try_init(),
        LogFormat::Json => builder.json().flatten_event(true).try_init(),
    };
}

/// Output to a reader that has gone ends the command: with success when the pipe was closed
/// (the reader had what it wanted, as with `head`), else with the error.
fn stdout_failed(e: &std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("cannot write the output: {e}");
    std::process::exit(1);
}

/// The `hookgate` binary's entry point.
pub fn main() -> ExitCode {
    run(Cli::parse())
}

/// The command line `args` (the program's name first), as the binary would run it: for a
/// program that starts gateways of its own (`hookgate-bench`'s fault runs).
pub fn main_from<I, T>(args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    run(Cli::parse_from(args))
}

fn run(cli: Cli) -> ExitCode {
    init_logging(cli.log_format);
    match cli.command {
        Command::Serve {
            config,
            time_scale,
            no_watch,
            listen,
        } => serve(
            config.as_deref(),
            &config::Overrides { listen },
            time_scale,
            !no_watch,
        ),
        Command::Config { command } => config_command(command),
        Command::Policy {
            command: PolicyCommand::Preview { name, config, svg },
        } => preview(&name, config.as_deref(), svg.as_deref()),
        Command::Plugin { command } => plugin_command(command),
        Command::Ops(command) => ops::run(command),
        Command::Migrate { from, to } => migrate::run(&from, &to),
        Command::Import {
            source: ImportSource::Svix(args),
        } => import::run(args),
        Command::Keygen {
            scheme: KeyScheme::Ed25519,
        } => keygen_ed25519(),
        Command::Keygen {
            scheme: KeyScheme::Storage,
        } => {
            say!("{}", crate::store::EncryptionKey::generate().to_base64());
            ExitCode::SUCCESS
        }
        Command::Backup { config, to } => match load_config(config.as_deref(), &config::Overrides::default())
        {
            Ok(config) => storage::backup(&config, &to),
            Err(code) => code,
        },
        Command::Storage {
            command: StorageCommand::Rekey { config },
        } => match load_config(config.as_deref(), &config::Overrides::default()) {
            Ok(config) => storage::rekey(config),
            Err(code) => code,
        },
        Command::Completions { shell } => {
            clap_complete::generate(shell, &mut Cli::command(), "hookgate", &mut std::io::stdout());
            ExitCode::SUCCESS
        }
        Command::Man { dir } => man_pages(dir.as_deref()),
    }
}

/// `hookgate config check FILE` and `hookgate config schema`.
fn config_command(command: ConfigCommand) -> ExitCode {
    match command {
        ConfigCommand::Check { file } => match config::load_file(&file) {
            Ok(c) => {
                say!("{}: ok ({})", file.display(), checked(&c));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        ConfigCommand::Schema => {
            say!(
                "{}",
                serde_json::to_string_pretty(&config::json_schema()).expect("serializes")
            );
            ExitCode::SUCCESS
        }
    }
}

/// `hookgate plugin check FILE` and `hookgate plugin new NAME`.
fn plugin_command(command: PluginCommand) -> ExitCode {
    match command {
        PluginCommand::Check { file, config } => match crate::plugins::check_file_with_config(
            &file,
            &crate::plugins::PluginLimits::default(),
            &config.into_iter().collect(),
        ) {
            Ok(report) => {
                say!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{}: {e:#}", file.display());
                ExitCode::FAILURE
            }
        },
        PluginCommand::New {
            name,
            kind,
            lang,
            dir,
        } => match new_plugin::write(&dir, &name, kind, lang) {
            Ok(files) => {
                say!("{}", new_plugin::summary(&dir, &name, kind, lang, &files));
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("hookgate plugin new: {e:#}");
                ExitCode::FAILURE
            }
        },
    }
}

/// What `config check` found, saying which topics and policies the file did not write: the
/// Svix API's built-in topic, the operator topic `health.operator_topic` names and the preset
/// policies are counted apart.
fn checked(config: &Config) -> String {
    let count = |n: usize, one: &str, many: &str| format!("{n} {}", if n == 1 { one } else { many });
    let svix = config::defaults::SVIX_TOPIC;
    let operator = config.health.operator_topic.as_deref().filter(|t| *t != svix);
    let own_topics = config
        .topics
        .keys()
        .filter(|t| *t != svix && Some(t.as_str()) != operator)
        .count();
    let mut topics = count(own_topics, "topic", "topics");
    if let Some(operator) = operator {
        topics.push_str(&format!(", the operator topic `{operator}`"));
    }
    let presets = crate::policy::Policy::presets().len();
    format!(
        "{topics} and the built-in `{svix}`; {}; {} and the {presets} presets",
        count(config.file_endpoints.len(), "endpoint", "endpoints"),
        count(
            config.policies.len().saturating_sub(presets),
            "policy",
            "policies"
        ),
    )
}

/// The manual page of the command line as clap knows it, so that it never disagrees with
/// `--help`: one page on stdout, or a page per command in `dir`.
fn man_pages(dir: Option<&Path>) -> ExitCode {
    let written = match dir {
        None => clap_mangen::Man::new(Cli::command()).render(&mut std::io::stdout()),
        Some(dir) => clap_mangen::generate_to(Cli::command(), dir),
    };
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("man: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints a new key pair on stdout, one per line, private key first: meant to be copied into a
/// secret store, not logged.
fn keygen_ed25519() -> ExitCode {
    match crate::delivery::signing::generate_ed25519() {
        Ok((secret, public)) => {
            say!("secret:     {}", secret.expose());
            say!("public_key: {public}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("keygen: {e}");
            ExitCode::FAILURE
        }
    }
}

fn load_config(path: Option<&Path>, overrides: &config::Overrides) -> Result<Config, ExitCode> {
    let loaded = match path {
        None => Config::embedded_default_with(overrides),
        Some(p) => config::load_file_with(p, overrides),
    };
    loaded.map_err(|e| {
        eprintln!("{e}");
        ExitCode::FAILURE
    })
}

fn preview(name: &str, config: Option<&Path>, svg: Option<&Path>) -> ExitCode {
    let config = match load_config(config, &config::Overrides::default()) {
        Ok(c) => c,
        Err(code) => return code,
    };
    let Some(policy) = config.policies.get(name) else {
        let known: Vec<&str> = config.policies.keys().map(String::as_str).collect();
        eprintln!("no policy `{name}` (known: {})", known.join(", "));
        return ExitCode::FAILURE;
    };
    say!(
        "{}",
        crate::policy::render_preview_table(policy).trim_end_matches('\n')
    );
    if let Some(path) = svg {
        if let Err(e) = std::fs::write(path, crate::charts::render_preview_svg(policy)) {
            eprintln!("cannot write {}: {e}", path.display());
            return ExitCode::FAILURE;
        }
        say!("chart written to {}", path.display());
    }
    ExitCode::SUCCESS
}

fn serve(
    config_path: Option<&Path>,
    overrides: &config::Overrides,
    time_scale: Option<f64>,
    watch_config: bool,
) -> ExitCode {
    let config = match load_config(config_path, overrides) {
        Ok(c) => c,
        Err(code) => return code,
    };
    if config_path.is_none() {
        tracing::info!(listen = %config.server.listen, "no --config: running on the embedded default (loopback, ./data/hookgate.db)");
    }
    let clock: Arc<dyn Clock> = match time_scale {
        Some(f) => {
            tracing::info!(factor = f, "simulated time: the clock runs {f}x faster");
            Arc::new(ScaledClock::new(f))
        }
        None => Arc::new(SystemClock),
    };
    let runtime = match crate::runtime(&config) {
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
                reloader.reload_from_file().await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every command and argument says what it is in `--help` (`serve --config` did not).
    #[test]
    fn every_command_and_argument_has_help_text() {
        use clap::CommandFactory as _;
        fn walk(command: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in command.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in command.get_subcommands() {
                let sub_path = format!("{path} {}", sub.get_name());
                if sub.get_name() != "help" && sub.get_about().is_none() {
                    missing.push(sub_path.clone());
                }
                walk(sub, &sub_path, missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "hookgate", &mut missing);
        assert!(missing.is_empty(), "without help text: {missing:#?}");
    }

    /// `config check` counted the built-in `svix` topic and the preset policies without saying
    /// so ("3 topics" for a file with two): it says which are the file's.
    #[test]
    fn config_check_says_which_topics_and_policies_are_built_in() {
        let c = config::load_str(
            "policies:\n  fast:\n    schedule: [0s, 5s]\ntopics:\n  orders: {}\n  users: {}\nendpoints:\n  e:\n    url: https://e.example/\n    topics: [orders]\n",
            "t.yaml",
            None,
            |_| None,
        )
        .unwrap();
        let with_ops =
            config::load_str("health:\n  operator_topic: ops\n", "t.yaml", None, |_| None).unwrap();
        assert_eq!(
            checked(&with_ops),
            "0 topics, the operator topic `ops` and the built-in `svix`; 0 endpoints; 0 policies and the 4 presets"
        );
        assert_eq!(
            checked(&c),
            "2 topics and the built-in `svix`; 1 endpoint; 1 policy and the 4 presets"
        );
        assert_eq!(
            checked(&Config::embedded_default()),
            "1 topic and the built-in `svix`; 0 endpoints; 0 policies and the 4 presets"
        );
    }

    #[test]
    fn a_bare_level_is_for_hookgate_and_full_directives_pass_through() {
        assert_eq!(log_directives(Some("debug")), "hookgate=debug,warn");
        assert_eq!(log_directives(Some("TRACE")), "hookgate=trace,warn");
        assert_eq!(log_directives(Some("error")), "hookgate=error,error");
        assert_eq!(log_directives(Some("off")), "hookgate=off,off");
        assert_eq!(log_directives(None), "hookgate=info,warn");
        assert_eq!(log_directives(Some("  ")), "hookgate=info,warn");
        for full in [
            "hookgate::scheduler=trace,info",
            "wasmtime=debug",
            "debug,hyper=info",
        ] {
            assert_eq!(log_directives(Some(full)), full);
        }
    }

    #[test]
    fn a_plugin_config_entry_is_key_equals_value() {
        assert_eq!(
            parse_config_entry("team=payments"),
            Ok(("team".into(), "payments".into()))
        );
        assert_eq!(
            parse_config_entry("paths=a.b,c"),
            Ok(("paths".into(), "a.b,c".into()))
        );
        assert_eq!(parse_config_entry("empty="), Ok(("empty".into(), String::new())));
        assert_eq!(parse_config_entry("x=a=b"), Ok(("x".into(), "a=b".into())));
        assert!(parse_config_entry("no-equals").is_err());
        assert!(parse_config_entry("=value").is_err());
    }

    #[test]
    fn debug_shows_hookgate_debug_lines_but_not_wasmtime_or_cranelift_ones() {
        use tracing::Level;
        use tracing_subscriber::layer::SubscriberExt as _;
        let enabled = |spec: &str| {
            let subscriber = tracing_subscriber::registry().with(log_filter(Some(spec)));
            tracing::subscriber::with_default(subscriber, || {
                [
                    tracing::enabled!(target: "hookgate::scheduler", Level::DEBUG),
                    tracing::enabled!(target: "wasmtime_cranelift::compiler", Level::DEBUG),
                    tracing::enabled!(target: "cranelift_codegen", Level::DEBUG),
                    tracing::enabled!(target: "wasmtime", Level::WARN),
                ]
            })
        };
        assert_eq!(enabled("debug"), [true, false, false, true]);
        assert_eq!(enabled("info"), [false, false, false, true]);
        // Asked for by name, their debug output is there.
        assert_eq!(enabled("hookgate=debug,debug"), [true, true, true, true]);
        // A filter that does not parse falls back to the default.
        assert_eq!(enabled("hookgate=notalevel"), [false, false, false, true]);
    }
}
