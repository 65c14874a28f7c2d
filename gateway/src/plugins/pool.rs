//! Idle plugin instances, kept for the next call of the same binding.
//!
//! Instantiating a component costs tens of microseconds (a store, a WASI context, the
//! instance's memories and tables, the start-up code); a small call on an instance that already
//! exists costs a few. So after a call that returned normally, its instance waits here, and
//! the next call of the same binding takes it instead of instantiating.
//!
//! An idle instance is only ever handed to a call of the same **binding**: the same plugin
//! version (each load gets its own id, so a reload never reuses the previous version's
//! instances), the same endpoint (name and URL) and the same plugin config. A plugin may keep
//! state in its memory from one call to the next, but never sees another endpoint's config,
//! keys or data. Instances that trapped or overran a limit never come back (see
//! [`super::call::run`]); the pool holds at most [`super::PluginLimits::idle_instances`],
//! dropping the least recently used first.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::call::PluginInstance;

/// The binding a call serves, which an idle instance must match exactly to be reused.
#[derive(Clone, Copy, Debug)]
pub(crate) struct BindingKey<'a> {
    /// The id of the plugin version (one per load of a file).
    pub(crate) load_id: u64,
    pub(crate) endpoint_name: &'a str,
    pub(crate) endpoint_url: &'a str,
    pub(crate) config: &'a BTreeMap<String, String>,
}

struct Idle {
    load_id: u64,
    endpoint_name: String,
    endpoint_url: String,
    instance: PluginInstance,
}

impl Idle {
    fn serves(&self, key: &BindingKey<'_>) -> bool {
        self.load_id == key.load_id
            && self.endpoint_name == key.endpoint_name
            && self.endpoint_url == key.endpoint_url
            && self.instance.config() == key.config
    }
}

/// Counters of the pool since the host started.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InstanceStats {
    /// Instances created (instantiated from a component) for calls.
    pub instantiated: u64,
    /// Calls served by an idle instance instead of a new one.
    pub reused: u64,
    /// Instances waiting for reuse now.
    pub idle: u64,
}

/// The idle instances of a host, least recently used first.
pub(crate) struct InstancePool {
    capacity: usize,
    state: Mutex<PoolState>,
}

#[derive(Default)]
struct PoolState {
    /// Least recently used first. A short list (`capacity` is tens), so a linear scan is
    /// cheaper than any index.
    idle: Vec<Idle>,
    instantiated: u64,
    reused: u64,
}

impl InstancePool {
    pub(crate) fn new(capacity: u32) -> Self {
        InstancePool {
            capacity: capacity as usize,
            state: Mutex::new(PoolState::default()),
        }
    }

    /// Takes the most recently used idle instance of `key`'s binding, if there is one.
    pub(crate) fn take(&self, key: &BindingKey<'_>) -> Option<PluginInstance> {
        let mut state = self.lock();
        let index = state.idle.iter().rposition(|idle| idle.serves(key))?;
        state.reused += 1;
        Some(state.idle.remove(index).instance)
    }

    /// Counts an instance created because no idle one served the call.
    pub(crate) fn count_instantiated(&self) {
        self.lock().instantiated += 1;
    }

    /// Keeps `instance` for the next call of its binding: version `load_id`, the endpoint
    /// `(name, url)`, and the config the instance holds. When the pool is full the least
    /// recently used instance is dropped; with a capacity of 0 `instance` itself is.
    pub(crate) fn put(
        &self,
        load_id: u64,
        (endpoint_name, endpoint_url): (String, String),
        instance: PluginInstance,
    ) {
        if self.capacity == 0 {
            return;
        }
        let evicted = {
            let mut state = self.lock();
            let evicted = if state.idle.len() >= self.capacity {
                Some(state.idle.remove(0))
            } else {
                None
            };
            state.idle.push(Idle {
                load_id,
                endpoint_name,
                endpoint_url,
                instance,
            });
            evicted
        };
        // Tearing a store down takes microseconds: not under the lock.
        drop(evicted);
    }

    /// Drops every idle instance of a plugin version that `is_current` says is no longer
    /// loaded (replaced or deleted).
    pub(crate) fn retain_versions(&self, is_current: impl Fn(u64) -> bool) {
        let stale: Vec<Idle> = {
            let mut state = self.lock();
            let (keep, stale) = std::mem::take(&mut state.idle)
                .into_iter()
                .partition(|idle| is_current(idle.load_id));
            state.idle = keep;
            stale
        };
        drop(stale);
    }

    pub(crate) fn stats(&self) -> InstanceStats {
        let state = self.lock();
        InstanceStats {
            instantiated: state.instantiated,
            reused: state.reused,
            idle: state.idle.len() as u64,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        // The state stays consistent across a panic (every change is one push or remove).
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}
