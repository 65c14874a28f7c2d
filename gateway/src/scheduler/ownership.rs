//! The actor's side of a cluster: which endpoints this node delivers. The cluster task
//! (`crate::cluster`) holds the leases and tells the actor when it gains an endpoint (with its
//! pending deliveries), loses one, or learns of deliveries and health changes other nodes made.
//! On a single node `owned` is None and none of this is used.

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::actor::{Actor, Item, pending_item};
use super::held::RunHolder;
use crate::health::EndpointHealth;
use crate::model::{DeliveryId, Event};
use crate::store::PendingDelivery;

impl Actor {
    /// This node delivers `endpoint` from now on; its pending deliveries, read after this,
    /// follow in [`Actor::take_owned`]. What arrives until then is taken in and noted.
    pub(super) fn own(&mut self, endpoint: Arc<str>) {
        if let Some(owned) = &mut self.owned {
            owned.insert(endpoint.clone());
            *self.shared.owned.write().expect("owned lock") = Some(owned.clone());
        }
        self.arrivals.insert(endpoint, HashSet::new());
    }

    /// The pending deliveries of an endpoint just owned. Those that arrived since the `Own`
    /// are here already; those with an attempt still running here from before are carried:
    /// that attempt's outcome decides their next step, in the lane's new epoch.
    pub(super) fn take_owned(&mut self, endpoint: &Arc<str>, pending: Vec<PendingDelivery>) {
        let arrived = self.arrivals.remove(endpoint).unwrap_or_default();
        if !self.owns(endpoint) {
            return;
        }
        let running: HashSet<_> = {
            let in_flight = self.shared.in_flight.lock().expect("in-flight lock");
            pending
                .iter()
                .filter(|p| in_flight.contains_key(&p.id))
                .map(|p| p.id)
                .collect()
        };
        let now = self.clock.now();
        for p in pending {
            if &p.endpoint != endpoint || arrived.contains(&p.id) {
                continue;
            }
            if running.contains(&p.id) {
                self.carried.insert(p.id);
            } else {
                self.take_pending(p, now);
            }
        }
    }

    /// Another node delivers `endpoint` now: what waits here is dropped (the store still holds
    /// it). Attempts running go on and are recorded; their next step is the new owner's.
    pub(super) fn disown(&mut self, endpoint: &Arc<str>) {
        if let Some(owned) = &mut self.owned {
            owned.remove(endpoint);
            *self.shared.owned.write().expect("owned lock") = Some(owned.clone());
        }
        self.arrivals.remove(endpoint);
        self.awaiting.retain(|_, e| e != endpoint);
        self.count_awaiting();
        // The next owner restores the held keys from the store.
        let dropped = self.lane(endpoint).stop(false);
        self.shared.queued.fetch_sub(dropped as u64, Ordering::Relaxed);
    }

    /// Deliveries another node made pending, with their events (held as far as the budget
    /// for events in memory allows; see `held.rs`). A new round of a delivery replaces the
    /// round waiting here (a redeliver on another node); a first round already running here
    /// is not taken twice.
    pub(super) fn load_notified(
        &mut self,
        pending: Vec<(PendingDelivery, Arc<Event>)>,
        noticed: Vec<DeliveryId>,
    ) {
        let now = self.clock.now();
        for id in noticed {
            if self.awaiting.remove(&id).is_none() {
                self.noticed_early.insert(id);
            }
        }
        self.count_awaiting();
        let mut holder = RunHolder::new(&self.held_bytes);
        for (p, event) in pending {
            if !self.owns(&p.endpoint) {
                continue;
            }
            let item = Item {
                event: holder.hold(&event),
                ..pending_item(p)
            };
            if item.round > 1 {
                self.replace_waiting(item);
            } else if !self
                .shared
                .in_flight
                .lock()
                .expect("in-flight lock")
                .contains_key(&item.id)
            {
                self.take_item(item, now);
            }
        }
    }

    /// A delivery this node committed for an ordered endpoint it delivers: it comes in with
    /// its notice.
    pub(super) fn await_notice(&mut self, id: DeliveryId, endpoint: &Arc<str>) {
        if self.noticed_early.remove(&id) {
            return;
        }
        if self.noticed_early.len() > 10_000 {
            // Only ids whose commit the scheduler never heard of stay here; forget them.
            self.noticed_early.clear();
        }
        if self.owns(endpoint) {
            self.awaiting.insert(id, endpoint.clone());
            self.count_awaiting();
        }
    }

    pub(super) fn notice_came(&mut self, id: DeliveryId) {
        if self.awaiting.remove(&id).is_some() {
            self.count_awaiting();
        }
    }

    fn count_awaiting(&self) {
        self.shared
            .awaiting_notices
            .store(self.awaiting.len() as u64, Ordering::SeqCst);
    }

    /// Another node changed the endpoint's health: this node follows (an endpoint paused
    /// elsewhere stops here too; the node that paused it failed its waiting deliveries). While
    /// an input of this node is on its way to the store, the store's answer to it comes later
    /// and wins.
    pub(super) fn health_changed(&mut self, endpoint: Arc<str>, health: EndpointHealth) {
        if self.health_in_store.contains_key(&endpoint) {
            return;
        }
        let was_receiving = self.shared.receives_events(&endpoint);
        self.shared
            .health
            .write()
            .expect("health lock")
            .insert(endpoint.clone(), health.clone());
        if was_receiving && !health.state.receives_events() {
            let dropped = self.lane(&endpoint).stop(true);
            self.shared.queued.fetch_sub(dropped as u64, Ordering::Relaxed);
        }
        self.arm_health_timer(&endpoint, &health);
    }
}
