//! What one plugin call's `Store` holds, and the host side of the plugin imports
//! (`log`, `config`, `crypto`, and a deny-everything WASI).
//!
//! Each call gets a fresh [`CallState`] built from that call's binding and secrets only, which
//! is why a plugin can never see another endpoint's config or key: they are not in its store.

pub(crate) mod config;
pub(crate) mod crypto;
pub(crate) mod log;

use std::collections::BTreeMap;
use std::sync::Arc;

use wasmtime::component::ResourceTable;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxBuilder, WasiCtxView, WasiView};

use super::limits::CallLimiter;
use crate::plugins::PluginLimits;

/// Bytes of standard output (and, separately, standard error) a plugin may write per call.
/// Writes past this fail inside the guest; nothing written there reaches the gateway's log.
pub(crate) const STDIO_CAPTURE_BYTES: usize = 4096;

/// The data of one plugin call's `Store`.
pub(crate) struct CallState {
    wasi: WasiCtx,
    table: ResourceTable,
    pub(crate) limiter: CallLimiter,
    pub(crate) config: Arc<BTreeMap<String, String>>,
    pub(crate) keys: crypto::CallKeys,
    pub(crate) log: log::CallLog,
}

impl CallState {
    /// A store's data for one call of plugin `plugin` (at `version`) with the binding's
    /// `config` and, for signers, the endpoint's derived keys.
    pub(crate) fn new(
        plugin: Arc<str>,
        version: Arc<str>,
        config: Arc<BTreeMap<String, String>>,
        keys: Vec<crypto::SigningKey>,
        limits: &PluginLimits,
    ) -> Self {
        CallState {
            wasi: deny_everything_wasi(),
            table: ResourceTable::new(),
            limiter: CallLimiter::new(limits.memory_bytes),
            config,
            keys: crypto::CallKeys::new(keys),
            log: log::CallLog::new(plugin, version, limits.log_lines_per_call),
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
/// stderr captured into small capped buffers that are dropped with the store. Clocks and
/// random stay available because language runtimes need them to start (hash-map seeds,
/// allocator setup); the contract still passes time in as `now-ms` so plugins do not depend
/// on them.
fn deny_everything_wasi() -> WasiCtx {
    let mut builder = WasiCtxBuilder::new();
    builder
        .stdout(MemoryOutputPipe::new(STDIO_CAPTURE_BYTES))
        .stderr(MemoryOutputPipe::new(STDIO_CAPTURE_BYTES))
        .allow_ip_name_lookup(false)
        .allow_tcp(false)
        .allow_udp(false)
        .socket_addr_check(|_, _| Box::pin(async { false }));
    builder.build()
}
