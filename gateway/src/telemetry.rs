//! Every metric the gateway exports, declared here and nowhere else: one method per metric,
//! which names it, documents it and gives its labels.
//!
//! Each gateway has its own recorder ([`Metrics`]), handed to the parts that record: two
//! gateways in one process (the integration tests run dozens) never see each other's counts,
//! and nothing is installed process-wide. `GET /metrics` renders it in the Prometheus text
//! format. A part that records on a hot path registers its handles once and keeps them (see
//! `scheduler/meters.rs`).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use metrics::{Counter, Gauge, Histogram, Key, Label, Level, Metadata, Recorder};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle, PrometheusRecorder};
use tokio_util::sync::CancellationToken;

/// Bucket edges of every `_seconds` histogram without buckets of its own.
const SECONDS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];
/// Lateness is measured on the millisecond clock: edges half-way between whole milliseconds
/// give every value up to 10 ms its own bucket.
const LATENESS: &[f64] = &[
    0.0005, 0.0015, 0.0025, 0.0035, 0.0045, 0.0055, 0.0065, 0.0075, 0.0085, 0.0095, 0.0255, 0.0505, 0.1005,
    0.2505, 0.5005, 1.0005, 5.0005, 60.0005,
];
const BATCH_SIZE: &[f64] = &[1.0, 2.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 2000.0];

/// How often histogram samples are folded into their buckets when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);

/// One gateway's metrics. Cheap to clone; every clone records into the same recorder.
#[derive(Clone)]
pub struct Metrics {
    recorder: Arc<PrometheusRecorder>,
    /// `hookgate_events_ingested_total` by topic, registered once per topic: registering
    /// again on every commit built the key's labels anew (five allocations an event). Topics
    /// come from the config, so this holds as many as the config has named since the start.
    ingested: Arc<RwLock<HashMap<String, Counter>>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Metrics {
        let builder = PrometheusBuilder::new()
            .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), SECONDS)
            .and_then(|b| {
                b.set_buckets_for_metric(
                    Matcher::Full("hookgate_attempt_lateness_seconds".into()),
                    LATENESS,
                )
            })
            .and_then(|b| {
                b.set_buckets_for_metric(Matcher::Full("hookgate_writer_batch_size".into()), BATCH_SIZE)
            })
            .expect("the bucket lists are not empty");
        Metrics {
            recorder: Arc::new(builder.build_recorder()),
            ingested: Arc::default(),
        }
    }

    /// The Prometheus text of every series recorded so far.
    pub fn render(&self) -> String {
        self.handle().render()
    }

    fn handle(&self) -> PrometheusHandle {
        self.recorder.handle()
    }

    /// Folds histogram samples into buckets every few seconds, so that memory stays flat
    /// between scrapes (rendering does the same). Runs until `shutdown`.
    pub async fn upkeep(self, shutdown: CancellationToken) {
        let handle = self.handle();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(UPKEEP_EVERY) => handle.run_upkeep(),
            }
        }
    }

    fn counter(&self, name: &'static str, labels: Vec<Label>) -> Counter {
        self.recorder
            .register_counter(&Key::from_parts(name, labels), &metadata())
    }

    fn gauge(&self, name: &'static str, labels: Vec<Label>) -> Gauge {
        self.recorder
            .register_gauge(&Key::from_parts(name, labels), &metadata())
    }

    fn histogram(&self, name: &'static str, labels: Vec<Label>) -> Histogram {
        self.recorder
            .register_histogram(&Key::from_parts(name, labels), &metadata())
    }
}

fn metadata() -> Metadata<'static> {
    Metadata::new(module_path!(), Level::INFO, Some(module_path!()))
}

fn label(key: &'static str, value: impl Into<String>) -> Label {
    Label::new(key, value.into())
}

/// The catalogue. The README's metrics paragraph (under "HTTP API") names them for operators.
impl Metrics {
    // --- ingestion

    /// `hookgate_events_ingested_total{topic}`: events accepted and stored.
    pub fn events_ingested(&self, topic: &str) -> Counter {
        let known = self
            .ingested
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(topic)
            .cloned();
        known.unwrap_or_else(|| {
            let counter = self.counter("hookgate_events_ingested_total", vec![label("topic", topic)]);
            let mut ingested = self.ingested.write().unwrap_or_else(|e| e.into_inner());
            ingested.insert(topic.to_owned(), counter.clone());
            counter
        })
    }

    // --- delivery

