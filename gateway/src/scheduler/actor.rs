//! The actor: owns the due heap, the lanes, and the attempts in flight; applies each finished
//! attempt's [`lifecycle::decide`] decision.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arc_swap::ArcSwap;
use rand::Rng;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::feeder::HealthReport;
use super::handle::{Command, Publisher, Shared};
use super::held::{HeldEvent, RunHolder};
use super::lane::{self, Lane};
use super::lifecycle;
use crate::attempt::{self, AttemptEnv, AttemptInput, AttemptReport, AttemptResult};
use crate::clock::Clock;
use crate::config::Config;
use crate::endpoints::Endpoints;
use crate::fence::Fence;
use crate::health::{EndpointHealth, HealthInput};
use crate::model::{DeliveryId, DeliveryStatus, ErrorKind, Event, Outcome, Timestamp};
use crate::store::{AttemptWrite, PendingDelivery, StateChange, Store};
use crate::telemetry::Metrics;

/// A delivery waiting in memory. Deliveries ingested by this process keep their event (while
/// the held events stay below [`KEEP_EVENT_BYTES_UP_TO`]), so their first attempt needs no
/// read; rebuilt ones load it when due.
#[derive(Debug, Clone)]
pub(super) struct Item {
    pub(super) id: DeliveryId,
    pub(super) endpoint: Arc<str>,
    pub(super) event: Option<Arc<HeldEvent>>,
    pub(super) round: u32,
    /// When the current round began; the policy's deadline counts from here.
    pub(super) round_started_at: Timestamp,
    pub(super) attempts_made: u32,
    pub(super) ordering_key: Option<Arc<str>>,
    /// The wait before the upcoming attempt (None for a first attempt or after a restart).
    pub(super) previous_delay: Option<Duration>,
    /// The lane epoch this item belongs to; a pause or removal bumps the epoch, which
    /// invalidates every item queued before it without searching the heap.
    pub(super) epoch: u64,
    /// When the upcoming attempt is planned; its start minus this is the scheduler's lateness
    /// (`hookgate_attempt_lateness_seconds`), which includes waits for lane room and throttle.
    pub(super) due_at: Timestamp,
}

/// How long a delivery whose read failed waits before it is read again.
const UNREAD_RETRY: Duration = Duration::from_secs(1);

pub(super) struct Due {
    at: Timestamp,
    seq: u64,
    pub(super) item: Item,
}

impl PartialEq for Due {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.seq) == (other.at, other.seq)
    }
}
impl Eq for Due {}
impl PartialOrd for Due {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Due {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.at, self.seq).cmp(&(other.at, other.seq))
    }
}

/// The feeder's ends of its channels with the actor: state changes in, health reports out.
pub(super) struct FeederChannels {
    pub(super) changes: mpsc::UnboundedReceiver<StateChange>,
    pub(super) reports: mpsc::UnboundedSender<HealthReport>,
}

/// How an attempt task ended.
enum Finished {
    /// The attempt ran (a request was made, failed before an answer, or a transform dropped
    /// the event). The event is kept so that a retry needs no read.
    Ran {
        item: Item,
        /// Boxed: the report is several times the size of the other variants.
        report: Box<AttemptReport>,
        event: Arc<Event>,
    },
    /// The delivery is no longer pending on disk (finished meanwhile, or purged).
    Gone { item: Item },
    /// The delivery could not be read now (the database restarting or out of reach): the disk
    /// still says pending, so it is tried again in a moment, keeping its place in its key.
    Unread { item: Item },
    /// The endpoint is no longer in the config.
    EndpointRemoved { item: Item },
    /// The endpoint's lease no longer held here right before the send: nothing was sent, and
    /// the node that holds it now delivers it (the store still says pending).
    Fenced { item: Item },
}

