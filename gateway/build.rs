//! Two things the binary carries from its build:
//!
//! - the commit it was built from, for `hookgate --version` and `GET /v1/status`:
//!   `HOOKGATE_COMMIT` from the environment (a build outside a git checkout, such as a source
//!   package, passes it), else `git rev-parse`, else `unknown`;
//! - with the `bundled-plugins` feature, the bundled plugins' components, embedded from
//!   `HOOKGATE_BUNDLED_PLUGINS` (default: `plugins/target/wasm32-wasip2/release`, where
//!   `cargo build --release` in `plugins/` puts them).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The plugins of `plugins/` a binary with `bundled-plugins` serves without a plugin folder.
const BUNDLED: [&str; 7] = [
    "cloudevents",
    "decorrelated-jitter",
    "github-signature",
    "js",
    "redact",
    "sns-envelope",
    "stripe-signature",
];

fn main() {
    name_the_commit();
    embed_bundled_plugins();
}

fn name_the_commit() {
    println!("cargo:rerun-if-env-changed=HOOKGATE_COMMIT");
    let commit = std::env::var("HOOKGATE_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(git_commit)
        .unwrap_or_else(|| "unknown".to_owned());
    println!("cargo:rustc-env=HOOKGATE_COMMIT={}", commit.trim());
}
/// The short hash of `HEAD`, watched so that a new commit is named without a clean build.
fn git_commit() -> Option<String> {
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git").args(args).output().ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_owned())
    };
    let commit = git(&["rev-parse", "--short=12", "HEAD"])?;
    // A path that does not exist would make cargo run this script, and rebuild the crate, on
    // every build: only existing files are watched (a branch's ref may be packed).
    let branch = git(&["symbolic-ref", "-q", "HEAD"]);
    for watched in ["HEAD", "packed-refs"].into_iter().chain(branch.as_deref()) {
        if let Some(path) = git(&["rev-parse", "--git-path", watched])
            && Path::new(&path).exists()
        {
            println!("cargo:rerun-if-changed={path}");
        }
    }
    Some(commit)
}

/// Writes `bundled_plugins.rs` into `OUT_DIR`: the list of `(name, include_bytes!(…))`, empty
/// without the feature. A missing component fails the build with what to run.
fn embed_bundled_plugins() {
    println!("cargo:rerun-if-env-changed=HOOKGATE_BUNDLED_PLUGINS");
    let mut entries = String::new();
    if std::env::var_os("CARGO_FEATURE_BUNDLED_PLUGINS").is_some() {
        let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
        let dir = std::env::var_os("HOOKGATE_BUNDLED_PLUGINS")
            .map(PathBuf::from)
            .unwrap_or_else(|| manifest.join("../plugins/target/wasm32-wasip2/release"));
        for name in BUNDLED {
            let path = component(&dir, name);
            println!("cargo:rerun-if-changed={}", path.display());
            entries.push_str(&format!(
                "({name:?}, include_bytes!({:?})),\n",
                path.display().to_string()
            ));
        }
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo")).join("bundled_plugins.rs");
    std::fs::write(out, format!("&[\n{entries}]\n")).expect("write bundled_plugins.rs");
}

fn component(dir: &Path, name: &str) -> PathBuf {
    let path = dir.join(format!("{}.wasm", name.replace('-', "_")));
    path.canonicalize().unwrap_or_else(|_| {
        panic!(
            "the bundled-plugins feature needs {} (build it with `cargo build --release` in plugins/, \
             or point HOOKGATE_BUNDLED_PLUGINS at the folder holding it)",
            path.display()
        )
    })
}
