//! Ordering keys an operator can steer: a key held behind a head that finally failed
//! (`on_final_failure: hold`), and the operator's `skip`, `retry` and `release`.
//!
//! The actor decides every action, in the same order as the attempts' outcomes, so an action
//! compares and sets against the key's front as the actor holds it — the truth the disk
//! follows: a skip that names a head which has just been delivered does nothing, and the next
//! event of the key is neither lost nor sent twice. Each action's state change goes to the
//! store behind the outcomes decided before it.

use std::collections::BinaryHeap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::actor::{Actor, Item};
use super::handle::{KeyAction, KeyAnswer};
use super::lane::NotHeld;
use crate::config::FinalFailure;
use crate::model::{DeliveryId, DeliveryStatus, Timestamp};
use crate::store::{HeldKey, StateChange};

/// The error a skipped head ends with, as its dead letter's reason.
const SKIPPED: &str = "skipped";

impl Actor {
    /// A key's front ended for good (delivered, or finally failed): the key moves on, or, on
    /// an endpoint that holds its keys, stays stopped behind a failure.
    pub(super) fn front_ended(&mut self, item: &Item, status: DeliveryStatus, now: Timestamp) {
        let failed = matches!(status, DeliveryStatus::Failed | DeliveryStatus::Dead);
        let holds = self
            .endpoints
            .routing(&item.endpoint)
            .is_some_and(|ep| ep.ordered && ep.on_final_failure == FinalFailure::Hold);
        let Some(key) = item.ordering_key.clone().filter(|_| failed && holds) else {
            self.release_key(item);
            return;
        };
        let Some(lane) = self.lanes.get_mut(&item.endpoint) else {
            return;
        };
        if !lane.hold_key(&key, item.epoch, item.id) {
            return;
        }
        lane.metrics.key_event("held");
        tracing::warn!(endpoint = %item.endpoint, key = %key, delivery = %item.id,
            "ordering key held behind a delivery that finally failed; release, retry or skip it");
        self.change(StateChange::Hold {
            endpoint: item.endpoint.clone(),
            key: key.to_string(),
            delivery: item.id,
            at: now,
        });
        if let Some(publish) = &self.key_held_publisher {
            publish(item.endpoint.clone(), key, item.id);
        }
    }

    /// A held key's front came back in a new round (an operator's retry): the hold is over.
    pub(super) fn unheld(&mut self, item: &Item) {
        let Some(key) = &item.ordering_key else { return };
        if let Some(lane) = self.lanes.get_mut(&item.endpoint) {
            lane.metrics.key_event("released");
        }
        self.change(StateChange::Release {
            endpoint: item.endpoint.clone(),
            key: key.to_string(),
            delivery: item.id,
        });
    }

    /// The held keys the store holds, before the pending deliveries are taken in (at start,
    /// or for an endpoint this node takes over), so that those wait behind their hold.
    pub(super) fn restore_holds(&mut self, held: Vec<HeldKey>) {
        for h in held {
            if self.owns(&h.endpoint) {
                self.lane(&h.endpoint).restore_hold(Arc::from(h.key), h.delivery);
            }
        }
    }

    /// An operator's action on one key; `expected`: the front it is meant for (None: whatever
    /// the front is now).
    pub(super) fn key_action(
        &mut self,
        endpoint: &Arc<str>,
        key: &Arc<str>,
        action: KeyAction,
        expected: Option<DeliveryId>,
    ) -> KeyAnswer {
        if !self.owns(endpoint) {
            return KeyAnswer::NotOwner;
        }
        let Some((front, held)) = self.lanes.get(endpoint).and_then(|l| l.front_of(key)) else {
            return KeyAnswer::Unchanged { front: None };
        };
        if expected.is_some_and(|e| e != front) {
            return KeyAnswer::Unchanged { front: Some(front) };
        }
        if self
            .shared
            .in_flight
            .lock()
            .expect("in-flight lock")
            .contains_key(&front)
        {
            return KeyAnswer::InFlight(front);
        }
        match (action, held) {
            (KeyAction::Release, false) => KeyAnswer::NotHeld { front: Some(front) },
            (KeyAction::Release | KeyAction::Skip, true) => self.release_held(endpoint, key, front),
            (KeyAction::Retry, true) => KeyAnswer::NewRound(front),
            (KeyAction::Skip, false) => self.skip_front(endpoint, key, front),
            (KeyAction::Retry, false) => self.retry_front(endpoint, front),
        }
    }

