//! The in-memory scheduler: when each delivery is attempted, and what follows from its outcome.
//!
//! One actor task owns the due queue (a binary heap ordered by due time), one lane per
//! endpoint (in-flight limit, throttle, ordering keys), the endpoints' health, and the health
//! timers. New deliveries arrive straight from ingestion after their commit — the database is
//! never polled — and the queue is rebuilt from the store with one scan at start.
//!
//! For every finished attempt the actor plans the next step (pure `policy`), steps the health
//! machine (pure `health`), and streams the resulting [`StateChange`]s, in decision order, to
//! a feeder task that commits them in groups. Memory may run ahead of the disk, never the
//! other way round: a delivery the disk still calls pending is attempted again after a restart
//! (at-least-once; receivers deduplicate by `webhook-id`).

pub(crate) mod attempt;
mod lane;
mod meters;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use rand::Rng;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use self::attempt::{AttemptEnv, AttemptInput, AttemptReport, AttemptResult};
use self::lane::Lane;
use crate::clock::Clock;
use crate::config::Config;
use crate::health::{self, Effect, EndpointHealth, HealthInput};
use crate::model::{Attempt, DeliveryId, DeliveryStatus, ErrorKind, Event, Outcome, Timestamp};
use crate::policy::{self, GiveUpReason, NextStep, RetryContext};
use crate::store::{AttemptWrite, HealthWrite, ReadyDelivery, Restarted, StateChange, Store, StoreError};

/// Bytes of events held in memory by waiting deliveries up to which a new or retried delivery
/// keeps its event. Past it, an item keeps only its id and reads its event back when due, as
/// after a restart: a backlog of a million then costs about 100 bytes per delivery instead of
/// the whole event (RSS with 1 000 000 pending fell from 528 MiB to 167 MiB in
/// `hookgate-bench`), while a gateway that keeps up never reads an event back. Events, not
/// deliveries, are counted: the deliveries of a fan-out share one event, and counting each of
/// them made a burst of fan-out deliveries re-read the same event once per endpoint.
const KEEP_EVENT_BYTES_UP_TO: u64 = 32 * 1024 * 1024;

/// An event held in memory by waiting deliveries, counted against [`KEEP_EVENT_BYTES_UP_TO`]
/// once however many deliveries share it, until the last of them lets go.
#[derive(Debug)]
pub(crate) struct HeldEvent {
    event: Arc<Event>,
    bytes: u64,
    held_bytes: Arc<AtomicU64>,
}

impl HeldEvent {
    /// Holds `event` if the budget has room; `None` when the delivery should keep only its id.
    fn hold(event: Arc<Event>, held_bytes: &Arc<AtomicU64>) -> Option<Arc<HeldEvent>> {
        if held_bytes.load(Ordering::Relaxed) >= KEEP_EVENT_BYTES_UP_TO {
            return None;
        }
        let bytes = footprint(&event);
        held_bytes.fetch_add(bytes, Ordering::Relaxed);
        Some(Arc::new(HeldEvent {
            event,
            bytes,
            held_bytes: held_bytes.clone(),
        }))
    }
}

