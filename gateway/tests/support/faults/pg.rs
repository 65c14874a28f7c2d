//! A PostgreSQL server of one's own: `initdb` in a temp dir, `pg_ctl` to start, stop and
//! restart it, on a free port of 127.0.0.1. PostgreSQL refuses to run as root, so as root the
//! tools run as the `postgres` user (`runuser`), and the temp dir is handed to that user.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The folder with `initdb` and `pg_ctl`: PATH first, then the newest `/usr/lib/postgresql`.
pub(crate) fn tools() -> Option<PathBuf> {
    let on_path = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path).find(|dir| dir.join("initdb").is_file() && dir.join("pg_ctl").is_file())
    });
    if on_path.is_some() {
        return on_path;
    }
    let mut versions: Vec<PathBuf> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(Result::ok)
        .map(|e| e.path().join("bin"))
        .filter(|bin| bin.join("initdb").is_file() && bin.join("pg_ctl").is_file())
        .collect();
    versions.sort_by_key(|p| {
        p.parent()
            .and_then(|v| v.file_name())
            .and_then(|v| v.to_str())
            .and_then(|v| v.parse::<u32>().ok())
    });
    versions.pop()
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().next().map(|uid| uid == "0"))
        })
        .unwrap_or(false)
}

/// How a stop ends the server's work: `Fast` (a clean shutdown: sessions ended, a checkpoint)
/// or `Immediate` (like a crash: recovery from the WAL at the next start).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Stop {
    Fast,
    Immediate,
}

pub(crate) struct PrivatePostgres {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
    pub(crate) port: u16,
}

impl PrivatePostgres {
    /// Creates and starts a server with the tools in `bin`.
    pub(crate) fn start(bin: &Path) -> Result<PrivatePostgres, String> {
        let dir = tempfile::Builder::new()
            .prefix("hookgate-pg-")
            .tempdir_in(std::env::temp_dir())
            .map_err(|e| format!("temp dir: {e}"))?;
        let as_postgres = running_as_root();
        if as_postgres {
            run(Command::new("chown").arg("postgres:").arg(dir.path()))?;
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| format!("a free port: {e}"))?
            .port();
        let pg = PrivatePostgres {
            bin: bin.to_owned(),
            as_postgres,
            port,
            dir,
        };
        pg.tool("initdb")
            .args([
                "-U",
                "postgres",
                "-A",
                "trust",
                "-E",
                "UTF8",
                "--locale=C",
                "--no-sync",
                "-D",
            ])
            .arg(pg.data())
            .status_ok()?;
        let conf = format!(
            "\nport = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{}'\n\
             max_connections = 200\nshared_buffers = 32MB\nfsync = off\nsynchronous_commit = on\n",
            pg.dir.path().display()
        );
        let conf_path = pg.data().join("postgresql.conf");
        let mut text = std::fs::read_to_string(&conf_path).map_err(|e| format!("postgresql.conf: {e}"))?;
        text.push_str(&conf);
        std::fs::write(&conf_path, text).map_err(|e| format!("postgresql.conf: {e}"))?;
        pg.up()?;
        Ok(pg)
    }

    /// `postgres://postgres@127.0.0.1:<port>/<database>`: the server itself, not a proxy.
    pub(crate) fn url(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    pub(crate) fn addr(&self) -> std::net::SocketAddr {
        std::net::SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// Starts the server and waits until it takes connections.
    pub(crate) fn up(&self) -> Result<(), String> {
        self.tool("pg_ctl")
            .args(["-w", "-t", "60", "-l"])
            .arg(self.dir.path().join("server.log"))
            .arg("-D")
            .arg(self.data())
            .arg("start")
            .status_ok()
    }

    pub(crate) fn down(&self, how: Stop) -> Result<(), String> {
        let mode = match how {
            Stop::Fast => "fast",
            Stop::Immediate => "immediate",
        };
        self.tool("pg_ctl")
            .args(["-w", "-t", "60", "-m", mode, "-D"])
            .arg(self.data())
            .arg("stop")
            .status_ok()
    }

    /// Stops the server and starts it again: every connection ends, and for a while none is
    /// taken.
    pub(crate) fn restart(&self, how: Stop) -> Result<(), String> {
        if let Err(e) = self.down(how) {
            // A clean stop that did not finish in time is finished as a crash would.
            self.down(Stop::Immediate)
                .map_err(|again| format!("{e}; then: {again}"))?;
        }
        self.up()
    }

    /// Creates a database (each run its own, on one server).
    pub(crate) async fn create_database(&self, name: &str) -> Result<(), String> {
        let (client, connection) = tokio_postgres::connect(&self.url("postgres"), tokio_postgres::NoTls)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        let driver = tokio::spawn(connection);
        let created = client
            .batch_execute(&format!("CREATE DATABASE \"{name}\""))
            .await
            .map_err(|e| format!("create database: {e}"));
        drop(client);
        let _ = driver.await;
        created
    }

    /// The server's log, for a failing test's message.
    pub(crate) fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    fn tool(&self, name: &str) -> Tool {
        let path = self.bin.join(name);
        let mut command = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(path);
            c
        } else {
            Command::new(path)
        };
        command.current_dir(self.dir.path());
        Tool(command)
    }
}

impl Drop for PrivatePostgres {
    fn drop(&mut self) {
        let _ = self.down(Stop::Immediate);
    }
}

struct Tool(Command);

impl Tool {
    fn args<I: IntoIterator<Item = S>, S: AsRef<std::ffi::OsStr>>(&mut self, args: I) -> &mut Tool {
        self.0.args(args);
        self
    }

    fn arg(&mut self, arg: impl AsRef<std::ffi::OsStr>) -> &mut Tool {
        self.0.arg(arg);
        self
    }

    fn status_ok(&mut self) -> Result<(), String> {
        run(&mut self.0)
    }
}

fn run(command: &mut Command) -> Result<(), String> {
    let out = command
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{command:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{command:?} failed: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}
