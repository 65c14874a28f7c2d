//! What a plugin instance's `Store` holds, and the host side of the plugin imports
//! (`log`, `config`, `crypto`, `message`, the first contract version's names for them, and a
//! deny-everything WASI).
//!
//! A [`CallState`] is built for one binding (its config) and serves only calls of that binding,
//! possibly several in a row when the instance is reused (see [`super::pool`]); the keys are
//! handed in per call and taken out again when the call ends. That is why a plugin can never
//! see another endpoint's config or key: they are never in its store.

pub(crate) mod config;
pub(crate) mod crypto;
pub(crate) mod log;
pub(crate) mod message;
mod v1;

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::SinkOutputStream;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::limits::CallLimiter;
use crate::plugins::PluginLimits;

/// The data of one plugin instance's `Store`: the binding it serves, and the state of the call
/// it is running.
pub(crate) struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: CallLimiter,
    pub(crate) config: Arc<BTreeMap<String, String>>,
    pub(crate) keys: crypto::CallKeys,
    /// Bytes the host may hash for one call (`crypto.hmac` and `crypto.digest` together).
    pub(crate) hash_bytes_per_call: u64,
    /// The host's hashing turns, shared by every instance.
    pub(crate) hashing: Arc<tokio::sync::Semaphore>,
    pub(crate) log: log::CallLog,
    /// The running call's crossings, counted when the store has the counting hook.
    crossings: Crossings,
    /// The running call's epoch ticks, each one of the host calls the hook counted.
    pub(crate) crossings_ticks: u64,
}

/// How often a call crossed between the host and the plugin: entries into the plugin's code
/// (the export itself, every `cabi_realloc` the host makes to lower a string or list into the
/// plugin's memory, the post-return cleanup) and calls out of it into the host (imports,
/// WASI, and the runtime's own calls such as growing memory).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Crossings {
    pub guest_entries: u64,
    pub host_calls: u64,
}

impl std::ops::AddAssign for Crossings {
    fn add_assign(&mut self, other: Crossings) {
        self.guest_entries += other.guest_entries;
        self.host_calls += other.host_calls;
    }
}

/// Counts every crossing of the store's calls into [`CallState::crossings`]; installed on a
/// store only when crossings are being counted (it is a call per crossing).
pub(crate) fn count_crossings(store: &mut wasmtime::Store<CallState>) {
    store.call_hook(|mut store, hook| {
        let crossings = &mut store.data_mut().crossings;
        match hook {
            wasmtime::CallHook::CallingWasm => crossings.guest_entries += 1,
            wasmtime::CallHook::CallingHost => crossings.host_calls += 1,
            wasmtime::CallHook::ReturningFromWasm | wasmtime::CallHook::ReturningFromHost => {}
        }
        Ok(())
    });
}

impl CallState {
    /// A store's data for calls of plugin `plugin` (at `version`) with the binding's `config`.
    /// It holds no keys until [`CallState::begin_call`] hands them in.
    pub(crate) fn new(
        plugin: Arc<str>,
        version: Arc<str>,
        config: Arc<BTreeMap<String, String>>,
        limits: &PluginLimits,
        hashing: Arc<tokio::sync::Semaphore>,
    ) -> Self {
        CallState {
            wasi: deny_everything_wasi(),
            table: ResourceTable::new(),
            limiter: CallLimiter::new(limits.memory_bytes),
            config,
            keys: crypto::CallKeys::default(),
            hash_bytes_per_call: limits.hash_bytes_per_call,
            hashing,
            log: log::CallLog::new(plugin, version, limits.log_lines_per_call),
            crossings: Crossings::default(),
            crossings_ticks: 0,
        }
    }

    /// Starts a call: hands in its keys (for a signer, the endpoint's, newest first) and a
    /// fresh log budget.
    pub(crate) fn begin_call(&mut self, keys: Vec<crypto::SigningKey>) {
        self.keys.begin_call(keys);
        self.log.begin_call();
        self.crossings = Crossings::default();
        self.crossings_ticks = 0;
    }

    /// Ends a call that returned normally: reports the log lines it dropped, and takes its
    /// keys back, deleting every key handle the call was given from the resource table, so
    /// that nothing of this call's keys is reachable from the next call. A handle the plugin
    /// kept (a leaked rotating key) then names nothing, and using it traps.
    pub(crate) fn end_call(&mut self) {
        self.log.end_call();
        for handle in self.keys.end_call() {
            let key = wasmtime::component::Resource::<crypto::SigningKey>::new_own(handle);
            // Check the type before deleting: the guest may have dropped the key already and
            // the slot may now hold one of its WASI resources, which must stay.
            if self.table.get(&key).is_ok() {
                let _ = self.table.delete(key);
            }
        }
    }

    /// The crossings of the running (or just ended) call, without its epoch ticks: those come
    /// with the time the call took, not with what it did.
    pub(crate) fn crossings(&self) -> Crossings {
        Crossings {
            guest_entries: self.crossings.guest_entries,
            host_calls: self.crossings.host_calls.saturating_sub(self.crossings_ticks),
        }
    }

    pub(crate) fn table(&mut self) -> &mut ResourceTable {
        &mut self.table
    }
}

/// The `types` interface declares types only; there is nothing to implement.
impl crate::plugins::bindings::types::Host for CallState {}

impl WasiView for CallState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

/// WASI as a plugin sees it: no preopened directories (so no files), no sockets and no name
/// lookups (so no network), no environment variables, no arguments, empty stdin, and stdout /
/// stderr that accept every write and discard it (nothing written there reaches the gateway's
/// log or is kept in memory, however many calls an instance serves). Clocks and
/// random stay available because language runtimes need them to start (hash-map seeds,
/// allocator setup); the contract still passes time in as `now-ms` so plugins do not depend
/// on them.
fn deny_everything_wasi() -> WasiCtx {
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdout(SinkOutputStream)
        .stderr(SinkOutputStream)
        .allow_ip_name_lookup(false)
        .allow_tcp(false)
        .allow_udp(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    builder.build()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Secret;
    use crate::plugins::bindings::crypto::Host as _;
    use wasmtime::component::Resource;

    fn key(secret: &str) -> crypto::SigningKey {
        crypto::SigningKey::from_secret(&Secret::new(secret)).unwrap()
    }

    #[test]
    fn ending_a_call_deletes_every_key_handle_it_was_given_and_nothing_else() {
        let mut state = CallState::new(
            Arc::from("signer"),
            Arc::from("0123456789ab"),
            Arc::new(BTreeMap::new()),
            &PluginLimits::default(),
            Arc::new(tokio::sync::Semaphore::new(1)),
        );
        // Something of the instance's own (a WASI resource, say) lives in the same table.
        let own = state.table.push(String::from("stream")).unwrap();

        state.begin_call(vec![key("new"), key("old")]);
        let primary = state.hand_over_primary_key().unwrap().unwrap();
        let rotating = state.rotating_keys().unwrap();
        assert_eq!(rotating.len(), 1);
        let rotating_rep = rotating[0].rep();
        state.end_call();

        let gone = |state: &mut CallState, rep: u32| {
            state
                .table
                .get(&Resource::<crypto::SigningKey>::new_own(rep))
                .is_err()
        };
        assert!(gone(&mut state, primary.rep()));
        assert!(gone(&mut state, rotating_rep));
        assert_eq!(state.table.get(&own).unwrap(), "stream");

        // The next call has its own keys only, and no handle for a missing secret.
        state.begin_call(Vec::new());
        assert!(state.hand_over_primary_key().is_none());
        assert!(state.rotating_keys().unwrap().is_empty());
        state.end_call();
    }
}
