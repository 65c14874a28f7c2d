//! `hookgate plugin new NAME --kind KIND --lang LANG`: a plugin project that builds and passes
//! `hookgate plugin check` as it stands (docs/writing-a-plugin.md starts from it).
//!
//! - `rust`: a crate on the plugin kit (`plugins/kit`, written into the project so that it
//!   builds without this repository): one annotated function.
//! - `python`: `app.py` and the WIT, for componentize-py.
//! - `js` (transforms only): `NAME.js`, a Svix-style `handler(webhook)` for the bundled `js`
//!   plugin, to drop into the plugin folder as it is.

use std::path::{Path, PathBuf};

/// The kind of plugin to write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Kind {
    Transform,
    Signer,
    Backoff,
}

/// The language to write it in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Lang {
    Rust,
    Python,
    Js,
}

/// The contract every project carries a copy of.
const WIT: &str = include_str!("../../../wit/plugin.wit");

/// The plugin kit, written into a Rust project as `hookgate-plugin/`.
const KIT: [(&str, &str); 4] = [
    (
        "hookgate-plugin/Cargo.toml",
        include_str!("../../../plugins/kit/Cargo.toml"),
    ),
    (
        "hookgate-plugin/src/lib.rs",
        include_str!("../../../plugins/kit/src/lib.rs"),
    ),
    (
        "hookgate-plugin/macros/Cargo.toml",
        include_str!("../../../plugins/kit/macros/Cargo.toml"),
    ),
    (
        "hookgate-plugin/macros/src/lib.rs",
        include_str!("../../../plugins/kit/macros/src/lib.rs"),
    ),
];

/// Writes the project of plugin `name` into `dir/name` (which must not exist yet) and returns
/// the files written.
pub(crate) fn write(dir: &Path, name: &str, kind: Kind, lang: Lang) -> anyhow::Result<Vec<PathBuf>> {
    if name.is_empty()
        || !name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
    {
        anyhow::bail!("`{name}` is not a plugin name: lower-case letters, digits and `-`");
    }
    let files = files(name, kind, lang)?;
    let root = dir.join(name);
    if root.exists() {
        anyhow::bail!("{} exists already", root.display());
    }
    let mut written = Vec::with_capacity(files.len());
    for (path, content) in files {
        let path = root.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(&path, content)?;
        written.push(path);
    }
    Ok(written)
}

/// The project's files, by path inside its folder.
fn files(name: &str, kind: Kind, lang: Lang) -> anyhow::Result<Vec<(String, String)>> {
    let fill = |template: &str| {
        template
            .replace("NAME", name)
            .replace("CRATE", &name.replace('-', "_"))
    };
    let world = match kind {
        Kind::Transform => "transformer",
        Kind::Signer => "signer",
        Kind::Backoff => "backoff",
    };
    let mut files = Vec::new();
    match (lang, kind) {
        (Lang::Rust, _) => {
            let source = match kind {
                Kind::Transform => RUST_TRANSFORM,
                Kind::Signer => RUST_SIGNER,
                Kind::Backoff => RUST_BACKOFF,
            };
            files.push(("Cargo.toml".to_owned(), fill(RUST_CARGO).replace("WORLD", world)));
            files.push((".cargo/config.toml".to_owned(), RUST_CARGO_CONFIG.to_owned()));
            files.push(("src/lib.rs".to_owned(), fill(source)));
            files.push(("README.md".to_owned(), fill(RUST_README).replace("WORLD", world)));
            files.extend(KIT.iter().map(|(p, c)| ((*p).to_owned(), (*c).to_owned())));
            files.push(("hookgate-plugin/wit/plugin.wit".to_owned(), WIT.to_owned()));
        }
        (Lang::Python, Kind::Transform) => {
            files.push(("app.py".to_owned(), fill(PYTHON_TRANSFORM)));
            files.push(("wit/plugin.wit".to_owned(), WIT.to_owned()));
            files.push((
                "README.md".to_owned(),
                fill(PYTHON_README).replace("WORLD", world),
            ));
        }
        (Lang::Js, Kind::Transform) => {
            files.push((format!("{name}.js"), fill(JS_TRANSFORM)));
            files.push(("README.md".to_owned(), fill(JS_README)));
        }
        (Lang::Python, _) => anyhow::bail!(
            "the Python template is a transform; for a {world}, start from it and the `{world}` world of wit/plugin.wit (docs/writing-a-plugin.md)"
        ),
        (Lang::Js, _) => {
            anyhow::bail!("JavaScript plugins are transforms only (run by the bundled `js` plugin)")
        }
    }
    Ok(files)
}

const RUST_CARGO: &str = r#"[package]
name = "NAME"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
hookgate-plugin = { path = "hookgate-plugin", features = ["WORLD"] }

# A project of its own, not part of an enclosing workspace.
[workspace]

[profile.release]
opt-level = 3
lto = true
codegen-units = 1
strip = true
"#;

const RUST_CARGO_CONFIG: &str = r#"# A hookgate plugin is a WebAssembly component for WASI preview 2.
[build]
target = "wasm32-wasip2"
"#;

const RUST_TRANSFORM: &str = r#"//! NAME: a hookgate transform. Adds `x-event-label` (config `label`, default the event type)
//! and forwards the request; drops events whose type is config `drop_type`.

