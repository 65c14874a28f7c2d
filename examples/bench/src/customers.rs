//! The `customers` scenario: a gateway with as many endpoints as a platform has customers.
//! Endpoints are made through `POST /v1/endpoints` as a platform onboards its customers (two
//! endpoints per tenant, eight creates at a time), then changed, deleted, listed and sent
//! events, and the gateway is restarted on them. With `--postgres`, also how long until a
//! second node routes an event to an endpoint made on the first.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use hookgate_loadgen::{Client, unix_us};
use hookgate_sink::{Sink, SinkOptions};
use serde_json::{Value, json};

use crate::child::GatewayProcess;
use crate::cluster::Schema;
use crate::report::Target;
use crate::scenarios::{BENCH_STORAGE_KEY, Bench, Site, fmt_count, wait_until};

const MIB: f64 = 1024.0 * 1024.0;
/// Creates in flight at once, as a platform's onboarding job would send them.
const CREATE_CONCURRENCY: usize = 8;
/// Ingest requests in flight at once while latency is measured.
const INGEST_CONCURRENCY: usize = 16;
const INGEST_REQUESTS: usize = 20_000;
const CHANGES: usize = 1_000;
const PAGES: usize = 50;

/// A small, seedable generator: which tenant an event or a change goes to.
struct Pick(u64);

impl Pick {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n.max(1) as u64) as usize
    }
}

fn name(i: usize) -> String {
    format!("c{i:07}")
}

fn tenant(i: usize) -> String {
    format!("t{:07}", i / 2)
}

/// Latencies in µs, as `(p50, p99)` in ms.
fn quantiles(mut micros: Vec<u64>) -> (f64, f64) {
    micros.sort_unstable();
    let at = |q: f64| micros[((micros.len() - 1) as f64 * q).round() as usize] as f64 / 1000.0;
    (at(0.5), at(0.99))
}

/// What the onboarding measured: creates per second in each tenth of it.
struct Onboarded {
    per_tenth: Vec<f64>,
}

