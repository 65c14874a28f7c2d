//! A delivery's life after an attempt, as one pure decision: from what the attempt did and
//! where its endpoint stands to the endpoint's health step, the delivery's new status, the
//! time of its next attempt and the error it shows. The actor only applies the decision.
//!
//! The rules, in order:
//! - Health counts what the receiver did. A plugin failure or a drop by a transform says
//!   nothing about the receiver (it was not contacted), so it steps no health.
//! - A drop ends the delivery as `succeeded` with `dropped_by_plugin: <reason>`; anything sent
//!   is planned by the policy ([`policy::plan_next`]).
//! - A retry is not planned for an endpoint that is gone from the config (`endpoint_removed`)
//!   or no longer receives events — paused or disabled, possibly by this very attempt, as a
//!   410 does (`endpoint_paused`): the delivery fails and waits for a replay.
//! - Giving up ends the delivery `dead` when the endpoint keeps dead letters, else `failed`,
//!   with the reason and, for an exhausted policy or a reached deadline, the last error.

use crate::health::{self, EndpointHealth, HealthInput, HealthRules};
use crate::model::{DeliveryStatus, ErrorKind, Outcome, Timestamp};
use crate::policy::{self, BackoffDecision, GiveUpReason, NextStep, Policy, RetryContext};

use crate::attempt::AttemptResult;

/// What an attempt did, and when.
#[derive(Debug, Clone)]
pub(crate) struct AttemptFacts<'a> {
    pub(crate) result: &'a AttemptResult,
    /// The backoff plugin's answer, if the endpoint has one and the attempt failed.
    pub(crate) backoff: Option<BackoffDecision>,
    /// Attempts of this round so far, this one included.
    pub(crate) attempts_made: u32,
    pub(crate) round_started_at: Timestamp,
    /// When the attempt finished.
    pub(crate) now: Timestamp,
    /// Uniform in [-1, 1], for the policy's jitter.
    pub(crate) jitter_sample: f64,
}

/// Where the delivery's endpoint stands.
#[derive(Debug, Clone)]
pub(crate) struct EndpointFacts<'a> {
    /// The endpoint's policy for this delivery (`standard` for a removed endpoint).
    pub(crate) policy: &'a Policy,
    /// Whether it keeps dead letters; `None` when it is no longer configured.
    pub(crate) dead_letter: Option<bool>,
    pub(crate) health: &'a EndpointHealth,
    pub(crate) rules: &'a HealthRules,
}

/// What to do after an attempt.
#[derive(Debug, Clone)]
pub(crate) struct Decision {
    /// The input for the endpoint's health machine, when the attempt says something about the
    /// receiver, and the step it makes from the health the caller knows. The keeper of the
    /// health (the store) applies the input for good; the step predicts its result.
    pub(crate) health: Option<(HealthInput, health::Step)>,
    pub(crate) status: DeliveryStatus,
    /// Set exactly when the delivery stays `pending`.
    pub(crate) next_attempt_at: Option<Timestamp>,
    pub(crate) last_error: Option<String>,
}

pub(crate) fn decide(attempt: &AttemptFacts, endpoint: &EndpointFacts) -> Decision {
    let health = health_input(attempt.result).map(|input| {
        (
            input,
            health::apply(endpoint.rules, endpoint.health, input, attempt.now),
        )
    });
    let receiving = health
        .as_ref()
        .map_or(endpoint.health, |(_, step)| &step.health)
        .state
        .receives_events();
    let (status, next_attempt_at, last_error) = match attempt.result {
        AttemptResult::Dropped { reason } => (
            DeliveryStatus::Succeeded,
            None,
            Some(format!("dropped_by_plugin: {reason}")),
        ),
        AttemptResult::Sent(outcome) => {
            let step = policy::plan_next(
                endpoint.policy,
                &RetryContext {
                    attempts_made: attempt.attempts_made,
                    round_started_at: attempt.round_started_at,
                    now: attempt.now,
                    outcome,
                    jitter_sample: attempt.jitter_sample,
                    plugin_decision: attempt.backoff.clone(),
                },
            );
            settle(outcome, step, endpoint.dead_letter, receiving)
        }
    };
    Decision {
        health,
        status,
        next_attempt_at,
        last_error,
    }
}

