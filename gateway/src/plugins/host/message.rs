//! The `message` import: the attempt's request, lent to a plugin for one call.
//!
//! The host keeps the headers and body; a plugin reads what it asks for, when it asks, so a
//! signer that hashes the body never has the headers copied into its memory, and a transform
//! that only sets a header never has the body copied. The message goes into the instance's
//! resource table when its call starts and comes out again, unchanged, when the call returns:
//! the plugin's answer is a list of edits the host applies to it ([`LentMessage::apply`]).

use bytes::Bytes;
use wasmtime::component::Resource;

use super::CallState;
use crate::plugins::bindings::Edits;
use crate::plugins::bindings::message::{Host, HostOutgoingMessage};

/// An attempt's request as a plugin call lends it: headers as (name, value) pairs in order,
/// and the body.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
// `pub` because the generated bindings re-export it as the resource's host type.
#[allow(unreachable_pub)]
pub struct LentMessage {
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Bytes,
}

impl LentMessage {
    /// The value of the first header named `name`, any case.
    fn header(&self, name: &str) -> Option<&[u8]> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// The headers as one block of `name: value\r\n` lines, names in lower case.
    pub(crate) fn header_block(&self) -> Vec<u8> {
        let size = self.headers.iter().map(|(n, v)| n.len() + v.len() + 4).sum();
        let mut block = Vec::with_capacity(size);
        for (name, value) in &self.headers {
            block.extend(name.bytes().map(|b| b.to_ascii_lowercase()));
            block.extend_from_slice(b": ");
            block.extend_from_slice(value);
            block.extend_from_slice(b"\r\n");
        }
        block
    }

    /// The message with `edits` applied: the removed names go, each set name loses its
    /// remaining values and gets the set ones (appended in the order given), and a new body
    /// replaces the old one. A body the edits leave alone is not copied.
    pub(crate) fn apply(self, edits: Edits) -> LentMessage {
        let LentMessage { mut headers, body } = self;
        headers.retain(|(name, _)| {
            let named = |other: &String| other.eq_ignore_ascii_case(name);
            !edits.remove_headers.iter().any(named) && !edits.set_headers.iter().any(|(n, _)| named(n))
        });
        headers.extend(edits.set_headers);
        LentMessage {
            headers,
            body: edits.body.map_or(body, Bytes::from),
        }
    }
}

impl CallState {
    /// Puts `message` into the resource table for the call about to start and answers the
    /// handle the call borrows. [`CallState::take_back_message`] takes it out again.
    pub(crate) fn lend_message(&mut self, message: LentMessage) -> wasmtime::Result<Resource<LentMessage>> {
        Ok(self.table().push(message)?)
    }

    /// Takes the message lent to the call that just returned out of the resource table.
    pub(crate) fn take_back_message(&mut self, lent: Resource<LentMessage>) -> wasmtime::Result<LentMessage> {
        Ok(self.table().delete(lent)?)
    }
}

impl HostOutgoingMessage for CallState {
    fn header(&mut self, message: Resource<LentMessage>, name: String) -> wasmtime::Result<Option<Vec<u8>>> {
        Ok(self.table().get(&message)?.header(&name).map(<[u8]>::to_vec))
    }

    fn header_block(&mut self, message: Resource<LentMessage>) -> wasmtime::Result<Vec<u8>> {
        Ok(self.table().get(&message)?.header_block())
    }

    fn body_len(&mut self, message: Resource<LentMessage>) -> wasmtime::Result<u64> {
        Ok(self.table().get(&message)?.body.len() as u64)
    }

    fn body(&mut self, message: Resource<LentMessage>) -> wasmtime::Result<Vec<u8>> {
        Ok(self.table().get(&message)?.body.to_vec())
    }

    /// A plugin only ever borrows a message, so the host is the one that deletes it; a drop
    /// from the guest would be a host bug to report, not to act on.
    fn drop(&mut self, message: Resource<LentMessage>) -> wasmtime::Result<()> {
        wasmtime::bail!(
            "a lent message (handle {}) cannot be dropped by the plugin",
            message.rep()
        )
    }
}

impl Host for CallState {}

#[cfg(test)]
mod tests {
    use super::*;

    fn message() -> LentMessage {
        LentMessage {
            headers: vec![
                ("Content-Type".into(), b"application/json".to_vec()),
                ("x-tag".into(), b"a".to_vec()),
                ("X-Tag".into(), b"b".to_vec()),
                ("x-gone".into(), b"1".to_vec()),
            ],
            body: Bytes::from_static(b"{}"),
        }
    }

    #[test]
    fn the_header_block_is_one_lower_case_line_per_header() {
        assert_eq!(
            message().header_block(),
            b"content-type: application/json\r\nx-tag: a\r\nx-tag: b\r\nx-gone: 1\r\n"
        );
        assert_eq!(message().header("x-TAG"), Some(&b"a"[..]));
        assert_eq!(message().header("x-none"), None);
    }

    #[test]
    fn edits_remove_then_set_then_replace_the_body() {
        let lent = LentMessage {
            body: Bytes::from(b"{}".to_vec()),
            ..message()
        };
        let body = lent.body.as_ptr();
        let kept = lent.apply(Edits {
            remove_headers: vec!["X-GONE".into()],
            set_headers: vec![
                ("x-tag".into(), b"c".to_vec()),
                ("x-tag".into(), b"d".to_vec()),
                ("x-new".into(), b"1".to_vec()),
            ],
            body: None,
        });
        assert_eq!(
            kept.headers,
            [
                ("Content-Type".into(), b"application/json".to_vec()),
                ("x-tag".into(), b"c".to_vec()),
                ("x-tag".into(), b"d".to_vec()),
                ("x-new".into(), b"1".to_vec()),
            ]
        );
        // The body the edits leave alone is the same buffer, not a copy.
        assert_eq!(kept.body.as_ptr(), body);
        let replaced = message().apply(Edits {
            remove_headers: Vec::new(),
            set_headers: Vec::new(),
            body: Some(b"[]".to_vec()),
        });
        assert_eq!(replaced.body, Bytes::from_static(b"[]"));
        assert_eq!(replaced.headers, message().headers);
    }
}
