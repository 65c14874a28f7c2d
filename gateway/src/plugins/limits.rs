//! The sandbox's limits: one `Engine` with epoch interruption and a ticker thread, a per-call
//! CPU deadline and wall-clock limit ([`WallClock`]), a memory cap that fails with an error
//! saying "memory", and the mapping of a failed call to a [`FailureDetail`].

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter};

use super::host::CallState;
use super::host::crypto::{HashBudgetExceeded, NoStandardWebhooksForm};
use super::{FailureDetail, PluginLimits};

/// How often the ticker thread advances the engine's epoch. A running plugin is checked (and
/// yields to the async runtime) once per tick, so this is both the deadline's resolution and
/// the longest a plugin holds a runtime worker without yielding.
pub(crate) const EPOCH_TICK: Duration = Duration::from_millis(2);

/// Table elements one call may grow its tables to in total (function tables of large guests,
/// like Python's, hold tens of thousands of entries).
const TABLE_ELEMENTS_MAX: usize = 200_000;

/// Per-component sizes of the pooling allocator. Python components (componentize-py) need
/// more core instances and memories than Rust ones; these fit both.
const POOL_CORE_INSTANCES_PER_COMPONENT: u32 = 50;
const POOL_MEMORIES_PER_COMPONENT: u32 = 8;
const POOL_TABLES_PER_COMPONENT: u32 = 16;

/// The engine every plugin of a [`super::PluginHost`] is compiled for and runs on.
pub(crate) struct PluginEngine {
    pub(crate) engine: Engine,
    /// True when the pooling allocator could reserve its address space.
    pub(crate) pooling: bool,
    /// Host hashing takes turns through this, one slice at a time across the host, so that it
    /// never occupies more than one of the runtime's threads at once (see `host::crypto`).
    pub(crate) hashing: Arc<tokio::sync::Semaphore>,
    /// Whether instances created from now on count their crossings
    /// ([`super::PluginHost::count_crossings`]).
    pub(crate) count_crossings: AtomicBool,
    ticker_stop: Arc<AtomicBool>,
    ticker: Option<std::thread::JoinHandle<()>>,
}

impl Drop for PluginEngine {
    /// Stops the ticker and joins it: it notices within one tick (2 ms).
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
        if let Some(ticker) = self.ticker.take() {
            let _ = ticker.join();
        }
    }
}

impl PluginEngine {
    /// Builds the engine: pooling allocator sized for `limits.max_concurrent_calls` plus
    /// `limits.idle_instances` (plus headroom for validation calls) where the address space
    /// allows, else on-demand
    /// allocation; then starts the epoch ticker thread, which is stopped and joined when this is
    /// dropped.
    pub(crate) fn new(limits: &PluginLimits) -> anyhow::Result<Self> {
        let (engine, pooling) = match Engine::new(&config(limits, true)) {
            Ok(engine) => (engine, true),
            Err(pooling_err) => {
                tracing::info!(
                    error = %pooling_err,
                    "plugin pooling allocator unavailable here; using on-demand allocation"
                );
                let engine = Engine::new(&config(limits, false))
                    .map_err(|e| anyhow::anyhow!("cannot create the plugin engine: {e:?}"))?;
                (engine, false)
            }
        };
        let ticker_stop = Arc::new(AtomicBool::new(false));
        let stop = Arc::clone(&ticker_stop);
        let weak = engine.weak();
        let ticker = std::thread::Builder::new()
            .name("hookgate-plugin-epoch".into())
            .spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(engine) => engine.increment_epoch(),
                        None => break,
                    }
                }
            })?;
        Ok(PluginEngine {
            engine,
            pooling,
            hashing: Arc::new(tokio::sync::Semaphore::new(HASHING_TURNS)),
            count_crossings: AtomicBool::new(false),
            ticker_stop,
            ticker: Some(ticker),
        })
    }
}

