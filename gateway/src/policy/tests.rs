//! Tests of policies as a whole: building them from YAML, the presets, previews and charts.

use std::time::{Duration, Instant};

use proptest::prelude::*;
use serde_json::json;

use super::sns::seed_example_document;
use super::*;

fn schedule_spec(waits: &[&str]) -> PolicySpec {
    PolicySpec {
        schedule: Some(waits.iter().map(|w| (*w).to_owned()).collect()),
        ..PolicySpec::default()
    }
}

fn sns_spec(document: serde_json::Value) -> PolicySpec {
    PolicySpec {
        sns: Some(document),
        ..PolicySpec::default()
    }
}

/// The problems of a spec that must not build, as (path, message).
fn problems_of(name: &str, spec: &PolicySpec) -> Vec<(String, String)> {
    match Policy::from_spec(name, spec) {
        Ok(policy) => panic!("expected problems, got {policy:?}"),
        Err(problems) => problems.into_iter().map(|p| (p.path, p.message)).collect(),
    }
}

fn only_problem(name: &str, spec: &PolicySpec) -> (String, String) {
    let problems = problems_of(name, spec);
    assert_eq!(problems.len(), 1, "{problems:?}");
    problems.into_iter().next().unwrap_or_default()
}

fn secs(list: &[u64]) -> Vec<Duration> {
    list.iter().map(|s| Duration::from_secs(*s)).collect()
}

// ---- building policies -------------------------------------------------------------------

#[test]
fn a_schedule_policy_reads_waits_deadline_jitter_and_retry_on() {
    let spec = PolicySpec {
        deadline: Some("1h".into()),
        jitter: Some(0.1),
        retry_on: Some(RetryOn::Sns),
        ..schedule_spec(&["0s", "1s", "5s"])
    };
    let policy = Policy::from_spec("standard-fast", &spec).unwrap();
    assert_eq!(policy.name(), "standard-fast");
    assert_eq!(
        policy.kind(),
        &PolicyKind::Schedule(SchedulePolicy {
            waits: secs(&[0, 1, 5]),
            deadline: Some(Duration::from_secs(3600)),
        })
    );
    assert_eq!(policy.max_attempts(), 3);
    assert_eq!(policy.deadline(), Some(Duration::from_secs(3600)));
    assert_eq!(policy.jitter(), 0.1);
    assert_eq!(policy.retry_on(), RetryOn::Sns);
    assert_eq!(policy.content_type(), None);
    assert_eq!(policy.max_receives_per_second(), None);
}

#[test]
fn defaults_are_20_percent_jitter_and_retry_on_all_for_schedules_sns_for_sns() {
    let schedule = Policy::from_spec("s", &schedule_spec(&["0s", "10s"])).unwrap();
    assert_eq!(schedule.jitter(), 0.2);
    assert_eq!(schedule.retry_on(), RetryOn::All);
    assert_eq!(schedule.deadline(), None);
    let sns = Policy::from_spec("n", &sns_spec(json!({}))).unwrap();
    assert_eq!(sns.jitter(), 0.2);
    assert_eq!(sns.retry_on(), RetryOn::Sns);
    let sns_all = Policy::from_spec(
        "n",
        &PolicySpec {
            retry_on: Some(RetryOn::All),
            ..sns_spec(json!({}))
        },
    )
    .unwrap();
    assert_eq!(sns_all.retry_on(), RetryOn::All);
}

#[test]
fn an_sns_policy_exposes_throttle_and_content_type() {
    let policy = Policy::from_spec("seed", &sns_spec(seed_example_document())).unwrap();
    assert_eq!(policy.max_attempts(), 51);
    assert_eq!(policy.deadline(), None);
    assert_eq!(policy.max_receives_per_second(), Some(10));
    assert_eq!(policy.content_type(), Some("application/json"));
    let plain = Policy::from_spec("plain", &sns_spec(json!({}))).unwrap();
    assert_eq!(plain.content_type(), Some("text/plain; charset=UTF-8"));
}

