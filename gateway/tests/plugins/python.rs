//! A second guest language: a Python plugin built with componentize-py.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_plugin_built_with_componentize_py_forwards_and_drops() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::copy(
        support::plugin_build::built_python_plugin(),
        dir.path().join("type-filter.wasm"),
    )
    .unwrap();
    let limits = PluginLimits {
        call_timeout: Duration::from_millis(500),
        memory_bytes: 64 << 20,
        ..PluginLimits::default()
    };
    let host = PluginHost::with_bundled(
        dir.path().to_owned(),
        cache.path().to_owned(),
        limits,
        Metrics::new(),
        Vec::new(),
    )
    .unwrap();
    assert_eq!(host.world_of("type-filter"), Some(World::Transformer));
    let b = binding(
        "type-filter",
        &[("drop_types", "test.*, internal.ping"), ("label", "shop")],
    );

    let result = host
        .transform(&b, transform_input(br#"{"order":42}"#))
        .await
        .unwrap();
    let TransformResult::Forward { headers, body } = result else {
        panic!("expected forward, got {result:?}")
    };
    assert_eq!(header(&headers, "X-Event-Type-Label"), Some("shop"));
    assert_eq!(&body[..], br#"{"order":42}"#);

    let mut test_event = transform_input(b"{}");
    test_event.event.event_type = "test.created".into();
    assert_eq!(
        host.transform(&b, test_event).await.unwrap(),
        TransformResult::Drop {
            reason: "event type test.created matches test.*".into()
        }
    );
}