fn config(limits: &PluginLimits, pooling: bool) -> Config {
    let mut config = Config::new();
    config.epoch_interruption(true);
    config.wasm_component_model(true);
    config.parallel_compilation(true);
    if pooling {
        // Idle instances kept for reuse hold their slots while they wait.
        let slots = limits
            .max_concurrent_calls
            .saturating_add(limits.idle_instances)
            .saturating_add(VALIDATION_SLOTS);
        let mut pool = PoolingAllocationConfig::new();
        pool.total_component_instances(slots)
            .total_core_instances(slots.saturating_mul(POOL_CORE_INSTANCES_PER_COMPONENT))
            .total_memories(slots.saturating_mul(POOL_MEMORIES_PER_COMPONENT))
            .total_tables(slots.saturating_mul(POOL_TABLES_PER_COMPONENT))
            .total_stacks(slots)
            .max_core_instances_per_component(POOL_CORE_INSTANCES_PER_COMPONENT)
            .max_memories_per_component(POOL_MEMORIES_PER_COMPONENT)
            .max_tables_per_component(POOL_TABLES_PER_COMPONENT)
            .max_memory_size(limits.memory_bytes)
            .table_elements(TABLE_ELEMENTS_MAX)
            .max_core_instance_size(8 << 20)
            .max_component_instance_size(1 << 20);
        config.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    config
}

/// Hashing slices that may run at once across the host.
const HASHING_TURNS: usize = 1;

/// Pool slots kept beyond `max_concurrent_calls` for load-time validation and `check`.
pub(crate) const VALIDATION_SLOTS: u32 = 2;

/// Raised inside a call that ran past one of its time limits.
#[derive(Debug, Clone, Copy, thiserror::Error)]
pub(crate) enum DeadlineExceeded {
    #[error("the plugin ran past its CPU time limit of {limit_ms} ms")]
    Cpu { limit_ms: u64 },
    #[error(
        "the plugin call ran past its wall-clock limit of {limit_ms} ms (sleeping, waiting and host calls count)"
    )]
    Wall { limit_ms: u64 },
}

fn millis(limit: Duration) -> u64 {
    u64::try_from(limit.as_millis()).unwrap_or(u64::MAX)
}

impl DeadlineExceeded {
    pub(crate) fn cpu(limits: &PluginLimits) -> Self {
        DeadlineExceeded::Cpu {
            limit_ms: millis(limits.call_timeout),
        }
    }

    pub(crate) fn wall(limits: &PluginLimits) -> Self {
        DeadlineExceeded::Wall {
            limit_ms: millis(limits.wall_limit()),
        }
    }
}

/// Raised inside a call that tried to grow its memory past the cap.
#[derive(Debug, thiserror::Error)]
#[error("the plugin tried to grow its memory to {desired_bytes} bytes, over the cap of {cap_bytes} bytes")]
pub(crate) struct MemoryCapExceeded {
    pub(crate) desired_bytes: usize,
    pub(crate) cap_bytes: usize,
}

/// The memory cap of one instance, over all of the component's linear memories together.
/// Memory never shrinks, so an instance reused for several calls counts everything it grew to
/// in earlier calls too; the pool keeps only instances that grew little (see
/// [`super::PluginLimits::reuse_max_growth_bytes`]).
///
/// Growing past the cap is an error (a trap that names memory), not a refused grow: a Rust
/// guest answers a refused grow with `unreachable`, which would read as an ordinary trap.
pub(crate) struct CallLimiter {
    cap_bytes: usize,
    used_bytes: usize,
}

impl CallLimiter {
    pub(crate) fn new(cap_bytes: usize) -> Self {
        CallLimiter {
            cap_bytes,
            used_bytes: 0,
        }
    }

