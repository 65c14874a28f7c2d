//! The `svix` scenario: the same events through Svix's API (`POST /api/v1/app/{app}/msg`) and
//! through hookgate's own (`POST /v1/topics/svix/events` with the application as tenant), with
//! the same API key, into the same endpoint made through the Svix API (so both sign and send
//! Svix's headers): what the Svix layer adds per request. The two sides alternate on one
//! gateway, so both see the same machine. With `--postgres`, the `postgres` scenario runs it
//! again on a schema of its own.

use std::time::Instant;

use anyhow::bail;
use bytes::Bytes;
use hookgate_loadgen::{Api, Report, Shape, Stop, Target as LoadTarget, closed_loop, unix_us};
use hookgate_sink::{Sink, SinkOptions};
use serde_json::json;

use crate::child::{GatewayProcess, micros_each};
use crate::report::{Target, median};
use crate::scenarios::{Bench, SECRET, ensure_no_errors, wait_until};

/// The admin key both sides send.
const KEY: &str = "bench-svix-admin-key";
/// The Svix application (and so the tenant) the events go to.
const APP: &str = "bench-app";
/// Measured rounds of each side.
const ROUNDS: usize = 3;
const CLIENTS: usize = 64;
const SIDES: [&str; 2] = ["native", "svix"];

/// Both sides' figures: the medians of their rounds.
struct Sides {
    rate: [f64; 2],
    cpu_us: [f64; 2],
    p50_ms: [f64; 2],
}

impl Bench {
    pub(crate) async fn svix_path(&mut self) -> anyhow::Result<()> {
        let sink = Sink::start(SinkOptions {
            secret: Some(SECRET.into()),
            ..SinkOptions::loopback()
        })
        .await?;
        let site = self.site_on_store(&format!("server:\n  api_keys: [{KEY}]\n"))?;
        let gw = self.start(&site, "svix").await?;
        self.svix_application(&gw, &sink).await?;
        let targets = [Api::NativeTenant(APP.into()), Api::Svix { app: APP.into() }].map(|api| LoadTarget {
            base_url: gw.base_url(),
            topic: "svix".into(),
            api,
            api_key: Some(KEY.into()),
            event_type: "order.paid".into(),
            payload_bytes: 1024,
            record_ids: false,
        });
        let ingest = self.svix_ingest(&gw, &targets).await?;
        let e2e = self.svix_end_to_end(&gw, &sink, &targets).await?;
        gw.stop().await?;
        let stats = sink.stats();
        if stats.signatures_invalid > 0 || stats.answered_error > 0 {
            bail!(
                "the sink refused {} deliveries ({} bad signatures)",
                stats.answered_error,
                stats.signatures_invalid
            );
        }
        self.record_svix(
            "ingest",
            "ingest, single 1 KiB events, 64 clients",
            "events/s",
            &ingest,
        );
        self.record_svix(
            "e2e",
            "end to end, single 1 KiB events, 64 clients",
            "deliveries/s",
            &e2e,
        );
        Ok(())
    }

    /// The application and its one endpoint, made as a Svix user makes them; the endpoint
    /// signs with the sink's secret.
    async fn svix_application(&self, gw: &GatewayProcess, sink: &Sink) -> anyhow::Result<()> {
        let base = gw.base_url();
        for (path, body) in [
            ("/api/v1/app".to_owned(), json!({"name": "Bench", "uid": APP})),
            (
                format!("/api/v1/app/{APP}/endpoint"),
                json!({"url": sink.url("/svix"), "secret": SECRET}),
            ),
        ] {
            let answer = self
                .client
                .post_json_as(Some(KEY), &format!("{base}{path}"), Bytes::from(body.to_string()))
                .await
                .map_err(anyhow::Error::msg)?;
            self.say(&format!("POST {path}: {}", String::from_utf8_lossy(&answer)));
        }
        Ok(())
    }

    /// Single-event ingestion at 64 clients, each side for the scale's ingest time, alternating.
    async fn svix_ingest(&mut self, gw: &GatewayProcess, targets: &[LoadTarget; 2]) -> anyhow::Result<Sides> {
        let mut samples: [Vec<(f64, f64, f64)>; 2] = Default::default();
        for i in 0..2 * (1 + ROUNDS) {
            let side = i % 2;
            let cpu_before = gw.cpu_time()?;
            let report = self
                .timed(&targets[side], Shape::Single, CLIENTS, SIDES[side])
                .await?;
            if i >= 2 {
                let cpu = micros_each(gw.cpu_time()? - cpu_before, report.events_accepted);
                samples[side].push((
                    report.events_per_s(),
                    cpu,
                    report.latency(0.5).as_secs_f64() * 1e3,
                ));
            }
        }
        Ok(Sides::of(&samples))
    }

