//! Write a hookgate plugin as one annotated function.
//!
//! ```ignore
//! use hookgate_plugin::transformer::*;
//!
//! #[hookgate_plugin::transform]
//! fn label(_endpoint: EndpointInfo, event: EventInfo, _delivery: DeliveryInfo, message: &Message)
//!     -> Result<Outcome, PluginError> {
//!     let label = config::get("label").unwrap_or(event.event_type);
//!     Ok(Outcome::Forward(Edits::new().set_header("x-event-label", label)))
//! }
//! ```
//!
//! with `hookgate-plugin = { …, features = ["transformer"] }` in `Cargo.toml` (`signer` with
//! `#[sign]`, `backoff` with `#[backoff]`) and `crate-type = ["cdylib"]`. Build with
//! `cargo build --release --target wasm32-wasip2`: the `.wasm` is the plugin. Each world's
//! module holds its types (`EndpointInfo`, `Edits`, `Outcome`, …) and the imports the world
//! may use (`config`, `log`, and for a signer `crypto`), generated from `wit/plugin.wit`; the
//! attribute writes the `Guest` implementation and the export.
//!
//! The request is lent by the gateway, not copied: [`transformer::Message`] (and the signer's)
//! reads a header, all headers, or the body from the host when asked, each at most once per
//! call, and the answer is [`transformer::Edits`]: headers to remove and set, perhaps a new
//! body. The contract and the limits: `docs/writing-a-plugin.md`.

// wit-bindgen's generated export glue takes one argument per flattened WIT value.
#![allow(clippy::too_many_arguments)]

// The generated code names this crate by its path, from inside it too.
extern crate self as hookgate_plugin;

pub use hookgate_plugin_macros::{backoff, sign, transform};

#[doc(hidden)]
pub use wit_bindgen as __wit_bindgen;

/// The lent message and the edits, for a world whose bindings are in scope: the same code for
/// the transformer's and the signer's types, which are distinct types.
#[cfg(any(feature = "transformer", feature = "signer"))]
macro_rules! message_and_edits {
    () => {
        use std::cell::OnceCell;

        /// The request the gateway lent for this call. Reads from the host on demand, each
        /// part at most once: what the plugin never asks for is never copied into it.
        pub struct Message<'a> {
            lent: &'a OutgoingMessage,
            headers: OnceCell<Headers>,
            body: OnceCell<Vec<u8>>,
        }

        impl<'a> Message<'a> {
            #[doc(hidden)]
            pub fn lent(lent: &'a OutgoingMessage) -> Self {
                Message {
                    lent,
                    headers: OnceCell::new(),
                    body: OnceCell::new(),
                }
            }

            /// The value of the first header named `name` (any case).
            pub fn header(&self, name: &str) -> Option<Vec<u8>> {
                match self.headers.get() {
                    Some(headers) => headers
                        .iter()
                        .find(|(n, _)| n.eq_ignore_ascii_case(name))
                        .map(|(_, v)| v.clone()),
                    None => self.lent.header(name),
                }
            }

            /// Every header, in order, names in lower case.
            pub fn headers(&self) -> &Headers {
                self.headers
                    .get_or_init(|| $crate::parse_header_block(&self.lent.header_block()))
            }

            /// The body.
            pub fn body(&self) -> &[u8] {
                self.body.get_or_init(|| self.lent.body())
            }

            /// The body's length, without reading it.
            pub fn body_len(&self) -> u64 {
                match self.body.get() {
                    Some(body) => body.len() as u64,
                    None => self.lent.body_len(),
                }
            }
        }

        impl Edits {
            /// No change: the message is sent as it was lent.
            pub fn new() -> Self {
                Edits {
                    remove_headers: Vec::new(),
                    set_headers: Vec::new(),
                    body: None,
                }
            }

            /// Removes every value of header `name`.
            pub fn remove_header(mut self, name: impl Into<String>) -> Self {
                self.remove_headers.push(name.into());
                self
            }

            /// Sets header `name` to `value`, replacing the values it had; set a name twice to
            /// send both values.
            pub fn set_header(mut self, name: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
                self.set_headers.push((name.into(), value.into()));
                self
            }

            /// Replaces the body.
            pub fn body(mut self, body: impl Into<Vec<u8>>) -> Self {
                self.body = Some(body.into());
                self
            }
        }

        impl Default for Edits {
            fn default() -> Self {
                Edits::new()
            }
        }
    };
}

/// The headers of a header block (`name: value\r\n` lines) as (name, value) pairs.
#[doc(hidden)]
pub fn parse_header_block(block: &[u8]) -> Vec<(String, Vec<u8>)> {
    block
        .split(|b| *b == b'\n')
        .filter_map(|line| {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let colon = line.iter().position(|b| *b == b':')?;
            let name = String::from_utf8_lossy(&line[..colon]).into_owned();
            let value = line[colon + 1..].strip_prefix(b" ").unwrap_or(&line[colon + 1..]);
            Some((name, value.to_vec()))
        })
        .collect()
}

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
    message_and_edits!();
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
    message_and_edits!();
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
