//! The plugin host against the real bundled plugins and hostile fixtures (built on demand from
//! `plugins/`), one module per concern: known vectors of the bundled plugins, the sandbox, hot
//! reload, instance reuse, hostile plugins, the compilation cache, Python, the official verifiers.

#[path = "../support/plugin_build.rs"]
mod plugin_build;
mod support {
    pub(crate) use super::plugin_build;
}

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use hmac::{Hmac, Mac};
use hookgate::model::{PluginBinding, Secret};
use hookgate::plugins::{
    BackoffInput, EventInfo, FailureDetail, PluginBackoffDecision, PluginHost, PluginLimits, SignInput,
    TransformInput, TransformResult, World, check_file,
};
use hookgate::telemetry::Metrics;
use serde_json::{Value, json};
use sha2::Sha256;
use support::plugin_build::{built_plugin, install_plugins};

const NOW_MS: u64 = 1_767_225_600_000; // 2026-01-01T00:00:00Z

struct Fixture {
    host: PluginHost,
    dir: tempfile::TempDir,
    _cache: tempfile::TempDir,
}

fn host_with(plugins: &[&str]) -> Fixture {
    host_with_limits(plugins, PluginLimits::default())
}

fn host_with_limits(plugins: &[&str], limits: PluginLimits) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    install_plugins(dir.path(), plugins);
    let host = PluginHost::with_bundled(
        dir.path().to_owned(),
        cache.path().to_owned(),
        limits,
        Metrics::new(),
        Vec::new(),
    )
    .unwrap();
    Fixture {
        host,
        dir,
        _cache: cache,
    }
}

fn binding(plugin: &str, config: &[(&str, &str)]) -> PluginBinding {
    PluginBinding {
        plugin: plugin.to_owned(),
        config: config
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
    }
}

fn transform_input(body: &[u8]) -> TransformInput {
    TransformInput {
        endpoint_name: "billing".into(),
        endpoint_url: "https://billing.example/hooks".into(),
        event: EventInfo {
            id: "evt_1".into(),
            topic: "orders".into(),
            event_type: "order.created".into(),
            received_at_ms: NOW_MS - 1_500,
        },
        delivery_id: "dlv_1".into(),
        attempt: 1,
        now_ms: NOW_MS,
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: Bytes::copy_from_slice(body),
    }
}

fn sign_input(body: &[u8], secrets: &[&str]) -> SignInput {
    SignInput {
        endpoint_name: "billing".into(),
        endpoint_url: "https://billing.example/hooks".into(),
        delivery_id: "dlv_1".into(),
        attempt: 1,
        now_ms: NOW_MS,
        headers: Vec::new(),
        body: Bytes::copy_from_slice(body),
        secrets: secrets.iter().map(|s| Secret::new(*s)).collect(),
    }
}

fn header<'a>(headers: &'a [(String, Vec<u8>)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| std::str::from_utf8(v).unwrap())
}

fn hmac_sha256_hex(key: &[u8], data: &[u8]) -> String {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    mac.update(data);
    hex::encode(mac.finalize().into_bytes())
}

fn forwarded(result: TransformResult) -> (Vec<(String, Vec<u8>)>, Value) {
    match result {
        TransformResult::Forward { headers, body } => (headers, serde_json::from_slice(&body).unwrap()),
        TransformResult::Drop { reason } => panic!("expected forward, got drop: {reason}"),
    }
}

/// Waits (without fixed sleeps) until `condition` holds, woken by the host's change
/// notifications; fails after `timeout`.
async fn wait_for(host: &PluginHost, what: &str, timeout: Duration, condition: impl Fn(&PluginHost) -> bool) {
    let mut changes = host.changes();
    let deadline = tokio::time::Instant::now() + timeout;
    while !condition(host) {
        match tokio::time::timeout_at(deadline, changes.changed()).await {
            Ok(Ok(())) => {}
            Ok(Err(_)) => panic!("plugin host dropped while waiting for {what}"),
            Err(_) => panic!(
                "timed out after {timeout:?} waiting for {what}; loaded: {:?}",
                host.loaded()
            ),
        }
    }
}

const RELOAD_TIMEOUT: Duration = Duration::from_secs(20);

mod bundled;
mod cache;
mod contract_versions;
mod hostile;
mod hot_reload;
mod instances;
mod js;
mod python;
mod sandbox;
mod verifiers;