    /// The instance's linear memory, all memories together, in bytes.
    pub(crate) fn used_bytes(&self) -> usize {
        self.used_bytes
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(
        &mut self,
        current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        let growth = desired.saturating_sub(current);
        let total = self.used_bytes.saturating_add(growth);
        if total > self.cap_bytes {
            return Err(wasmtime::Error::new(MemoryCapExceeded {
                desired_bytes: total,
                cap_bytes: self.cap_bytes,
            }));
        }
        if maximum.is_some_and(|max| desired > max) {
            return Ok(false);
        }
        self.used_bytes = total;
        Ok(true)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> wasmtime::Result<bool> {
        Ok(desired <= TABLE_ELEMENTS_MAX && maximum.is_none_or(|max| desired <= max))
    }
}

/// Arms a store's CPU deadline for one call (again before every call of a reused instance,
/// which replaces the previous call's deadline): the plugin may run `call_timeout` worth of
/// epoch ticks, yielding to the async runtime at each tick, and fails with
/// [`DeadlineExceeded::Cpu`] after. Ticks spent waiting to be polled again are not counted, so
/// a busy runtime does not eat a plugin's budget. Time outside guest code is [`WallClock`]'s.
pub(crate) fn arm_deadline(store: &mut wasmtime::Store<CallState>, limits: &PluginLimits) {
    let mut ticks_left = deadline_ticks(limits.call_timeout);
    let cpu = DeadlineExceeded::cpu(limits);
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |mut store| {
        // A tick is a call out of the guest too; the crossings leave it out (it comes with
        // time, not with what the call does).
        store.data_mut().crossings_ticks += 1;
        if ticks_left == 0 {
            return Err(wasmtime::Error::new(cpu));
        }
        ticks_left -= 1;
        Ok(wasmtime::UpdateDeadline::Yield(1))
    });
}

/// The wall-clock limit around a whole call: guest code, host calls, and the guest sleeping
/// or waiting on a WASI pollable all count. What does not count is the time the call waits to
/// be polled again after guest code yielded at an epoch tick: that is the gateway's own
/// runtime being busy, which must not fail a plugin, and it is the same time the CPU deadline
/// leaves out. Such a yield is recognised by the call having woken itself before it returned
/// (wasmtime's yield does; a host wait, and tokio's deferred `yield_now` between hashing
/// slices, do not, so they count).
///
/// When the limit passes, the next poll ends the call: its future (the guest's fiber, its
/// instance) is dropped.
pub(crate) struct WallClock<F> {
    call: Pin<Box<F>>,
    deadline: tokio::time::Instant,
    timer: Pin<Box<tokio::time::Sleep>>,
    /// When the call last yielded, until it is polled again.
    yielded_at: Option<tokio::time::Instant>,
}

/// The call ran past its wall-clock limit.
#[derive(Debug)]
pub(crate) struct WallClockElapsed;

impl<F: Future> WallClock<F> {
    pub(crate) fn new(call: F, limit: Duration) -> Self {
        let deadline = tokio::time::Instant::now() + limit;
        WallClock {
            call: Box::pin(call),
            deadline,
            timer: Box::pin(tokio::time::sleep_until(deadline)),
            yielded_at: None,
        }
    }
}

impl<F: Future> Future for WallClock<F> {
    type Output = Result<F::Output, WallClockElapsed>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut std::task::Context<'_>) -> std::task::Poll<Self::Output> {
        let this = &mut *self;
        if let Some(yielded_at) = this.yielded_at.take() {
            // Waiting in the runtime's queue is not the plugin's time.
            this.deadline += yielded_at.elapsed();
            this.timer.as_mut().reset(this.deadline);
        }
        if tokio::time::Instant::now() >= this.deadline {
            return std::task::Poll::Ready(Err(WallClockElapsed));
        }
        let woke = Arc::new(WokeFlag {
            woke: AtomicBool::new(false),
            waker: cx.waker().clone(),
        });
        let waker = std::task::Waker::from(Arc::clone(&woke));
        if let std::task::Poll::Ready(output) = this
            .call
            .as_mut()
            .poll(&mut std::task::Context::from_waker(&waker))
        {
            return std::task::Poll::Ready(Ok(output));
        }
        if woke.woke.load(Ordering::Acquire) {
            this.yielded_at = Some(tokio::time::Instant::now());
            return std::task::Poll::Pending;
        }
        match this.timer.as_mut().poll(cx) {
            std::task::Poll::Ready(()) => std::task::Poll::Ready(Err(WallClockElapsed)),
            std::task::Poll::Pending => std::task::Poll::Pending,
        }
    }
}

/// A waker that remembers whether it was woken, passing the wake on.
struct WokeFlag {
    woke: AtomicBool,
    waker: std::task::Waker,
}

impl std::task::Wake for WokeFlag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woke.store(true, Ordering::Release);
        self.waker.wake_by_ref();
    }
}

/// The number of epoch ticks in `call_timeout`, at least one.
pub(crate) fn deadline_ticks(call_timeout: Duration) -> u64 {
    let ticks = call_timeout.as_micros() / EPOCH_TICK.as_micros().max(1);
    u64::try_from(ticks).unwrap_or(u64::MAX).max(1)
}

/// Frames of one function in a trap's backtrace (wasmtime keeps at most 20) from which an
/// out-of-bounds access reads as a stack overflow.
const RECURSION_FRAMES_MIN: usize = 16;

/// Whether a trap's backtrace is a full one of (mostly) a single function calling itself. A
/// Rust or C guest keeps its stack in linear memory below its data and never checks it: deep
/// recursion runs the stack pointer below zero, and the first write there is an
/// out-of-bounds access, not a wasmtime stack overflow.
fn looks_like_recursion(backtrace: &wasmtime::WasmBacktrace) -> bool {
    let frames = backtrace.frames();
    let mut counts: std::collections::HashMap<(&str, u32), usize> = std::collections::HashMap::new();
    for frame in frames {
        *counts
            .entry((frame.module().name().unwrap_or(""), frame.func_index()))
            .or_default() += 1;
    }
    counts.values().any(|&n| n >= RECURSION_FRAMES_MIN)
}

