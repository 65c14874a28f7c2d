//! What plugins cost: one call of a transform and of a signer on a 1 KiB body, and a
//! transform + sign pair as one delivery runs them — as the gateway runs them (an idle
//! instance of the binding reused), and with reuse turned off (a fresh store and instance per
//! call); and the reload latency from a file write to the first call that uses the new version.
//!
//! Run with `cargo bench -p hookgate --bench plugins`; the plugins are built on demand.

#[path = "../tests/support/plugin_build.rs"]
mod plugin_build;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use criterion::{Criterion, criterion_group, criterion_main};
use hookgate::model::{PluginBinding, Secret};
use hookgate::plugins::{EventInfo, PluginHost, PluginLimits, SignInput, TransformInput};
use hookgate::telemetry::Metrics;

fn binding(plugin: &str, config: &[(&str, &str)]) -> PluginBinding {
    PluginBinding {
        plugin: plugin.to_owned(),
        config: config
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect::<BTreeMap<_, _>>(),
    }
}

/// A 1 KiB JSON payload.
fn body_1kib() -> Bytes {
    let mut body = String::from(r#"{"order_id":"ord_123","lines":["#);
    while body.len() < 1000 {
        body.push_str(r#"{"sku":"abc-123","qty":1},"#);
    }
    body.pop();
    body.push_str("]}");
    while body.len() < 1024 {
        body.insert(body.len() - 1, ' ');
    }
    Bytes::from(body)
}

fn transform_input(body: &Bytes) -> TransformInput {
    TransformInput {
        endpoint_name: "billing".into(),
        endpoint_url: "https://billing.example/hooks".into(),
        event: EventInfo {
            id: "evt_1".into(),
            topic: "orders".into(),
            event_type: "order.created".into(),
            received_at_ms: 1_767_225_600_000,
        },
        delivery_id: "dlv_1".into(),
        attempt: 1,
        now_ms: 1_767_225_601_000,
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: body.clone(),
    }
}

fn sign_input(body: &Bytes) -> SignInput {
    SignInput {
        endpoint_name: "billing".into(),
        endpoint_url: "https://billing.example/hooks".into(),
        delivery_id: "dlv_1".into(),
        attempt: 1,
        now_ms: 1_767_225_601_000,
        headers: Vec::new(),
        body: body.clone(),
        secrets: vec![Secret::new("whsec_c2VjcmV0LWtleS1ieXRlcw==")],
    }
}

fn host_with(dir: &Path, cache: &Path, plugins: &[&str]) -> PluginHost {
    host_with_limits(dir, cache, plugins, PluginLimits::default())
}

fn host_with_limits(dir: &Path, cache: &Path, plugins: &[&str], limits: PluginLimits) -> PluginHost {
    plugin_build::install_plugins(dir, plugins);
    PluginHost::with_bundled(
        dir.to_owned(),
        cache.to_owned(),
        limits,
        Metrics::new(),
        Vec::new(),
    )
    .unwrap()
}

fn per_call_reused(c: &mut Criterion) {
    per_call(c, "plugin_call_1kib", PluginLimits::default());
}

fn per_call_fresh(c: &mut Criterion) {
    let limits = PluginLimits {
        idle_instances: 0,
        ..PluginLimits::default()
    };
    per_call(c, "plugin_call_1kib_fresh_instance", limits);
}

fn per_call(c: &mut Criterion, group_name: &str, limits: PluginLimits) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let host = host_with_limits(
        dir.path(),
        cache.path(),
        &["cloudevents", "github-signature", "redact"],
        limits,
    );
    eprintln!("pooling allocator: {}", host.uses_pooling_allocator());
    let body = body_1kib();
    let cloudevents = binding("cloudevents", &[("source", "https://shop.example")]);
    let redact = binding("redact", &[("paths", "lines")]);
    let github = binding("github-signature", &[]);

    let mut group = c.benchmark_group(group_name);
    group.bench_function("transform_cloudevents", |b| {
        b.iter(|| {
            runtime
                .block_on(host.transform(&cloudevents, transform_input(&body)))
                .unwrap()
        })
    });
    group.bench_function("transform_redact", |b| {
        b.iter(|| {
            runtime
                .block_on(host.transform(&redact, transform_input(&body)))
                .unwrap()
        })
    });
    group.bench_function("sign_github", |b| {
        b.iter(|| runtime.block_on(host.sign(&github, sign_input(&body))).unwrap())
    });
    group.bench_function("transform_then_sign", |b| {
        b.iter(|| {
            runtime.block_on(async {
                host.transform(&cloudevents, transform_input(&body))
                    .await
                    .unwrap();
                host.sign(&github, sign_input(&body)).await.unwrap()
            })
        })
    });
    group.finish();
    eprintln!("{group_name}: {:?}", host.instance_stats());
}

/// Appends a custom section to a component: same behaviour, new content (and hash), so the
/// host has to compile it afresh.
fn with_custom_section(component: &[u8], n: u64) -> Vec<u8> {
    fn leb128(mut value: u64, out: &mut Vec<u8>) {
        loop {
            let byte = (value & 0x7f) as u8;
            value >>= 7;
            if value == 0 {
                out.push(byte);
                return;
            }
            out.push(byte | 0x80);
        }
    }
    let name = b"hookgate-bench";
    let payload = n.to_le_bytes();
    let mut content = Vec::new();
    leb128(name.len() as u64, &mut content);
    content.extend_from_slice(name);
    content.extend_from_slice(&payload);
    let mut out = component.to_vec();
    out.push(0); // custom section id
    leb128(content.len() as u64, &mut out);
    out.extend_from_slice(&content);
    out
}

fn reload(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let host = host_with(dir.path(), cache.path(), &[]);
    let shutdown = tokio_util::sync::CancellationToken::new();
    let watcher = runtime.spawn({
        let host = host.clone();
        let shutdown = shutdown.clone();
        async move { host.watch(shutdown).await }
    });
    let github = std::fs::read(plugin_build::built_plugin("github-signature")).unwrap();
    let path = dir.path().join("hooks.wasm");
    let hooks = binding("hooks", &[]);
    let body = body_1kib();
    let mut generation = 0u64;

    // Time from writing a new version of `hooks.wasm` to the first call answered by it.
    let reload_once = |bytes: Vec<u8>| -> Duration {
        let expected = hex_sha256(&bytes)[..12].to_owned();
        let mut changes = host.changes();
        let started = Instant::now();
        let tmp = dir.path().join(".hooks.wasm.tmp");
        std::fs::write(&tmp, &bytes).unwrap();
        std::fs::rename(&tmp, &path).unwrap();
        runtime.block_on(async {
            while host.version_of("hooks").as_deref() != Some(expected.as_str()) {
                tokio::time::timeout(Duration::from_secs(30), changes.changed())
                    .await
                    .expect("reload within 30 s")
                    .unwrap();
            }
            host.sign(&hooks, sign_input(&body)).await.unwrap();
        });
        started.elapsed()
    };

    let mut group = c.benchmark_group("plugin_reload");
    group.sample_size(10);
    group.bench_function("write_to_first_use_new_content_compiled", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    generation += 1;
                    reload_once(with_custom_section(&github, generation))
                })
                .sum()
        })
    });
    // Two contents alternating: after the first round both are in the compilation cache.
    let a = with_custom_section(&github, u64::MAX);
    let b_bytes = with_custom_section(&github, u64::MAX - 1);
    reload_once(a.clone());
    reload_once(b_bytes.clone());
    let mut flip = false;
    group.bench_function("write_to_first_use_cached_artifact", |b| {
        b.iter_custom(|iters| {
            (0..iters)
                .map(|_| {
                    flip = !flip;
                    reload_once(if flip { a.clone() } else { b_bytes.clone() })
                })
                .sum()
        })
    });
    group.finish();
    shutdown.cancel();
    runtime.block_on(watcher).unwrap();
}

fn hex_sha256(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

criterion_group!(benches, per_call_reused, per_call_fresh, reload);
criterion_main!(benches);
