//! `hookgate plugin new`: each language's project builds as written and passes `hookgate
//! plugin check`, its sample call answered.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::plugin_build::{cargo_build_project, componentize_py};

/// Runs `hookgate plugin ARGS…`; panics unless it succeeds, and returns its standard output.
fn hookgate_plugin(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .arg("plugin")
        .args(args)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    );
    assert!(out.status.success(), "hookgate plugin {args:?}: {stdout}{stderr}");
    stdout
}

/// `hookgate plugin new NAME --kind KIND --lang LANG` in `dir`: the project's folder.
fn new_project(dir: &Path, name: &str, kind: &str, lang: &str) -> PathBuf {
    let dir_arg = dir.to_str().unwrap();
    hookgate_plugin(&["new", name, "--kind", kind, "--lang", lang, "--dir", dir_arg]);
    dir.join(name)
}

/// `hookgate plugin check FILE`, which must pass with the sample call answered.
fn check(file: &Path, world: &str, answer: &str) {
    let report = hookgate_plugin(&["check", file.to_str().unwrap()]);
    assert!(report.contains(&format!("world:        {world}")), "{report}");
    assert!(report.contains("sample call:  ok"), "{report}");
    assert!(report.contains(answer), "{report}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_rust_plugin_of_each_kind_builds_and_passes_check() {
    let dir = tempfile::tempdir().unwrap();
    let target = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/plugin-new");
    for (name, kind, world, answer) in [
        (
            "label",
            "transform",
            "transformer",
            "x-event-label: order.created",
        ),
        ("sig", "signer", "signer", "x-signature: sha256="),
        ("waits", "backoff", "backoff", "retry in"),
    ] {
        let project = new_project(dir.path(), name, kind, "rust");
        let (built, into) = (project.clone(), target.clone());
        tokio::task::spawn_blocking(move || cargo_build_project(&built, &into))
            .await
            .unwrap();
        let wasm = target.join(format!("wasm32-wasip2/release/{name}.wasm"));
        check(&wasm, world, answer);
    }
}

/// `plugin new` says what it made and what to run next, and the command it prints works as
/// printed, in the project's folder.
#[test]
fn plugin_new_prints_the_project_and_the_next_command() {
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    let out = hookgate_plugin(&[
        "new",
        "shop-js",
        "--kind",
        "transform",
        "--lang",
        "js",
        "--dir",
        dir_arg,
    ]);
    let project = dir.path().join("shop-js");
    assert!(
        out.starts_with(&format!(
            "created {}: a transformer plugin `shop-js` in JavaScript\n",
            project.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("  {}\n", project.join("shop-js.js").display())),
        "{out}"
    );
    assert!(
        out.contains("then bind it to an endpoint: `transform: { plugin: shop-js }`"),
        "{out}"
    );
    let next: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("next, in "))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .map(str::trim)
        .collect();
    assert_eq!(
        next,
        [
            "hookgate plugin check shop-js.js",
            "cp shop-js.js /path/to/plugins/shop-js.js"
        ],
        "{out}"
    );
    let readme = std::fs::read_to_string(project.join("README.md")).unwrap();
    assert!(next.iter().all(|step| readme.contains(step)), "{readme}");
    let args: Vec<&str> = next[0].split(' ').skip(1).collect();
    let check = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(&args)
        .current_dir(&project)
        .output()
        .unwrap();
    let report = String::from_utf8_lossy(&check.stdout);
    assert!(
        check.status.success() && report.contains("sample call:  ok"),
        "{report}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_javascript_transformation_passes_check_as_written() {
    let dir = tempfile::tempdir().unwrap();
    let project = new_project(dir.path(), "shop-tag", "transform", "js");
    assert!(project.join("README.md").exists());
    // The binary's bundled `js` plugin runs it: no `js.wasm` beside the file, as for a
    // newcomer who built the gateway the README's way.
    assert!(!project.join("js.wasm").exists());
    check(
        &project.join("shop-tag.js"),
        "transformer",
        r#"{"type":"order.created","data":{"order_id":"ord_123""#,
    );
    // Code that does not parse is refused, as the gateway would refuse the file.
    std::fs::write(project.join("broken.js"), "function handler(w) {").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args(["plugin", "check"])
        .arg(project.join("broken.js"))
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("does not parse"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_python_plugin_builds_with_componentize_py_and_passes_check() {
    let dir = tempfile::tempdir().unwrap();
    let project = new_project(dir.path(), "py-label", "transform", "python");
    let componentize = tokio::task::spawn_blocking(componentize_py).await.unwrap();
    // The command the project's README gives.
    let status = Command::new(componentize)
        .args([
            "-d",
            "wit",
            "-w",
            "transformer",
            "componentize",
            "app",
            "-o",
            "py-label.wasm",
        ])
        .current_dir(&project)
        .status()
        .unwrap();
    assert!(status.success(), "componentize-py failed");
    check(
        &project.join("py-label.wasm"),
        "transformer",
        "X-Event-Label: order.created",
    );
}

#[test]
fn plugin_new_refuses_what_it_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let dir_arg = dir.path().to_str().unwrap();
    for args in [
        &["new", "sig", "--kind", "signer", "--lang", "js", "--dir", dir_arg][..],
        &["new", "Bad Name", "--kind", "transform", "--dir", dir_arg],
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_hookgate"))
            .arg("plugin")
            .args(args)
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        assert!(!out.stderr.is_empty());
    }
    new_project(dir.path(), "twice", "transform", "js");
    let out = Command::new(env!("CARGO_BIN_EXE_hookgate"))
        .args([
            "plugin",
            "new",
            "twice",
            "--kind",
            "transform",
            "--lang",
            "js",
            "--dir",
            dir_arg,
        ])
        .output()
        .unwrap();
    assert!(!out.status.success(), "an existing folder is never overwritten");
}
