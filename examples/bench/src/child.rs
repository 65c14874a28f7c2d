//! The gateway under test runs in its own process — this same executable, started with the
//! hidden `__gateway` subcommand — so that its resident memory and CPU time are its own, and
//! a restart is a real restart.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hookgate::clock::SystemClock;
use hookgate::{Gateway, GatewayOptions};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// The line the child prints on stdout once it accepts requests.
const READY: &str = "READY ";

/// The executable whose `__gateway` runs the gateways: this one, or another build of
/// `hookgate-bench` named by `HOOKGATE_BENCH_GATEWAY_EXE` (say, the static musl build), so that
/// two builds of the gateway meet the same load generator and receiver.
fn gateway_exe() -> anyhow::Result<PathBuf> {
    match std::env::var_os("HOOKGATE_BENCH_GATEWAY_EXE") {
        Some(exe) => Ok(PathBuf::from(exe)),
        None => std::env::current_exe().context("locating the harness executable"),
    }
}

/// The child's side: runs a gateway on `config` until SIGTERM, printing `READY <addr>` once
/// `Gateway::start` returned (the queue is rebuilt and the API listens).
pub(crate) fn serve(config: &Path) -> ExitCode {
    let filter = std::env::var("HOOKGATE_LOG").unwrap_or_else(|_| "warn".into());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_writer(std::io::stderr)
        .try_init();
    let config = match hookgate::config::load_file(config) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::FAILURE;
        }
    };
    let runtime = match hookgate::runtime(&config) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    runtime.block_on(async move {
        let listener = match std::net::TcpListener::bind("127.0.0.1:0") {
            Ok(l) => l,
            Err(e) => {
                eprintln!("cannot listen: {e}");
                return ExitCode::FAILURE;
            }
        };
        let mut options = GatewayOptions::new(config, Arc::new(SystemClock));
        options.listener = Some(listener);
        let gateway = match Gateway::start(options).await {
            Ok(g) => g,
            Err(e) => {
                eprintln!("the gateway could not start: {e:#}");
                return ExitCode::FAILURE;
            }
        };
        println!("{READY}{}", gateway.addr());
        let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) else {
            eprintln!("cannot install the SIGTERM handler");
            gateway.shutdown().await;
            return ExitCode::FAILURE;
        };
        term.recv().await;
        gateway.shutdown().await;
        ExitCode::SUCCESS
    })
}

/// A gateway process started by the harness.
pub(crate) struct GatewayProcess {
    child: Child,
    pub(crate) pid: u32,
    pub(crate) addr: SocketAddr,
    /// From spawning the process to its `READY` line.
    pub(crate) start_time: Duration,
    pub(crate) log: PathBuf,
}

impl GatewayProcess {
    /// Starts this executable as a gateway on `config`, its log in `log`, and waits for it to
    /// be ready (at most `within`).
    pub(crate) async fn spawn(config: &Path, log: &Path, within: Duration) -> anyhow::Result<GatewayProcess> {
        let exe = gateway_exe()?;
        let log_file = std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let started = Instant::now();
        let mut child = Command::new(exe)
            .arg("__gateway")
            .arg(config)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::from(log_file))
            .kill_on_drop(true)
            .spawn()
            .context("starting the gateway process")?;
        let pid = child.id().context("the gateway process has no pid")?;
        let stdout = child.stdout.take().context("the gateway's stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let line = tokio::time::timeout(within, lines.next_line())
            .await
            .with_context(|| {
                format!(
                    "the gateway was not ready within {within:?}; see {}",
                    log.display()
                )
            })?
            .context("reading the gateway's stdout")?;
        let Some(addr) = line.as_deref().and_then(|l| l.strip_prefix(READY)) else {
            bail!(
                "the gateway stopped before it was ready: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        };
        let addr = addr.trim().parse().context("the gateway's address")?;
        Ok(GatewayProcess {
            child,
            pid,
            addr,
            start_time: started.elapsed(),
            log: log.to_owned(),
        })
    }

    pub(crate) fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Resident and peak resident memory, in bytes.
    pub(crate) fn memory(&self) -> anyhow::Result<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid))?;
        let field = |name: &str| -> anyhow::Result<u64> {
            let value = status_field(&status, name)
                .with_context(|| format!("{name} in /proc/{}/status", self.pid))?;
            let kib: u64 = value.split_whitespace().next().context("a number")?.parse()?;
            Ok(kib * 1024)
        };
        Ok(Memory {
            rss_bytes: field("VmRSS:")?,
            peak_rss_bytes: field("VmHWM:")?,
        })
    }

    /// CPU time (user + system, every thread) the process has used so far.
    pub(crate) fn cpu_time(&self) -> anyhow::Result<Duration> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid))?;
        Ok(stat_cpu(&stat).context("the stat line")?.1)
    }

    /// How often each kind of thread has gone to sleep so far (its voluntary context switches:
    /// each one is a wake-up later), by thread name with any trailing number dropped
    /// (`tokio-rt-worker`, `hookgate-writer`, `hookgate-schedu`: Linux keeps 15 bytes of a
    /// name). Threads that ended meanwhile are not counted.
    pub(crate) fn sleeps_by_thread(&self) -> std::collections::BTreeMap<String, u64> {
        let mut sleeps = std::collections::BTreeMap::new();
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", self.pid)) else {
            return sleeps;
        };
        for task in tasks.flatten() {
            let Ok(status) = std::fs::read_to_string(task.path().join("status")) else {
                continue;
            };
            let field = |name: &str| status_field(&status, name);
            let (Some(name), Some(count)) = (field("Name:"), field("voluntary_ctxt_switches:")) else {
                continue;
            };
            let kind = name.trim_end_matches(|c: char| c.is_ascii_digit() || c == '-');
            *sleeps.entry(kind.to_owned()).or_default() += count.parse::<u64>().unwrap_or(0);
        }
        sleeps
    }

    /// SIGTERM, then waits for the graceful shutdown to finish; returns how long it took.
    pub(crate) async fn stop(mut self) -> anyhow::Result<Duration> {
        let started = Instant::now();
        let status = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .context("running kill")?;
        if !status.success() {
            bail!("kill -TERM {} failed", self.pid);
        }
        match tokio::time::timeout(Duration::from_secs(60), self.child.wait()).await {
            Ok(Ok(exit)) if exit.success() => Ok(started.elapsed()),
            Ok(Ok(exit)) => bail!("the gateway exited with {exit}; see {}", self.log.display()),
            Ok(Err(e)) => Err(e.into()),
            Err(_) => {
                let _ = self.child.kill().await;
                bail!("the gateway did not stop within 60 s")
            }
        }
    }
}

