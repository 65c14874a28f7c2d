//! The alert for an ordered endpoint's key that has been blocked too long: its oldest waiting
//! event has waited `health.key_blocked_after` behind a head that keeps failing. Each such
//! key is reported once per head (a warning in the log, `hookgate.ordering.key_blocked` on
//! the operator topic and a count in `hookgate_ordering_key_events_total{event="blocked_too_long"}`),
//! by the node that delivers the endpoint, so that a cluster reports it once.
//!
//! The watch reads the store's blocked keys (the failed heads' index, the same read as the
//! console's Ordering tab) every quarter of the threshold, at most every minute. What it has
//! reported lives in memory: after a restart, or on the node that takes an endpoint over, a
//! key still blocked is reported once more.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use crate::ingest::Ingestor;
use crate::model::{DeliveryId, Timestamp};
use crate::store::{KeyListing, KeyState, OrderingKeyRow};

/// Keys read per page of an endpoint's blocked keys.
const PAGE: u32 = 1000;
/// Blocked keys looked at per endpoint and pass: the alert is for the first of them; the
/// gauges and the console count them all.
const MAX_KEYS: usize = 10_000;

/// The keys already reported: endpoint, key and the head they were blocked behind.
#[derive(Debug, Default)]
pub struct Reported {
    keys: HashSet<(Arc<str>, String, DeliveryId)>,
}

impl Reported {
    /// The keys of `rows` (an endpoint's blocked keys, read at `now`) to report now, with how
    /// long their oldest event has waited; forgets the endpoint's keys that are no longer
    /// blocked behind the head they were reported for.
    pub fn due<'a>(
        &mut self,
        endpoint: &Arc<str>,
        rows: &'a [OrderingKeyRow],
        now: Timestamp,
        threshold: Duration,
    ) -> Vec<(&'a OrderingKeyRow, Duration)> {
        let blocked: Vec<(&OrderingKeyRow, DeliveryId, Duration)> = rows
            .iter()
            .filter(|row| row.state() == KeyState::Blocked)
            .filter_map(|row| {
                let head = row.head.as_ref()?.delivery_id;
                Some((row, head, now.since(row.oldest_waiting_at?)))
            })
            .collect();
        self.keys.retain(|(e, key, head)| {
            e != endpoint || blocked.iter().any(|(row, h, _)| row.key == *key && h == head)
        });
        blocked
            .into_iter()
            .filter(|(_, _, waited)| *waited >= threshold)
            .filter(|(row, head, _)| self.keys.insert((endpoint.clone(), row.key.clone(), *head)))
            .map(|(row, _, waited)| (row, waited))
            .collect()
    }
}

impl Reported {
    /// Forgets the endpoint's `keys`, so that the next look reports them again.
    pub fn forget(&mut self, endpoint: &Arc<str>, keys: &[String]) {
        self.keys
            .retain(|(e, key, _)| e != endpoint || !keys.contains(key));
    }
}

/// Runs the watch until `shutdown`.
pub async fn run(ingestor: Ingestor, shutdown: CancellationToken) {
    let mut reported = Reported::default();
    loop {
        let now = ingestor.clock.now();
        let threshold = ingestor.config.load().health.key_blocked_after;
        pass(&ingestor, &mut reported, now, threshold).await;
        let every = (threshold / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ingestor.clock.sleep_until(now.plus(every)) => {}
        }
    }
}

/// One look at every ordered endpoint this node delivers.
async fn pass(ingestor: &Ingestor, reported: &mut Reported, now: Timestamp, threshold: Duration) {
    for ep in ingestor.endpoints.ordered() {
        if !ingestor.scheduler.delivers(&ep.name) {
            continue;
        }
        let Some(rows) = blocked_keys(ingestor, &ep.name).await else {
            continue;
        };
        let endpoint: Arc<str> = ep.name.clone();
        let mut failed = Vec::new();
        for (row, waited) in reported.due(&endpoint, &rows, now, threshold) {
            if !report(ingestor, &endpoint, row, waited).await {
                failed.push(row.key.clone());
            }
        }
        reported.forget(&endpoint, &failed);
    }
}

/// Reports one key; false when its operator event could not be written (the next look
/// tries again).
async fn report(ingestor: &Ingestor, endpoint: &Arc<str>, row: &OrderingKeyRow, waited: Duration) -> bool {
    tracing::warn!(endpoint = %endpoint, key = %row.key, waiting = row.waiting,
        waited_secs = waited.as_secs(),
        "ordering key blocked behind a failing head; skip or retry it, or fix the receiver");
    if let Err(e) = ingestor.publish_key_blocked(endpoint, row, waited).await {
        tracing::warn!(endpoint = %endpoint, key = %row.key, error = %e,
            "cannot publish hookgate.ordering.key_blocked; trying again at the next look");
        return false;
    }
    ingestor
        .metrics
        .ordering_key_events(endpoint, "blocked_too_long")
        .increment(1);
    true
}

