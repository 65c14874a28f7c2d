//! A gateway node: a process started from a config file, frozen (SIGSTOP), thawed (SIGCONT),
//! killed (SIGKILL) and started again. Dropping it kills it, so a failing test leaves no
//! process behind.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub(crate) struct Node {
    pub(crate) name: String,
    /// `127.0.0.1:<port>`, where its API listens.
    pub(crate) addr: String,
    pub(crate) config: PathBuf,
    pub(crate) log: PathBuf,
    /// The program and the arguments before `--config <file>`... see [`Node::spawn`].
    program: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
    frozen: bool,
}

impl Node {
    /// A node that runs `program args… serve --config <config>` (not started yet).
    pub(crate) fn new(
        name: &str,
        addr: String,
        config: PathBuf,
        log: PathBuf,
        program: PathBuf,
        args: Vec<String>,
    ) -> Node {
        Node {
            name: name.to_owned(),
            addr,
            config,
            log,
            program,
            args,
            child: None,
            frozen: false,
        }
    }

    pub(crate) fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("node log");
        let child = Command::new(&self.program)
            .args(&self.args)
            .args(["serve", "--config"])
            .arg(&self.config)
            .env(
                "HOOKGATE_LOG",
                std::env::var("HOOKGATE_LOG").unwrap_or_else(|_| "info".into()),
            )
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start a node");
        self.child = Some(child);
        self.frozen = false;
    }

    pub(crate) fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub(crate) fn is_running(&self) -> bool {
        self.child.is_some()
    }

    pub(crate) fn is_frozen(&self) -> bool {
        self.frozen
    }

    /// SIGKILL: the process ends at once, wherever it was.
    pub(crate) fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.frozen = false;
    }

    /// SIGSTOP: the process stops where it is (a long pause, a stopped container); its
    /// sockets stay open and its clock goes on.
    pub(crate) fn freeze(&mut self) {
        if self.signal("STOP") {
            self.frozen = true;
        }
    }

    /// SIGCONT: it goes on from where it stopped.
    pub(crate) fn thaw(&mut self) {
        if self.signal("CONT") {
            self.frozen = false;
        }
    }

    pub(crate) fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Resident memory in KiB, from `/proc`.
    pub(crate) fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
    }

    /// The process's state letter from `/proc` (R running, S sleeping, T stopped, Z zombie).
    pub(crate) fn state(&self) -> String {
        let Some(pid) = self.pid() else {
            return "not started".into();
        };
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| {
                s.rsplit_once(')')
                    .map(|(_, rest)| rest.trim().chars().take(1).collect())
            })
            .unwrap_or_else(|| "gone".into())
    }

    pub(crate) fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn signal(&self, name: &str) -> bool {
        let Some(pid) = self.pid() else { return false };
        Command::new("kill")
            .args(["-s", name, &pid.to_string()])
            .status()
            .is_ok_and(|s| s.success())
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        self.kill();
    }
}
