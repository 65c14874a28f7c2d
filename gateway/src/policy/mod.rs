//! Retry policies (README "Retry policies", docs/policies.md): which failures are retried, when the
//! next attempt is due, and when a delivery gives up.
//!
//! Everything here is pure: no I/O, no clock, no randomness. Times and the jitter sample are
//! arguments, so the 72-hour schedule and the 100 015 retries of `sns-aws-managed` are tested
//! in microseconds. The scheduler calls [`plan_next`] after every failed attempt; the CLI and
//! the API call [`preview`] and its renderers.
//!
//! A policy is one of two kinds:
//! - a *schedule*: a list of waits, optionally bounded by a deadline counted from the event's
//!   receipt (`standard`: 9 attempts within 72 h);
//! - an *SNS delivery policy*: the four phases of SNS HTTP/S retries, taken verbatim.

mod classify;
pub mod curves;
mod duration;
mod plan;
mod preview;
pub mod sns;

use std::fmt;
use std::time::Duration;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use classify::{Classification, classify};
pub use curves::BackoffFunction;
pub use duration::{DurationError, MAX_POLICY_DURATION, format_duration, humanize_duration, parse_duration};
pub use plan::{BackoffDecision, GiveUpReason, NextStep, RetryContext, plan_next};
pub use preview::{PlannedAttempt, preview, render_preview_table};
pub use sns::SnsPolicy;

/// Which failures a policy retries (key `retry_on`, docs/policies.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RetryOn {
    /// Every failure except 410 Gone (the `standard` preset's rule).
    All,
    /// 5xx, 429, timeouts and connection errors; every other failure is permanent (SNS).
    Sns,
}

impl RetryOn {
    pub fn as_str(self) -> &'static str {
        match self {
            RetryOn::All => "all",
            RetryOn::Sns => "sns",
        }
    }
}

/// Where a planned attempt sits in its policy, for previews.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Attempt 1, made as soon as the event is committed.
    Initial,
    /// A later attempt of a schedule policy.
    Schedule,
    /// SNS phase 1: retries at once.
    NoDelay,
    /// SNS phase 2: retries `minDelayTarget` apart.
    PreBackoff,
    /// SNS phase 3: delays rising along `backoffFunction`.
    Backoff,
    /// SNS phase 4: retries `maxDelayTarget` apart.
    PostBackoff,
}

impl Phase {
    /// The snake_case name used in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Initial => "initial",
            Phase::Schedule => "schedule",
            Phase::NoDelay => "no_delay",
            Phase::PreBackoff => "pre_backoff",
            Phase::Backoff => "backoff",
            Phase::PostBackoff => "post_backoff",
        }
    }

    /// The name the SNS documentation uses, for tables and charts.
    pub fn label(self) -> &'static str {
        match self {
            Phase::Initial => "initial",
            Phase::Schedule => "schedule",
            Phase::NoDelay => "no-delay",
            Phase::PreBackoff => "pre-backoff",
            Phase::Backoff => "backoff",
            Phase::PostBackoff => "post-backoff",
        }
    }
}

/// What a user writes under `policies.<name>:` in YAML.
///
/// Exactly one of `schedule`, `sns` or `preset`. `preset` bases a policy on a built-in one and
/// overrides only `jitter`, `retry_on` (and `deadline` of the schedule preset `standard`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PolicySpec {
    /// Waits before each attempt, in the one duration grammar (`0s`, `30s`, `2m`, `1h 30m`,
    /// `1d`; `parse_duration`). The first is the first attempt's and must be `0s`: a delivery
    /// is attempted as soon as it exists.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::model::text_or_number::option_list"
    )]
    pub schedule: Option<Vec<String>>,
    /// Schedule policies only: no attempt later than this after the event was received
    /// (e.g. `72h`); a later one is brought forward to it and is the last.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "crate::model::text_or_number::option"
    )]
    pub deadline: Option<String>,
    /// Each wait is multiplied by `1 + jitter·u`, `u` uniform in [-1, 1]. 0 ..= 1, default 0.2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter: Option<f64>,
    /// Default: `sns` for SNS policies, `all` otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_on: Option<RetryOn>,
    /// The SNS delivery-policy document: a mapping, or the JSON pasted verbatim as a string.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sns: Option<serde_json::Value>,
    /// The name of a built-in policy to start from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<String>,
}