/// What kind of failure a call's error is: the deadline, the memory cap, the hashing budget,
/// a stack overflow, or any other trap.
pub(crate) fn classify(error: &wasmtime::Error) -> FailureDetail {
    let mut detail = FailureDetail::Trap;
    let mut out_of_bounds = false;
    // wasmtime attaches the backtrace as context of the error, not as a cause.
    let recursion = error
        .downcast_ref::<wasmtime::WasmBacktrace>()
        .is_some_and(looks_like_recursion);
    for cause in error.chain() {
        if cause.is::<DeadlineExceeded>() {
            return FailureDetail::Timeout;
        }
        if cause.is::<MemoryCapExceeded>() {
            return FailureDetail::Memory;
        }
        if cause.is::<HashBudgetExceeded>() {
            return FailureDetail::CryptoBudget;
        }
        if cause.is::<NoStandardWebhooksForm>() {
            return FailureDetail::BadSecret;
        }
        if let Some(trap) = cause.downcast_ref::<wasmtime::Trap>() {
            match trap {
                wasmtime::Trap::Interrupt | wasmtime::Trap::OutOfFuel => detail = FailureDetail::Timeout,
                wasmtime::Trap::AllocationTooLarge => detail = FailureDetail::Memory,
                wasmtime::Trap::StackOverflow => detail = FailureDetail::StackOverflow,
                wasmtime::Trap::MemoryOutOfBounds => out_of_bounds = true,
                _ => {}
            }
        }
    }
    if out_of_bounds && recursion {
        return FailureDetail::StackOverflow;
    }
    detail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_cap_counts_all_memories_together() {
        let mut limiter = CallLimiter::new(100);
        assert!(limiter.memory_growing(0, 60, None).unwrap());
        let err = limiter.memory_growing(0, 60, None).unwrap_err();
        assert_eq!(classify(&err), FailureDetail::Memory);
        assert!(limiter.memory_growing(0, 40, None).unwrap());
    }

    #[test]
    fn a_grow_past_the_declared_maximum_is_refused_not_trapped() {
        let mut limiter = CallLimiter::new(1000);
        assert!(!limiter.memory_growing(10, 50, Some(20)).unwrap());
    }

    /// Lets the runtime run other tasks before this one goes on, the way wasmtime yields at an
    /// epoch tick: the task wakes itself before it returns `Pending`, so [`WallClock`] counts the
    /// wait as the runtime's time. (`tokio::task::yield_now` defers its wake, which would look like
    /// a wait of the plugin's own, as host hashing wants.)
    async fn yield_to_runtime() {
        let mut yielded = false;
        std::future::poll_fn(|cx| {
            if yielded {
                return std::task::Poll::Ready(());
            }
            yielded = true;
            cx.waker().wake_by_ref();
            std::task::Poll::Pending
        })
        .await;
    }

    #[tokio::test]
    async fn the_wall_clock_ends_a_call_that_waits_past_its_limit() {
        let started = std::time::Instant::now();
        let sleeping = WallClock::new(
            tokio::time::sleep(Duration::from_secs(20)),
            Duration::from_millis(50),
        );
        assert!(sleeping.await.is_err());
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        let quick = WallClock::new(
            tokio::time::sleep(Duration::from_millis(1)),
            Duration::from_secs(5),
        );
        assert!(quick.await.is_ok());
    }

    #[tokio::test(flavor = "current_thread")]
    async fn time_a_yielded_call_waits_for_a_busy_runtime_is_not_counted() {
        // Each time the call yields, another task holds the runtime's one thread for 20 ms.
        let busy = tokio::spawn(async {
            for _ in 0..10 {
                std::thread::sleep(Duration::from_millis(20));
                tokio::task::yield_now().await;
            }
        });
        let started = std::time::Instant::now();
        let yielding = WallClock::new(
            async {
                for _ in 0..10 {
                    yield_to_runtime().await;
                }
            },
            Duration::from_millis(50),
        );
        assert!(yielding.await.is_ok(), "only the runtime's time passed");
        assert!(
            started.elapsed() >= Duration::from_millis(100),
            "{:?}",
            started.elapsed()
        );
        busy.await.unwrap();
    }

    #[test]
    fn deadline_has_at_least_one_tick() {
        assert_eq!(deadline_ticks(Duration::ZERO), 1);
        assert_eq!(deadline_ticks(Duration::from_millis(100)), 50);
    }

    #[test]
    fn deadline_errors_classify_as_timeout() {
        let limits = PluginLimits::default();
        let wall = wasmtime::Error::new(DeadlineExceeded::wall(&limits));
        assert_eq!(classify(&wall), FailureDetail::Timeout);
        let err = wasmtime::Error::new(DeadlineExceeded::cpu(&limits));
        assert_eq!(classify(&err), FailureDetail::Timeout);
        assert_eq!(classify(&wasmtime::Error::msg("boom")), FailureDetail::Trap);
    }
}