#[test]
fn an_sns_policy_pasted_as_json_text_is_the_same_policy() {
    let text = seed_example_document().to_string();
    assert_eq!(
        Policy::from_spec("seed", &sns_spec(serde_json::Value::String(text))),
        Policy::from_spec("seed", &sns_spec(seed_example_document()))
    );
}

#[test]
fn a_user_policy_cannot_take_a_preset_name() {
    for name in Policy::preset_names() {
        let (path, message) = only_problem(name, &schedule_spec(&["0s"]));
        assert_eq!(path, "");
        assert_eq!(
            message,
            format!(
                "`{name}` is a built-in policy and cannot be redefined; use another name with \
                 `preset: {name}` to adjust it"
            )
        );
    }
}

#[test]
fn a_policy_needs_schedule_sns_or_preset() {
    assert_eq!(
        only_problem("p", &PolicySpec::default()),
        ("".into(), "needs one of `schedule`, `sns` or `preset`".into())
    );
}

#[test]
fn schedule_sns_and_preset_exclude_each_other() {
    let spec = PolicySpec {
        sns: Some(json!({})),
        ..schedule_spec(&["0s"])
    };
    assert_eq!(
        only_problem("p", &spec),
        (
            "".into(),
            "schedule and sns exclude each other; give exactly one".into()
        )
    );
}

#[test]
fn jitter_outside_0_to_1_is_refused() {
    let above = PolicySpec {
        jitter: Some(1.5),
        ..schedule_spec(&["0s"])
    };
    assert_eq!(
        only_problem("p", &above),
        ("jitter".into(), "1.5 is above the maximum 1".into())
    );
    let below = PolicySpec {
        jitter: Some(-0.1),
        ..schedule_spec(&["0s"])
    };
    assert_eq!(
        only_problem("p", &below),
        ("jitter".into(), "-0.1 is below the minimum 0".into())
    );
    for edge in [0.0, 1.0] {
        let spec = PolicySpec {
            jitter: Some(edge),
            ..schedule_spec(&["0s"])
        };
        assert_eq!(Policy::from_spec("p", &spec).unwrap().jitter(), edge);
    }
}

#[test]
fn a_bad_wait_is_refused_with_its_index() {
    let (path, message) = only_problem("p", &schedule_spec(&["0s", "30s", "2 fortnights"]));
    assert_eq!(path, "schedule[2]");
    assert!(
        message.starts_with("`2 fortnights` has an unknown unit `fortnights`"),
        "{message}"
    );
}

#[test]
fn an_empty_schedule_is_refused() {
    assert_eq!(
        only_problem("p", &schedule_spec(&[])),
        (
            "schedule".into(),
            "needs at least one wait: `0s`, the first attempt".into()
        )
    );
}

#[test]
fn the_first_wait_must_be_zero() {
    assert_eq!(
        only_problem("p", &schedule_spec(&["30s", "1m"])),
        (
            "schedule[0]".into(),
            "is the wait before the first attempt, which is made at once: write 0s, not 30s, and \
             put the waits between attempts after it"
                .into()
        )
    );
}

#[test]
fn a_bad_or_zero_deadline_is_refused() {
    let bad = PolicySpec {
        deadline: Some("soon".into()),
        ..schedule_spec(&["0s"])
    };
    let (path, message) = only_problem("p", &bad);
    assert_eq!(path, "deadline");
    assert!(message.starts_with("`soon` is not a duration"), "{message}");
    let zero = PolicySpec {
        deadline: Some("0s".into()),
        ..schedule_spec(&["0s"])
    };
    assert_eq!(
        only_problem("p", &zero),
        ("deadline".into(), "must be longer than 0s".into())
    );
}

#[test]
fn a_deadline_on_an_sns_policy_is_refused() {
    let spec = PolicySpec {
        deadline: Some("1h".into()),
        ..sns_spec(json!({}))
    };
    assert_eq!(
        only_problem("p", &spec),
        (
            "deadline".into(),
            "only schedule policies have a deadline; an SNS policy ends when its numRetries are used up"
                .into()
        )
    );
}

