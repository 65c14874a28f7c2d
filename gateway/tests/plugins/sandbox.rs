//! The sandbox: what a plugin cannot reach, and how bad bindings and files fail.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_hostile_fixture_fails_only_its_own_call_while_a_signer_keeps_working() {
    let f = host_with(&[
        "github-signature",
        "loop-forever",
        "memory-bomb",
        "huge-output",
        "trap",
    ]);
    let started = Instant::now();
    let hostile: Vec<_> = ["loop-forever", "memory-bomb", "huge-output", "trap"]
        .into_iter()
        .map(|name| {
            let host = f.host.clone();
            tokio::spawn(async move {
                let err = host
                    .transform(&binding(name, &[]), transform_input(b"{}"))
                    .await
                    .unwrap_err();
                (name, err, started.elapsed())
            })
        })
        .collect();

    // Meanwhile another plugin keeps serving, on the same host and runtime.
    let signer = binding("github-signature", &[]);
    for _ in 0..20 {
        let headers = f
            .host
            .sign(
                &signer,
                sign_input(b"Hello, World!", &["It's a Secret to Everybody"]),
            )
            .await
            .unwrap();
        assert_eq!(
            header(&headers, "X-Hub-Signature-256"),
            Some("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
        );
    }
    let signer_done = started.elapsed();

    let mut results = Vec::new();
    for task in hostile {
        results.push(task.await.unwrap());
    }
    let [looped, bomb, huge, trapped] = <[_; 4]>::try_from(results).unwrap();
    assert_eq!(looped.1.detail, FailureDetail::Timeout, "{}", looped.1);
    assert!(
        signer_done < looped.2,
        "20 signer calls ({signer_done:?}) finished while the loop was still running ({:?})",
        looped.2
    );
    assert!(
        looped.2 < Duration::from_secs(5),
        "the deadline stopped the loop ({:?})",
        looped.2
    );
    assert_eq!(bomb.1.detail, FailureDetail::Memory, "{}", bomb.1);
    assert!(bomb.1.message.contains("memory"), "{}", bomb.1.message);
    assert_eq!(huge.1.detail, FailureDetail::OutputTooLarge, "{}", huge.1);
    assert_eq!(trapped.1.detail, FailureDetail::Trap, "{}", trapped.1);
    for (name, failure, _) in [&looped, &bomb, &huge, &trapped] {
        assert_eq!(failure.plugin, *name);
        assert_eq!(failure.version.as_deref().map(str::len), Some(12));
    }
    // A failed call leaves nothing behind: the same plugin fails the same way again, and the
    // others still work.
    let again = f
        .host
        .transform(&binding("trap", &[]), transform_input(b"{}"))
        .await
        .unwrap_err();
    assert_eq!(again.detail, FailureDetail::Trap);
    assert!(f.host.sign(&signer, sign_input(b"x", &["k"])).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_cannot_reach_files_environment_or_network() {
    let f = host_with(&["try-escape"]);
    // Things the gateway process itself can reach, so "denied" means the sandbox said no.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    assert!(Path::new("/etc/passwd").exists());
    let (_, report) = forwarded(
        f.host
            .transform(&binding("try-escape", &[]), transform_input(b"{}"))
            .await
            .unwrap(),
    );
    let report = report.as_object().unwrap();
    assert!(report.len() >= 10, "{report:?}");
    for (what, outcome) in report {
        assert!(
            outcome == "denied" || outcome == "empty",
            "{what}: {outcome} in {report:?}"
        );
    }
    drop(listener);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_and_wrongly_bound_plugins_fail_with_their_own_details() {
    let f = host_with(&["github-signature", "cloudevents"]);
    let missing = f
        .host
        .transform(&binding("not-there", &[]), transform_input(b"{}"))
        .await
        .unwrap_err();
    assert_eq!(missing.detail, FailureDetail::Missing);
    assert_eq!(missing.version, None);

    let wrong = f
        .host
        .transform(&binding("github-signature", &[]), transform_input(b"{}"))
        .await
        .unwrap_err();
    assert_eq!(wrong.detail, FailureDetail::WrongWorld);
    assert_eq!(f.host.world_of("github_signature"), Some(World::Signer));
    assert_eq!(f.host.world_of("cloudevents"), Some(World::Transformer));
    assert_eq!(f.host.world_of("not-there"), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_sees_only_its_own_bindings_config_and_secret() {
    let f = host_with(&["cloudevents", "github-signature"]);
    let host = &f.host;
    let calls = (0..16).map(|i| async move {
        let source = format!("https://tenant-{i}.example");
        let secret = format!("secret-of-tenant-{i}");
        let body = format!(r#"{{"tenant":{i}}}"#);
        let (_, doc) = forwarded(
            host.transform(
                &binding("cloudevents", &[("source", &source)]),
                transform_input(body.as_bytes()),
            )
            .await
            .unwrap(),
        );
        assert_eq!(doc["source"], source.as_str());
        assert_eq!(doc["data"]["tenant"], i);
        let headers = host
            .sign(
                &binding("github-signature", &[]),
                sign_input(body.as_bytes(), &[&secret]),
            )
            .await
            .unwrap();
        assert_eq!(
            header(&headers, "X-Hub-Signature-256").unwrap(),
            format!("sha256={}", hmac_sha256_hex(secret.as_bytes(), body.as_bytes()))
        );
    });
    futures_util::future::join_all(calls).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_that_do_not_fit_the_contract_are_rejected_at_load_without_harming_the_rest() {
    let f = host_with(&["github-signature", "unknown-import", "wrong-signature"]);
    std::fs::write(f.dir.path().join("corrupt.wasm"), b"\0asm not really").unwrap();
    f.host.rescan().await.unwrap();
    let loaded: Vec<String> = f.host.loaded().into_iter().map(|l| l.name).collect();
    assert_eq!(loaded, ["github-signature"]);
    for name in ["unknown-import", "wrong-signature", "corrupt"] {
        let err = f
            .host
            .transform(&binding(name, &[]), transform_input(b"{}"))
            .await
            .unwrap_err();
        assert_eq!(err.detail, FailureDetail::Missing, "{name}");
    }

    let limits = PluginLimits::default();
    let unknown = check_file(&built_plugin("unknown-import"), &limits).unwrap_err();
    assert!(format!("{unknown:#}").contains("cannot be linked"), "{unknown:#}");
    assert!(format!("{unknown:#}").contains("host-secrets"), "{unknown:#}");
    let wrong = check_file(&built_plugin("wrong-signature"), &limits).unwrap_err();
    assert!(
        format!("{wrong:#}").contains("does not have the transformer world's type"),
        "{wrong:#}"
    );
}
