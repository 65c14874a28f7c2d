//! What a policy will do, before anyone trusts it (README "Retry policies", `hookgate policy
//! preview`): the planned attempts without jitter, with the deadline applied.

use std::fmt::Write as _;
use std::time::Duration;

use super::{Phase, Policy, humanize_duration};

/// One planned attempt of a preview.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedAttempt {
    /// 1 for the first attempt.
    pub n: u32,
    /// The time since the previous attempt (zero for attempt 1), after the deadline clamp:
    /// always `at − previous at`.
    pub wait: Duration,
    /// The time since the event was received.
    pub at: Duration,
    pub phase: Phase,
    /// The policy's own wait before this attempt; larger than `wait` only for an attempt
    /// brought forward to the deadline.
    pub scheduled_wait: Duration,
}

impl PlannedAttempt {
    /// True when the deadline brought this attempt forward (it is then the last).
    pub fn brought_forward(&self) -> bool {
        self.scheduled_wait > self.wait
    }
}

/// The planned attempts of `policy`, un-jittered: attempt 1 at 0, each later one its wait
/// after the previous. An attempt past the deadline is brought forward to it and ends the
/// list, as [`super::plan_next`] does. Lists every attempt (100 016 for `sns-aws-managed`),
/// each computed in constant time.
pub fn preview(policy: &Policy) -> Vec<PlannedAttempt> {
    let deadline = policy.deadline();
    let mut attempts = Vec::with_capacity(policy.max_attempts().min(1_000_000) as usize);
    let mut at = Duration::ZERO;
    for n in 1..=policy.max_attempts() {
        let Some((scheduled_wait, phase)) = policy.planned_wait(n) else {
            break;
        };
        let mut wait = scheduled_wait;
        let mut planned_at = at + scheduled_wait;
        let mut last = false;
        if let Some(deadline) = deadline
            && planned_at >= deadline
        {
            planned_at = planned_at.min(deadline);
            wait = planned_at - at;
            last = true;
        }
        at = planned_at;
        attempts.push(PlannedAttempt {
            n,
            wait,
            at,
            phase,
            scheduled_wait,
        });
        if last {
            break;
        }
    }
    attempts
}

/// Attempts beyond which a preview table folds long runs of equal waits.
const TABLE_FOLD_ABOVE_ATTEMPTS: usize = 200;
/// The shortest run of equal waits that a long table folds into first row, ellipsis, last row.
const TABLE_FOLD_MIN_RUN: usize = 6;

/// One attempt's row of the preview table.
fn preview_row(a: &PlannedAttempt) -> [String; 4] {
    let mut phase = a.phase.label().to_owned();
    if a.brought_forward() {
        let _ = write!(
            phase,
            " (brought forward to the deadline; planned wait {})",
            humanize_duration(a.scheduled_wait)
        );
    }
    [
        a.n.to_string(),
        humanize_duration(a.wait),
        humanize_duration(a.at),
        phase,
    ]
}

/// The preview as a text table for the CLI: attempt, wait, time since the event, phase.
///
/// Every attempt has its row, except in previews of more than 200 attempts, where a run of
/// equal waits in one phase shows its first and last rows around a line saying how many are
/// folded — `sns-aws-managed` would otherwise print 100 016 lines.
pub fn render_preview_table(policy: &Policy) -> String {
    let attempts = preview(policy);
    let mut rows: Vec<[String; 4]> = Vec::new();
    let row = preview_row;
    let fold = attempts.len() > TABLE_FOLD_ABOVE_ATTEMPTS;
    let mut i = 0;
    while i < attempts.len() {
        let first = &attempts[i];
        let run = attempts[i..]
            .iter()
            .take_while(|a| a.phase == first.phase && a.wait == first.wait && !a.brought_forward())
            .count()
            .max(1);
        if fold && run >= TABLE_FOLD_MIN_RUN {
            let last = &attempts[i + run - 1];
            rows.push(row(first));
            rows.push([
                "…".to_owned(),
                String::new(),
                String::new(),
                format!("{} more, {} apart", run - 2, humanize_duration(first.wait)),
            ]);
            rows.push(row(last));
            i += run;
        } else {
            rows.push(row(first));
            i += 1;
        }
    }

    let header = ["attempt", "wait", "since event", "phase"];
    let mut widths = header.map(str::len);
    for r in &rows {
        for (width, cell) in widths.iter_mut().zip(r) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let _ = writeln!(out, "{}", policy.summary());
    let _ = writeln!(
        out,
        "{} attempts, the last {} after the event (without jitter)",
        attempts.len(),
        humanize_duration(attempts.last().map(|a| a.at).unwrap_or_default())
    );
    out.push('\n');
    let line = |cells: [&str; 4]| {
        format!(
            "{:>w0$}  {:>w1$}  {:>w2$}  {}",
            cells[0],
            cells[1],
            cells[2],
            cells[3],
            w0 = widths[0],
            w1 = widths[1],
            w2 = widths[2],
        )
        .trim_end()
        .to_owned()
    };
    let _ = writeln!(out, "{}", line(header));
    for r in &rows {
        let _ = writeln!(out, "{}", line([&r[0], &r[1], &r[2], &r[3]]));
    }
    out
}
