//! The layers of `gateway/src` (ARCHITECTURE.md, "Layers"): every top-level module may import
//! only modules below it in [`LAYERS`]. This test reads every `crate::` path in the sources and
//! fails on one that points up or sideways, so that an import cycle between the top-level
//! modules cannot come back unnoticed. A new top-level module must be given its place here.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The layers, lowest first; within a layer, a module may import the ones listed before it.
const LAYERS: &[(&str, &[&str])] = &[
    ("data", &["model"]),
    (
        "rules",
        &["clock", "fence", "health", "policy", "charts", "filter"],
    ),
    (
        "infrastructure",
        &["telemetry", "store", "delivery", "server", "console"],
    ),
    ("plugins", &["plugins"]),
    ("configuration", &["config", "traces"]),
    ("delivery engine", &["attempt", "scheduler"]),
    (
        "operations",
        &[
            "event_types",
            "commit",
            "ingest",
            "ordering_watch",
            "recovery",
            "reload",
            "endpoint_admin",
            "cluster",
        ],
    ),
    ("surface", &["api", "supervisor", "cli"]),
];

/// Files that are the crate's roots, not modules of a layer.
const ROOTS: &[&str] = &["lib", "main"];

fn rank(module: &str) -> Option<usize> {
    LAYERS
        .iter()
        .flat_map(|(_, modules)| modules.iter())
        .position(|m| *m == module)
}

fn layer_of(module: &str) -> &'static str {
    LAYERS
        .iter()
        .find(|(_, modules)| modules.contains(&module))
        .map_or("?", |(name, _)| name)
}

fn src_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The top-level module a file belongs to: `scheduler` for `src/scheduler/actor.rs`.
fn top_module(src: &Path, file: &Path) -> String {
    let first = file.strip_prefix(src).unwrap().components().next().unwrap();
    let name = first.as_os_str().to_str().unwrap();
    name.strip_suffix(".rs").unwrap_or(name).to_owned()
}

/// The code of a file without comments and without its inline test modules (a
/// `#[cfg(test)]` that opens `mod … {`, to its closing brace), so that a doc comment naming
/// another module is no import. Test modules in files of their own (`#[cfg(test)] mod tests;`)
/// are read like any file: tests keep the layers too.
fn code_of(text: &str) -> String {
    let text: String = text
        .lines()
        .map(|line| line.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n");
    let mut code = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find("#[cfg(test)]") {
        let after = &rest[at + "#[cfg(test)]".len()..];
        code.push_str(&rest[..at]);
        match inline_module_body(after) {
            Some(open) => rest = &after[open..][block_len(&after[open..])..],
            None => rest = after,
        }
    }
    code.push_str(rest);
    code
}

/// Where the `{` of `mod name {` starts, when `text` begins with an inline module.
fn inline_module_body(text: &str) -> Option<usize> {
    let trimmed = text.trim_start();
    let rest = trimmed.strip_prefix("mod ")?;
    let name_len = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let after_name = &rest[name_len..];
    let brace = after_name.len() - after_name.trim_start().len();
    after_name
        .trim_start()
        .starts_with('{')
        .then(|| (text.len() - trimmed.len()) + "mod ".len() + name_len + brace)
}

/// The length of the block that `text` opens with `{`, through its matching `}`; braces
/// inside string and character literals do not count.
fn block_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    let (mut depth, mut i) = (0usize, 0usize);
    while i < bytes.len() {
        match bytes[i] {
            b'{' => depth += 1,
            b'}' => {
                depth -= 1;
                if depth == 0 {
                    return i + 1;
                }
            }
            b'"' => i += string_len(&text[i..]) - 1,
            b'\'' if bytes.get(i + 2) == Some(&b'\'') => i += 2,
            b'\'' if bytes.get(i + 1) == Some(&b'\\') => i += 3,
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

/// The length of the string literal `text` starts with, quotes included (`r#"…"#` too, when
/// the `r#` came before).
fn string_len(text: &str) -> usize {
    let bytes = text.as_bytes();
    let mut i = 1;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' => i += 1,
            b'"' => return i + 1,
            _ => {}
        }
        i += 1;
    }
    bytes.len()
}

/// The top-level modules a piece of code names through `crate::`, including the members of a
/// grouped `use crate::{a::X, b};`.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && is_ident(code.as_bytes()[at - 1]) {
            continue; // `hookgate_crate::`, not ours
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = &group[..group.find('}').unwrap_or(group.len())];
            for member in inner.split(',') {
                let head = member.trim().split("::").next().unwrap_or_default();
                if !head.is_empty() && head != "self" {
                    found.insert(ident_prefix(head));
                }
            }
        } else {
            found.insert(ident_prefix(rest));
        }
    }
    found.retain(|m| !m.is_empty());
    found
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

fn ident_prefix(s: &str) -> String {
    s.bytes().take_while(|b| is_ident(*b)).map(char::from).collect()
}

#[test]
fn every_top_level_module_imports_only_the_layers_below_it() {
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let modules: BTreeSet<String> = files.iter().map(|f| top_module(&src, f)).collect();

    let unplaced: Vec<_> = modules
        .iter()
        .filter(|m| rank(m).is_none() && !ROOTS.contains(&m.as_str()))
        .collect();
    assert!(
        unplaced.is_empty(),
        "top-level modules without a layer: {unplaced:?}; add them to LAYERS in tests/layers.rs \
         and to ARCHITECTURE.md"
    );

    let mut wrong = Vec::new();
    for file in &files {
        let module = top_module(&src, file);
        let Some(own) = rank(&module) else { continue };
        let code = code_of(&fs::read_to_string(file).unwrap());
        for target in crate_paths(&code) {
            if target == module || !modules.contains(&target) {
                continue; // itself, or an item of lib.rs
            }
            let Some(theirs) = rank(&target) else { continue };
            if theirs > own {
                wrong.push(format!(
                    "{}: `{module}` ({}) imports `crate::{target}` ({}), which is above it",
                    file.strip_prefix(&src).unwrap().display(),
                    layer_of(&module),
                    layer_of(&target),
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layer order of ARCHITECTURE.md:\n{}\nMove the shared type down, \
         into the lower module or its owner.",
        wrong.join("\n")
    );
}

#[test]
fn the_reader_sees_plain_grouped_and_nested_paths_and_skips_comments_and_tests() {
    let code = code_of(
        "use crate::model::Event;\n\
         use crate::{config::Config, store};\n\
         let x = crate::policy::plan(); // crate::api::nothing\n\
         /// see [`crate::cli`]\n\
         #[cfg(test)]\nmod helpers;\nuse crate::store::Store;\n\
         #[cfg(test)]\nmod tests { use crate::supervisor; fn f() { let _ = \"}\"; } }\n\
         fn after_the_tests() -> crate::charts::Chart {}\n",
    );
    let found: Vec<_> = crate_paths(&code).into_iter().collect();
    assert_eq!(found, ["charts", "config", "model", "policy", "store"]);
}

#[test]
fn an_upward_import_is_what_the_order_forbids() {
    // The check compares ranks: `config` may use `store`, `store` may not use `config`.
    assert!(rank("store").unwrap() < rank("config").unwrap());
    assert!(rank("model").unwrap() < rank("store").unwrap());
    assert!(rank("api").unwrap() > rank("scheduler").unwrap());
    assert_eq!(layer_of("attempt"), "delivery engine");
}