    /// `hookgate_attempts_total{endpoint, outcome}`: attempts by outcome (`delivered` or an
    /// error kind).
    pub fn attempts(&self, endpoint: &str, outcome: &'static str) -> Counter {
        let labels = vec![label("endpoint", endpoint), label("outcome", outcome)];
        self.counter("hookgate_attempts_total", labels)
    }

    /// `hookgate_attempt_duration_seconds{endpoint}`: how long attempts took.
    pub fn attempt_duration(&self, endpoint: &str) -> Histogram {
        self.histogram(
            "hookgate_attempt_duration_seconds",
            vec![label("endpoint", endpoint)],
        )
    }

    /// `hookgate_deliveries_total{endpoint, status}`: deliveries by final status.
    pub fn deliveries(&self, endpoint: &str, status: &'static str) -> Counter {
        let labels = vec![label("endpoint", endpoint), label("status", status)];
        self.counter("hookgate_deliveries_total", labels)
    }

    /// `hookgate_attempt_lateness_seconds`: how long after its planned time an attempt started.
    pub fn attempt_lateness(&self) -> Histogram {
        self.histogram("hookgate_attempt_lateness_seconds", Vec::new())
    }

    /// `hookgate_event_reads_total`: attempts that read their event from the store because
    /// their delivery did not hold it in memory (after a restart, past the memory budget for
    /// waiting events, or for deliveries of an endpoint a cluster node took over).
    pub fn event_reads(&self) -> Counter {
        self.counter("hookgate_event_reads_total", Vec::new())
    }

    // --- cluster

    /// `hookgate_cluster_fenced_attempts_total`: attempts a cluster node did not send because
    /// its lease of their endpoint no longer held by its own clock right before the send.
    pub fn fenced_attempts(&self) -> Counter {
        self.counter("hookgate_cluster_fenced_attempts_total", Vec::new())
    }

    /// `hookgate_cluster_lease_lapses_total`: endpoint leases a cluster node found lapsed by its
    /// own clock (not renewed in time: a pause, or a database it could not reach), after which
    /// it read the endpoint's pending deliveries again before sending more.
    pub fn lease_lapses(&self) -> Counter {
        self.counter("hookgate_cluster_lease_lapses_total", Vec::new())
    }

    /// `hookgate_ordering_key_events_total{endpoint, event}`: ordering keys held behind a head
    /// that finally failed (`held`), released by an operator or a retry (`released`), and
    /// heads an operator skipped (`skipped`).
    pub fn ordering_key_events(&self, endpoint: &str, event: &'static str) -> Counter {
        let labels = vec![label("endpoint", endpoint), label("event", event)];
        self.counter("hookgate_ordering_key_events_total", labels)
    }

    /// `hookgate_ordering_keys_blocked{endpoint}`: keys whose head has failed with events
    /// waiting behind it (read from the store at scrape time: cluster-wide).
    pub fn ordering_keys_blocked(&self, endpoint: &str) -> Gauge {
        self.gauge(
            "hookgate_ordering_keys_blocked",
            vec![label("endpoint", endpoint)],
        )
    }

    /// `hookgate_ordering_keys_held{endpoint}`: keys held behind a head that finally failed.
    pub fn ordering_keys_held(&self, endpoint: &str) -> Gauge {
        self.gauge("hookgate_ordering_keys_held", vec![label("endpoint", endpoint)])
    }

    /// `hookgate_ordering_oldest_waiting_seconds{endpoint}`: how long the oldest event waiting
    /// behind a blocked or held key has waited.
    pub fn ordering_oldest_waiting(&self, endpoint: &str) -> Gauge {
        self.gauge(
            "hookgate_ordering_oldest_waiting_seconds",
            vec![label("endpoint", endpoint)],
        )
    }

    /// `hookgate_queue_depth`: deliveries waiting in the scheduler.
    pub fn queue_depth(&self) -> Gauge {
        self.gauge("hookgate_queue_depth", Vec::new())
    }

    /// `hookgate_endpoints{state}`: how many endpoints are in each health state.
    pub fn endpoints_in_state(&self, state: &'static str) -> Gauge {
        self.gauge("hookgate_endpoints", vec![label("state", state)])
    }

    /// `hookgate_endpoint_state{endpoint, state}`: 1 for the endpoint's health state, else 0.
    pub fn endpoint_state(&self, endpoint: &str, state: &'static str) -> Gauge {
        let labels = vec![label("endpoint", endpoint), label("state", state)];
        self.gauge("hookgate_endpoint_state", labels)
    }

    // --- store

