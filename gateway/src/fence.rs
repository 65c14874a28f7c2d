//! Fencing: in a cluster, a node sends an endpoint's attempts only while it holds the endpoint's
//! lease *by its own monotonic clock*, without asking the database.
//!
//! The database grants a lease until `its now + lease`, where "its now" is some moment after
//! the node asked (the request had to reach it). So a lease the node asked for at `asked` (its
//! monotonic clock) lasts, in real time, at least until `asked + lease`, and no other node can
//! take it before then. The node counts it as held only until `asked + lease − margin`: the
//! margin covers the two clocks' drift over a lease and the few moments between the check and
//! the request's write on the socket. A node that was frozen (a long pause, a stopped
//! container, a VM migration) finds on waking that its clock has moved past every lease: it
//! sends nothing more until it has asked the database again.
//!
//! A lease that lapsed here may have been taken, used and given back by another node before
//! this one renews it, so a renewal extends only a lease that still holds at the moment its
//! answer arrives ([`Fence::renew`]); one that lapsed must be taken anew, and whatever this
//! node had queued for it is dropped and read again from the store (`crate::cluster`).
//!
//! The window left: a node frozen after the check and before the write on the socket sends
//! that one request late, when another node may deliver the endpoint already. ARCHITECTURE.md
//! ("Fencing") has the whole argument.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The monotonic clock leases are judged by: real time that never goes back (not the
/// schedule's clock, which `--time-scale` may speed up: the database's leases are real time).
pub trait LeaseClock: Send + Sync + fmt::Debug + 'static {
    fn now(&self) -> Instant;
}

/// The process's monotonic clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemLeaseClock;

impl LeaseClock for SystemLeaseClock {
    fn now(&self) -> Instant {
        Instant::now()
    }
}

/// A lease clock that moves only when told to, for tests: a freeze is an `advance`.
#[derive(Debug)]
pub struct ManualLeaseClock {
    start: Instant,
    offset: Mutex<Duration>,
}

impl Default for ManualLeaseClock {
    fn default() -> Self {
        ManualLeaseClock {
            start: Instant::now(),
            offset: Mutex::new(Duration::ZERO),
        }
    }
}

impl ManualLeaseClock {
    pub fn advance(&self, by: Duration) {
        *self.offset.lock().expect("lease clock lock") += by;
    }
}

impl LeaseClock for ManualLeaseClock {
    fn now(&self) -> Instant {
        self.start + *self.offset.lock().expect("lease clock lock")
    }
}

/// An attempt not sent because its endpoint's lease no longer held here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fenced;

/// The endpoints whose leases this node holds, each until when by its own clock. Shared by
/// the cluster task (which grants and renews), the scheduler (which starts attempts only for
/// endpoints held) and the attempts (which check again right before they send).
#[derive(Debug)]
pub struct Fence {
    clock: Arc<dyn LeaseClock>,
    /// `lease − margin`: how long after it was asked for a lease counts as held.
    holds_for: Duration,
    until: Mutex<HashMap<Arc<str>, Instant>>,
}

impl Fence {
    pub fn new(lease: Duration, clock: Arc<dyn LeaseClock>) -> Fence {
        Fence {
            clock,
            holds_for: lease.saturating_sub(Fence::margin(lease)),
            until: Mutex::new(HashMap::new()),
        }
    }

    /// The part of a lease a node gives up to be safe: a fifth. With the default 15 s lease
    /// a node stops 3 s before any other node may take over, and renewals (every third of a
    /// lease) may come 7 s late before a lease lapses here.
    pub fn margin(lease: Duration) -> Duration {
        lease / 5
    }

    /// Now, by the lease clock: take it right before asking the database for leases.
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Whether this node may send an attempt of `endpoint` now.
    pub fn holds(&self, endpoint: &str) -> bool {
        let now = self.clock.now();
        self.lock().get(endpoint).is_some_and(|until| *until > now)
    }