impl Bench {
    pub(crate) async fn customers(&mut self, postgres: Option<&str>) -> anyhow::Result<()> {
        let n = self.scale.customers;
        let sink = Sink::start(SinkOptions::loopback()).await?;
        let site = Site::new(&self.work_root, "topics:\n  orders: {}\n")?;
        let gw = self.start(&site, "customers").await?;
        let base = gw.base_url();
        let url = sink.url("/hook");

        self.onboard(&base, &url, 0, 10).await?;
        let (small_p50, small_p99) = self.ingest_latency(&base, 10).await?;
        let onboarded = self.onboard(&base, &url, 10, n).await?;
        let (patch_p50, patch_p99) = self.changes(&base, n, "PATCH").await?;
        let (page_p50, page_p99) = self.pages(&base).await?;
        // The same events as at 10 endpoints (to the same five tenants), then events spread
        // over every tenant, whose deliveries each go to an endpoint not delivered to before.
        let (big_p50, big_p99) = self.ingest_latency(&base, 10).await?;
        let (spread_p50, spread_p99) = self.ingest_latency(&base, n - CHANGES).await?;
        let live = gw.memory()?;
        let (delete_p50, delete_p99) = self.changes(&base, n, "DELETE").await?;
        gw.stop().await?;
        let (ready, resumed, restarted) = self.restart_on(&site, &sink, n - CHANGES).await?;

        let count = fmt_count(n as u64);
        let tenth = |i: usize| onboarded.per_tenth[i];
        self.say(&format!(
            "{count} endpoints: creates/s by tenth {:?}; ingest p50/p99 {small_p50:.2}/{small_p99:.2} ms at 10, \
             {big_p50:.2}/{big_p99:.2} ms at {count} ({spread_p50:.2}/{spread_p99:.2} ms spread over every tenant); PATCH {patch_p50:.2}/{patch_p99:.2} ms, DELETE \
             {delete_p50:.2}/{delete_p99:.2} ms; a page of 500 {page_p50:.1}/{page_p99:.1} ms; RSS {:.0} MiB; \
             restart: ready {ready:.2} s, delivering {resumed:.2} s, RSS {:.0} MiB",
            onboarded.per_tenth.iter().map(|r| r.round()).collect::<Vec<_>>(),
            live.rss_bytes as f64 / MIB,
            restarted as f64 / MIB,
        ));
        let last = onboarded.per_tenth.len() - 1;
        let r = &mut self.results;
        r.record(
            "onboard_first",
            "endpoint creates, first tenth of onboarding",
            "creates/s",
            tenth(0),
            Target::at_least(1000.0),
        );
        r.record(
            "onboard_last",
            &format!("endpoint creates, last tenth (to {count})"),
            "creates/s",
            tenth(last),
            Target::at_least(1000.0),
        );
        r.record(
            "onboard_flat",
            "last tenth's creates/s over the first tenth's",
            "×",
            tenth(last) / tenth(0),
            Target::at_least(0.7),
        );
        for (key, label, value) in [
            ("patch_p99", format!("PATCH p99 at {count} endpoints"), patch_p99),
            (
                "delete_p99",
                format!("DELETE p99 at {count} endpoints"),
                delete_p99,
            ),
        ] {
            r.record(key, &label, "ms", value, Target::at_most(5.0));
        }
        r.record(
            "page_500",
            &format!("a page of 500 endpoints at {count}, p50"),
            "ms",
            page_p50,
            Target::at_most(20.0),
        );
        r.record(
            "page_500_p99",
            &format!("a page of 500 endpoints at {count}, p99"),
            "ms",
            page_p99,
            None,
        );
        r.record(
            "ingest_p50_small",
            "single-event ingest p50, 10 endpoints",
            "ms",
            small_p50,
            None,
        );
        r.record(
            "ingest_p50_large",
            &format!("single-event ingest p50, {count} endpoints"),
            "ms",
            big_p50,
            None,
        );
        r.record(
            "ingest_p50_ratio",
            &format!("ingest p50 at {count} endpoints over at 10"),
            "×",
            big_p50 / small_p50,
            Target::at_most(1.2),
        );
        r.record(
            "ingest_p99_large",
            &format!("single-event ingest p99, {count} endpoints"),
            "ms",
            big_p99,
            None,
        );
        r.record(
            "customers_rss",
            &format!("RSS with {count} endpoints"),
            "MiB",
            live.rss_bytes as f64 / MIB,
            Target::at_most(1024.0),
        );
        r.record(
            "customers_ready",
            &format!("restart with {count} endpoints, until the API answers"),
            "s",
            ready,
            None,
        );
        r.record(
            "customers_resume",
            &format!("restart with {count} endpoints, until an event is delivered"),
            "s",
            resumed,
            Target::at_most(5.0),
        );
        r.record(
            "customers_rss_restarted",
            &format!("RSS after a restart with {count} endpoints"),
            "MiB",
            restarted as f64 / MIB,
            Target::at_most(1024.0),
        );
        if let Some(url) = postgres {
            self.routed_on_another_node(url, &sink).await?;
        }
        Ok(())
    }