use hookgate_plugin::transformer::*;

#[hookgate_plugin::transform]
fn transform(_endpoint: EndpointInfo, event: EventInfo, _delivery: DeliveryInfo, mut message: Message)
    -> Result<Outcome, PluginError> {
    if config::get("drop_type").as_deref() == Some(event.event_type.as_str()) {
        return Ok(Outcome::Drop(format!("{} is not sent", event.event_type)));
    }
    let label = config::get("label").unwrap_or(event.event_type);
    message.headers.push(("x-event-label".into(), label.into_bytes()));
    Ok(Outcome::Forward(message))
}
"#;

const RUST_SIGNER: &str = r#"//! NAME: a hookgate signer. Adds `x-signature: sha256=<hex HMAC-SHA256 of the body>`, keyed
//! with the endpoint's secret as written. The secret never enters the plugin: the host
//! computes the HMAC with the key handle.

use hookgate_plugin::signer::*;

#[hookgate_plugin::sign]
fn sign(_endpoint: EndpointInfo, _delivery: DeliveryInfo, message: Message, key: &SigningKey)
    -> Result<Headers, PluginError> {
    let mac = crypto::hmac(key, KeyForm::AsWritten, HashAlgorithm::Sha256, &message.body);
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    Ok(vec![("x-signature".into(), format!("sha256={hex}").into_bytes())])
}
"#;

const RUST_BACKOFF: &str = r#"//! NAME: a hookgate backoff. Waits `base_ms` (config, default 1000) times 2^(attempt-1), at
//! most `cap_ms` (default 3600000), plus up to 10 % jitter; gives up after a 4xx other than
//! 408 and 429.

use hookgate_plugin::backoff::*;

#[hookgate_plugin::backoff]
fn next_delay(context: RetryContext) -> Result<Decision, PluginError> {
    if let Some(status) = context.last_status
        && (400..500).contains(&status) && status != 408 && status != 429 {
        return Ok(Decision::GiveUp(format!("the receiver answered {status}")));
    }
    let number = |key: &str, default: u64| config::get(key).and_then(|v| v.parse().ok()).unwrap_or(default);
    let (base_ms, cap_ms) = (number("base_ms", 1_000), number("cap_ms", 3_600_000));
    let wait = base_ms.saturating_mul(1 << context.attempt.saturating_sub(1).min(32)).min(cap_ms);
    Ok(Decision::RetryInMs(wait + context.random % (wait / 10 + 1)))
}
"#;

const RUST_README: &str = r#"# NAME

A hookgate WORLD plugin in Rust, on the plugin kit (`hookgate-plugin/`, a copy of the kit
of the hookgate release that wrote this project).

    rustup target add wasm32-wasip2
    cargo build --release
    hookgate plugin check target/wasm32-wasip2/release/CRATE.wasm
    cp target/wasm32-wasip2/release/CRATE.wasm /path/to/plugins/NAME.wasm

Then bind it to an endpoint (`transform: { plugin: NAME }`, `signer:` or `backoff:`).
The contract, the limits and how failures show up: docs/writing-a-plugin.md.
"#;

const PYTHON_TRANSFORM: &str = r#""""NAME: a hookgate transform in Python. Adds `X-Event-Label` (config `label`, default the
event type) and forwards the request; drops events whose type is config `drop_type`."""

import wit_world
from wit_world.imports import config, types


class WitWorld(wit_world.WitWorld):
    def transform(self, endpoint, event, delivery, message):
        if config.get("drop_type") == event.event_type:
            return types.Outcome_Drop(f"{event.event_type} is not sent")
        label = config.get("label") or event.event_type
        headers = list(message.headers) + [("X-Event-Label", label.encode())]
        return types.Outcome_Forward(types.Message(headers, message.body))
"#;

const PYTHON_README: &str = r#"# NAME

A hookgate WORLD plugin in Python, built with componentize-py (PyPI):

    python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1
    .venv/bin/componentize-py -d wit -w WORLD componentize app -o NAME.wasm
    hookgate plugin check NAME.wasm
    cp NAME.wasm /path/to/plugins/NAME.wasm

Then bind it to an endpoint: `transform: { plugin: NAME }`. Python components are large
(about 18 MB) and take tens of seconds to compile on first load: docs/writing-a-plugin.md.
"#;

const JS_TRANSFORM: &str = r#"// NAME: a JavaScript transformation for hookgate's bundled `js` plugin, written the way
// Svix's are. `webhook` has eventType, payload, url (read-only), method, headers, cancel.
function handler(webhook) {
  if (webhook.eventType === "internal.ping") {
    webhook.cancel = "pings are not sent";
    return webhook;
  }
  webhook.headers["x-event-label"] = webhook.eventType;
  webhook.payload = { type: webhook.eventType, data: webhook.payload };
  return webhook;
}
"#;

const JS_README: &str = r#"# NAME

A JavaScript transformation. Check it, then drop it into the plugin folder as it is: it is
plugin `NAME`, run by the bundled `js` plugin, and reloaded when the file changes.

    hookgate plugin check NAME.js
    cp NAME.js /path/to/plugins/NAME.js

Then bind it to an endpoint: `transform: { plugin: NAME }`. What `webhook` holds and what
the handler may change: docs/writing-a-plugin.md, "JavaScript transformations".
"#;
