//! `serve --listen ADDR` and `HOOKGATE_LISTEN`: the quick start off port 8080, a file's
//! `server.listen` replaced, kept by a reload, and refused where the file's would be.

use std::process::Command;
use std::time::Duration;

use crate::binary::{RealGateway, free_port};

const WAIT: Duration = Duration::from_secs(20);

fn hookgate() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_hookgate"));
    command.env_remove("HOOKGATE_LISTEN");
    command
}

/// The README's quick start (`serve` with no file) on another port: the embedded default's
/// store under the working directory, its `default` topic and the bundled plugins.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_embedded_default_listens_where_listen_says() {
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let mut command = hookgate();
    command.args(["serve", "--listen", &format!("127.0.0.1:{port}")]);
    let gw = RealGateway::spawn(dir.path(), port, command).await;
    let (status, topics) = gw.get("/v1/topics").await;
    assert_eq!(status, 200, "{topics}");
    assert_eq!(topics["topics"][0]["name"], "default", "{topics}");
    assert!(dir.path().join("data/hookgate.db").exists());
    let (_, plugins) = gw.get("/v1/plugins").await;
    assert!(
        plugins["plugins"]
            .as_array()
            .unwrap()
            .iter()
            .any(|p| p["name"] == "js"),
        "the binary built the README's way serves the bundled js plugin: {plugins}"
    );
}

/// `HOOKGATE_LISTEN` replaces the file's `server.listen`, and a reload of the file keeps it: the
/// file's own address is no setting "waiting for a restart".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_environment_replaces_the_files_listen_and_a_reload_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let (file_port, port) = (free_port(), free_port());
    let config = dir.path().join("hookgate.yaml");
    let write = |topics: &str| {
        std::fs::write(
            &config,
            format!(
                "server:\n  listen: 127.0.0.1:{file_port}\nstorage:\n  path: {d}/hookgate.db\n\
                 plugins:\n  dir: {d}/plugins\n  bundled: false\ntopics:\n{topics}",
                d = dir.path().display()
            ),
        )
        .unwrap();
    };
    write("  orders: {}\n");
    let mut command = hookgate();
    command
        .args(["serve", "--no-watch", "--config"])
        .arg(&config)
        .env("HOOKGATE_LISTEN", format!("127.0.0.1:{port}"));
    let gw = RealGateway::spawn(dir.path(), port, command).await;
    assert!(
        reqwest::get(format!("http://127.0.0.1:{file_port}/healthz"))
            .await
            .is_err(),
        "nothing listens on the file's address"
    );

    write("  orders: {}\n  users: {}\n");
    let status = Command::new("kill")
        .args(["-HUP", &gw.pid().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let topics = gw
        .wait_until("/v1/topics", WAIT, |t| {
            t["topics"]
                .as_array()
                .unwrap()
                .iter()
                .any(|t| t["name"] == "users")
        })
        .await;
    assert_eq!(
        topics["topics"].as_array().unwrap().len(),
        3,
        "orders, users, svix: {topics}"
    );
    let (_, status) = gw.get("/v1/status").await;
    assert_eq!(status["last_reload"]["ok"], true, "{status}");
    assert_eq!(
        status["last_reload"]["needs_restart"],
        serde_json::json!([]),
        "{status}"
    );
    assert_eq!(status["config_differs_from_file"], false, "{status}");
}

/// An address off loopback without API keys is refused as the file's would be, and one that is
/// no address is refused by the command line.
#[test]
fn listen_is_validated_like_the_files_setting() {
    let dir = tempfile::tempdir().unwrap();
    let out = hookgate()
        .args(["serve", "--listen", "0.0.0.0:8080"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no API keys, but the listener 0.0.0.0:8080 is not loopback"),
        "{stderr}"
    );
    let out = hookgate()
        .args(["serve"])
        .env("HOOKGATE_LISTEN", "localhost")
        .current_dir(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid value 'localhost' for '--listen <ADDR>'"),
        "{stderr}"
    );
}