    /// Creates endpoints `from..to` (two per tenant) at [`CREATE_CONCURRENCY`]; creates per
    /// second in each tenth of the range.
    async fn onboard(&self, base: &str, url: &str, from: usize, to: usize) -> anyhow::Result<Onboarded> {
        let next = Arc::new(AtomicU64::new(from as u64));
        let tenths: Arc<Vec<AtomicU64>> = Arc::new((0..10).map(|_| AtomicU64::new(0)).collect());
        let started = Instant::now();
        let mut workers = tokio::task::JoinSet::new();
        for _ in 0..CREATE_CONCURRENCY {
            let (client, base, url, next, tenths) = (
                self.client.clone(),
                base.to_owned(),
                url.to_owned(),
                next.clone(),
                tenths.clone(),
            );
            workers.spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed) as usize;
                    if i >= to {
                        return Ok::<(), anyhow::Error>(());
                    }
                    let body = json!({
                        "name": name(i), "tenant": tenant(i), "url": url, "topics": ["orders"],
                        "types": ["order.created", "order.paid"],
                    });
                    post(&client, &format!("{base}/v1/endpoints"), &body).await?;
                    // Each tenth's creates are timed from the end of the tenth before.
                    let tenth = (i - from) * 10 / (to - from).max(1);
                    tenths[tenth.min(9)].store(started.elapsed().as_micros() as u64, Ordering::Relaxed);
                }
            });
        }
        while let Some(done) = workers.join_next().await {
            done??;
        }
        let size = (to - from) as f64 / 10.0;
        let mut previous = 0;
        let per_tenth = tenths
            .iter()
            .map(|t| {
                let end = t.load(Ordering::Relaxed);
                let rate = size / ((end.saturating_sub(previous)) as f64 / 1e6).max(1e-6);
                previous = end;
                rate
            })
            .collect();
        Ok(Onboarded { per_tenth })
    }

    /// Single-event ingest, each event to the tenant of an endpoint picked among the first
    /// `endpoints` (two endpoints each): the p50 and p99 of [`INGEST_REQUESTS`] requests at
    /// [`INGEST_CONCURRENCY`].
    async fn ingest_latency(&self, base: &str, endpoints: usize) -> anyhow::Result<(f64, f64)> {
        let payload = "x".repeat(100);
        let mut workers = tokio::task::JoinSet::new();
        for w in 0..INGEST_CONCURRENCY {
            let (client, url, payload) = (
                self.client.clone(),
                format!("{base}/v1/topics/orders/events"),
                payload.clone(),
            );
            workers.spawn(async move {
                let mut pick = Pick(0x9e37_79b9_7f4a_7c15 ^ (w as u64 + 1));
                let mut micros = Vec::with_capacity(INGEST_REQUESTS / INGEST_CONCURRENCY);
                for _ in 0..INGEST_REQUESTS / INGEST_CONCURRENCY {
                    let i = pick.below(endpoints);
                    let body = json!({"type": "order.paid", "tenant": tenant(i), "payload": {"p": payload}});
                    let started = Instant::now();
                    let answer = post(&client, &url, &body).await?;
                    micros.push(started.elapsed().as_micros() as u64);
                    if answer["deliveries"] == 0 {
                        bail!("an event to tenant {} reached no endpoint: {answer}", tenant(i));
                    }
                }
                Ok(micros)
            });
        }
        let mut all = Vec::new();
        while let Some(done) = workers.join_next().await {
            all.extend(done??);
        }
        Ok(quantiles(all))
    }

    /// [`CHANGES`] PATCHes (a new description) or DELETEs of endpoints picked at random among
    /// `endpoints`, one at a time: p50 and p99 in ms. DELETEs take the last [`CHANGES`].
    async fn changes(&self, base: &str, endpoints: usize, method: &str) -> anyhow::Result<(f64, f64)> {
        let mut pick = Pick(0x2545_f491_4f6c_dd1d);
        let mut micros = Vec::with_capacity(CHANGES);
        for k in 0..CHANGES {
            let started = Instant::now();
            if method == "PATCH" {
                let i = pick.below(endpoints - CHANGES);
                let path = format!("{base}/v1/endpoints/{}", name(i));
                patch(
                    &self.client,
                    &path,
                    &json!({"description": format!("change {k}")}),
                )
                .await?;
            } else {
                let path = format!("{base}/v1/endpoints/{}", name(endpoints - 1 - k));
                delete(&self.client, &path).await?;
            }
            micros.push(started.elapsed().as_micros() as u64);
        }
        Ok(quantiles(micros))
    }

    /// [`PAGES`] pages of 500 endpoints from cursors spread over the names: p50 and p99 in ms.
    async fn pages(&self, base: &str) -> anyhow::Result<(f64, f64)> {
        let mut micros = Vec::with_capacity(PAGES);
        let mut pick = Pick(0x1234_5678_9abc_def1);
        for _ in 0..PAGES {
            let after = name(pick.below(self.scale.customers.saturating_sub(1000)));
            let started = Instant::now();
            let body = self
                .client
                .get(&format!("{base}/v1/endpoints?limit=500&cursor=ep:{after}"))
                .await
                .map_err(anyhow::Error::msg)?;
            micros.push(started.elapsed().as_micros() as u64);
            let page: Value = serde_json::from_slice(&body)?;
            let got = page["endpoints"].as_array().map_or(0, Vec::len);
            if got != 500 {
                bail!("a page held {got} endpoints, not 500");
            }
        }
        let mut sorted = micros.clone();
        sorted.sort_unstable();
        self.say(&format!("pages of 500 (µs, sorted): {sorted:?}"));
        Ok(quantiles(micros))
    }

    /// Restarts a gateway on `site` (with `endpoints` endpoints): seconds until the API
    /// answers, and until an event posted at once is delivered; RSS then.
    async fn restart_on(
        &mut self,
        site: &Site,
        sink: &Sink,
        endpoints: usize,
    ) -> anyhow::Result<(f64, f64, u64)> {
        sink.reset();
        let spawned = unix_us();
        let gw = self.start(site, "customers-restarted").await?;
        let ready = gw.start_time.as_secs_f64();
        let body = json!({"type": "order.paid", "tenant": tenant(endpoints / 3), "payload": {}});
        post(
            &self.client,
            &format!("{}/v1/topics/orders/events", gw.base_url()),
            &body,
        )
        .await?;
        wait_until(
            "the first delivery after the restart",
            Duration::from_secs(120),
            || sink.requests() >= 1,
        )
        .await?;
        let first = sink
            .stats()
            .first_request_unix_us
            .context("the first request's time")?;
        let rss = gw.memory()?.rss_bytes;
        gw.stop().await?;
        Ok((ready, first.saturating_sub(spawned) as f64 / 1e6, rss))
    }

    /// Two nodes on one PostgreSQL database: an endpoint created on the first, then events
    /// posted to the second until one is routed to it. The time from the create's answer to
    /// that event's, 20 times: p50 and max.
    async fn routed_on_another_node(&mut self, url: &str, sink: &Sink) -> anyhow::Result<()> {
        let schema = Schema::create(url).await?;
        let storage = format!(
            "storage:\n  url: \"{}\"\n  encryption_key: {BENCH_STORAGE_KEY}\ncluster:\n  lease: 6s\ntopics:\n  orders: {{}}\n",
            schema.url()
        );
        let first = Site::without_sqlite(&self.work_root, &storage)?;
        let second = Site::without_sqlite(&self.work_root, &storage)?;
        let result = async {
            let a = self.start(&first, "customers-node-1").await?;
            let b = self.start_more(&second, "customers-node-2").await?;
            let mut waits = Vec::new();
            for k in 0..20 {
                waits.push(self.routed_once(&a, &b, k, &sink.url("/hook")).await?);
            }
            a.stop().await?;
            b.stop().await?;
            anyhow::Ok(waits)
        }
        .await;
        schema.drop().await?;
        let mut waits = result?;
        waits.sort_by(f64::total_cmp);
        self.say(&format!("routed on the other node after (ms): {waits:.1?}"));
        let r = &mut self.results;
        r.record(
            "cluster_routed_p50",
            "PostgreSQL: an endpoint made on one node, routed on another, p50",
            "ms",
            waits[waits.len() / 2],
            None,
        );
        r.record(
            "cluster_routed_max",
            "PostgreSQL: an endpoint made on one node, routed on another, worst of 20",
            "ms",
            waits[waits.len() - 1],
            Target::at_most(1000.0),
        );
        Ok(())
    }

    /// Creates endpoint `k` on `a` and posts its tenant's events to `b` until one is routed to
    /// it: the milliseconds from the create's answer to that answer.
    async fn routed_once(
        &self,
        a: &GatewayProcess,
        b: &GatewayProcess,
        k: usize,
        url: &str,
    ) -> anyhow::Result<f64> {
        let tenant = format!("routed-{k}");
        let body = json!({"name": format!("r{k}"), "tenant": tenant, "url": url, "topics": ["orders"]});
        post(&self.client, &format!("{}/v1/endpoints", a.base_url()), &body).await?;
        let created = Instant::now();
        let event = json!({"type": "t", "tenant": tenant, "payload": {}});
        loop {
            let answer = post(
                &self.client,
                &format!("{}/v1/topics/orders/events", b.base_url()),
                &event,
            )
            .await?;
            if answer["deliveries"] == 1 {
                return Ok(created.elapsed().as_secs_f64() * 1000.0);
            }
            if created.elapsed() > Duration::from_secs(30) {
                bail!("the second node did not route to endpoint r{k} within 30 s");
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

async fn post(client: &Client, url: &str, body: &Value) -> anyhow::Result<Value> {
    let answer = client
        .post_json(url, Bytes::from(body.to_string()))
        .await
        .map_err(|e| anyhow::anyhow!("POST {url}: {e}"))?;
    Ok(serde_json::from_slice(&answer).unwrap_or(Value::Null))
}

async fn patch(client: &Client, url: &str, body: &Value) -> anyhow::Result<()> {
    client
        .request("PATCH", url, Bytes::from(body.to_string()))
        .await
        .map_err(|e| anyhow::anyhow!("PATCH {url}: {e}"))?;
    Ok(())
}

async fn delete(client: &Client, url: &str) -> anyhow::Result<()> {
    client
        .request("DELETE", url, Bytes::new())
        .await
        .map_err(|e| anyhow::anyhow!("DELETE {url}: {e}"))?;
    Ok(())
}
