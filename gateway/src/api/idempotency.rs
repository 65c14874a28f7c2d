//! `Idempotency-Key` handling shared by ingestion and replay (README "HTTP API", "Recovering missed
//! events").
//!
//! Same key and same request → the first answer again, nothing new written (the answer is
//! stored in the same commit as what the request wrote). Same key, different request → 422.
//! The same key while its first request is still running → 409. Keys are scoped per API key.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use sha2::{Digest, Sha256};

use super::auth::Caller;
use super::{ApiError, AppState};
use crate::model::Timestamp;
use crate::store::IdempotencyRecord;

pub(crate) const HEADER: &str = "idempotency-key";

/// Keys whose first request is running in this process.
#[derive(Clone, Default)]
pub(crate) struct InFlight(Arc<Mutex<HashSet<(String, String)>>>);

/// Holds a key while its request runs; releases it when dropped, whatever happened.
pub(crate) struct Claim {
    in_flight: InFlight,
    scope: String,
    key: String,
    request_hash: Vec<u8>,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let entry = (std::mem::take(&mut self.scope), std::mem::take(&mut self.key));
        self.in_flight.0.lock().expect("idempotency lock").remove(&entry);
    }
}

impl Claim {
    /// The record to store with the request's writes.
    pub(crate) fn record(&self, status: StatusCode, response: Bytes, now: Timestamp) -> IdempotencyRecord {
        IdempotencyRecord {
            scope: self.scope.clone(),
            key: self.key.clone(),
            request_hash: self.request_hash.clone(),
            status: status.as_u16(),
            response,
            created_at: now,
        }
    }
}

pub(crate) enum Begin {
    /// No key was sent.
    NoKey,
    /// First use of the key: go ahead, store the answer with `claim.record`.
    Fresh(Claim),
    /// The key was used before for the same request: here is its answer.
    Replay(Response),
}

/// A hash of what the request means: method, path and the bytes that define it.
pub(crate) fn request_hash(method: &str, path: &str, parts: &[&[u8]]) -> Vec<u8> {
    let mut h = Sha256::new();
    h.update(method.as_bytes());
    h.update(b" ");
    h.update(path.as_bytes());
    for part in parts {
        h.update((part.len() as u64).to_be_bytes());
        h.update(part);
    }
    h.finalize().to_vec()
}

pub(crate) async fn begin(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    request_hash: impl FnOnce() -> Vec<u8>,
) -> Result<Begin, ApiError> {
    // Most requests carry no key: they never hash their body.
    let Some(value) = headers.get(HEADER) else {
        return Ok(Begin::NoKey);
    };
    let request_hash = request_hash();
    let key = value
        .to_str()
        .ok()
        .filter(|k| !k.is_empty() && k.len() <= 255 && k.bytes().all(|b| b.is_ascii_graphic()))
        .ok_or_else(|| {
            ApiError::bad_request(
                "invalid_idempotency_key",
                "Idempotency-Key must be 1-255 visible ASCII characters",
            )
        })?
        .to_owned();
    let entry = (caller.scope.clone(), key.clone());
    if !state
        .idempotency
        .0
        .lock()
        .expect("idempotency lock")
        .insert(entry)
    {
        return Err(ApiError::conflict(
            "idempotency_key_in_use",
            "a request with this Idempotency-Key is still being processed; retry when it is done",
        ));
    }
    let claim = Claim {
        in_flight: state.idempotency.clone(),
        scope: caller.scope.clone(),
        key,
        request_hash,
    };
    match state.store.idempotency_record(&claim.scope, &claim.key).await? {
        None => Ok(Begin::Fresh(claim)),
        Some(first) if first.request_hash == claim.request_hash => Ok(Begin::Replay(replay(&first))),
        Some(_) => Err(ApiError::unprocessable(
            "idempotency_key_reused",
            "this Idempotency-Key was already used for a different request",
        )),
    }
}

/// The stored first answer, marked as a replay.
pub(crate) fn replay(record: &IdempotencyRecord) -> Response {
    let status = StatusCode::from_u16(record.status).unwrap_or(StatusCode::OK);
    let mut response = (status, record.response.clone()).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert("idempotent-replayed", HeaderValue::from_static("true"));
    response
}
