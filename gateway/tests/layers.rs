//! The layers of `gateway/src` (ARCHITECTURE.md, "Layers"): every top-level module may import
//! only modules below it in that document's layer table. This test reads the table from
//! ARCHITECTURE.md itself, so that the document and the check cannot drift apart, then reads
//! every `crate::` path in the sources and fails on one that points up or sideways, and on a
//! top-level module the table does not place.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// The heading of the section whose table orders the layers.
const LAYERS_HEADING: &str = "## Layers";

/// Files that are the crate's roots, not modules of a layer.
const ROOTS: &[&str] = &["lib", "main"];

/// One row of the table: a layer's name and its modules, lowest first.
#[derive(Debug, PartialEq)]
struct Layer {
    name: String,
    modules: Vec<String>,
}

/// The layers, lowest first, as ARCHITECTURE.md's table lists them.
struct Layers(Vec<Layer>);

impl Layers {
    /// The first table after [`LAYERS_HEADING`]: a header row, a `|---|` row, then one row per
    /// layer whose first cell is the layer's name and whose second lists its modules in
    /// backticks. Why a document cannot be read is said in the error.
    fn parse(markdown: &str) -> Result<Layers, String> {
        let mut lines = markdown
            .lines()
            .skip_while(|line| line.trim_end() != LAYERS_HEADING);
        if lines.next().is_none() {
            return Err(format!("no `{LAYERS_HEADING}` section"));
        }
        let rows: Vec<&str> = lines
            .take_while(|line| !line.starts_with("## "))
            .skip_while(|line| !line.starts_with('|'))
            .take_while(|line| line.starts_with('|'))
            .collect();
        if rows.len() < 3 || !rows[1].starts_with("|---") {
            return Err(format!(
                "the `{LAYERS_HEADING}` section has no table (a header row, a `|---|` row, a row per layer)"
            ));
        }
        let layers = rows[2..]
            .iter()
            .map(|row| layer_of_row(row))
            .collect::<Result<_, _>>()?;
        Ok(Layers(layers))
    }

    /// A module's place in the order: every module of a lower layer, and every module listed
    /// before it in its own layer, comes first.
    fn rank(&self, module: &str) -> Option<usize> {
        self.0
            .iter()
            .flat_map(|layer| layer.modules.iter())
            .position(|m| m == module)
    }

    fn layer_of(&self, module: &str) -> &str {
        self.0
            .iter()
            .find(|layer| layer.modules.iter().any(|m| m == module))
            .map_or("?", |layer| layer.name.as_str())
    }

    fn modules(&self) -> impl Iterator<Item = &str> {
        self.0
            .iter()
            .flat_map(|layer| layer.modules.iter().map(String::as_str))
    }
}

/// `| data | `model` | plain types |` → the layer `data` with the module `model`.
fn layer_of_row(row: &str) -> Result<Layer, String> {
    let cells: Vec<&str> = row.trim().trim_matches('|').split('|').map(str::trim).collect();
    let [name, modules, ..] = cells.as_slice() else {
        return Err(format!("the layer row `{row}` has fewer than two cells"));
    };
    let modules: Vec<String> = modules
        .split(',')
        .map(|m| m.trim().trim_matches('`').to_owned())
        .filter(|m| !m.is_empty())
        .collect();
    if name.is_empty() || modules.is_empty() {
        return Err(format!(
            "the layer row `{row}` needs a name and at least one module"
        ));
    }
    Ok(Layer {
        name: (*name).to_owned(),
        modules,
    })
}