#[derive(Debug, Clone, Copy)]
pub(crate) struct Memory {
    pub(crate) rss_bytes: u64,
    pub(crate) peak_rss_bytes: u64,
}

fn clock_ticks_per_second() -> u64 {
    static TICKS: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8(o.stdout).ok())
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(100)
    })
}

/// The value of the line of a `/proc/.../status` file that starts with `name` (`VmRSS:`),
/// trimmed.
fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim)
}

/// `cpu` spread over `n` deliveries, in µs each.
pub(crate) fn micros_each(cpu: Duration, n: u64) -> f64 {
    cpu.as_secs_f64() * 1e6 / n.max(1) as f64
}

/// The command name and the CPU time (user + system) of a `/proc/PID/stat` line.
fn stat_cpu(stat: &str) -> Option<(&str, Duration)> {
    // The command name may contain spaces; the fields after its closing parenthesis don't.
    let (head, after) = stat.rsplit_once(')')?;
    let name = head.split_once('(')?.1;
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    let ticks: u64 = fields.get(11)?.parse::<u64>().ok()? + fields.get(12)?.parse::<u64>().ok()?;
    Some((
        name,
        Duration::from_secs_f64(ticks as f64 / clock_ticks_per_second() as f64),
    ))
}

/// The CPU time so far of every process of this machine named `name`, by process id (a local
/// database server's processes: `postgres`).
pub(crate) fn cpu_by_process(name: &str) -> std::collections::HashMap<u32, Duration> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Default::default();
    };
    dir.filter_map(|entry| {
        let pid: u32 = entry.ok()?.file_name().to_str()?.parse().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let (comm, cpu) = stat_cpu(&stat)?;
        (comm == name).then_some((pid, cpu))
    })
    .collect()
}

/// The CPU time the processes named `name` used since `before` (a process that ended meanwhile
/// takes its share with it; a pool keeps its backends open, so that is little).
pub(crate) fn cpu_since(before: &std::collections::HashMap<u32, Duration>, name: &str) -> Duration {
    cpu_by_process(name)
        .iter()
        .map(|(pid, cpu)| cpu.saturating_sub(before.get(pid).copied().unwrap_or_default()))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::status_field;

    #[test]
    fn a_status_field_is_read_by_its_name() {
        let status = "Name:\ttokio-rt-worker\nVmRSS:\t   12345 kB\nvoluntary_ctxt_switches:\t42\n";
        assert_eq!(status_field(status, "Name:"), Some("tokio-rt-worker"));
        assert_eq!(status_field(status, "VmRSS:"), Some("12345 kB"));
        assert_eq!(status_field(status, "voluntary_ctxt_switches:"), Some("42"));
        assert_eq!(status_field(status, "VmHWM:"), None);
    }
}
