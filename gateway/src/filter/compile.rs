//! From a filter document to the tree [`super::eval`] walks, with every mistake and its path.

use regex::{Regex, RegexBuilder};
use serde_json::{Map, Value};

use super::{FilterError, ROOT_FIELDS};

/// Conditions (each test, each logical operator, each item of an `$in` list) one filter may
/// hold: enough for any filter a person writes, and a bound on the work of one event.
pub const MAX_NODES: usize = 1000;
/// The longest `$regex` pattern taken, in bytes.
pub const MAX_PATTERN_BYTES: usize = 1024;
/// What one compiled `$regex` may cost in memory (its program and its lazy DFA's cache): a
/// short pattern that expands (`a{1000}{1000}`) is refused rather than built.
const REGEX_SIZE_LIMIT: usize = 256 * 1024;
/// How deeply a filter may nest objects and operators.
const MAX_DEPTH: usize = 32;

pub(super) enum Node {
    All(Vec<Node>),
    Any(Vec<Node>),
    Not(Box<Node>),
    Test(Test),
}

pub(super) struct Test {
    pub(super) path: FieldPath,
    pub(super) op: Op,
}

/// A field of the event's view: `payload.items.$.sku`.
#[derive(Clone, Default)]
pub(super) struct FieldPath {
    /// As the explanations show it, the root under its canonical name.
    pub(super) shown: String,
    pub(super) steps: Vec<Step>,
}

#[derive(Clone)]
pub(super) enum Step {
    /// A key of an object, or an index of an array when it is a number.
    Key(String),
    /// `$`: every item of an array.
    Each,
}

pub(super) enum Op {
    Eq(Value),
    Neq(Value),
    Cmp(Cmp, Value),
    In(InSet),
    Nin(InSet),
    Exist(bool),
    Regex(Regex),
    StartsWith(String),
    EndsWith(String),
}

#[derive(Clone, Copy)]
pub(super) enum Cmp {
    Gt,
    Gte,
    Lt,
    Lte,
}

pub(super) enum InSet {
    /// The value is one of these.
    List(Vec<Value>),
    /// The value is a string holding this one (Outpost's substring form).
    Substring(String),
}

const OPERATORS: &[&str] = &[
    "$eq",
    "$neq",
    "$gt",
    "$gte",
    "$lt",
    "$lte",
    "$in",
    "$nin",
    "$exist",
    "$regex",
    "$startsWith",
    "$endsWith",
];

pub(super) fn compile(document: &Value) -> Result<Node, Vec<FilterError>> {
    let mut compiler = Compiler::default();
    let root = match document {
        Value::Object(map) => compiler.object(&Place::default(), map, 0),
        other => {
            compiler.error(
                "",
                format!(
                    "a filter is an object of field paths and operators, not {}",
                    kind(other)
                ),
            );
            Node::All(Vec::new())
        }
    };
    if compiler.errors.is_empty() {
        Ok(root)
    } else {
        Err(compiler.errors)
    }
}

/// Where the compiler is: its path in the document (for errors) and the event field the
/// values there apply to (none at the top, where only fields and logical operators go).
#[derive(Clone, Default)]
struct Place {
    doc: String,
    field: Option<FieldPath>,
}

impl Place {
    fn key(&self, key: &str) -> String {
        if self.doc.is_empty() {
            key.to_owned()
        } else {
            format!("{}.{key}", self.doc)
        }
    }

    fn at(&self, doc: String) -> Place {
        Place {
            doc,
            field: self.field.clone(),
        }
    }
}

#[derive(Default)]
struct Compiler {
    errors: Vec<FilterError>,
    nodes: usize,
}

impl Compiler {
    fn error(&mut self, path: &str, reason: String) {
        self.errors.push(FilterError {
            path: path.to_owned(),
            reason,
        });
    }

    /// Counts `n` more conditions; false (with one error) once there are too many.
    fn count(&mut self, n: usize) -> bool {
        let before = self.nodes;
        self.nodes += n;
        if self.nodes > MAX_NODES {
            if before <= MAX_NODES {
                self.error("", format!("a filter holds at most {MAX_NODES} conditions"));
            }
            return false;
        }
        true
    }

    /// A value at `place`: an object of fields and operators, or a literal the field equals.
    fn value(&mut self, place: &Place, value: &Value, depth: usize) -> Node {
        if depth > MAX_DEPTH {
            self.error(&place.doc, format!("nested deeper than {MAX_DEPTH} levels"));
            return Node::All(Vec::new());
        }
        match (value, &place.field) {
            (Value::Object(map), None) => self.object(place, map, depth),
            (Value::Object(map), Some(_)) if map.is_empty() => {
                self.error(
                    &place.doc,
                    "an empty object tests nothing: give a value, or operators such as {\"$exist\": true}"
                        .into(),
                );
                Node::All(Vec::new())
            }
            (Value::Object(map), Some(_)) => self.object(place, map, depth),
            (literal, Some(field)) => {
                self.count(1);
                Node::Test(Test {
                    path: field.clone(),
                    op: Op::Eq(literal.clone()),
                })
            }
            (literal, None) => {
                self.error(
                    &place.doc,
                    format!(
                        "{} needs a field to compare with, e.g. {{\"payload.status\": …}}",
                        kind(literal)
                    ),
                );
                Node::All(Vec::new())
            }
        }
    }

