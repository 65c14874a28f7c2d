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

mod app_cache;
mod application;
mod attempt;
mod auth;
mod endpoint;
mod event_type;
mod extract;
mod health;
mod message;
mod unsupported;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use utoipa_axum::router::OpenApiRouter;

use super::auth::Caller;
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

/// Svix's server trims a trailing slash from its paths (its docs' curl lines, its own tests and
/// older SDKs write one): `/api/v1/app/` is `/api/v1/app`. Applied before routing, so that
/// every Svix route takes both forms without a second route each.
pub(crate) fn trim_trailing_slash(mut request: axum::extract::Request) -> axum::extract::Request {
    let path = request.uri().path();
    if !is_svix_path(path) || !path.ends_with('/') {
        return request;
    }
    let trimmed = path.trim_end_matches('/');
    let path_and_query = match request.uri().query() {
        Some(query) => format!("{trimmed}?{query}"),
        None => trimmed.to_owned(),
    };
    let mut parts = request.uri().clone().into_parts();
    if let Ok(path_and_query) = axum::http::uri::PathAndQuery::try_from(path_and_query) {
        parts.path_and_query = Some(path_and_query);
        if let Ok(uri) = axum::http::Uri::from_parts(parts) {
            *request.uri_mut() = uri;
        }
    }
    request
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
        match e {
            // svix-server's answer to a resend of a message whose payload is gone.
            crate::recovery::RecoveryError::PayloadExpunged(_) => SvixError::new(
                StatusCode::BAD_REQUEST,
                "missing_payload",
                "Unable to resend message. Payload is missing (probably expired).",
            ),
            other => ApiError::from(other).into(),
        }
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

/// A JSON body, or a 422 naming the field that does not fit. No body, or JSON `null` (what
/// some clients send for an optional body, as to `dashboard-access`), is an empty object.
pub(crate) fn body<T: DeserializeOwned>(bytes: &[u8]) -> SvixResult<T> {
    let trimmed = bytes.trim_ascii();
    let text: &[u8] = if trimmed.is_empty() || trimmed == b"null" {
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
#[derive(Debug, Serialize, utoipa::ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ListResponse<T> {
    pub(crate) data: Vec<T>,
    pub(crate) iterator: Option<String>,
    pub(crate) prev_iterator: Option<String>,
    pub(crate) done: bool,
}

/// `EmptyResponse`: `{}`, what Svix answers where it has nothing to say.
#[derive(Debug, Serialize, utoipa::ToSchema)]
pub(crate) struct EmptyResponse {}

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

    /// Whether `order` asks for the oldest first (newest first when not asked).
    pub(crate) fn ascending(&self) -> SvixResult<bool> {
        self.ascending_unless(false)
    }

    /// Whether `order` asks for the oldest first; `default` when it does not say.
    pub(crate) fn ascending_unless(&self, default: bool) -> SvixResult<bool> {
        match self.order.as_deref() {
            None => Ok(default),
            Some("descending") => Ok(false),
            Some("ascending") => Ok(true),
            Some(other) => Err(SvixError::invalid(
                &["query", "order"],
                format!("`{other}` is neither `ascending` nor `descending`"),
            )),
        }
    }
}

/// Where a page of a list by id starts, as Svix's iterators say: after the id that ended the
/// page before (`iterator`), or before the id that began the page after (`prevIterator`, the
/// id with a `-` in front).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Cursor {
    Start,
    After(String),
    Before(String),
}

impl Cursor {
    /// The `iterator` of a list of ids, or Svix's 422 for one that is not an id `valid` accepts.
    pub(crate) fn of(iterator: Option<&str>, valid: impl Fn(&str) -> bool) -> SvixResult<Cursor> {
        let Some(text) = iterator else {
            return Ok(Cursor::Start);
        };
        let (back, id) = match text.strip_prefix('-') {
            Some(id) => (true, id),
            None => (false, text),
        };
        if !valid(id) {
            return Err(SvixError::invalid(
                &["query", "iterator"],
                format!("`{text}` is not an iterator of this list"),
            ));
        }
        Ok(match back {
            true => Cursor::Before(id.to_owned()),
            false => Cursor::After(id.to_owned()),
        })
    }

    /// The id the rows are read past, in the list's order (`after`) or against it (`before`).
    pub(crate) fn id(&self) -> Option<String> {
        match self {
            Cursor::Start => None,
            Cursor::After(id) | Cursor::Before(id) => Some(id.clone()),
        }
    }

    /// Whether the rows are read against the list's order: a page back, nearest row first.
    pub(crate) fn backwards(&self) -> bool {
        matches!(self, Cursor::Before(_))
    }
}

/// A page of a list by id from `limit + 1` rows read from `cursor` (against the list's order
/// for a page back): `iterator` continues after its last row, `prevIterator` goes back before
/// its first, and `done` says the rows ran out in the direction read, so that a client paging
/// either way stops.
pub(crate) fn page_by_id<T, R>(
    mut rows: Vec<R>,
    limit: u32,
    cursor: &Cursor,
    id: impl Fn(&R) -> String,
    view: impl FnMut(R) -> T,
) -> ListResponse<T> {
    let done = rows.len() <= limit as usize;
    rows.truncate(limit as usize);
    if cursor.backwards() {
        rows.reverse();
    }
    ListResponse {
        iterator: rows.last().map(&id),
        prev_iterator: rows.first().map(|r| format!("-{}", id(r))),
        done,
        data: rows.into_iter().map(view).collect(),
    }
}