pub(super) struct Actor {
    pub(super) clock: Arc<dyn Clock>,
    pub(super) store: Arc<dyn Store>,
    pub(super) config: Arc<ArcSwap<Config>>,
    pub(super) endpoints: Endpoints,
    pub(super) env: Arc<AttemptEnv>,
    pub(super) rx: mpsc::UnboundedReceiver<Command>,
    pub(super) shared: Arc<Shared>,
    pub(super) due: BinaryHeap<Reverse<Due>>,
    pub(super) seq: u64,
    pub(super) lanes: HashMap<Arc<str>, Lane>,
    /// The lanes that may have deliveries waiting: dispatch and the idle check look at these
    /// only, not at every lane there is (one per endpoint ever delivered to).
    pub(super) busy: HashSet<Arc<str>>,
    pub(super) in_flight: u32,
    tasks: JoinSet<Finished>,
    pub(super) health_timers: BinaryHeap<Reverse<(Timestamp, Arc<str>)>>,
    /// The deadline each endpoint has a timer for, so that the failures of a degraded endpoint,
    /// which all leave it with the same deadline, do not push one heap entry each.
    pub(super) armed_deadlines: HashMap<Arc<str>, Timestamp>,
    pub(super) changes: mpsc::UnboundedSender<StateChange>,
    /// What the events held by waiting deliveries cost ([`HeldEvent`]).
    pub(super) held_bytes: Arc<AtomicU64>,
    /// Deliveries restarted while an attempt of an older round was still waiting or running:
    /// the newest round of each. An item of an older round is dropped wherever it surfaces
    /// (heap, admission, a finished attempt), which cancels it without searching the heap.
    pub(super) superseded: HashMap<DeliveryId, u32>,
    /// Health inputs sent to the store and not answered yet, per endpoint.
    pub(super) health_in_store: HashMap<Arc<str>, u32>,
    /// Re-enable calls waiting for the store to apply their input, per endpoint, in order.
    pub(super) reenable_waiters: HashMap<Arc<str>, VecDeque<oneshot::Sender<EndpointHealth>>>,
    /// The store's answers to health inputs, from the feeder.
    pub(super) health_reports: mpsc::UnboundedReceiver<HealthReport>,
    pub(super) publisher: Option<Publisher>,
    pub(super) key_held_publisher: Option<super::handle::KeyHeldPublisher>,
    /// The gateway's runtime, where attempts run; the actor itself runs on its own thread.
    pub(super) runtime: tokio::runtime::Handle,
    /// In a cluster, the endpoints this node delivers (None: every endpoint, one node).
    pub(super) owned: Option<HashSet<Arc<str>>>,
    /// Deliveries that were in flight when their endpoint was taken in again (see
    /// `ownership.rs`): their next attempt belongs to the lane's new epoch.
    pub(super) carried: HashSet<DeliveryId>,
    /// Endpoints owned whose pending deliveries are being read: what arrives meanwhile, so
    /// that the read does not add it twice.
    pub(super) arrivals: HashMap<Arc<str>, HashSet<DeliveryId>>,
    /// Deliveries of ordered endpoints this node committed and delivers, which it takes in
    /// from their notice (see `takes_directly`); until then the scheduler is not idle.
    pub(super) awaiting: HashMap<DeliveryId, Arc<str>>,
    /// Own deliveries whose notice came before the scheduler heard of their commit.
    pub(super) noticed_early: HashSet<DeliveryId>,
    pub(super) metrics: Metrics,
    lateness: metrics::Histogram,
    /// Attempts started without their event in memory.
    event_reads: metrics::Counter,
    /// In a cluster: which endpoints' leases this node holds now, by its own clock.
    pub(super) fence: Option<Arc<Fence>>,
    /// Attempts not started, or not sent, because their endpoint's lease no longer held.
    fenced: metrics::Counter,
}

impl Actor {
    /// The actor and the stream of state changes it will send to the store.
    pub(super) fn new(
        deps: super::SchedulerDeps,
        commands: mpsc::UnboundedReceiver<Command>,
        shared: Arc<Shared>,
    ) -> (Actor, FeederChannels) {
        let (changes, changes_rx) = mpsc::unbounded_channel();
        let (reports_tx, health_reports) = mpsc::unbounded_channel();
        let env = Arc::new(AttemptEnv {
            clock: deps.clock.clone(),
            sender: deps.sender,
            plugins: deps.plugins,
            traces: deps.traces,
        });
        let lateness = deps.metrics.attempt_lateness();
        let event_reads = deps.metrics.event_reads();
        let fenced = deps.metrics.fenced_attempts();
        let owned = deps.fence.is_some().then(HashSet::new);
        *shared.owned.write().expect("owned lock") = owned.clone();
        let actor = Actor {
            clock: deps.clock,
            store: deps.store,
            config: deps.config,
            endpoints: deps.endpoints,
            env,
            rx: commands,
            shared,
            due: BinaryHeap::new(),
            seq: 0,
            lanes: HashMap::new(),
            busy: HashSet::new(),
            in_flight: 0,
            tasks: JoinSet::new(),
            health_timers: BinaryHeap::new(),
            armed_deadlines: HashMap::new(),
            changes,
            held_bytes: Arc::new(AtomicU64::new(0)),
            superseded: HashMap::new(),
            health_in_store: HashMap::new(),
            reenable_waiters: HashMap::new(),
            health_reports,
            publisher: None,
            key_held_publisher: None,
            runtime: tokio::runtime::Handle::current(),
            owned,
            carried: HashSet::new(),
            arrivals: HashMap::new(),
            awaiting: HashMap::new(),
            noticed_early: HashSet::new(),
            metrics: deps.metrics,
            lateness,
            event_reads,
            fenced,
            fence: deps.fence,
        };
        let feeder = FeederChannels {
            changes: changes_rx,
            reports: reports_tx,
        };
        (actor, feeder)
    }