#[test]
fn sns_problems_carry_the_path_below_the_policy() {
    let spec = sns_spec(json!({ "healthyRetryPolicy": { "numRetries": 101 } }));
    let problem = Policy::from_spec("fast", &spec).unwrap_err().remove(0);
    assert_eq!(problem.path, "sns.healthyRetryPolicy.numRetries");
    assert_eq!(problem.message, "101 is above the maximum 100");
    assert_eq!(
        problem.full_path("fast"),
        "policies.fast.sns.healthyRetryPolicy.numRetries"
    );
    assert_eq!(
        problem.to_string(),
        "sns.healthyRetryPolicy.numRetries: 101 is above the maximum 100"
    );
}

#[test]
fn every_problem_of_a_policy_is_reported_at_once() {
    let spec = PolicySpec {
        schedule: Some(vec!["1x".into(), "forever".into()]),
        sns: Some(json!({ "healthyRetryPolicy": { "numRetries": 101 } })),
        jitter: Some(2.0),
        deadline: Some("later".into()),
        ..PolicySpec::default()
    };
    let paths: Vec<String> = problems_of("standard", &spec)
        .into_iter()
        .map(|(path, _)| path)
        .collect();
    assert_eq!(
        paths,
        vec![
            "",
            "",
            "jitter",
            "deadline",
            "schedule[0]",
            "schedule[1]",
            "sns.healthyRetryPolicy.numRetries"
        ]
    );
}

#[test]
fn a_policy_based_on_a_preset_overrides_jitter_retry_on_and_the_standard_deadline() {
    let spec = PolicySpec {
        preset: Some("standard".into()),
        jitter: Some(0.0),
        deadline: Some("24h".into()),
        ..PolicySpec::default()
    };
    let policy = Policy::from_spec("standard-exact", &spec).unwrap();
    assert_eq!(policy.jitter(), 0.0);
    assert_eq!(policy.max_attempts(), 9);
    assert_eq!(policy.deadline(), Some(Duration::from_secs(24 * 3600)));
    assert_eq!(policy.retry_on(), RetryOn::All);

    let spec = PolicySpec {
        preset: Some("sns-customer-managed".into()),
        retry_on: Some(RetryOn::All),
        ..PolicySpec::default()
    };
    let policy = Policy::from_spec("long", &spec).unwrap();
    assert_eq!(policy.retry_on(), RetryOn::All);
    assert_eq!(policy.max_attempts(), 51);
    assert_eq!(policy.jitter(), 0.2);
}

#[test]
fn an_unknown_preset_is_refused_with_the_list_of_presets() {
    let spec = PolicySpec {
        preset: Some("sns-default".into()),
        ..PolicySpec::default()
    };
    assert_eq!(
        only_problem("p", &spec),
        (
            "preset".into(),
            "unknown preset `sns-default`; the presets are standard, sns-http-default, \
             sns-aws-managed, sns-customer-managed"
                .into()
        )
    );
}

#[test]
fn a_deadline_on_an_sns_preset_is_refused() {
    let spec = PolicySpec {
        preset: Some("sns-http-default".into()),
        deadline: Some("1h".into()),
        ..PolicySpec::default()
    };
    assert_eq!(only_problem("p", &spec).0, "deadline");
}

#[test]
fn policy_specs_deserialize_from_config_shapes_and_refuse_unknown_keys() {
    let spec: PolicySpec = serde_json::from_value(json!({
        "schedule": ["0s", "1s", "5s"], "deadline": "1h", "jitter": 0.2, "retry_on": "all"
    }))
    .unwrap();
    assert_eq!(spec.retry_on, Some(RetryOn::All));
    assert!(Policy::from_spec("standard-fast", &spec).is_ok());
    let sns: PolicySpec = serde_json::from_value(json!({ "sns": seed_example_document() })).unwrap();
    assert!(Policy::from_spec("sns-style", &sns).is_ok());
    let error = serde_json::from_value::<PolicySpec>(json!({ "schedule": ["0s"], "retries": 3 }))
        .unwrap_err()
        .to_string();
    assert!(error.contains("unknown field `retries`"), "{error}");
    assert!(serde_json::from_value::<PolicySpec>(json!({ "retry_on": "some" })).is_err());
}

