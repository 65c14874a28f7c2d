//! Svix's API under `/api/v1/`, beside hookgate's own, so that Svix's official SDKs, CLI and
//! portal clients work against hookgate by changing their server URL (docs/svix.md has the
//! mapping). One file per resource, like Svix's own server; each handler translates to the same
//! domain calls hookgate's handlers make (`endpoint_admin`, `recovery`, `ingest`, the store).
//!
//! Svix's conventions, kept here: camelCase bodies, errors `{code, detail}` and validation
//! errors `422 {detail: [{loc, msg, type}]}`, lists `{data, iterator, prevIterator, done}`
//! with `limit` (default 50, at most 250) and `iterator`, path ids that take the `id` or the
//! `uid`, and an `idempotency-key` on POSTs. The same bearer keys as hookgate's API: an admin
//! key sees every application, a tenant's key (or console token) only its own.

mod application;
mod attempt;
mod auth;
mod endpoint;
mod event_type;
mod health;
mod message;
mod unsupported;

use std::future::Future;

use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;

use super::auth::Caller;
use super::idempotency::{self, Begin, Claim};
use super::{ApiError, AppState};
use crate::model::Timestamp;
use crate::store::ApplicationRow;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .merge(application::router())
        .merge(endpoint::router())
        .merge(message::router())
        .merge(attempt::router())
        .merge(event_type::router())
        .merge(auth::router())
        .merge(health::router())
}

/// The routes of Svix's API that hookgate answers with 501 or a Svix-shaped 404 (outside the
/// OpenAPI document: they do nothing).
pub(super) fn unsupported_router() -> axum::Router<AppState> {
    unsupported::router()
}

/// The JSON body of a Svix call in the OpenAPI document: its fields are Svix's
/// (docs/svix.md); handlers read the bytes themselves to answer Svix's 422s.
#[derive(utoipa::ToSchema)]
#[schema(value_type = Object)]
#[allow(dead_code)] // Only its schema is used.
pub(crate) struct SvixJson(Value);

/// Whether `path` is one of Svix's (its API, or its ingest API): refusals there take Svix's
/// shape.
pub(crate) fn is_svix_path(path: &str) -> bool {
    path.starts_with("/api/v1/") || path.starts_with("/ingest/api/v1/")
}

/// An error as Svix answers it.
#[derive(Debug)]
pub(crate) struct SvixError {
    status: StatusCode,
    body: ErrorBody,
}

#[derive(Debug, Serialize)]
#[serde(untagged)]
enum ErrorBody {
    Standard { code: String, detail: String },
    Validation { detail: Vec<ValidationItem> },
}

/// One invalid field of a 422: where (`["body", "url"]`), what is wrong, and its kind.
#[derive(Debug, Serialize)]
struct ValidationItem {
    loc: Vec<String>,
    msg: String,
    #[serde(rename = "type")]
    kind: String,
}

pub(crate) type SvixResult<T> = Result<T, SvixError>;

impl SvixError {
    pub(crate) fn new(status: StatusCode, code: &str, detail: impl Into<String>) -> SvixError {
        SvixError {
            status,
            body: ErrorBody::Standard {
                code: code.to_owned(),
                detail: detail.into(),
            },
        }
    }

    pub(crate) fn not_found() -> SvixError {
        SvixError::new(StatusCode::NOT_FOUND, "not_found", "Entity not found")
    }

    pub(crate) fn conflict(detail: impl Into<String>) -> SvixError {
        SvixError::new(StatusCode::CONFLICT, "conflict", detail)
    }

    pub(crate) fn not_implemented(detail: impl Into<String>) -> SvixError {
        SvixError::new(StatusCode::NOT_IMPLEMENTED, "not_implemented", detail)
    }

    /// A 422 for one field: `loc` is where (`["body", "url"]`).
    pub(crate) fn invalid(loc: &[&str], msg: impl Into<String>) -> SvixError {
        SvixError {
            status: StatusCode::UNPROCESSABLE_ENTITY,
            body: ErrorBody::Validation {
                detail: vec![ValidationItem {
                    loc: loc.iter().map(|s| (*s).to_owned()).collect(),
                    msg: msg.into(),
                    kind: "value_error".into(),
                }],
            },
        }
    }
}

impl IntoResponse for SvixError {
    fn into_response(self) -> Response {
        (self.status, axum::Json(self.body)).into_response()
    }
}

