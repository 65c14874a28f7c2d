//! `hookgate backup` and secrets at rest, as an operator meets them: the real binary copies a
//! running gateway's SQLite store while clients keep ingesting; a gateway started on the copy
//! (with the key file beside it, as README "Operations" restores it) has every event that was
//! acknowledged before the backup began, and neither the database nor the copy shows an
//! endpoint's secrets.

use std::collections::HashSet;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use crate::ops_cli::hookgate as run_binary;
use crate::support::{START, Sink, TestGateway, on_postgres};

const SECRET: &str = "whsec_YmFja3VwIHRlc3Qgc2lnbmluZyBzZWNyZXQ=";
const HEADER_VALUE: &str = "Bearer sk_backup_9f8e7d";

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle.as_bytes())
}

/// The database's files as they lie on the disk now (the log included).
fn raw_files(db: &std::path::Path) -> Vec<u8> {
    ["", "-wal"]
        .iter()
        .flat_map(|suffix| std::fs::read(format!("{}{suffix}", db.display())).unwrap_or_default())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_during_ingestion_restores_every_event_acknowledged_before_it() {
    if on_postgres() {
        return; // A PostgreSQL store is backed up with pg_dump (the command says so).
    }
    let sink = Sink::start().await;
    let gw = TestGateway::start("topics:\n  t: {}\n").await;
    let (status, created) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "billing", "url": sink.url("/b"), "topics": ["t"], "secret": SECRET,
                   "headers": {"authorization": HEADER_VALUE}}),
        )
        .await;
    assert_eq!(status, 201, "{created}");

    // Clients ingest all along: every acknowledged id, in the order of the acknowledgements.
    let acked = Arc::new(Mutex::new(Vec::<String>::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut clients = Vec::new();
    for c in 0..4 {
        let (http, base, acked, stop) = (gw.http.clone(), gw.base.clone(), acked.clone(), stop.clone());
        clients.push(tokio::spawn(async move {
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                let id = format!("c{c}-{n}");
                let answer = http
                    .post(format!("{base}/v1/topics/t/events"))
                    .json(&json!({"type": "x", "id": id, "payload": {"n": n, "filler": "f".repeat(500)}}))
                    .send()
                    .await
                    .unwrap();
                assert_eq!(answer.status().as_u16(), 202);
                acked.lock().unwrap().push(id);
                n += 1;
            }
        }));
    }
    while acked.lock().unwrap().len() < 300 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let before: Vec<String> = acked.lock().unwrap().clone();
    let copy = gw.dir.path().join("backup.db");
    let args = [
        "backup".to_owned(),
        "--config".to_owned(),
        gw.config_path().display().to_string(),
        "--to".to_owned(),
        copy.display().to_string(),
    ];
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .args(args)
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let during = acked.lock().unwrap().len() - before.len();
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await.unwrap();
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(during > 0, "events were acknowledged while the backup ran");
    assert!(
        stdout.contains("usable only with that key") && stdout.contains("hookgate.key"),
        "says the copy needs the key file: {stdout}"
    );

    // Neither the live files nor the copy show the secrets.
    for (what, bytes) in [
        ("database", raw_files(&gw.dir.path().join("hookgate.db"))),
        ("backup", std::fs::read(&copy).unwrap()),
    ] {
        for secret in [
            SECRET,
            "YmFja3VwIHRlc3Qgc2lnbmluZyBzZWNyZXQ",
            HEADER_VALUE,
            "sk_backup_9f8e7d",
        ] {
            assert!(!contains(&bytes, secret), "the {what} holds `{secret}`");
        }
    }

    // Restore as the README says: the copy as the database, with the key file.
    let restored = Arc::new(tempfile::tempdir().unwrap());
    std::fs::copy(&copy, restored.path().join("hookgate.db")).unwrap();
    std::fs::copy(
        gw.dir.path().join("hookgate.key"),
        restored.path().join("hookgate.key"),
    )
    .unwrap();
    let mut again = TestGateway::start_in(
        restored,
        "topics:\n  t: {}\n",
        hookgate::clock::ManualClock::new(START),
    )
    .await;
    let mut missing = Vec::new();
    for id in &before {
        let (status, _) = again.get(&format!("/v1/events/{id}")).await;
        if status != 200 {
            missing.push(id.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "acknowledged before the backup, missing from it: {missing:?}"
    );
    let distinct: HashSet<&String> = before.iter().collect();
    assert_eq!(distinct.len(), before.len());

    // The restored endpoint still signs with its secret and sends its header: the copy's
    // secrets open with the key file.
    let (status, body) = again
        .post(
            "/v1/topics/t/events",
            json!({"type": "x", "id": "after-restore", "payload": {}}),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    let got = loop {
        let found = sink
            .received()
            .into_iter()
            .find(|r| r.header("webhook-id") == "after-restore");
        if let Some(found) = found {
            break found;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the restored gateway delivered nothing"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(got.header("authorization"), HEADER_VALUE);
    let signed = crate::ingest::verify(
        SECRET,
        got.header("webhook-id"),
        got.header("webhook-timestamp"),
        &got.body,
        got.header("webhook-signature"),
    );
    assert!(signed, "signed with the restored secret");
    again.stop().await;
}

/// A rotation as README "Operations" describes it: a new key from `hookgate keygen storage`,
/// the old one (the key file's) listed as previous, `hookgate storage rekey`; then the new key
/// alone opens the store and the old one is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_rotation_with_storage_rekey_leaves_everything_under_the_new_key() {
    if on_postgres() {
        return; // The same command on PostgreSQL is the store's rekey, tested in its unit tests.
    }
    let mut gw = TestGateway::start("topics:\n  t: {}\n").await;
    let (status, created) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "billing", "url": "http://127.0.0.1:9/b", "topics": ["t"], "secret": SECRET}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    gw.stop().await;
    let dir = gw.dir.clone();

    let (ok, new_key, err) = run_binary(&["keygen", "storage"]);
    assert!(ok, "{err}");
    let new_key = new_key.trim().to_owned();
    hookgate::store::EncryptionKey::from_base64(&new_key).expect("keygen prints a storage key");
    let old_key = std::fs::read_to_string(dir.path().join("hookgate.key")).unwrap();
    let config = dir.path().join("rotating.yaml");
    let storage = |previous: &str| {
        format!(
            "storage:\n  path: {}/hookgate.db\n  encryption_key: {new_key}\n{previous}topics:\n  t: {{}}\n",
            dir.path().display()
        )
    };
    std::fs::write(
        &config,
        storage(&format!("  previous_encryption_keys: [{}]\n", old_key.trim())),
    )
    .unwrap();
    let (ok, out, err) = run_binary(&["storage", "rekey", "--config", &config.display().to_string()]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("encrypted 1 values again"), "{out}");

    // The new key alone opens it now, and the endpoint kept its secret.
    std::fs::write(&config, storage("")).unwrap();
    let (ok, out, err) = run_binary(&[
        "backup",
        "--config",
        &config.display().to_string(),
        "--to",
        &dir.path().join("after-rekey.db").display().to_string(),
    ]);
    assert!(ok && out.contains("storage.encryption_key"), "{out}{err}");
    let mut options = hookgate::store::SqliteOptions::new(dir.path().join("hookgate.db"));
    options.encryption_key = Some(hookgate::store::EncryptionKey::from_base64(&new_key).unwrap());
    let store = hookgate::store::SqliteStore::open(options).unwrap();
    use hookgate::store::Store as _;
    let page = hookgate::store::EndpointPage {
        limit: 10,
        ..Default::default()
    };
    let rows = store.api_endpoint_page(page).await.unwrap();
    assert!(
        rows[0].spec.contains(SECRET),
        "the secret opens under the new key"
    );
    store.close().await;
    // The old key (still in the key file) no longer opens it.
    let Err(e) = hookgate::store::SqliteStore::open(hookgate::store::SqliteOptions::new(
        dir.path().join("hookgate.db"),
    )) else {
        panic!("the old key still opened the store")
    };
    assert!(e.to_string().contains("does not open with the key"), "{e}");
}