/// A problem found while building a policy. `path` is relative to `policies.<name>`, dotted,
/// list items in brackets (`schedule[2]`, `sns.healthyRetryPolicy.numRetries`); empty when
/// the problem is the policy as a whole.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{}: {message}", if path.is_empty() { "(policy)" } else { path.as_str() })]
pub struct PolicyProblem {
    pub path: String,
    pub message: String,
}

impl PolicyProblem {
    pub fn new(path: impl Into<String>, message: impl Into<String>) -> Self {
        PolicyProblem {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The full config path, e.g. `policies.fast.sns.healthyRetryPolicy.numRetries`.
    pub fn full_path(&self, policy_name: &str) -> String {
        if self.path.is_empty() {
            format!("policies.{policy_name}")
        } else {
            format!("policies.{policy_name}.{}", self.path)
        }
    }
}

/// A schedule policy: the wait before every attempt, and an optional deadline.
#[derive(Clone, Debug, PartialEq)]
pub struct SchedulePolicy {
    /// `waits[n - 1]` is the wait before attempt `n`; `waits[0]` is zero.
    pub waits: Vec<Duration>,
    /// Counted from the event's receipt.
    pub deadline: Option<Duration>,
}

/// The two kinds of policy.
#[derive(Clone, Debug, PartialEq)]
pub enum PolicyKind {
    Schedule(SchedulePolicy),
    Sns(SnsPolicy),
}

/// A validated retry policy, ready for [`plan_next`] and [`preview`].
#[derive(Clone, Debug, PartialEq)]
pub struct Policy {
    pub name: String,
    kind: PolicyKind,
    jitter: f64,
    retry_on: RetryOn,
    content_type: Option<String>,
}

/// The jitter of every policy unless it says otherwise: ±20 % (docs/policies.md).
pub const DEFAULT_JITTER: f64 = 0.2;

const PRESET_NAMES: [&str; 4] = [
    "standard",
    "sns-http-default",
    "sns-aws-managed",
    "sns-customer-managed",
];

impl Policy {
    /// The README's standard schedule: 9 attempts (waits 0, 30 s, 2 min, 10 min, 1 h, 4 h, 12 h, 1
    /// d, 2 d), none later than 72 h after the event was received, ±20 % jitter, retry on every
    /// failure.
    pub fn standard() -> Policy {
        let minutes = |m: u64| Duration::from_secs(m * 60);
        let hours = |h: u64| Duration::from_secs(h * 3600);
        Policy {
            name: "standard".to_owned(),
            kind: PolicyKind::Schedule(SchedulePolicy {
                waits: vec![
                    Duration::ZERO,
                    Duration::from_secs(30),
                    minutes(2),
                    minutes(10),
                    hours(1),
                    hours(4),
                    hours(12),
                    hours(24),
                    hours(48),
                ],
                deadline: Some(hours(72)),
            }),
            jitter: DEFAULT_JITTER,
            retry_on: RetryOn::All,
            content_type: None,
        }
    }

    /// The built-in policies, usable by name: `standard`, `sns-http-default`,
    /// `sns-aws-managed`, `sns-customer-managed`.
    ///
    /// The two system policies of SNS are beyond the limits of a user's HTTP/S policy (more
    /// than 100 retries, more than 3600 s) because SNS uses them for other protocols; they are
    /// offered for their long retry spans. For the same reason they carry no request policy:
    /// a request under them keeps the event's own `Content-Type`, whereas `sns-http-default`
    /// is the HTTP/S default and sends `text/plain; charset=UTF-8` like SNS does.
    pub fn presets() -> Vec<Policy> {
        let sns_preset = |name: &str, sns: SnsPolicy, content_type: Option<&str>| Policy {
            name: name.to_owned(),
            kind: PolicyKind::Sns(sns),
            jitter: DEFAULT_JITTER,
            retry_on: RetryOn::Sns,
            content_type: content_type.map(str::to_owned),
        };
        let system = |no_delay, min_retries, min_s, max_s, max_retries| SnsPolicy {
            min_delay_s: min_s,
            max_delay_s: max_s,
            num_retries: no_delay + min_retries + 10 + max_retries,
            num_no_delay_retries: no_delay,
            num_min_delay_retries: min_retries,
            num_max_delay_retries: max_retries,
            backoff_function: BackoffFunction::Exponential,
            max_receives_per_second: None,
            header_content_type: None,
        };
        vec![
            Policy::standard(),
            sns_preset(
                "sns-http-default",
                SnsPolicy::http_default(),
                Some(sns::SNS_DEFAULT_CONTENT_TYPE),
            ),
            // 3 at once, 2 at 1 s, 10 exponential 1 → 20 s, 100 000 at 20 s: 100 015 retries.
            sns_preset("sns-aws-managed", system(3, 2, 1, 20, 100_000), None),
            // 0 at once, 2 at 10 s, 10 exponential 10 → 600 s, 38 at 600 s: 50 retries.
            sns_preset("sns-customer-managed", system(0, 2, 10, 600, 38), None),
        ]
    }

    /// The built-in policy of that name.
    pub fn preset(name: &str) -> Option<Policy> {
        Policy::presets().into_iter().find(|p| p.name == name)
    }

    pub fn is_preset_name(name: &str) -> bool {
        PRESET_NAMES.contains(&name)
    }

    /// The names of the built-in policies, in the order of [`Policy::presets`].
    pub fn preset_names() -> &'static [&'static str] {
        &PRESET_NAMES
    }

    /// Builds a user policy from its YAML, reporting every problem, not just the first.
    ///
    /// A user policy may not take a preset's name: a config that silently replaced
    /// `standard` would change every endpoint that relies on the default. `preset: standard`
    /// under another name is the way to adjust one.
    pub fn from_spec(name: &str, spec: &PolicySpec) -> Result<Policy, Vec<PolicyProblem>> {
        let mut problems = Vec::new();
        if Policy::is_preset_name(name) {
            problems.push(PolicyProblem::new(
                "",
                format!(
                    "`{name}` is a built-in policy and cannot be redefined; use another name \
                     with `preset: {name}` to adjust it"
                ),
            ));
        }
        check_one_kind(spec, &mut problems);
        let jitter = spec_jitter(spec.jitter, &mut problems);
        let deadline = spec_deadline(spec.deadline.as_deref(), &mut problems);
        let mut kind = None;
        let mut content_type = None;
        if let Some(texts) = &spec.schedule {
            let waits = schedule_waits(texts, &mut problems);
            kind = Some(PolicyKind::Schedule(SchedulePolicy { waits, deadline }));
        }
        if let Some(document) = &spec.sns {
            match SnsPolicy::from_document(document, "sns", true) {
                Ok(sns) => {
                    content_type = Some(sns.content_type().to_owned());
                    kind = Some(PolicyKind::Sns(sns));
                }
                Err(found) => problems.extend(found),
            }
        }
        if let Some(preset_name) = &spec.preset
            && let Some(preset) = preset_with(preset_name, deadline, &mut problems)
        {
            content_type = preset.content_type;
            kind = Some(preset.kind);
        }
        if spec.deadline.is_some() && matches!(kind, Some(PolicyKind::Sns(_))) {
            problems.push(PolicyProblem::new(
                "deadline",
                "only schedule policies have a deadline; an SNS policy ends when its numRetries \
                 are used up",
            ));
        }
        match kind {
            Some(kind) if problems.is_empty() => {
                let retry_on = spec.retry_on.unwrap_or(match kind {
                    PolicyKind::Schedule(_) => RetryOn::All,
                    PolicyKind::Sns(_) => RetryOn::Sns,
                });
                Ok(Policy {
                    name: name.to_owned(),
                    kind,
                    jitter,
                    retry_on,
                    content_type,
                })
            }
            _ => Err(problems),
        }
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> &PolicyKind {
        &self.kind
    }

    pub fn retry_on(&self) -> RetryOn {
        self.retry_on
    }

    /// The relative jitter, 0 ..= 1: each wait is multiplied by `1 + jitter·u`, u ∈ [-1, 1].
    pub fn jitter(&self) -> f64 {
        self.jitter
    }

    /// The most attempts a delivery gets in one round: the schedule's length, or
    /// `1 + numRetries` for an SNS policy (the first attempt is not a retry).
    pub fn max_attempts(&self) -> u32 {
        match &self.kind {
            PolicyKind::Schedule(schedule) => u32::try_from(schedule.waits.len()).unwrap_or(u32::MAX),
            PolicyKind::Sns(sns) => sns.num_retries.saturating_add(1),
        }
    }

    /// How long after the event's receipt the last attempt may be made; SNS policies have none.
    pub fn deadline(&self) -> Option<Duration> {
        match &self.kind {
            PolicyKind::Schedule(schedule) => schedule.deadline,
            PolicyKind::Sns(_) => None,
        }
    }

    /// The `Content-Type` the policy imposes on requests: the SNS request policy's
    /// `headerContentType`, `text/plain; charset=UTF-8` for an SNS HTTP/S policy without one,
    /// `None` (the event's own type) for schedule policies and the SNS system presets.
    pub fn content_type(&self) -> Option<&str> {
        self.content_type.as_deref()
    }

    /// `throttlePolicy.maxReceivesPerSecond`: an average rate per endpoint, not a strict cap.
    pub fn max_receives_per_second(&self) -> Option<u32> {
        match &self.kind {
            PolicyKind::Schedule(_) => None,
            PolicyKind::Sns(sns) => sns.max_receives_per_second,
        }
    }

    /// The same policy with another jitter (clamped to 0 ..= 1). Previews and tests use 0.
    pub fn with_jitter(&self, jitter: f64) -> Policy {
        let jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(0.0, 1.0)
        };
        Policy {
            jitter,
            ..self.clone()
        }
    }

    /// The un-jittered wait before attempt `n` (1-based) and its phase, or `None` past
    /// [`Policy::max_attempts`]. Attempt 1 waits nothing. Costs the same for any `n`.
    pub fn planned_wait(&self, n: u32) -> Option<(Duration, Phase)> {
        if n == 0 || n > self.max_attempts() {
            return None;
        }
        if n == 1 {
            return Some((Duration::ZERO, Phase::Initial));
        }
        match &self.kind {
            PolicyKind::Schedule(schedule) => schedule
                .waits
                .get(n as usize - 1)
                .map(|wait| (*wait, Phase::Schedule)),
            PolicyKind::Sns(sns) => sns.retry_delay(n - 1),
        }
    }

    /// One line for a preview's heading, e.g.
    /// `standard: schedule of 9 attempts, deadline 3d after the event, jitter ±20%, retry on all`.
    pub fn summary(&self) -> String {
        let shape = match &self.kind {
            PolicyKind::Schedule(schedule) => {
                let deadline = schedule
                    .deadline
                    .map(|d| format!(", deadline {} after the event", humanize_duration(d)))
                    .unwrap_or_default();
                format!("schedule of {} attempts{deadline}", schedule.waits.len())
            }
            PolicyKind::Sns(sns) => format!(
                "SNS delivery policy, {} retries ({} no-delay, {} pre-backoff at {} s, {} {} backoff \
                 {} → {} s, {} post-backoff at {} s)",
                sns.num_retries,
                sns.num_no_delay_retries,
                sns.num_min_delay_retries,
                sns.min_delay_s,
                sns.num_backoff_retries(),
                sns.backoff_function,
                sns.min_delay_s,
                sns.max_delay_s,
                sns.num_max_delay_retries,
                sns.max_delay_s
            ),
        };
        format!(
            "{}: {shape}, jitter ±{}%, retry on {}",
            self.name,
            (self.jitter * 100.0).round(),
            self.retry_on.as_str()
        )
    }
}

impl fmt::Display for Policy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.summary())
    }
}