#[test]
fn the_json_schema_names_every_key() {
    let schema = serde_json::to_value(schemars::schema_for!(PolicySpec)).unwrap();
    let properties = schema["properties"].as_object().unwrap();
    for key in ["schedule", "deadline", "jitter", "retry_on", "sns", "preset"] {
        assert!(properties.contains_key(key), "{key} missing from {schema}");
    }
    assert_eq!(schema["additionalProperties"], json!(false));
}

#[test]
fn with_jitter_changes_only_the_jitter_and_clamps_it() {
    let standard = Policy::standard();
    let exact = standard.with_jitter(0.0);
    assert_eq!(exact.jitter(), 0.0);
    assert_eq!(exact.kind(), standard.kind());
    assert_eq!(exact.name(), "standard");
    assert_eq!(standard.with_jitter(3.0).jitter(), 1.0);
    assert_eq!(standard.with_jitter(-1.0).jitter(), 0.0);
    assert_eq!(standard.with_jitter(f64::NAN).jitter(), 0.0);
}

// ---- presets -----------------------------------------------------------------------------

#[test]
fn presets_are_found_by_name_in_order() {
    let names: Vec<String> = Policy::presets().into_iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        [
            "standard",
            "sns-http-default",
            "sns-aws-managed",
            "sns-customer-managed"
        ]
    );
    for name in &names {
        assert!(Policy::is_preset_name(name));
        assert_eq!(Policy::preset(name).unwrap().name(), name);
    }
    assert!(!Policy::is_preset_name("standard-fast"));
    assert_eq!(Policy::preset("nope"), None);
}

#[test]
fn standard_is_9_attempts_within_72_h_with_20_percent_jitter_retrying_everything() {
    let standard = Policy::standard();
    assert_eq!(standard.name(), "standard");
    assert_eq!(standard.max_attempts(), 9);
    assert_eq!(standard.deadline(), Some(Duration::from_secs(72 * 3600)));
    assert_eq!(standard.jitter(), 0.2);
    assert_eq!(standard.retry_on(), RetryOn::All);
    assert_eq!(standard.content_type(), None);
    assert_eq!(Policy::preset("standard"), Some(standard));
}

#[test]
fn sns_http_default_is_3_retries_20_s_apart() {
    let policy = Policy::preset("sns-http-default").unwrap();
    assert_eq!(policy.max_attempts(), 4);
    assert_eq!(policy.retry_on(), RetryOn::Sns);
    assert_eq!(policy.content_type(), Some("text/plain; charset=UTF-8"));
    let waits: Vec<Duration> = preview(&policy).iter().map(|a| a.wait).collect();
    assert_eq!(waits, secs(&[0, 20, 20, 20]));
}

/// A preset's SNS shape: (no-delay, pre-backoff, backoff, post-backoff, min s, max s, total s).
fn sns_shape(policy: &Policy) -> (u32, u32, u32, u32, u32, u32, f64) {
    let PolicyKind::Sns(sns) = policy.kind() else {
        panic!("{} is not an SNS policy", policy.name);
    };
    assert_eq!(sns.backoff_function, BackoffFunction::Exponential);
    (
        sns.num_no_delay_retries,
        sns.num_min_delay_retries,
        sns.num_backoff_retries(),
        sns.num_max_delay_retries,
        sns.min_delay_s,
        sns.max_delay_s,
        sns.total_delay_s(),
    )
}

#[test]
fn sns_aws_managed_is_100_015_retries_over_about_23_days() {
    let policy = Policy::preset("sns-aws-managed").unwrap();
    assert_eq!(policy.max_attempts(), 100_016);
    assert_eq!(policy.retry_on(), RetryOn::Sns);
    assert_eq!(policy.content_type(), None);
    let (no_delay, pre, backoff, post, min_s, max_s, total_s) = sns_shape(&policy);
    assert_eq!(
        (no_delay, pre, backoff, post, min_s, max_s),
        (3, 2, 10, 100_000, 1, 20)
    );
    let days = total_s / 86_400.0;
    assert!((23.0..24.0).contains(&days), "{days} days");
}

