//! `GET /readyz`: 200 while the gateway can take events, 503 with the reason while it cannot
//! — a disk that is full for real (a small tmpfs), a database that cannot be reached (a TCP
//! proxy between the gateway and PostgreSQL, cut) — and ready again, without a restart, once
//! the disk has room or the database answers. `/healthz` (liveness) stays 200 throughout.

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::support::{START, TestGateway, on_postgres, postgres_url_for};

#[allow(dead_code)]
#[path = "../support/faults/proxy.rs"]
mod proxy;

const WAIT: Duration = Duration::from_secs(20);

/// A tmpfs of `size` mounted on a fresh temp dir (the suite runs as root in CI), unmounted on
/// drop; None, said on stderr, where mounting is not allowed.
struct SmallDisk {
    dir: Arc<tempfile::TempDir>,
}

impl SmallDisk {
    fn mount(size: &str) -> Option<SmallDisk> {
        let dir = Arc::new(tempfile::tempdir().unwrap());
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !mounted {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI runs as root: mounting a tmpfs must work there"
            );
            eprintln!("SKIPPED the full-disk readiness test: cannot mount a tmpfs (not root?)");
            return None;
        }
        Some(SmallDisk { dir })
    }
}

impl Drop for SmallDisk {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

async fn ready(gw: &TestGateway) -> (u16, serde_json::Value) {
    gw.get("/readyz").await
}

#[tokio::test]
async fn a_full_disk_makes_the_gateway_not_ready_until_it_has_room_again() {
    if on_postgres() {
        return; // The disk under a PostgreSQL server is its own: the SQLite run covers this.
    }
    let Some(disk) = SmallDisk::mount("3m") else {
        return;
    };
    // Room kept aside, given back later as an operator would by deleting something.
    let ballast = disk.dir.path().join("ballast");
    std::fs::write(&ballast, vec![0u8; 1024 * 1024]).unwrap();
    let mut gw = TestGateway::start_in(
        disk.dir.clone(),
        "topics:\n  t: {}\n",
        hookgate::clock::ManualClock::new(START),
    )
    .await;
    assert_eq!(ready(&gw).await, (200, json!({"status": "ready"})));

    let mut refused = None;
    for i in 0..2000 {
        let (status, body) = gw
            .post(
                "/v1/topics/t/events",
                json!({"type": "x", "id": format!("e{i}"), "payload": {"filler": "f".repeat(8000)}}),
            )
            .await;
        match status {
            202 => {}
            503 => {
                assert_eq!(body["error"]["code"], "storage_unavailable", "{body}");
                refused = Some(i);
                break;
            }
            other => panic!("event e{i}: {other} {body}"),
        }
    }
    let refused = refused.expect("the disk never filled up");
    assert!(refused > 10, "only {refused} events fit");

    let (status, body) = ready(&gw).await;
    assert_eq!(
        (status, body["status"].as_str()),
        (503, Some("not_ready")),
        "{body}"
    );
    assert_eq!(body["reason"], "storage_unavailable", "{body}");
    assert!(body["message"].as_str().unwrap().contains("full"), "{body}");
    assert_eq!(gw.get("/healthz").await.0, 200, "alive all the same");
    // Asked again, it probes again and still finds no room.
    assert_eq!(ready(&gw).await.0, 503);

    std::fs::remove_file(&ballast).unwrap();
    gw.wait_until("/readyz", WAIT, |r| r["status"] == "ready").await;
    let (status, body) = gw
        .post(
            "/v1/topics/t/events",
            json!({"type": "x", "id": "after", "payload": {}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    gw.stop().await;
}

#[tokio::test]
async fn a_lost_database_makes_a_node_not_ready_until_it_answers_again() {
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let Some(url) = postgres_url_for(dir.path()) else {
        return; // PostgreSQL only: the suite's second run (tests/postgres.rs).
    };
    let database: std::net::SocketAddr = "127.0.0.1:5432".parse().unwrap();
    let proxy = proxy::Proxy::start(database).await;
    let proxied = url.replacen("127.0.0.1", &proxy.addr.to_string(), 1);
    assert_ne!(proxied, url, "the test database is on 127.0.0.1:5432");
    let mut gw = TestGateway::start_with(
        dir,
        "topics:\n  t: {}\n",
        hookgate::clock::ManualClock::new(START),
        |o| o.config.storage.url = Some(hookgate::model::Secret::new(proxied)),
    )
    .await;
    assert_eq!(ready(&gw).await, (200, json!({"status": "ready"})));

    proxy.cut();
    let body = gw
        .wait_until("/readyz", WAIT, |r| r["status"] == "not_ready")
        .await;
    assert_eq!(body["reason"], "storage_unavailable", "{body}");
    assert!(body["message"].as_str().unwrap().contains("database"), "{body}");
    assert_eq!(gw.get("/healthz").await.0, 200, "alive all the same");

    proxy.heal();
    gw.wait_until("/readyz", WAIT, |r| r["status"] == "ready").await;
    let (status, body) = gw
        .post("/v1/topics/t/events", json!({"type": "x", "payload": {}}))
        .await;
    assert_eq!(status, 202, "{body}");
    gw.stop().await;
}