    /// Takes in a page of the pending deliveries the store holds at start, without their
    /// events (each is read when due).
    pub(super) fn restore(&mut self, pending: Vec<PendingDelivery>) {
        let now = self.clock.now();
        for p in pending {
            self.take_pending(p, now);
        }
    }

    /// Takes in one pending delivery read from the store (its event is read when due).
    pub(super) fn take_pending(&mut self, p: PendingDelivery, now: Timestamp) {
        self.take_item(pending_item(p), now);
    }

    /// Takes in an item for a delivery read from the store.
    pub(super) fn take_item(&mut self, item: Item, now: Timestamp) {
        if !self.shared.receives_events(&item.endpoint) {
            // The pause was committed but not yet the failing of its waiting deliveries
            // when the gateway (or the node that paused it) stopped: finish that now.
            self.fail_unsent(item.id, ErrorKind::EndpointPaused, now);
            return;
        }
        let at = item.due_at;
        self.admit(item, at);
    }

    /// Whether this node delivers the endpoint's deliveries.
    pub(super) fn owns(&self, endpoint: &str) -> bool {
        self.owned.as_ref().is_none_or(|owned| owned.contains(endpoint))
    }

    /// Whether a delivery this node committed goes straight into its queue. In a cluster, not
    /// when another node delivers the endpoint (the commit's notice tells that node), nor for
    /// an ordered endpoint: its deliveries come from the notices of every node, which arrive
    /// in commit order, so that one key's events are sent in the order they were accepted
    /// whichever node accepted them.
    pub(super) fn takes_directly(&self, endpoint: &str) -> bool {
        match &self.owned {
            None => true,
            Some(owned) => {
                owned.contains(endpoint) && !self.endpoints.routing(endpoint).is_some_and(|r| r.ordered)
            }
        }
    }

    pub(super) async fn run(&mut self, shutdown: CancellationToken, grace: Duration) {
        loop {
            let now = self.clock.now();
            self.fire_health_timers(now);
            self.move_due_to_lanes(now);
            let throttle_wake = self.dispatch(now);
            let next_due = self.due.peek().map(|Reverse(d)| d.at);
            let next_timer = self.health_timers.peek().map(|Reverse((at, _))| *at);
            let wake = [next_due, next_timer, throttle_wake].into_iter().flatten().min();
            // Idle: nothing running, and whatever waits in a lane waits for room or the throttle,
            // which only the clock or a finished attempt can give, or for the store's answer
            // about its endpoint's health (counted apart, in `health_pending`).
            let idle = self.tasks.is_empty()
                && self.busy.iter().all(|name| {
                    self.lanes.get(name).is_none_or(|l| l.waiting.is_empty())
                        || throttle_wake.is_some()
                        || !self.shared.receives_events(name)
                });
            self.shared
                .next_wake_ms
                .store(wake.map_or(i64::MAX, Timestamp::as_millis), Ordering::SeqCst);
            self.shared.idle.store(idle, Ordering::SeqCst);
            let sleep = match wake {
                Some(at) => self.clock.sleep_until(at),
                None => Box::pin(std::future::pending()),
            };
            tokio::select! {
                biased;
                _ = shutdown.cancelled() => break,
                Some(done) = self.tasks.join_next(), if !self.tasks.is_empty() => match done {
                    Ok(finished) => self.finish(finished),
                    Err(e) => tracing::error!(error = %e, "an attempt task failed"),
                },
                Some(report) = self.health_reports.recv() => self.take_health_report(report),
                cmd = self.rx.recv() => match cmd {
                    Some(cmd) => {
                        self.shared.idle.store(false, Ordering::SeqCst);
                        self.shared.commands_pending.fetch_sub(1, Ordering::SeqCst);
                        self.command(cmd);
                    }
                    None => break,
                },
                _ = sleep => {}
            }
        }
        // Shutdown: no new attempts; the ones in flight get `grace` to finish and be recorded.
        let deadline = tokio::time::sleep(grace);
        tokio::pin!(deadline);
        while !self.tasks.is_empty() {
            tokio::select! {
                Some(done) = self.tasks.join_next() => {
                    if let Ok(finished) = done {
                        self.finish(finished);
                    }
                }
                _ = &mut deadline => {
                    tracing::warn!(in_flight = self.tasks.len(), "grace period over; unfinished attempts are retried after restart");
                    self.tasks.abort_all();
                    break;
                }
            }
        }
    }

