//! Per-endpoint metric handles. They are registered once per endpoint and outcome, so that
//! recording an attempt neither allocates label strings nor looks the series up again —
//! which, at thousands of attempts a second, the profile showed it did.

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Histogram};

pub(super) struct EndpointMetrics {
    endpoint: Arc<str>,
    /// By outcome (`delivered` or an error kind); at most a dozen, so a list is enough.
    attempts: Vec<(&'static str, Counter)>,
    /// By final status.
    deliveries: Vec<(&'static str, Counter)>,
    duration: Histogram,
}

impl EndpointMetrics {
    pub(super) fn new(endpoint: &str) -> Self {
        EndpointMetrics {
            endpoint: Arc::from(endpoint),
            attempts: Vec::new(),
            deliveries: Vec::new(),
            duration: metrics::histogram!("hookgate_attempt_duration_seconds", "endpoint" => endpoint.to_string()),
        }
    }

    pub(super) fn attempt(&mut self, outcome: &'static str, took: Duration) {
        let endpoint = &self.endpoint;
        counter(&mut self.attempts, outcome, || {
            metrics::counter!("hookgate_attempts_total", "endpoint" => endpoint.to_string(), "outcome" => outcome)
        })
        .increment(1);
        self.duration.record(took.as_secs_f64());
    }

    pub(super) fn delivery(&mut self, status: &'static str) {
        let endpoint = &self.endpoint;
        counter(&mut self.deliveries, status, || {
            metrics::counter!("hookgate_deliveries_total", "endpoint" => endpoint.to_string(), "status" => status)
        })
        .increment(1);
    }
}

fn counter<'a>(
    list: &'a mut Vec<(&'static str, Counter)>,
    label: &'static str,
    register: impl FnOnce() -> Counter,
) -> &'a Counter {
    let index = match list.iter().position(|(l, _)| *l == label) {
        Some(i) => i,
        None => {
            list.push((label, register()));
            list.len() - 1
        }
    };
    &list[index].1
}
