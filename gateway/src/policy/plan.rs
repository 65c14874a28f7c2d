//! The one planning function: from the last attempt's outcome to the delivery's next step.

use std::fmt;
use std::time::Duration;

use crate::model::{Outcome, Timestamp};

use super::{Classification, Policy, classify};

/// What the planner knows after an attempt. The caller supplies every time and the random
/// jitter sample, so planning is a pure function.
#[derive(Clone, Debug)]
pub struct RetryContext<'a> {
    /// Attempts completed so far in this round (a redelivery starts a new round), >= 1.
    pub attempts_made: u32,
    /// When the delivery's current round began: the event's receipt for the first round, the
    /// moment of the redeliver, redrive, replay or re-enable for a later one. The deadline of a
    /// schedule policy counts from here, so every round gets the whole policy.
    pub round_started_at: Timestamp,
    /// When the last attempt finished.
    pub now: Timestamp,
    /// The last attempt's outcome; its `retry_after` is absolute and already capped at
    /// `now + 24 h` by the caller.
    pub outcome: &'a Outcome,
    /// Uniform in [-1, 1], drawn by the caller; the wait becomes `wait·(1 + jitter·sample)`.
    /// Values outside are clamped into it, NaN counts as 0.
    pub jitter_sample: f64,
    /// The answer of the endpoint's backoff plugin, if it has one.
    pub plugin_decision: Option<BackoffDecision>,
}

/// A backoff plugin's answer (docs/writing-a-plugin.md).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BackoffDecision {
    /// Wait this long instead of the policy's (jittered) wait.
    RetryIn(Duration),
    /// Stop retrying, for the plugin's stated reason.
    GiveUp(String),
}

/// What happens to the delivery next.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NextStep {
    /// The attempt succeeded.
    Done,
    /// Attempt again at this time.
    RetryAt(Timestamp),
    /// No more attempts: the delivery is `failed` (or `dead` with a dead-letter target).
    GiveUp(GiveUpReason),
}

/// Why a delivery stopped being retried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GiveUpReason {
    /// The policy's attempts are used up.
    Exhausted,
    /// The failure cannot be helped by retrying under the policy's `retry_on`.
    Permanent,
    /// The receiver answered 410 Gone.
    Gone,
    /// The last attempt was made at or after the deadline.
    DeadlineReached,
    /// The backoff plugin said to stop, with its reason.
    PluginGaveUp(String),
}

impl GiveUpReason {
    /// The snake_case code for the delivery's `last_error`. The plugin's own reason is not
    /// part of the code; [`fmt::Display`] adds it (`plugin_gave_up: too many attempts`).
    pub fn as_str(&self) -> &str {
        match self {
            GiveUpReason::Exhausted => "exhausted",
            GiveUpReason::Permanent => "permanent",
            GiveUpReason::Gone => "gone",
            GiveUpReason::DeadlineReached => "deadline_reached",
            GiveUpReason::PluginGaveUp(_) => "plugin_gave_up",
        }
    }
}

impl fmt::Display for GiveUpReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GiveUpReason::PluginGaveUp(reason) if !reason.is_empty() => {
                write!(f, "{}: {reason}", self.as_str())
            }
            other => f.write_str(other.as_str()),
        }
    }
}