impl Drop for HeldEvent {
    fn drop(&mut self) {
        self.held_bytes.fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// About what an event costs in memory: the struct, its strings and its payload.
fn footprint(event: &Event) -> u64 {
    let strings = event.id.len()
        + event.topic.len()
        + event.event_type.len()
        + event.content_type.len()
        + event.ordering_key.as_ref().map_or(0, String::len);
    (std::mem::size_of::<Event>() + strings + event.payload.len()) as u64
}

/// A delivery waiting in memory. Deliveries ingested by this process keep their event (while
/// the held events stay below [`KEEP_EVENT_BYTES_UP_TO`]), so their first attempt needs no
/// read; rebuilt ones load it when due.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    id: DeliveryId,
    endpoint: Arc<str>,
    event: Option<Arc<HeldEvent>>,
    round: u32,
    /// When the current round began; the policy's deadline counts from here.
    round_started_at: Timestamp,
    attempts_made: u32,
    ordering_key: Option<Arc<str>>,
    /// The wait before the upcoming attempt (None for a first attempt or after a restart).
    previous_delay: Option<Duration>,
    /// The lane epoch this item belongs to; a pause or removal bumps the epoch, which
    /// invalidates every item queued before it without searching the heap.
    epoch: u64,
    /// When the upcoming attempt is planned; its start minus this is the scheduler's lateness
    /// (`hookgate_attempt_lateness_seconds`), which includes waits for lane room and throttle.
    due_at: Timestamp,
}

struct Due {
    at: Timestamp,
    seq: u64,
    item: Item,
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

/// What an operator asked for, answered by the actor.
enum Command {
    Enqueue(Vec<ReadyDelivery>),
    /// A new round of a delivery that was still waiting for a retry: the waiting attempt is
    /// cancelled and the new round is attempted now (redeliver).
    Replace(ReadyDelivery),
    Reenable {
        endpoint: Arc<str>,
        reply: oneshot::Sender<EndpointHealth>,
    },
    Reconfigured,
}

/// Callback the scheduler uses to publish operator events (`hookgate.endpoint.*`). Set by the
/// supervisor, which knows how to ingest.
pub type Publisher = Arc<dyn Fn(Arc<str>, &'static str, EndpointHealth) + Send + Sync>;

/// State the API reads without asking the actor.
#[derive(Default)]
struct Shared {
    health: RwLock<HashMap<Arc<str>, EndpointHealth>>,
    in_flight: Mutex<HashSet<DeliveryId>>,
    queued: AtomicU64,
    /// Commands sent and not yet taken by the actor.
    commands_pending: AtomicU64,
    /// Set by the actor when it goes to sleep with nothing runnable: no attempt running and
    /// nothing due that it could start.
    idle: std::sync::atomic::AtomicBool,
    /// When the actor will next wake by itself (ms since the epoch; `i64::MAX` for never).
    next_wake_ms: std::sync::atomic::AtomicI64,
}

/// The handle the rest of the gateway holds. Cheap to clone.
#[derive(Clone)]
pub struct SchedulerHandle {
    tx: mpsc::UnboundedSender<Command>,
    shared: Arc<Shared>,
}

impl SchedulerHandle {
    /// Hands committed deliveries to the scheduler. Never blocks.
    pub fn enqueue(&self, ready: Vec<ReadyDelivery>) {
        if !ready.is_empty() {
            self.send(Command::Enqueue(ready));
        }
    }

    fn send(&self, command: Command) -> bool {
        self.shared.commands_pending.fetch_add(1, Ordering::SeqCst);
        let sent = self.tx.send(command).is_ok();
        if !sent {
            self.shared.commands_pending.fetch_sub(1, Ordering::SeqCst);
        }
        sent
    }

    /// True when the scheduler has nothing to do until its clock moves: every command is taken,
    /// no attempt is running, nothing due is waiting. Tests wait for this before they advance
    /// a manual clock, so that an outcome is planned at the time it happened.
    pub fn is_idle(&self, now: Timestamp) -> bool {
        self.shared.commands_pending.load(Ordering::SeqCst) == 0
            && self.shared.idle.load(Ordering::SeqCst)
            && self.shared.next_wake_ms.load(Ordering::SeqCst) > now.as_millis()
    }

    /// The endpoint's health as the scheduler knows it (active for an endpoint never seen).
    pub fn health_of(&self, endpoint: &str) -> EndpointHealth {
        self.shared
            .health
            .read()
            .expect("health lock")
            .get(endpoint)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether new events should fan out to the endpoint (not paused or disabled).
    pub fn receives_events(&self, endpoint: &str) -> bool {
        self.shared
            .health
            .read()
            .expect("health lock")
            .get(endpoint)
            .is_none_or(|h| h.state.receives_events())
    }

    pub fn is_in_flight(&self, id: DeliveryId) -> bool {
        self.shared
            .in_flight
            .lock()
            .expect("in-flight lock")
            .contains(&id)
    }

    /// Deliveries waiting in memory (due or not) plus those in flight.
    pub fn queue_depth(&self) -> u64 {
        self.shared.queued.load(Ordering::Relaxed)
    }

    /// Hands a restarted delivery (a new round) to the scheduler. When it was still waiting for
    /// a retry, the waiting attempt is cancelled rather than added to.
    pub fn restarted(&self, restarted: Restarted) {
        if restarted.was_pending {
            self.send(Command::Replace(restarted.ready));
        } else {
            self.enqueue(vec![restarted.ready]);
        }
    }

    /// Re-enables an endpoint (→ active, counters reset). Answers the new health.
    pub async fn reenable(&self, endpoint: Arc<str>) -> Option<EndpointHealth> {
        let (reply, rx) = oneshot::channel();
        if !self.send(Command::Reenable { endpoint, reply }) {
            return None;
        }
        rx.await.ok()
    }

    /// Tells the scheduler the config changed (endpoints added, changed or removed).
    pub fn reconfigured(&self) {
        self.send(Command::Reconfigured);
    }
}

pub struct SchedulerDeps {
    pub clock: Arc<dyn Clock>,
    pub store: Arc<dyn Store>,
    pub config: Arc<ArcSwap<Config>>,
    pub sender: crate::delivery::Sender,
    pub plugins: crate::plugins::PluginHost,
}

/// Builds the scheduler: loads health and pending deliveries from the store. Returns the
/// handle and the actor, which [`Scheduler::run`] drives until shutdown.
pub struct Scheduler {
    actor: Actor,
}

impl Scheduler {
    pub async fn load(deps: SchedulerDeps) -> Result<(Scheduler, SchedulerHandle), crate::store::StoreError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::default());
        let handle = SchedulerHandle {
            tx,
            shared: shared.clone(),
        };

        let mut health_map = HashMap::new();
        for (name, h) in deps.store.endpoint_health().await? {
            health_map.insert(Arc::<str>::from(name), h);
        }
        *shared.health.write().expect("health lock") = health_map;

        let (changes_tx, changes_rx) = mpsc::unbounded_channel();
        let env = Arc::new(AttemptEnv {
            clock: deps.clock.clone(),
            sender: deps.sender,
            plugins: deps.plugins,
        });
        let mut actor = Actor {
            clock: deps.clock,
            store: deps.store,
            config: deps.config,
            env,
            rx,
            shared,
            due: BinaryHeap::new(),
            seq: 0,
            lanes: HashMap::new(),
            in_flight: 0,
            tasks: JoinSet::new(),
            health_timers: BinaryHeap::new(),
            armed_deadlines: HashMap::new(),
            changes: changes_tx,
            changes_rx: Some(changes_rx),
            held_bytes: Arc::new(AtomicU64::new(0)),
            superseded: HashMap::new(),
            publisher: None,
            runtime: tokio::runtime::Handle::current(),
        };
        let loaded_health = actor.shared.health.read().expect("health lock").clone();
        for (name, h) in loaded_health {
            actor.arm_health_timer(&name, &h);
        }
        let pending = actor.store.pending_deliveries().await?;
        let restored = pending.len();
        let now = actor.clock.now();
        for p in pending {
            if !actor.receives_events(&p.endpoint) {
                // The pause was committed but not yet the failing of its waiting deliveries
                // when the gateway stopped: finish that now instead of sending them.
                actor.fail_unsent(p.id, ErrorKind::EndpointPaused, now);
                continue;
            }
            let item = Item {
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
            };
            actor.admit(item, p.next_attempt_at);
        }
        tracing::info!(restored, "scheduler queue rebuilt from the store");
        Ok((Scheduler { actor }, handle))
    }

    /// Where operator events go; without one, state changes are only recorded.
    pub fn set_publisher(&mut self, publisher: Publisher) {
        self.actor.publisher = Some(publisher);
    }

    /// Runs until `shutdown`, then lets in-flight attempts finish for up to `grace` and
    /// flushes every state change to the store.
    ///
    /// The actor gets a thread (and a timer) of its own: when a delivery is due, the actor
    /// must not wait for a worker that is busy with HTTP connections. Attempts and the store
    /// feeder run on the gateway's runtime.
    pub async fn run(mut self, shutdown: CancellationToken, grace: Duration) {
        let changes_rx = self.actor.changes_rx.take().expect("run once");
        let feeder = tokio::spawn(feed_store(self.actor.store.clone(), changes_rx));
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let mut actor = self.actor;
        let thread = std::thread::Builder::new()
            .name("hookgate-scheduler".into())
            .spawn(move || {
                match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt.block_on(actor.run(shutdown, grace)),
                    Err(e) => tracing::error!(error = %e, "cannot start the scheduler's runtime"),
                }
                // Dropping the actor closes the state-change stream, which ends the feeder.
                drop(actor);
                let _ = done_tx.send(());
            });
        if let Err(e) = thread {
            tracing::error!(error = %e, "cannot start the scheduler thread");
        }
        let _ = done_rx.await;
        let _ = feeder.await;
    }
}

/// Commits state changes in decision order, as many per commit as have piled up meanwhile.
///
/// While the store cannot take writes (disk full, size cap reached, I/O error) the changes are
/// kept, in order, and committed as soon as it can again, so the disk catches up with memory
/// without a restart. They wait in memory only, bounded by the attempts made meanwhile: a crash
/// loses them like any uncommitted write, and the deliveries they concern, still pending on
/// disk, are attempted again after the restart. When the scheduler stops they get one last
/// try. Any other failure would fail again: the batch is logged and dropped.
async fn feed_store(store: Arc<dyn Store>, mut rx: mpsc::UnboundedReceiver<StateChange>) {
    const FIRST_RETRY: Duration = Duration::from_millis(50);
    const MAX_RETRY: Duration = Duration::from_secs(2);
    let mut pending: Vec<StateChange> = Vec::with_capacity(1024);
    let mut open = true;
    let mut retry = FIRST_RETRY;
    let mut failing_since: Option<std::time::Instant> = None;
    loop {
        // A batch kept from a failed try goes again as it is (plus what came meanwhile).
        if pending.is_empty() && (!open || rx.recv_many(&mut pending, 4096).await == 0) {
            return;
        }
        let batch: Arc<[StateChange]> = std::mem::take(&mut pending).into();
        let count = batch.len();
        match store.apply(batch.clone()).await {
            Ok(()) => {
                retry = FIRST_RETRY;
                if let Some(since) = failing_since.take() {
                    tracing::info!(
                        count,
                        after_s = since.elapsed().as_secs(),
                        "delivery outcomes are recorded again"
                    );
                }
            }
            Err(StoreError::Unavailable(e)) if open => {
                if failing_since.is_none() {
                    tracing::error!(error = %e, count, "could not record delivery outcomes; keeping them until the store takes writes again");
                    failing_since = Some(std::time::Instant::now());
                }
                metrics::counter!("hookgate_store_write_failures_total").increment(1);
                // The batch goes again first; collect what arrives meanwhile, in order, until
                // it is time to try again.
                pending = batch.to_vec();
                let wait = tokio::time::sleep(retry);
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        _ = &mut wait => break,
                        received = rx.recv_many(&mut pending, 4096) => if received == 0 {
                            open = false;
                            break;
                        },
                    }
                }
                retry = (retry * 2).min(MAX_RETRY);
            }
            Err(e) => {
                // The deliveries stay pending on disk and are attempted again after a restart.
                tracing::error!(error = %e, count, "could not record delivery outcomes; dropping them");
                metrics::counter!("hookgate_store_write_failures_total").increment(1);
            }
        }
    }
}

