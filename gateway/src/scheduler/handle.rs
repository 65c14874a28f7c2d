//! The handle the rest of the gateway holds, and the state the API reads without asking the
//! actor.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};

use tokio::sync::{mpsc, oneshot};

use crate::health::EndpointHealth;
use crate::model::{DeliveryId, Timestamp};
use crate::store::{ReadyDelivery, Restarted};

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
}

/// Callback the scheduler uses to publish operator events (`hookgate.endpoint.*`). Set by the
/// supervisor, which knows how to ingest.
pub type Publisher = Arc<dyn Fn(Arc<str>, &'static str, EndpointHealth) + Send + Sync>;

/// State the API reads without asking the actor; the actor writes it.
#[derive(Default)]
pub(super) struct Shared {
    pub(super) health: RwLock<HashMap<Arc<str>, EndpointHealth>>,
    pub(super) in_flight: Mutex<HashSet<DeliveryId>>,
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