    /// Single events at 64 clients until the sink has each one: deliveries/s from the first
    /// request to the last delivery, alternating.
    async fn svix_end_to_end(
        &mut self,
        gw: &GatewayProcess,
        sink: &Sink,
        targets: &[LoadTarget; 2],
    ) -> anyhow::Result<Sides> {
        let mut samples: [Vec<(f64, f64, f64)>; 2] = Default::default();
        for i in 0..2 * (1 + ROUNDS) {
            let side = i % 2;
            let count = if i >= 2 { self.scale.e2e_events / 2 } else { 640 };
            self.settle(sink).await?;
            let base = sink.answered_ok();
            let cpu_before = gw.cpu_time()?;
            let started_us = unix_us();
            let started = Instant::now();
            let report = closed_loop(
                &self.client,
                &targets[side],
                Shape::Single,
                CLIENTS,
                Stop::Requests(count),
            )
            .await?;
            ensure_no_errors(&report, SIDES[side])?;
            let expected = base + report.events_accepted;
            wait_until(
                "the Svix scenario's deliveries",
                started.elapsed() * 20 + std::time::Duration::from_secs(60),
                || sink.answered_ok() >= expected,
            )
            .await?;
            if i >= 2 {
                samples[side].push(delivered(gw, sink, &report, cpu_before, started_us)?);
            }
        }
        Ok(Sides::of(&samples))
    }

    /// Waits until nothing more arrives at the sink: the deliveries of the step before are
    /// all in before the next is counted.
    async fn settle(&self, sink: &Sink) -> anyhow::Result<()> {
        let mut last = sink.answered_ok();
        loop {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            let now = sink.answered_ok();
            if now == last {
                return Ok(());
            }
            last = now;
        }
    }

    fn record_svix(&mut self, key: &str, label: &str, unit: &str, sides: &Sides) {
        let (key, label) = self.on_store(key, label);
        let (key, label) = (key.as_str(), label.as_str());
        let r = &mut self.results;
        for (side, name) in SIDES.iter().enumerate() {
            let api = if side == 0 { "hookgate's API" } else { "Svix's API" };
            r.record(
                &format!("svix_{key}_{name}"),
                &format!("{label}, {api}"),
                unit,
                sides.rate[side],
                None,
            );
            r.record(
                &format!("svix_{key}_{name}_cpu"),
                &format!("{label}, {api} — gateway CPU per event"),
                "µs",
                sides.cpu_us[side],
                None,
            );
            r.record(
                &format!("svix_{key}_{name}_p50"),
                &format!("{label}, {api} — p50"),
                "ms",
                sides.p50_ms[side],
                None,
            );
        }
        r.record(
            &format!("svix_{key}_ratio"),
            &format!("{label}: Svix's API — share of hookgate's"),
            "×",
            sides.rate[1] / sides.rate[0],
            Target::at_least(0.9),
        );
    }
}

/// An end-to-end round's rate, CPU per delivery and request p50.
fn delivered(
    gw: &GatewayProcess,
    sink: &Sink,
    report: &Report,
    cpu_before: std::time::Duration,
    started_us: u64,
) -> anyhow::Result<(f64, f64, f64)> {
    let n = report.events_accepted;
    let last = sink.stats().last_request_unix_us.unwrap_or_else(unix_us);
    let seconds = last.saturating_sub(started_us) as f64 / 1e6;
    let cpu = micros_each(gw.cpu_time()? - cpu_before, n);
    Ok((n as f64 / seconds, cpu, report.latency(0.5).as_secs_f64() * 1e3))
}

impl Sides {
    fn of(samples: &[Vec<(f64, f64, f64)>; 2]) -> Sides {
        let pick = |f: fn(&(f64, f64, f64)) -> f64| {
            [0, 1].map(|s| median(&samples[s].iter().map(f).collect::<Vec<_>>()))
        };
        Sides {
            rate: pick(|s| s.0),
            cpu_us: pick(|s| s.1),
            p50_ms: pick(|s| s.2),
        }
    }
}