    /// An object: each key a field (relative to the place), a logical or a comparison
    /// operator; all of them must hold.
    fn object(&mut self, place: &Place, map: &Map<String, Value>, depth: usize) -> Node {
        let mut all = Vec::with_capacity(map.len());
        for (key, value) in map {
            let doc = place.key(key);
            let node = match key.as_str() {
                "$and" | "$or" => self.logical(&place.at(doc), key, value, depth),
                "$not" => {
                    self.count(1);
                    Node::Not(Box::new(self.value(&place.at(doc), value, depth + 1)))
                }
                op if OPERATORS.contains(&op) => match &place.field {
                    Some(field) => self.operator(&doc, field, op, value),
                    None => {
                        self.error(
                            &doc,
                            format!("`{op}` needs a field: put it under one, e.g. {{\"payload.amount\": {{\"{op}\": …}}}}"),
                        );
                        continue;
                    }
                },
                op if op.starts_with('$') && op != "$" && !op.starts_with("$.") => {
                    self.error(
                        &doc,
                        format!(
                            "unknown operator `{op}` (known: $and, $or, $not, {})",
                            OPERATORS.join(", ")
                        ),
                    );
                    continue;
                }
                field => match self.field(place, field, &doc) {
                    Some(path) => {
                        let inner = Place {
                            doc,
                            field: Some(path),
                        };
                        self.value(&inner, value, depth + 1)
                    }
                    None => continue,
                },
            };
            all.push(node);
        }
        if all.len() == 1 {
            return all.pop().expect("one node");
        }
        Node::All(all)
    }

    /// `$and` / `$or`: a non-empty list, each item a value at the same place.
    fn logical(&mut self, place: &Place, op: &str, value: &Value, depth: usize) -> Node {
        let items = match value {
            Value::Array(items) if !items.is_empty() => items,
            other => {
                self.error(
                    &place.doc,
                    format!("`{op}` takes a non-empty list of conditions, not {}", kind(other)),
                );
                return Node::All(Vec::new());
            }
        };
        self.count(1);
        let nodes = items
            .iter()
            .enumerate()
            .map(|(i, item)| self.value(&place.at(format!("{}[{i}]", place.doc)), item, depth + 1))
            .collect();
        if op == "$and" {
            Node::All(nodes)
        } else {
            Node::Any(nodes)
        }
    }

    /// The field a key names, relative to the place: dotted segments, `$` for every item of an
    /// array. At the top, the first segment is one of the view's fields.
    fn field(&mut self, place: &Place, key: &str, doc: &str) -> Option<FieldPath> {
        let mut path = place.field.clone().unwrap_or_default();
        for (i, segment) in key.split('.').enumerate() {
            let top = i == 0 && place.field.is_none();
            let step = match segment {
                "" => {
                    self.error(doc, format!("`{key}` has an empty segment"));
                    return None;
                }
                "$" if !top => Step::Each,
                s if s.starts_with('$') => {
                    self.error(
                        doc,
                        format!(
                            "`{s}` inside a field path: operators go in an object under the field, \
                             e.g. {{\"payload.amount\": {{\"$gt\": 5}}}}"
                        ),
                    );
                    return None;
                }
                s if top => match ROOT_FIELDS.iter().find(|(name, _)| *name == s) {
                    Some((_, canonical)) => Step::Key((*canonical).to_owned()),
                    None => {
                        let known: Vec<&str> = ROOT_FIELDS.iter().map(|(name, _)| *name).collect();
                        self.error(
                            doc,
                            format!("unknown field `{s}`: a filter reads {}", known.join(", ")),
                        );
                        return None;
                    }
                },
                s => Step::Key(s.to_owned()),
            };
            let shown = match &step {
                Step::Key(k) => k.as_str(),
                Step::Each => "$",
            };
            if !path.shown.is_empty() {
                path.shown.push('.');
            }
            path.shown.push_str(shown);
            path.steps.push(step);
        }
        Some(path)
    }