#[test]
fn sns_customer_managed_is_50_retries_over_about_6_hours() {
    let policy = Policy::preset("sns-customer-managed").unwrap();
    assert_eq!(policy.max_attempts(), 51);
    assert_eq!(policy.retry_on(), RetryOn::Sns);
    let (no_delay, pre, backoff, post, min_s, max_s, total_s) = sns_shape(&policy);
    assert_eq!(
        (no_delay, pre, backoff, post, min_s, max_s),
        (0, 2, 10, 38, 10, 600)
    );
    let hours = total_s / 3600.0;
    assert!((6.0..7.5).contains(&hours), "{hours} hours");
}

#[test]
fn the_system_presets_are_exempt_from_the_http_limits() {
    // As user policies, their documents would be refused.
    let document = json!({ "healthyRetryPolicy": {
        "minDelayTarget": 10, "maxDelayTarget": 600, "numRetries": 50,
        "numMinDelayRetries": 2, "numMaxDelayRetries": 38, "backoffFunction": "exponential" } });
    let (_, message) = only_problem("mine", &sns_spec(document));
    assert!(message.contains("above the 3600 s limit"), "{message}");
    assert!(Policy::preset("sns-customer-managed").is_some());
}

// ---- preview -----------------------------------------------------------------------------

#[test]
fn the_standard_preview_has_9_attempts_and_the_last_at_72_h() {
    let attempts = preview(&Policy::standard());
    assert_eq!(attempts.len(), 9);
    assert_eq!(
        attempts.iter().map(|a| a.n).collect::<Vec<_>>(),
        (1..=9).collect::<Vec<_>>()
    );
    let scheduled: Vec<Duration> = attempts.iter().map(|a| a.scheduled_wait).collect();
    assert_eq!(
        scheduled,
        secs(&[0, 30, 120, 600, 3600, 14_400, 43_200, 86_400, 172_800])
    );
    let at: Vec<Duration> = attempts.iter().map(|a| a.at).collect();
    assert_eq!(
        at,
        secs(&[0, 30, 150, 750, 4350, 18_750, 61_950, 148_350, 259_200])
    );
    // The deadline brings attempt 9 forward: it comes 1d 6h 47m 30s after attempt 8.
    let waits: Vec<Duration> = attempts.iter().map(|a| a.wait).collect();
    assert_eq!(
        waits,
        secs(&[0, 30, 120, 600, 3600, 14_400, 43_200, 86_400, 110_850])
    );
    assert!(attempts[8].brought_forward());
    assert!(attempts[..8].iter().all(|a| !a.brought_forward()));
    assert_eq!(attempts[0].phase, Phase::Initial);
    assert!(attempts[1..].iter().all(|a| a.phase == Phase::Schedule));
}

#[test]
fn a_preview_stops_at_the_deadline() {
    let spec = PolicySpec {
        deadline: Some("10m".into()),
        ..schedule_spec(&["0s", "1m", "5m", "10m", "1h"])
    };
    let attempts = preview(&Policy::from_spec("short", &spec).unwrap());
    let at: Vec<Duration> = attempts.iter().map(|a| a.at).collect();
    assert_eq!(at, secs(&[0, 60, 360, 600]));
    assert_eq!(attempts[3].wait, Duration::from_secs(240));
    assert_eq!(attempts[3].scheduled_wait, Duration::from_secs(600));
}

#[test]
fn the_seed_example_previews_51_attempts_over_about_2205_s() {
    let policy = Policy::from_spec("seed", &sns_spec(seed_example_document())).unwrap();
    let attempts = preview(&policy);
    assert_eq!(attempts.len(), 51);
    let phases: Vec<Phase> = attempts.iter().map(|a| a.phase).collect();
    assert_eq!(phases[0], Phase::Initial);
    assert_eq!(&phases[1..4], &[Phase::NoDelay; 3]);
    assert_eq!(&phases[4..6], &[Phase::PreBackoff; 2]);
    assert_eq!(&phases[6..16], &[Phase::Backoff; 10]);
    assert_eq!(&phases[16..], &[Phase::PostBackoff; 35]);
    let last_at_s = attempts[50].at.as_secs_f64();
    assert!((last_at_s - 2205.0).abs() < 1.0, "{last_at_s}");
    for pair in attempts.windows(2) {
        assert_eq!(pair[1].at, pair[0].at + pair[1].wait);
    }
}

