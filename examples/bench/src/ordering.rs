//! What reading an ordered endpoint's keys costs when much waits (README "Ordered delivery"):
//! a million deliveries on one ordered endpoint, spread over ten thousand keys whose heads all
//! failed once (the receiver answers 503 and the next try is an hour away), so that every key
//! is blocked and everything else waits behind its head. Then the operator's reads, each
//! timed over repeated calls: the first page of blocked keys, a page from the middle, the
//! first page of all keys, and a `/metrics` scrape (whose ordering gauges read the first
//! thousand blocked keys of every ordered endpoint).

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use bytes::Bytes;
use hookgate_sink::{Sink, SinkOptions};

use crate::report::median;
use crate::scenarios::{BENCH_STORAGE_KEY, Bench, Site, wait_until};

/// Events per request while filling.
const BATCH: u64 = 1000;
/// Calls per timed read.
const CALLS: usize = 20;

impl Bench {
    /// The ordering keys' reads at `self.scale.backlog` waiting deliveries, on SQLite, or on
    /// PostgreSQL when `postgres` names a server (a schema of its own).
    pub(crate) async fn ordering_keys(&mut self, postgres: Option<&str>) -> anyhow::Result<()> {
        let schema = match postgres {
            Some(admin) => Some(crate::cluster::Schema::create(admin).await?),
            None => None,
        };
        self.postgres = schema.as_ref().map(crate::cluster::Schema::url);
        let result = self.ordering_keys_run().await;
        self.postgres = None;
        if let Some(schema) = schema {
            schema.drop().await?;
        }
        result
    }

    async fn ordering_keys_run(&mut self) -> anyhow::Result<()> {
        let events = self.scale.backlog;
        let keys = (events / 100).max(10);
        let sink = Sink::start(SinkOptions {
            fail_fraction: 1.0,
            ..SinkOptions::loopback()
        })
        .await?;
        let yaml = format!(
            "policies:\n  slow: {{schedule: [0s, 1h, 1h], jitter: 0}}\ntopics:\n  ledger: {{}}\n\
             endpoints:\n  ledger: {{url: '{}', topics: [ledger], policy: slow, ordered: true}}\n",
            sink.url("/hook")
        );
        let site = match &self.postgres {
            Some(url) => Site::without_sqlite(
                &self.work_root,
                &format!("storage:\n  url: \"{url}\"\n  encryption_key: {BENCH_STORAGE_KEY}\n{yaml}"),
            )?,
            None => Site::new(&self.work_root, &yaml)?,
        };
        let gw = self.start(&site, "ordering-keys").await?;
        let base = gw.base_url();
        let filled = Instant::now();
        self.fill_keys(&base, events, keys).await?;
        let fill_s = filled.elapsed().as_secs_f64();
        // Every key's head is tried once and fails; then every key is blocked.
        wait_until("every key's head to fail once", Duration::from_secs(600), || {
            sink.requests() >= keys
        })
        .await?;
        let first_listing = Instant::now();
        let (blocked, middle) = self.count_blocked(&base, keys).await?;
        let first_listing_s = first_listing.elapsed().as_secs_f64();
        if blocked < keys {
            bail!("{blocked} of {keys} keys blocked");
        }
        let fresh = self.time_listing(&base, &middle).await?;
        // On PostgreSQL the reads above ran on the statistics the table had before the burst
        // (autovacuum analyses it within a minute or so); read again once they are current.
        let analysed = match &self.postgres {
            Some(url) => {
                crate::cluster::run_sql(url, "ANALYZE deliveries").await?;
                Some(self.time_listing(&base, &middle).await?)
            }
            None => None,
        };
        gw.stop().await?;
        self.say(&format!(
            "{events} events over {keys} keys in {fill_s:.1} s; {blocked} keys blocked, counted page by page \
             in {first_listing_s:.2} s (the first listing after the burst); then medians of {CALLS} calls: {}",
            listed(&fresh)
        ));
        self.record_listing(events, keys, &fresh, "");
        if let Some(analysed) = analysed {
            self.say(&format!("after ANALYZE: {}", listed(&analysed)));
            self.record_listing(events, keys, &analysed, "_analysed");
        }
        Ok(())
    }