struct Finished {
    item: Item,
    report: Option<AttemptReport>,
    /// Set when the attempt could not even start (delivery or endpoint gone).
    skipped: Option<Skip>,
    /// The event, kept so that a retry needs no read.
    event: Option<Arc<Event>>,
}

enum Skip {
    /// The delivery is no longer pending on disk (finished meanwhile, or purged).
    Gone,
    /// The endpoint is no longer in the config.
    EndpointRemoved,
}

struct Actor {
    clock: Arc<dyn Clock>,
    store: Arc<dyn Store>,
    config: Arc<ArcSwap<Config>>,
    env: Arc<AttemptEnv>,
    rx: mpsc::UnboundedReceiver<Command>,
    shared: Arc<Shared>,
    due: BinaryHeap<Reverse<Due>>,
    seq: u64,
    lanes: HashMap<Arc<str>, Lane>,
    in_flight: u32,
    tasks: JoinSet<Finished>,
    health_timers: BinaryHeap<Reverse<(Timestamp, Arc<str>)>>,
    /// The deadline each endpoint has a timer for, so that the failures of a degraded endpoint,
    /// which all leave it with the same deadline, do not push one heap entry each.
    armed_deadlines: HashMap<Arc<str>, Timestamp>,
    changes: mpsc::UnboundedSender<StateChange>,
    changes_rx: Option<mpsc::UnboundedReceiver<StateChange>>,
    /// What the events held by waiting deliveries cost ([`HeldEvent`]).
    held_bytes: Arc<AtomicU64>,
    /// Deliveries restarted while an attempt of an older round was still waiting or running:
    /// the newest round of each. An item of an older round is dropped wherever it surfaces
    /// (heap, admission, a finished attempt), which cancels it without searching the heap.
    superseded: HashMap<DeliveryId, u32>,
    publisher: Option<Publisher>,
    /// The gateway's runtime, where attempts run; the actor itself runs on its own thread.
    runtime: tokio::runtime::Handle,
}

