//! The host-side bindings of the plugin contract (`wit/plugin.wit`), generated once.
//!
//! Generated from the `plugin-host` world, which imports every interface a plugin may use;
//! the exports of the `transformer`, `signer` and `backoff` worlds are called by name with the
//! generated types (see [`super::registry`]). All `bindgen!` output lives in this module.

wasmtime::component::bindgen!({
    world: "plugin-host",
    path: "../wit",
    // Host functions return `wasmtime::Result`: an error is a host bug or an abuse the host
    // refuses (a stale handle, too many key requests, hashing over budget) and traps the
    // plugin's call. Hashing is async: it yields to the runtime between slices of its input.
    imports: {
        "hookgate:plugin/crypto.hmac": async | trappable,
        "hookgate:plugin/crypto.digest": async | trappable,
        default: trappable,
    },
    with: {
        "hookgate:plugin/crypto.signing-key": super::host::crypto::SigningKey,
    },
});

pub(crate) use self::hookgate::plugin::types::{
    Decision, DeliveryInfo, EndpointInfo, EventInfo, Message, Outcome, PluginError, RetryContext,
};
pub(crate) use self::hookgate::plugin::{config, crypto, log, types};
