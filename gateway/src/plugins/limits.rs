//! The sandbox's limits: one `Engine` with epoch interruption and a ticker thread, a per-call
//! CPU deadline and wall-clock deadline, a memory cap that fails with an error saying "memory", and the mapping
//! of a failed call to a [`FailureDetail`].

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, ResourceLimiter};

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
    ticker_stop: Arc<AtomicBool>,
}

impl Drop for PluginEngine {
    fn drop(&mut self) {
        self.ticker_stop.store(true, Ordering::Relaxed);
    }
}

impl PluginEngine {
    /// Builds the engine: pooling allocator sized for `limits.max_concurrent_calls` plus
    /// `limits.idle_instances` (plus headroom for validation calls) where the address space
    /// allows, else on-demand
    /// allocation; then starts the epoch ticker thread, which stops when this is dropped.
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
        std::thread::Builder::new()
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
            ticker_stop,
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

/// Arms a store's deadlines for one call (again before every call of a reused instance, which
/// replaces the previous call's): the plugin may run `call_timeout` worth of epoch ticks,
/// yielding to the async runtime at each tick, and fails with [`DeadlineExceeded::Cpu`] after;
/// ticks spent waiting to be polled again are not counted, so a busy runtime does not eat a
/// plugin's CPU budget. At every tick it also fails with [`DeadlineExceeded::Wall`] once
/// `wall_deadline` has passed; time outside guest code (host calls, WASI sleeps and polls) is
/// bounded by the caller's timer on the same deadline.
pub(crate) fn arm_deadline<T: Send>(
    store: &mut wasmtime::Store<T>,
    limits: &PluginLimits,
    wall_deadline: Instant,
) {
    let mut ticks_left = deadline_ticks(limits.call_timeout);
    let (cpu, wall) = (DeadlineExceeded::cpu(limits), DeadlineExceeded::wall(limits));
    store.set_epoch_deadline(1);
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= wall_deadline {
            return Err(wasmtime::Error::new(wall));
        }
        if ticks_left == 0 {
            return Err(wasmtime::Error::new(cpu));
        }
        ticks_left -= 1;
        Ok(wasmtime::UpdateDeadline::Yield(1))
    });
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
