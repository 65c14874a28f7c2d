//! Drops fields from a JSON payload by path, before it leaves the gateway.
//!
//! Config: `paths` — the fields to drop, as a list (`paths: [customer.email, card.number]`,
//! which arrives as JSON text) or as one comma-separated string. A path is a dot-separated
//! list of object keys; `*` stands for every key of an object or every element of an array,
//! and a number picks an array element (`items.*.price`, `cards.0`). Paths that match nothing
//! are fine.
//!
//! Fails closed: a payload that is not JSON, or a binding without `paths`, fails the attempt
//! with a `plugin-error` instead of sending data that was meant to be redacted.

wit_bindgen::generate!({ world: "transformer", path: "../../wit" });

use hookgate::plugin::config;
use serde_json::Value;

struct Redact;

impl Guest for Redact {
    fn transform(
        _endpoint: EndpointInfo,
        _event: EventInfo,
        _delivery: DeliveryInfo,
        message: &OutgoingMessage,
    ) -> Result<Outcome, PluginError> {
        let paths = configured_paths()?;
        let mut doc: Value = serde_json::from_slice(&message.body()).map_err(|e| PluginError {
            code: "invalid_json".into(),
            message: format!("redact needs a JSON payload: {e}"),
        })?;
        for path in &paths {
            let segments: Vec<&str> = path.split('.').collect();
            remove_path(&mut doc, &segments);
        }
        let body = serde_json::to_vec(&doc).map_err(|e| PluginError {
            code: "encode".into(),
            message: e.to_string(),
        })?;
        Ok(Outcome::Forward(Edits {
            remove_headers: Vec::new(),
            set_headers: Vec::new(),
            body: Some(body),
        }))
    }
}

fn configured_paths() -> Result<Vec<String>, PluginError> {
    let raw = config::get("paths").ok_or_else(|| PluginError {
        code: "bad_config".into(),
        message: "redact needs `paths`: the JSON fields to drop".into(),
    })?;
    let paths: Vec<String> = match serde_json::from_str::<Vec<String>>(&raw) {
        Ok(list) => list,
        Err(_) => raw.split(',').map(|p| p.trim().to_owned()).collect(),
    };
    Ok(paths.into_iter().filter(|p| !p.is_empty()).collect())
}

/// Removes what `segments` points at inside `value`.
fn remove_path(value: &mut Value, segments: &[&str]) {
    let Some((first, rest)) = segments.split_first() else {
        return;
    };
    if rest.is_empty() {
        match value {
            Value::Object(map) if *first == "*" => map.clear(),
            Value::Object(map) => {
                map.remove(*first);
            }
            Value::Array(items) if *first == "*" => items.clear(),
            Value::Array(items) => {
                if let Some(i) = first.parse::<usize>().ok().filter(|i| *i < items.len()) {
                    items.remove(i);
                }
            }
            _ => {}
        }
        return;
    }
    match value {
        Value::Object(map) if *first == "*" => map.values_mut().for_each(|v| remove_path(v, rest)),
        Value::Object(map) => {
            if let Some(child) = map.get_mut(*first) {
                remove_path(child, rest);
            }
        }
        Value::Array(items) if *first == "*" => items.iter_mut().for_each(|v| remove_path(v, rest)),
        Value::Array(items) => {
            if let Some(child) = first.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                remove_path(child, rest);
            }
        }
        _ => {}
    }
}

export!(Redact);
