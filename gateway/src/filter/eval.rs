//! Evaluating a compiled filter against an event's view.
//!
//! The rules, for every operator alike:
//! - A path with `$` reads every item of the array there; a test holds when it holds for any
//!   of the values the path reaches (Convoy's wildcard).
//! - A value that is an array is tested itself and item by item: `{"tags": "urgent"}` holds
//!   for `["urgent", "support"]` (both grammars' "array contains").
//! - A type mismatch is no match, never an error: `$gt 5` does not hold for `"6"`. Numbers
//!   compare as numbers (`1` equals `1.0`), strings by their bytes (so RFC 3339 times in one
//!   offset compare in time order).
//! - A missing field fails every test but `$exist: false`, `$neq` and `$nin`, which are the
//!   negations of `$eq` and `$in` ("no value there is ...", as MongoDB has it).

use std::cmp::Ordering;

use serde_json::{Number, Value};

use super::compile::{Cmp, InSet, Node, Op, Step, Test};

pub(super) fn matches(node: &Node, input: &Value) -> bool {
    match node {
        Node::All(nodes) => nodes.iter().all(|n| matches(n, input)),
        Node::Any(nodes) => nodes.iter().any(|n| matches(n, input)),
        Node::Not(node) => !matches(node, input),
        Node::Test(test) => holds(test, input),
    }
}

fn holds(test: &Test, input: &Value) -> bool {
    let steps = &test.path.steps;
    match &test.op {
        Op::Exist(want) => any_value(input, steps, &mut |_| true) == *want,
        Op::Neq(literal) => !any_value(input, steps, &mut |v| contains(v, |x| json_eq(x, literal))),
        Op::Nin(set) => !any_value(input, steps, &mut |v| contains(v, |x| in_set(x, set))),
        op => any_value(input, steps, &mut |v| contains(v, |x| positive(op, x))),
    }
}

/// Whether `test` holds for the value or, for an array, for one of its items.
fn contains(value: &Value, test: impl Fn(&Value) -> bool) -> bool {
    test(value) || matches!(value, Value::Array(items) if items.iter().any(&test))
}

fn positive(op: &Op, value: &Value) -> bool {
    match op {
        Op::Eq(literal) => json_eq(value, literal),
        Op::Cmp(cmp, literal) => order(value, literal).is_some_and(|o| accepts(*cmp, o)),
        Op::In(set) => in_set(value, set),
        Op::Regex(regex) => value.as_str().is_some_and(|s| regex.is_match(s)),
        Op::StartsWith(prefix) => value.as_str().is_some_and(|s| s.starts_with(prefix.as_str())),
        Op::EndsWith(suffix) => value.as_str().is_some_and(|s| s.ends_with(suffix.as_str())),
        Op::Neq(_) | Op::Nin(_) | Op::Exist(_) => unreachable!("negations are evaluated in `holds`"),
    }
}

fn accepts(cmp: Cmp, order: Ordering) -> bool {
    match cmp {
        Cmp::Gt => order == Ordering::Greater,
        Cmp::Gte => order != Ordering::Less,
        Cmp::Lt => order == Ordering::Less,
        Cmp::Lte => order != Ordering::Greater,
    }
}

fn in_set(value: &Value, set: &InSet) -> bool {
    match set {
        InSet::List(items) => items.iter().any(|item| json_eq(value, item)),
        InSet::Substring(part) => value.as_str().is_some_and(|s| s.contains(part.as_str())),
    }
}

/// Whether `f` holds for any value the path reaches from `value`.
fn any_value(value: &Value, steps: &[Step], f: &mut dyn FnMut(&Value) -> bool) -> bool {
    let Some((step, rest)) = steps.split_first() else {
        return f(value);
    };
    match step {
        Step::Key(key) => child(value, key).is_some_and(|c| any_value(c, rest, f)),
        Step::Each => match value {
            Value::Array(items) => items.iter().any(|item| any_value(item, rest, f)),
            _ => false,
        },
    }
}

