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
    let root = project_dir(dir, name);
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

fn project_dir(dir: &Path, name: &str) -> PathBuf {
    dir.join(name)
}

fn world(kind: Kind) -> &'static str {
    match kind {
        Kind::Transform => "transformer",
        Kind::Signer => "signer",
        Kind::Backoff => "backoff",
    }
}

/// What `plugin new` says once it wrote the project: the folder and its files, and the
/// commands that take it to a loaded plugin (the same as its README's), then the binding.
pub(crate) fn summary(dir: &Path, name: &str, kind: Kind, lang: Lang, files: &[PathBuf]) -> String {
    let root = project_dir(dir, name);
    let language = match lang {
        Lang::Rust => "Rust",
        Lang::Python => "Python",
        Lang::Js => "JavaScript",
    };
    let role = match kind {
        Kind::Transform => "transform",
        Kind::Signer => "signer",
        Kind::Backoff => "backoff",
    };
    let mut out = format!(
        "created {}: a {} plugin `{name}` in {language}\n",
        root.display(),
        world(kind)
    );
    for file in files {
        out.push_str(&format!("  {}\n", file.display()));
    }
    out.push_str(&format!("next, in {}:\n", root.display()));
    for step in fill(steps(lang), name, kind, lang).lines() {
        out.push_str(&format!("  {step}\n"));
    }
    out.push_str(&format!(
        "then bind it to an endpoint: `{role}: {{ plugin: {name} }}` (README.md in the project has these steps)"
    ));
    out
}

/// The commands, run in the project's folder, that take it to a plugin in the plugin folder:
/// the project's README gives them (`STEPS`), and `plugin new` prints them.
fn steps(lang: Lang) -> &'static str {
    match lang {
        Lang::Rust => {
            "rustup target add wasm32-wasip2
cargo build --release
hookgate plugin check target/wasm32-wasip2/release/CRATE.wasm
cp target/wasm32-wasip2/release/CRATE.wasm /path/to/plugins/NAME.wasm"
        }
        Lang::Python => {
            "python3 -m venv .venv && .venv/bin/pip install componentize-py==0.25.1
.venv/bin/componentize-py -d wit -w WORLD componentize app -o NAME.wasm
hookgate plugin check NAME.wasm
cp NAME.wasm /path/to/plugins/NAME.wasm"
        }
        Lang::Js => {
            "hookgate plugin check NAME.js
cp NAME.js /path/to/plugins/NAME.js"
        }
    }
}

/// A template with the plugin's names in it; `STEPS` becomes `lang`'s steps, indented as a
/// code block of Markdown.
fn fill(template: &str, name: &str, kind: Kind, lang: Lang) -> String {
    template
        .replace("STEPS", &indented(steps(lang)))
        .replace("WORLD", world(kind))
        .replace("NAME", name)
        .replace("CRATE", &name.replace('-', "_"))
}

fn indented(lines: &str) -> String {
    lines
        .lines()
        .map(|l| format!("    {l}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The project's files, by path inside its folder.
fn files(name: &str, kind: Kind, lang: Lang) -> anyhow::Result<Vec<(String, String)>> {
    let fill = |template: &str| fill(template, name, kind, lang);
    let world = world(kind);
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
fn transform(_endpoint: EndpointInfo, event: EventInfo, _delivery: DeliveryInfo, _message: &Message)
    -> Result<Outcome, PluginError> {
    if config::get("drop_type").as_deref() == Some(event.event_type.as_str()) {
        return Ok(Outcome::Drop(format!("{} is not sent", event.event_type)));
    }
    // An edit, not a new message: the body is sent as it is, and never copied into the plugin.
    let label = config::get("label").unwrap_or(event.event_type);
    Ok(Outcome::Forward(Edits::new().set_header("x-event-label", label)))
}
"#;

const RUST_SIGNER: &str = r#"//! NAME: a hookgate signer. Adds `x-signature: sha256=<hex HMAC-SHA256 of the body>`, keyed
//! with the endpoint's secret as written. The secret never enters the plugin: the host
//! computes the HMAC with the key handle.

use hookgate_plugin::signer::*;

#[hookgate_plugin::sign]
fn sign(_endpoint: EndpointInfo, _delivery: DeliveryInfo, message: &Message, key: &SigningKey)
    -> Result<Edits, PluginError> {
    let mac = crypto::hmac(key, KeyForm::AsWritten, HashAlgorithm::Sha256, message.body());
    let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
    Ok(Edits::new().set_header("x-signature", format!("sha256={hex}")))
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

STEPS

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
        # The request is lent (message.header(name), message.header_block(), message.body()):
        # answer edits (headers to remove, headers to set, a new body or None).
        return types.Outcome_Forward(types.Edits([], [("X-Event-Label", label.encode())], None))
"#;

const PYTHON_README: &str = r#"# NAME

A hookgate WORLD plugin in Python, built with componentize-py (PyPI):

STEPS

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

STEPS

Then bind it to an endpoint: `transform: { plugin: NAME }`. What `webhook` holds and what
the handler may change: docs/writing-a-plugin.md, "JavaScript transformations".
"#;

#[cfg(test)]
mod tests {
    use super::*;

    /// Each project's README gives the steps `plugin new` prints, with the plugin's names in.
    #[test]
    fn the_readme_and_the_summary_give_the_same_steps() {
        for (kind, lang) in [
            (Kind::Signer, Lang::Rust),
            (Kind::Transform, Lang::Python),
            (Kind::Transform, Lang::Js),
        ] {
            let files = files("my-plugin", kind, lang).unwrap();
            let readme = &files.iter().find(|(path, _)| path == "README.md").unwrap().1;
            let summary = summary(Path::new("."), "my-plugin", kind, lang, &[]);
            let steps: Vec<&str> = summary
                .lines()
                .skip_while(|l| !l.starts_with("next, in ./my-plugin:"))
                .skip(1)
                .take_while(|l| l.starts_with("  "))
                .collect();
            assert!(!steps.is_empty(), "{summary}");
            for step in steps {
                assert!(readme.contains(&format!("  {step}\n")), "{step}\n{readme}");
                assert!(!step.contains("NAME") && !step.contains("CRATE") && !step.contains("WORLD"));
            }
        }
        let rust = summary(Path::new("."), "my-plugin", Kind::Signer, Lang::Rust, &[]);
        assert!(rust.contains("  hookgate plugin check target/wasm32-wasip2/release/my_plugin.wasm\n"));
        assert!(rust.ends_with("`signer: { plugin: my-plugin }` (README.md in the project has these steps)"));
    }
}
