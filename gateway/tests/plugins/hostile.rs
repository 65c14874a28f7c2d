//! Hostile plugins: wall-clock limits, fair call slots, budgeted host work, size and compile limits, key forms.

use super::bundled::backoff_input;
use super::*;

/// How far past its limit a call may end: the deadline is checked at every 2 ms epoch tick and
/// by a timer; the rest is room for a busy CI machine.
const LIMIT_MARGIN: Duration = Duration::from_secs(2);

/// The slowest of `n` harmless transform calls, one after the other.
async fn slowest_harmless_call(host: &PluginHost, n: usize) -> Duration {
    let ce = binding("cloudevents", &[("source", "/harmless")]);
    let mut slowest = Duration::ZERO;
    for _ in 0..n {
        let started = Instant::now();
        host.transform(&ce, transform_input(br#"{"ok":true}"#))
            .await
            .unwrap();
        slowest = slowest.max(started.elapsed());
    }
    slowest
}

/// Harmless calls alongside hostile ones may be slower than alone, but never by a wait for a
/// hostile call to end (which would take its wall-clock limit).
fn assert_not_delayed(baseline: Duration, during: Duration, wall_limit: Duration) {
    let generous = baseline * 50 + Duration::from_millis(250);
    assert!(
        during < generous.min(wall_limit),
        "harmless calls took up to {during:?} beside hostile ones, {baseline:?} alone"
    );
}

/// Limits with a 1 s wall-clock limit (the default) and a CPU limit that a harmless call on a
/// busy test machine never reaches.
fn wall_clock_limits() -> PluginLimits {
    PluginLimits {
        call_timeout: Duration::from_millis(500),
        call_wall_timeout: Duration::from_secs(1),
        ..PluginLimits::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sleeping_plugin_is_stopped_at_its_wall_clock_limit_without_delaying_other_plugins() {
    let limits = wall_clock_limits();
    let wall = limits.call_wall_timeout;
    let f = host_with_limits(&["sleep-forever", "cloudevents"], limits);
    let baseline = slowest_harmless_call(&f.host, 20).await;

    // Forty sleeping calls over five endpoints, more than the sleeper's share of the slots
    // (64 slots, two plugins): the rest of them queue, on the sleeper's own slots only.
    let started = Instant::now();
    let sleepers: Vec<_> = (0..40)
        .map(|i| {
            let host = f.host.clone();
            tokio::spawn(async move {
                let mut input = transform_input(b"20000");
                input.endpoint_name = format!("sleepy-{}", i % 5);
                let failure = host
                    .transform(&binding("sleep-forever", &[]), input)
                    .await
                    .unwrap_err();
                (failure, started.elapsed())
            })
        })
        .collect();
    let during = slowest_harmless_call(&f.host, 20).await;
    let harmless_done = started.elapsed();
    let mut ended = Vec::new();
    for sleeper in sleepers {
        let (failure, elapsed) = sleeper.await.unwrap();
        assert_eq!(failure.detail, FailureDetail::Timeout, "{failure}");
        assert!(
            failure.message.contains("wall-clock limit of 1000 ms"),
            "{}",
            failure.message
        );
        ended.push(elapsed);
    }
    let first_end = ended.iter().min().copied().unwrap();
    let last_end = ended.iter().max().copied().unwrap();
    eprintln!(
        "sleepers: first ended after {first_end:?}, last after {last_end:?}; harmless calls: \
         slowest {baseline:?} alone, {during:?} beside the sleepers (all done after {harmless_done:?})"
    );
    assert!(
        harmless_done < first_end,
        "the harmless calls overlapped the sleepers"
    );
    assert_not_delayed(baseline, during, wall);
    // Two rounds of the sleeper's 32 slots, each ended at the limit, not after 20 s.
    assert!(first_end >= wall, "{first_end:?}");
    assert!(last_end < 2 * (wall + LIMIT_MARGIN), "{last_end:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_burning_host_crypto_fails_at_its_budget_or_time_limit_without_holding_the_runtime() {
    let limits = wall_clock_limits();
    let wall = limits.call_wall_timeout;
    let f = host_with_limits(&["crypto-burn", "cloudevents"], limits.clone());
    // Within the default budget of 8 MiB a call hashes 4 + 4 MiB, and the next HMAC is refused.
    let started = Instant::now();
    let over = f
        .host
        .sign(&binding("crypto-burn", &[]), sign_input(b"x", &["k"]))
        .await
        .unwrap_err();
    assert_eq!(over.detail, FailureDetail::CryptoBudget, "{over}");
    assert!(over.message.contains("over the budget"), "{}", over.message);
    assert!(started.elapsed() < wall + LIMIT_MARGIN);

    // With a budget too large to matter, the wall-clock limit stops it (hashing is host time,
    // which the CPU limit does not see), and the hashing, sliced and yielding, does not hold
    // the runtime's threads meanwhile. Each host call hashes 4 MiB: copying a host call's
    // arguments in is a step no limit can cut short, and other burners' copies are the
    // runtime being busy, which the wall clock leaves out.
    let unbudgeted = host_with_limits(
        &["crypto-burn", "cloudevents"],
        PluginLimits {
            hash_bytes_per_call: u64::MAX,
            ..limits
        },
    );
    let baseline = slowest_harmless_call(&unbudgeted.host, 20).await;
    let started = Instant::now();
    let burners: Vec<_> = (0..4)
        .map(|_| {
            let host = unbudgeted.host.clone();
            tokio::spawn(async move {
                let failure = host
                    .sign(&binding("crypto-burn", &[("mib", "4")]), sign_input(b"x", &["k"]))
                    .await
                    .unwrap_err();
                (failure, started.elapsed())
            })
        })
        .collect();
    let during = slowest_harmless_call(&unbudgeted.host, 20).await;
    let harmless_done = started.elapsed();
    for burner in burners {
        let (failure, elapsed) = burner.await.unwrap();
        assert_eq!(failure.detail, FailureDetail::Timeout, "{failure}");
        assert!(
            harmless_done < elapsed,
            "the harmless calls overlapped the burners"
        );
        assert!(elapsed < wall + LIMIT_MARGIN, "{elapsed:?}");
        eprintln!("crypto burner stopped after {elapsed:?}: {}", failure.message);
    }
    eprintln!("harmless calls: slowest {baseline:?} alone, {during:?} beside four crypto burners");
    assert_not_delayed(baseline, during, wall);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stack_overflow_is_reported_as_such() {
    let f = host_with(&["stack-overflow"]);
    let failure = f
        .host
        .transform(&binding("stack-overflow", &[]), transform_input(b"{}"))
        .await
        .unwrap_err();
    assert_eq!(failure.detail, FailureDetail::StackOverflow, "{failure}");
    assert!(
        failure.message.contains("stack overflowed"),
        "{}",
        failure.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_answers_are_raised_to_the_hosts_floor() {
    let f = host_with(&["decorrelated-jitter"]);
    let b = binding("decorrelated-jitter", &[("base_ms", "1"), ("cap_ms", "1")]);
    assert_eq!(
        f.host.backoff(&b, backoff_input(None, 0)).await.unwrap(),
        PluginBackoffDecision::RetryIn(PluginLimits::default().min_backoff_delay)
    );
    assert_eq!(PluginLimits::default().min_backoff_delay, Duration::from_secs(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_plugin_file_is_refused_without_compiling_it() {
    let limits = PluginLimits {
        max_file_bytes: 1 << 20,
        ..PluginLimits::default()
    };
    let f = host_with_limits(&["cloudevents"], limits.clone());
    let misses = f.host.cache_stats().misses;
    // A working component made larger than the limit by a custom section.
    let mut oversized = std::fs::read(built_plugin("github-signature")).unwrap();
    let padding = vec![0u8; (1 << 20) + 1];
    oversized.push(0);
    let mut len = padding.len() as u64 + 2; // name length byte + name byte + padding
    loop {
        let byte = (len & 0x7f) as u8;
        len >>= 7;
        oversized.push(if len == 0 { byte } else { byte | 0x80 });
        if len == 0 {
            break;
        }
    }
    oversized.extend_from_slice(&[1, b'x']);
    oversized.extend_from_slice(&padding);
    let path = f.dir.path().join("too-big.wasm");
    std::fs::write(&path, &oversized).unwrap();
    f.host.rescan().await.unwrap();
    assert_eq!(f.host.world_of("too-big"), None);
    assert_eq!(f.host.cache_stats().misses, misses, "nothing was compiled");
    let refused = check_file(&path, &limits).unwrap_err();
    assert!(
        format!("{refused:#}").contains("over the plugin file limit"),
        "{refused:#}"
    );
    // Within the limit, the same content loads.
    let roomy = PluginLimits {
        max_file_bytes: 4 << 20,
        ..PluginLimits::default()
    };
    assert_eq!(check_file(&path, &roomy).unwrap().world, World::Signer);
}

/// A plugin whose compiled code is larger than the host allows is refused (from a fresh compile
/// and from the cache alike), and one whose compilation runs past the time limit is refused; `plugin check` says the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compiled_code_size_and_compile_time_have_limits() {
    let tight_code = PluginLimits {
        max_compiled_bytes: 1024,
        ..PluginLimits::default()
    };
    let f = host_with_limits(&["cloudevents"], tight_code.clone());
    assert_eq!(f.host.world_of("cloudevents"), None, "its code is over 1 KiB");
    let refused = check_file(&built_plugin("cloudevents"), &tight_code).unwrap_err();
    assert!(
        format!("{refused:#}").contains("compiled code takes"),
        "{refused:#}"
    );

    let tight_time = PluginLimits {
        max_compile_time: Duration::from_micros(1),
        ..PluginLimits::default()
    };
    let refused = check_file(&built_plugin("cloudevents"), &tight_time).unwrap_err();
    assert!(
        format!("{refused:#}").contains("compiling took longer than the limit"),
        "{refused:#}"
    );

    // With the default limits the same file loads.
    assert_eq!(
        check_file(&built_plugin("cloudevents"), &PluginLimits::default())
            .unwrap()
            .world,
        World::Transformer
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn key_handles_offer_the_secret_as_written_and_its_standard_webhooks_form() {
    let f = host_with(&["github-signature", "stripe-signature"]);
    let raw_key = b"standard webhooks key bytes";
    let secret = format!(
        "whsec_{}",
        base64::Engine::encode(&base64::engine::general_purpose::STANDARD, raw_key)
    );
    // The bundled signers use the secret as written, `whsec_` and all, like GitHub and Stripe.
    let github = f
        .host
        .sign(&binding("github-signature", &[]), sign_input(b"{}", &[&secret]))
        .await
        .unwrap();
    assert_eq!(
        header(&github, "X-Hub-Signature-256").unwrap(),
        format!("sha256={}", hmac_sha256_hex(secret.as_bytes(), b"{}"))
    );
    assert_ne!(
        header(&github, "X-Hub-Signature-256").unwrap(),
        format!("sha256={}", hmac_sha256_hex(raw_key, b"{}"))
    );
    // A signer that asks for the Standard Webhooks form gets the decoded rest; a plain secret
    // is the same in both forms; a `whsec_` secret that does not decode has no such form.
    let forms = host_with(&["forge-headers"]);
    let standard = binding("forge-headers", &[("form", "standard-webhooks")]);
    let as_written = binding("forge-headers", &[]);
    for (b, secret, key) in [
        (&standard, secret.as_str(), &raw_key[..]),
        (&as_written, secret.as_str(), secret.as_bytes()),
        (&standard, "plain", b"plain"),
    ] {
        let headers = forms.host.sign(b, sign_input(b"{}", &[secret])).await.unwrap();
        assert_eq!(
            header(&headers, "x-forge-signature").unwrap(),
            hmac_sha256_hex(key, b"{}")
        );
    }
    let undecodable = forms
        .host
        .sign(&standard, sign_input(b"{}", &["whsec_not base64!"]))
        .await
        .unwrap_err();
    assert_eq!(undecodable.detail, FailureDetail::BadSecret, "{undecodable}");
    // A `whsec_` secret whose rest is not base64 still works as written.
    let stripe = f
        .host
        .sign(
            &binding("stripe-signature", &[]),
            sign_input(b"{}", &["whsec_not base64!"]),
        )
        .await
        .unwrap();
    let t = NOW_MS / 1000;
    assert_eq!(
        header(&stripe, "Stripe-Signature").unwrap(),
        format!(
            "t={t},v1={}",
            hmac_sha256_hex(b"whsec_not base64!", format!("{t}.{{}}").as_bytes())
        )
    );
}