#[test]
fn the_aws_managed_preview_lists_every_attempt_quickly() {
    let started = Instant::now();
    let attempts = preview(&Policy::preset("sns-aws-managed").unwrap());
    let elapsed = started.elapsed();
    assert_eq!(attempts.len(), 100_016);
    assert_eq!(attempts[100_015].wait, Duration::from_secs(20));
    assert_eq!(attempts[100_015].phase, Phase::PostBackoff);
    // A debug build on a shared 2-core machine takes a few ms; a second would mean something
    // quadratic crept in.
    assert!(elapsed < Duration::from_secs(1), "{elapsed:?}");
}

#[test]
fn the_preview_table_lists_attempt_wait_time_since_event_and_phase() {
    let table = render_preview_table(&Policy::standard());
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0],
        "standard: schedule of 9 attempts, deadline 3d after the event, jitter ±20%, retry on all"
    );
    assert_eq!(
        lines[1],
        "9 attempts, the last 3d after the event (without jitter)"
    );
    let header = lines[3];
    for column in ["attempt", "wait", "since event", "phase"] {
        assert!(header.contains(column), "{header}");
    }
    let rows = &lines[4..];
    assert_eq!(rows.len(), 9);
    let cells = |row: &str| row.split_whitespace().map(str::to_owned).collect::<Vec<_>>();
    assert_eq!(cells(rows[0]), ["1", "0s", "0s", "initial"]);
    assert_eq!(cells(rows[1]), ["2", "30s", "30s", "schedule"]);
    assert_eq!(cells(rows[2]), ["3", "2m", "2m", "30s", "schedule"]);
    assert_eq!(cells(rows[4]), ["5", "1h", "1h", "12m", "30s", "schedule"]);
    assert!(
        rows[8].contains("1d 6h 47m 30s")
            && rows[8].contains("3d")
            && rows[8].contains("brought forward to the deadline; planned wait 2d"),
        "{}",
        rows[8]
    );
}

#[test]
fn the_seed_example_table_shows_all_51_attempts() {
    let policy = Policy::from_spec("seed", &sns_spec(seed_example_document())).unwrap();
    let table = render_preview_table(&policy);
    let rows: Vec<&str> = table.lines().skip(4).collect();
    assert_eq!(rows.len(), 51);
    assert!(rows[1].trim_start().starts_with("2 ") && rows[1].ends_with("no-delay"));
    assert!(rows[50].trim_start().starts_with("51 ") && rows[50].ends_with("post-backoff"));
    assert!(table.contains("51 attempts"));
}

#[test]
fn the_aws_managed_table_folds_its_100_000_equal_retries() {
    let table = render_preview_table(&Policy::preset("sns-aws-managed").unwrap());
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines.len() < 40, "{} lines", lines.len());
    assert!(table.contains("99998 more, 20s apart"), "{table}");
    assert!(
        lines
            .last()
            .is_some_and(|l| l.trim_start().starts_with("100016 ")),
        "{table}"
    );
    assert!(table.contains("100016 attempts"));
}

// ---- properties --------------------------------------------------------------------------

/// Any SNS delivery policy within the attribute ranges (the 3600 s limit is left to the
/// validator, so both verdicts occur).
fn sns_document() -> impl Strategy<Value = serde_json::Value> {
    (1u32..=600, 0u32..=600, 0u32..=100, any::<[u8; 3]>(), 0usize..4).prop_map(
        |(min, extra, num_retries, split, function)| {
            // Split up to num_retries among the three fixed phases.
            let mut left = num_retries;
            let mut take = |byte: u8| {
                let n = u32::from(byte) % (left + 1);
                left -= n;
                n
            };
            let (no_delay, min_retries, max_retries) = (take(split[0]), take(split[1]), take(split[2]));
            json!({ "healthyRetryPolicy": {
                "minDelayTarget": min, "maxDelayTarget": (min + extra).min(3600),
                "numRetries": num_retries, "numNoDelayRetries": no_delay,
                "numMinDelayRetries": min_retries, "numMaxDelayRetries": max_retries,
                "backoffFunction": BackoffFunction::ALL[function].as_str() } })
        },
    )
}

