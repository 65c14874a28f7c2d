//! One endpoint's lane: its due deliveries, its in-flight limit, its throttle and, for an
//! `ordered` endpoint, which ordering keys are busy.

use std::collections::{HashMap, VecDeque};
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::middleware::NoOpMiddleware;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};

use super::actor::Item;
use super::meters::EndpointMetrics;
use crate::clock::Clock;
use crate::config::Config;
use crate::model::Timestamp;
use crate::telemetry::Metrics;

/// governor's view of the gateway clock, so throttling follows simulated time in tests and
/// under `--time-scale`.
#[derive(Clone)]
pub(super) struct GatewayClock(Arc<dyn Clock>);

impl governor::clock::Clock for GatewayClock {
    type Instant = Duration;
    fn now(&self) -> Duration {
        Duration::from_millis(self.0.now().as_millis().max(0) as u64)
    }
}

type Limiter = RateLimiter<NotKeyed, InMemoryState, GatewayClock, NoOpMiddleware<Duration>>;

pub(super) enum Next {
    Go(Item),
    /// The throttle allows the next send at this time.
    NotUntil(Timestamp),
    Nothing,
}

pub(super) struct Lane {
    pub(super) epoch: u64,
    pub(super) in_flight: u32,
    pub(super) waiting: VecDeque<Item>,
    max_in_flight: u32,
    rate_per_second: Option<f64>,
    limiter: Option<Limiter>,
    ordered: bool,
    /// For ordered endpoints: keys with a delivery in progress, and the deliveries held behind it.
    busy_keys: HashMap<Arc<str>, VecDeque<Item>>,
    pub(super) metrics: EndpointMetrics,
}

impl Lane {
    pub(super) fn new(name: &str, config: &Config, clock: Arc<dyn Clock>, metrics: &Metrics) -> Lane {
        let mut lane = Lane {
            epoch: 0,
            in_flight: 0,
            waiting: VecDeque::new(),
            max_in_flight: 1,
            rate_per_second: None,
            limiter: None,
            ordered: false,
            busy_keys: HashMap::new(),
            metrics: EndpointMetrics::new(name, metrics),
        };
        lane.reconfigure(name, config, clock);
        lane
    }

    /// Applies the endpoint's current settings; the throttle restarts only if its rate changed.
    pub(super) fn reconfigure(&mut self, name: &str, config: &Config, clock: Arc<dyn Clock>) {
        let endpoint = config.endpoints.get(name);
        self.max_in_flight = endpoint
            .and_then(|e| e.max_in_flight)
            .unwrap_or(config.delivery.max_in_flight_per_endpoint)
            .max(1);
        self.ordered = endpoint.is_some_and(|e| e.ordered);
        // The lowest of the endpoint's own limit and its policies' SNS throttlePolicy.
        let rate = endpoint.and_then(|e| {
            let from_policies = e
                .topics
                .iter()
                .filter_map(|t| config.policy_for(e, t).max_receives_per_second().map(f64::from));
            e.max_per_second.into_iter().chain(from_policies).reduce(f64::min)
        });
        if rate != self.rate_per_second {
            self.rate_per_second = rate;
            self.limiter = rate.map(|r| limiter(r, clock));
        }
    }

    /// For an ordered endpoint, claims the item's key or holds the item behind the key's
    /// current delivery. Returns the item if it should go to the due queue now.
    pub(super) fn hold_if_key_busy(&mut self, item: Item) -> Option<Item> {
        if !self.ordered {
            return Some(item);
        }
        let Some(key) = item.ordering_key.clone() else {
            return Some(item);
        };
        match self.busy_keys.get_mut(&key) {
            Some(held) => {
                held.push_back(item);
                None
            }
            None => {
                self.busy_keys.insert(key, VecDeque::new());
                Some(item)
            }
        }
    }

