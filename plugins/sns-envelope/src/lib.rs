//! Wraps the payload the way Amazon SNS delivers to an HTTP/S subscription: the body becomes
//! the `Notification` JSON document and the `x-amz-sns-*` headers are set, so receivers written
//! for SNS can take hookgate's deliveries.
//!
//! Config: `topic_arn` (default `arn:aws:sns:us-east-1:000000000000:<topic>`),
//! `subscription_arn` (default `<topic_arn>:<endpoint name>`), `subject` (optional).
//! Unknown keys are ignored.
//!
//! `MessageId` is the event id, stable across attempts, so receivers can deduplicate. The
//! envelope carries no SNS certificate signature (`Signature*` fields are absent): hookgate
//! is not AWS. Pair this plugin with a signer when receivers must authenticate.

wit_bindgen::generate!({ world: "transformer", path: "../../wit" });

use hookgate::plugin::config;
use serde_json::{Map, Value};

struct SnsEnvelope;

impl Guest for SnsEnvelope {
    fn transform(
        endpoint: EndpointInfo,
        event: EventInfo,
        _delivery: DeliveryInfo,
        message: &OutgoingMessage,
    ) -> Result<Outcome, PluginError> {
        let topic_arn = config::get("topic_arn")
            .unwrap_or_else(|| format!("arn:aws:sns:us-east-1:000000000000:{}", event.topic));
        let subscription_arn =
            config::get("subscription_arn").unwrap_or_else(|| format!("{topic_arn}:{}", endpoint.name));
        let text = String::from_utf8(message.body()).map_err(|_| PluginError {
            code: "not_utf8".into(),
            message: "an SNS Message is a string; this payload is not UTF-8".into(),
        })?;
        let timestamp = chrono::DateTime::from_timestamp_millis(event.received_at_ms as i64)
            .ok_or_else(|| PluginError {
                code: "bad_time".into(),
                message: format!("received-at-ms {} is out of range", event.received_at_ms),
            })?
            .to_rfc3339_opts(chrono::SecondsFormat::Millis, true);

        let mut doc = Map::new();
        doc.insert("Type".into(), "Notification".into());
        doc.insert("MessageId".into(), event.id.clone().into());
        doc.insert("TopicArn".into(), topic_arn.clone().into());
        if let Some(subject) = config::get("subject") {
            doc.insert("Subject".into(), subject.into());
        }
        doc.insert("Message".into(), text.into());
        doc.insert("Timestamp".into(), timestamp.into());
        let mut attributes = Map::new();
        let mut event_type = Map::new();
        event_type.insert("Type".into(), "String".into());
        event_type.insert("Value".into(), event.event_type.into());
        attributes.insert("event_type".into(), Value::Object(event_type));
        doc.insert("MessageAttributes".into(), Value::Object(attributes));

        let body = serde_json::to_vec(&Value::Object(doc)).map_err(|e| PluginError {
            code: "encode".into(),
            message: e.to_string(),
        })?;
        let set_headers = vec![
            ("Content-Type".to_owned(), b"text/plain; charset=UTF-8".to_vec()),
            ("x-amz-sns-message-type".to_owned(), b"Notification".to_vec()),
            ("x-amz-sns-message-id".to_owned(), event.id.into_bytes()),
            ("x-amz-sns-topic-arn".to_owned(), topic_arn.into_bytes()),
            (
                "x-amz-sns-subscription-arn".to_owned(),
                subscription_arn.into_bytes(),
            ),
        ];
        // The request carries the envelope's headers only, as SNS's does: every header it was
        // lent goes.
        Ok(Outcome::Forward(Edits {
            remove_headers: header_names(&message.header_block()),
            set_headers,
            body: Some(body),
        }))
    }
}

/// The names in a header block (`name: value\r\n` lines).
fn header_names(block: &[u8]) -> Vec<String> {
    block
        .split(|b| *b == b'\n')
        .filter_map(|line| line.iter().position(|b| *b == b':').map(|colon| &line[..colon]))
        .map(|name| String::from_utf8_lossy(name).into_owned())
        .collect()
}

export!(SnsEnvelope);