    /// One comparison operator on a field, its operand checked.
    fn operator(&mut self, doc: &str, field: &FieldPath, op: &str, operand: &Value) -> Node {
        let compiled = match op {
            "$eq" => Some(Op::Eq(operand.clone())),
            "$neq" => Some(Op::Neq(operand.clone())),
            "$gt" | "$gte" | "$lt" | "$lte" => self.comparison(doc, op, operand),
            "$in" | "$nin" => self.in_set(doc, op, operand),
            "$exist" => match operand {
                Value::Bool(want) => Some(Op::Exist(*want)),
                other => {
                    self.error(doc, format!("`$exist` takes true or false, not {}", kind(other)));
                    None
                }
            },
            "$regex" => self.regex(doc, operand),
            _ => match operand.as_str() {
                Some(text) if op == "$startsWith" => Some(Op::StartsWith(text.to_owned())),
                Some(text) => Some(Op::EndsWith(text.to_owned())),
                None => {
                    self.error(doc, format!("`{op}` takes a string, not {}", kind(operand)));
                    None
                }
            },
        };
        self.count(1);
        match compiled {
            Some(op) => Node::Test(Test {
                path: field.clone(),
                op,
            }),
            None => Node::All(Vec::new()),
        }
    }

    fn comparison(&mut self, doc: &str, op: &str, operand: &Value) -> Option<Op> {
        if !matches!(operand, Value::Number(_) | Value::String(_)) {
            self.error(
                doc,
                format!("`{op}` compares with a number or a string, not {}", kind(operand)),
            );
            return None;
        }
        let cmp = match op {
            "$gt" => Cmp::Gt,
            "$gte" => Cmp::Gte,
            "$lt" => Cmp::Lt,
            _ => Cmp::Lte,
        };
        Some(Op::Cmp(cmp, operand.clone()))
    }

    fn in_set(&mut self, doc: &str, op: &str, operand: &Value) -> Option<Op> {
        let set = match operand {
            Value::Array(items) => {
                if !self.count(items.len()) {
                    return None;
                }
                InSet::List(items.clone())
            }
            Value::String(text) => InSet::Substring(text.clone()),
            other => {
                self.error(
                    doc,
                    format!(
                        "`{op}` takes a list (or a string to find inside a string), not {}",
                        kind(other)
                    ),
                );
                return None;
            }
        };
        Some(if op == "$in" { Op::In(set) } else { Op::Nin(set) })
    }

    /// A `$regex`, compiled now under the size limits; the `regex` crate matches in time
    /// linear in the input, so no pattern can backtrack catastrophically.
    fn regex(&mut self, doc: &str, operand: &Value) -> Option<Op> {
        let Some(pattern) = operand.as_str() else {
            self.error(
                doc,
                format!("`$regex` takes a pattern string, not {}", kind(operand)),
            );
            return None;
        };
        if pattern.len() > MAX_PATTERN_BYTES {
            self.error(
                doc,
                format!(
                    "the pattern is {} bytes; at most {MAX_PATTERN_BYTES} are taken",
                    pattern.len()
                ),
            );
            return None;
        }
        match RegexBuilder::new(pattern)
            .size_limit(REGEX_SIZE_LIMIT)
            .dfa_size_limit(REGEX_SIZE_LIMIT)
            .build()
        {
            Ok(regex) => Some(Op::Regex(regex)),
            Err(regex::Error::CompiledTooBig(_)) => {
                self.error(
                    doc,
                    format!(
                        "the pattern compiles to more than {} KiB; simplify it",
                        REGEX_SIZE_LIMIT / 1024
                    ),
                );
                None
            }
            Err(e) => {
                // The crate's message spans lines (the pattern, a caret); its last line says why.
                let text = e.to_string();
                let why = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or(&text);
                let why = why.trim();
                self.error(
                    doc,
                    format!(
                        "not a valid regex: {}",
                        why.strip_prefix("error: ").unwrap_or(why)
                    ),
                );
                None
            }
        }
    }
}

/// The JSON kind of a value, for messages.
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

impl Op {
    pub(super) fn name(&self) -> &'static str {
        match self {
            Op::Eq(_) => "$eq",
            Op::Neq(_) => "$neq",
            Op::Cmp(Cmp::Gt, _) => "$gt",
            Op::Cmp(Cmp::Gte, _) => "$gte",
            Op::Cmp(Cmp::Lt, _) => "$lt",
            Op::Cmp(Cmp::Lte, _) => "$lte",
            Op::In(_) => "$in",
            Op::Nin(_) => "$nin",
            Op::Exist(_) => "$exist",
            Op::Regex(_) => "$regex",
            Op::StartsWith(_) => "$startsWith",
            Op::EndsWith(_) => "$endsWith",
        }
    }

    /// The operand as the document wrote it.
    pub(super) fn operand(&self) -> Value {
        match self {
            Op::Eq(v) | Op::Neq(v) | Op::Cmp(_, v) => v.clone(),
            Op::In(set) | Op::Nin(set) => match set {
                InSet::List(items) => Value::Array(items.clone()),
                InSet::Substring(text) => Value::String(text.clone()),
            },
            Op::Exist(want) => Value::Bool(*want),
            Op::Regex(regex) => Value::String(regex.as_str().to_owned()),
            Op::StartsWith(text) | Op::EndsWith(text) => Value::String(text.clone()),
        }
    }
}
