//! YAML text → a JSON value plus the line of every key path, so that every error — syntax,
//! type, unknown key or failed validation — can name `file:line: path`.

use std::collections::HashMap;

use saphyr::{LoadableYamlNode, MarkedYaml, Scalar, YamlData};
use saphyr_parser::Event;
use serde_json::{Map, Number, Value};

/// A parsed document and where each of its key paths stands (1-based lines).
#[derive(Debug)]
pub(super) struct Located {
    pub(super) value: Value,
    lines: HashMap<String, usize>,
}

impl Located {
    /// The line of `path`, or of its nearest ancestor that has one; 1 for the document itself.
    /// Paths are dotted keys with `[i]` for sequence items: `endpoints.billing.topics[0]`.
    pub(super) fn line_of(&self, path: &str) -> usize {
        let mut p = path;
        loop {
            if let Some(line) = self.lines.get(p) {
                return *line;
            }
            match p.rfind(['.', '[']) {
                Some(cut) => p = &p[..cut],
                None => return 1,
            }
        }
    }
}

/// A YAML error with its line.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct YamlError {
    pub(super) line: usize,
    pub(super) path: String,
    pub(super) reason: String,
}

/// Collections nested deeper than this are refused. Converting a tree (and dropping it)
/// recurses once per level, and `- - - …` nests one level per two bytes: without a bound, a
/// small hostile or mistyped file would overflow the stack and kill `config check`, a reload
/// or the start. Real configs nest under ten levels; plugin configs get the rest.
const MAX_DEPTH: usize = 64;

/// Refuses a document nested deeper than [`MAX_DEPTH`], from the parser's event stream, before
/// any tree is built. Syntax errors are left to the loader, which words them.
fn check_depth(text: &str) -> Result<(), YamlError> {
    let mut depth = 0usize;
    for event in saphyr_parser::Parser::new_from_str(text) {
        let Ok((event, span)) = event else {
            return Ok(());
        };
        match event {
            Event::SequenceStart(..) | Event::MappingStart(..) => {
                depth += 1;
                if depth > MAX_DEPTH {
                    return Err(YamlError {
                        line: span.start.line(),
                        path: String::new(),
                        reason: format!("nested deeper than {MAX_DEPTH} levels"),
                    });
                }
            }
            Event::SequenceEnd | Event::MappingEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

pub(super) fn parse(text: &str) -> Result<Located, YamlError> {
    check_depth(text)?;
    let docs = MarkedYaml::load_from_str(text).map_err(|e| YamlError {
        line: e.marker().line(),
        path: String::new(),
        reason: format!("invalid YAML: {}", e.info()),
    })?;
    let mut lines = HashMap::new();
    let value = match docs.as_slice() {
        [] => Value::Object(Map::new()),
        [doc] => convert(doc, "", &mut lines)?,
        [_, second, ..] => {
            return Err(YamlError {
                line: second.span.start.line(),
                path: String::new(),
                reason: "the file holds several YAML documents; hookgate reads exactly one".into(),
            });
        }
    };
    // An empty file or a file of comments only is an empty config, not an error.
    let value = if value.is_null() {
        Value::Object(Map::new())
    } else {
        value
    };
    Ok(Located { value, lines })
}

fn convert(
    node: &MarkedYaml<'_>,
    path: &str,
    lines: &mut HashMap<String, usize>,
) -> Result<Value, YamlError> {
    let line = node.span.start.line();
    let fail = |reason: String| YamlError {
        line,
        path: path.to_owned(),
        reason,
    };
    Ok(match &node.data {
        YamlData::Value(scalar) => scalar_to_json(scalar).map_err(|e| fail(e.to_string()))?,
        YamlData::Representation(text, ..) => Value::String(text.to_string()),
        YamlData::Sequence(items) => {
            let mut out = Vec::with_capacity(items.len());
            for (i, item) in items.iter().enumerate() {
                let item_path = format!("{path}[{i}]");
                lines.insert(item_path.clone(), item.span.start.line());
                out.push(convert(item, &item_path, lines)?);
            }
            Value::Array(out)
        }
        YamlData::Mapping(entries) => {
            let mut out = Map::with_capacity(entries.len());
            for (key, value) in entries {
                let key_text = match &key.data {
                    YamlData::Value(Scalar::String(s)) => s.to_string(),
                    YamlData::Value(Scalar::Integer(i)) => i.to_string(),
                    YamlData::Value(Scalar::Boolean(b)) => b.to_string(),
                    YamlData::Representation(text, ..) => text.to_string(),
                    _ => return Err(fail("mapping keys must be plain strings".into())),
                };
                let key_path = if path.is_empty() {
                    key_text.clone()
                } else {
                    format!("{path}.{key_text}")
                };
                lines.insert(key_path.clone(), key.span.start.line());
                let converted = convert(value, &key_path, lines)?;
                out.insert(key_text, converted);
            }
            Value::Object(out)
        }
        YamlData::Tagged(_, inner) => convert(inner, path, lines)?,
        YamlData::Alias(_) => return Err(fail("YAML aliases are not supported; write the value out".into())),
        YamlData::BadValue => return Err(fail("a value that is not valid YAML".into())),
    })
}

/// A YAML float that JSON cannot hold (`.inf`, `.nan`).
#[derive(Debug, thiserror::Error)]
#[error("{0} is not a finite number")]
struct NotFinite(f64);

fn scalar_to_json(scalar: &Scalar<'_>) -> Result<Value, NotFinite> {
    Ok(match scalar {
        Scalar::Null => Value::Null,
        Scalar::Boolean(b) => Value::Bool(*b),
        Scalar::Integer(i) => Value::Number((*i).into()),
        Scalar::FloatingPoint(f) => Number::from_f64(f.into_inner())
            .map(Value::Number)
            .ok_or(NotFinite(f.into_inner()))?,
        Scalar::String(s) => Value::String(s.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converts_nested_yaml_and_remembers_key_lines() {
        let doc =
            parse("server:\n  listen: 127.0.0.1:8080\nendpoints:\n  a:\n    topics: [x, y]\n    n: 3\n")
                .unwrap();
        assert_eq!(doc.value["server"]["listen"], "127.0.0.1:8080");
        assert_eq!(doc.value["endpoints"]["a"]["topics"][1], "y");
        assert_eq!(doc.value["endpoints"]["a"]["n"], 3);
        assert_eq!(doc.line_of("server.listen"), 2);
        assert_eq!(doc.line_of("endpoints.a.n"), 6);
        // An unknown child falls back to its nearest known ancestor.
        assert_eq!(doc.line_of("endpoints.a.colour"), 4);
        assert_eq!(doc.line_of("endpoints.a.topics[1]"), 5);
    }

    #[test]
    fn syntax_errors_carry_their_line() {
        let err = parse("a: 1\nb: [unclosed\nc: 2\n").unwrap_err();
        assert!(err.line >= 2, "{err:?}");
        assert!(err.reason.starts_with("invalid YAML"), "{err:?}");
    }

    #[test]
    fn duplicate_keys_are_refused() {
        let err = parse("a: 1\na: 2\n").unwrap_err();
        assert_eq!(err.line, 2, "{err:?}");
    }

    #[test]
    fn an_empty_document_is_an_empty_mapping() {
        assert_eq!(
            parse("# nothing here\n").unwrap().value,
            Value::Object(Map::new())
        );
        assert_eq!(parse("").unwrap().value, Value::Object(Map::new()));
    }

    #[test]
    fn several_documents_are_refused() {
        let err = parse("a: 1\n---\nb: 2\n").unwrap_err();
        assert!(err.reason.contains("several YAML documents"), "{err:?}");
    }
}
