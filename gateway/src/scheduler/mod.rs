//! The in-memory scheduler: when each delivery is attempted, and what follows from its outcome.
//!
//! One actor task owns the due queue (a binary heap ordered by due time), one lane per
//! endpoint (in-flight limit, throttle, ordering keys), the endpoints' health, and the health
//! timers. New deliveries arrive straight from ingestion after their commit — the database is
//! never polled — and the queue is rebuilt from the store with one scan at start.
//!
//! For every finished attempt the actor plans the next step (pure `policy`), predicts the health
//! machine's step (pure `health`), and streams the resulting [`StateChange`]s, in decision
//! order, to a feeder task that commits them in groups. The store is the keeper of endpoint
//! health: it applies each health input to the health it holds and answers the step, whose
//! transitions then take effect (stop deliveries, publish, the next timer) — so that when
//! several nodes share one database, each transition happens once. Memory may run ahead of the disk, never the
//! other way round: a delivery the disk still calls pending is attempted again after a restart
//! (at-least-once; receivers deduplicate by `webhook-id`).
//!
//! Files: `handle.rs` (what the rest of the gateway holds), `actor.rs` (the actor and its
//! attempt tasks), `lifecycle.rs` (the pure decision after an attempt), `health_steps.rs` (health
//! steps, effects, timers, reconfiguration), `lane.rs` (one endpoint's lane), `held.rs` (the
//! memory budget for held events), `feeder.rs` (state changes to the store), `meters.rs` (per-endpoint metric handles),
//! `ownership.rs` (in a cluster: the endpoints this node delivers), `keys.rs` (held ordering keys
//! and an operator's actions on a key).

mod lane;
mod meters;

mod actor;
mod feeder;
mod handle;
mod health_steps;
mod held;
mod keys;
mod lifecycle;
mod ownership;

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use self::actor::Actor;
use self::handle::Shared;
pub use self::handle::{KeyAction, KeyAnswer, KeyHeldPublisher, Publisher, SchedulerHandle};
use crate::clock::Clock;
use crate::config::Config;
use crate::store::{Store, StoreError};

pub struct SchedulerDeps {
    pub clock: Arc<dyn Clock>,
    pub store: Arc<dyn Store>,
    pub config: Arc<ArcSwap<Config>>,
    /// The running endpoints: lanes read their limits there, attempts their whole config.
    pub endpoints: crate::endpoints::Endpoints,
    pub sender: crate::delivery::Sender,
    pub plugins: crate::plugins::PluginHost,
    pub metrics: crate::telemetry::Metrics,
    /// The attempt spans' destination.
    pub traces: crate::traces::Traces,
    /// Several nodes share the store: this one delivers only the endpoints the cluster task
    /// gives it, rebuilds nothing at start, and starts (and sends) an attempt only while the
    /// fence says this node holds its endpoint's lease.
    pub fence: Option<Arc<crate::fence::Fence>>,
}

/// Builds the scheduler: loads health and pending deliveries from the store. Returns the
/// handle and the actor, which [`Scheduler::run`] drives until shutdown.
pub struct Scheduler {
    actor: Actor,
    feeder: actor::FeederChannels,
}

impl Scheduler {
    pub async fn load(deps: SchedulerDeps) -> Result<(Scheduler, SchedulerHandle), StoreError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared::default());
        let health =
            crate::store::patiently("the endpoints' health", crate::store::START_READ_PATIENCE, || {
                deps.store.endpoint_health()
            })
            .await?;
        *shared.health.write().expect("health lock") = health
            .into_iter()
            .map(|(name, h)| (Arc::<str>::from(name), h))
            .collect();
        let store = deps.store.clone();
        let clustered = deps.fence.is_some();
        let (mut actor, feeder) = Actor::new(deps, rx, shared.clone());
        actor.arm_every_health_timer();
        if !clustered {
            let held = crate::store::patiently(
                "the held ordering keys",
                crate::store::START_READ_PATIENCE,
                || store.held_keys(),
            )
            .await?;
            actor.restore_holds(held);
            let restored = store.each_pending_page(&mut |page| actor.restore(page)).await?;
            lane::give_back_freed_memory();
            tracing::info!(restored, "scheduler queue rebuilt from the store");
        }
        let handle = SchedulerHandle { tx, shared };
        Ok((Scheduler { actor, feeder }, handle))
    }

    /// Where operator events go; without one, state changes are only recorded.
    pub fn set_publisher(&mut self, publisher: Publisher, key_held: KeyHeldPublisher) {
        self.actor.publisher = Some(publisher);
        self.actor.key_held_publisher = Some(key_held);
    }

    /// Runs until `shutdown`, then lets in-flight attempts finish for up to `grace` and
    /// flushes every state change to the store.
    ///
    /// The actor gets a thread (and a timer) of its own: when a delivery is due, the actor
    /// must not wait for a worker that is busy with HTTP connections. Attempts and the store
    /// feeder run on the gateway's runtime.
    pub async fn run(self, shutdown: CancellationToken, grace: Duration) {
        let Scheduler { mut actor, feeder } = self;
        let feeder = tokio::spawn(feeder::feed_store(
            actor.store.clone(),
            feeder.changes,
            feeder.reports,
            actor.metrics.store_write_failures(),
            actor.shared.clone(),
        ));
        let (done_tx, done_rx) = oneshot::channel::<()>();
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
        match thread {
            Ok(thread) => {
                let _ = done_rx.await;
                let _ = tokio::task::spawn_blocking(move || thread.join()).await;
            }
            Err(e) => tracing::error!(error = %e, "cannot start the scheduler thread"),
        }
        let _ = feeder.await;
    }
}
