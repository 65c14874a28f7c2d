//! The handle the rest of the gateway holds, and the state the API reads without asking the
//! actor.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{mpsc, oneshot};

use crate::health::EndpointHealth;
use crate::model::{DeliveryId, EndpointState, Event, Timestamp};
use crate::store::{HeldKey, PendingDelivery, ReadyDelivery, Restarted};

/// What the rest of the gateway asks of the actor.
pub(super) enum Command {
    Enqueue(Vec<ReadyDelivery>),
    /// A new round of a delivery that was still waiting for a retry: the waiting attempt is
    /// cancelled and the new round is attempted now (redeliver).
    Replace(ReadyDelivery),
    Reenable {
        endpoint: Arc<str>,
        reply: oneshot::Sender<EndpointHealth>,
    },
    Reconfigured,
    /// One endpoint was created, changed or deleted: its lane takes its new limits, or ends its
    /// waiting deliveries.
    EndpointChanged(Arc<str>),
    /// This node now delivers the endpoint (a cluster lease); its pending deliveries follow.
    Own(Arc<str>),
    /// The pending deliveries of an endpoint just owned, as read after the `Own`, and its
    /// held keys.
    Owned {
        endpoint: Arc<str>,
        pending: Vec<PendingDelivery>,
        held: Vec<HeldKey>,
    },
    /// Another node delivers the endpoint now, or will once this one lets go.
    Disown(Arc<str>),
    /// Deliveries made pending, from notices, with their events, and the ids of this node's
    /// own deliveries those notices named (pending or not by now).
    Load {
        pending: Vec<(PendingDelivery, Arc<Event>)>,
        noticed: Vec<DeliveryId>,
    },
    /// Another node changed the endpoint's health.
    HealthChanged {
        endpoint: Arc<str>,
        health: EndpointHealth,
    },
    /// An operator's action on one ordering key.
    Key {
        endpoint: Arc<str>,
        key: Arc<str>,
        action: KeyAction,
        expected: Option<DeliveryId>,
        reply: oneshot::Sender<KeyAnswer>,
    },
}

/// What an operator does to an ordering key of an ordered endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAction {
    /// The head ends as a dead letter `skipped`; the next event goes at once. On a held key
    /// (whose head is a dead letter already), the same as `Release`.
    Skip,
    /// The head is attempted now.
    Retry,
    /// A held key moves on; its head stays a dead letter.
    Release,
}

impl KeyAction {
    pub fn parse(text: &str) -> Option<KeyAction> {
        match text {
            "skip" => Some(KeyAction::Skip),
            "retry" => Some(KeyAction::Retry),
            "release" => Some(KeyAction::Release),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            KeyAction::Skip => "skip",
            KeyAction::Retry => "retry",
            KeyAction::Release => "release",
        }
    }
}

/// The scheduler's answer to a [`KeyAction`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyAnswer {
    /// Done, on this head.
    Applied(DeliveryId),
    /// Nothing done: the key has no head waiting here (nothing pending), or its head is not
    /// the one the action named (that one was delivered, skipped or released meanwhile).
    Unchanged { front: Option<DeliveryId> },
    /// An attempt of the head is running: its outcome decides; act again after it.
    InFlight(DeliveryId),
    /// `release` of a key that is not held: nothing done; the key's head now (None only from a
    /// node of an older version, which did not say).
    NotHeld { front: Option<DeliveryId> },
    /// `retry` of a held key: its head finally failed, so it needs a new round (the caller
    /// starts one; the key is released when it comes in).
    NewRound(DeliveryId),
    /// Another node delivers the endpoint.
    NotOwner,
    /// The scheduler has stopped.
    Stopped,
}