    /// [`Fence::holds`] as a result, for the check right before a send.
    pub fn check(&self, endpoint: &str) -> Result<(), Fenced> {
        if self.holds(endpoint) { Ok(()) } else { Err(Fenced) }
    }

    /// A lease taken anew, asked for at `asked`.
    pub fn grant(&self, endpoint: Arc<str>, asked: Instant) {
        let until = asked + self.holds_for;
        self.lock().insert(endpoint, until);
    }

    /// A lease renewed, asked for at `asked`: extended only if it still holds now, when the
    /// database's answer is here. False when it had lapsed (it stays lapsed): another node may
    /// have delivered the endpoint meanwhile, so what waits here for it may be stale.
    pub fn renew(&self, endpoint: &str, asked: Instant) -> bool {
        let now = self.clock.now();
        let mut until = self.lock();
        match until.get_mut(endpoint) {
            Some(at) if *at > now => {
                *at = (*at).max(asked + self.holds_for);
                true
            }
            _ => false,
        }
    }

    /// This node no longer delivers `endpoint` (given up, lost, or lapsed).
    pub fn revoke(&self, endpoint: &str) {
        self.lock().remove(endpoint);
    }

    /// The endpoints granted here whose lease has lapsed by now.
    pub fn lapsed(&self) -> Vec<Arc<str>> {
        let now = self.clock.now();
        self.lock()
            .iter()
            .filter(|(_, until)| **until <= now)
            .map(|(e, _)| e.clone())
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Arc<str>, Instant>> {
        self.until.lock().expect("fence lock")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(3);

    fn fence() -> (Fence, Arc<ManualLeaseClock>) {
        let clock = Arc::new(ManualLeaseClock::default());
        (Fence::new(LEASE, clock.clone()), clock)
    }

    #[test]
    fn a_lease_holds_until_its_margin_before_it_could_lapse_in_the_database() {
        let (fence, clock) = fence();
        assert!(!fence.holds("e"), "nothing is held before a grant");
        fence.grant("e".into(), fence.now());
        assert!(fence.holds("e"));
        assert_eq!(fence.check("e"), Ok(()));
        // The margin is a fifth: 600 ms of a 3 s lease.
        clock.advance(LEASE - Fence::margin(LEASE) - Duration::from_millis(1));
        assert!(fence.holds("e"));
        clock.advance(Duration::from_millis(1));
        assert!(!fence.holds("e"), "held into the margin");
        assert_eq!(fence.check("e"), Err(Fenced));
        assert_eq!(fence.lapsed(), vec![Arc::<str>::from("e")]);
    }

    #[test]
    fn a_renewal_extends_a_lease_that_holds_and_not_one_that_lapsed() {
        let (fence, clock) = fence();
        fence.grant("e".into(), fence.now());
        clock.advance(LEASE / 3);
        let asked = fence.now();
        clock.advance(Duration::from_millis(50));
        assert!(fence.renew("e", asked));
        // Held from `asked`, not from the answer.
        clock.advance(LEASE - Fence::margin(LEASE) - Duration::from_millis(51));
        assert!(fence.holds("e"));
        clock.advance(Duration::from_millis(1));
        assert!(!fence.holds("e"));

        // A freeze past the lease: the database may answer that the lease is still this
        // node's, but another node may have held it meanwhile. The renewal does not revive it.
        let asked = fence.now();
        clock.advance(Duration::from_millis(10));
        assert!(!fence.renew("e", asked));
        assert!(!fence.holds("e"));
        // Only a fresh grant (after the queue was read again) does.
        fence.grant("e".into(), fence.now());
        assert!(fence.holds("e"));
    }

    #[test]
    fn an_answer_that_comes_back_after_the_lease_lapsed_does_not_extend_it() {
        let (fence, clock) = fence();
        fence.grant("e".into(), fence.now());
        let asked = fence.now();
        // The database was slow: its answer came after the lease had lapsed here.
        clock.advance(LEASE);
        assert!(!fence.renew("e", asked));
        assert!(!fence.renew("never-granted", asked));
        fence.revoke("e");
        assert!(fence.lapsed().is_empty());
    }
}
