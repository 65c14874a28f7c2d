//! The SNS delivery-policy validator on arbitrary documents: JSON values, and the same bytes
//! as the verbatim-JSON string form. A policy it accepts must hold together: its per-retry
//! delays add up to the total it validated against the 3600 s limit, each delay lies between
//! 0 and `maxDelayTarget`, backoff delays never fall, and its preview is computable.

#![no_main]

use hookgate::policy::{Phase, Policy, PolicyKind, PolicySpec, preview};
use libfuzzer_sys::fuzz_target;

fn check(document: serde_json::Value) {
    let spec = PolicySpec {
        sns: Some(document),
        ..PolicySpec::default()
    };
    let Ok(policy) = Policy::from_spec("fuzzed", &spec) else {
        return;
    };
    let PolicyKind::Sns(sns) = policy.kind() else {
        panic!("an `sns` document made a schedule policy");
    };
    let total_s = sns.total_delay_s();
    assert!(total_s <= 3600.0 + 1e-6, "accepted a policy of {total_s} s");
    let (mut sum_s, mut previous_backoff_s) = (0.0_f64, f64::NEG_INFINITY);
    for k in 1..=sns.num_retries {
        let (delay_s, phase) = sns.retry_delay_s(k).expect("every retry has a delay");
        assert!(
            (0.0..=f64::from(sns.max_delay_s) + 1e-9).contains(&delay_s),
            "retry {k}: {delay_s} s"
        );
        if phase == Phase::Backoff {
            assert!(delay_s + 1e-9 >= previous_backoff_s, "backoff fell at retry {k}");
            previous_backoff_s = delay_s;
        }
        sum_s += delay_s;
    }
    assert!(sns.retry_delay_s(sns.num_retries + 1).is_none());
    assert!(
        (sum_s - total_s).abs() <= 1e-6 * total_s.max(1.0),
        "the delays add up to {sum_s} s, the total says {total_s} s"
    );
    let planned = preview(&policy);
    assert_eq!(planned.len() as u64, u64::from(sns.num_retries) + 1);
    let last = planned.last().expect("attempt 1 is always planned");
    assert!(last.at.as_secs_f64() <= total_s + 0.001 * planned.len() as f64);
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(value) = serde_json::from_str::<serde_json::Value>(text) {
        check(value);
    }
    check(serde_json::Value::String(text.to_owned()));
});
