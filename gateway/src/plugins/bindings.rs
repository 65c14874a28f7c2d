//! The host-side bindings of the plugin contract, generated once per version of it.
//!
//! The current contract (`wit/plugin.wit`, `hookgate:plugin@0.2.0`) and the first one
//! (`wit/v1/plugin.wit`, `hookgate:plugin@0.1.0`, for components built against it) are two
//! versions of one package, so each needs its own `bindgen!`: a component imports the
//! interfaces of the version it was built against, and the linker serves both. Each is
//! generated from its `plugin-host` world, which imports every interface a plugin may use; the
//! exports of the `transformer`, `signer` and `backoff` worlds are called by name with the
//! generated types (see [`super::registry`] and [`super::call`]). All `bindgen!` output lives
//! in this module.

mod current {
    wasmtime::component::bindgen!({
        world: "plugin-host",
        path: "../wit",
        // Host functions return `wasmtime::Result`: an error is a host bug or an abuse the
        // host refuses (a stale handle, too many key requests, hashing over budget) and traps
        // the plugin's call. Hashing is async: it yields to the runtime between slices of its
        // input.
        imports: {
            "hookgate:plugin/crypto.hmac": async | trappable,
            "hookgate:plugin/crypto.digest": async | trappable,
            default: trappable,
        },
        with: {
            "hookgate:plugin/crypto.signing-key": crate::plugins::host::crypto::SigningKey,
            "hookgate:plugin/message.outgoing-message": crate::plugins::host::message::LentMessage,
        },
    });
}

/// The first version of the contract, which the host adapts to the current one
/// ([`super::v1`]).
pub(crate) mod v1 {
    wasmtime::component::bindgen!({
        world: "plugin-host",
        path: "../wit/v1",
        imports: {
            "hookgate:plugin/crypto.hmac": async | trappable,
            "hookgate:plugin/crypto.digest": async | trappable,
            default: trappable,
        },
        with: {
            "hookgate:plugin/crypto.signing-key": crate::plugins::host::crypto::SigningKey,
        },
    });

    pub(crate) use self::hookgate::plugin::types::{
        Decision, DeliveryInfo, EndpointInfo, EventInfo, Message, Outcome, PluginError, RetryContext,
    };
    pub(crate) use self::hookgate::plugin::{config, crypto, log, types};
}

pub(crate) use self::current::PluginHost;
pub(crate) use self::current::hookgate::plugin::message;
pub(crate) use self::current::hookgate::plugin::types::{
    Decision, DeliveryInfo, Edits, EndpointInfo, EventInfo, Outcome, PluginError, RetryContext,
};
pub(crate) use self::current::hookgate::plugin::{config, crypto, log, types};