/// Where the read of a list kept newest first stands, for lists by a number (a message's
/// `seq`, a delivery's or an attempt's id) that are filtered in memory and so read a store
/// page at a time: reading on reads `before` the position, a page back (`prevIterator`) reads
/// `after` it, nearest first.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Scan {
    pub(crate) before: Option<i64>,
    pub(crate) after: Option<i64>,
}

impl Scan {
    /// The scan of `cursor`, whose ids `number` reads (the cursor's ids were checked).
    pub(crate) fn of(cursor: &Cursor, number: impl Fn(&str) -> Option<i64>) -> Scan {
        let at = cursor.id().as_deref().and_then(number);
        match cursor {
            Cursor::Before(_) => Scan {
                before: None,
                after: at,
            },
            _ => Scan {
                before: at,
                after: None,
            },
        }
    }

    /// Moves past the last row of a page read (`None`: the page was empty).
    pub(crate) fn past(&mut self, last: Option<i64>) {
        let position = if self.after.is_some() {
            &mut self.after
        } else {
            &mut self.before
        };
        *position = last.or(*position);
    }

    /// A page that the scan's bound cut short: not done, and its cursor in the direction read
    /// goes on from where the scan stopped (`id` writes a number as the list's id).
    pub(crate) fn resume<T>(&self, list: &mut ListResponse<T>, id: impl Fn(i64) -> String) {
        list.done = false;
        match (self.after, self.before) {
            (Some(after), _) => list.prev_iterator = Some(format!("-{}", id(after))),
            (None, before) => list.iterator = before.map(id),
        }
    }
}

pub(crate) use app_cache::AppCache;

/// [`application_of`] for a message: from the applications messages were sent to within the
/// last second (see [`app_cache`]) when the path's key is there.
pub(crate) async fn message_application_of(
    state: &AppState,
    caller: &Caller,
    key: &str,
) -> SvixResult<ApplicationRow> {
    let now = std::time::Instant::now();
    let found = match state.svix_apps.get(key, now) {
        Some(app) => Some(app),
        None => {
            let found = state.store.application(key).await?;
            if let Some(app) = &found {
                state.svix_apps.put(key, app.clone(), now);
            }
            found
        }
    };
    seen_by(caller, found)
}

/// The application `key` (its id or uid) as the caller may see it; 404 otherwise, as if it
/// did not exist.
pub(crate) async fn application_of(
    state: &AppState,
    caller: &Caller,
    key: &str,
) -> SvixResult<ApplicationRow> {
    seen_by(caller, state.store.application(key).await?)
}

/// `found` if the caller may see it; 404 otherwise, as if it did not exist.
fn seen_by(caller: &Caller, found: Option<ApplicationRow>) -> SvixResult<ApplicationRow> {
    match found {
        Some(app) if caller.sees(Some(&app.tenant)) => Ok(app),
        _ => Err(SvixError::not_found()),
    }
}

/// A JSON answer.
pub(crate) fn json<T: Serialize>(status: StatusCode, value: &T) -> Response {
    (status, axum::Json(value)).into_response()
}

/// A JSON answer already written out (one also kept for an idempotency key).
pub(crate) fn json_bytes(status: StatusCode, body: Bytes) -> Response {
    (
        status,
        [(axum::http::header::CONTENT_TYPE, "application/json")],
        body,
    )
        .into_response()
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

/// Svix's names (`uid`s, event types, channels), or a 422 at `loc` (the catalog's rule).
pub(crate) fn valid_svix_name(loc: &[&str], text: &str) -> SvixResult<()> {
    if crate::event_types::is_svix_name(text) {
        return Ok(());
    }
    let rule = crate::event_types::SVIX_NAME_RULE;
    Err(SvixError::invalid(loc, format!("`{text}` must be {rule}")))
}

/// A new id of a Svix object: `prefix` and a ULID (so ids sort by creation).
pub(crate) fn new_id(prefix: &str) -> String {
    // Monotonic: ids made in one millisecond still sort in the order they were made, so that a
    // list by id (Svix's order of creation) and its iterators agree with that order.
    static IDS: std::sync::Mutex<ulid::Generator> = std::sync::Mutex::new(ulid::Generator::new());
    let id = IDS
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .generate()
        .unwrap_or_else(|_| ulid::Ulid::new());
    format!("{prefix}_{}", id.to_string().to_lowercase())
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

#[cfg(test)]
mod tests {
    /// Many ids in one millisecond still sort as they were made (Svix lists by creation).
    #[test]
    fn ids_made_in_one_millisecond_sort_in_the_order_they_were_made() {
        let ids: Vec<String> = (0..1000).map(|_| super::new_id("app")).collect();
        let mut sorted = ids.clone();
        sorted.sort();
        assert_eq!(ids, sorted);
    }
}
