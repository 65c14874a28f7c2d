//! Two things the binary carries from its build:
//!
//! - the commit it was built from, for `hookgate --version` and `GET /v1/status`:
//!   `HOOKGATE_COMMIT` from the environment (a build outside a git checkout, such as a source
//!   package, passes it), else `git rev-parse`, else `unknown`;
//! - with the `bundled-plugins` feature (a default one), the bundled plugins' components,
//!   copied into `OUT_DIR` and embedded from there: from `HOOKGATE_BUNDLED_PLUGINS` when it
//!   names a folder of built components, else built here by `cargo build --release` in
//!   `plugins/` — the command the plugin tests and CI run, into the same
//!   `plugins/target`, so that whichever runs first builds them and the others find them
//!   built. Cargo itself keeps that build incremental; this script runs it again when a
//!   bundled plugin's sources change.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

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
/// without the feature. The components are copied next to it first, so that what the binary
/// embeds stays there whatever later happens to `plugins/target` (a `cargo clean` in it).
fn embed_bundled_plugins() {
    println!("cargo:rerun-if-env-changed=HOOKGATE_BUNDLED_PLUGINS");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("set by cargo"));
    let mut entries = String::new();
    if std::env::var_os("CARGO_FEATURE_BUNDLED_PLUGINS").is_some() {
        let prebuilt = std::env::var_os("HOOKGATE_BUNDLED_PLUGINS").map(PathBuf::from);
        let built = prebuilt.clone().unwrap_or_else(build_plugins);
        for name in BUNDLED {
            let file = format!("{}.wasm", name.replace('-', "_"));
            let from = component(&built, &file);
            if prebuilt.is_some() {
                println!("cargo:rerun-if-changed={}", from.display());
            }
            let to = out.join(&file);
            std::fs::copy(&from, &to)
                .unwrap_or_else(|e| panic!("cannot copy {} into OUT_DIR: {e}", from.display()));
            entries.push_str(&format!(
                "({name:?}, include_bytes!({:?})),\n",
                to.display().to_string()
            ));
        }
    }
    std::fs::write(out.join("bundled_plugins.rs"), format!("&[\n{entries}]\n"))
        .expect("write bundled_plugins.rs");
}

/// Builds the `plugins/` workspace for `wasm32-wasip2` and answers the folder of its
/// components. Watches the bundled plugins' sources (not the components it writes: a file
/// this script changes would make cargo run it again on the next build).
fn build_plugins() -> PathBuf {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let workspace = manifest.join("../plugins");
    let wit = manifest.join("../wit");
    let sources = ["Cargo.toml", "Cargo.lock", ".cargo", "kit"]
        .iter()
        .chain(BUNDLED.iter())
        .map(|p| workspace.join(p))
        .chain([wit]);
    for path in sources {
        println!("cargo:rerun-if-changed={}", path.display());
    }
    require_wasm_target();
    let target_dir = workspace.join("target");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = Command::new(cargo)
        .args(["build", "--release", "--target-dir"])
        .arg(&target_dir)
        .current_dir(&workspace)
        // The outer build's flags and target are the gateway's; the plugins choose their own
        // (`plugins/.cargo/config.toml`). The jobserver (CARGO_MAKEFLAGS) is kept, so that
        // both builds together stay within `-j`.
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("CARGO_TARGET_DIR")
        // Cargo reads a build script's stdout for `cargo:` lines: the nested build's output
        // goes to stderr, which cargo shows when this script fails.
        .stdout(Stdio::from(std::io::stderr()))
        .status()
        .expect("run cargo build in plugins/");
    assert!(
        status.success(),
        "building the bundled plugins (cargo build --release in plugins/) failed: see above"
    );
    target_dir.join("wasm32-wasip2/release")
}

/// Stops the build with what to run when the `wasm32-wasip2` standard library is missing,
/// instead of the nested build's "can't find crate for `core`".
fn require_wasm_target() {
    let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
    let libdir = Command::new(rustc)
        .args(["--print", "target-libdir", "--target", "wasm32-wasip2"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()));
    if !libdir.is_some_and(|dir| dir.is_dir()) {
        panic!(
            "\n\nthe bundled plugins are built for the wasm32-wasip2 target, which this toolchain \
             does not have: run `rustup target add wasm32-wasip2` and build again \
             (or build without the bundled plugins: --no-default-features)\n"
        );
    }
}

fn component(dir: &Path, file: &str) -> PathBuf {
    let path = dir.join(file);
    path.canonicalize().unwrap_or_else(|_| {
        panic!(
            "the bundled-plugins feature needs {} (build it with `cargo build --release` in plugins/, \
             or point HOOKGATE_BUNDLED_PLUGINS at the folder holding it)",
            path.display()
        )
    })
}
