//! Content filters (README "Content filters"): which of the events an endpoint subscribes to it
//! actually receives, decided on the event's content at fan-out, before a delivery exists.
//!
//! The grammar is the one Convoy and Hookdeck Outpost share, so that their filters import
//! unchanged: a JSON document whose keys are field paths (dotted, with `$` as a wildcard over
//! an array's items) or the logical operators `$and`, `$or`, `$not`, and whose values are a
//! literal (equality; an array field matches when it holds the literal) or a set of operators
//! (`$eq $neq $gt $gte $lt $lte $in $nin $exist $regex $startsWith $endsWith`, all of which
//! must hold). It is evaluated against a view of the event ([`input`]): `type`, `tenant`,
//! `topic`, `id`, `channels`, `payload` (Outpost's `data` and Convoy's `body` name it too) and
//! `headers` (also `metadata`).
//!
//! A filter is compiled once, when the config or the API takes it: every mistake is refused
//! there with its path inside the filter, and a `$regex` is compiled then by the `regex` crate
//! (linear time in the input, whatever the pattern) under a size limit, so that no pattern can
//! make fan-out slow. Evaluation is pure and allocates nothing on the way to a yes or no;
//! [`Filter::explain`] says why, for the filter test call and the console.

mod compile;
mod eval;
#[cfg(test)]
mod tests;

use std::fmt;

use serde_json::{Map, Value};

use crate::model::Event;

pub use compile::{MAX_NODES, MAX_PATTERN_BYTES};

/// A compiled content filter; equal to another when their documents are.
pub struct Filter {
    source: Value,
    root: compile::Node,
}

/// Why a filter document cannot be compiled: `path` is where inside the document (dotted keys,
/// `[i]` for items: `payload.amount.$gte`, `$or[1]`), empty for the document itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterError {
    pub path: String,
    pub reason: String,
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.is_empty() {
            write!(f, "{}", self.reason)
        } else {
            write!(f, "{}: {}", self.path, self.reason)
        }
    }
}

/// Whether an event passes a filter, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub matched: bool,
    pub reason: String,
}

impl Filter {
    /// Compiles a filter document; every mistake in it is reported, each with its path. An
    /// empty document (`{}`) is no filter at all: `Ok(None)`, as Outpost removes a filter.
    pub fn compile(document: &Value) -> Result<Option<Filter>, Vec<FilterError>> {
        if document.as_object().is_some_and(Map::is_empty) {
            return Ok(None);
        }
        let root = compile::compile(document)?;
        Ok(Some(Filter {
            source: document.clone(),
            root,
        }))
    }

    /// The document as written.
    pub fn source(&self) -> &Value {
        &self.source
    }

    /// Whether the event viewed as `input` (see [`input`]) passes.
    pub fn matches(&self, input: &Value) -> bool {
        eval::matches(&self.root, input)
    }

    /// Whether the event passes and why: the condition that refused it, or those that let it
    /// through.
    pub fn explain(&self, input: &Value) -> Verdict {
        let (matched, reason) = eval::explain(&self.root, input);
        Verdict { matched, reason }
    }
}

impl PartialEq for Filter {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl fmt::Debug for Filter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Filter({})", self.source)
    }
}

/// The names a filter's top-level fields may take, each with the view's key it reads.
pub const ROOT_FIELDS: &[(&str, &str)] = &[
    ("type", "type"),
    ("tenant", "tenant"),
    ("topic", "topic"),
    ("id", "id"),
    ("channels", "channels"),
    ("payload", "payload"),
    ("data", "payload"),
    ("body", "payload"),
    ("headers", "headers"),
    ("metadata", "headers"),
];

/// The view of an event that filters read: `{id, topic, type, tenant, channels, payload,
/// headers}`. `tenant` is absent for an event without one, `payload` when the payload is not
/// JSON. `headers` are the event's own headers as each of its deliveries carries them
/// (`content-type`, `webhook-id`, `hookgate-event-type`, `hookgate-ordering-key`), lowercase.
/// Built once per event, however many endpoints' filters read it.
pub fn input(event: &Event) -> Value {
    let mut view = Map::new();
    view.insert("id".into(), Value::String(event.id.clone()));
    view.insert("topic".into(), Value::String(event.topic.clone()));
    view.insert("type".into(), Value::String(event.event_type.clone()));
    if let Some(tenant) = &event.tenant {
        view.insert("tenant".into(), Value::String(tenant.clone()));
    }
    view.insert(
        "channels".into(),
        Value::Array(event.labels.channels.iter().cloned().map(Value::String).collect()),
    );
    if let Ok(payload) = serde_json::from_slice::<Value>(&event.payload) {
        view.insert("payload".into(), payload);
    }
    let mut headers = Map::new();
    headers.insert("content-type".into(), Value::String(event.content_type.clone()));
    headers.insert("webhook-id".into(), Value::String(event.id.clone()));
    headers.insert(
        "hookgate-event-type".into(),
        Value::String(event.event_type.clone()),
    );
    if let Some(key) = &event.ordering_key {
        headers.insert("hookgate-ordering-key".into(), Value::String(key.clone()));
    }
    view.insert("headers".into(), Value::Object(headers));
    Value::Object(view)
}
