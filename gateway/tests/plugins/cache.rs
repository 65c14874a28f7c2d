//! The compilation cache and `plugin check`.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_loads_compiled_artifacts_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let plugins = ["github-signature", "cloudevents", "redact", "decorrelated-jitter"];
    install_plugins(dir.path(), &plugins);

    let started = Instant::now();
    let first = PluginHost::with_bundled(
        dir.path().to_owned(),
        cache.path().to_owned(),
        PluginLimits::default(),
        Metrics::new(),
        Vec::new(),
    )
    .unwrap();
    let cold = started.elapsed();
    assert_eq!(first.cache_stats().misses, plugins.len() as u64);
    assert_eq!(first.cache_stats().hits, 0);
    drop(first);

    let started = Instant::now();
    let second = PluginHost::with_bundled(
        dir.path().to_owned(),
        cache.path().to_owned(),
        PluginLimits::default(),
        Metrics::new(),
        Vec::new(),
    )
    .unwrap();
    let warm = started.elapsed();
    assert_eq!(second.cache_stats().hits, plugins.len() as u64);
    assert_eq!(second.cache_stats().misses, 0);
    eprintln!(
        "start with {} plugins: cold {cold:?}, from cache {warm:?}",
        plugins.len()
    );
    let headers = second
        .sign(
            &binding("github-signature", &[]),
            sign_input(b"Hello, World!", &["It's a Secret to Everybody"]),
        )
        .await
        .unwrap();
    assert!(header(&headers, "X-Hub-Signature-256").is_some());
}

#[test]
fn check_reports_world_imports_size_and_a_sample_run() {
    let limits = PluginLimits::default();
    let report = check_file(&built_plugin("github-signature"), &limits).unwrap();
    assert_eq!(report.world, World::Signer);
    assert_eq!(report.name, "github_signature".replace('_', "-"));
    assert!(
        report
            .imports
            .iter()
            .any(|i| i.starts_with("hookgate:plugin/crypto@0.2.0")),
        "{:?}",
        report.imports
    );
    assert!(report.size_bytes > 1000);
    let answer = report.sample.as_ref().unwrap();
    assert!(answer.contains("X-Hub-Signature-256: sha256="), "{answer}");
    let text = report.to_string();
    assert!(text.contains("world:        signer"), "{text}");

    let looping = check_file(&built_plugin("loop-forever"), &limits).unwrap();
    assert_eq!(looping.world, World::Transformer);
    assert_eq!(looping.sample.unwrap_err().detail, FailureDetail::Timeout);

    let not_a_component = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(not_a_component.path(), b"\0asm\x01\0\0\0").unwrap();
    assert!(check_file(not_a_component.path(), &limits).is_err());
}
