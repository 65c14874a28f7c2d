//! The four SNS backoff curves (docs/policies.md, "SNS delivery policies").
//!
//! AWS publishes only a chart of these functions, no formulas. We use the formulas written out
//! in docs/policies.md ("The backoff curves"): their shapes match the chart, the first delay is always `min` and the last is always
//! `max`, and every curve rises monotonically in between, so a user who reads the SNS
//! documentation gets the schedule they expect.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// How the delays of the backoff phase rise from `minDelayTarget` to `maxDelayTarget`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum BackoffFunction {
    /// Equal steps: `min + span·p`.
    #[default]
    Linear,
    /// Quadratic: `min + span·p²`.
    Arithmetic,
    /// Geometric growth by a constant factor: `min − 1 + (span + 1)^p`.
    Geometric,
    /// Exponential in the retry index: `min + span·(e^(i−1) − 1)/(e^(N−1) − 1)`.
    Exponential,
}

impl BackoffFunction {
    /// All four, in the order the SNS documentation lists them in its chart.
    pub const ALL: [BackoffFunction; 4] = [
        BackoffFunction::Linear,
        BackoffFunction::Arithmetic,
        BackoffFunction::Geometric,
        BackoffFunction::Exponential,
    ];

    /// The camelCase-free spelling SNS uses in `backoffFunction`.
    pub fn as_str(self) -> &'static str {
        match self {
            BackoffFunction::Linear => "linear",
            BackoffFunction::Arithmetic => "arithmetic",
            BackoffFunction::Geometric => "geometric",
            BackoffFunction::Exponential => "exponential",
        }
    }

    /// The delay in seconds, before jitter, of backoff retry `i` (1-based) of `n` retries
    /// rising from `min_s` to `max_s`.
    ///
    /// `p = (i−1)/(N−1)`, and `p = 0` when `N = 1`: a one-retry backoff phase waits `min`.
    /// `i` outside `1..=n` is clamped into it, so the curve never leaves `[min, max]`.
    pub fn delay_s(self, i: u32, n: u32, min_s: f64, max_s: f64) -> f64 {
        if n <= 1 {
            return min_s;
        }
        let i = i.clamp(1, n);
        let span_s = max_s - min_s;
        let p = f64::from(i - 1) / f64::from(n - 1);
        match self {
            BackoffFunction::Linear => min_s + span_s * p,
            BackoffFunction::Arithmetic => min_s + span_s * p * p,
            BackoffFunction::Geometric => min_s - 1.0 + (span_s + 1.0).powf(p),
            BackoffFunction::Exponential => {
                // exp_m1 keeps the small early terms exact instead of losing them to `e^x − 1`.
                let rise = f64::from(i - 1).exp_m1() / f64::from(n - 1).exp_m1();
                min_s + span_s * rise
            }
        }
    }

    /// The sum in seconds of all `n` backoff delays, for the 3600 s limit of an HTTP/S policy.
    pub fn total_s(self, n: u32, min_s: f64, max_s: f64) -> f64 {
        (1..=n).map(|i| self.delay_s(i, n, min_s, max_s)).sum()
    }
}

impl fmt::Display for BackoffFunction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for BackoffFunction {
    type Err = crate::model::UnknownName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        BackoffFunction::ALL
            .into_iter()
            .find(|f| f.as_str() == s)
            .ok_or_else(|| crate::model::UnknownName(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The seed example: N = 10, 5 → 260 s, rounded to whole seconds.
    const SEED_TABLE: [(BackoffFunction, [u32; 10]); 4] = [
        (
            BackoffFunction::Linear,
            [5, 33, 62, 90, 118, 147, 175, 203, 232, 260],
        ),
        (
            BackoffFunction::Arithmetic,
            [5, 8, 18, 33, 55, 84, 118, 159, 206, 260],
        ),
        (
            BackoffFunction::Geometric,
            [5, 6, 7, 10, 16, 26, 44, 79, 142, 260],
        ),
        (BackoffFunction::Exponential, [5, 5, 5, 6, 7, 10, 18, 39, 99, 260]),
    ];

    #[test]
    fn every_curve_reproduces_the_spec_table_for_ten_retries_from_5_to_260_s() {
        for (function, expected) in SEED_TABLE {
            let rounded: Vec<u32> = (1..=10)
                .map(|i| function.delay_s(i, 10, 5.0, 260.0).round() as u32)
                .collect();
            assert_eq!(rounded, expected, "{function}");
        }
    }

    #[test]
    fn every_curve_starts_at_min_and_ends_at_max() {
        for function in BackoffFunction::ALL {
            for n in [2, 3, 10, 100] {
                let first = function.delay_s(1, n, 1.0, 60.0);
                let last = function.delay_s(n, n, 1.0, 60.0);
                assert!((first - 1.0).abs() < 1e-9, "{function} n={n} first={first}");
                assert!((last - 60.0).abs() < 1e-9, "{function} n={n} last={last}");
            }
        }
    }

    #[test]
    fn a_single_backoff_retry_waits_the_minimum() {
        for function in BackoffFunction::ALL {
            assert_eq!(function.delay_s(1, 1, 7.0, 300.0), 7.0, "{function}");
        }
    }

    #[test]
    fn equal_min_and_max_give_a_flat_curve() {
        for function in BackoffFunction::ALL {
            for i in 1..=5 {
                assert!((function.delay_s(i, 5, 20.0, 20.0) - 20.0).abs() < 1e-9);
            }
        }
    }

    #[test]
    fn the_seed_example_backoff_adds_up_as_the_spec_says() {
        // 2·1 + Σ exponential(10, 1 → 60) + 35·60 ≈ 2205 s (docs/policies.md, "SNS delivery
        // policies").
        let total = 2.0 + BackoffFunction::Exponential.total_s(10, 1.0, 60.0) + 35.0 * 60.0;
        assert_eq!(total.round(), 2205.0);
    }

    #[test]
    fn names_parse_back_and_unknown_names_are_refused() {
        for function in BackoffFunction::ALL {
            assert_eq!(function.as_str().parse::<BackoffFunction>().unwrap(), function);
        }
        assert!("cubic".parse::<BackoffFunction>().is_err());
        assert!("Linear".parse::<BackoffFunction>().is_err());
    }
}