/// hookgate's errors in Svix's shape: Svix's codes for the statuses its server names
/// (`not_found`, `conflict`, `authentication_failed`…), hookgate's own code otherwise, and the
/// message as the `detail`.
impl From<ApiError> for SvixError {
    fn from(e: ApiError) -> Self {
        if !e.problems.is_empty() {
            return SvixError {
                status: StatusCode::UNPROCESSABLE_ENTITY,
                body: ErrorBody::Validation {
                    detail: e
                        .problems
                        .into_iter()
                        .map(|p| ValidationItem {
                            loc: std::iter::once("body".to_owned())
                                .chain(p.path.split('.').filter(|s| !s.is_empty()).map(svix_field))
                                .collect(),
                            msg: p.reason,
                            kind: "value_error".into(),
                        })
                        .collect(),
                },
            };
        }
        let code = match e.status {
            StatusCode::NOT_FOUND => "not_found",
            StatusCode::CONFLICT => "conflict",
            StatusCode::UNAUTHORIZED => "authentication_failed",
            StatusCode::FORBIDDEN => "insufficient access",
            StatusCode::INTERNAL_SERVER_ERROR => "server_error",
            _ => e.code,
        };
        SvixError::new(e.status, code, e.message)
    }
}

impl From<crate::store::StoreError> for SvixError {
    fn from(e: crate::store::StoreError) -> Self {
        ApiError::from(e).into()
    }
}

impl From<crate::endpoint_admin::AdminError> for SvixError {
    fn from(e: crate::endpoint_admin::AdminError) -> Self {
        ApiError::from(e).into()
    }
}

impl From<crate::recovery::RecoveryError> for SvixError {
    fn from(e: crate::recovery::RecoveryError) -> Self {
        ApiError::from(e).into()
    }
}

impl From<crate::event_types::CatalogError> for SvixError {
    fn from(e: crate::event_types::CatalogError) -> Self {
        ApiError::from(e).into()
    }
}

/// An endpoint key's Svix name, for the `loc` of a 422 (`types` is `filterTypes`).
fn svix_field(key: &str) -> String {
    match key {
        "types" => "filterTypes".into(),
        "max_per_second" => "rateLimit".into(),
        other => other.to_owned(),
    }
}

/// A JSON body, or a 422 naming the field that does not fit.
pub(crate) fn body<T: DeserializeOwned>(bytes: &[u8]) -> SvixResult<T> {
    let text: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    let mut de = serde_json::Deserializer::from_slice(text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let msg = e.inner().to_string();
        let msg = msg.split(" at line ").next().unwrap_or_default().to_owned();
        let mut loc = vec!["body"];
        loc.extend(path.split('.').filter(|s| !s.is_empty() && *s != "?"));
        SvixError::invalid(&loc, msg)
    })
}

/// Query parameters, or a 422 saying which one does not fit.
pub(crate) fn query<T: DeserializeOwned>(raw: Option<&str>) -> SvixResult<T> {
    serde_urlencoded::from_str(raw.unwrap_or_default())
        .map_err(|e| SvixError::invalid(&["query"], e.to_string()))
}

/// `{data, iterator, prevIterator, done}`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListResponse<T> {
    pub(crate) data: Vec<T>,
    pub(crate) iterator: Option<String>,
    pub(crate) prev_iterator: Option<String>,
    pub(crate) done: bool,
}

/// The paging parameters every list takes.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct Paging {
    pub(crate) limit: Option<u32>,
    pub(crate) iterator: Option<String>,
    pub(crate) order: Option<String>,
}

const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 250;

