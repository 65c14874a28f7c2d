//! The endpoint health machine (README "Endpoint health"): a pure function from (health, input,
//! now) to the next health plus what the caller must do about it.
//!
//! An endpoint is never switched off after one failed delivery. It slides down step by step as
//! failures pile up and time passes without a success, so that a receiver having a bad afternoon
//! keeps its events while one that is gone for good stops costing retries:
//!
//! ```text
//!                     5 failed attempts in a row
//!        +--------+ -----------------------------> +----------+
//!        | active |                                | degraded |
//!        +--------+ <----------------------------- +----------+
//!          ^    ^            one success                |
//!          |    |                                       | >= 3 days without success
//!          |    |                                       | and >= 20 failed attempts in a row
//!          |    |                                       v
//!          |    |          re-enable               +--------+
//!          |    +--------------------------------- | paused |
//!          |                                       +--------+
//!          |                                            | 7 days without success
//!          |                                            v
//!          |               re-enable              +----------+
//!          +------------------------------------- | disabled | <--- 410 Gone, from any state
//!                                                 +----------+
//! ```
//!
//! Active and degraded endpoints receive events; paused and disabled ones receive none, and
//! only the operator's re-enable brings them back. The counts and days are defaults
//! ([`HealthRules::default`]); the YAML may override them.
//!
//! This module does no I/O and reads no clock: `now` is an argument, so the whole 7-day path is
//! tested in microseconds. The caller persists [`EndpointHealth`], records every
//! [`Transition`], carries out every [`Effect`], and sets a timer for [`next_deadline`] so that
//! time-based transitions happen at their time even when no attempt runs.

use std::time::Duration;

use crate::model::{EndpointState, Timestamp};

const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// Event type published when an endpoint enters `degraded`.
pub const EVENT_DEGRADED: &str = "hookgate.endpoint.degraded";
/// Event type published when an endpoint enters `paused`.
pub const EVENT_PAUSED: &str = "hookgate.endpoint.paused";
/// Event type published when an endpoint enters `disabled`.
pub const EVENT_DISABLED: &str = "hookgate.endpoint.disabled";
/// Event type published when the operator's re-enable moves an endpoint back to `active`.
pub const EVENT_REENABLED: &str = "hookgate.endpoint.reenabled";
/// Event type published when a success moves a degraded endpoint back to `active`.
pub const EVENT_RECOVERED: &str = "hookgate.endpoint.recovered";

const REASON_GONE: &str = "410 Gone from the endpoint";
const REASON_REENABLED: &str = "re-enabled by operator";
const REASON_SUCCEEDED: &str = "delivery succeeded";

/// The limits of the health machine. Defaults are the README's ("Endpoint health"); the YAML may
/// override them.
#[derive(Clone, Debug, PartialEq)]
pub struct HealthRules {
    /// Failed attempts in a row that move an active endpoint to degraded.
    pub degrade_after_failures: u32,
    /// Time without success (counted from `failing_since`) after which a degraded endpoint is
    /// paused, provided it also has `pause_min_failures` failed attempts in a row. Both are
    /// needed so that neither a burst of quick failures nor one slow retry pauses an endpoint.
    pub pause_after: Duration,
    /// Failed attempts in a row a degraded endpoint needs, besides `pause_after`, to be paused.
    pub pause_min_failures: u32,
    /// Time without success (counted from `failing_since`) after which a paused endpoint is
    /// disabled.
    pub disable_after: Duration,
}

impl Default for HealthRules {
    fn default() -> Self {
        HealthRules {
            degrade_after_failures: 5,
            pause_after: 3 * DAY,
            pause_min_failures: 20,
            disable_after: 7 * DAY,
        }
    }
}

/// Rules that would make the machine act nonsensically.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HealthRulesError {
    /// With 0, an endpoint that never failed would count as failing.
    #[error("degrade_after_failures must be at least 1")]
    ZeroDegradeFailures,
    /// With 0, an endpoint that never failed could be paused.
    #[error("pause_min_failures must be at least 1")]
    ZeroPauseFailures,
    /// A paused endpoint is disabled after `disable_after`; if that came before `pause_after`,
    /// every pause would turn into a disable the same instant.
    #[error("disable_after ({disable_after:?}) must not be shorter than pause_after ({pause_after:?})")]
    DisableBeforePause {
        pause_after: Duration,
        disable_after: Duration,
    },
}

impl HealthRules {
    /// Checks the rules make sense together; config loading calls this on YAML overrides.
    pub fn validate(&self) -> Result<(), HealthRulesError> {
        if self.degrade_after_failures == 0 {
            return Err(HealthRulesError::ZeroDegradeFailures);
        }
        if self.pause_min_failures == 0 {
            return Err(HealthRulesError::ZeroPauseFailures);
        }
        if self.disable_after < self.pause_after {
            return Err(HealthRulesError::DisableBeforePause {
                pause_after: self.pause_after,
                disable_after: self.disable_after,
            });
        }
        Ok(())
    }

    /// The failure count that degrades an endpoint. At least one failure is always needed,
    /// even if unvalidated rules say 0.
    fn degrade_threshold(&self) -> u32 {
        self.degrade_after_failures.max(1)
    }
}

