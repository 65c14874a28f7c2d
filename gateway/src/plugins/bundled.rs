//! The plugins built into the binary: with the `bundled-plugins` feature, the build script
//! embeds the components of `plugins/` (cloudevents, github-signature, stripe-signature,
//! sns-envelope, redact, decorrelated-jitter, and js, which also runs the `.js` files of the plugin
//! folder), so that a binary in an empty root can serve them
//! without a plugin folder (README "Install"). Without the feature the list is empty.

/// `(plugin name, component)` pairs.
pub(super) static BUNDLED: &[(&str, &[u8])] = include!(concat!(env!("OUT_DIR"), "/bundled_plugins.rs"));