impl Paging {
    /// Svix's limit: 50 unless asked, at most 250 (more is a 422, as Svix answers).
    pub(crate) fn limit(&self) -> SvixResult<u32> {
        match self.limit {
            None => Ok(DEFAULT_LIMIT),
            Some(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
            Some(n) => Err(SvixError::invalid(
                &["query", "limit"],
                format!("{n} is not between 1 and {MAX_LIMIT}"),
            )),
        }
    }

    pub(crate) fn ascending(&self) -> SvixResult<bool> {
        match self.order.as_deref() {
            None | Some("descending") => Ok(false),
            Some("ascending") => Ok(true),
            Some(other) => Err(SvixError::invalid(
                &["query", "order"],
                format!("`{other}` is neither `ascending` nor `descending`"),
            )),
        }
    }
}

/// A page from `limit + 1` rows: the page, and its iterator when more follow (`next` makes
/// the iterator of the page's last row).
pub(crate) fn page<T, R>(
    mut rows: Vec<R>,
    limit: u32,
    next: impl Fn(&R) -> String,
    view: impl FnMut(R) -> T,
) -> ListResponse<T> {
    let done = rows.len() <= limit as usize;
    rows.truncate(limit as usize);
    ListResponse {
        iterator: rows.last().map(&next),
        prev_iterator: None,
        done,
        data: rows.into_iter().map(view).collect(),
    }
}

/// The application `key` (its id or uid) as the caller may see it; 404 otherwise, as if it
/// did not exist.
pub(crate) async fn application_of(
    state: &AppState,
    caller: &Caller,
    key: &str,
) -> SvixResult<ApplicationRow> {
    match state.store.application(key).await? {
        Some(app) if caller.sees(Some(&app.tenant)) => Ok(app),
        _ => Err(SvixError::not_found()),
    }
}

/// Begins an idempotent POST: the first answer again for a repeated `idempotency-key` (Svix's
/// SDKs send `auto_<uuid>` on every POST and the same one on their retries).
pub(crate) async fn begin_idempotent(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    path: &str,
    body: &[u8],
) -> SvixResult<Begin> {
    Ok(idempotency::begin(state, caller, headers, || {
        idempotency::request_hash("POST", path, &[body])
    })
    .await?)
}

/// Answers a POST and keeps its answer for its idempotency key.
pub(crate) async fn answer_idempotent<T: Serialize>(
    state: &AppState,
    claim: Option<Claim>,
    status: StatusCode,
    value: &T,
) -> Response {
    let bytes = Bytes::from(serde_json::to_vec(value).expect("answers serialize"));
    if let Some(claim) = claim {
        let record = claim.record(status, bytes.clone(), state.clock.now());
        // The write is done: a failure to keep the answer costs only the replay of a retry.
        if let Err(e) = state.store.save_idempotency(record).await {
            tracing::warn!(error = %e, "could not keep the answer of an idempotency key");
        }
    }
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        bytes,
    )
        .into_response()
}

/// Runs a POST under its idempotency key: a repeat gets the first answer, a fresh one runs
/// `run` and keeps what it answered.
pub(crate) async fn idempotent<T, F>(
    state: &AppState,
    caller: &Caller,
    headers: &HeaderMap,
    path: &str,
    body: &[u8],
    run: F,
) -> Response
where
    T: Serialize,
    F: Future<Output = SvixResult<(StatusCode, T)>>,
{
    let claim = match begin_idempotent(state, caller, headers, path, body).await {
        Ok(Begin::Replay(response)) => return response,
        Ok(Begin::NoKey) => None,
        Ok(Begin::Fresh(claim)) => Some(claim),
        Err(e) => return e.into_response(),
    };
    match run.await {
        Ok((status, value)) => answer_idempotent(state, claim, status, &value).await,
        Err(e) => e.into_response(),
    }
}

/// A JSON answer.
pub(crate) fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    (status, axum::Json(value)).into_response()
}

/// Reads an RFC 3339 time of a query or body; `loc` names it in the 422.
pub(crate) fn time(loc: &[&str], text: &str) -> SvixResult<Timestamp> {
    Timestamp::parse_rfc3339(text)
        .map_err(|_| SvixError::invalid(loc, format!("`{text}` is not an RFC 3339 time")))
}

/// A field that may be absent (None), null (Some(None)) or set: a patch tells them apart.
pub(crate) fn double_option<'de, T, D>(de: D) -> Result<Option<Option<T>>, D::Error>
where
    T: Deserialize<'de>,
    D: Deserializer<'de>,
{
    Option::<T>::deserialize(de).map(Some)
}

/// Svix's names (`uid`s, event types, channels): 1-256 characters of a-z, A-Z, 0-9, `.`, `_`,
/// `-`.
pub(crate) fn valid_svix_name(loc: &[&str], text: &str) -> SvixResult<()> {
    let ok = !text.is_empty()
        && text.len() <= 256
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'));
    if ok {
        Ok(())
    } else {
        Err(SvixError::invalid(
            loc,
            format!("`{text}` must be 1-256 characters of a-z, A-Z, 0-9, `.`, `_`, `-`"),
        ))
    }
}

/// A new id of a Svix object: `prefix` and a ULID (so ids sort by creation).
pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", ulid::Ulid::new().to_string().to_lowercase())
}

/// Whether a caller is an admin (Svix's organization-level key).
pub(crate) fn admin_only(caller: &Caller) -> SvixResult<()> {
    match caller.tenant {
        None => Ok(()),
        Some(_) => Err(SvixError::new(
            StatusCode::FORBIDDEN,
            "insufficient access",
            "this call needs an admin API key; a tenant's key or console token cannot make it",
        )),
    }
}

/// A JSON value from a stored JSON text, or `default`.
pub(crate) fn stored_json(text: Option<&str>, default: Value) -> Value {
    text.and_then(|t| serde_json::from_str(t).ok()).unwrap_or(default)
}