    fn command(&mut self, cmd: Command) {
        match cmd {
            Command::Enqueue(ready) => {
                let now = self.clock.now();
                let mut holder = RunHolder::new(&self.held_bytes);
                for r in ready {
                    if !self.takes_directly(&r.endpoint) {
                        self.await_notice(r.id, &r.endpoint);
                        continue;
                    }
                    if !self.shared.receives_events(&r.endpoint) {
                        // Fanned out before the endpoint was paused: it never gets this one.
                        self.fail_unsent(r.id, ErrorKind::EndpointPaused, now);
                        continue;
                    }
                    let item = Item {
                        id: r.id,
                        ordering_key: r.event.ordering_key.as_deref().map(Arc::from),
                        endpoint: r.endpoint,
                        event: holder.hold(&r.event),
                        round: r.round,
                        round_started_at: r.round_started_at,
                        attempts_made: r.attempts_made,
                        previous_delay: None,
                        epoch: 0,
                        due_at: r.next_attempt_at,
                    };
                    self.admit(item, r.next_attempt_at);
                }
            }
            Command::Replace(ready) if self.takes_directly(&ready.endpoint) => {
                let item = Item {
                    id: ready.id,
                    ordering_key: ready.event.ordering_key.as_deref().map(Arc::from),
                    endpoint: ready.endpoint,
                    event: HeldEvent::hold(ready.event, &self.held_bytes),
                    round: ready.round,
                    round_started_at: ready.round_started_at,
                    attempts_made: ready.attempts_made,
                    previous_delay: None,
                    epoch: 0,
                    due_at: ready.next_attempt_at,
                };
                self.replace_waiting(item);
            }
            Command::Replace(ready) => self.await_notice(ready.id, &ready.endpoint),
            Command::Reenable { endpoint, reply } => {
                let now = self.clock.now();
                self.reenable_waiters
                    .entry(endpoint.clone())
                    .or_default()
                    .push_back(reply);
                self.step_health_at(&endpoint, HealthInput::Reenable, now);
            }
            Command::Reconfigured => self.reconfigure(),
            Command::EndpointChanged(endpoint) => self.endpoint_changed(&endpoint),
            Command::Own(endpoint) => self.own(endpoint),
            Command::Owned {
                endpoint,
                pending,
                held,
            } => {
                self.restore_holds(held);
                self.take_owned(&endpoint, pending);
            }
            Command::Disown(endpoint) => self.disown(&endpoint),
            Command::Load { pending, noticed } => self.load_notified(pending, noticed),
            Command::HealthChanged { endpoint, health } => self.health_changed(endpoint, health),
            Command::Key {
                endpoint,
                key,
                action,
                expected,
                reply,
            } => {
                let _ = reply.send(self.key_action(&endpoint, &key, action, expected));
            }
        }
    }