/// Plans the step after an attempt.
///
/// In order:
/// 1. a success is [`NextStep::Done`];
/// 2. the outcome is classified under the policy's `retry_on`: permanent failures and 410 Gone
///    give up at once;
/// 3. when `attempts_made` reaches [`Policy::max_attempts`] the policy is exhausted;
/// 4. when the last attempt finished at or after the deadline (`round_started_at +
///    deadline`), it was the last one: an attempt brought forward to the deadline is final;
/// 5. the wait is the policy's wait before attempt `attempts_made + 1` (schedule entry or SNS
///    phase), times `1 + jitter·sample`; a backoff plugin's `RetryIn` replaces it (unjittered:
///    the plugin does its own) and its `GiveUp` ends the delivery — steps 2–4 hold regardless;
/// 6. a `Retry-After` raises the time to at least what it says;
/// 7. a time past the deadline is brought forward to the deadline exactly — also when it was
///    `Retry-After` that pushed it there: the last attempt is made at the deadline, as the
///    schedule promises, rather than giving up early because a receiver asked for more time
///    than the round has left.
pub fn plan_next(policy: &Policy, ctx: &RetryContext) -> NextStep {
    match classify(policy.retry_on(), ctx.outcome) {
        Classification::Success => return NextStep::Done,
        Classification::Permanent => return NextStep::GiveUp(GiveUpReason::Permanent),
        Classification::Gone => return NextStep::GiveUp(GiveUpReason::Gone),
        Classification::Retryable => {}
    }
    if ctx.attempts_made >= policy.max_attempts() {
        return NextStep::GiveUp(GiveUpReason::Exhausted);
    }
    let deadline_at = policy
        .deadline()
        .map(|deadline| ctx.round_started_at.plus(deadline));
    if let Some(deadline_at) = deadline_at
        && ctx.now >= deadline_at
    {
        return NextStep::GiveUp(GiveUpReason::DeadlineReached);
    }

    let wait = match &ctx.plugin_decision {
        Some(BackoffDecision::GiveUp(reason)) => {
            return NextStep::GiveUp(GiveUpReason::PluginGaveUp(reason.clone()));
        }
        Some(BackoffDecision::RetryIn(wait)) => *wait,
        None => {
            // Always present: attempts_made < max_attempts was checked above.
            let planned = policy
                .planned_wait(ctx.attempts_made.saturating_add(1))
                .map(|(wait, _phase)| wait)
                .unwrap_or_default();
            jittered(planned, policy.jitter(), ctx.jitter_sample)
        }
    };
    let mut retry_at = ctx.now.plus(wait);

    if let Outcome::Failed {
        retry_after: Some(retry_after),
        ..
    } = ctx.outcome
    {
        retry_at = retry_at.max(*retry_after);
    }
    if let Some(deadline_at) = deadline_at {
        retry_at = retry_at.min(deadline_at);
    }
    NextStep::RetryAt(retry_at)
}