/// A policy is exactly one of `schedule`, `sns` or `preset`.
fn check_one_kind(spec: &PolicySpec, problems: &mut Vec<PolicyProblem>) {
    let given: Vec<&str> = [
        ("schedule", spec.schedule.is_some()),
        ("sns", spec.sns.is_some()),
        ("preset", spec.preset.is_some()),
    ]
    .into_iter()
    .filter_map(|(key, present)| present.then_some(key))
    .collect();
    match given.len() {
        0 => problems.push(PolicyProblem::new(
            "",
            "needs one of `schedule`, `sns` or `preset`",
        )),
        1 => {}
        _ => problems.push(PolicyProblem::new(
            "",
            format!("{} exclude each other; give exactly one", given.join(" and ")),
        )),
    }
}

/// `jitter`, from 0 to 1; the default when absent or wrong.
fn spec_jitter(jitter: Option<f64>, problems: &mut Vec<PolicyProblem>) -> f64 {
    let problem = match jitter {
        None => return DEFAULT_JITTER,
        Some(j) if (0.0..=1.0).contains(&j) => return j,
        Some(j) if j.is_nan() => "must be a number from 0 to 1".to_owned(),
        Some(j) if j < 0.0 => format!("{j} is below the minimum 0"),
        Some(j) => format!("{j} is above the maximum 1"),
    };
    problems.push(PolicyProblem::new("jitter", problem));
    DEFAULT_JITTER
}