/// Callback the scheduler uses to publish operator events (`hookgate.endpoint.*`). Set by the
/// supervisor, which knows how to ingest.
pub type Publisher = Arc<dyn Fn(Arc<str>, &'static str, EndpointHealth) + Send + Sync>;

/// Callback the scheduler uses to publish `hookgate.ordering.key_held`: the endpoint, the key
/// and the head it is held behind. Set by the supervisor, like [`Publisher`].
pub type KeyHeldPublisher = Arc<dyn Fn(Arc<str>, Arc<str>, DeliveryId) + Send + Sync>;

/// The endpoints' health as this node knows it: the endpoints never attempted have none (they
/// are active); those that are not active are kept apart as well, so that the metrics and the
/// overview count them without walking every endpoint.
#[derive(Default)]
pub(super) struct HealthMap {
    all: HashMap<Arc<str>, EndpointHealth>,
    not_active: BTreeMap<Arc<str>, EndpointState>,
}

impl HealthMap {
    pub(super) fn get(&self, endpoint: &str) -> Option<&EndpointHealth> {
        self.all.get(endpoint)
    }

    pub(super) fn insert(&mut self, endpoint: Arc<str>, health: EndpointHealth) {
        if health.state == EndpointState::Active {
            self.not_active.remove(&endpoint);
        } else {
            self.not_active.insert(endpoint.clone(), health.state);
        }
        self.all.insert(endpoint, health);
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&Arc<str>, &EndpointHealth)> {
        self.all.iter()
    }
}

impl FromIterator<(Arc<str>, EndpointHealth)> for HealthMap {
    fn from_iter<I: IntoIterator<Item = (Arc<str>, EndpointHealth)>>(iter: I) -> Self {
        let mut map = HealthMap::default();
        for (endpoint, health) in iter {
            map.insert(endpoint, health);
        }
        map
    }
}

/// State the API reads without asking the actor; the actor writes it.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) health: RwLock<HealthMap>,
    /// Attempts running now, and their endpoints.
    pub(super) in_flight: Mutex<HashMap<DeliveryId, Arc<str>>>,
    pub(super) queued: AtomicU64,
    /// Commands sent and not yet taken by the actor.
    pub(super) commands_pending: AtomicU64,
    /// Health inputs sent to the store whose answer the actor has not taken yet.
    pub(super) health_pending: AtomicU64,
    /// Set by the actor when it goes to sleep with nothing runnable: no attempt running and
    /// nothing due that it could start.
    pub(super) idle: AtomicBool,
    /// When the actor will next wake by itself (ms since the epoch; `i64::MAX` for never).
    pub(super) next_wake_ms: AtomicI64,
    pub(super) config_changed: tokio::sync::Notify,
    /// In a cluster: endpoints created, changed or deleted on this node or by notice, which
    /// the cluster task has not looked at yet (it may have to take their leases).
    pub(super) endpoints_changed: Mutex<Vec<Arc<str>>>,
    pub(super) endpoints_changed_notify: tokio::sync::Notify,
    /// Deliveries committed here that the scheduler takes in from their cluster notice.
    pub(super) awaiting_notices: AtomicU64,
    /// State changes sent to the store, and those committed (or given up) since the start.
    pub(super) changes_sent: AtomicU64,
    pub(super) changes_done: AtomicU64,
    /// In a cluster, the endpoints this node delivers (the actor's own set, mirrored for
    /// readers); None on a single node, which delivers every endpoint.
    pub(super) owned: RwLock<Option<HashSet<Arc<str>>>>,
}

impl Shared {
    /// The endpoint's health (active for an endpoint never seen).
    pub(super) fn health_of(&self, endpoint: &str) -> EndpointHealth {
        self.health
            .read()
            .expect("health lock")
            .get(endpoint)
            .cloned()
            .unwrap_or_default()
    }

    /// Whether new events should fan out to the endpoint (not paused or disabled).
    pub(super) fn receives_events(&self, endpoint: &str) -> bool {
        self.health
            .read()
            .expect("health lock")
            .get(endpoint)
            .is_none_or(|h| h.state.receives_events())
    }
}

/// The handle the rest of the gateway holds. Cheap to clone.
#[derive(Clone)]
pub struct SchedulerHandle {
    pub(super) tx: mpsc::UnboundedSender<Command>,
    pub(super) shared: Arc<Shared>,
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
    /// every health input answered by the store, no attempt is running, nothing due is waiting. Tests wait for this before they advance
    /// a manual clock, so that an outcome is planned at the time it happened.
    pub fn is_idle(&self, now: Timestamp) -> bool {
        self.shared.commands_pending.load(Ordering::SeqCst) == 0
            && self.shared.health_pending.load(Ordering::SeqCst) == 0
            && self.shared.awaiting_notices.load(Ordering::SeqCst) == 0
            && self.shared.idle.load(Ordering::SeqCst)
            && self.shared.next_wake_ms.load(Ordering::SeqCst) > now.as_millis()
    }

    /// The endpoint's health as the scheduler knows it (active for an endpoint never seen).
    pub fn health_of(&self, endpoint: &str) -> EndpointHealth {
        self.shared.health_of(endpoint)
    }

    /// Whether new events should fan out to the endpoint (not paused or disabled).
    pub fn receives_events(&self, endpoint: &str) -> bool {
        self.shared.receives_events(endpoint)
    }

    /// The endpoints that are not active (degraded, paused or disabled), by name: they are few
    /// however many endpoints there are, and every other endpoint is active.
    pub fn not_active(&self) -> Vec<(Arc<str>, EndpointState)> {
        let health = self.shared.health.read().expect("health lock");
        health
            .not_active
            .iter()
            .map(|(name, state)| (name.clone(), *state))
            .collect()
    }

    /// Whether this node delivers the endpoint (always on a single node; in a cluster, while
    /// it holds the endpoint's lease): the one node that reports what the endpoint's
    /// deliveries do.
    pub fn delivers(&self, endpoint: &str) -> bool {
        self.shared
            .owned
            .read()
            .expect("owned lock")
            .as_ref()
            .is_none_or(|owned| owned.contains(endpoint))
    }