proptest! {
    #[test]
    fn valid_sns_policies_retry_num_retries_times_rising_from_min_to_max_within_3600_s(
        document in sns_document()
    ) {
        let retry = &document["healthyRetryPolicy"];
        let num_retries = retry["numRetries"].as_u64().unwrap() as usize;
        let min_s = retry["minDelayTarget"].as_f64().unwrap();
        let max_s = retry["maxDelayTarget"].as_f64().unwrap();
        match Policy::from_spec("prop", &sns_spec(document.clone())) {
            Ok(policy) => {
                let attempts = preview(&policy.with_jitter(0.0));
                prop_assert_eq!(attempts.len(), num_retries + 1);
                let backoff: Vec<f64> = attempts
                    .iter()
                    .filter(|a| a.phase == Phase::Backoff)
                    .map(|a| a.wait.as_secs_f64())
                    .collect();
                for pair in backoff.windows(2) {
                    prop_assert!(pair[0] <= pair[1], "not rising: {:?}", backoff);
                }
                if let (Some(first), Some(last)) = (backoff.first(), backoff.last()) {
                    prop_assert!((first - min_s).abs() < 1e-3, "first {} min {}", first, min_s);
                    if backoff.len() > 1 {
                        prop_assert!((last - max_s).abs() < 1e-3, "last {} max {}", last, max_s);
                    }
                    prop_assert!(backoff.iter().all(|w| *w >= min_s - 1e-3 && *w <= max_s + 1e-3));
                }
                let total_s: f64 = attempts.iter().map(|a| a.wait.as_secs_f64()).sum();
                // Each wait is rounded to the millisecond: 100 retries move the sum ≤ 50 ms.
                prop_assert!(total_s <= 3600.0 + 0.05, "total {}", total_s);
            }
            Err(problems) => {
                // The only way a document from this strategy can fail is the 3600 s limit.
                prop_assert_eq!(problems.len(), 1);
                prop_assert!(problems[0].message.contains("above the 3600 s limit"), "{:?}", problems);
                let unchecked = SnsPolicy::from_document(&document, "sns", false);
                prop_assert!(unchecked.is_ok_and(|sns| sns.total_delay_s() > 3600.0));
            }
        }
    }

    #[test]
    fn planned_retries_stay_within_the_jitter_bounds(
        attempts_made in 1u32..9,
        sample in -1.0f64..=1.0,
        jitter in 0.0f64..=1.0,
    ) {
        let policy = Policy::standard().with_jitter(jitter);
        let outcome = crate::model::Outcome::Failed {
            kind: crate::model::ErrorKind::Timeout,
            status: None,
            retry_after: None,
            detail: String::new(),
        };
        // Early enough that the deadline does not interfere.
        let now = crate::model::Timestamp::from_millis(1_000);
        let context = RetryContext {
            attempts_made,
            round_started_at: crate::model::Timestamp::EPOCH,
            now,
            outcome: &outcome,
            jitter_sample: sample,
            plugin_decision: None,
        };
        let (wait, _) = policy.planned_wait(attempts_made + 1).unwrap();
        match plan_next(&policy, &context) {
            NextStep::RetryAt(at) => {
                let waited_s = at.since(now).as_secs_f64();
                let wait_s = wait.as_secs_f64();
                prop_assert!(waited_s >= wait_s * (1.0 - jitter) - 1e-3, "{} < {}", waited_s, wait_s);
                prop_assert!(waited_s <= wait_s * (1.0 + jitter) + 1e-3, "{} > {}", waited_s, wait_s);
            }
            other => prop_assert!(false, "expected a retry, got {:?}", other),
        }
    }
}
