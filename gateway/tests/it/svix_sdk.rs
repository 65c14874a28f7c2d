//! Svix's official SDKs against the real binary, with only the server URL changed: the Python
//! suite (`tests/svix/sdk_suite.py`), the Node.js smoke (`tests/svix/smoke.mjs`), the Rust
//! smoke (`tests/svix/rust`, the `svix` crate) and the `hookgate import svix` round trip (`tests/svix/import_round_trip.py`), on the suite's store
//! (SQLite, and PostgreSQL when `tests/postgres.rs` runs the suite). The portal link the
//! Python suite gets is then opened in Chromium.
//!
//! `scripts/install-svix.sh` installs the pinned `svix` packages into `target/svix/`. Without
//! them these tests say SKIPPED (past the harness's capture) and pass, unless
//! `HOOKGATE_TEST_SVIX_REQUIRED=1` (set by CI), when they fail.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

use crate::binary::RealGateway;
use crate::webdriver::Browser;

const ADMIN: &str = "svix-admin-key";
const ACME: &str = "svix-acme-key";

/// The gateway's keys: an admin's and one of tenant `acme` (the Python suite's application).
fn server_yaml() -> String {
    format!("  api_keys: [\"{ADMIN}\", {{key: \"{ACME}\", tenant: \"acme\"}}]\n")
}

const YAML: &str = "delivery:\n  allow_networks: [127.0.0.0/8]\n  timeout: 5s\n";

/// `target/svix/` of the gateway's workspace.
fn svix_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/svix")
}

/// `tests/svix/`, where the suites are.
fn suites_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/svix")
}

/// Says that an SDK is missing: a failure when CI requires the SDKs, else a visible skip.
fn missing(test: &str, what: &str) {
    assert!(
        std::env::var_os("HOOKGATE_TEST_SVIX_REQUIRED").is_none(),
        "{test}: {what} is not installed and HOOKGATE_TEST_SVIX_REQUIRED is set; run scripts/install-svix.sh"
    );
    use std::io::Write as _;
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: {what} is not installed (run scripts/install-svix.sh)"
    );
}

/// The virtualenv's Python when it has the `svix` package.
fn python() -> Option<PathBuf> {
    let python = svix_dir().join("venv/bin/python");
    let ok = python.exists()
        && Command::new(&python)
            .args(["-c", "import svix"])
            .status()
            .is_ok_and(|s| s.success());
    ok.then_some(python)
}

/// Runs a suite to its end and fails the test with its output unless it passed.
fn run_suite(mut command: Command, what: &str) -> String {
    let out = command
        .output()
        .unwrap_or_else(|e| panic!("running the {what}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // The suite's own lines, whatever the outcome: its list of SDK calls is a record.
    println!("{text}");
    assert!(out.status.success(), "the {what} failed:\n{text}");
    assert!(
        text.lines()
            .any(|l| l.ends_with(" 0 failed") && !l.starts_with('0')),
        "the {what} ran no check:\n{text}"
    );
    text
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_python_sdk_drives_the_svix_api_and_its_portal_link_opens_the_console() {
    let Some(python) = python() else {
        return missing("svix python suite", "the `svix` Python package");
    };
    let dir = tempfile::tempdir().unwrap();
    let gw = RealGateway::start_on_suite_store(dir.path(), &server_yaml(), YAML, &[]).await;
    let results = dir.path().join("results.json");
    let mut command = Command::new(&python);
    command
        .arg(suites_dir().join("sdk_suite.py"))
        .env("HOOKGATE_URL", &gw.base)
        .env("HOOKGATE_ADMIN_KEY", ADMIN)
        .env("HOOKGATE_ACME_KEY", ACME)
        .env("SVIX_SUITE_RESULTS", &results);
    run_suite(command, "Python SDK suite");

    // The portal link opens hookgate's console, signed in as the application's tenant.
    let results: Value = serde_json::from_slice(&std::fs::read(&results).unwrap()).unwrap();
    let Some(browser) = Browser::start(1280, 900).await else {
        return;
    };
    browser.goto(results["portal_url"].as_str().unwrap()).await;
    browser.wait_for_text("Tenant acme").await;
    // The overview done first: a view still loading would draw over the next one.
    browser.wait_for_text("delivered in the last hour").await;
    browser.goto(&format!("{}/console/#/endpoints", gw.base)).await;
    let own = results["own_endpoint"].as_str().unwrap();
    browser.wait_for_text(own).await;
    let page = browser.page_text().await;
    let other = results["other_endpoint"].as_str().unwrap();
    assert!(
        !page.contains(other),
        "another application's endpoint shows: {page}"
    );
    browser.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_node_sdk_sends_and_its_webhook_class_verifies() {
    let node_dir = svix_dir().join("node");
    if !node_dir.join("node_modules/svix/package.json").exists() {
        return missing("svix node smoke", "the `svix` npm package");
    }
    let dir = tempfile::tempdir().unwrap();
    let gw = RealGateway::start_on_suite_store(dir.path(), &server_yaml(), YAML, &[]).await;
    // An ES module resolves `svix` from the node_modules of a folder above it.
    let scratch = tempfile::tempdir_in(&node_dir).unwrap();
    let script = scratch.path().join("smoke.mjs");
    std::fs::copy(suites_dir().join("smoke.mjs"), &script).unwrap();
    let mut command = Command::new("node");
    command
        .arg(&script)
        .env("HOOKGATE_URL", &gw.base)
        .env("HOOKGATE_ADMIN_KEY", ADMIN);
    run_suite(command, "Node.js SDK smoke");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_rust_sdk_sends_and_its_webhook_type_verifies() {
    let smoke = svix_dir().join("rust/svix-rust-smoke");
    if !smoke.exists() {
        return missing("svix rust smoke", "the Rust smoke built with the `svix` crate");
    }
    let dir = tempfile::tempdir().unwrap();
    let gw = RealGateway::start_on_suite_store(dir.path(), &server_yaml(), YAML, &[]).await;
    let mut command = Command::new(&smoke);
    command
        .env("HOOKGATE_URL", &gw.base)
        .env("HOOKGATE_ADMIN_KEY", ADMIN);
    run_suite(command, "Rust SDK smoke");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn import_svix_copies_a_setup_and_its_receivers_keep_verifying() {
    let Some(python) = python() else {
        return missing("svix import round trip", "the `svix` Python package");
    };
    let (from, to) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let source = RealGateway::start_on_suite_store(from.path(), &server_yaml(), YAML, &[]).await;
    let target = RealGateway::start_on_suite_store(to.path(), &server_yaml(), YAML, &[]).await;
    let mut command = Command::new(&python);
    command
        .arg(suites_dir().join("import_round_trip.py"))
        .env("HOOKGATE_BIN", env!("CARGO_BIN_EXE_hookgate"))
        .env("SOURCE_URL", &source.base)
        .env("SOURCE_KEY", ADMIN)
        .env("TARGET_URL", &target.base)
        .env("TARGET_KEY", ADMIN);
    run_suite(command, "import round trip");
}
