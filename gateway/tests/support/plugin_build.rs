//! Builds the bundled plugins and fixtures (the `plugins/` workspace) on demand, so that a
//! plain `cargo test --workspace` works on a fresh machine.
//!
//! Once per test process: installs the `wasm32-wasip2` target with rustup when it is missing,
//! then runs `cargo build --release` in `plugins/`. A file lock in `plugins/target/` keeps
//! test binaries that run at the same time from building over each other; cargo itself makes
//! the second build a no-op.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The `plugins/` workspace.
pub(crate) fn plugins_workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../plugins")
}

/// The folder holding the built `*.wasm` components (file names use `_`).
pub(crate) fn built_plugins() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let workspace = plugins_workspace();
        let target_dir = workspace.join("target");
        std::fs::create_dir_all(&target_dir).expect("create plugins/target");
        let lock = std::fs::File::create(target_dir.join(".hookgate-test-build.lock"))
            .expect("create the build lock file");
        lock.lock().expect("take the plugin build lock");
        ensure_wasm_target();
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
        let status = Command::new(cargo)
            .args(["build", "--release", "--quiet"])
            .current_dir(&workspace)
            // The outer build's settings are for the host target; the plugins choose their own.
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET")
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .env_remove("CARGO_MAKEFLAGS")
            .status()
            .expect("run cargo build in plugins/");
        assert!(status.success(), "building the plugins workspace failed");
        lock.unlock().expect("release the plugin build lock");
        target_dir.join("wasm32-wasip2/release")
    })
}

/// The built component of `crate_name` (e.g. `github-signature`).
pub(crate) fn built_plugin(crate_name: &str) -> PathBuf {
    let path = built_plugins().join(format!("{}.wasm", crate_name.replace('-', "_")));
    assert!(path.exists(), "{} was not built", path.display());
    path
}

/// Copies built plugins into `dir` under their plugin names (`github-signature.wasm`).
pub(crate) fn install_plugins(dir: &Path, crate_names: &[&str]) {
    for name in crate_names {
        std::fs::copy(built_plugin(name), dir.join(format!("{name}.wasm"))).expect("copy a plugin");
    }
}

fn ensure_wasm_target() {
    let installed = Command::new("rustup")
        .args(["target", "list", "--installed"])
        .output()
        .map(|o| {
            String::from_utf8_lossy(&o.stdout)
                .lines()
                .any(|l| l.trim() == "wasm32-wasip2")
        })
        .unwrap_or(false);
    if !installed {
        let status = Command::new("rustup")
            .args(["target", "add", "wasm32-wasip2"])
            .status()
            .expect("run rustup target add wasm32-wasip2");
        assert!(status.success(), "rustup target add wasm32-wasip2 failed");
    }
}

/// The Python example plugin (`plugins/python/type-filter`), built with componentize-py.
///
/// componentize-py comes from PyPI into a virtualenv under `target/` when it is missing (its
/// wheel bundles CPython and needs no network once installed); the component is rebuilt when
/// `app.py` is newer than it. Guarded by the same kind of file lock as the Rust build.
pub(crate) fn built_python_plugin() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/python-plugins");
        std::fs::create_dir_all(&target).expect("create target/python-plugins");
        let lock = std::fs::File::create(target.join(".build.lock")).expect("create the build lock file");
        lock.lock().expect("take the python plugin build lock");
        let componentize = install_componentize_py(&target);
        let source = plugins_workspace().join("python/type-filter");
        let output = target.join("type_filter.wasm");
        let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
        let wit_modified = modified(&plugins_workspace().join("../wit/plugin.wit"));
        let stale = match modified(&output) {
            None => true,
            Some(built) => {
                modified(&source.join("app.py")).is_none_or(|m| m > built)
                    || wit_modified.is_none_or(|m| m > built)
            }
        };
        if stale {
            let status = Command::new(&componentize)
                .args([
                    "-d",
                    "../../../wit",
                    "-w",
                    "transformer",
                    "componentize",
                    "app",
                    "-o",
                ])
                .arg(&output)
                .current_dir(&source)
                .status()
                .expect("run componentize-py");
            assert!(status.success(), "componentize-py failed");
        }
        lock.unlock().expect("release the python plugin build lock");
        output
    })
}

/// componentize-py in a virtualenv under `target` (`target/python-plugins/venv`), installed
/// from PyPI when missing. The caller holds the build lock.
fn install_componentize_py(target: &Path) -> PathBuf {
    let venv = target.join("venv");
    let componentize = venv.join("bin/componentize-py");
    if !componentize.exists() {
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".to_owned());
        let status = Command::new(python)
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .expect("create a virtualenv");
        assert!(status.success(), "python3 -m venv failed");
        let status = Command::new(venv.join("bin/pip"))
            .args(["install", "--quiet", "componentize-py==0.25.1"])
            .status()
            .expect("pip install componentize-py");
        assert!(status.success(), "pip install componentize-py failed");
    }
    componentize
}

/// componentize-py, installed as [`built_python_plugin`] does (which it runs first, so that
/// the two never install at once).
pub(crate) fn componentize_py() -> PathBuf {
    built_python_plugin();
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/python-plugins/venv/bin/componentize-py")
}

/// Runs `cargo build --release` in the plugin project `dir` (its `.cargo/config.toml` chooses
/// `wasm32-wasip2`) into the shared `target_dir`, so that several projects build their
/// dependencies once.
pub(crate) fn cargo_build_project(dir: &Path, target_dir: &Path) {
    ensure_wasm_target();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
    let status = Command::new(cargo)
        .args(["build", "--release", "--quiet"])
        .current_dir(dir)
        .env("CARGO_TARGET_DIR", target_dir)
        .env_remove("CARGO_BUILD_TARGET")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS")
        .env_remove("CARGO_MAKEFLAGS")
        .status()
        .expect("run cargo build in the plugin project");
    assert!(status.success(), "building {} failed", dir.display());
}