    /// The endpoint's lane, made when it has none; counted busy, since what takes it may add
    /// deliveries to it (dispatch forgets it again once nothing waits there).
    pub(super) fn lane(&mut self, endpoint: &Arc<str>) -> &mut Lane {
        if !self.busy.contains(endpoint) {
            self.busy.insert(endpoint.clone());
        }
        match self.lanes.entry(endpoint.clone()) {
            std::collections::hash_map::Entry::Occupied(lane) => lane.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                let config = self.config.load();
                let routing = self.endpoints.routing(endpoint);
                slot.insert(Lane::new(
                    endpoint,
                    routing.as_deref(),
                    &config,
                    self.clock.clone(),
                    &self.metrics,
                ))
            }
        }
    }

    /// Takes an item into the scheduler: when already due (a new event, or any delivery
    /// pending at a start), straight into its lane; else into the heap at `at`; and for an
    /// ordered endpoint whose ordering key is busy, behind the key's current head. A due item
    /// skips the heap so that a start's million pending deliveries are queued once, not held
    /// by the heap and the lane at the same time, and a new event saves a heap push and pop.
    pub(super) fn admit(&mut self, mut item: Item, at: Timestamp) {
        if self.take_superseded(&item) {
            return;
        }
        if let Some(arrived) = self.arrivals.get_mut(&item.endpoint) {
            arrived.insert(item.id);
        }
        self.notice_came(item.id);
        self.shared.queued.fetch_add(1, Ordering::Relaxed);
        let now = self.clock.now();
        let lane = self.lane(&item.endpoint);
        item.epoch = lane.epoch;
        let was_held = item
            .ordering_key
            .as_deref()
            .and_then(|key| lane.front_of(key))
            .is_some_and(|(front, held)| held && front == item.id);
        let Some(mut admitted) = lane.hold_if_key_busy(item) else {
            return;
        };
        if !was_held && at <= now {
            admitted.due_at = at;
            lane.waiting.push_back(admitted);
            return;
        }
        if was_held {
            self.unheld(&admitted);
        }
        self.push_due(admitted, at);
    }

    pub(super) fn push_due(&mut self, mut item: Item, at: Timestamp) {
        item.due_at = at;
        self.seq += 1;
        self.due.push(Reverse(Due {
            at,
            seq: self.seq,
            item,
        }));
    }

    /// Starts the new round of a delivery whose older round still has an item here. An item
    /// held behind its ordering key is replaced where it stands, so the key's order holds;
    /// anywhere else (heap, lane, in flight) the old item is marked superseded and dropped
    /// when it surfaces, and the new round goes to the heap for now. Being the old item's
    /// successor, it inherits its claim on the ordering key.
    pub(super) fn replace_waiting(&mut self, item: Item) {
        self.notice_came(item.id);
        let now = self.clock.now();
        if !self.shared.receives_events(&item.endpoint) {
            self.fail_unsent(item.id, ErrorKind::EndpointPaused, now);
            return;
        }
        let due_at = item.due_at;
        let lane = self.lane(&item.endpoint);
        let key = item.ordering_key.as_deref();
        if key.and_then(|k| lane.front_of(k)) == Some((item.id, true)) {
            // A new round of the dead head a key is held behind (an operator's retry): the
            // hold ends and the head goes first (see `admit`).
            self.admit(item, due_at);
            return;
        }
        let item = match lane.replace_held(item) {
            Ok(()) => return,
            Err(item) => item,
        };
        let before = lane.waiting.len();
        lane.waiting.retain(|w| w.id != item.id);
        let was_in_lane = lane.waiting.len() < before;
        let epoch = lane.epoch;
        if was_in_lane {
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
        } else {
            self.superseded.insert(item.id, item.round);
        }
        self.shared.queued.fetch_add(1, Ordering::Relaxed);
        self.push_due(Item { epoch, ..item }, due_at);
    }

    /// True (and forgotten) when `item` belongs to a round that a newer one has replaced.
    fn take_superseded(&mut self, item: &Item) -> bool {
        match self.superseded.get(&item.id) {
            Some(newest) if item.round < *newest => {
                self.superseded.remove(&item.id);
                true
            }
            _ => false,
        }
    }

    fn move_due_to_lanes(&mut self, now: Timestamp) {
        while self.due.peek().is_some_and(|Reverse(d)| d.at <= now) {
            let Reverse(due) = self.due.pop().expect("peeked");
            if self.take_superseded(&due.item) {
                self.shared.queued.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            let lane = self.lane(&due.item.endpoint);
            if due.item.epoch != lane.epoch {
                self.shared.queued.fetch_sub(1, Ordering::Relaxed);
                continue;
            }
            lane.waiting.push_back(due.item);
        }
        let (capacity, len) = (self.due.capacity(), self.due.len());
        lane::shrink_if_drained(capacity, len, |to| self.due.shrink_to(to));
    }

    /// Starts every attempt that lanes, throttles and the global limit allow. Returns when a
    /// throttled lane may send again, if one is waiting for that.
    fn dispatch(&mut self, now: Timestamp) -> Option<Timestamp> {
        let config = self.config.load_full();
        let global_limit = config.delivery.max_in_flight;
        let mut throttle_wake: Option<Timestamp> = None;
        // An endpoint that stops receiving — as far as this node knows; the store's answer to
        // the input that stopped it then stops its lane for good — holds its due deliveries.
        // In a cluster, an endpoint whose lease no longer holds by this node's clock starts
        // nothing (after a freeze, before the cluster task has asked the database again); the
        // cluster task then drops what waits for it, or extends the lease.
        let lanes = &self.lanes;
        self.busy
            .retain(|n| lanes.get(n).is_some_and(|l| !l.waiting.is_empty()));
        let names: Vec<Arc<str>> = self
            .busy
            .iter()
            .filter(|n| self.shared.receives_events(n))
            .filter(|n| self.fence.as_ref().is_none_or(|f| f.holds(n)))
            .cloned()
            .collect();
        for name in names {
            loop {
                if self.in_flight >= global_limit {
                    return throttle_wake;
                }
                let lane = self.lanes.get_mut(&name).expect("lane exists");
                match lane.next_ready(now) {
                    lane::Next::Go(item) => {
                        self.lateness.record(now.since(item.due_at).as_secs_f64());
                        self.in_flight += 1;
                        self.start(item, &config);
                    }
                    lane::Next::NotUntil(at) => {
                        throttle_wake = Some(throttle_wake.map_or(at, |t| t.min(at)));
                        break;
                    }
                    lane::Next::Nothing => break,
                }
            }
        }
        throttle_wake
    }

    fn start(&mut self, item: Item, config: &Arc<Config>) {
        if item.event.is_none() {
            self.event_reads.increment(1);
        }
        self.shared
            .in_flight
            .lock()
            .expect("in-flight lock")
            .insert(item.id, item.endpoint.clone());
        let env = self.env.clone();
        let store = self.store.clone();
        let config = config.clone();
        let endpoints = self.endpoints.clone();
        let fence = self.fence.clone();
        self.tasks.spawn_on(
            run_attempt(env, store, config, endpoints, fence, item),
            &self.runtime,
        );
    }

    /// Applies a finished attempt (see [`Actor::settle_attempt`]). The attempt counts as in
    /// flight until its state changes are sent: a node handing its endpoint over waits for
    /// both, and then for their commit.
    fn finish(&mut self, done: Finished) {
        let id = match &done {
            Finished::Ran { item, .. }
            | Finished::Gone { item }
            | Finished::Unread { item }
            | Finished::EndpointRemoved { item }
            | Finished::Fenced { item } => item.id,
        };
        self.settle_attempt(done);
        self.shared.in_flight.lock().expect("in-flight lock").remove(&id);
    }

    /// Bookkeeping, the lifecycle decision (health, status, next attempt), its state changes
    /// and metrics, then requeues or releases the item.
    fn settle_attempt(&mut self, done: Finished) {
        let item = match &done {
            Finished::Ran { item, .. }
            | Finished::Gone { item }
            | Finished::Unread { item }
            | Finished::EndpointRemoved { item }
            | Finished::Fenced { item } => item,
        };
        self.in_flight -= 1;
        if let Some(lane) = self.lanes.get_mut(&item.endpoint) {
            lane.in_flight -= 1;
        }
        // A redeliver replaced this round while its attempt ran: the outcome is still
        // recorded (it happened, and counts for health), but the new round carries on.
        let superseded = self.take_superseded(item);
        let carried = self.carried.remove(&item.id);
        let now = self.clock.now();
        let (item, mut report, event) = match done {
            Finished::Ran { item, report, event } => (item, report, event),
            Finished::Gone { item }
            | Finished::Unread { item }
            | Finished::EndpointRemoved { item }
            | Finished::Fenced { item }
                if superseded =>
            {
                self.shared.queued.fetch_sub(1, Ordering::Relaxed);
                drop(item);
                return;
            }
            Finished::Gone { item } => {
                self.shared.queued.fetch_sub(1, Ordering::Relaxed);
                self.release_key(&item);
                return;
            }
            Finished::Unread { item } => {
                // Still pending on disk: read again in a moment. Its ordering key stays busy
                // meanwhile, so the key's later events do not overtake it.
                let mut item = item;
                if carried {
                    item.epoch = self.lane(&item.endpoint).epoch;
                }
                self.push_due(item, now.plus(UNREAD_RETRY));
                return;
            }
            Finished::Fenced { item } => {
                tracing::info!(delivery = %item.id, endpoint = %item.endpoint, "not sent: this node no longer holds the endpoint's lease");
                self.fenced.increment(1);
                self.shared.queued.fetch_sub(1, Ordering::Relaxed);
                self.release_key(&item);
                return;
            }
            Finished::EndpointRemoved { item } => {
                self.shared.queued.fetch_sub(1, Ordering::Relaxed);
                self.fail_unsent(item.id, ErrorKind::EndpointRemoved, now);
                self.release_key(&item);
                return;
            }
        };
        let decision = self.decide(&item, &report, &event, now);
        self.record(&item, &mut report, &decision, now);
        let mut item = item;
        if carried {
            item.epoch = self.lane(&item.endpoint).epoch;
        }
        match decision.next_attempt_at {
            Some(at) if !superseded => self.requeue(item, event, at, now),
            _ => {
                self.shared.queued.fetch_sub(1, Ordering::Relaxed);
                if !superseded {
                    self.front_ended(&item, decision.status, now);
                }
            }
        }
    }

    /// The pure lifecycle decision for a finished attempt, from the config and health of now.
    fn decide(
        &self,
        item: &Item,
        report: &AttemptReport,
        event: &Event,
        now: Timestamp,
    ) -> lifecycle::Decision {
        let config = self.config.load_full();
        let endpoint = self.endpoints.routing(&item.endpoint);
        let policy = match &endpoint {
            Some(ep) => config.policy_named(ep.policy(), &event.topic),
            None => Arc::new(crate::policy::Policy::standard()),
        };
        let health = self.shared.health_of(&item.endpoint);
        lifecycle::decide(
            &lifecycle::AttemptFacts {
                result: &report.result,
                backoff: report.backoff.clone(),
                attempts_made: item.attempts_made + 1,
                round_started_at: item.round_started_at,
                now,
                jitter_sample: rand::rng().random_range(-1.0..=1.0),
            },
            &lifecycle::EndpointFacts {
                policy: &policy,
                dead_letter: endpoint.map(|ep| ep.dead_letter),
                health: &health,
                rules: &config.health.rules,
            },
        )
    }

    /// Records a decided attempt: metrics, the log line, the attempt and health writes (in
    /// that order), and the health step's effects.
    fn record(
        &mut self,
        item: &Item,
        report: &mut AttemptReport,
        decision: &lifecycle::Decision,
        now: Timestamp,
    ) {
        let n = item.attempts_made + 1;
        if let Some(lane) = self.lanes.get_mut(&item.endpoint) {
            if let AttemptResult::Sent(outcome) = &report.result {
                let kind = outcome.error_kind().map_or("delivered", ErrorKind::as_str);
                lane.metrics.attempt(kind, report.duration);
            }
            if decision.status.is_final() {
                lane.metrics.delivery(decision.status.as_str());
            }
        }
        let attempt = report.take_record(n);
        match &report.result {
            AttemptResult::Sent(Outcome::Failed { kind, status, .. }) => tracing::info!(
                delivery = %item.id, endpoint = %item.endpoint, attempt = n, error_kind = %kind,
                status_code = ?status, next = ?decision.next_attempt_at, trace_id = %report.trace_id,
                "attempt failed"
            ),
            AttemptResult::Sent(Outcome::Delivered { status }) => tracing::debug!(
                delivery = %item.id, endpoint = %item.endpoint, attempt = n, status_code = ?status,
                trace_id = %report.trace_id, "attempt delivered"
            ),
            AttemptResult::Dropped { reason } => tracing::debug!(
                delivery = %item.id, endpoint = %item.endpoint, attempt = n, reason = %reason,
                trace_id = %report.trace_id, "event dropped by the transform"
            ),
        }
        self.change(StateChange::Attempt(AttemptWrite {
            delivery: item.id,
            round: item.round,
            attempt,
            plugin_note: report.plugin_note.clone(),
            status: decision.status,
            next_attempt_at: decision.next_attempt_at,
            last_error: decision.last_error.clone(),
        }));
        if let Some((input, predicted)) = &decision.health {
            self.send_health(&item.endpoint, *input, now, &predicted.health);
        }
    }

    /// Puts an item back in the heap for its next attempt.
    fn requeue(&mut self, mut item: Item, event: Arc<Event>, at: Timestamp, now: Timestamp) {
        item.attempts_made += 1;
        if item.event.is_none() {
            item.event = HeldEvent::hold(event, &self.held_bytes);
        }
        item.previous_delay = Some(at.since(now));
        // Keeps its ordering key busy: the next event of the key waits for this one.
        self.push_due(item, at);
    }

    /// Sends a state change to the store (through the feeder), counted so that a node handing
    /// an endpoint over can wait until what it decided is committed.
    pub(super) fn change(&self, change: StateChange) {
        self.shared.changes_sent.fetch_add(1, Ordering::SeqCst);
        if self.changes.send(change).is_err() {
            self.shared.changes_done.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// Ends a pending delivery that will not be attempted (its endpoint is paused or gone).
    pub(super) fn fail_unsent(&self, delivery: DeliveryId, kind: ErrorKind, now: Timestamp) {
        self.change(StateChange::Finish {
            delivery,
            status: DeliveryStatus::Failed,
            error: kind.as_str().into(),
            now,
        });
    }

    /// An item is done for good: let the next event of its ordering key go.
    pub(super) fn release_key(&mut self, item: &Item) {
        let Some(key) = &item.ordering_key else { return };
        let Some(lane) = self.lanes.get_mut(&item.endpoint) else {
            return;
        };
        if let Some(next) = lane.release_key(key, item.epoch, item.id) {
            lane.waiting.push_back(next);
            self.busy.insert(item.endpoint.clone());
        }
    }
}

/// An item for a pending delivery read from the store, without its event.
pub(super) fn pending_item(p: PendingDelivery) -> Item {
    Item {
        id: p.id,
        endpoint: p.endpoint,
        event: None,
        round: p.round,
        round_started_at: p.round_started_at,
        attempts_made: p.attempts_made,
        ordering_key: p.ordering_key.map(Arc::from),
        previous_delay: None,
        epoch: 0,
        due_at: p.next_attempt_at,
    }
}

/// One attempt task: loads the event if the item does not hold it, checks the endpoint is
/// still configured, and performs the attempt.
async fn run_attempt(
    env: Arc<AttemptEnv>,
    store: Arc<dyn Store>,
    config: Arc<Config>,
    endpoints: Endpoints,
    fence: Option<Arc<Fence>>,
    item: Item,
) -> Finished {
    let event = match &item.event {
        Some(held) => held.event.clone(),
        None => match store.delivery_for_attempt(item.id).await {
            Ok(Some(d)) if d.status == DeliveryStatus::Pending && d.round == item.round => d.event,
            Ok(_) => return Finished::Gone { item },
            Err(e) => {
                tracing::warn!(delivery = %item.id, error = %e, "could not load a delivery for its attempt; trying again shortly");
                return Finished::Unread { item };
            }
        },
    };
    let endpoint = match endpoints.get(&item.endpoint).await {
        Ok(Some(endpoint)) => endpoint,
        Ok(None) => return Finished::EndpointRemoved { item },
        Err(e) => {
            tracing::warn!(endpoint = %item.endpoint, error = %e, "could not read an endpoint for its attempt; trying again shortly");
            return Finished::Unread { item };
        }
    };
    let policy = config.policy_for(&endpoint, &event.topic);
    // In a cluster, the lease is checked again right before the request is written: the
    // node may have been frozen since the attempt started (see `crate::fence`).
    let gate = || fence.as_ref().map_or(Ok(()), |f| f.check(&item.endpoint));
    let report = attempt::perform_gated(
        &env,
        AttemptInput {
            endpoint: &endpoint,
            policy: &policy,
            event: &event,
            delivery_id: item.id.to_string(),
            attempt: item.attempts_made + 1,
            round_started_at: item.round_started_at,
            max_attempts: policy.max_attempts(),
            timeout: endpoint.timeout.unwrap_or(config.delivery.timeout),
            previous_delay: item.previous_delay,
        },
        gate,
    )
    .await;
    let Ok(report) = report else {
        return Finished::Fenced { item };
    };
    Finished::Ran {
        item,
        report: Box::new(report),
        event,
    }
}