    /// Puts `item` in the place of an older round of the same delivery held behind its
    /// ordering key. Gives the item back when no such older round is held here.
    pub(super) fn replace_held(&mut self, item: Item) -> Result<(), Item> {
        let Some(key) = &item.ordering_key else {
            return Err(item);
        };
        let Some(held) = self.busy_keys.get_mut(key) else {
            return Err(item);
        };
        match held.iter_mut().find(|h| h.id == item.id) {
            Some(slot) => {
                *slot = Item {
                    epoch: slot.epoch,
                    ..item
                };
                Ok(())
            }
            None => Err(item),
        }
    }

    /// The key's delivery is done for good; returns the next held one, which now owns the key.
    pub(super) fn release_key(&mut self, key: &Arc<str>, epoch: u64) -> Option<Item> {
        if epoch != self.epoch {
            return None;
        }
        let held = self.busy_keys.get_mut(key)?;
        match held.pop_front() {
            Some(next) => Some(next),
            None => {
                self.busy_keys.remove(key);
                None
            }
        }
    }

    pub(super) fn next_ready(&mut self, now: Timestamp) -> Next {
        if self.waiting.is_empty() || self.in_flight >= self.max_in_flight {
            return Next::Nothing;
        }
        if let Some(limiter) = &self.limiter
            && let Err(not_until) = limiter.check()
        {
            let clock_now = Duration::from_millis(now.as_millis().max(0) as u64);
            let wait = not_until.wait_time_from(clock_now);
            // Millisecond clock: wake no earlier than the next millisecond.
            return Next::NotUntil(now.plus(wait.max(Duration::from_millis(1))));
        }
        let item = self.waiting.pop_front().expect("checked non-empty");
        self.in_flight += 1;
        Next::Go(item)
    }

    /// Stops the lane (endpoint paused, disabled or removed): everything waiting or held is
    /// dropped from memory and every queued item of the old epoch becomes stale. Returns how
    /// many items were dropped here (stale heap entries are counted when they surface).
    pub(super) fn stop(&mut self) -> usize {
        self.epoch += 1;
        let held: usize = self.busy_keys.values().map(VecDeque::len).sum();
        let dropped = self.waiting.len() + held;
        self.waiting.clear();
        self.busy_keys.clear();
        dropped
    }
}