/// What is persisted per endpoint. `Default` is a new endpoint: active, nothing counted.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct EndpointHealth {
    pub state: EndpointState,
    /// Failed attempts in a row, across all the endpoint's deliveries, in completion order.
    pub consecutive_failures: u32,
    /// The first failed attempt after the last success (or after a re-enable): where "days
    /// without success" start. `Some` exactly when `consecutive_failures > 0`.
    pub failing_since: Option<Timestamp>,
    pub last_success_at: Option<Timestamp>,
    /// The last state change.
    pub changed_at: Option<Timestamp>,
}

impl EndpointHealth {
    /// How long the endpoint has gone without success, counted from `failing_since`; `None`
    /// when it is not failing, so no day rule can fire.
    fn failing_for(&self, now: Timestamp) -> Option<Duration> {
        self.failing_since.map(|since| now.since(since))
    }

    fn clear_failures(&mut self) {
        self.consecutive_failures = 0;
        self.failing_since = None;
    }
}

/// What happened to the endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HealthInput {
    /// An attempt of one of its deliveries succeeded (2xx in time).
    AttemptSucceeded,
    /// An attempt failed; `gone` when the receiver answered 410.
    AttemptFailed { gone: bool },
    /// Time passes: the deadline timer fired, or a periodic sweep.
    Tick,
    /// The operator's re-enable call.
    Reenable,
}

/// One state change, to be recorded in the endpoint's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transition {
    pub from: EndpointState,
    pub to: EndpointState,
    pub at: Timestamp,
    /// Short human text: which rule fired, e.g. "5 failed attempts in a row".
    pub reason: String,
}

/// What the caller must do because of a step, in order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// The endpoint stopped receiving events (active/degraded → paused/disabled): waiting
    /// deliveries fail with `endpoint_paused` and are not resent by themselves; new events are
    /// not queued for it. Not repeated for paused → disabled, where nothing is waiting any more.
    StopDeliveries,
    /// The endpoint receives events again (paused/disabled → active). Missed events come back
    /// only through replay.
    ResumeDeliveries,
    /// Publish an operator event of this type on the configured operator topic.
    Publish { event_type: &'static str },
}

/// The result of one [`step`].
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// The health to persist.
    pub health: EndpointHealth,
    /// State changes in order; empty when the state stayed. Consecutive: each starts where the
    /// previous one ended.
    pub transitions: Vec<Transition>,
    pub effects: Vec<Effect>,
}

impl Step {
    /// True when the state changed (not just the counters).
    pub fn state_changed(&self) -> bool {
        !self.transitions.is_empty()
    }
}

/// The health machine: `(rules, health, input, now) -> (health, transitions, effects)`.
///
/// The rule (README "Endpoint health", numbers from [`HealthRules::default`]):
///
/// 1. **Counting.** Attempts count across all the endpoint's deliveries, in completion order,
///    whatever the state, including results of attempts that were in flight when the endpoint
///    was paused or disabled. A failure adds one to `consecutive_failures` and, if it is the
///    first after the last success, sets `failing_since = now`. A success clears both and sets
///    `last_success_at = now`. "Days without success" are `now - failing_since`.
/// 2. **active**: 5 failed attempts in a row → degraded.
/// 3. **degraded**: one success → active. At least 3 days without success *and* at least 20
///    failed attempts in a row → paused.
/// 4. **paused**: 7 days without success → disabled. Re-enable → active.
/// 5. **disabled**: re-enable → active.
/// 6. **410 Gone** disables at once, from any state (it is counted as a failure too).
/// 7. **Only re-enable leaves paused or disabled**: a success there is counted (so the day
///    clock stops, and a paused endpoint that has seen a success is not disabled by the 7-day
///    rule) but the state stays. Re-enable always clears `consecutive_failures` and
///    `failing_since`, giving the endpoint a fresh start; on an active endpoint that is all it
///    does.
/// 8. **Time-based rules apply on every input**, not only on [`HealthInput::Tick`]: the
///    20th failure in a row after 3 days pauses at once. After the input the rules are applied
///    until none fires, so one input may yield several transitions (a state loaded after a long
///    downtime can go degraded → paused → disabled on one tick), each with its own reason and
///    all at `now`. A count rule fires on a tick too, in case lowered limits already hold.
///
/// Every transition publishes its event (`hookgate.endpoint.degraded`, `.paused`, `.disabled`,
/// `.reenabled`, and `.recovered` for degraded → active on success). Leaving the receiving
/// states yields [`Effect::StopDeliveries`], re-entering them [`Effect::ResumeDeliveries`].
/// The result is stable: a `Tick` at the same `now` changes nothing.
pub fn step(rules: &HealthRules, current: &EndpointHealth, input: HealthInput, now: Timestamp) -> Step {
    let mut run = Run {
        step: Step {
            health: current.clone(),
            transitions: Vec::new(),
            effects: Vec::new(),
        },
        now,
    };
    let health = &mut run.step.health;
    match input {
        HealthInput::AttemptSucceeded => {
            health.clear_failures();
            health.last_success_at = Some(now);
            if health.state == EndpointState::Degraded {
                run.enter(
                    EndpointState::Active,
                    REASON_SUCCEEDED.to_owned(),
                    EVENT_RECOVERED,
                );
            }
        }
        HealthInput::AttemptFailed { gone } => {
            health.consecutive_failures = health.consecutive_failures.saturating_add(1);
            health.failing_since.get_or_insert(now);
            if gone && health.state != EndpointState::Disabled {
                run.enter(EndpointState::Disabled, REASON_GONE.to_owned(), EVENT_DISABLED);
            }
        }
        HealthInput::Tick => {}
        HealthInput::Reenable => {
            health.clear_failures();
            if health.state != EndpointState::Active {
                run.enter(
                    EndpointState::Active,
                    REASON_REENABLED.to_owned(),
                    EVENT_REENABLED,
                );
            }
        }
    }
    run.settle(rules);
    run.step
}

