//! The `js` plugin: Svix-style JavaScript transformations in the sandbox, from a binding's
//! config or from a `.js` file in the plugin folder.

use super::*;

const RESHAPE: &str = r#"
function handler(webhook) {
  webhook.payload = { type: webhook.eventType, data: webhook.payload, to: webhook.url };
  webhook.headers["x-shop"] = "eu";
  webhook.method = "PUT";
  return webhook;
}
"#;

fn js(code: &str) -> PluginBinding {
    binding("js", &[("code", code)])
}

async fn failure_of(host: &PluginHost, code: &str) -> hookgate::plugins::PluginFailure {
    host.transform(&js(code), transform_input(br#"{"n":1}"#))
        .await
        .expect_err("the call should fail")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_rewrites_payload_headers_and_method() {
    let f = host_with(&["js"]);
    let result = f
        .host
        .transform(&js(RESHAPE), transform_input(br#"{"n":1}"#))
        .await
        .unwrap();
    let (headers, body) = forwarded(result);
    assert_eq!(
        body,
        json!({"type": "order.created", "data": {"n": 1}, "to": "https://billing.example/hooks"})
    );
    assert_eq!(header(&headers, "x-shop"), Some("eu"));
    assert_eq!(header(&headers, "content-type"), Some("application/json"));
    assert_eq!(header(&headers, "hookgate-method"), Some("PUT"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_drops_the_delivery_with_its_reason() {
    let f = host_with(&["js"]);
    for (code, reason) in [
        (
            "function handler(w) { w.cancel = true; return w }",
            "cancelled by the JavaScript transformation",
        ),
        (
            "function handler(w) { w.cancel = 'test events stay home'; return w }",
            "test events stay home",
        ),
    ] {
        let result = f.host.transform(&js(code), transform_input(b"{}")).await.unwrap();
        assert_eq!(
            result,
            TransformResult::Drop {
                reason: reason.to_owned()
            }
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_url_is_read_only_and_a_text_body_stays_text() {
    let f = host_with(&["js"]);
    let code = "function handler(w) { w.url = 'https://elsewhere.example'; w.payload = w.payload + '!' + w.url; return w }";
    let mut input = transform_input(b"plain text");
    input.headers = vec![("content-type".into(), b"text/plain".to_vec())];
    match f.host.transform(&js(code), input).await.unwrap() {
        TransformResult::Forward { body, .. } => {
            assert_eq!(&body[..], b"plain text!https://billing.example/hooks")
        }
        other => panic!("{other:?}"),
    }
}

/// A throw, code that does not parse and a missing handler are the plugin's own errors; an
/// endless loop is stopped at the CPU limit and a 1 GiB allocation at the memory cap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throws_loops_and_memory_bombs_fail_with_their_own_kinds() {
    let f = host_with(&["js"]);
    let thrown = failure_of(&f.host, "function handler(w) { throw new Error('boom') }").await;
    assert_eq!(thrown.detail, FailureDetail::Plugin);
    assert!(thrown.message.starts_with("js_error: Error: boom"), "{thrown}");
    let unparsable = failure_of(&f.host, "function handler(w) {").await;
    assert_eq!(unparsable.detail, FailureDetail::Plugin);
    assert!(unparsable.message.starts_with("bad_config:"), "{unparsable}");
    let no_handler = failure_of(&f.host, "function other(w) { return w }").await;
    assert!(no_handler.message.contains("handler(webhook)"), "{no_handler}");
    let looping = failure_of(&f.host, "function handler(w) { while (true) {} }").await;
    assert_eq!(looping.detail, FailureDetail::Timeout, "{looping}");
    let bomb = failure_of(
        &f.host,
        "function handler(w) { w.payload = new ArrayBuffer(1024 * 1024 * 1024); return w }",
    )
    .await;
    assert_eq!(bomb.detail, FailureDetail::Memory, "{bomb}");
    // The engine still serves well-behaved code afterwards.
    f.host
        .transform(&js(RESHAPE), transform_input(b"{}"))
        .await
        .unwrap();
}

/// The code is parsed once per instance: calls of one binding run on the same instance, so
/// what the code keeps in a global counts up across them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_of_one_binding_reuse_the_compiled_code() {
    let f = host_with(&["js"]);
    let code = "let calls = 0; function handler(w) { calls += 1; w.payload = { calls }; return w }";
    for expected in 1..=3 {
        let (_, body) = forwarded(f.host.transform(&js(code), transform_input(b"{}")).await.unwrap());
        assert_eq!(body, json!({"calls": expected}));
    }
    let stats = f.host.instance_stats();
    assert_eq!((stats.instantiated, stats.reused), (1, 2), "{stats:?}");
}

/// `foo.js` in the folder is plugin `foo`, run by the `js` component; changing the file
/// reloads it, and code that does not parse keeps the previous version serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_js_file_is_a_plugin_and_reloads_when_it_changes() {
    let f = host_with(&["js"]);
    let path = f.dir.path().join("tag.js");
    let write = |code: &str| {
        let staging = f.dir.path().join(".tag.js.tmp");
        std::fs::write(&staging, code).unwrap();
        std::fs::rename(&staging, &path).unwrap();
    };
    write("function handler(w) { w.payload = { v: 1 }; return w }");
    f.host.rescan().await.unwrap();
    assert_eq!(f.host.world_of("tag"), Some(World::Transformer));
    let tag = binding("tag", &[]);
    let call = || async { forwarded(f.host.transform(&tag, transform_input(b"{}")).await.unwrap()).1 };
    assert_eq!(call().await, json!({"v": 1}));

    let watcher = {
        let host = f.host.clone();
        let shutdown = tokio_util::sync::CancellationToken::new();
        let token = shutdown.clone();
        (tokio::spawn(async move { host.watch(token).await }), shutdown)
    };
    let first = f.host.version_of("tag").unwrap();
    write("function handler(w) { w.payload = { v: 2 }; return w }");
    wait_for(&f.host, "tag.js v2", RELOAD_TIMEOUT, |h| {
        h.version_of("tag").is_some_and(|v| v != first)
    })
    .await;
    assert_eq!(call().await, json!({"v": 2}));

    let second = f.host.version_of("tag").unwrap();
    write("function handler(w) { return w");
    wait_for(&f.host, "tag.js rejected", RELOAD_TIMEOUT, |h| {
        h.rejected().iter().any(|r| r.name == "tag")
    })
    .await;
    assert_eq!(f.host.version_of("tag").as_deref(), Some(second.as_str()));
    assert_eq!(call().await, json!({"v": 2}));
    let rejected = f.host.rejected();
    assert!(rejected[0].error.contains("does not parse"), "{rejected:?}");

    std::fs::remove_file(&path).unwrap();
    wait_for(&f.host, "tag unloaded", RELOAD_TIMEOUT, |h| {
        h.world_of("tag").is_none()
    })
    .await;
    watcher.1.cancel();
    watcher.0.await.unwrap();
}

/// The cost of one call beside the Rust `cloudevents` transform, on reused instances: the
/// timed calls all answer right and run on the instance their binding's first call created
/// (no parse per call). The times are printed, not asserted: `hookgate-bench --only js`
/// measures the gateway end to end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cost_per_call_beside_the_rust_transform() {
    let f = host_with(&["js", "cloudevents"]);
    let body = br#"{"id":"ord_1","amount":4200,"currency":"eur","items":[{"sku":"a","qty":2}]}"#;
    let time = |binding: PluginBinding, key: &'static str| {
        let host = f.host.clone();
        async move {
            host.transform(&binding, transform_input(body)).await.unwrap();
            let started = Instant::now();
            for _ in 0..200 {
                let (_, answer) = forwarded(host.transform(&binding, transform_input(body)).await.unwrap());
                assert_eq!(answer[key]["id"], "ord_1", "{answer}");
            }
            started.elapsed() / 200
        }
    };
    let rust = time(binding("cloudevents", &[("source", "/shop")]), "data").await;
    let javascript = time(js(RESHAPE), "data").await;
    let stats = f.host.instance_stats();
    assert_eq!((stats.instantiated, stats.reused), (2, 400), "{stats:?}");
    let started = Instant::now();
    f.host
        .transform(
            &js("function handler(w) { return w } // fresh"),
            transform_input(body),
        )
        .await
        .unwrap();
    let first = started.elapsed();
    eprintln!(
        "per call on a reused instance: cloudevents {rust:?}, js {javascript:?}; \
         js first call (instantiate and parse) {first:?}"
    );
}

/// A `.js` file runs on the bundled `js` plugin when the folder has no `js.wasm`, and
/// overrides a bundled plugin of its name as a `.wasm` file does, until it goes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_js_file_runs_on_the_bundled_engine_and_overrides_a_bundled_plugin() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let bundled = ["js", "cloudevents"].map(|name| {
        (
            name.to_owned(),
            Bytes::from(std::fs::read(built_plugin(name)).unwrap()),
        )
    });
    let host = PluginHost::with_bundled(
        dir.path().to_owned(),
        cache.path().to_owned(),
        PluginLimits::default(),
        Metrics::new(),
        bundled.to_vec(),
    )
    .unwrap();
    let b = binding("cloudevents", &[("source", "/shop")]);
    let (_, body) = forwarded(host.transform(&b, transform_input(b"{}")).await.unwrap());
    assert_eq!(body["specversion"], "1.0", "the bundled plugin serves");

    let file = dir.path().join("cloudevents.js");
    std::fs::write(
        &file,
        "function handler(w) { w.payload = { from: 'js' }; return w }",
    )
    .unwrap();
    host.rescan().await.unwrap();
    let (_, body) = forwarded(host.transform(&b, transform_input(b"{}")).await.unwrap());
    assert_eq!(body, json!({"from": "js"}), "the file overrides it");

    std::fs::remove_file(&file).unwrap();
    host.rescan().await.unwrap();
    let (_, body) = forwarded(host.transform(&b, transform_input(b"{}")).await.unwrap());
    assert_eq!(body["specversion"], "1.0", "the bundled one is back");
}