/// `deadline`, longer than 0 and at most [`MAX_POLICY_DURATION`].
fn spec_deadline(text: Option<&str>, problems: &mut Vec<PolicyProblem>) -> Option<Duration> {
    let text = text?;
    match parse_duration(text) {
        Ok(d) if d.is_zero() => {
            problems.push(PolicyProblem::new("deadline", "must be longer than 0s"));
            None
        }
        Ok(d) if d > MAX_POLICY_DURATION => {
            problems.push(PolicyProblem::new("deadline", too_long(text)));
            None
        }
        Ok(d) => Some(d),
        Err(message) => {
            problems.push(PolicyProblem::new("deadline", message.to_string()));
            None
        }
    }
}

fn too_long(text: &str) -> String {
    format!("`{text}` is too long: at most 365d")
}

/// The waits of a `schedule`, the first of which must be `0s` (the first attempt is at once).
fn schedule_waits(texts: &[String], problems: &mut Vec<PolicyProblem>) -> Vec<Duration> {
    if texts.is_empty() {
        problems.push(PolicyProblem::new(
            "schedule",
            "needs at least one wait: `0s`, the first attempt",
        ));
    }
    let mut waits = Vec::with_capacity(texts.len());
    for (i, text) in texts.iter().enumerate() {
        match parse_duration(text) {
            Ok(wait) if wait > MAX_POLICY_DURATION => {
                problems.push(PolicyProblem::new(format!("schedule[{i}]"), too_long(text)));
            }
            Ok(wait) => waits.push(wait),
            Err(message) => problems.push(PolicyProblem::new(format!("schedule[{i}]"), message.to_string())),
        }
    }
    if let (Some(first), Some(first_wait)) = (texts.first(), waits.first())
        && waits.len() == texts.len()
        && !first_wait.is_zero()
    {
        problems.push(PolicyProblem::new(
            "schedule[0]",
            format!(
                "is the wait before the first attempt, which is made at once: write 0s, \
                 not {first}, and put the waits between attempts after it"
            ),
        ));
    }
    waits
}

/// The preset `name`, with the spec's `deadline` (if any) replacing a schedule preset's.
fn preset_with(name: &str, deadline: Option<Duration>, problems: &mut Vec<PolicyProblem>) -> Option<Policy> {
    let Some(mut preset) = Policy::preset(name) else {
        problems.push(PolicyProblem::new(
            "preset",
            format!(
                "unknown preset `{name}`; the presets are {}",
                PRESET_NAMES.join(", ")
            ),
        ));
        return None;
    };
    if let PolicyKind::Schedule(schedule) = &mut preset.kind {
        schedule.deadline = deadline.or(schedule.deadline);
    }
    Some(preset)
}

#[cfg(test)]
mod tests;