/// What the attempt tells the endpoint's health machine.
fn health_input(result: &AttemptResult) -> Option<HealthInput> {
    match result {
        AttemptResult::Dropped { .. } => None,
        AttemptResult::Sent(Outcome::Delivered { .. }) => Some(HealthInput::AttemptSucceeded),
        // Neither a plugin's failure nor an expunged payload is the endpoint's.
        AttemptResult::Sent(Outcome::Failed {
            kind: ErrorKind::PluginError | ErrorKind::PayloadExpunged,
            ..
        }) => None,
        AttemptResult::Sent(outcome) => Some(HealthInput::AttemptFailed {
            gone: outcome.is_gone(),
        }),
    }
}

fn settle(
    outcome: &Outcome,
    step: NextStep,
    dead_letter: Option<bool>,
    receiving: bool,
) -> (DeliveryStatus, Option<Timestamp>, Option<String>) {
    let attempt_error = match outcome {
        Outcome::Failed { kind, detail, .. } => Some(format!("{kind}: {detail}")),
        Outcome::Delivered { .. } => None,
    };
    let ended = |kind: ErrorKind| (DeliveryStatus::Failed, None, Some(kind.as_str().to_owned()));
    match step {
        NextStep::Done => (DeliveryStatus::Succeeded, None, None),
        NextStep::RetryAt(_) if dead_letter.is_none() => ended(ErrorKind::EndpointRemoved),
        NextStep::RetryAt(_) if !receiving => ended(ErrorKind::EndpointPaused),
        NextStep::RetryAt(at) => (DeliveryStatus::Pending, Some(at), attempt_error),
        NextStep::GiveUp(reason) => {
            let why = match (&reason, &attempt_error) {
                (GiveUpReason::Exhausted | GiveUpReason::DeadlineReached, Some(e)) => {
                    format!("{}: {e}", reason.as_str())
                }
                _ => reason.as_str().to_owned(),
            };
            let status = if dead_letter == Some(true) {
                DeliveryStatus::Dead
            } else {
                DeliveryStatus::Failed
            };
            (status, None, Some(why))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::model::EndpointState;
    use crate::policy::PolicySpec;

    const NOW: Timestamp = Timestamp::from_millis(1_000_000);

    fn failed(kind: ErrorKind, status: Option<u16>) -> AttemptResult {
        AttemptResult::Sent(Outcome::Failed {
            kind,
            status,
            retry_after: None,
            detail: "detail".into(),
        })
    }

    fn two_attempts() -> Policy {
        let spec = PolicySpec {
            schedule: Some(vec!["0s".into(), "10s".into()]),
            jitter: Some(0.0),
            ..PolicySpec::default()
        };
        Policy::from_spec("two", &spec).unwrap()
    }

    /// Where the endpoint stands in a case.
    #[derive(Clone, Copy, Debug)]
    enum Endpoint {
        Active,
        DeadLetter,
        Paused,
        Removed,
    }

    struct Case {
        name: &'static str,
        result: AttemptResult,
        endpoint: Endpoint,
        /// Attempts made in the round, this one included (the policy allows two).
        attempts_made: u32,
        health: Option<HealthInputKind>,
        status: DeliveryStatus,
        retry: bool,
        last_error: Option<&'static str>,
    }

    #[derive(Debug, PartialEq)]
    enum HealthInputKind {
        Success,
        Failure,
    }

    /// Long on purpose: it is the table of every case, one row each, which reads better whole
    /// than split.
    #[test]
    fn every_attempt_result_maps_to_health_status_next_time_and_error() {
        use DeliveryStatus::{Dead, Failed, Pending, Succeeded};
        use Endpoint::{Active, DeadLetter, Paused, Removed};
        use HealthInputKind::{Failure, Success};
        let delivered = || AttemptResult::Sent(Outcome::Delivered { status: Some(204) });
        let server_error = || failed(ErrorKind::HttpStatus, Some(503));
        let cases = [
            Case {
                name: "delivered",
                result: delivered(),
                endpoint: Active,
                attempts_made: 1,
                health: Some(Success),
                status: Succeeded,
                retry: false,
                last_error: None,
            },
            Case {
                name: "dropped by a transform",
                result: AttemptResult::Dropped {
                    reason: "spam".into(),
                },
                endpoint: Active,
                attempts_made: 1,
                health: None,
                status: Succeeded,
                retry: false,
                last_error: Some("dropped_by_plugin: spam"),
            },
            Case {
                name: "a failure with attempts left",
                result: server_error(),
                endpoint: Active,
                attempts_made: 1,
                health: Some(Failure),
                status: Pending,
                retry: true,
                last_error: Some("http_status: detail"),
            },
            Case {
                name: "a plugin failure is retried, not counted",
                result: failed(ErrorKind::PluginError, None),
                endpoint: Active,
                attempts_made: 1,
                health: None,
                status: Pending,
                retry: true,
                last_error: Some("plugin_error: detail"),
            },
            Case {
                name: "exhausted",
                result: server_error(),
                endpoint: Active,
                attempts_made: 2,
                health: Some(Failure),
                status: Failed,
                retry: false,
                last_error: Some("exhausted: http_status: detail"),
            },
            Case {
                name: "exhausted with a dead letter",
                result: server_error(),
                endpoint: DeadLetter,
                attempts_made: 2,
                health: Some(Failure),
                status: Dead,
                retry: false,
                last_error: Some("exhausted: http_status: detail"),
            },
            Case {
                name: "410 gone",
                result: failed(ErrorKind::HttpStatus, Some(410)),
                endpoint: DeadLetter,
                attempts_made: 1,
                health: Some(Failure),
                status: Dead,
                retry: false,
                last_error: Some("gone"),
            },
            Case {
                name: "a retry for a paused endpoint",
                result: server_error(),
                endpoint: Paused,
                attempts_made: 1,
                health: Some(Failure),
                status: Failed,
                retry: false,
                last_error: Some("endpoint_paused"),
            },
            Case {
                name: "a retry for a removed endpoint",
                result: server_error(),
                endpoint: Removed,
                attempts_made: 1,
                health: Some(Failure),
                status: Failed,
                retry: false,
                last_error: Some("endpoint_removed"),
            },
            Case {
                name: "success for a removed endpoint",
                result: delivered(),
                endpoint: Removed,
                attempts_made: 1,
                health: Some(Success),
                status: Succeeded,
                retry: false,
                last_error: None,
            },
        ];
        let policy = two_attempts();
        let rules = HealthRules::default();
        for case in cases {
            let health = EndpointHealth {
                state: match case.endpoint {
                    Endpoint::Paused => EndpointState::Paused,
                    _ => EndpointState::Active,
                },
                ..EndpointHealth::default()
            };
            let decision = decide(
                &AttemptFacts {
                    result: &case.result,
                    backoff: None,
                    attempts_made: case.attempts_made,
                    round_started_at: NOW,
                    now: NOW,
                    jitter_sample: 0.0,
                },
                &EndpointFacts {
                    policy: &policy,
                    dead_letter: match case.endpoint {
                        Endpoint::Removed => None,
                        Endpoint::DeadLetter => Some(true),
                        _ => Some(false),
                    },
                    health: &health,
                    rules: &rules,
                },
            );
            let health_kind = decision.health.as_ref().map(|(_, step)| {
                if step.health.consecutive_failures == 0 {
                    Success
                } else {
                    Failure
                }
            });
            assert_eq!(health_kind, case.health, "{}", case.name);
            assert_eq!(decision.status, case.status, "{}", case.name);
            assert_eq!(
                decision.next_attempt_at,
                case.retry.then(|| NOW.plus(Duration::from_secs(10))),
                "{}",
                case.name
            );
            assert_eq!(decision.last_error.as_deref(), case.last_error, "{}", case.name);
        }
    }

    /// A 410 disables the endpoint in the same step, so its other pending retries end too: the
    /// attempt's own delivery is decided against the health it leaves behind.
    #[test]
    fn a_retry_is_not_planned_when_this_attempt_stops_the_endpoint() {
        let policy = two_attempts();
        let rules = HealthRules {
            degrade_after_failures: 1,
            pause_min_failures: 1,
            pause_after: Duration::ZERO,
            ..HealthRules::default()
        };
        let health = EndpointHealth {
            state: EndpointState::Degraded,
            consecutive_failures: 1,
            failing_since: Some(NOW.minus(Duration::from_secs(1))),
            ..EndpointHealth::default()
        };
        let result = failed(ErrorKind::HttpStatus, Some(503));
        let decision = decide(
            &AttemptFacts {
                result: &result,
                backoff: None,
                attempts_made: 1,
                round_started_at: NOW,
                now: NOW,
                jitter_sample: 0.0,
            },
            &EndpointFacts {
                policy: &policy,
                dead_letter: Some(false),
                health: &health,
                rules: &rules,
            },
        );
        assert_eq!(decision.health.unwrap().1.health.state, EndpointState::Paused);
        assert_eq!(decision.status, DeliveryStatus::Failed);
        assert_eq!(decision.last_error.as_deref(), Some("endpoint_paused"));
    }
}
