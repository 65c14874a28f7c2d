//! The actor's side of endpoint health: applying steps of the pure health machine, their
//! effects, and the exact timers of time-based transitions.

use std::cmp::Reverse;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::actor::Actor;
use super::feeder::HealthReport;
use super::lane::Lane;
use crate::health::{self, Effect, EndpointHealth, HealthInput};
use crate::model::{DeliveryStatus, ErrorKind, Timestamp};
use crate::store::{HealthChange, StateChange};

impl Actor {
    /// Sends a health input to the store, which holds the endpoint's health and applies it for
    /// good (with several nodes, theirs too). Until its answer comes, the shared health the API
    /// and fan-out read shows `predicted`, the step from the health known here.
    pub(super) fn send_health(
        &mut self,
        endpoint: &Arc<str>,
        input: HealthInput,
        at: Timestamp,
        predicted: &EndpointHealth,
    ) {
        self.shared
            .health
            .write()
            .expect("health lock")
            .insert(endpoint.clone(), predicted.clone());
        *self.health_in_store.entry(endpoint.clone()).or_default() += 1;
        self.shared.health_pending.fetch_add(1, Ordering::SeqCst);
        self.change(StateChange::Health(HealthChange {
            endpoint: endpoint.clone(),
            input,
            at,
            rules: self.config.load().health.rules.clone(),
        }));
    }

    /// Steps health outside an attempt (a re-enable now, a timer at its deadline).
    pub(super) fn step_health_at(&mut self, endpoint: &Arc<str>, input: HealthInput, at: Timestamp) {
        let rules = self.config.load().health.rules.clone();
        let predicted = health::apply(&rules, &self.shared.health_of(endpoint), input, at);
        self.send_health(endpoint, input, at, &predicted.health);
    }

    /// Takes the store's answers to health inputs: the stored health replaces the predicted one
    /// once no later input of the endpoint is still on its way, and the step's transitions are
    /// logged and have their effects (stop deliveries, publish, the next timer). Effects follow
    /// only what the store applied, so that with several nodes each transition acts once.
    pub(super) fn take_health_report(&mut self, report: HealthReport) {
        let now = self.clock.now();
        for (endpoint, input, step) in report {
            self.shared.health_pending.fetch_sub(1, Ordering::SeqCst);
            let outstanding = self.health_in_store.entry(endpoint.clone()).or_default();
            *outstanding = outstanding.saturating_sub(1);
            let last = *outstanding == 0;
            if last {
                self.health_in_store.remove(&endpoint);
            }
            let health = match step {
                Some(step) => {
                    if last {
                        self.shared
                            .health
                            .write()
                            .expect("health lock")
                            .insert(endpoint.clone(), step.health.clone());
                    }
                    for t in &step.transitions {
                        tracing::warn!(endpoint = %endpoint, from = %t.from, to = %t.to, reason = %t.reason, "endpoint state changed");
                    }
                    self.arm_health_timer(&endpoint, &step.health);
                    self.apply_effects(&endpoint, &step.health, step.effects, now);
                    step.health
                }
                None => self.shared.health_of(&endpoint),
            };
            if input == HealthInput::Reenable
                && let Some(waiters) = self.reenable_waiters.get_mut(&endpoint)
                && let Some(reply) = waiters.pop_front()
            {
                let _ = reply.send(health);
            }
        }
    }

    pub(super) fn apply_effects(
        &mut self,
        endpoint: &Arc<str>,
        health: &EndpointHealth,
        effects: Vec<Effect>,
        now: Timestamp,
    ) {
        for effect in effects {
            match effect {
                Effect::StopDeliveries => {
                    let dropped = self.lane(endpoint).stop(true);
                    self.shared.queued.fetch_sub(dropped as u64, Ordering::Relaxed);
                    self.change(StateChange::FailPending {
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

    /// Arms the timer of every endpoint's next time-based transition (at start).
    pub(super) fn arm_every_health_timer(&mut self) {
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

    pub(super) fn arm_health_timer(&mut self, endpoint: &Arc<str>, h: &EndpointHealth) {
        let rules = &self.config.load().health.rules;
        if let Some(at) = health::next_deadline(rules, h)
            && self.armed_deadlines.get(endpoint) != Some(&at)
        {
            self.armed_deadlines.insert(endpoint.clone(), at);
            self.health_timers.push(Reverse((at, endpoint.clone())));
        }
    }

    pub(super) fn fire_health_timers(&mut self, now: Timestamp) {
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
            let current = self.shared.health_of(&endpoint);
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

    /// The config changed: lanes pick up new limits; endpoints that are gone end their waiting
    /// deliveries with `endpoint_removed`; health timers follow the new health rules.
    pub(super) fn reconfigure(&mut self) {
        let config = self.config.load_full();
        let removed: Vec<Arc<str>> = self
            .lanes
            .keys()
            .filter(|name| !self.endpoints.contains(name))
            .cloned()
            .collect();
        for name in removed {
            self.end_removed(name);
        }
        for (name, lane) in self.lanes.iter_mut() {
            lane.reconfigure(
                self.endpoints.routing(name).as_deref(),
                &config,
                self.clock.clone(),
            );
        }
        // Changed rules move the deadlines: without a new timer an endpoint with no attempts
        // running (a paused one) would wait for an input that never comes. A deadline already
        // past fires on the next turn, recorded at the time the new rule gives.
        self.arm_every_health_timer();
    }

    /// One endpoint was created, changed or deleted: its lane takes the new limits, or, for an
    /// endpoint gone, its waiting deliveries end with `endpoint_removed`.
    pub(super) fn endpoint_changed(&mut self, name: &Arc<str>) {
        match self.endpoints.routing(name) {
            None => self.end_removed(name.clone()),
            Some(routing) => {
                let config = self.config.load_full();
                if let Some(lane) = self.lanes.get_mut(name) {
                    lane.reconfigure(Some(&routing), &config, self.clock.clone());
                }
            }
        }
    }

    /// Ends the waiting deliveries of an endpoint that is gone (in memory and in the store).
    fn end_removed(&mut self, name: Arc<str>) {
        if let Some(mut lane) = self.lanes.remove(&name) {
            let dropped = lane.stop(true);
            self.shared.queued.fetch_sub(dropped as u64, Ordering::Relaxed);
            // Keep an epoch past the old one so heap entries of the removed lane stay stale
            // if an endpoint of the same name comes back.
            let config = self.config.load_full();
            let mut fresh = Lane::new(&name, None, &config, self.clock.clone(), &self.metrics);
            fresh.epoch = lane.epoch;
            if lane.in_flight > 0 {
                fresh.in_flight = lane.in_flight;
            }
            self.lanes.insert(name.clone(), fresh);
        }
        self.change(StateChange::FailPending {
            endpoint: name,
            kind: ErrorKind::EndpointRemoved,
            status: DeliveryStatus::Failed,
            now: self.clock.now(),
        });
    }
}
