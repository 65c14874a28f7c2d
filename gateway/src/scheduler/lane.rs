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
use crate::endpoints::Routing;
use crate::model::{DeliveryId, Timestamp};
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
    /// For ordered endpoints: keys with a delivery in progress (or held behind a dead one),
    /// and the deliveries waiting behind it.
    busy_keys: HashMap<Arc<str>, KeyLine>,
    pub(super) metrics: EndpointMetrics,
}

/// One busy ordering key: the delivery at its front, whether the key is held behind it (the
/// front finally failed on a `hold` endpoint), and what waits behind it in order.
#[derive(Debug)]
pub(super) struct KeyLine {
    pub(super) front: DeliveryId,
    pub(super) held: bool,
    behind: VecDeque<Item>,
}

/// Why an operator's release does not apply.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum NotHeld {
    /// The key is not held (never was, or released already).
    NotHeld,
    /// It is held behind another delivery than the one named.
    OtherFront(DeliveryId),
}

impl Lane {
    pub(super) fn new(
        name: &str,
        endpoint: Option<&Routing>,
        config: &Config,
        clock: Arc<dyn Clock>,
        metrics: &Metrics,
    ) -> Lane {
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
        lane.reconfigure(endpoint, config, clock);
        lane
    }

    /// Applies the endpoint's current settings; the throttle restarts only if its rate changed.
    pub(super) fn reconfigure(&mut self, endpoint: Option<&Routing>, config: &Config, clock: Arc<dyn Clock>) {
        self.max_in_flight = endpoint
            .and_then(|e| e.max_in_flight())
            .unwrap_or(config.delivery.max_in_flight_per_endpoint)
            .max(1);
        self.ordered = endpoint.is_some_and(|e| e.ordered);
        // The lowest of the endpoint's own limit and its policies' SNS throttlePolicy.
        let rate = endpoint.and_then(|e| {
            let from_policies = e.topics.iter().filter_map(|t| {
                config
                    .policy_named(e.policy(), t)
                    .max_receives_per_second()
                    .map(f64::from)
            });
            e.max_per_second()
                .into_iter()
                .chain(from_policies)
                .reduce(f64::min)
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
            // The front itself again: a new round of a held front (an operator's retry).
            Some(line) if line.front == item.id => {
                line.held = false;
                Some(item)
            }
            Some(line) => {
                line.behind.push_back(item);
                None
            }
            None => {
                let line = KeyLine {
                    front: item.id,
                    held: false,
                    behind: VecDeque::new(),
                };
                self.busy_keys.insert(key, line);
                Some(item)
            }
        }
    }

    /// The key's front delivery and whether the key is held behind it.
    pub(super) fn front_of(&self, key: &str) -> Option<(DeliveryId, bool)> {
        self.busy_keys.get(key).map(|line| (line.front, line.held))
    }

    /// The key's front `delivery` finally failed and the endpoint holds its keys: the key stays
    /// busy (what arrives queues behind) until [`Lane::release_hold`]. False when the item is
    /// of an old epoch or no longer the key's front.
    pub(super) fn hold_key(&mut self, key: &Arc<str>, epoch: u64, delivery: DeliveryId) -> bool {
        if epoch != self.epoch {
            return false;
        }
        match self.busy_keys.get_mut(key) {
            Some(line) if line.front == delivery => {
                line.held = true;
                true
            }
            _ => false,
        }
    }

    /// A key the store says is held (at start, or when this node takes the endpoint over),
    /// before any of its pending deliveries is taken in.
    pub(super) fn restore_hold(&mut self, key: Arc<str>, delivery: DeliveryId) {
        self.busy_keys.entry(key).or_insert_with(|| KeyLine {
            front: delivery,
            held: true,
            behind: VecDeque::new(),
        });
    }

    /// An operator releases the key held behind `delivery` (any front when None): the next
    /// waiting delivery, if any, owns the key now and is returned.
    pub(super) fn release_hold(
        &mut self,
        key: &Arc<str>,
        delivery: Option<DeliveryId>,
    ) -> Result<Option<Item>, NotHeld> {
        let line = self
            .busy_keys
            .get_mut(key)
            .filter(|l| l.held)
            .ok_or(NotHeld::NotHeld)?;
        if let Some(expected) = delivery
            && expected != line.front
        {
            return Err(NotHeld::OtherFront(line.front));
        }
        line.held = false;
        Ok(self.pass_key(key))
    }

    /// Hands the key to the next delivery behind its front, or frees it.
    fn pass_key(&mut self, key: &Arc<str>) -> Option<Item> {
        let line = self.busy_keys.get_mut(key)?;
        match line.behind.pop_front() {
            Some(next) => {
                line.front = next.id;
                Some(next)
            }
            None => {
                self.busy_keys.remove(key);
                None
            }
        }
    }

    /// Puts `item` in the place of an older round of the same delivery held behind its
    /// ordering key. Gives the item back when no such older round is held here.
    pub(super) fn replace_held(&mut self, item: Item) -> Result<(), Item> {
        let Some(key) = &item.ordering_key else {
            return Err(item);
        };
        let Some(line) = self.busy_keys.get_mut(key) else {
            return Err(item);
        };
        match line.behind.iter_mut().find(|h| h.id == item.id) {
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

    /// The key's front `delivery` is done for good; returns the next one waiting, which now
    /// owns the key. Nothing happens for an item of an old epoch, or one that no longer is the
    /// key's front (an operator skipped it meanwhile), or while the key is held.
    pub(super) fn release_key(&mut self, key: &Arc<str>, epoch: u64, delivery: DeliveryId) -> Option<Item> {
        if epoch != self.epoch {
            return None;
        }
        let line = self.busy_keys.get(key)?;
        if line.front != delivery || line.held {
            return None;
        }
        self.pass_key(key)
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
        let (capacity, len) = (self.waiting.capacity(), self.waiting.len());
        shrink_if_drained(capacity, len, |to| self.waiting.shrink_to(to));
        self.in_flight += 1;
        Next::Go(item)
    }

    /// Stops the lane (endpoint paused, disabled or removed): everything waiting, or waiting
    /// behind a key, is dropped from memory and every queued item of the old epoch becomes
    /// stale. A held key stays held (`keep_holds`) unless another node takes the endpoint.
    /// Returns how many items were dropped here (stale heap entries are counted when they
    /// surface).
    pub(super) fn stop(&mut self, keep_holds: bool) -> usize {
        self.epoch += 1;
        let behind: usize = self.busy_keys.values().map(|l| l.behind.len()).sum();
        let dropped = self.waiting.len() + behind;
        self.waiting.clear();
        self.busy_keys.retain(|_, line| keep_holds && line.held);
        for line in self.busy_keys.values_mut() {
            line.behind.clear();
        }
        dropped
    }
}

/// The capacity a queue of the scheduler shrinks to once it holds less than a quarter of what
/// it has room for, with more than 65 536 places empty (about 7 MB of the heap): twice its
/// length. A burst (a start's million pending deliveries, all due at once, go through the heap
/// into their lane) grows a queue to its size, and a `BinaryHeap` or `VecDeque` never gives
/// that memory back by itself: 100-odd bytes per delivery of the burst, resident for good.
/// Queues under load, which grow and drain by thousands, never reach that slack, so only the
/// aftermath of a real burst pays for the copy and the allocator's collection.
pub(super) fn shrunk_capacity(capacity: usize, len: usize) -> Option<usize> {
    (capacity / 4 > len && capacity - len > 65_536).then_some(len * 2)
}

/// Shrinks a queue of `capacity` holding `len` with `shrink_to` when [`shrunk_capacity`] says
/// so, and then has the allocator return the freed room at once.
pub(super) fn shrink_if_drained(capacity: usize, len: usize, shrink_to: impl FnOnce(usize)) {
    if let Some(to) = shrunk_capacity(capacity, len) {
        shrink_to(to);
        give_back_freed_memory();
    }
}

/// Asks the allocator to return the memory freed so far to the system now: after a queue
/// shrank, and after a start queued its pending deliveries (the lanes' queues grew by
/// doubling, and each outgrown buffer is free but still resident). The binaries allocate
/// with mimalloc, which returns a freed large block ten seconds later and only during a later
/// allocation of such blocks: a gateway that sat nearly idle after a burst (a start with a
/// million deliveries pending for a throttled endpoint) kept its queue's old buffer resident.
/// With another global allocator (the tests) this finds mimalloc's own empty state and does
/// nothing.
#[allow(unsafe_code)]
pub(super) fn give_back_freed_memory() {
    // SAFETY: `mi_collect` has no precondition; it walks the allocator's own state.
    unsafe { libmimalloc_sys::mi_collect(true) }
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

    /// Endpoint `e`'s lane, as the config's file declares it.
    fn lane_of(cfg: &Config, clock: Arc<dyn Clock>, metrics: &Metrics) -> Lane {
        let routing = Routing::of(&cfg.file_endpoints["e"]);
        Lane::new("e", Some(&routing), cfg, clock, metrics)
    }

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
    fn a_queue_shrinks_only_when_mostly_empty() {
        assert_eq!(shrunk_capacity(1 << 20, 0), Some(0));
        assert_eq!(shrunk_capacity(1 << 20, 200_000), Some(400_000));
        assert_eq!(
            shrunk_capacity(1 << 20, 300_000),
            None,
            "a quarter or more is in use"
        );
        assert_eq!(shrunk_capacity(65_536, 0), None, "small queues keep their room");
    }

    #[test]
    fn a_drained_lane_gives_back_what_a_burst_took() {
        let clock = ManualClock::new(Timestamp::from_millis(1_000_000));
        let cfg = config("topics: {t: {}}\nendpoints:\n  e: {url: 'http://x.example/', topics: [t]}\n");
        let mut lane = lane_of(&cfg, Arc::new(clock.clone()), &Metrics::new());
        lane.max_in_flight = u32::MAX;
        for i in 0..200_000 {
            lane.waiting.push_back(item(i, None));
        }
        assert!(lane.waiting.capacity() >= 200_000);
        while let Next::Go(_) = lane.next_ready(clock.now()) {}
        assert!(lane.waiting.capacity() <= 65_536, "{}", lane.waiting.capacity());
    }

    #[test]
    fn throttle_spreads_sends_at_the_configured_rate() {
        let clock = ManualClock::new(Timestamp::from_millis(1_000_000));
        let cfg = config(
            "topics: {t: {}}\nendpoints:\n  e: {url: 'http://x.example/', topics: [t], max_per_second: 2, max_in_flight: 100}\n",
        );
        let mut lane = lane_of(&cfg, Arc::new(clock.clone()), &Metrics::new());
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
        let mut lane = lane_of(&cfg, Arc::new(clock.clone()), &Metrics::new());
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
        let mut lane = lane_of(&cfg, Arc::new(clock.clone()), &Metrics::new());
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
        let mut lane = lane_of(&cfg, Arc::new(clock), &Metrics::new());
        assert!(lane.hold_if_key_busy(item(1, Some("a"))).is_some());
        assert!(lane.hold_if_key_busy(item(2, Some("a"))).is_none());
        assert!(lane.hold_if_key_busy(item(3, Some("b"))).is_some());
        assert!(lane.hold_if_key_busy(item(4, None)).is_some());
        assert!(lane.hold_if_key_busy(item(5, Some("a"))).is_none());
        let key: Arc<str> = Arc::from("a");
        // Only the key's front releases it.
        assert!(lane.release_key(&key, 0, DeliveryId(2)).is_none());
        assert_eq!(
            lane.release_key(&key, 0, DeliveryId(1)).unwrap().id,
            DeliveryId(2)
        );
        assert_eq!(
            lane.release_key(&key, 0, DeliveryId(2)).unwrap().id,
            DeliveryId(5)
        );
        assert!(lane.release_key(&key, 0, DeliveryId(5)).is_none());
        // The key is free again.
        assert!(lane.hold_if_key_busy(item(6, Some("a"))).is_some());
    }

    #[test]
    fn stopping_a_lane_drops_what_waits_and_invalidates_the_epoch() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let cfg = config(
            "topics: {t: {}}\nendpoints:\n  e: {url: 'http://x.example/', topics: [t], ordered: true}\n",
        );
        let mut lane = lane_of(&cfg, Arc::new(clock), &Metrics::new());
        lane.waiting.push_back(item(1, None));
        assert!(lane.hold_if_key_busy(item(2, Some("a"))).is_some());
        assert!(lane.hold_if_key_busy(item(3, Some("a"))).is_none());
        assert_eq!(lane.stop(true), 2);
        assert_eq!(lane.epoch, 1);
        assert!(lane.release_key(&Arc::from("a"), 0, DeliveryId(2)).is_none());
    }

    #[test]
    fn a_held_key_stops_its_line_until_released_and_survives_a_pause() {
        let clock = ManualClock::new(Timestamp::from_millis(0));
        let cfg = config(
            "topics: {t: {}}\nendpoints:\n  e: {url: 'http://x.example/', topics: [t], ordered: true}\n",
        );
        let mut lane = lane_of(&cfg, Arc::new(clock), &Metrics::new());
        let key: Arc<str> = Arc::from("a");
        assert!(lane.hold_if_key_busy(item(1, Some("a"))).is_some());
        assert!(lane.hold_if_key_busy(item(2, Some("a"))).is_none());
        assert!(
            !lane.hold_key(&key, 0, DeliveryId(2)),
            "only the front holds its key"
        );
        assert!(lane.hold_key(&key, 0, DeliveryId(1)));
        // The front's own end no longer moves a held key on.
        assert!(lane.release_key(&key, 0, DeliveryId(1)).is_none());
        assert_eq!(lane.front_of("a"), Some((DeliveryId(1), true)));
        assert_eq!(
            lane.release_hold(&key, Some(DeliveryId(7))).unwrap_err(),
            NotHeld::OtherFront(DeliveryId(1))
        );
        // A pause drops what waits but keeps the hold.
        assert_eq!(lane.stop(true), 1);
        assert!(lane.hold_if_key_busy(item(3, Some("a"))).is_none());
        assert_eq!(
            lane.release_hold(&key, Some(DeliveryId(1))).unwrap().unwrap().id,
            DeliveryId(3)
        );
        assert_eq!(lane.release_hold(&key, None).unwrap_err(), NotHeld::NotHeld);
        assert_eq!(lane.front_of("a"), Some((DeliveryId(3), false)));
        // Another node taking the endpoint forgets it: that node restores it from the store.
        lane.restore_hold(Arc::from("b"), DeliveryId(9));
        assert_eq!(lane.stop(false), 0);
        assert_eq!(lane.front_of("b"), None);
    }

    /// What a random run does, one step at a time (indexes are taken modulo what exists).
    #[derive(Debug, Clone)]
    enum Step {
        Arrive(u8),
        Start(usize),
        Delivered(usize),
        FailedRetry(usize),
        FailedFinal(usize),
        Skip(u8),
        Release(u8),
        RetryHeld(u8),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        prop_oneof![
            3 => (0u8..3).prop_map(Step::Arrive),
            3 => any::<usize>().prop_map(Step::Start),
            2 => any::<usize>().prop_map(Step::Delivered),
            1 => any::<usize>().prop_map(Step::FailedRetry),
            1 => any::<usize>().prop_map(Step::FailedFinal),
            1 => (0u8..3).prop_map(Step::Skip),
            1 => (0u8..3).prop_map(Step::Release),
            1 => (0u8..3).prop_map(Step::RetryHeld),
        ]
    }

    /// A model of the actor over one ordered lane: items ready to start, in flight, and the
    /// delivered ids per key. Operator actions act only on a front that is not in flight, as
    /// the actor's do.
    struct Run {
        lane: Lane,
        hold: bool,
        next_id: i64,
        ready: Vec<Item>,
        in_flight: Vec<Item>,
        delivered: HashMap<Arc<str>, Vec<i64>>,
    }

    impl Run {
        fn key(k: u8) -> Arc<str> {
            Arc::from(format!("k{k}"))
        }

        fn admit(&mut self, item: Item) {
            if let Some(item) = self.lane.hold_if_key_busy(item) {
                self.ready.push(item);
            }
        }

        fn pass(&mut self, next: Option<Item>) {
            self.ready.extend(next);
        }

        fn apply(&mut self, step: Step) {
            match step {
                Step::Arrive(k) => {
                    self.next_id += 1;
                    let id = self.next_id;
                    self.admit(item(id, Some(&*Self::key(k))));
                }
                Step::Start(i) if !self.ready.is_empty() => {
                    let item = self.ready.remove(i % self.ready.len());
                    let key = item.ordering_key.clone().unwrap();
                    assert!(
                        self.in_flight
                            .iter()
                            .all(|f| f.ordering_key.as_ref() != Some(&key)),
                        "two deliveries of {key} at once"
                    );
                    self.in_flight.push(item);
                }
                Step::Delivered(i) if !self.in_flight.is_empty() => {
                    let item = self.in_flight.remove(i % self.in_flight.len());
                    let key = item.ordering_key.clone().unwrap();
                    let sent = self.delivered.entry(key.clone()).or_default();
                    assert!(
                        sent.last().is_none_or(|last| *last < item.id.0),
                        "{key} out of order: {sent:?} then {}",
                        item.id.0
                    );
                    sent.push(item.id.0);
                    let next = self.lane.release_key(&key, 0, item.id);
                    self.pass(next);
                }
                Step::FailedRetry(i) if !self.in_flight.is_empty() => {
                    let item = self.in_flight.remove(i % self.in_flight.len());
                    self.ready.push(item);
                }
                Step::FailedFinal(i) if !self.in_flight.is_empty() => {
                    let item = self.in_flight.remove(i % self.in_flight.len());
                    let key = item.ordering_key.clone().unwrap();
                    if !(self.hold && self.lane.hold_key(&key, 0, item.id)) {
                        let next = self.lane.release_key(&key, 0, item.id);
                        self.pass(next);
                    }
                }
                Step::Skip(k) => {
                    let key = Self::key(k);
                    let Some((front, held)) = self.lane.front_of(&key) else {
                        return;
                    };
                    if held {
                        let next = self.lane.release_hold(&key, Some(front)).unwrap();
                        self.pass(next);
                    } else if let Some(at) = self.ready.iter().position(|r| r.id == front) {
                        self.ready.remove(at);
                        let next = self.lane.release_key(&key, 0, front);
                        self.pass(next);
                    }
                }
                Step::Release(k) => {
                    let key = Self::key(k);
                    if let Ok(next) = self.lane.release_hold(&key, None) {
                        self.pass(next);
                    }
                }
                Step::RetryHeld(k) => {
                    let key = Self::key(k);
                    if let Some((front, true)) = self.lane.front_of(&key) {
                        self.admit(item(front.0, Some(&*key)));
                        assert_eq!(self.lane.front_of(&key), Some((front, false)));
                    }
                }
                _ => {}
            }
        }
    }

    proptest::proptest! {
        /// Random arrivals, outcomes and operator actions on three keys never start two
        /// deliveries of one key at once nor deliver a key's events out of order; and once
        /// everything is delivered or skipped, no key stays busy.
        #[test]
        fn a_key_is_never_delivered_out_of_order_or_twice_at_once(
            steps in proptest::collection::vec(step(), 1..200),
            hold in proptest::bool::ANY,
        ) {
            let clock = ManualClock::new(Timestamp::from_millis(0));
            let extra = if hold { ", on_final_failure: hold" } else { "" };
            let cfg = config(&format!(
                "topics: {{t: {{}}}}\nendpoints:\n  e: {{url: 'http://x.example/', topics: [t], ordered: true{extra}}}\n"
            ));
            let mut run = Run {
                lane: lane_of(&cfg, Arc::new(clock), &Metrics::new()),
                hold,
                next_id: 0,
                ready: Vec::new(),
                in_flight: Vec::new(),
                delivered: HashMap::new(),
            };
            for s in steps {
                run.apply(s);
            }
            // Drain: deliver everything, releasing holds.
            for _ in 0..10_000 {
                if !run.in_flight.is_empty() {
                    run.apply(Step::Delivered(0));
                } else if !run.ready.is_empty() {
                    run.apply(Step::Start(0));
                } else {
                    for k in 0..3 {
                        run.apply(Step::Release(k));
                    }
                    if run.ready.is_empty() {
                        break;
                    }
                }
            }
            for k in 0..3 {
                proptest::prop_assert_eq!(run.lane.front_of(&format!("k{k}")), None);
            }
        }
    }
}
