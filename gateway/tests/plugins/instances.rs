//! Instance reuse: an idle instance serves only later calls of its own binding, and is dropped when it misbehaved or grew. And what every call counts in the metrics.

use super::*;

/// What the `stateful` fixture reports about the instance that served a call.
#[derive(Debug, PartialEq, Eq)]
struct Served {
    /// Calls the instance has served, this one included.
    calls: u32,
    first_endpoint: String,
    first_tag: String,
}

/// Calls the `stateful` fixture (loaded as `plugin`) for endpoint `endpoint` at `url`, with
/// config `tag` (none when empty) and `body`.
async fn call_stateful(
    host: &PluginHost,
    plugin: &str,
    (endpoint, url): (&str, &str),
    tag: &str,
    body: &[u8],
) -> Result<Served, hookgate::plugins::PluginFailure> {
    let config: &[(&str, &str)] = if tag.is_empty() { &[] } else { &[("tag", tag)] };
    let mut input = transform_input(body);
    input.endpoint_name = endpoint.to_owned();
    input.endpoint_url = url.to_owned();
    match host.transform(&binding(plugin, config), input).await? {
        TransformResult::Forward { headers, .. } => Ok(Served {
            calls: header(&headers, "x-calls").unwrap().parse().unwrap(),
            first_endpoint: header(&headers, "x-first-endpoint").unwrap().to_owned(),
            first_tag: header(&headers, "x-first-tag").unwrap().to_owned(),
        }),
        TransformResult::Drop { reason } => panic!("the stateful fixture dropped: {reason}"),
    }
}

fn served(calls: u32, first_endpoint: &str, first_tag: &str) -> Served {
    Served {
        calls,
        first_endpoint: first_endpoint.to_owned(),
        first_tag: first_tag.to_owned(),
    }
}

