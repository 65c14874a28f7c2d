//! Write a hookgate plugin as one annotated function.
//!
//! ```ignore
//! use hookgate_plugin::transformer::*;
//!
//! #[hookgate_plugin::transform]
//! fn label(_endpoint: EndpointInfo, event: EventInfo, _delivery: DeliveryInfo, mut message: Message)
//!     -> Result<Outcome, PluginError> {
//!     let label = config::get("label").unwrap_or(event.event_type);
//!     message.headers.push(("x-event-label".into(), label.into_bytes()));
//!     Ok(Outcome::Forward(message))
//! }
//! ```
//!
//! with `hookgate-plugin = { …, features = ["transformer"] }` in `Cargo.toml` (`signer` with
//! `#[sign]`, `backoff` with `#[backoff]`) and `crate-type = ["cdylib"]`. Build with
//! `cargo build --release --target wasm32-wasip2`: the `.wasm` is the plugin. Each world's
//! module holds its types (`EndpointInfo`, `Message`, `Outcome`, …) and the imports the world
//! may use (`config`, `log`, and for a signer `crypto`), generated from `wit/plugin.wit`; the
//! attribute writes the `Guest` implementation and the export. The contract and the limits:
//! `docs/writing-a-plugin.md`.

// wit-bindgen's generated export glue takes one argument per flattened WIT value.
#![allow(clippy::too_many_arguments)]

// The generated code names this crate by its path, from inside it too.
extern crate self as hookgate_plugin;

pub use hookgate_plugin_macros::{backoff, sign, transform};

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

/// The `transformer` world: rewrite an attempt's request, or drop the delivery.
#[cfg(feature = "transformer")]
pub mod transformer {
    wit_bindgen::generate!({
        world: "transformer",
        path: "wit",
        pub_export_macro: true,
        export_macro_name: "__export_transformer",
        default_bindings_module: "::hookgate_plugin::transformer",
        runtime_path: "::hookgate_plugin::__wit_bindgen::rt",
    });
    pub use self::hookgate::plugin::{config, log};
}

/// The `signer` world: the signature headers of an attempt's final request.
#[cfg(feature = "signer")]
pub mod signer {
    wit_bindgen::generate!({
        world: "signer",
        path: "wit",
        pub_export_macro: true,
        export_macro_name: "__export_signer",
        default_bindings_module: "::hookgate_plugin::signer",
        runtime_path: "::hookgate_plugin::__wit_bindgen::rt",
    });
    pub use self::hookgate::plugin::crypto::{self, HashAlgorithm, KeyForm};
    pub use self::hookgate::plugin::{config, log};
}

/// The `backoff` world: the wait before the next attempt of a failed delivery.
#[cfg(feature = "backoff")]
pub mod backoff {
    wit_bindgen::generate!({
        world: "backoff",
        path: "wit",
        pub_export_macro: true,
        export_macro_name: "__export_backoff",
        default_bindings_module: "::hookgate_plugin::backoff",
        runtime_path: "::hookgate_plugin::__wit_bindgen::rt",
    });
    pub use self::hookgate::plugin::{config, log};
}