fn limiter(rate_per_second: f64, clock: Arc<dyn Clock>) -> Limiter {
    let period = Duration::from_secs_f64(1.0 / rate_per_second).max(Duration::from_micros(1));
    // A burst as large as one second's worth keeps the rate an average, not a strict spacing.
    let burst =
        NonZeroU32::new(rate_per_second.ceil().clamp(1.0, u32::MAX as f64) as u32).unwrap_or(NonZeroU32::MIN);
    let quota = Quota::with_period(period)
        .expect("a positive period")
        .allow_burst(burst);
    RateLimiter::direct_with_clock(quota, GatewayClock(clock))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::ManualClock;
    use crate::model::DeliveryId;

    fn config(yaml: &str) -> Config {
        crate::config::load_str(yaml, "t.yaml", None, |_| None).unwrap()
    }

    fn item(id: i64, key: Option<&str>) -> Item {
        Item {
            id: DeliveryId(id),
            endpoint: Arc::from("e"),
            event: None,
            round: 1,
            round_started_at: Timestamp::from_millis(0),
            attempts_made: 0,
            ordering_key: key.map(Arc::from),
            previous_delay: None,
            epoch: 0,
            due_at: Timestamp::from_millis(0),
        }
    }

    #[test]
    fn throttle_spreads_sends_at_the_configured_rate() {
        let clock = ManualClock::new(Timestamp::from_millis(1_000_000));
        let cfg = config(
            "topics: {t: {}}\nendpoints:\n  e: {url: 'http://x.example/', topics: [t], max_per_second: 2, max_in_flight: 100}\n",
        );
        let mut lane = Lane::new("e", &cfg, Arc::new(clock.clone()), &Metrics::new());
        for i in 0..10 {
            lane.waiting.push_back(item(i, None));
        }
        // Simulate 5 seconds, sending whatever the throttle allows each 100 ms.
        let mut sent_at = Vec::new();
        for _ in 0..50 {
            while let Next::Go(_) = lane.next_ready(clock.now()) {
                sent_at.push(clock.now());
            }
            clock.advance(Duration::from_millis(100));
        }
        // A burst of 2, then one every 500 ms: 2 + 4.9 s × 2/s ≈ 11 > 10 → all 10 sent.
        assert_eq!(sent_at.len(), 10);
        let start = sent_at[0];
        let spread = sent_at[9].since(start);
        assert!(spread >= Duration::from_millis(3_900), "{spread:?}");
        assert!(spread <= Duration::from_millis(4_100), "{spread:?}");
        // The average rate over the sends after the burst is the configured 2/s.
        let after_burst = sent_at[9].since(sent_at[2]);
        assert_eq!(after_burst, Duration::from_millis(3_500));
    }

    #[test]
    fn a_throttled_lane_says_when_it_may_send_again() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let cfg = config(
            "topics: {t: {}}\nendpoints:\n  e: {url: 'http://x.example/', topics: [t], max_per_second: 1}\n",
        );
        let mut lane = Lane::new("e", &cfg, Arc::new(clock.clone()), &Metrics::new());
        lane.waiting.push_back(item(1, None));
        lane.waiting.push_back(item(2, None));
        assert!(matches!(lane.next_ready(clock.now()), Next::Go(_)));
        lane.in_flight = 0;
        match lane.next_ready(clock.now()) {
            Next::NotUntil(at) => assert_eq!(at, Timestamp::from_millis(1_000)),
            _ => panic!("expected the throttle to hold the second send"),
        }
    }

    #[test]
    fn the_in_flight_limit_holds_back_the_next_delivery() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let cfg = config(
            "topics: {t: {}}\nendpoints:\n  e: {url: 'http://x.example/', topics: [t], max_in_flight: 2}\n",
        );
        let mut lane = Lane::new("e", &cfg, Arc::new(clock.clone()), &Metrics::new());
        for i in 0..3 {
            lane.waiting.push_back(item(i, None));
        }
        assert!(matches!(lane.next_ready(clock.now()), Next::Go(_)));
        assert!(matches!(lane.next_ready(clock.now()), Next::Go(_)));
        assert!(matches!(lane.next_ready(clock.now()), Next::Nothing));
        lane.in_flight -= 1;
        assert!(matches!(lane.next_ready(clock.now()), Next::Go(_)));
    }

    #[test]
    fn ordered_lanes_hold_a_key_until_its_head_is_done() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let cfg = config(
            "topics: {t: {}}\nendpoints:\n  e: {url: 'http://x.example/', topics: [t], ordered: true}\n",
        );
        let mut lane = Lane::new("e", &cfg, Arc::new(clock), &Metrics::new());
        assert!(lane.hold_if_key_busy(item(1, Some("a"))).is_some());
        assert!(lane.hold_if_key_busy(item(2, Some("a"))).is_none());
        assert!(lane.hold_if_key_busy(item(3, Some("b"))).is_some());
        assert!(lane.hold_if_key_busy(item(4, None)).is_some());
        assert!(lane.hold_if_key_busy(item(5, Some("a"))).is_none());
        let key: Arc<str> = Arc::from("a");
        assert_eq!(lane.release_key(&key, 0).unwrap().id, DeliveryId(2));
        assert_eq!(lane.release_key(&key, 0).unwrap().id, DeliveryId(5));
        assert!(lane.release_key(&key, 0).is_none());
        // The key is free again.
        assert!(lane.hold_if_key_busy(item(6, Some("a"))).is_some());
    }

    #[test]
    fn stopping_a_lane_drops_what_waits_and_invalidates_the_epoch() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let cfg = config(
            "topics: {t: {}}\nendpoints:\n  e: {url: 'http://x.example/', topics: [t], ordered: true}\n",
        );
        let mut lane = Lane::new("e", &cfg, Arc::new(clock), &Metrics::new());
        lane.waiting.push_back(item(1, None));
        assert!(lane.hold_if_key_busy(item(2, Some("a"))).is_some());
        assert!(lane.hold_if_key_busy(item(3, Some("a"))).is_none());
        assert_eq!(lane.stop(), 2);
        assert_eq!(lane.epoch, 1);
        assert!(lane.release_key(&Arc::from("a"), 0).is_none());
    }
}