    /// `hookgate_writer_batch_size`: changes committed together by the writer (SQLite), or
    /// ingestion requests committed together by one group (PostgreSQL).
    pub fn writer_batch_size(&self) -> Histogram {
        self.histogram("hookgate_writer_batch_size", Vec::new())
    }

    /// `hookgate_writer_commit_seconds`: how long one commit took (SQLite: a group of writes,
    /// from its start to the fsync that covers it; PostgreSQL: one transaction).
    pub fn writer_commit(&self) -> Histogram {
        self.histogram("hookgate_writer_commit_seconds", Vec::new())
    }

    /// `hookgate_store_write_failures_total`: outcome batches the store refused (and that are
    /// tried again).
    pub fn store_write_failures(&self) -> Counter {
        self.counter("hookgate_store_write_failures_total", Vec::new())
    }

    /// `hookgate_purged_rows_total`: rows removed by retention.
    pub fn purged_rows(&self) -> Counter {
        self.counter("hookgate_purged_rows_total", Vec::new())
    }

    // --- traces

    /// `hookgate_trace_spans_exported_total`: spans the OTLP collector accepted.
    pub fn trace_spans_exported(&self) -> Counter {
        self.counter("hookgate_trace_spans_exported_total", Vec::new())
    }

    /// `hookgate_trace_spans_dropped_total{reason}`: spans never exported, because the export
    /// queue was full (`queue_full`) or the collector refused or did not answer their batch
    /// (`export_failed`). Delivery never waits for the collector.
    pub fn trace_spans_dropped(&self, reason: &'static str) -> Counter {
        self.counter(
            "hookgate_trace_spans_dropped_total",
            vec![label("reason", reason)],
        )
    }

    // --- config and plugins

    /// `hookgate_config_reloads_total{result}`: reloads `applied` or `refused`.
    pub fn config_reloads(&self, result: &'static str) -> Counter {
        self.counter("hookgate_config_reloads_total", vec![label("result", result)])
    }

    /// `hookgate_plugin_binding_problems{endpoint, binding, plugin, problem}`: 1 while a
    /// binding's plugin is missing or of the wrong kind.
    pub fn binding_problem(
        &self,
        endpoint: &str,
        binding: &'static str,
        plugin: &str,
        problem: &'static str,
    ) -> Gauge {
        let labels = vec![
            label("endpoint", endpoint.to_owned()),
            label("binding", binding),
            label("plugin", plugin.to_owned()),
            label("problem", problem),
        ];
        self.gauge("hookgate_plugin_binding_problems", labels)
    }

    /// `hookgate_plugin_calls_total{plugin, outcome}`: plugin calls by outcome.
    pub fn plugin_calls(&self, plugin: &str, outcome: &'static str) -> Counter {
        let labels = vec![label("plugin", plugin), label("outcome", outcome)];
        self.counter("hookgate_plugin_calls_total", labels)
    }

    /// `hookgate_plugin_call_duration_seconds`: how long plugin calls took.
    pub fn plugin_call_duration(&self) -> Histogram {
        self.histogram("hookgate_plugin_call_duration_seconds", Vec::new())
    }

    /// `hookgate_plugin_cache_hits_total` / `_misses_total`: compiled plugins found in (or
    /// missing from) the cache.
    pub fn plugin_cache(&self, hit: bool) -> Counter {
        let name = if hit {
            "hookgate_plugin_cache_hits_total"
        } else {
            "hookgate_plugin_cache_misses_total"
        };
        self.counter(name, Vec::new())
    }

    /// `hookgate_plugin_reload_failures_total`: plugin files that could not be loaded.
    pub fn plugin_reload_failures(&self) -> Counter {
        self.counter("hookgate_plugin_reload_failures_total", Vec::new())
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

#[cfg(test)]
mod tests {
    /// The `metrics` macros record into the process-wide recorder, which no gateway reads: a
    /// series recorded that way never shows in `GET /metrics`. Every part records through
    /// [`super::Metrics`] instead.
    #[test]
    fn no_part_records_into_the_process_wide_recorder() {
        let mut offenders = Vec::new();
        let mut dirs = vec![std::path::PathBuf::from(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/src"
        ))];
        while let Some(dir) = dirs.pop() {
            for entry in std::fs::read_dir(&dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    dirs.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    let text = std::fs::read_to_string(&path).unwrap();
                    for macro_name in ["counter", "gauge", "histogram"] {
                        if text.contains(&format!("metrics::{macro_name}{}", '!')) {
                            offenders.push(format!("{}: metrics::{macro_name}!", path.display()));
                        }
                    }
                }
            }
        }
        assert!(offenders.is_empty(), "{offenders:#?}");
    }
}