/// [`step`] as the keeper of an endpoint's health applies an input: never at a time before
/// the health's last change, so that the history stays in order when an input arrives late —
/// a timer's deadline that passed before a change made meanwhile, or another node's slightly
/// different clock.
pub fn apply(rules: &HealthRules, current: &EndpointHealth, input: HealthInput, at: Timestamp) -> Step {
    let at = current.changed_at.map_or(at, |changed| at.max(changed));
    step(rules, current, input, at)
}

/// When a time-based transition would next fire with no further input, so the caller can set a
/// timer for that exact moment:
///
/// - degraded with at least `pause_min_failures` failures in a row: `failing_since + pause_after`;
///   with fewer, `None`, since only more failures (or a success) can move it;
/// - paused: `failing_since + disable_after`; `None` once a success has stopped the day clock;
/// - active and disabled: `None`.
///
/// For the result of a [`step`] under the same rules the deadline is always after that step's
/// `now`. If the rules were lowered since (config reload), the deadline may lie in the past or a
/// count rule may already hold; then an active endpoint gets its `failing_since`. Either way a
/// past deadline means "due now": feed a `Tick`.
pub fn next_deadline(rules: &HealthRules, current: &EndpointHealth) -> Option<Timestamp> {
    let failing_since = current.failing_since?;
    match current.state {
        EndpointState::Active if current.consecutive_failures >= rules.degrade_threshold() => {
            Some(failing_since)
        }
        EndpointState::Active | EndpointState::Disabled => None,
        EndpointState::Degraded if current.consecutive_failures >= rules.pause_min_failures => {
            Some(failing_since.plus(rules.pause_after))
        }
        EndpointState::Degraded => None,
        EndpointState::Paused => Some(failing_since.plus(rules.disable_after)),
    }
}

/// One step in progress.
struct Run {
    step: Step,
    now: Timestamp,
}

impl Run {
    /// Applies the state rules until none fires. Terminates because every rule moves strictly
    /// down the chain active → degraded → paused → disabled.
    fn settle(&mut self, rules: &HealthRules) {
        while let Some((to, reason, event_type)) = self.due_rule(rules) {
            self.enter(to, reason, event_type);
        }
    }

    /// The rule that holds for the current health at `now`, if any.
    fn due_rule(&self, rules: &HealthRules) -> Option<(EndpointState, String, &'static str)> {
        let health = &self.step.health;
        let failing_for = health.failing_for(self.now);
        match health.state {
            EndpointState::Active if health.consecutive_failures >= rules.degrade_threshold() => Some((
                EndpointState::Degraded,
                format!("{} failed attempts in a row", rules.degrade_threshold()),
                EVENT_DEGRADED,
            )),
            EndpointState::Degraded
                if health.consecutive_failures >= rules.pause_min_failures
                    && failing_for.is_some_and(|d| d >= rules.pause_after) =>
            {
                Some((
                    EndpointState::Paused,
                    format!(
                        "{} without success and {} failed attempts in a row",
                        describe_duration(rules.pause_after),
                        rules.pause_min_failures
                    ),
                    EVENT_PAUSED,
                ))
            }
            EndpointState::Paused if failing_for.is_some_and(|d| d >= rules.disable_after) => Some((
                EndpointState::Disabled,
                format!("{} without success", describe_duration(rules.disable_after)),
                EVENT_DISABLED,
            )),
            _ => None,
        }
    }

    fn enter(&mut self, to: EndpointState, reason: String, event_type: &'static str) {
        let from = self.step.health.state;
        self.step.health.state = to;
        self.step.health.changed_at = Some(self.now);
        self.step.transitions.push(Transition {
            from,
            to,
            at: self.now,
            reason,
        });
        match (from.receives_events(), to.receives_events()) {
            (true, false) => self.step.effects.push(Effect::StopDeliveries),
            (false, true) => self.step.effects.push(Effect::ResumeDeliveries),
            _ => {}
        }
        self.step.effects.push(Effect::Publish { event_type });
    }
}

