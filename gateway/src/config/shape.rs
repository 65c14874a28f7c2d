//! From the YAML (or JSON) tree to the raw structs, with every mistake of shape at once. serde
//! stops at the first unknown key or value of the wrong type; so the tree is read again without
//! what it stopped at, until it reads, and each mistake met on the way is one problem. Two typos
//! in keys are then two lines of one `hookgate config check`, not two runs.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use serde_path_to_error::Segment;

/// More mistakes than this in one file are not worth reading on for.
const MAX_ROUNDS: usize = 100;

/// What reading the tree found.
pub(super) struct Shaped<T> {
    /// The raw config, read from what was left of the tree once every mistake was taken out.
    /// None when no such reading was found (the rest of the checks then cannot run).
    pub(super) value: Option<T>,
    /// `(path, reason)` of each mistake, in the order found.
    pub(super) problems: Vec<(String, String)>,
    /// Paths taken out of the tree: the checks that run on what is left say nothing at or
    /// below them (what they would say follows from a mistake reported already).
    pub(super) removed: Vec<String>,
}

impl<T> Shaped<T> {
    /// Whether `path` lies at or below a value taken out of the tree.
    pub(super) fn covers(&self, path: &str) -> bool {
        self.removed.iter().any(|r| {
            path == r
                || path
                    .strip_prefix(r.as_str())
                    .is_some_and(|rest| rest.starts_with(['.', '[']))
        })
    }
}

/// One step of a path into the tree: a key of a mapping or an item of a sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Key(String),
    Item(usize),
}

/// Reads `tree` as a `T`, taking out what serde stops at, one mistake at a time:
/// - an unknown key: the key;
/// - a value of the wrong shape: the value (inside a sequence, the whole sequence, so that the
///   items after it keep their numbers). A value taken out of a mapping of names is first
///   replaced by `{}`, so that a topic or policy with a wrong key still exists for whatever
///   names it;
/// - a missing key: the mapping that misses it (and no problem if it was taken out here).
pub(super) fn read<T: DeserializeOwned>(mut tree: Value) -> Shaped<T> {
    let mut problems = Vec::new();
    let mut removed: Vec<Vec<Step>> = Vec::new();
    for _ in 0..MAX_ROUNDS {
        let error = match serde_path_to_error::deserialize::<_, T>(&tree) {
            Ok(value) => {
                return Shaped {
                    value: Some(value),
                    problems,
                    removed: removed.iter().map(|p| display(p)).collect(),
                };
            }
            Err(e) => e,
        };
        let reason = error.inner().to_string();
        let Some(at) = steps(error.path()) else {
            // A place in the tree serde cannot name: report it as serde words it, and stop.
            let path = error.path().to_string();
            problems.push((if path == "." { String::new() } else { path }, reason));
            break;
        };
        let next = if let Some(key) = quoted_after(&reason, "unknown field `") {
            let mut path = at;
            // The path may name the key already, or only its mapping.
            if path.last() != Some(&Step::Key(key.clone())) {
                path.push(Step::Key(key));
            }
            problems.push((display(&path), reason));
            take(&mut tree, &path, false)
        } else if let Some(key) = quoted_after(&reason, "missing field `") {
            let mut missing = at.clone();
            missing.push(Step::Key(key));
            if !removed.contains(&missing) {
                problems.push((display(&at), reason));
            }
            removed.push(at.clone());
            take(&mut tree, &at, false)
        } else {
            let path = match at.iter().position(|s| matches!(s, Step::Item(_))) {
                Some(item) => at[..item].to_vec(),
                None => at.clone(),
            };
            if !removed.contains(&path) {
                problems.push((display(&at), reason));
                removed.push(path.clone());
                take(&mut tree, &path, true)
            } else {
                take(&mut tree, &path, false)
            }
        };
        if !next {
            break;
        }
    }
    if problems.is_empty() {
        // Every round ends in a problem or follows from one; this is the guard of that.
        problems.push((String::new(), "the file cannot be read as a config".to_owned()));
    }
    Shaped {
        value: None,
        problems,
        removed: removed.iter().map(|p| display(p)).collect(),
    }
}