/// `wait·(1 + jitter·sample)`, with the sample clamped to [-1, 1] and the jitter to [0, 1],
/// rounded to the millisecond.
pub(crate) fn jittered(wait: Duration, jitter: f64, sample: f64) -> Duration {
    let sample = if sample.is_nan() {
        0.0
    } else {
        sample.clamp(-1.0, 1.0)
    };
    let jitter = if jitter.is_nan() {
        0.0
    } else {
        jitter.clamp(0.0, 1.0)
    };
    let factor = 1.0 + jitter * sample;
    Duration::from_millis((wait.as_secs_f64() * 1000.0 * factor).round() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ErrorKind;
    use crate::policy::{PolicySpec, RetryOn};

    const HOUR_MS: i64 = 3_600_000;

    fn at_hours(hours: f64) -> Timestamp {
        Timestamp::from_millis((hours * HOUR_MS as f64) as i64)
    }

    fn server_error() -> Outcome {
        Outcome::Failed {
            kind: ErrorKind::HttpStatus,
            status: Some(503),
            retry_after: None,
            detail: "503 Service Unavailable".into(),
        }
    }

    fn with_retry_after(retry_after: Timestamp) -> Outcome {
        Outcome::Failed {
            kind: ErrorKind::HttpStatus,
            status: Some(429),
            retry_after: Some(retry_after),
            detail: "429 Too Many Requests".into(),
        }
    }

    fn ctx(attempts_made: u32, now: Timestamp, outcome: &Outcome) -> RetryContext<'_> {
        RetryContext {
            attempts_made,
            round_started_at: Timestamp::EPOCH,
            now,
            outcome,
            jitter_sample: 0.0,
            plugin_decision: None,
        }
    }

    fn seed_example() -> Policy {
        let spec = PolicySpec {
            sns: Some(crate::policy::sns::seed_example_document()),
            ..PolicySpec::default()
        };
        Policy::from_spec("seed", &spec).unwrap()
    }

    #[test]
    fn a_success_is_done() {
        let outcome = Outcome::Delivered { status: Some(200) };
        assert_eq!(
            plan_next(&Policy::standard(), &ctx(1, at_hours(0.0), &outcome)),
            NextStep::Done
        );
    }

    #[test]
    fn standard_waits_its_schedule_between_attempts() {
        let policy = Policy::standard().with_jitter(0.0);
        let outcome = server_error();
        let expected_waits_s = [30, 120, 600, 3600, 14_400, 43_200, 86_400];
        let mut now = Timestamp::EPOCH;
        for (k, wait_s) in expected_waits_s.into_iter().enumerate() {
            let attempts_made = k as u32 + 1;
            let step = plan_next(&policy, &ctx(attempts_made, now, &outcome));
            assert_eq!(
                step,
                NextStep::RetryAt(now.plus(Duration::from_secs(wait_s))),
                "after attempt {attempts_made}"
            );
            now = now.plus(Duration::from_secs(wait_s));
        }
    }

    #[test]
    fn attempt_9_of_standard_is_brought_forward_to_72_h_and_then_gives_up() {
        let policy = Policy::standard().with_jitter(0.0);
        let outcome = server_error();
        // Attempt 8 fails at 70 h; its 2-day wait would land at 118 h.
        assert_eq!(
            plan_next(&policy, &ctx(8, at_hours(70.0), &outcome)),
            NextStep::RetryAt(at_hours(72.0))
        );
        // Attempt 9, made at exactly 72 h, is the last.
        assert_eq!(
            plan_next(&policy, &ctx(9, at_hours(72.0), &outcome)),
            NextStep::GiveUp(GiveUpReason::Exhausted)
        );
    }

    #[test]
    fn an_attempt_made_at_the_deadline_is_the_last_even_with_attempts_left() {
        let policy = Policy::standard().with_jitter(0.0);
        let outcome = server_error();
        // Attempt 7 fails at 60 h; the 1-day wait is brought forward to 72 h...
        assert_eq!(
            plan_next(&policy, &ctx(7, at_hours(60.0), &outcome)),
            NextStep::RetryAt(at_hours(72.0))
        );
        // ...and attempt 8, made then, ends the delivery although a 9th exists.
        let finished = at_hours(72.0).plus(Duration::from_millis(150));
        assert_eq!(
            plan_next(&policy, &ctx(8, finished, &outcome)),
            NextStep::GiveUp(GiveUpReason::DeadlineReached)
        );
        assert_eq!(
            plan_next(&policy, &ctx(8, at_hours(72.0), &outcome)),
            NextStep::GiveUp(GiveUpReason::DeadlineReached)
        );
    }

    #[test]
    fn the_deadline_counts_from_the_start_of_the_round_not_from_the_first_attempt() {
        let policy = Policy::standard().with_jitter(0.0);
        let outcome = server_error();
        let context = RetryContext {
            round_started_at: at_hours(10.0),
            ..ctx(8, at_hours(80.0), &outcome)
        };
        assert_eq!(plan_next(&policy, &context), NextStep::RetryAt(at_hours(82.0)));
    }

    /// A round started long after the event (a redeliver or replay days later) gets the
    /// whole schedule: the deadline is the round's, and the event's age does not matter.
    #[test]
    fn a_late_round_gets_the_whole_schedule() {
        let policy = Policy::standard().with_jitter(0.0);
        let outcome = server_error();
        let round_start = at_hours(24.0 * 30.0);
        let first_failure = round_start.plus(Duration::from_millis(200));
        let context = RetryContext {
            round_started_at: round_start,
            ..ctx(1, first_failure, &outcome)
        };
        assert_eq!(
            plan_next(&policy, &context),
            NextStep::RetryAt(first_failure.plus(Duration::from_secs(30)))
        );
        let deadline = round_start.plus(Duration::from_secs(72 * 3600));
        let context = RetryContext {
            round_started_at: round_start,
            ..ctx(8, round_start.plus(Duration::from_secs(60 * 3600)), &outcome)
        };
        assert_eq!(plan_next(&policy, &context), NextStep::RetryAt(deadline));
    }

    #[test]
    fn jitter_scales_the_wait_by_at_most_the_policy_fraction() {
        let policy = Policy::standard();
        let outcome = server_error();
        let now = at_hours(1.0);
        let retry_at = |sample: f64| {
            let context = RetryContext {
                jitter_sample: sample,
                ..ctx(1, now, &outcome)
            };
            plan_next(&policy, &context)
        };
        // 30 s ± 20 %.
        assert_eq!(
            retry_at(-1.0),
            NextStep::RetryAt(now.plus(Duration::from_secs(24)))
        );
        assert_eq!(
            retry_at(0.0),
            NextStep::RetryAt(now.plus(Duration::from_secs(30)))
        );
        assert_eq!(
            retry_at(1.0),
            NextStep::RetryAt(now.plus(Duration::from_secs(36)))
        );
        assert_eq!(
            retry_at(0.5),
            NextStep::RetryAt(now.plus(Duration::from_secs(33)))
        );
        // Samples outside [-1, 1] are clamped; NaN counts as no jitter.
        assert_eq!(retry_at(7.0), retry_at(1.0));
        assert_eq!(retry_at(-7.0), retry_at(-1.0));
        assert_eq!(retry_at(f64::NAN), retry_at(0.0));
    }

    #[test]
    fn jitter_stays_within_bounds_for_every_sample() {
        for jitter in [0.0, 0.1, 0.2, 0.5, 1.0] {
            for step in -10..=10 {
                let sample = f64::from(step) / 10.0;
                let wait = jittered(Duration::from_secs(600), jitter, sample).as_secs_f64();
                assert!(
                    wait >= 600.0 * (1.0 - jitter) - 1e-3 && wait <= 600.0 * (1.0 + jitter) + 1e-3,
                    "jitter {jitter} sample {sample}: {wait}"
                );
            }
        }
        assert_eq!(jittered(Duration::ZERO, 0.2, 1.0), Duration::ZERO);
    }

    #[test]
    fn retry_after_raises_the_next_attempt_but_never_lowers_it() {
        let policy = Policy::standard().with_jitter(0.0);
        let now = at_hours(1.0);
        let later = now.plus(Duration::from_secs(300));
        assert_eq!(
            plan_next(&policy, &ctx(1, now, &with_retry_after(later))),
            NextStep::RetryAt(later)
        );
        let sooner = now.plus(Duration::from_secs(5));
        assert_eq!(
            plan_next(&policy, &ctx(1, now, &with_retry_after(sooner))),
            NextStep::RetryAt(now.plus(Duration::from_secs(30)))
        );
    }

    #[test]
    fn retry_after_beyond_the_deadline_gives_the_last_attempt_at_the_deadline() {
        let policy = Policy::standard().with_jitter(0.0);
        let now = at_hours(71.0);
        let past_deadline = at_hours(72.0).plus(Duration::from_secs(1));
        assert_eq!(
            plan_next(&policy, &ctx(3, now, &with_retry_after(past_deadline))),
            NextStep::RetryAt(at_hours(72.0))
        );
        assert_eq!(
            plan_next(&policy, &ctx(3, now, &with_retry_after(at_hours(72.0)))),
            NextStep::RetryAt(at_hours(72.0))
        );
    }

    #[test]
    fn retry_after_also_raises_sns_waits() {
        let policy = seed_example().with_jitter(0.0);
        let now = at_hours(0.0);
        let later = now.plus(Duration::from_secs(90));
        // Retry 1 is a no-delay retry, but the receiver asked for 90 s.
        assert_eq!(
            plan_next(&policy, &ctx(1, now, &with_retry_after(later))),
            NextStep::RetryAt(later)
        );
    }

    #[test]
    fn a_plugin_wait_replaces_the_policy_wait_without_extra_jitter() {
        let policy = Policy::standard();
        let outcome = server_error();
        let now = at_hours(1.0);
        let context = RetryContext {
            jitter_sample: 1.0,
            plugin_decision: Some(BackoffDecision::RetryIn(Duration::from_millis(1500))),
            ..ctx(2, now, &outcome)
        };
        assert_eq!(
            plan_next(&policy, &context),
            NextStep::RetryAt(now.plus(Duration::from_millis(1500)))
        );
    }

    #[test]
    fn a_plugin_can_give_up_but_cannot_extend_attempts_or_the_deadline() {
        let policy = Policy::standard().with_jitter(0.0);
        let outcome = server_error();
        let give_up = RetryContext {
            plugin_decision: Some(BackoffDecision::GiveUp("budget spent".into())),
            ..ctx(2, at_hours(1.0), &outcome)
        };
        assert_eq!(
            plan_next(&policy, &give_up),
            NextStep::GiveUp(GiveUpReason::PluginGaveUp("budget spent".into()))
        );
        let beyond_attempts = RetryContext {
            plugin_decision: Some(BackoffDecision::RetryIn(Duration::from_secs(1))),
            ..ctx(9, at_hours(50.0), &outcome)
        };
        assert_eq!(
            plan_next(&policy, &beyond_attempts),
            NextStep::GiveUp(GiveUpReason::Exhausted)
        );
        let beyond_deadline = RetryContext {
            plugin_decision: Some(BackoffDecision::RetryIn(Duration::from_secs(10 * 3600))),
            ..ctx(4, at_hours(70.0), &outcome)
        };
        assert_eq!(
            plan_next(&policy, &beyond_deadline),
            NextStep::RetryAt(at_hours(72.0))
        );
    }

    #[test]
    fn permanent_and_gone_failures_give_up_whatever_a_plugin_says() {
        let sns = seed_example();
        let not_found = Outcome::Failed {
            kind: ErrorKind::HttpStatus,
            status: Some(404),
            retry_after: None,
            detail: String::new(),
        };
        let context = RetryContext {
            plugin_decision: Some(BackoffDecision::RetryIn(Duration::from_secs(1))),
            ..ctx(1, at_hours(0.0), &not_found)
        };
        assert_eq!(sns.retry_on(), RetryOn::Sns);
        assert_eq!(
            plan_next(&sns, &context),
            NextStep::GiveUp(GiveUpReason::Permanent)
        );
        // Under `all` the same 404 is retried.
        assert!(matches!(
            plan_next(&Policy::standard(), &context),
            NextStep::RetryAt(_)
        ));
        let gone = Outcome::Failed {
            kind: ErrorKind::HttpStatus,
            status: Some(410),
            retry_after: None,
            detail: String::new(),
        };
        for policy in [Policy::standard(), sns] {
            assert_eq!(
                plan_next(&policy, &ctx(1, at_hours(0.0), &gone)),
                NextStep::GiveUp(GiveUpReason::Gone)
            );
        }
    }

    #[test]
    fn sns_policies_walk_their_phases_and_stop_after_num_retries() {
        let policy = seed_example().with_jitter(0.0);
        let outcome = server_error();
        let now = at_hours(0.0);
        let wait_after = |attempts_made: u32| match plan_next(&policy, &ctx(attempts_made, now, &outcome)) {
            NextStep::RetryAt(t) => Some(t.since(now)),
            _ => None,
        };
        assert_eq!(wait_after(1), Some(Duration::ZERO)); // retry 1: no-delay
        assert_eq!(wait_after(3), Some(Duration::ZERO)); // retry 3: no-delay
        assert_eq!(wait_after(4), Some(Duration::from_secs(1))); // retry 4: pre-backoff
        assert_eq!(wait_after(6), Some(Duration::from_secs(1))); // retry 6: backoff starts at min
        assert_eq!(wait_after(15), Some(Duration::from_secs(60))); // retry 15: backoff ends at max
        assert_eq!(wait_after(50), Some(Duration::from_secs(60))); // retry 50: post-backoff
        assert_eq!(
            plan_next(&policy, &ctx(51, now, &outcome)),
            NextStep::GiveUp(GiveUpReason::Exhausted)
        );
    }

    #[test]
    fn sns_aws_managed_plans_retry_100_015_without_listing_the_others() {
        let policy = Policy::preset("sns-aws-managed").unwrap().with_jitter(0.0);
        let outcome = server_error();
        let now = at_hours(500.0);
        assert_eq!(
            plan_next(&policy, &ctx(100_015, now, &outcome)),
            NextStep::RetryAt(now.plus(Duration::from_secs(20)))
        );
        assert_eq!(
            plan_next(&policy, &ctx(100_016, now, &outcome)),
            NextStep::GiveUp(GiveUpReason::Exhausted)
        );
    }

    #[test]
    fn give_up_reasons_have_snake_case_codes() {
        let cases = [
            (GiveUpReason::Exhausted, "exhausted"),
            (GiveUpReason::Permanent, "permanent"),
            (GiveUpReason::Gone, "gone"),
            (GiveUpReason::DeadlineReached, "deadline_reached"),
            (GiveUpReason::PluginGaveUp("no".into()), "plugin_gave_up"),
        ];
        for (reason, code) in cases {
            assert_eq!(reason.as_str(), code);
        }
        assert_eq!(
            GiveUpReason::PluginGaveUp("budget spent".into()).to_string(),
            "plugin_gave_up: budget spent"
        );
        assert_eq!(GiveUpReason::Gone.to_string(), "gone");
    }
}