impl Actor {
    async fn run(&mut self, shutdown: CancellationToken, grace: Duration) {
        loop {
            let now = self.clock.now();
            self.fire_health_timers(now);
            self.move_due_to_lanes(now);
            let throttle_wake = self.dispatch(now);
            let next_due = self.due.peek().map(|Reverse(d)| d.at);
            let next_timer = self.health_timers.peek().map(|Reverse((at, _))| *at);
            let wake = [next_due, next_timer, throttle_wake].into_iter().flatten().min();
            // Idle: nothing running, and whatever waits in a lane waits for room or the throttle,
            // which only the clock or a finished attempt can give.
            let idle = self.tasks.is_empty()
                && self
                    .lanes
                    .values()
                    .all(|l| l.waiting.is_empty() || throttle_wake.is_some());
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
                let mut last_held: Option<(Arc<Event>, Option<Arc<HeldEvent>>)> = None;
                for r in ready {
                    if !self.receives_events(&r.endpoint) {
                        // Fanned out before the endpoint was paused: it never gets this one.
                        self.fail_unsent(r.id, ErrorKind::EndpointPaused, now);
                        continue;
                    }
                    // The deliveries of a fan-out arrive together and share their event.
                    let held = match &last_held {
                        Some((event, held)) if Arc::ptr_eq(event, &r.event) => held.clone(),
                        _ => HeldEvent::hold(r.event.clone(), &self.held_bytes),
                    };
                    last_held = Some((r.event.clone(), held.clone()));
                    let item = Item {
                        id: r.id,
                        ordering_key: r.event.ordering_key.as_deref().map(Arc::from),
                        endpoint: r.endpoint,
                        event: held,
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
            Command::Replace(ready) => self.replace_waiting(ready),
            Command::Reenable { endpoint, reply } => {
                let h = self.step_health(&endpoint, HealthInput::Reenable);
                let _ = reply.send(h);
            }
            Command::Reconfigured => self.reconfigure(),
        }
    }

    fn lane(&mut self, endpoint: &Arc<str>) -> &mut Lane {
        let config = self.config.load();
        self.lanes
            .entry(endpoint.clone())
            .or_insert_with(|| Lane::new(endpoint, &config, self.clock.clone()))
    }

    /// Takes an item into the scheduler: into the heap at `at`, or, for an ordered endpoint
    /// whose ordering key is busy, behind the key's current head.
    fn admit(&mut self, mut item: Item, at: Timestamp) {
        if self.take_superseded(&item) {
            return;
        }
        self.shared.queued.fetch_add(1, Ordering::Relaxed);
        let lane = self.lane(&item.endpoint);
        item.epoch = lane.epoch;
        if let Some(held) = lane.hold_if_key_busy(item) {
            self.push_due(held, at);
        }
    }

    fn push_due(&mut self, mut item: Item, at: Timestamp) {
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
    fn replace_waiting(&mut self, ready: ReadyDelivery) {
        let now = self.clock.now();
        if !self.receives_events(&ready.endpoint) {
            self.fail_unsent(ready.id, ErrorKind::EndpointPaused, now);
            return;
        }
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
        let lane = self.lane(&item.endpoint);
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
        self.push_due(Item { epoch, ..item }, ready.next_attempt_at);
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
    }

    /// Starts every attempt that lanes, throttles and the global limit allow. Returns when a
    /// throttled lane may send again, if one is waiting for that.
    fn dispatch(&mut self, now: Timestamp) -> Option<Timestamp> {
        let config = self.config.load_full();
        let global_limit = config.delivery.max_in_flight;
        let mut throttle_wake: Option<Timestamp> = None;
        let names: Vec<Arc<str>> = self
            .lanes
            .iter()
            .filter(|(_, l)| !l.waiting.is_empty())
            .map(|(n, _)| n.clone())
            .collect();
        for name in names {
            loop {
                if self.in_flight >= global_limit {
                    return throttle_wake;
                }
                let lane = self.lanes.get_mut(&name).expect("lane exists");
                match lane.next_ready(now) {
                    lane::Next::Go(item) => {
                        metrics::histogram!("hookgate_attempt_lateness_seconds")
                            .record(now.since(item.due_at).as_secs_f64());
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
        self.shared
            .in_flight
            .lock()
            .expect("in-flight lock")
            .insert(item.id);
        let env = self.env.clone();
        let store = self.store.clone();
        let config = config.clone();
        let runtime = self.runtime.clone();
        self.tasks.spawn_on(async move {
            let event = match &item.event {
                Some(held) => held.event.clone(),
                None => match store.delivery_for_attempt(item.id).await {
                    Ok(Some(d)) if d.status == DeliveryStatus::Pending && d.round == item.round => d.event,
                    Ok(_) => return Finished { item, report: None, skipped: Some(Skip::Gone), event: None },
                    Err(e) => {
                        // Could not read it now; the disk still says pending, so it is not lost.
                        tracing::warn!(delivery = %item.id, error = %e, "could not load a delivery for its attempt");
                        return Finished { item, report: None, skipped: Some(Skip::Gone), event: None };
                    }
                },
            };
            let Some(endpoint) = config.endpoints.get(&item.endpoint).cloned() else {
                return Finished { item, report: None, skipped: Some(Skip::EndpointRemoved), event: Some(event) };
            };
            let policy = config.policy_for(&endpoint, &event.topic);
            let report = attempt::perform(
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
            )
            .await;
            Finished { item, report: Some(report), skipped: None, event: Some(event) }
        }, &runtime);
    }

    fn finish(&mut self, done: Finished) {
        let Finished {
            mut item,
            report,
            skipped,
            event,
        } = done;
        self.in_flight -= 1;
        self.shared
            .in_flight
            .lock()
            .expect("in-flight lock")
            .remove(&item.id);
        let now = self.clock.now();
        if let Some(lane) = self.lanes.get_mut(&item.endpoint) {
            lane.in_flight -= 1;
        }
        // A redeliver replaced this round while its attempt ran: the outcome is still
        // recorded (it happened, and counts for health), but the new round carries on.
        let superseded = self.take_superseded(&item);
        let Some(report) = report else {
            self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            if superseded {
                return;
            }
            match skipped {
                Some(Skip::EndpointRemoved) => {
                    self.fail_unsent(item.id, ErrorKind::EndpointRemoved, now);
                }
                Some(Skip::Gone) | None => {}
            }
            self.release_key(&item);
            return;
        };
        let config = self.config.load_full();
        let endpoint_cfg = config.endpoints.get(&item.endpoint).cloned();
        let event = event.expect("an attempt that ran had its event");
        let n = item.attempts_made + 1;

        let (outcome, dropped) = match &report.result {
            AttemptResult::Sent(o) => (o.clone(), None),
            AttemptResult::Dropped { reason } => (Outcome::Delivered { status: 0 }, Some(reason.clone())),
        };

        // Health counts what the receiver did: a plugin failure or a drop says nothing about it.
        let health_input = match (&report.result, outcome.error_kind()) {
            (AttemptResult::Dropped { .. }, _) | (_, Some(ErrorKind::PluginError)) => None,
            (_, None) => Some(HealthInput::AttemptSucceeded),
            (_, Some(_)) => Some(HealthInput::AttemptFailed {
                gone: outcome.is_gone(),
            }),
        };
        let health_write = health_input.map(|input| self.health_change(&item.endpoint, input, now));

        let policy = match &endpoint_cfg {
            Some(ep) => config.policy_for(ep, &event.topic),
            None => Arc::new(policy::Policy::standard()),
        };
        let was_dropped = dropped.is_some();
        let step = if was_dropped {
            NextStep::Done
        } else {
            policy::plan_next(
                &policy,
                &RetryContext {
                    attempts_made: n,
                    round_started_at: item.round_started_at,
                    now,
                    outcome: &outcome,
                    jitter_sample: rand::rng().random_range(-1.0..=1.0),
                    plugin_decision: report.backoff.clone(),
                },
            )
        };
        let dead_letter = endpoint_cfg.as_ref().is_some_and(|e| e.dead_letter);
        let failed_status = if dead_letter {
            DeliveryStatus::Dead
        } else {
            DeliveryStatus::Failed
        };
        let still_receiving = self.receives_events(&item.endpoint);
        let attempt_error = match &outcome {
            Outcome::Failed { kind, detail, .. } => Some(format!("{kind}: {detail}")),
            Outcome::Delivered { .. } => None,
        };
        let (status, next_at, last_error) = match step {
            NextStep::Done => (
                DeliveryStatus::Succeeded,
                None,
                dropped.map(|r| format!("dropped_by_plugin: {r}")),
            ),
            NextStep::RetryAt(_) if endpoint_cfg.is_none() => (
                DeliveryStatus::Failed,
                None,
                Some(ErrorKind::EndpointRemoved.as_str().to_owned()),
            ),
            NextStep::RetryAt(_) if !still_receiving => (
                DeliveryStatus::Failed,
                None,
                Some(ErrorKind::EndpointPaused.as_str().to_owned()),
            ),
            NextStep::RetryAt(at) => (DeliveryStatus::Pending, Some(at), attempt_error),
            NextStep::GiveUp(reason) => {
                let why = match (&reason, &attempt_error) {
                    (GiveUpReason::Exhausted | GiveUpReason::DeadlineReached, Some(e)) => {
                        format!("{}: {e}", reason.as_str())
                    }
                    _ => reason.as_str().to_owned(),
                };
                (failed_status, None, Some(why))
            }
        };
        if let Some(lane) = self.lanes.get_mut(&item.endpoint) {
            if !was_dropped {
                let kind = outcome.error_kind().map_or("delivered", ErrorKind::as_str);
                lane.metrics.attempt(kind, report.duration);
            }
            if status.is_final() {
                lane.metrics.delivery(status.as_str());
            }
        }
        match &outcome {
            Outcome::Failed {
                kind, status: code, ..
            } => tracing::info!(
                delivery = %item.id, endpoint = %item.endpoint, attempt = n, error_kind = %kind,
                status_code = ?code, next = ?next_at, "attempt failed"
            ),
            Outcome::Delivered { status: code } => tracing::debug!(
                delivery = %item.id, endpoint = %item.endpoint, attempt = n, status_code = code, "attempt delivered"
            ),
        }

        let _ = self.changes.send(StateChange::Attempt(AttemptWrite {
            delivery: item.id,
            round: item.round,
            attempt: Attempt::from_outcome(
                n,
                report.started_at,
                report.duration.as_millis() as u64,
                &outcome,
            ),
            plugin_note: report.plugin_note.clone(),
            status,
            next_attempt_at: next_at,
            last_error,
        }));
        if let Some((write, effects)) = health_write {
            let _ = self.changes.send(StateChange::Health(write.clone()));
            self.apply_effects(&item.endpoint, &write.health, effects, now);
        }

        match next_at {
            Some(at) if status == DeliveryStatus::Pending && !superseded => {
                item.attempts_made = n;
                if item.event.is_none() {
                    item.event = HeldEvent::hold(event, &self.held_bytes);
                }
                item.previous_delay = Some(at.since(now));
                // Keeps its ordering key busy: the next event of the key waits for this one.
                self.push_due(item, at);
            }
            _ => {
                self.shared.queued.fetch_sub(1, Ordering::Relaxed);
                if !superseded {
                    self.release_key(&item);
                }
            }
        }
    }

    /// Ends a pending delivery that will not be attempted (its endpoint is paused or gone).
    fn fail_unsent(&self, delivery: DeliveryId, kind: ErrorKind, now: Timestamp) {
        let _ = self.changes.send(StateChange::Finish {
            delivery,
            status: DeliveryStatus::Failed,
            error: kind.as_str().into(),
            now,
        });
    }

    /// An item is done for good: let the next event of its ordering key go.
    fn release_key(&mut self, item: &Item) {
        let Some(key) = &item.ordering_key else { return };
        let Some(lane) = self.lanes.get_mut(&item.endpoint) else {
            return;
        };
        if let Some(next) = lane.release_key(key, item.epoch) {
            lane.waiting.push_back(next);
        }
    }

    fn receives_events(&self, endpoint: &str) -> bool {
        self.shared
            .health
            .read()
            .expect("health lock")
            .get(endpoint)
            .is_none_or(|h| h.state.receives_events())
    }

    /// Steps the health machine and returns the write and the effects, updating shared state.
    fn health_change(
        &mut self,
        endpoint: &Arc<str>,
        input: HealthInput,
        now: Timestamp,
    ) -> (HealthWrite, Vec<Effect>) {
        let rules = self.config.load().health.rules.clone();
        let current = self
            .shared
            .health
            .read()
            .expect("health lock")
            .get(endpoint)
            .cloned()
            .unwrap_or_default();
        let step = health::step(&rules, &current, input, now);
        self.shared
            .health
            .write()
            .expect("health lock")
            .insert(endpoint.clone(), step.health.clone());
        for t in &step.transitions {
            tracing::warn!(endpoint = %endpoint, from = %t.from, to = %t.to, reason = %t.reason, "endpoint state changed");
        }
        self.arm_health_timer(endpoint, &step.health);
        (
            HealthWrite {
                endpoint: endpoint.clone(),
                health: step.health,
                transitions: step.transitions,
            },
            step.effects,
        )
    }

    /// Steps health outside an attempt (re-enable), records it and applies effects.
    fn step_health(&mut self, endpoint: &Arc<str>, input: HealthInput) -> EndpointHealth {
        let now = self.clock.now();
        self.step_health_at(endpoint, input, now)
    }

    /// [`Self::step_health`] at a given time: a timer's deadline.
    fn step_health_at(&mut self, endpoint: &Arc<str>, input: HealthInput, now: Timestamp) -> EndpointHealth {
        let (write, effects) = self.health_change(endpoint, input, now);
        let health = write.health.clone();
        let _ = self.changes.send(StateChange::Health(write));
        self.apply_effects(endpoint, &health, effects, now);
        health
    }

    fn apply_effects(
        &mut self,
        endpoint: &Arc<str>,
        health: &EndpointHealth,
        effects: Vec<Effect>,
        now: Timestamp,
    ) {
        for effect in effects {
            match effect {
                Effect::StopDeliveries => {
                    let dropped = self.lane(endpoint).stop();
                    self.shared.queued.fetch_sub(dropped as u64, Ordering::Relaxed);
                    let _ = self.changes.send(StateChange::FailPending {
                        endpoint: endpoint.clone(),
                        kind: ErrorKind::EndpointPaused,
                        status: DeliveryStatus::Failed,
                        now,
                    });
                }
                Effect::ResumeDeliveries => {}
                Effect::Publish { event_type } => {
                    if let Some(publish) = &self.publisher {
                        publish(endpoint.clone(), event_type, health.clone());
                    }
                }
            }
        }
    }

    fn arm_health_timer(&mut self, endpoint: &Arc<str>, h: &EndpointHealth) {
        let rules = &self.config.load().health.rules;
        if let Some(at) = health::next_deadline(rules, h)
            && self.armed_deadlines.get(endpoint) != Some(&at)
        {
            self.armed_deadlines.insert(endpoint.clone(), at);
            self.health_timers.push(Reverse((at, endpoint.clone())));
        }
    }

    fn fire_health_timers(&mut self, now: Timestamp) {
        while self
            .health_timers
            .peek()
            .is_some_and(|Reverse((at, _))| *at <= now)
        {
            let Reverse((at, endpoint)) = self.health_timers.pop().expect("peeked");
            if self.armed_deadlines.get(&endpoint) == Some(&at) {
                self.armed_deadlines.remove(&endpoint);
            }
            let rules = self.config.load().health.rules.clone();
            let current = self.health_of(&endpoint);
            // A timer armed for an older state is stale: only the current deadline counts.
            // The rule took effect at its deadline, so that is the time the change is recorded
            // with, not whenever the timer got to run: on a busy runtime, under a scaled clock
            // (at 86400x the timer's one-millisecond grain is 86 simulated seconds), or at a
            // start after downtime, where a chain of overdue deadlines is then replayed in order.
            // Never before the last change, though: rules lowered by a reload can give a
            // deadline that passed before it, and the history stays in order.
            if health::next_deadline(&rules, &current) == Some(at) {
                let at = current.changed_at.map_or(at, |changed| at.max(changed));
                self.step_health_at(&endpoint, HealthInput::Tick, at);
            }
        }
    }

    fn health_of(&self, endpoint: &str) -> EndpointHealth {
        self.shared
            .health
            .read()
            .expect("health lock")
            .get(endpoint)
            .cloned()
            .unwrap_or_default()
    }

    /// The config changed: lanes pick up new limits; endpoints that are gone end their waiting
    /// deliveries with `endpoint_removed`; health timers follow the new health rules.
    fn reconfigure(&mut self) {
        let config = self.config.load_full();
        let now = self.clock.now();
        let removed: Vec<Arc<str>> = self
            .lanes
            .keys()
            .filter(|name| !config.endpoints.contains_key(*name))
            .cloned()
            .collect();
        for name in removed {
            if let Some(mut lane) = self.lanes.remove(&name) {
                let dropped = lane.stop();
                self.shared.queued.fetch_sub(dropped as u64, Ordering::Relaxed);
                // Keep an epoch past the old one so heap entries of the removed lane stay stale
                // if an endpoint of the same name comes back.
                let mut fresh = Lane::new(&name, &config, self.clock.clone());
                fresh.epoch = lane.epoch;
                if lane.in_flight > 0 {
                    fresh.in_flight = lane.in_flight;
                }
                self.lanes.insert(name.clone(), fresh);
            }
            let _ = self.changes.send(StateChange::FailPending {
                endpoint: name,
                kind: ErrorKind::EndpointRemoved,
                status: DeliveryStatus::Failed,
                now,
            });
        }
        for (name, lane) in self.lanes.iter_mut() {
            lane.reconfigure(name, &config, self.clock.clone());
        }
        // Changed rules move the deadlines: without a new timer an endpoint with no attempts
        // running (a paused one) would wait for an input that never comes. A deadline already
        // past fires on the next turn, recorded at the time the new rule gives.
        let endpoints: Vec<(Arc<str>, EndpointHealth)> = self
            .shared
            .health
            .read()
            .expect("health lock")
            .iter()
            .map(|(name, h)| (name.clone(), h.clone()))
            .collect();
        for (name, h) in endpoints {
            self.arm_health_timer(&name, &h);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(payload_bytes: usize) -> Arc<Event> {
        Arc::new(Event {
            id: "evt_1".into(),
            topic: "orders".into(),
            event_type: "order.created".into(),
            content_type: "application/json".into(),
            payload: bytes::Bytes::from(vec![b'x'; payload_bytes]),
            ordering_key: None,
            received_at: Timestamp::from_millis(0),
        })
    }

    #[test]
    fn a_shared_event_is_counted_once_and_released_by_its_last_holder() {
        let held_bytes = Arc::new(AtomicU64::new(0));
        let e = event(1000);
        let held = HeldEvent::hold(e.clone(), &held_bytes).expect("room in the budget");
        let one_event = held_bytes.load(Ordering::Relaxed);
        assert_eq!(one_event, footprint(&e));
        assert!(one_event >= 1000);

        // Ten deliveries of a fan-out share the holder: still one event's worth.
        let siblings: Vec<_> = (0..10).map(|_| held.clone()).collect();
        drop(held);
        assert_eq!(held_bytes.load(Ordering::Relaxed), one_event);
        drop(siblings);
        assert_eq!(held_bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn past_the_budget_a_delivery_keeps_only_its_id() {
        let held_bytes = Arc::new(AtomicU64::new(0));
        let big = event(KEEP_EVENT_BYTES_UP_TO as usize);
        let first = HeldEvent::hold(big, &held_bytes).expect("an empty budget takes one event");
        assert!(HeldEvent::hold(event(10), &held_bytes).is_none());
        drop(first);
        assert!(HeldEvent::hold(event(10), &held_bytes).is_some());
    }
}
