//! `/api/v1/event-type`: the event type catalog in Svix's shape. The same catalog as
//! `/v1/event-types` (`event_types.rs` has its rules): a type with `schemas` checks the
//! payloads of its messages against the latest version.

use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{Admin, Idempotent, Ids};
use super::{
    Cursor, ListResponse, Paging, SvixError, SvixResult, body, json, page_by_id, query, stored_json,
};
use crate::api::AppState;
use crate::api::auth::Caller;
use crate::event_types::{CatalogError, EventTypeChange};
use crate::model::Timestamp;
use crate::store::EventTypeRow;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(get, upsert, patch, delete))
}

/// `EventTypeIn`, `EventTypeUpdate` and `EventTypePatch` in one.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EventTypeIn {
    name: Option<String>,
    description: Option<String>,
    archived: Option<bool>,
    deprecated: Option<bool>,
    #[serde(default, deserialize_with = "super::double_option")]
    schemas: Option<Option<Value>>,
    feature_flags: Option<Vec<String>>,
    /// The open-source server's single flag.
    #[serde(default, deserialize_with = "super::double_option")]
    feature_flag: Option<Option<String>>,
    #[serde(default, deserialize_with = "super::double_option")]
    group_name: Option<Option<String>>,
}

impl EventTypeIn {
    fn change(self) -> EventTypeChange {
        let flags = self
            .feature_flags
            .or_else(|| self.feature_flag.map(|f| f.into_iter().collect()));
        EventTypeChange {
            description: self.description,
            archived: self.archived,
            deprecated: self.deprecated,
            schemas: self.schemas,
            feature_flags: flags,
            group_name: self.group_name,
        }
    }
}

/// The path's event type.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct EventTypePath {
    /// The event type's name.
    event_type_name: String,
}

/// `EventTypeOut`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct EventTypeOut {
    name: String,
    description: String,
    archived: bool,
    deprecated: bool,
    schemas: Option<Value>,
    feature_flags: Option<Vec<String>>,
    feature_flag: Option<String>,
    group_name: Option<String>,
    #[schema(value_type = String, format = DateTime)]
    created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    updated_at: Timestamp,
}

/// The feature flags of a stored type (none when it has none).
fn flags_of(row: &EventTypeRow) -> Vec<String> {
    row.feature_flags
        .as_deref()
        .and_then(|f| serde_json::from_str(f).ok())
        .unwrap_or_default()
}

impl EventTypeOut {
    fn of(row: EventTypeRow, with_content: bool) -> EventTypeOut {
        let flags: Option<Vec<String>> = row
            .feature_flags
            .as_deref()
            .and_then(|f| serde_json::from_str(f).ok());
        EventTypeOut {
            schemas: with_content
                .then(|| stored_json(row.schemas.as_deref(), Value::Null))
                .filter(|s| !s.is_null()),
            feature_flag: flags.as_ref().and_then(|f| f.first().cloned()),
            feature_flags: flags,
            name: row.name,
            description: row.description,
            archived: row.archived,
            deprecated: row.deprecated,
            group_name: row.group_name,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

/// Svix answers a missing event type with its plain 404.
fn not_found(e: CatalogError) -> SvixError {
    match e {
        CatalogError::NotFound(_) => SvixError::not_found(),
        CatalogError::Exists(_) => SvixError::conflict("An event type with this name already exists"),
        CatalogError::Invalid { field, reason } => SvixError::invalid(&["body", field], reason),
        other => other.into(),
    }
}

#[derive(Debug, Default, Deserialize)]
struct ListQuery {
    limit: Option<u32>,
    iterator: Option<String>,
    #[serde(default)]
    include_archived: bool,
    with_content: Option<bool>,
}

#[utoipa::path(get, path = "/api/v1/event-type", tag = "svix",
    responses((status = 200, description = "The event types", body = ListResponse<EventTypeOut>)))]
async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let q: ListQuery = query(raw.as_deref())?;
    let limit = Paging {
        limit: q.limit,
        ..Paging::default()
    }
    .limit()?;
    // By name; a `-name` iterator (a `prevIterator`) reads back from that name, as Svix does.
    let cursor = Cursor::of(q.iterator.as_deref(), crate::event_types::is_svix_name)?;
    let mut rows = Vec::new();
    let mut after = cursor.id();
    // Read on past the types the caller's flags hide, so that a page is full when more follow.
    loop {
        let page = state
            .store
            .event_types(after.clone(), limit + 1, q.include_archived, cursor.backwards())
            .await?;
        let exhausted = page.len() <= limit as usize;
        after = page.last().map(|r| r.name.clone()).or(after);
        rows.extend(page.into_iter().filter(|r| caller.sees_flagged(&flags_of(r))));
        if exhausted || rows.len() > limit as usize {
            break;
        }
    }
    let with_content = q.with_content.unwrap_or(false);
    let list = page_by_id(
        rows,
        limit,
        &cursor,
        |r| r.name.clone(),
        |r| EventTypeOut::of(r, with_content),
    );
    Ok(json(StatusCode::OK, &list))
}