/// The steps of serde's path; None when it has a step that cannot be followed in the tree.
fn steps(path: &serde_path_to_error::Path) -> Option<Vec<Step>> {
    path.iter()
        .map(|segment| match segment {
            Segment::Seq { index } => Some(Step::Item(*index)),
            // An externally tagged enum (`auth: {bearer: …}`) is a mapping in the tree.
            Segment::Map { key } | Segment::Enum { variant: key } => Some(Step::Key(key.clone())),
            Segment::Unknown => None,
        })
        .collect()
}

/// `endpoints.billing.topics[0]`, as every problem writes a path.
fn display(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(key) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(key);
            }
            Step::Item(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// The text between `prefix` and the next backtick of a serde message.
fn quoted_after(reason: &str, prefix: &str) -> Option<String> {
    let rest = reason.strip_prefix(prefix)?;
    rest.split('`').next().map(str::to_owned)
}

/// Takes the value at `path` out of the tree, or (with `placeholder`, for a value in a
/// mapping) replaces it by `{}`. False when there is nothing there to take: reading again
/// would stop at the same place.
fn take(tree: &mut Value, path: &[Step], placeholder: bool) -> bool {
    let Some((last, parent)) = path.split_last() else {
        return false;
    };
    let mut node = tree;
    for step in parent {
        node = match (step, node) {
            (Step::Key(k), Value::Object(map)) => match map.get_mut(k) {
                Some(child) => child,
                None => return false,
            },
            (Step::Item(i), Value::Array(items)) => match items.get_mut(*i) {
                Some(child) => child,
                None => return false,
            },
            _ => return false,
        };
    }
    match (last, node) {
        (Step::Key(k), Value::Object(map)) => {
            if placeholder && map.get(k).is_some_and(|v| !is_empty_map(v)) {
                map.insert(k.clone(), Value::Object(Map::new()));
                true
            } else {
                map.remove(k).is_some()
            }
        }
        (Step::Item(i), Value::Array(items)) if *i < items.len() => {
            items.remove(*i);
            true
        }
        _ => false,
    }
}

fn is_empty_map(v: &Value) -> bool {
    v.as_object().is_some_and(Map::is_empty)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;
    use serde_json::json;
    use std::collections::BTreeMap;

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Root {
        #[serde(default)]
        server: Server,
        #[serde(default)]
        topics: BTreeMap<String, Topic>,
        #[serde(default)]
        endpoints: BTreeMap<String, Endpoint>,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Server {
        listen: Option<String>,
        #[serde(default)]
        keys: Vec<String>,
    }

    #[derive(Debug, Default, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Topic {
        policy: Option<String>,
    }

    #[derive(Debug, Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Endpoint {
        url: String,
        topics: Vec<String>,
    }

    /// The paths of the problems, sorted (a JSON tree keeps its keys sorted; the file's
    /// problems are sorted by line in the end).
    fn paths(shaped: &Shaped<Root>) -> Vec<&str> {
        let mut paths: Vec<&str> = shaped.problems.iter().map(|(p, _)| p.as_str()).collect();
        paths.sort_unstable();
        paths
    }

    #[test]
    fn every_unknown_key_is_found_in_one_reading() {
        let shaped: Shaped<Root> = read(json!({
            "server": {"listne": "x", "keys": ["a"], "colour": 1},
            "topics": {"orders": {"polcy": "fast"}},
            "endpoints": {"e": {"url": "http://h", "topics": ["orders"], "tpyes": []}},
        }));
        assert_eq!(
            paths(&shaped),
            [
                "endpoints.e.tpyes",
                "server.colour",
                "server.listne",
                "topics.orders.polcy"
            ]
        );
        assert!(
            shaped
                .problems
                .iter()
                .any(|(_, why)| why.starts_with("unknown field `listne`")),
            "{:?}",
            shaped.problems
        );
        let root = shaped.value.expect("the rest reads");
        assert_eq!(root.server.keys, ["a"]);
        assert!(
            root.topics.contains_key("orders"),
            "a topic with a wrong key still exists"
        );
        assert!(root.endpoints.contains_key("e"));
    }

    #[test]
    fn a_wrong_value_is_taken_out_and_the_rest_is_read_on() {
        let shaped: Shaped<Root> = read(json!({
            "server": {"listen": 5, "keys": ["a", {"b": 1}, "c"]},
            "topics": {"orders": "not a mapping", "users": {}},
            "endpoints": {
                "bad": {"url": "http://h", "topics": "orders"},
                "good": {"url": "http://h", "topics": ["users"], "x": 1},
            },
        }));
        assert_eq!(
            paths(&shaped),
            [
                "endpoints.bad.topics",
                "endpoints.good.x",
                "server.keys[1]",
                "server.listen",
                "topics.orders"
            ],
            "{:?}",
            shaped.problems
        );
        let root = shaped.value.as_ref().expect("the rest reads");
        assert_eq!(
            root.server,
            Server::default(),
            "the whole list goes, not one item"
        );
        assert!(
            root.topics.contains_key("orders"),
            "kept as `{{}}` for what names it"
        );
        assert!(
            !root.endpoints.contains_key("bad"),
            "without its required key, the endpoint goes"
        );
        assert!(root.endpoints.contains_key("good"));
        assert!(shaped.covers("server.keys"));
        assert!(shaped.covers("endpoints.bad.url"));
        assert!(!shaped.covers("endpoints.badge"));
        assert!(!shaped.covers("endpoints.good"));
    }

    #[test]
    fn a_missing_key_is_one_problem_of_its_mapping() {
        let shaped: Shaped<Root> = read(json!({"endpoints": {"e": {"url": "http://h"}}}));
        assert_eq!(paths(&shaped), ["endpoints.e"]);
        assert!(shaped.problems[0].1.contains("missing field `topics`"));
        assert!(shaped.value.unwrap().endpoints.is_empty());
    }

    fn tree() -> impl proptest::strategy::Strategy<Value = Value> {
        use proptest::prelude::*;
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::from),
            any::<i64>().prop_map(Value::from),
            "[a-z0-9 ]{0,6}".prop_map(Value::from),
        ];
        let keys = prop_oneof![
            Just("server".to_owned()),
            Just("listen".to_owned()),
            Just("topics".to_owned()),
            Just("endpoints".to_owned()),
            Just("url".to_owned()),
            Just("policy".to_owned()),
            Just("api_keys".to_owned()),
            Just("timeout".to_owned()),
            Just("schedule".to_owned()),
            "[a-z]{1,4}",
        ];
        leaf.prop_recursive(5, 48, 6, move |inner| {
            prop_oneof![
                proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                proptest::collection::btree_map(keys.clone(), inner, 0..5)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// Whatever the tree, the reading ends (within its rounds) with the raw config or with
        /// problems, never with neither, and no problem without a reason.
        #[test]
        fn any_tree_reads_or_says_why(value in tree()) {
            let shaped: Shaped<crate::config::RawConfig> = read(value);
            proptest::prop_assert!(shaped.value.is_some() || !shaped.problems.is_empty());
            for (_, reason) in &shaped.problems {
                proptest::prop_assert!(!reason.is_empty());
            }
        }
    }

    #[test]
    fn a_tree_of_the_wrong_kind_altogether_gives_one_problem_and_no_value() {
        let shaped: Shaped<Root> = read(json!(["a", "list"]));
        assert_eq!(shaped.problems.len(), 1, "{:?}", shaped.problems);
        assert!(shaped.value.is_none());
    }
}