    fn release_held(&mut self, endpoint: &Arc<str>, key: &Arc<str>, front: DeliveryId) -> KeyAnswer {
        let lane = self.lane(endpoint);
        match lane.release_hold(key, Some(front)) {
            Ok(next) => {
                lane.metrics.key_event("released");
                if let Some(next) = next {
                    lane.waiting.push_back(next);
                }
                self.change(StateChange::Release {
                    endpoint: endpoint.clone(),
                    key: key.to_string(),
                    delivery: front,
                });
                KeyAnswer::Applied(front)
            }
            Err(NotHeld::NotHeld) => KeyAnswer::NotHeld { front: Some(front) },
            Err(NotHeld::OtherFront(other)) => KeyAnswer::Unchanged { front: Some(other) },
        }
    }

    /// The front waiting for its next attempt ends as a dead letter `skipped`; the key's next
    /// delivery goes at once.
    fn skip_front(&mut self, endpoint: &Arc<str>, key: &Arc<str>, front: DeliveryId) -> KeyAnswer {
        let Some(item) = self.take_waiting(endpoint, front) else {
            return KeyAnswer::Unchanged { front: Some(front) };
        };
        self.shared.queued.fetch_sub(1, Ordering::Relaxed);
        let now = self.clock.now();
        self.change(StateChange::Finish {
            delivery: front,
            status: DeliveryStatus::Dead,
            error: SKIPPED.into(),
            now,
        });
        let lane = self.lane(endpoint);
        lane.metrics.delivery(DeliveryStatus::Dead.as_str());
        lane.metrics.key_event("skipped");
        tracing::info!(endpoint = %endpoint, key = %key, delivery = %front, "ordering key's head skipped by an operator");
        self.release_key(&item);
        KeyAnswer::Applied(front)
    }

    /// The front waiting for its next attempt is attempted now, in its round.
    fn retry_front(&mut self, endpoint: &Arc<str>, front: DeliveryId) -> KeyAnswer {
        let Some(item) = self.take_waiting(endpoint, front) else {
            return KeyAnswer::Unchanged { front: Some(front) };
        };
        let mut item = item;
        item.due_at = self.clock.now();
        self.lane(endpoint).waiting.push_back(item);
        KeyAnswer::Applied(front)
    }

    /// Takes a delivery out of wherever it waits: its lane's due line, or the heap (rebuilt
    /// without it: an operator's action is rare, and the heap holds what is pending here).
    fn take_waiting(&mut self, endpoint: &Arc<str>, id: DeliveryId) -> Option<Item> {
        let lane = self.lane(endpoint);
        if let Some(at) = lane.waiting.iter().position(|i| i.id == id) {
            return lane.waiting.remove(at);
        }
        let epoch = lane.epoch;
        let (found, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut self.due)
            .into_vec()
            .into_iter()
            .partition(|d| d.0.item.id == id && d.0.item.epoch == epoch);
        self.due = BinaryHeap::from(rest);
        // Older rounds a redeliver replaced go too: they were counted until they surfaced.
        let newest = found.iter().map(|d| d.0.item.round).max()?;
        self.superseded.remove(&id);
        let mut newest_item = None;
        for d in found {
            if d.0.item.round == newest && newest_item.is_none() {
                newest_item = Some(d.0.item);
            } else {
                self.shared.queued.fetch_sub(1, Ordering::Relaxed);
            }
        }
        newest_item
    }
}
