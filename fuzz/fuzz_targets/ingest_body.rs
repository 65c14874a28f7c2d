//! The ingestion body parser (`POST /v1/topics/{topic}/events` and `.../batch`) on arbitrary
//! bytes: anyone with an API key sends these. It must refuse with a 4xx and a code, or yield
//! events that hold the API's promises: one event (or 1–1000 with distinct ids), a non-empty
//! type, a payload that is valid JSON nested at most 64 deep.

#![no_main]

use hookgate::api::{BodyForm, parse_body};
use libfuzzer_sys::fuzz_target;

/// Nesting depth of a JSON text, counted by serde_json itself (independent of the parser's
/// own depth check).
fn depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(fields) => 1 + fields.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

fuzz_target!(|input: (bool, &[u8])| {
    let (batch, body) = input;
    let form = if batch { BodyForm::Batch } else { BodyForm::One };
    match parse_body("orders", form, body) {
        Ok(events) => {
            match form {
                BodyForm::One => assert_eq!(events.len(), 1),
                BodyForm::Batch => assert!((1..=1000).contains(&events.len())),
            }
            let mut ids = std::collections::HashSet::new();
            for event in &events {
                assert_eq!(event.topic, "orders");
                assert!(!event.event_type.is_empty() && event.event_type.len() <= 255);
                assert_eq!(event.content_type, "application/json");
                if let Some(id) = &event.id {
                    assert!(ids.insert(id.clone()), "duplicate id {id} accepted");
                    assert!(id.bytes().all(|b| b.is_ascii_graphic()));
                }
                let payload: serde_json::Value = serde_json::from_slice(&event.payload)
                    .unwrap_or_else(|e| panic!("an accepted payload is not JSON: {e}"));
                assert!(depth(&payload) <= 64, "a payload nested {} deep", depth(&payload));
            }
        }
        Err(error) => {
            assert!(error.status.is_client_error(), "{}: {}", error.status, error.message);
            assert!(!error.code.is_empty());
        }
    }
});
