//! Where time comes from. Everything that needs "now" or "wake me at T" gets an
//! `Arc<dyn Clock>` at start: the system clock in production, a scaled clock for
//! `--time-scale`, a manual clock in tests. Pure code (`policy`, `health`) takes time as an
//! argument instead.
//!
//! The clock governs the gateway's *schedule*: retry waits, the 72-hour deadline, health days,
//! retention. Network timeouts and attempt durations are real time, because the network is.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant, SystemTime};

use tokio::sync::watch;

use crate::model::Timestamp;

pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current (possibly simulated) time.
    fn now(&self) -> Timestamp;

    /// Completes once `now() >= at`. Completes at once when `at` is not in the future.
    fn sleep_until(&self, at: Timestamp) -> Sleep;
}

/// The real wall clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_system_time(SystemTime::now())
    }

    fn sleep_until(&self, at: Timestamp) -> Sleep {
        let wait = at.since(self.now());
        Box::pin(tokio::time::sleep(wait))
    }
}

/// Simulated time that starts at the real time of creation and runs `factor` times faster.
/// `--time-scale 3600` turns one real second into one simulated hour.
#[derive(Debug, Clone)]
pub struct ScaledClock {
    real_start: Instant,
    simulated_start: Timestamp,
    factor: f64,
}

impl ScaledClock {
    /// `factor` must be finite and positive; the CLI validates it.
    pub fn new(factor: f64) -> Self {
        assert!(factor.is_finite() && factor > 0.0, "time scale must be positive");
        ScaledClock {
            real_start: Instant::now(),
            simulated_start: SystemClock.now(),
            factor,
        }
    }
}

impl ScaledClock {
    /// The real time to sleep until simulated time reaches `at`. A hair longer than exact,
    /// so that `now() >= at` holds on wake-up despite the float scale's rounding.
    fn real_wait_until(&self, at: Timestamp) -> Duration {
        let simulated_wait = at.since(self.now());
        if simulated_wait.is_zero() {
            return Duration::ZERO;
        }
        simulated_wait.div_f64(self.factor) + Duration::from_micros(50)
    }
}

impl Clock for ScaledClock {
    fn now(&self) -> Timestamp {
        let real_ms = self.real_start.elapsed().as_secs_f64() * 1000.0;
        let simulated_ms = (real_ms * self.factor) as i64;
        Timestamp::from_millis(self.simulated_start.as_millis().saturating_add(simulated_ms))
    }

    fn sleep_until(&self, at: Timestamp) -> Sleep {
        Box::pin(tokio::time::sleep(self.real_wait_until(at)))
    }
}

/// A clock that moves only when told to. Sleepers wake as soon as it is advanced past
/// their time, so tests exercise days of schedule in microseconds and without sleeps.
#[derive(Clone)]
pub struct ManualClock {
    now: watch::Sender<Timestamp>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now", &*self.now.borrow())
            .finish()
    }
}

impl ManualClock {
    pub fn new(start: Timestamp) -> Self {
        ManualClock {
            now: watch::Sender::new(start),
        }
    }

    pub fn advance(&self, by: Duration) {
        self.now.send_modify(|t| *t = t.plus(by));
    }

    /// Moves the clock to `to`; never backwards.
    pub fn set(&self, to: Timestamp) {
        self.now.send_modify(|t| *t = (*t).max(to));
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        *self.now.borrow()
    }

    fn sleep_until(&self, at: Timestamp) -> Sleep {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as the clock; if it is gone, nothing will ever wake us,
            // which is the right answer for a stopped test clock.
            let _ = rx.wait_for(|now| *now >= at).await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn manual_clock_wakes_sleepers_when_advanced_past_their_time() {
        let clock = ManualClock::new(Timestamp::from_millis(1_000));
        let sleep = clock.sleep_until(Timestamp::from_millis(31_000));
        let task = tokio::spawn(sleep);
        clock.advance(Duration::from_secs(10));
        tokio::task::yield_now().await;
        assert!(!task.is_finished());
        clock.advance(Duration::from_secs(20));
        task.await.unwrap();
        assert_eq!(clock.now(), Timestamp::from_millis(31_000));
    }

    #[tokio::test]
    async fn manual_clock_never_moves_backwards() {
        let clock = ManualClock::new(Timestamp::from_millis(5_000));
        clock.set(Timestamp::from_millis(1_000));
        assert_eq!(clock.now(), Timestamp::from_millis(5_000));
    }

    #[test]
    fn scaled_clock_turns_a_simulated_hour_into_a_real_second() {
        let clock = ScaledClock::new(3600.0);
        let wait = clock.real_wait_until(clock.now().plus(Duration::from_secs(3600)));
        assert!(wait <= Duration::from_millis(1_001), "{wait:?}");
        assert!(wait >= Duration::from_millis(990), "{wait:?}");
        assert_eq!(
            clock.real_wait_until(clock.now().minus(Duration::from_secs(1))),
            Duration::ZERO
        );
    }
}
