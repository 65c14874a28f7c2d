//! Wraps the payload in a CloudEvents 1.0 event, structured JSON mode:
//! `specversion`, `id` (the event id), `type` (the event type), `source` (config), `time`
//! (when the gateway received the event), `datacontenttype` and `data` (the payload).
//!
//! Config: `source` — the event source URI-reference; default `/hookgate/topics/<topic>`.
//! `subject` — optional, copied to the `subject` attribute. Other keys are ignored (and
//! logged at debug level), so configs stay forward-compatible.
//!
//! A JSON payload becomes `data`; any other payload becomes `data_base64`, as the CloudEvents
//! JSON format prescribes. The request's `Content-Type` becomes
//! `application/cloudevents+json; charset=utf-8`; other headers are kept.
//!
//! The event is written directly: a JSON payload is validated and copied in as it is, not
//! parsed into a tree and printed again, which is most of the cost of a call otherwise.

wit_bindgen::generate!({ world: "transformer", path: "../../wit" });

use base64::Engine as _;
use hookgate::plugin::{config, log};
use serde_json::value::RawValue;

struct CloudEvents;

const KNOWN_KEYS: &[&str] = &["source", "subject"];

impl Guest for CloudEvents {
    fn transform(
        _endpoint: EndpointInfo,
        event: EventInfo,
        _delivery: DeliveryInfo,
        message: &OutgoingMessage,
    ) -> Result<Outcome, PluginError> {
        for key in config::keys() {
            if !KNOWN_KEYS.contains(&key.as_str()) {
                log::log(log::Level::Debug, &format!("ignoring unknown config key `{key}`"));
            }
        }
        let source = config::get("source").unwrap_or_else(|| format!("/hookgate/topics/{}", event.topic));
        let content_type = message
            .header("content-type")
            .and_then(|value| String::from_utf8(value).ok())
            .unwrap_or_else(|| "application/json".to_owned());
        let payload = message.body();
        let time = chrono::DateTime::from_timestamp_millis(event.received_at_ms as i64)
            .ok_or_else(|| PluginError {
                code: "bad_time".into(),
                message: format!("received-at-ms {} is out of range", event.received_at_ms),
            })?
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);

        let mut body = Vec::with_capacity(payload.len() + 256);
        body.extend_from_slice(br#"{"specversion":"1.0","id":"#);
        json_string(&mut body, &event.id)?;
        body.extend_from_slice(br#","type":"#);
        json_string(&mut body, &event.event_type)?;
        body.extend_from_slice(br#","source":"#);
        json_string(&mut body, &source)?;
        if let Some(subject) = config::get("subject") {
            body.extend_from_slice(br#","subject":"#);
            json_string(&mut body, &subject)?;
        }
        body.extend_from_slice(br#","time":"#);
        json_string(&mut body, &time)?;
        body.extend_from_slice(br#","datacontenttype":"#);
        json_string(&mut body, &content_type)?;
        match serde_json::from_slice::<&RawValue>(&payload) {
            Ok(data) if is_json(&content_type) => {
                body.extend_from_slice(br#","data":"#);
                body.extend_from_slice(data.get().as_bytes());
            }
            _ => {
                body.extend_from_slice(br#","data_base64":""#);
                let encoded = base64::engine::general_purpose::STANDARD.encode(&payload);
                body.extend_from_slice(encoded.as_bytes());
                body.push(b'"');
            }
        }
        body.push(b'}');

        // Setting a header replaces every value it had; the others are kept as they were lent.
        Ok(Outcome::Forward(Edits {
            remove_headers: Vec::new(),
            set_headers: vec![(
                "Content-Type".into(),
                b"application/cloudevents+json; charset=utf-8".to_vec(),
            )],
            body: Some(body),
        }))
    }
}

/// Appends `text` as a JSON string (quoted and escaped).
fn json_string(out: &mut Vec<u8>, text: &str) -> Result<(), PluginError> {
    serde_json::to_writer(out, text).map_err(|e| PluginError {
        code: "encode".into(),
        message: e.to_string(),
    })
}

fn is_json(content_type: &str) -> bool {
    let essence = content_type
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    essence == "application/json" || essence.ends_with("+json")
}

export!(CloudEvents);