    pub fn is_in_flight(&self, id: DeliveryId) -> bool {
        self.shared
            .in_flight
            .lock()
            .expect("in-flight lock")
            .contains_key(&id)
    }

    /// Waits (at most `within`) until the store holds every state change the scheduler has
    /// decided so far: an operator's action is answered once a read shows it.
    pub async fn committed(&self, within: std::time::Duration) {
        let mark = self.changes_sent();
        let deadline = tokio::time::Instant::now() + within;
        while !self.changes_done_through(mark) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
    }

    /// How many state changes the scheduler has sent to the store so far.
    pub fn changes_sent(&self) -> u64 {
        self.shared.changes_sent.load(Ordering::SeqCst)
    }

    /// Whether every state change up to `mark` ([`SchedulerHandle::changes_sent`]) has been
    /// committed (or given up on).
    pub fn changes_done_through(&self, mark: u64) -> bool {
        self.shared.changes_done.load(Ordering::SeqCst) >= mark
    }

    /// How many attempts of the endpoint are running now (until their outcome is sent to the
    /// store).
    pub fn in_flight_for(&self, endpoint: &str) -> usize {
        self.shared
            .in_flight
            .lock()
            .expect("in-flight lock")
            .values()
            .filter(|e| &***e == endpoint)
            .count()
    }

    /// In a cluster: this node delivers the endpoint from now on. Call before reading its
    /// pending deliveries, and hand them over with [`SchedulerHandle::owned`]: deliveries
    /// committed meanwhile are taken once, whichever way they come.
    pub fn own(&self, endpoint: Arc<str>) {
        self.send(Command::Own(endpoint));
    }

    /// In a cluster: the pending deliveries and held keys of an endpoint
    /// [`SchedulerHandle::own`] took.
    pub fn owned(&self, endpoint: Arc<str>, pending: Vec<PendingDelivery>, held: Vec<HeldKey>) {
        self.send(Command::Owned {
            endpoint,
            pending,
            held,
        });
    }

    /// Resolves when the config changes (the cluster task then claims new endpoints at once).
    pub async fn config_changed(&self) {
        self.shared.config_changed.notified().await;
    }

    /// In a cluster: this node stops delivering the endpoint. Attempts running go on; their
    /// outcomes are recorded and nothing more of the endpoint starts here.
    pub fn disown(&self, endpoint: Arc<str>) {
        self.send(Command::Disown(endpoint));
    }

    /// In a cluster: deliveries made pending, as their notices told (those of endpoints this
    /// node does not deliver are ignored); `noticed`: the ids of this node's own deliveries the
    /// notices named.
    pub fn load(&self, pending: Vec<(PendingDelivery, Arc<Event>)>, noticed: Vec<DeliveryId>) {
        if !pending.is_empty() || !noticed.is_empty() {
            self.send(Command::Load { pending, noticed });
        }
    }

    /// In a cluster: another node changed the endpoint's health to `health`.
    pub fn health_changed(&self, endpoint: Arc<str>, health: EndpointHealth) {
        self.send(Command::HealthChanged { endpoint, health });
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

    /// An operator's action on an ordering key, decided by the actor in order with the
    /// attempts' outcomes. `expected`: the head the action is meant for.
    pub async fn key_action(
        &self,
        endpoint: Arc<str>,
        key: Arc<str>,
        action: KeyAction,
        expected: Option<DeliveryId>,
    ) -> KeyAnswer {
        let (reply, rx) = oneshot::channel();
        let command = Command::Key {
            endpoint,
            key,
            action,
            expected,
            reply,
        };
        if !self.send(command) {
            return KeyAnswer::Stopped;
        }
        rx.await.unwrap_or(KeyAnswer::Stopped)
    }

    /// Tells the scheduler the config changed (endpoints added, changed or removed).
    pub fn reconfigured(&self) {
        self.shared.config_changed.notify_waiters();
        self.send(Command::Reconfigured);
    }

    /// Tells the scheduler one endpoint was created, changed or deleted (and in a cluster,
    /// the cluster task: see [`SchedulerHandle::changed_endpoints`]).
    pub fn endpoint_changed(&self, endpoint: Arc<str>) {
        if self.shared.owned.read().expect("owned lock").is_some() {
            self.shared
                .endpoints_changed
                .lock()
                .expect("changed endpoints lock")
                .push(endpoint.clone());
            self.shared.endpoints_changed_notify.notify_one();
        }
        self.send(Command::EndpointChanged(endpoint));
    }

    /// In a cluster: the endpoints changed since the last call, once there is one.
    pub async fn changed_endpoints(&self) -> Vec<Arc<str>> {
        loop {
            let changed = std::mem::take(
                &mut *self
                    .shared
                    .endpoints_changed
                    .lock()
                    .expect("changed endpoints lock"),
            );
            if !changed.is_empty() {
                return changed;
            }
            self.shared.endpoints_changed_notify.notified().await;
        }
    }
}