const BILLING: (&str, &str) = ("billing", "https://billing.example/hooks");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_serves_later_calls_of_its_own_binding_and_no_other() {
    let f = host_with(&["stateful"]);
    let host = &f.host;
    for n in 1..=3 {
        let answer = call_stateful(host, "stateful", BILLING, "a", b"{}")
            .await
            .unwrap();
        assert_eq!(answer, served(n, "billing", "a"));
    }
    // Another endpoint, the same endpoint under another URL, or the same endpoint with another
    // config: each is another binding and starts on an instance of its own.
    let shipping = ("shipping", "https://shipping.example/hooks");
    let moved = ("billing", "https://billing.example/v2/hooks");
    assert_eq!(
        call_stateful(host, "stateful", shipping, "a", b"{}")
            .await
            .unwrap(),
        served(1, "shipping", "a")
    );
    assert_eq!(
        call_stateful(host, "stateful", moved, "a", b"{}").await.unwrap(),
        served(1, "billing", "a")
    );
    assert_eq!(
        call_stateful(host, "stateful", BILLING, "b", b"{}")
            .await
            .unwrap(),
        served(1, "billing", "b")
    );
    assert_eq!(
        call_stateful(host, "stateful", shipping, "a", b"{}")
            .await
            .unwrap(),
        served(2, "shipping", "a")
    );
    // The first binding's instance was kept meanwhile.
    assert_eq!(
        call_stateful(host, "stateful", BILLING, "a", b"{}")
            .await
            .unwrap(),
        served(4, "billing", "a")
    );
    let stats = host.instance_stats();
    assert_eq!(stats.instantiated, 4, "{stats:?}");
    assert_eq!(stats.reused, 4, "{stats:?}");
    assert_eq!(stats.idle, 4, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_of_many_bindings_never_share_an_instance() {
    let f = host_with(&["stateful"]);
    let host = &f.host;
    let tenants = (0..12).map(|i| async move {
        let endpoint = format!("tenant-{i}");
        let url = format!("https://tenant-{i}.example/hooks");
        let tag = format!("tag-{}", i % 3);
        let mut most_calls = 0;
        for _ in 0..10 {
            let answer = call_stateful(host, "stateful", (&endpoint, &url), &tag, b"{}")
                .await
                .unwrap();
            assert_eq!(answer.first_endpoint, endpoint);
            assert_eq!(answer.first_tag, tag);
            most_calls = most_calls.max(answer.calls);
        }
        most_calls
    });
    let most_calls = futures_util::future::join_all(tenants).await;
    // Each tenant's calls went one after the other, so its later calls found its instance.
    assert!(most_calls.iter().all(|&n| n >= 2), "{most_calls:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trapped_instance_is_dropped_and_the_next_call_starts_afresh() {
    let f = host_with(&["stateful"]);
    let host = &f.host;
    call_stateful(host, "stateful", BILLING, "", b"{}").await.unwrap();
    assert_eq!(
        call_stateful(host, "stateful", BILLING, "", b"{}").await.unwrap(),
        served(2, "billing", "")
    );
    let trapped = call_stateful(host, "stateful", BILLING, "", b"trap")
        .await
        .unwrap_err();
    assert_eq!(trapped.detail, FailureDetail::Trap, "{trapped}");
    assert_eq!(
        call_stateful(host, "stateful", BILLING, "", b"{}").await.unwrap(),
        served(1, "billing", "")
    );
    // The plugin's own error is an answer, not a failure of the instance: it is kept.
    let refused = call_stateful(host, "stateful", BILLING, "", b"grow lots")
        .await
        .unwrap_err();
    assert_eq!(refused.detail, FailureDetail::Plugin, "{refused}");
    assert_eq!(
        call_stateful(host, "stateful", BILLING, "", b"{}").await.unwrap(),
        served(3, "billing", "")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_that_grew_past_the_reuse_limit_is_not_reused() {
    let limits = PluginLimits {
        reuse_max_growth_bytes: 3 << 20,
        ..PluginLimits::default()
    };
    let f = host_with_limits(&["stateful"], limits);
    let host = &f.host;
    // 1 MiB more is within the limit: the instance is kept.
    call_stateful(host, "stateful", BILLING, "", b"grow 1")
        .await
        .unwrap();
    assert_eq!(
        call_stateful(host, "stateful", BILLING, "", b"{}").await.unwrap(),
        served(2, "billing", "")
    );
    // 4 MiB more is past it: the call succeeds, its instance is dropped after it.
    assert_eq!(
        call_stateful(host, "stateful", BILLING, "", b"grow 4")
            .await
            .unwrap(),
        served(3, "billing", "")
    );
    assert_eq!(host.instance_stats().idle, 0);
    assert_eq!(
        call_stateful(host, "stateful", BILLING, "", b"{}").await.unwrap(),
        served(1, "billing", "")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_instance_keeps_counting_memory_against_the_cap() {
    let limits = PluginLimits {
        memory_bytes: 8 << 20,
        reuse_max_growth_bytes: 8 << 20,
        ..PluginLimits::default()
    };
    let f = host_with_limits(&["stateful"], limits);
    let host = &f.host;
    // Each call keeps 4 MiB: a fresh instance can, this one has grown too much by the second.
    call_stateful(host, "stateful", BILLING, "", b"grow 4")
        .await
        .unwrap();
    let over = call_stateful(host, "stateful", BILLING, "", b"grow 4")
        .await
        .unwrap_err();
    assert_eq!(over.detail, FailureDetail::Memory, "{over}");
    // The overrun instance is gone; the next call starts afresh and fits again.
    assert_eq!(
        call_stateful(host, "stateful", BILLING, "", b"grow 4")
            .await
            .unwrap(),
        served(1, "billing", "")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idle_instances_are_capped_and_the_least_recently_used_goes_first() {
    let limits = PluginLimits {
        idle_instances: 2,
        ..PluginLimits::default()
    };
    let f = host_with_limits(&["stateful"], limits);
    let host = &f.host;
    let endpoint = |name: &'static str| (name, "https://receiver.example/hooks");
    for name in ["a", "b", "c"] {
        call_stateful(host, "stateful", endpoint(name), "", b"{}")
            .await
            .unwrap();
    }
    assert_eq!(host.instance_stats().idle, 2);
    // `a` was the least recently used when `c` came back: it starts afresh (and pushes `b` out).
    assert_eq!(
        call_stateful(host, "stateful", endpoint("a"), "", b"{}")
            .await
            .unwrap(),
        served(1, "a", "")
    );
    assert_eq!(
        call_stateful(host, "stateful", endpoint("c"), "", b"{}")
            .await
            .unwrap(),
        served(2, "c", "")
    );
    assert_eq!(
        call_stateful(host, "stateful", endpoint("b"), "", b"{}")
            .await
            .unwrap(),
        served(1, "b", "")
    );

    // With no idle instances allowed, every call gets a fresh one.
    let fresh = host_with_limits(
        &["stateful"],
        PluginLimits {
            idle_instances: 0,
            ..PluginLimits::default()
        },
    );
    for _ in 0..3 {
        assert_eq!(
            call_stateful(&fresh.host, "stateful", BILLING, "", b"{}")
                .await
                .unwrap(),
            served(1, "billing", "")
        );
    }
    assert_eq!(fresh.host.instance_stats().reused, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_is_replaced_after_ten_thousand_calls() {
    let f = host_with(&["github-signature"]);
    let github = binding("github-signature", &[]);
    let expected = format!("sha256={}", hmac_sha256_hex(b"k", b"x"));
    for n in 1..=10_001 {
        let headers = f.host.sign(&github, sign_input(b"x", &["k"])).await.unwrap();
        if n == 1 || n >= 10_000 {
            assert_eq!(header(&headers, "X-Hub-Signature-256"), Some(expected.as_str()));
        }
    }
    let stats = f.host.instance_stats();
    assert_eq!(stats.instantiated, 2, "{stats:?}");
    assert_eq!(stats.reused, 9_999, "{stats:?}");
}

/// `component` with a custom section appended: the same behaviour under a new SHA-256.
fn with_custom_section(component: &[u8], tag: u8) -> Vec<u8> {
    let name = b"hookgate-test";
    let content_len = 1 + name.len() + 1;
    let mut out = component.to_vec();
    out.push(0); // custom section id
    out.push(u8::try_from(content_len).unwrap()); // LEB128 of a length under 128
    out.push(u8::try_from(name.len()).unwrap());
    out.extend_from_slice(name);
    out.push(tag);
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_reload_calls_run_on_instances_of_the_new_version() {
    let f = host_with(&[]);
    let host = &f.host;
    let path = f.dir.path().join("hooks.wasm");
    let stateful = std::fs::read(built_plugin("stateful")).unwrap();
    std::fs::write(&path, with_custom_section(&stateful, 1)).unwrap();
    host.rescan().await.unwrap();
    let first_version = host.version_of("hooks").unwrap();
    for n in 1..=2 {
        assert_eq!(
            call_stateful(host, "hooks", BILLING, "", b"{}").await.unwrap(),
            served(n, "billing", "")
        );
    }
    assert_eq!(host.instance_stats().idle, 1);

    // The same code under a new hash is a new version: its instances start afresh, and the
    // old version's idle instance is dropped with the swap.
    std::fs::write(&path, with_custom_section(&stateful, 2)).unwrap();
    host.rescan().await.unwrap();
    assert_ne!(host.version_of("hooks").unwrap(), first_version);
    assert_eq!(host.instance_stats().idle, 0);
    for n in 1..=2 {
        assert_eq!(
            call_stateful(host, "hooks", BILLING, "", b"{}").await.unwrap(),
            served(n, "billing", "")
        );
    }

    // Reloading the first content again is yet another load: no instance of the first load
    // comes back.
    std::fs::write(&path, with_custom_section(&stateful, 1)).unwrap();
    host.rescan().await.unwrap();
    assert_eq!(host.version_of("hooks").unwrap(), first_version);
    assert_eq!(
        call_stateful(host, "hooks", BILLING, "", b"{}").await.unwrap(),
        served(1, "billing", "")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_in_flight_during_a_reload_does_not_return_its_instance_to_the_pool() {
    let f = host_with(&[]);
    let host = &f.host;
    let path = f.dir.path().join("hooks.wasm");
    let stateful = std::fs::read(built_plugin("stateful")).unwrap();
    std::fs::write(&path, with_custom_section(&stateful, 1)).unwrap();
    host.rescan().await.unwrap();
    call_stateful(host, "hooks", BILLING, "", b"{}").await.unwrap();
    // Busy for 30 ms: the call yields at the first epoch tick, still on the old version
    // when the reload swaps it out.
    let mut in_flight = Box::pin(call_stateful(host, "hooks", BILLING, "", b"busy 30"));
    assert!(futures_util::poll!(&mut in_flight).is_pending());
    std::fs::write(&path, with_custom_section(&stateful, 2)).unwrap();
    host.rescan().await.unwrap();
    assert_eq!(in_flight.await.unwrap(), served(2, "billing", ""));
    assert_eq!(
        host.instance_stats().idle,
        0,
        "the old version's instance was not kept"
    );
    assert_eq!(
        call_stateful(host, "hooks", BILLING, "", b"{}").await.unwrap(),
        served(1, "billing", "")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reused_signer_signs_each_call_with_that_calls_keys_only() {
    let f = host_with(&["stripe-signature", "github-signature"]);
    let host = &f.host;
    let body = br#"{"id":"evt_1"}"#;
    let t = NOW_MS / 1000;
    let signed = [format!("{t}.").as_bytes(), &body[..]].concat();
    let stripe = binding("stripe-signature", &[]);
    let v1 = |secret: &str| format!("v1={}", hmac_sha256_hex(secret.as_bytes(), &signed));
    // Rotating, rotated, rotating again with a third key: the same endpoint's instance each
    // time, and each signature names exactly the keys of its own call.
    let calls: [&[&str]; 4] = [&["new", "old"], &["new"], &["newer", "new"], &["newer"]];
    for secrets in calls {
        let headers = host.sign(&stripe, sign_input(body, secrets)).await.unwrap();
        let expected: Vec<String> = secrets.iter().map(|s| v1(s)).collect();
        assert_eq!(
            header(&headers, "Stripe-Signature").unwrap(),
            format!("t={t},{}", expected.join(","))
        );
    }
    let github = binding("github-signature", &[]);
    for secret in ["first", "second", "first"] {
        let headers = host.sign(&github, sign_input(body, &[secret])).await.unwrap();
        assert_eq!(
            header(&headers, "X-Hub-Signature-256").unwrap(),
            format!("sha256={}", hmac_sha256_hex(secret.as_bytes(), body))
        );
    }
    let stats = host.instance_stats();
    assert_eq!(stats.instantiated, 2, "{stats:?}");
    assert_eq!(stats.reused, 5, "{stats:?}");
}

/// The value of one series in the metrics' text, or 0 when it is not there.
fn series(text: &str, name_and_labels: &str) -> f64 {
    text.lines()
        .find_map(|line| line.strip_prefix(name_and_labels)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_counted_under_its_plugin_and_outcome_however_the_binding_spells_it() {
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    std::fs::copy(built_plugin("stateful"), dir.path().join("state_ful.wasm")).unwrap();
    let metrics = Metrics::new();
    let host = PluginHost::with_bundled(
        dir.path().to_owned(),
        cache.path().to_owned(),
        PluginLimits::default(),
        metrics.clone(),
        Vec::new(),
    )
    .unwrap();
    // A plugin that was never called has no series yet.
    assert!(
        !metrics.render().contains("hookgate_plugin_calls_total"),
        "{}",
        metrics.render()
    );
    // The file's `_` is a `-` in the plugin's name; a binding may write either.
    for spelled in ["state-ful", "state_ful", "state-ful.wasm"] {
        call_stateful(&host, spelled, BILLING, "", b"{}").await.unwrap();
    }
    let trapped = call_stateful(&host, "state_ful", BILLING, "", b"trap")
        .await
        .unwrap_err();
    assert_eq!(
        (trapped.plugin.as_str(), trapped.detail),
        ("state-ful", FailureDetail::Trap)
    );
    let missing = host
        .transform(&binding("absent_one", &[]), transform_input(b"{}"))
        .await
        .unwrap_err();
    assert_eq!(
        (missing.plugin.as_str(), missing.detail),
        ("absent-one", FailureDetail::Missing)
    );

    let text = metrics.render();
    let calls = |plugin: &str, outcome: &str| {
        series(
            &text,
            &format!("hookgate_plugin_calls_total{{plugin=\"{plugin}\",outcome=\"{outcome}\"}}"),
        )
    };
    assert_eq!(calls("state-ful", "ok"), 3.0, "{text}");
    assert_eq!(calls("state-ful", "trap"), 1.0, "{text}");
    assert_eq!(calls("absent-one", "missing"), 1.0, "{text}");
    // Every call that ran is timed; one that found no plugin did not run.
    assert_eq!(
        series(&text, "hookgate_plugin_call_duration_seconds_count"),
        4.0,
        "{text}"
    );
}