#[utoipa::path(post, path = "/api/v1/event-type", tag = "svix", request_body = super::SvixJson,
    responses((status = 201, description = "Created", body = EventTypeOut)))]
async fn create(
    State(state): State<AppState>,
    idem: Idempotent,
    _: Admin,
    bytes: Bytes,
) -> SvixResult<Response> {
    let mut input: EventTypeIn = body(&bytes)?;
    let name = input
        .name
        .take()
        .ok_or_else(|| SvixError::invalid(&["body", "name"], "field required"))?;
    if input.description.is_none() {
        return Err(SvixError::invalid(&["body", "description"], "field required"));
    }
    let row = state
        .event_types
        .create(&name, input.change())
        .await
        .map_err(not_found)?;
    Ok(idem
        .answer(StatusCode::CREATED, &EventTypeOut::of(row, true))
        .await)
}

#[utoipa::path(get, path = "/api/v1/event-type/{event_type_name}", tag = "svix",
    params(EventTypePath),
    responses((status = 200, description = "The event type", body = EventTypeOut)))]
async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Ids(path): Ids<EventTypePath>,
) -> SvixResult<Response> {
    let row = state
        .event_types
        .get(&path.event_type_name)
        .await
        .map_err(not_found)?;
    // A type the caller's flags hide does not exist for it, as in Svix.
    if !caller.sees_flagged(&flags_of(&row)) {
        return Err(SvixError::not_found());
    }
    Ok(json(StatusCode::OK, &EventTypeOut::of(row, true)))
}

/// Replace a type's fields, or create it.
#[utoipa::path(put, path = "/api/v1/event-type/{event_type_name}", tag = "svix", request_body = super::SvixJson,
    params(EventTypePath),
    responses((status = 200, description = "Replaced", body = EventTypeOut),
              (status = 201, description = "Created", body = EventTypeOut)))]
async fn upsert(
    State(state): State<AppState>,
    _: Admin,
    Ids(EventTypePath {
        event_type_name: name,
    }): Ids<EventTypePath>,
    bytes: Bytes,
) -> SvixResult<Response> {
    let mut input: EventTypeIn = body(&bytes)?;
    let exists = state.store.event_type(&name).await?.is_some();
    input.archived.get_or_insert(false);
    input.deprecated.get_or_insert(false);
    input.schemas.get_or_insert(None);
    input.group_name.get_or_insert(None);
    if input.feature_flag.is_none() {
        input.feature_flags.get_or_insert_with(Vec::new);
    }
    let row = state
        .event_types
        .update(&name, input.change(), true)
        .await
        .map_err(not_found)?;
    let status = if exists {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok(json(status, &EventTypeOut::of(row, true)))
}

#[utoipa::path(patch, path = "/api/v1/event-type/{event_type_name}", tag = "svix", request_body = super::SvixJson,
    params(EventTypePath),
    responses((status = 200, description = "Changed", body = EventTypeOut)))]
async fn patch(
    State(state): State<AppState>,
    _: Admin,
    Ids(EventTypePath {
        event_type_name: name,
    }): Ids<EventTypePath>,
    bytes: Bytes,
) -> SvixResult<Response> {
    let input: EventTypeIn = body(&bytes)?;
    let row = state
        .event_types
        .update(&name, input.change(), false)
        .await
        .map_err(not_found)?;
    Ok(json(StatusCode::OK, &EventTypeOut::of(row, true)))
}

#[derive(Debug, Default, Deserialize)]
struct DeleteQuery {
    #[serde(default)]
    expunge: bool,
}

/// Archive a type (or remove it with `expunge=true`).
#[utoipa::path(delete, path = "/api/v1/event-type/{event_type_name}", tag = "svix",
    params(EventTypePath),
    responses((status = 204, description = "Archived")))]
async fn delete(
    State(state): State<AppState>,
    _: Admin,
    Ids(EventTypePath {
        event_type_name: name,
    }): Ids<EventTypePath>,
    RawQuery(raw): RawQuery,
) -> SvixResult<StatusCode> {
    let q: DeleteQuery = query(raw.as_deref())?;
    state
        .event_types
        .delete(&name, q.expunge)
        .await
        .map_err(not_found)?;
    Ok(StatusCode::NO_CONTENT)
}
