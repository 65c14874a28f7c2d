//! The two versions of the contract side by side. A plugin built against the first version
//! (`wit/v1/plugin.wit`: the message copied in whole, a whole message answered) loads and runs
//! beside the current build of the same plugin (the message lent as a resource, edits
//! answered), and both answer the same; the current one enters the plugin fewer times per call.

use hookgate::plugins::Crossings;

use super::*;

/// The bundled plugins that have a first-version build among the fixtures, as (current, first).
const PAIRS: [(&str, &str); 2] = [
    ("cloudevents", "v1-cloudevents"),
    ("github-signature", "v1-github-signature"),
];

fn all_builds() -> Vec<&'static str> {
    PAIRS
        .iter()
        .flat_map(|(current, first)| [*current, *first])
        .collect()
}

/// A signer's input as a delivery gives it: the request's headers so far (without the
/// endpoint's configured ones) and a JSON body.
fn delivery_sign_input() -> SignInput {
    let mut input = sign_input(br#"{"order_id":"ord_1","amount":4200}"#, &["whsec_c2VjcmV0"]);
    input.headers = [
        ("content-type", "application/json"),
        ("webhook-id", "evt_1"),
        ("webhook-timestamp", "1767225600"),
        ("hookgate-event-type", "order.created"),
        ("hookgate-delivery-attempt", "1"),
        (
            "traceparent",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ),
    ]
    .iter()
    .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
    .collect();
    input
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_first_version_plugin_runs_beside_the_current_one_and_answers_the_same() {
    let fixture = host_with(&all_builds());
    let host = &fixture.host;
    let config = [("source", "https://shop.example"), ("subject", "orders")];
    for body in [&br#"{"order_id":"ord_1"}"#[..], b"not json"] {
        let current = host
            .transform(&binding("cloudevents", &config), transform_input(body))
            .await
            .unwrap();
        let first = host
            .transform(&binding("v1-cloudevents", &config), transform_input(body))
            .await
            .unwrap();
        assert_eq!(current, first);
    }
    let current = host
        .sign(&binding("github-signature", &[]), delivery_sign_input())
        .await
        .unwrap();
    let first = host
        .sign(&binding("v1-github-signature", &[]), delivery_sign_input())
        .await
        .unwrap();
    assert_eq!(current, first);
    let expected = hmac_sha256_hex(b"whsec_c2VjcmV0", &delivery_sign_input().body);
    assert_eq!(
        header(&current, "x-hub-signature-256"),
        Some(format!("sha256={expected}").as_str())
    );
}

#[test]
fn check_names_the_contract_version_a_plugin_was_built_against() {
    for (current, first) in PAIRS {
        let report = check_file(&built_plugin(current), &PluginLimits::default()).unwrap();
        assert_eq!(report.contract, "hookgate:plugin@0.2.0");
        assert!(report.sample.is_ok(), "{report}");
        let report = check_file(&built_plugin(first), &PluginLimits::default()).unwrap();
        assert_eq!(report.contract, "hookgate:plugin@0.1.0");
        assert!(report.sample.is_ok(), "{report}");
        assert!(report.to_string().contains("contract:     hookgate:plugin@0.1.0"));
    }
}

/// The crossings of one call of each plugin, on an instance that served a call already (as
/// the gateway's calls mostly run): (transform, signer).
async fn crossings_per_call(host: &PluginHost, transform: &str, signer: &str) -> (Crossings, Crossings) {
    let config = [("source", "https://shop.example")];
    let transform = binding(transform, &config);
    let signer = binding(signer, &[]);
    let mut per_call = Vec::new();
    for _ in 0..2 {
        host.take_crossings();
        host.transform(&transform, transform_input(br#"{"order_id":"ord_1"}"#))
            .await
            .unwrap();
        let transformed = host.take_crossings();
        host.sign(&signer, delivery_sign_input()).await.unwrap();
        per_call.push((transformed, host.take_crossings()));
    }
    // Counts, not timings: the same calls cross the same number of times.
    assert_eq!(per_call[0], per_call[1]);
    per_call[1]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_contract_enters_the_plugin_fewer_times_per_call() {
    let fixture = host_with(&all_builds());
    let host = &fixture.host;
    host.count_crossings();
    let (transform_v1, sign_v1) = crossings_per_call(host, "v1-cloudevents", "v1-github-signature").await;
    let (transform, sign) = crossings_per_call(host, "cloudevents", "github-signature").await;
    eprintln!("cloudevents: first version {transform_v1:?}, current {transform:?}");
    eprintln!("github-signature: first version {sign_v1:?}, current {sign:?}");
    // The header list and body are no longer lowered with a `cabi_realloc` each: fewer entries
    // into the plugin. Reading a header and the body on demand are host calls instead, so the
    // transform, which reads both, crosses no more often than before; the signer, which reads
    // only the body, half as often.
    let total = |c: Crossings| c.guest_entries + c.host_calls;
    assert!(
        transform.guest_entries < transform_v1.guest_entries,
        "{transform:?} vs {transform_v1:?}"
    );
    assert!(
        total(transform) <= total(transform_v1),
        "{transform:?} vs {transform_v1:?}"
    );
    assert!(total(sign) < total(sign_v1), "{sign:?} vs {sign_v1:?}");
    // The hook counted: the export was entered, and the signer asked the host for its HMAC.
    assert!(transform.guest_entries > 0 && sign.host_calls > 0);
}