/// A rule's duration in words for a reason: "3 days", "1 day", "12 hours", "90 minutes",
/// "45 seconds", or milliseconds when it is not a whole number of seconds.
fn describe_duration(d: Duration) -> String {
    if d.subsec_nanos() != 0 {
        return format!("{} ms", d.as_millis());
    }
    let secs = d.as_secs();
    let (n, unit) = match secs {
        s if s > 0 && s % DAY.as_secs() == 0 => (s / DAY.as_secs(), "day"),
        s if s > 0 && s % 3600 == 0 => (s / 3600, "hour"),
        s if s > 0 && s % 60 == 0 => (s / 60, "minute"),
        s => (s, "second"),
    };
    let plural = if n == 1 { "" } else { "s" };
    format!("{n} {unit}{plural}")
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    use EndpointState::{Active, Degraded, Disabled, Paused};

    const HOUR_MS: i64 = 60 * 60 * 1000;
    const DAY_MS: i64 = 24 * HOUR_MS;
    /// An arbitrary start, 2026-01-01T00:00:00Z, so times read naturally in failure output.
    const T0_MS: i64 = 1_767_225_600_000;

    fn at_ms(ms: i64) -> Timestamp {
        Timestamp::from_millis(T0_MS + ms)
    }

    fn at_days(days: f64) -> Timestamp {
        at_ms((days * DAY_MS as f64).round() as i64)
    }

    const FAIL: HealthInput = HealthInput::AttemptFailed { gone: false };
    const GONE: HealthInput = HealthInput::AttemptFailed { gone: true };
    const OK: HealthInput = HealthInput::AttemptSucceeded;

    /// A persisted health as the store would load it.
    fn health(
        state: EndpointState,
        consecutive_failures: u32,
        failing_since_days: Option<f64>,
    ) -> EndpointHealth {
        EndpointHealth {
            state,
            consecutive_failures,
            failing_since: failing_since_days.map(at_days),
            last_success_at: None,
            changed_at: None,
        }
    }

    /// Feeds `n` failures, one per `gap_ms`, the first at `start`; returns the last step.
    fn fail_n(rules: &HealthRules, from: &EndpointHealth, n: u32, start: Timestamp, gap_ms: i64) -> Step {
        let mut current = from.clone();
        let mut last = None;
        for i in 0..n {
            let now = Timestamp::from_millis(start.as_millis() + i64::from(i) * gap_ms);
            let s = step(rules, &current, FAIL, now);
            current = s.health.clone();
            last = Some(s);
        }
        last.expect("n > 0")
    }

    fn states(s: &Step) -> Vec<(EndpointState, EndpointState)> {
        s.transitions.iter().map(|t| (t.from, t.to)).collect()
    }

    fn moved(from: EndpointState, to: EndpointState, at: Timestamp, reason: &str) -> Transition {
        Transition {
            from,
            to,
            at,
            reason: reason.into(),
        }
    }

    /// A step's effects: stopping or resuming deliveries where that changes, then the event.
    fn effects(deliveries: Option<Effect>, event_type: &'static str) -> Vec<Effect> {
        deliveries
            .into_iter()
            .chain([Effect::Publish { event_type }])
            .collect()
    }

    #[test]
    fn default_rules_are_the_spec_numbers_and_valid() {
        let rules = HealthRules::default();
        assert_eq!(rules.degrade_after_failures, 5);
        assert_eq!(rules.pause_after, Duration::from_secs(3 * 24 * 3600));
        assert_eq!(rules.pause_min_failures, 20);
        assert_eq!(rules.disable_after, Duration::from_secs(7 * 24 * 3600));
        assert_eq!(rules.validate(), Ok(()));
    }

    #[test]
    fn validate_rejects_zero_counts_and_disable_before_pause() {
        let base = HealthRules::default();
        let zero_degrade = HealthRules {
            degrade_after_failures: 0,
            ..base.clone()
        };
        assert_eq!(
            zero_degrade.validate(),
            Err(HealthRulesError::ZeroDegradeFailures)
        );
        let zero_pause = HealthRules {
            pause_min_failures: 0,
            ..base.clone()
        };
        assert_eq!(zero_pause.validate(), Err(HealthRulesError::ZeroPauseFailures));
        let early_disable = HealthRules {
            disable_after: 2 * DAY,
            ..base.clone()
        };
        assert!(matches!(
            early_disable.validate(),
            Err(HealthRulesError::DisableBeforePause { .. })
        ));
        let equal = HealthRules {
            disable_after: base.pause_after,
            ..base
        };
        assert_eq!(equal.validate(), Ok(()));
    }

    #[test]
    fn four_failures_in_a_row_keep_an_endpoint_active() {
        let s = fail_n(
            &HealthRules::default(),
            &EndpointHealth::default(),
            4,
            at_ms(0),
            1000,
        );
        assert_eq!(s.health.state, Active);
        assert_eq!(s.health.consecutive_failures, 4);
        assert_eq!(s.health.failing_since, Some(at_ms(0)));
        assert!(s.transitions.is_empty());
        assert!(s.effects.is_empty());
    }

    #[test]
    fn the_fifth_failure_in_a_row_degrades_and_publishes() {
        let s = fail_n(
            &HealthRules::default(),
            &EndpointHealth::default(),
            5,
            at_ms(0),
            1000,
        );
        assert_eq!(s.health.state, Degraded);
        assert_eq!(s.health.consecutive_failures, 5);
        assert_eq!(s.health.changed_at, Some(at_ms(4000)));
        assert_eq!(
            s.transitions,
            vec![moved(Active, Degraded, at_ms(4000), "5 failed attempts in a row")]
        );
        // Degraded still receives events: nothing to stop.
        assert_eq!(s.effects, effects(None, EVENT_DEGRADED));
    }

    #[test]
    fn a_success_between_failures_restarts_the_count() {
        let rules = HealthRules::default();
        let four = fail_n(&rules, &EndpointHealth::default(), 4, at_ms(0), 1000);
        let ok = step(&rules, &four.health, OK, at_ms(5000));
        assert_eq!(ok.health.consecutive_failures, 0);
        assert_eq!(ok.health.failing_since, None);
        assert_eq!(ok.health.last_success_at, Some(at_ms(5000)));
        let s = fail_n(&rules, &ok.health, 4, at_ms(6000), 1000);
        assert_eq!(s.health.state, Active);
        assert_eq!(s.health.consecutive_failures, 4);
    }

    #[test]
    fn days_without_success_count_from_the_first_failure_after_the_last_success() {
        let rules = HealthRules::default();
        let early = fail_n(&rules, &EndpointHealth::default(), 3, at_days(0.0), HOUR_MS);
        let ok = step(&rules, &early.health, OK, at_days(1.0));
        let later = fail_n(&rules, &ok.health, 2, at_days(1.5), HOUR_MS);
        assert_eq!(later.health.failing_since, Some(at_days(1.5)));
        assert_eq!(later.health.last_success_at, Some(at_days(1.0)));
    }

    #[test]
    fn one_success_brings_a_degraded_endpoint_back_to_active() {
        let degraded = health(Degraded, 12, Some(0.0));
        let s = step(&HealthRules::default(), &degraded, OK, at_days(1.0));
        assert_eq!(s.health.state, Active);
        assert_eq!(s.health.consecutive_failures, 0);
        assert_eq!(s.health.failing_since, None);
        assert_eq!(s.health.last_success_at, Some(at_days(1.0)));
        assert_eq!(s.health.changed_at, Some(at_days(1.0)));
        assert_eq!(s.transitions.len(), 1);
        assert_eq!(s.transitions[0].reason, "delivery succeeded");
        assert_eq!(states(&s), vec![(Degraded, Active)]);
        assert_eq!(s.effects, effects(None, EVENT_RECOVERED));
    }

    #[test]
    fn a_success_on_an_active_endpoint_changes_no_state() {
        let s = step(
            &HealthRules::default(),
            &health(Active, 2, Some(0.0)),
            OK,
            at_days(0.1),
        );
        assert_eq!(s.health.state, Active);
        assert_eq!(s.health.consecutive_failures, 0);
        assert!(s.transitions.is_empty() && s.effects.is_empty());
    }

    /// One step from a loaded state: (state, failures in a row, failing since [days], input,
    /// at [days]) → (state, failures in a row, transitions, effects). The cases with more to
    /// say (reasons, counters, deadlines) have tests of their own below.
    type Moves = Vec<(EndpointState, EndpointState)>;
    /// (state, failures, failing since, input, at) → (state, failures, transitions, effects).
    type Case = (
        EndpointState,
        u32,
        f64,
        HealthInput,
        f64,
        EndpointState,
        u32,
        Moves,
        Vec<Effect>,
    );

    #[test]
    fn one_step_from_a_loaded_state() {
        let ms = |days: f64| days - 1.0 / DAY_MS as f64;
        let paused = Effect::Publish {
            event_type: EVENT_PAUSED,
        };
        let disabled = Effect::Publish {
            event_type: EVENT_DISABLED,
        };
        #[rustfmt::skip]
        let cases: Vec<Case> = vec![
            // Pausing needs both: 3 days without success and 20 failures in a row.
            (Degraded, 20, 0.0, HealthInput::Tick, 2.9, Degraded, 20, vec![], vec![]),
            (Degraded, 20, 0.0, HealthInput::Tick, ms(3.0), Degraded, 20, vec![], vec![]),
            (Degraded, 19, 0.0, HealthInput::Tick, 4.0, Degraded, 19, vec![], vec![]),
            (Degraded, 6, 0.0, HealthInput::Tick, 30.0, Degraded, 6, vec![], vec![]),
            (Degraded, 19, 0.0, FAIL, 3.5, Paused, 20, vec![(Degraded, Paused)], vec![Effect::StopDeliveries, paused]),
            // Disabling needs 7 days without success.
            (Paused, 25, 0.0, HealthInput::Tick, 6.9, Paused, 25, vec![], vec![]),
            (Paused, 25, 0.0, HealthInput::Tick, ms(7.0), Paused, 25, vec![], vec![]),
            (Paused, 21, 0.0, FAIL, 3.5, Paused, 22, vec![], vec![]),
            // 410 Gone disables at once, whatever the count.
            (Active, 4, 0.0, GONE, 0.1, Disabled, 5, vec![(Active, Disabled)], vec![Effect::StopDeliveries, disabled]),
            (Disabled, 3, 0.0, GONE, 1.0, Disabled, 4, vec![], vec![]),
            // A success counts but never revives a paused or disabled endpoint by itself.
            (Disabled, 30, 0.0, OK, 9.0, Disabled, 0, vec![], vec![]),
        ];
        for (i, (state, failures, since, input, at, want_state, want_failures, want_moves, want_effects)) in
            cases.into_iter().enumerate()
        {
            let s = step(
                &HealthRules::default(),
                &health(state, failures, Some(since)),
                input,
                at_days(at),
            );
            let got = (
                s.health.state,
                s.health.consecutive_failures,
                states(&s),
                s.effects.clone(),
            );
            assert_eq!(
                got,
                (want_state, want_failures, want_moves, want_effects),
                "case {i}: {state:?} with {failures} failures, {input:?} at {at} days"
            );
        }
    }

    #[test]
    fn degraded_with_twenty_failures_is_paused_at_exactly_3_days() {
        let s = step(
            &HealthRules::default(),
            &health(Degraded, 20, Some(0.0)),
            HealthInput::Tick,
            at_days(3.0),
        );
        assert_eq!(s.health.state, Paused);
        assert_eq!(s.health.changed_at, Some(at_days(3.0)));
        assert_eq!(
            s.transitions,
            vec![moved(
                Degraded,
                Paused,
                at_days(3.0),
                "3 days without success and 20 failed attempts in a row"
            )]
        );
        assert_eq!(s.effects, effects(Some(Effect::StopDeliveries), EVENT_PAUSED));
        // The tick changes no counters.
        assert_eq!(s.health.consecutive_failures, 20);
        assert_eq!(s.health.failing_since, Some(at_days(0.0)));
    }

    #[test]
    fn twenty_quick_failures_degrade_but_do_not_pause() {
        // 20 failures in 20 seconds: the count is met, the days are not.
        let s = fail_n(
            &HealthRules::default(),
            &EndpointHealth::default(),
            20,
            at_ms(0),
            1000,
        );
        assert_eq!(s.health.state, Degraded);
        assert_eq!(s.health.consecutive_failures, 20);
    }

    #[test]
    fn failures_spread_over_the_retry_schedule_walk_the_whole_chain() {
        // One failure every 4 hours: degraded at the 5th (16 h), paused at 3 days (the 19th
        // failure comes at 72 h but the 20th is needed), disabled 7 days after the first.
        let rules = HealthRules::default();
        let mut current = EndpointHealth::default();
        let mut seen = Vec::new();
        for i in 0..=(7 * 6) {
            let now = at_ms(i * 4 * HOUR_MS);
            let s = step(&rules, &current, FAIL, now);
            for t in &s.transitions {
                seen.push((t.from, t.to, t.at));
            }
            current = s.health;
        }
        assert_eq!(
            seen,
            vec![
                (Active, Degraded, at_ms(16 * HOUR_MS)),
                (Degraded, Paused, at_ms(76 * HOUR_MS)),
                (Paused, Disabled, at_ms(168 * HOUR_MS)),
            ]
        );
    }

    #[test]
    fn paused_is_disabled_at_exactly_7_days_without_stopping_deliveries_again() {
        let s = step(
            &HealthRules::default(),
            &health(Paused, 25, Some(0.0)),
            HealthInput::Tick,
            at_days(7.0),
        );
        assert_eq!(s.health.state, Disabled);
        assert_eq!(
            s.transitions,
            vec![moved(Paused, Disabled, at_days(7.0), "7 days without success")]
        );
        assert_eq!(s.effects, effects(None, EVENT_DISABLED));
    }

    #[test]
    fn a_state_loaded_after_long_downtime_takes_every_due_transition_on_one_tick() {
        let s = step(
            &HealthRules::default(),
            &health(Degraded, 25, Some(0.0)),
            HealthInput::Tick,
            at_days(8.0),
        );
        assert_eq!(s.health.state, Disabled);
        assert_eq!(states(&s), vec![(Degraded, Paused), (Paused, Disabled)]);
        assert_eq!(
            s.transitions
                .iter()
                .map(|t| t.reason.as_str())
                .collect::<Vec<_>>(),
            vec![
                "3 days without success and 20 failed attempts in a row",
                "7 days without success"
            ]
        );
        assert!(s.transitions.iter().all(|t| t.at == at_days(8.0)));
        assert_eq!(
            s.effects,
            vec![
                Effect::StopDeliveries,
                Effect::Publish {
                    event_type: EVENT_PAUSED
                },
                Effect::Publish {
                    event_type: EVENT_DISABLED
                },
            ]
        );
    }

    #[test]
    fn a_410_disables_at_once_from_every_receiving_state() {
        // The state before, when the 410 comes, and whether deliveries still ran to be stopped
        // (a paused endpoint's had stopped already).
        let cases = [
            (EndpointHealth::default(), at_ms(0), Some(Effect::StopDeliveries)),
            (
                health(Degraded, 7, Some(0.0)),
                at_days(0.5),
                Some(Effect::StopDeliveries),
            ),
            (health(Paused, 22, Some(0.0)), at_days(4.0), None),
        ];
        for (from, now, stop) in cases {
            let s = step(&HealthRules::default(), &from, GONE, now);
            assert_eq!(s.health.state, Disabled, "from {:?}", from.state);
            assert_eq!(s.health.consecutive_failures, from.consecutive_failures + 1);
            assert_eq!(s.health.failing_since, from.failing_since.or(Some(now)));
            assert_eq!(
                s.transitions,
                vec![moved(from.state, Disabled, now, "410 Gone from the endpoint")]
            );
            assert_eq!(s.effects, effects(stop, EVENT_DISABLED));
        }
    }

    #[test]
    fn a_success_while_paused_is_counted_but_keeps_the_endpoint_paused() {
        let rules = HealthRules::default();
        let s = step(&rules, &health(Paused, 21, Some(0.0)), OK, at_days(4.0));
        assert_eq!(s.health.state, Paused);
        assert_eq!(s.health.consecutive_failures, 0);
        assert_eq!(s.health.failing_since, None);
        assert_eq!(s.health.last_success_at, Some(at_days(4.0)));
        assert!(s.transitions.is_empty() && s.effects.is_empty());
        // The day clock stopped: no "7 days without success" after a success.
        assert_eq!(next_deadline(&rules, &s.health), None);
        let later = step(&rules, &s.health, HealthInput::Tick, at_days(30.0));
        assert_eq!(later.health.state, Paused);
    }

    #[test]
    fn a_failure_after_a_success_while_paused_restarts_the_day_clock() {
        let rules = HealthRules::default();
        let ok = step(&rules, &health(Paused, 21, Some(0.0)), OK, at_days(4.0));
        let failed = step(&rules, &ok.health, FAIL, at_days(5.0));
        assert_eq!(failed.health.state, Paused);
        assert_eq!(failed.health.failing_since, Some(at_days(5.0)));
        assert_eq!(next_deadline(&rules, &failed.health), Some(at_days(12.0)));
        let s = step(&rules, &failed.health, HealthInput::Tick, at_days(12.0));
        assert_eq!(states(&s), vec![(Paused, Disabled)]);
    }

    #[test]
    fn reenable_makes_an_endpoint_active_again_with_counters_reset() {
        // The state before, its failures, when the operator re-enables it, and whether its
        // deliveries had stopped (a degraded endpoint was receiving already).
        let cases = [
            (Paused, 21, at_days(4.0), Some(Effect::ResumeDeliveries)),
            (Disabled, 40, at_days(10.0), Some(Effect::ResumeDeliveries)),
            (Degraded, 8, at_days(1.0), None),
        ];
        for (state, failures, now, resume) in cases {
            let mut from = health(state, failures, Some(0.0));
            from.last_success_at = Some(at_days(-1.0));
            let s = step(&HealthRules::default(), &from, HealthInput::Reenable, now);
            assert_eq!(s.health.state, Active, "from {state:?}");
            assert_eq!(s.health.consecutive_failures, 0);
            assert_eq!(s.health.failing_since, None);
            assert_eq!(
                s.health.last_success_at,
                Some(at_days(-1.0)),
                "re-enable is not a success"
            );
            assert_eq!(s.health.changed_at, Some(now));
            assert_eq!(
                s.transitions,
                vec![moved(state, Active, now, "re-enabled by operator")]
            );
            assert_eq!(s.effects, effects(resume, EVENT_REENABLED));
        }
    }

    #[test]
    fn a_reenabled_endpoint_takes_five_new_failures_to_degrade_again() {
        let rules = HealthRules::default();
        let disabled = health(Disabled, 40, Some(0.0));
        let s = step(&rules, &disabled, HealthInput::Reenable, at_days(10.0));
        let four = fail_n(&rules, &s.health, 4, at_days(10.1), 1000);
        assert_eq!(four.health.state, Active);
        let fifth = step(&rules, &four.health, FAIL, at_days(10.2));
        assert_eq!(fifth.health.state, Degraded);
    }

    #[test]
    fn reenable_of_an_active_endpoint_only_resets_the_counters() {
        let mut active = health(Active, 3, Some(0.0));
        active.changed_at = Some(at_days(-2.0));
        let s = step(
            &HealthRules::default(),
            &active,
            HealthInput::Reenable,
            at_days(0.5),
        );
        assert_eq!(s.health.state, Active);
        assert_eq!(s.health.consecutive_failures, 0);
        assert_eq!(s.health.failing_since, None);
        assert_eq!(s.health.changed_at, Some(at_days(-2.0)));
        assert!(s.transitions.is_empty() && s.effects.is_empty());
    }

    #[test]
    fn a_tick_without_time_passing_changes_nothing() {
        let rules = HealthRules::default();
        let now = at_days(1.0);
        let cases = [
            EndpointHealth::default(),
            health(Active, 4, Some(0.5)),
            health(Degraded, 19, Some(0.0)),
            health(Degraded, 25, Some(0.5)),
            health(Paused, 25, Some(-3.5)),
            health(Disabled, 2, Some(0.9)),
        ];
        for current in cases {
            let s = step(&rules, &current, HealthInput::Tick, now);
            assert_eq!(s.health, current, "tick changed {current:?}");
            assert!(!s.state_changed() && s.effects.is_empty());
        }
    }

    #[test]
    fn every_step_result_is_stable_under_a_tick_at_the_same_time() {
        let rules = HealthRules::default();
        let s = step(
            &rules,
            &health(Degraded, 25, Some(0.0)),
            HealthInput::Tick,
            at_days(8.0),
        );
        let again = step(&rules, &s.health, HealthInput::Tick, at_days(8.0));
        assert_eq!(again.health, s.health);
        assert!(again.transitions.is_empty());
    }

    #[test]
    fn next_deadline_for_each_state() {
        let rules = HealthRules::default();
        assert_eq!(next_deadline(&rules, &EndpointHealth::default()), None);
        assert_eq!(next_deadline(&rules, &health(Active, 4, Some(1.0))), None);
        assert_eq!(next_deadline(&rules, &health(Degraded, 19, Some(1.0))), None);
        assert_eq!(
            next_deadline(&rules, &health(Degraded, 20, Some(1.0))),
            Some(at_days(4.0))
        );
        assert_eq!(next_deadline(&rules, &health(Degraded, 0, None)), None);
        assert_eq!(
            next_deadline(&rules, &health(Paused, 20, Some(1.0))),
            Some(at_days(8.0))
        );
        assert_eq!(next_deadline(&rules, &health(Paused, 0, None)), None);
        assert_eq!(next_deadline(&rules, &health(Disabled, 30, Some(1.0))), None);
    }

    #[test]
    fn next_deadline_is_due_at_once_when_lowered_rules_already_hold() {
        // Loaded under the defaults, then the YAML lowered the degrade count to 3.
        let lowered = HealthRules {
            degrade_after_failures: 3,
            ..HealthRules::default()
        };
        let active = health(Active, 4, Some(1.0));
        assert_eq!(next_deadline(&lowered, &active), Some(at_days(1.0)));
        let s = step(&lowered, &active, HealthInput::Tick, at_days(2.0));
        assert_eq!(states(&s), vec![(Active, Degraded)]);
        assert_eq!(s.transitions[0].reason, "3 failed attempts in a row");
    }

    #[test]
    fn overridden_rules_name_their_own_numbers_in_reasons() {
        let rules = HealthRules {
            degrade_after_failures: 2,
            pause_after: Duration::from_secs(12 * 3600),
            pause_min_failures: 4,
            disable_after: Duration::from_secs(36 * 3600),
        };
        let mut current = EndpointHealth::default();
        let mut reasons = Vec::new();
        for i in 0..10 {
            let s = step(&rules, &current, FAIL, at_ms(i * 4 * HOUR_MS));
            reasons.extend(s.transitions.into_iter().map(|t| t.reason));
            current = s.health;
        }
        assert_eq!(
            reasons,
            vec![
                "2 failed attempts in a row",
                "12 hours without success and 4 failed attempts in a row",
                "36 hours without success",
            ]
        );
    }

    #[test]
    fn durations_read_as_words() {
        assert_eq!(describe_duration(Duration::from_secs(86_400)), "1 day");
        assert_eq!(describe_duration(Duration::from_secs(3 * 86_400)), "3 days");
        assert_eq!(describe_duration(Duration::from_secs(90 * 60)), "90 minutes");
        assert_eq!(describe_duration(Duration::from_secs(45)), "45 seconds");
        assert_eq!(describe_duration(Duration::ZERO), "0 seconds");
        assert_eq!(describe_duration(Duration::from_millis(1500)), "1500 ms");
    }

    #[test]
    fn failure_count_saturates_instead_of_wrapping() {
        let s = step(
            &HealthRules::default(),
            &health(Disabled, u32::MAX, Some(0.0)),
            FAIL,
            at_days(1.0),
        );
        assert_eq!(s.health.consecutive_failures, u32::MAX);
    }

    fn arb_rules() -> impl Strategy<Value = HealthRules> {
        (1u32..=10, 0i64..=5 * DAY_MS, 1u32..=30, 0i64..=5 * DAY_MS).prop_map(
            |(degrade, pause_ms, pause_min, extra_ms)| HealthRules {
                degrade_after_failures: degrade,
                pause_after: Duration::from_millis(pause_ms as u64),
                pause_min_failures: pause_min,
                disable_after: Duration::from_millis((pause_ms + extra_ms) as u64),
            },
        )
    }

    fn arb_input() -> impl Strategy<Value = HealthInput> {
        prop_oneof![
            8 => Just(FAIL),
            1 => Just(GONE),
            2 => Just(OK),
            3 => Just(HealthInput::Tick),
            1 => Just(HealthInput::Reenable),
        ]
    }

    /// Runs of one input: long runs of failures are what reach paused and disabled.
    fn arb_runs() -> impl Strategy<Value = Vec<(HealthInput, u32, i64)>> {
        prop::collection::vec((arb_input(), 1u32..=25, 0i64..=DAY_MS / 2), 0..40)
    }

    proptest! {
        #[test]
        fn the_invariants_hold_for_any_input_sequence(
            rules in prop_oneof![Just(HealthRules::default()), arb_rules()],
            runs in arb_runs(),
        ) {
            let mut current = EndpointHealth::default();
            let mut now = at_ms(0);
            for (input, repeat, gap_ms) in runs {
                for _ in 0..repeat {
                    now = Timestamp::from_millis(now.as_millis() + gap_ms);
                    let s = step(&rules, &current, input, now);
                    let h = &s.health;

                    prop_assert_eq!(h.failing_since.is_some(), h.consecutive_failures > 0);
                    if let Some(since) = h.failing_since {
                        prop_assert!(since <= now);
                    }
                    if !current.state.receives_events() && input != HealthInput::Reenable {
                        prop_assert!(!h.state.receives_events(), "{:?} left {:?} on {:?}", h.state, current.state, input);
                    }
                    if input == GONE {
                        prop_assert_eq!(h.state, Disabled);
                    }
                    if input == HealthInput::Reenable {
                        prop_assert_eq!(h.state, Active);
                        prop_assert_eq!(h.consecutive_failures, 0);
                    }

                    // Transitions chain from the old state to the new one, all at `now`.
                    let mut at_state = current.state;
                    for t in &s.transitions {
                        prop_assert_eq!(t.from, at_state);
                        prop_assert_ne!(t.from, t.to);
                        prop_assert_eq!(t.at, now);
                        prop_assert!(!t.reason.is_empty());
                        at_state = t.to;
                    }
                    prop_assert_eq!(at_state, h.state);
                    let expected_changed_at = if s.state_changed() { Some(now) } else { current.changed_at };
                    prop_assert_eq!(h.changed_at, expected_changed_at);
                    let publishes = s.effects.iter().filter(|e| matches!(e, Effect::Publish { .. })).count();
                    prop_assert_eq!(publishes, s.transitions.len());

                    // The result is stable, and next_deadline is exact: nothing fires before it,
                    // a transition fires at it, and with no deadline nothing ever fires.
                    prop_assert!(!step(&rules, h, HealthInput::Tick, now).state_changed());
                    match next_deadline(&rules, h) {
                        Some(deadline) => {
                            prop_assert!(deadline > now);
                            let before = deadline.minus(Duration::from_millis(1));
                            prop_assert!(!step(&rules, h, HealthInput::Tick, before).state_changed());
                            prop_assert!(step(&rules, h, HealthInput::Tick, deadline).state_changed());
                        }
                        None => {
                            let far = now.plus(Duration::from_secs(365 * 86_400));
                            prop_assert!(!step(&rules, h, HealthInput::Tick, far).state_changed());
                        }
                    }
                    current = s.health;
                }
            }
        }
    }
}
