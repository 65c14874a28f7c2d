//! The real `hookgate` binary as a test subject: started as a child process on a loopback
//! port with a config of the test's, killed (SIGKILL) when dropped so that a failing test
//! leaves no process behind.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

pub struct RealGateway {
    child: Child,
    pub base: String,
    pub log: PathBuf,
    http: reqwest::Client,
}

/// A port that was free a moment ago; the child binds it.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl RealGateway {
    /// Writes `server.listen`, storage and plugin folders under `dir` plus `yaml` to
    /// `dir/hookgate.yaml`, starts `hookgate serve --config … <args>`, and waits until it
    /// answers `/healthz`.
    pub async fn start(dir: &Path, yaml: &str, args: &[&str]) -> RealGateway {
        Self::start_with_server(dir, "", yaml, args).await
    }

    /// Like [`RealGateway::start`], with more `server:` settings (indented lines).
    pub async fn start_with_server(dir: &Path, server: &str, yaml: &str, args: &[&str]) -> RealGateway {
        Self::start_configured(dir, server, "", yaml, args).await
    }

    /// Like [`RealGateway::start_with_server`], on the suite's store: the test directory's own
    /// PostgreSQL schema when `tests/postgres.rs` runs the suite, else SQLite.
    pub async fn start_on_suite_store(dir: &Path, server: &str, yaml: &str, args: &[&str]) -> RealGateway {
        let storage = crate::support::postgres_url_for(dir).map_or(String::new(), |url| {
            format!(
                "  url: {url}\n  max_connections: 3\n  encryption_key: {}\n",
                crate::support::PG_TEST_KEY
            )
        });
        Self::start_configured(dir, server, &storage, yaml, args).await
    }

    async fn start_configured(
        dir: &Path,
        server: &str,
        storage: &str,
        yaml: &str,
        args: &[&str],
    ) -> RealGateway {
        let port = free_port();
        let config = dir.join("hookgate.yaml");
        std::fs::write(
            &config,
            format!(
                "server:\n  listen: 127.0.0.1:{port}\n{server}storage:\n  path: {dir}/db/hookgate.db\n{storage}plugins:\n  dir: {dir}/plugins\n  bundled: false\n{yaml}",
                dir = dir.display()
            ),
        )
        .unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_hookgate"));
        command.args(["serve", "--config"]).arg(&config).args(args);
        Self::spawn(dir, port, command).await
    }

    /// Runs `command` (a `hookgate serve …`) in `dir`, its log in `dir/gateway.log`, and waits
    /// until it answers `/healthz` on `port`.
    pub async fn spawn(dir: &Path, port: u16, mut command: Command) -> RealGateway {
        let log = dir.join("gateway.log");
        let log_file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .unwrap();
        let child = command
            .current_dir(dir)
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .unwrap();
        let mut gateway = RealGateway {
            child,
            base: format!("http://127.0.0.1:{port}"),
            log,
            http: reqwest::Client::new(),
        };
        gateway.wait_healthy().await;
        gateway
    }

    /// The child's process id (to signal it).
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits for `/healthz`, or says at once that the process ended. The wait is long: a
    /// first start of the embedded default compiles the bundled plugins (the js one alone takes
    /// seconds in a test build, many more on a loaded machine).
    async fn wait_healthy(&mut self) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        while tokio::time::Instant::now() < deadline {
            if let Ok(r) = self.http.get(format!("{}/healthz", self.base)).send().await
                && r.status() == 200
            {
                return;
            }
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!(
                    "the gateway ended ({status}) before it came up; its log:\n{}",
                    std::fs::read_to_string(&self.log).unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!(
            "the gateway did not come up at {}; its log:\n{}",
            self.base,
            std::fs::read_to_string(&self.log).unwrap_or_default()
        );
    }

    pub async fn get(&self, path: &str) -> (u16, Value) {
        self.send(self.http.get(format!("{}{path}", self.base))).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        self.send(self.http.post(format!("{}{path}", self.base)).json(&body))
            .await
    }

    /// A POST with extra headers (`Idempotency-Key`…).
    pub async fn post_with(&self, path: &str, body: Value, headers: &[(&str, &str)]) -> (u16, Value) {
        let mut request = self.http.post(format!("{}{path}", self.base)).json(&body);
        for (name, value) in headers {
            request = request.header(*name, *value);
        }
        self.send(request).await
    }

    async fn send(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.timeout(Duration::from_secs(10)).send().await.unwrap();
        let status = response.status().as_u16();
        let text = response.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// Polls `path` until `check` holds, for at most `within` (real time).
    pub async fn wait_until(&self, path: &str, within: Duration, check: impl Fn(&Value) -> bool) -> Value {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let (status, body) = self.get(path).await;
            if status == 200 && check(&body) {
                return body;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{path} did not reach the expected state within {within:?}; last answer: {body}"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for RealGateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