/// A key of an object, or an item of an array by its number (`items.0.sku`).
fn child<'v>(value: &'v Value, key: &str) -> Option<&'v Value> {
    match value {
        Value::Object(map) => map.get(key),
        Value::Array(items) => key.parse::<usize>().ok().and_then(|i| items.get(i)),
        _ => None,
    }
}

/// JSON equality with numbers compared by value.
fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => number_order(x, y) == Some(Ordering::Equal),
        (Value::Array(xs), Value::Array(ys)) => {
            xs.len() == ys.len() && xs.iter().zip(ys).all(|(x, y)| json_eq(x, y))
        }
        (Value::Object(xs), Value::Object(ys)) => {
            xs.len() == ys.len() && xs.iter().all(|(k, x)| ys.get(k).is_some_and(|y| json_eq(x, y)))
        }
        _ => a == b,
    }
}

/// Numbers by value, strings by bytes; other pairs have no order.
fn order(value: &Value, literal: &Value) -> Option<Ordering> {
    match (value, literal) {
        (Value::Number(x), Value::Number(y)) => number_order(x, y),
        (Value::String(x), Value::String(y)) => Some(x.as_str().cmp(y.as_str())),
        _ => None,
    }
}

/// Integers exactly, anything else as `f64`.
fn number_order(x: &Number, y: &Number) -> Option<Ordering> {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        return Some(a.cmp(&b));
    }
    if let (Some(a), Some(b)) = (x.as_u64(), y.as_u64()) {
        return Some(a.cmp(&b));
    }
    x.as_f64()?.partial_cmp(&y.as_f64()?)
}

/// Whether the node holds, and why in words: the condition that failed, or the ones that held.
pub(super) fn explain(node: &Node, input: &Value) -> (bool, String) {
    match node {
        Node::All(nodes) if nodes.is_empty() => (true, "the filter has no conditions".into()),
        Node::All(nodes) => {
            let mut held = Vec::with_capacity(nodes.len());
            for node in nodes {
                let (ok, why) = explain(node, input);
                if !ok {
                    return (false, why);
                }
                held.push(why);
            }
            (true, held.join("; "))
        }
        Node::Any(nodes) => {
            let mut failed = Vec::with_capacity(nodes.len());
            for node in nodes {
                let (ok, why) = explain(node, input);
                if ok {
                    return (true, why);
                }
                failed.push(why);
            }
            (
                false,
                format!("no condition of $or holds ({})", failed.join(" | ")),
            )
        }
        Node::Not(node) => {
            let (ok, why) = explain(node, input);
            (!ok, format!("$not ({why})"))
        }
        Node::Test(test) => {
            let ok = holds(test, input);
            (ok, describe(test, input, ok))
        }
    }
}

/// How many found values an explanation shows.
const SHOWN_VALUES: usize = 3;
/// How long a value shown in an explanation may be, in characters.
const SHOWN_CHARS: usize = 60;

/// "`payload.amount` is 50: $gte 100 does not hold".
fn describe(test: &Test, input: &Value, ok: bool) -> String {
    let mut found = Vec::new();
    let mut count = 0;
    any_value(input, &test.path.steps, &mut |v| {
        count += 1;
        if found.len() < SHOWN_VALUES {
            found.push(short(v));
        }
        false
    });
    let seen = match count {
        0 => "is missing".to_owned(),
        1 => format!("is {}", found[0]),
        n => {
            let more = if n > SHOWN_VALUES { ", …" } else { "" };
            format!("has {n} values ({}{more})", found.join(", "))
        }
    };
    format!(
        "`{}` {seen}: {} {} {}",
        test.path.shown,
        test.op.name(),
        short(&test.op.operand()),
        if ok { "holds" } else { "does not hold" }
    )
}

fn short(value: &Value) -> String {
    let text = value.to_string();
    if text.chars().count() <= SHOWN_CHARS {
        return text;
    }
    let cut: String = text.chars().take(SHOWN_CHARS).collect();
    format!("{cut}…")
}