fn architecture() -> Layers {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../ARCHITECTURE.md");
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Layers::parse(&text).unwrap_or_else(|e| panic!("ARCHITECTURE.md: {e}"))
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
    let layers = architecture();
    let src = src_dir();
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    files.sort();
    let modules: BTreeSet<String> = files.iter().map(|f| top_module(&src, f)).collect();

    let unplaced: Vec<_> = modules
        .iter()
        .filter(|m| layers.rank(m).is_none() && !ROOTS.contains(&m.as_str()))
        .collect();
    assert!(
        unplaced.is_empty(),
        "top-level modules of gateway/src that ARCHITECTURE.md does not place: {unplaced:?}. \
         Add each to the second column (`modules, lowest first`) of its layer's row in the \
         `{LAYERS_HEADING}` table of ARCHITECTURE.md: after every module it imports, before \
         every module that imports it; and give it a paragraph in the code map."
    );
    let stale: Vec<_> = layers.modules().filter(|m| !modules.contains(*m)).collect();
    assert!(
        stale.is_empty(),
        "ARCHITECTURE.md's `{LAYERS_HEADING}` table names modules gateway/src does not have: \
         {stale:?}. Remove them from the table (and from the code map)."
    );

    let mut wrong = Vec::new();
    for file in &files {
        let module = top_module(&src, file);
        let Some(own) = layers.rank(&module) else { continue };
        let code = code_of(&fs::read_to_string(file).unwrap());
        for target in crate_paths(&code) {
            if target == module || !modules.contains(&target) {
                continue; // itself, or an item of lib.rs
            }
            let Some(theirs) = layers.rank(&target) else {
                continue;
            };
            if theirs > own {
                wrong.push(format!(
                    "{}: `{module}` ({}) imports `crate::{target}` ({}), which is above it",
                    file.strip_prefix(&src).unwrap().display(),
                    layers.layer_of(&module),
                    layers.layer_of(&target),
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the layer order of ARCHITECTURE.md's `{LAYERS_HEADING}` table:\n{}\n\
         Move the shared type down, into the lower module or its owner (or, if the order itself \
         is wrong, change the table and say why in the document).",
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
fn the_table_is_read_row_by_row_in_order() {
    let doc = "# Title\n\n## Code map\n| not | this |\n|---|---|\n| x | `y` |\n\n\
               ## Layers\n\nSome prose.\n\n\
               | layer | modules, lowest first | what they are |\n\
               |---|---|---|\n\
               | data | `model` | plain types |\n\
               | rules | `clock`, `health` | pure |\n\
               | surface | `api`, `cli` | the edges |\n\
               \nA paragraph after.\n| stray | `table` | row |\n";
    let layers = Layers::parse(doc).unwrap();
    assert_eq!(
        layers.0,
        [
            Layer {
                name: "data".into(),
                modules: vec!["model".into()]
            },
            Layer {
                name: "rules".into(),
                modules: vec!["clock".into(), "health".into()]
            },
            Layer {
                name: "surface".into(),
                modules: vec!["api".into(), "cli".into()]
            },
        ]
    );
    assert_eq!(layers.rank("model"), Some(0));
    assert_eq!(layers.rank("health"), Some(2));
    assert_eq!(layers.rank("y"), None, "a table of another section is not read");
    assert_eq!(layers.rank("table"), None, "nor one after the layer table");
    assert_eq!(layers.layer_of("cli"), "surface");
}

#[test]
fn a_document_without_a_readable_table_is_an_error_that_says_why() {
    let no_section = Layers::parse("# T\n## Code map\n").err().unwrap();
    assert!(no_section.contains("no `## Layers` section"), "{no_section}");
    let no_table = Layers::parse("## Layers\n\nprose only\n").err().unwrap();
    assert!(no_table.contains("has no table"), "{no_table}");
    let empty_row = Layers::parse("## Layers\n| l | m |\n|---|---|\n| data |  |\n")
        .err()
        .unwrap();
    assert!(empty_row.contains("at least one module"), "{empty_row}");
}

#[test]
fn an_upward_import_is_what_the_order_forbids() {
    // The check compares ranks: `config` may use `store`, `store` may not use `config`.
    let layers = architecture();
    assert!(layers.rank("store").unwrap() < layers.rank("config").unwrap());
    assert!(layers.rank("model").unwrap() < layers.rank("store").unwrap());
    assert!(layers.rank("api").unwrap() > layers.rank("scheduler").unwrap());
    assert_eq!(layers.layer_of("attempt"), "delivery engine");
}