    /// The four timed reads: first page of blocked keys, a page from the middle, the first
    /// page of all keys, and a `/metrics` scrape.
    async fn time_listing(&self, base: &str, middle: &str) -> anyhow::Result<Vec<(&'static str, f64)>> {
        let listing = format!("{base}/v1/endpoints/ledger/ordering-keys");
        let reads = [
            ("first", format!("{listing}?state=blocked&limit=100")),
            (
                "middle",
                format!("{listing}?state=blocked&limit=100&cursor={middle}"),
            ),
            ("all", format!("{listing}?state=all&limit=100")),
            ("metrics", format!("{base}/metrics")),
        ];
        let mut timed = Vec::new();
        for (name, url) in reads {
            timed.push((name, self.time_reads(&url).await?));
        }
        Ok(timed)
    }

    fn record_listing(&mut self, events: u64, keys: u64, timed: &[(&str, f64)], suffix: &str) {
        let when = if suffix.is_empty() {
            ""
        } else {
            ", statistics current"
        };
        for &(name, ms) in timed {
            let what = match name {
                "first" => "the first page (100) of blocked keys",
                "middle" => "a page (100) of blocked keys from the middle",
                "all" => "the first page (100) of all keys",
                _ => "a /metrics scrape (the ordering gauges read 1000 blocked keys)",
            };
            let (key, label) = self.on_store(
                &format!("ordering_keys_{name}{suffix}_ms"),
                &format!(
                    "ordering keys at {}k waiting, {keys} blocked: {what}{when}",
                    events / 1000
                ),
            );
            self.results.record(&key, &label, "ms", ms, None);
        }
    }

    /// Posts `events` events in batches, key `k<i>` for event `i % keys`, the first batch
    /// holding every key's first event so that all heads go out (and fail) first.
    async fn fill_keys(&self, base: &str, events: u64, keys: u64) -> anyhow::Result<()> {
        let url = format!("{base}/v1/topics/ledger/events/batch");
        let mut next = 0u64;
        while next < events {
            let end = (next + BATCH).min(events);
            let batch: Vec<String> = (next..end)
                .map(|i| {
                    format!(
                        r#"{{"type":"ledger.entry","ordering_key":"k{:06}","payload":{{"n":{i},"amount":1250}}}}"#,
                        i % keys
                    )
                })
                .collect();
            let body = Bytes::from(format!(r#"{{"events":[{}]}}"#, batch.join(",")));
            self.client
                .post_json(&url, body)
                .await
                .map_err(anyhow::Error::msg)
                .with_context(|| format!("posting events {next}..{end}"))?;
            next = end;
        }
        Ok(())
    }

    /// The blocked keys, counted page by page through the API, and the cursor of the page
    /// that starts halfway through `keys` (pages of a tenth of the keys, so that the halfway
    /// cursor falls inside the listing at every scale).
    async fn count_blocked(&self, base: &str, keys: u64) -> anyhow::Result<(u64, String)> {
        let (mut count, mut middle) = (0, String::new());
        let mut cursor: Option<String> = None;
        let page_size = (keys / 10).clamp(1, 1000);
        loop {
            let mut url = format!("{base}/v1/endpoints/ledger/ordering-keys?state=blocked&limit={page_size}");
            if let Some(c) = &cursor {
                url.push_str(&format!("&cursor={c}"));
            }
            let page = self.get_json(&url).await?;
            let listed = page["keys"].as_array().context("keys")?.len() as u64;
            match page["next_cursor"].as_str() {
                Some(c) => {
                    if middle.is_empty() && (count + listed) * 2 >= keys {
                        middle = c.to_owned();
                    }
                    cursor = Some(c.to_owned());
                }
                None => return Ok((count + listed, middle)),
            }
            count += listed;
        }
    }

    /// The median time of [`CALLS`] GETs of `url`, in ms, after one untimed call.
    async fn time_reads(&self, url: &str) -> anyhow::Result<f64> {
        self.client.get(url).await.map_err(anyhow::Error::msg)?;
        let mut times = Vec::with_capacity(CALLS);
        for _ in 0..CALLS {
            let started = Instant::now();
            self.client.get(url).await.map_err(anyhow::Error::msg)?;
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        Ok(median(&times))
    }
}

fn listed(timed: &[(&str, f64)]) -> String {
    timed
        .iter()
        .map(|(name, ms)| format!("{name} {ms:.2} ms"))
        .collect::<Vec<_>>()
        .join(", ")
}
