//! Per-endpoint metric handles. They are registered once per endpoint and outcome, so that
//! recording an attempt neither allocates label strings nor looks the series up again —
//! which, at thousands of attempts a second, the profile showed it did.

use std::sync::Arc;
use std::time::Duration;

use metrics::{Counter, Histogram};

use crate::telemetry::Metrics;

pub(super) struct EndpointMetrics {
    endpoint: Arc<str>,
    registry: Metrics,
    /// By outcome (`delivered` or an error kind); at most a dozen, so a list is enough.
    attempts: Vec<(&'static str, Counter)>,
    /// By final status.
    deliveries: Vec<(&'static str, Counter)>,
    /// Ordering keys held, released and skipped.
    key_events: Vec<(&'static str, Counter)>,
    duration: Histogram,
}

impl EndpointMetrics {
    pub(super) fn new(endpoint: &str, registry: &Metrics) -> Self {
        EndpointMetrics {
            endpoint: Arc::from(endpoint),
            registry: registry.clone(),
            attempts: Vec::new(),
            deliveries: Vec::new(),
            key_events: Vec::new(),
            duration: registry.attempt_duration(endpoint),
        }
    }

    pub(super) fn attempt(&mut self, outcome: &'static str, took: Duration) {
        let (endpoint, registry) = (&self.endpoint, &self.registry);
        counter(&mut self.attempts, outcome, || {
            registry.attempts(endpoint, outcome)
        })
        .increment(1);
        self.duration.record(took.as_secs_f64());
    }

    pub(super) fn delivery(&mut self, status: &'static str) {
        let (endpoint, registry) = (&self.endpoint, &self.registry);
        counter(&mut self.deliveries, status, || {
            registry.deliveries(endpoint, status)
        })
        .increment(1);
    }
}

impl EndpointMetrics {
    /// An ordering key was held (`held`), released (`released`) or its head skipped
    /// (`skipped`).
    pub(super) fn key_event(&mut self, event: &'static str) {
        let (endpoint, registry) = (&self.endpoint, &self.registry);
        counter(&mut self.key_events, event, || {
            registry.ordering_key_events(endpoint, event)
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