/// The endpoint's blocked (and held) keys, page by page, up to [`MAX_KEYS`]; None when the
/// store cannot answer now (the next pass tries again).
async fn blocked_keys(ingestor: &Ingestor, endpoint: &str) -> Option<Vec<OrderingKeyRow>> {
    let mut rows = Vec::new();
    let mut after = None;
    loop {
        let page = match ingestor
            .store
            .ordering_keys(endpoint, KeyListing::Blocked, after, PAGE)
            .await
        {
            Ok(page) => page,
            Err(e) => {
                tracing::debug!(endpoint, error = %e, "cannot read the blocked ordering keys");
                return None;
            }
        };
        rows.extend(page.keys);
        after = page.next_after;
        if after.is_none() || rows.len() >= MAX_KEYS {
            return Some(rows);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::DeliveryStatus;
    use crate::store::KeyHead;

    const MIN: Duration = Duration::from_secs(60);

    fn row(key: &str, head: DeliveryId, attempts: u32, waiting: u64, since: Timestamp) -> OrderingKeyRow {
        OrderingKeyRow {
            key: key.to_owned(),
            head: Some(KeyHead {
                delivery_id: head,
                event_id: "evt".into(),
                status: DeliveryStatus::Pending,
                round: 1,
                attempt_count: attempts,
                next_attempt_at: None,
                last_error: Some("http_status 500".into()),
            }),
            held_since: None,
            waiting,
            oldest_waiting_at: Some(since),
        }
    }

    #[test]
    fn a_key_is_reported_once_per_head_after_the_threshold() {
        let ep: Arc<str> = Arc::from("ledger");
        let t0 = Timestamp::from_millis(1_000_000_000);
        let (h1, h2) = (DeliveryId(1), DeliveryId(2));
        let mut reported = Reported::default();

        let young = [row("a", h1, 2, 3, t0)];
        assert!(reported.due(&ep, &young, t0.plus(MIN * 14), MIN * 15).is_empty());

        let due = reported.due(&ep, &young, t0.plus(MIN * 15), MIN * 15);
        assert_eq!(due.len(), 1);
        assert_eq!((due[0].0.key.as_str(), due[0].1), ("a", MIN * 15));
        assert!(
            reported.due(&ep, &young, t0.plus(MIN * 40), MIN * 15).is_empty(),
            "reported twice"
        );
        // A report that could not be written is forgotten and made again.
        reported.forget(&ep, &["a".to_owned()]);
        assert_eq!(reported.due(&ep, &young, t0.plus(MIN * 40), MIN * 15).len(), 1);

        // Skipped: a new head, blocked again, is a new report.
        let next = [row("a", h2, 1, 2, t0)];
        assert_eq!(reported.due(&ep, &next, t0.plus(MIN * 41), MIN * 15).len(), 1);
    }

    #[test]
    fn a_key_that_flowed_again_is_reported_again_when_it_blocks_again() {
        let ep: Arc<str> = Arc::from("ledger");
        let t0 = Timestamp::from_millis(1_000_000_000);
        let h = DeliveryId(1);
        let mut reported = Reported::default();
        let blocked = [row("a", h, 3, 1, t0)];
        assert_eq!(reported.due(&ep, &blocked, t0.plus(MIN * 20), MIN * 15).len(), 1);
        // Not in the listing any more (its head went through a retry), then blocked again.
        assert!(reported.due(&ep, &[], t0.plus(MIN * 21), MIN * 15).is_empty());
        assert_eq!(reported.due(&ep, &blocked, t0.plus(MIN * 22), MIN * 15).len(), 1);
    }

    #[test]
    fn held_flowing_and_other_endpoints_keys_are_not_this_alert() {
        let (ep, other): (Arc<str>, Arc<str>) = (Arc::from("ledger"), Arc::from("audit"));
        let t0 = Timestamp::from_millis(1_000_000_000);
        let mut reported = Reported::default();
        let h = DeliveryId(1);
        let mut held = row("held", DeliveryId(2), 9, 4, t0);
        held.held_since = Some(t0);
        let never_tried = row("fresh", DeliveryId(3), 0, 4, t0);
        let rows = [held, never_tried, row("b", h, 1, 1, t0)];
        let due = reported.due(&ep, &rows, t0.plus(MIN * 30), MIN * 15);
        assert_eq!(due.iter().map(|(r, _)| r.key.as_str()).collect::<Vec<_>>(), ["b"]);
        // Another endpoint's pass leaves this endpoint's reports alone.
        assert!(reported.due(&other, &[], t0.plus(MIN * 31), MIN * 15).is_empty());
        assert!(reported.due(&ep, &rows, t0.plus(MIN * 32), MIN * 15).is_empty());
    }
}
