//! Hot reload: the folder watcher follows drops, replacements, corruption, deletes and renames.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_reload_follows_drop_replace_corrupt_delete_and_rename_into_place() {
    let f = host_with(&[]);
    let host = f.host.clone();
    let shutdown = tokio_util::sync::CancellationToken::new();
    let watcher = tokio::spawn({
        let host = host.clone();
        let shutdown = shutdown.clone();
        async move { host.watch(shutdown).await }
    });
    let path = f.dir.path().join("hooks.wasm");
    let b = binding("hooks", &[]);
    let signed_with = |headers: &[(String, Vec<u8>)]| {
        if header(headers, "X-Hub-Signature-256").is_some() {
            "github"
        } else if header(headers, "Stripe-Signature").is_some() {
            "stripe"
        } else {
            "unknown"
        }
    };

    // Drop: a new file is picked up.
    let github = std::fs::read(built_plugin("github-signature")).unwrap();
    std::fs::write(&path, &github).unwrap();
    wait_for(&host, "the dropped plugin", RELOAD_TIMEOUT, |h| {
        h.world_of("hooks").is_some()
    })
    .await;
    let headers = host.sign(&b, sign_input(b"x", &["k"])).await.unwrap();
    assert_eq!(signed_with(&headers), "github");
    let github_version = host.version_of("hooks").unwrap();

    // Replace: the new content serves the next call.
    std::fs::write(&path, std::fs::read(built_plugin("stripe-signature")).unwrap()).unwrap();
    wait_for(&host, "the replaced plugin", RELOAD_TIMEOUT, |h| {
        h.version_of("hooks").is_some_and(|v| v != github_version)
    })
    .await;
    let headers = host.sign(&b, sign_input(b"x", &["k"])).await.unwrap();
    assert_eq!(signed_with(&headers), "stripe");
    let stripe_version = host.version_of("hooks").unwrap();

    // Corrupt: rejected, the previous version keeps serving.
    let generation = *host.changes().borrow();
    std::fs::write(&path, b"\0asm this is not a component").unwrap();
    wait_for(&host, "the corrupt file's rejection", RELOAD_TIMEOUT, |h| {
        *h.changes().borrow() > generation
    })
    .await;
    assert_eq!(host.version_of("hooks").as_deref(), Some(stripe_version.as_str()));
    let headers = host.sign(&b, sign_input(b"x", &["k"])).await.unwrap();
    assert_eq!(signed_with(&headers), "stripe");
    // The rejection is listed with its reason (`GET /v1/plugins` and the console show it).
    let rejected = host.rejected();
    assert_eq!(rejected.len(), 1, "{rejected:?}");
    assert_eq!(rejected[0].name, "hooks");
    assert!(!rejected[0].error.is_empty());

    // Delete: the plugin is gone, calls fail with `missing`.
    std::fs::remove_file(&path).unwrap();
    wait_for(&host, "the deletion", RELOAD_TIMEOUT, |h| {
        h.world_of("hooks").is_none()
    })
    .await;
    let missing = host.sign(&b, sign_input(b"x", &["k"])).await.unwrap_err();
    assert_eq!(missing.detail, FailureDetail::Missing);

    // Rename into place: written elsewhere in the folder under another name, then renamed.
    let staging = f.dir.path().join("hooks.wasm.partial");
    std::fs::write(&staging, &github).unwrap();
    std::fs::rename(&staging, &path).unwrap();
    wait_for(&host, "the renamed plugin", RELOAD_TIMEOUT, |h| {
        h.world_of("hooks").is_some()
    })
    .await;
    let headers = host.sign(&b, sign_input(b"x", &["k"])).await.unwrap();
    assert_eq!(signed_with(&headers), "github");
    assert_eq!(host.version_of("hooks").as_deref(), Some(github_version.as_str()));
    assert!(host.rejected().is_empty(), "a good file clears the rejection");

    shutdown.cancel();
    watcher.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_finishes_on_the_version_it_started_with() {
    let limits = PluginLimits {
        call_timeout: Duration::from_millis(300),
        ..PluginLimits::default()
    };
    let f = host_with_limits(&[], limits);
    let path = f.dir.path().join("slow.wasm");
    std::fs::copy(built_plugin("loop-forever"), &path).unwrap();
    f.host.rescan().await.unwrap();
    let loop_version = f.host.version_of("slow").unwrap();
    // Poll the call once: it picks its version, instantiates and runs until its first yield.
    let b = binding("slow", &[]);
    let mut in_flight = Box::pin(f.host.transform(&b, transform_input(b"{}")));
    assert!(futures_util::poll!(&mut in_flight).is_pending());
    std::fs::copy(built_plugin("cloudevents"), &path).unwrap();
    f.host.rescan().await.unwrap();
    assert_ne!(f.host.version_of("slow").unwrap(), loop_version);
    // The old version's call still ends the old version's way.
    let old = in_flight.await.unwrap_err();
    assert_eq!(old.detail, FailureDetail::Timeout);
    // New calls get the new version.
    let (_, doc) = forwarded(
        f.host
            .transform(&binding("slow", &[]), transform_input(b"{}"))
            .await
            .unwrap(),
    );
    assert_eq!(doc["specversion"], "1.0");
}

/// A plugin built into the binary serves without a file; a file of the same name overrides it,
/// and when that file goes the bundled one serves again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundled_plugin_serves_until_a_file_overrides_it_and_again_after() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let github = Bytes::from(std::fs::read(built_plugin("github-signature")).unwrap());
    let host = PluginHost::with_bundled(
        dir.path().to_owned(),
        cache.path().to_owned(),
        PluginLimits::default(),
        Metrics::new(),
        vec![("hooks".to_owned(), github)],
    )
    .unwrap();
    let b = binding("hooks", &[]);
    let signs_with = |headers: &[(String, Vec<u8>)], name: &str| header(headers, name).is_some();
    let headers = host.sign(&b, sign_input(b"x", &["k"])).await.unwrap();
    assert!(
        signs_with(&headers, "X-Hub-Signature-256"),
        "the bundled plugin serves"
    );
    let bundled_version = host.version_of("hooks").unwrap();

    let file = dir.path().join("hooks.wasm");
    std::fs::copy(built_plugin("stripe-signature"), &file).unwrap();
    host.rescan().await.unwrap();
    let headers = host.sign(&b, sign_input(b"x", &["k"])).await.unwrap();
    assert!(signs_with(&headers, "Stripe-Signature"), "the file overrides it");

    std::fs::remove_file(&file).unwrap();
    host.rescan().await.unwrap();
    let headers = host.sign(&b, sign_input(b"x", &["k"])).await.unwrap();
    assert!(
        signs_with(&headers, "X-Hub-Signature-256"),
        "the bundled one is back"
    );
    assert_eq!(host.version_of("hooks").unwrap(), bundled_version);
}
