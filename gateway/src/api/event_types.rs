//! `/v1/event-types`: the event type catalog (names, descriptions, JSON Schemas of payloads).
//! Tenants read it; admins change it. The rules are `event_types.rs`'s.

use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::{ErrorBody, NameTaken, NoSuchType};
use super::extract::{Json, Path, Query};
use super::views::EventTypeView;
use super::{ApiError, AppState};
use crate::event_types::EventTypeChange;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_event_types, create_event_type))
        .routes(routes!(get_event_type, patch_event_type, delete_event_type))
}

#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct ListQuery {
    /// At most this many (default 50, at most 250).
    limit: Option<u32>,
    /// The `next_cursor` of the previous page.
    cursor: Option<String>,
    /// Archived types too.
    #[serde(default)]
    include_archived: bool,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct EventTypeList {
    pub(crate) event_types: Vec<EventTypeView>,
    pub(crate) next_cursor: Option<String>,
}

/// The fields a request may set; absent ones stay as they are.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct EventTypeIn {
    /// Only when creating.
    name: Option<String>,
    description: Option<String>,
    archived: Option<bool>,
    deprecated: Option<bool>,
    /// `{"1": <JSON Schema>}`; null removes them.
    #[serde(default, deserialize_with = "super::svix::double_option")]
    #[schema(value_type = Option<Object>)]
    schemas: Option<Option<Value>>,
    feature_flags: Option<Vec<String>>,
    #[serde(default, deserialize_with = "super::svix::double_option")]
    #[schema(value_type = Option<String>)]
    group_name: Option<Option<String>>,
}

impl EventTypeIn {
    fn change(self) -> EventTypeChange {
        EventTypeChange {
            description: self.description,
            archived: self.archived,
            deprecated: self.deprecated,
            schemas: self.schemas,
            feature_flags: self.feature_flags,
            group_name: self.group_name,
        }
    }
}

const DEFAULT_LIMIT: u32 = 50;
const MAX_LIMIT: u32 = 250;

/// The catalog by name, one page at a time.
#[utoipa::path(get, path = "/v1/event-types", tag = "event-types", params(ListQuery),
    responses((status = 200, description = "A page of the catalog", body = EventTypeList)))]
async fn list_event_types(
    State(state): State<AppState>,
    Query(query): Query<ListQuery>,
) -> Result<Json<EventTypeList>, ApiError> {
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT).clamp(1, MAX_LIMIT);
    let mut rows = state
        .store
        .event_types(query.cursor, limit + 1, query.include_archived, false)
        .await?;
    let more = rows.len() > limit as usize;
    rows.truncate(limit as usize);
    Ok(Json(EventTypeList {
        next_cursor: more.then(|| rows.last().map(|r| r.name.clone())).flatten(),
        event_types: rows.into_iter().map(EventTypeView::from).collect(),
    }))
}

/// Adds a type to the catalog. With `schemas`, payloads of the type must match the highest
/// version's schema (400 `payload_schema_mismatch` otherwise).
#[utoipa::path(post, path = "/v1/event-types", tag = "event-types", request_body = EventTypeIn,
    responses((status = 201, description = "Created", body = EventTypeView),
              (status = 400, description = "A bad name or schema", body = ErrorBody),
              NameTaken))]
async fn create_event_type(
    State(state): State<AppState>,
    Json(mut input): Json<EventTypeIn>,
) -> Result<(StatusCode, Json<EventTypeView>), ApiError> {
    let name = input
        .name
        .take()
        .ok_or_else(|| ApiError::bad_request("invalid_event_type", "`name` is required"))?;
    let row = state.event_types.create(&name, input.change()).await?;
    Ok((StatusCode::CREATED, Json(row.into())))
}

#[utoipa::path(get, path = "/v1/event-types/{name}", tag = "event-types",
    params(("name" = String, Path, description = "The event type")),
    responses((status = 200, description = "The type", body = EventTypeView),
              NoSuchType))]
async fn get_event_type(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<EventTypeView>, ApiError> {
    Ok(Json(state.event_types.get(&name).await?.into()))
}

/// Changes the fields given.
#[utoipa::path(patch, path = "/v1/event-types/{name}", tag = "event-types",
    params(("name" = String, Path, description = "The event type")), request_body = EventTypeIn,
    responses((status = 200, description = "The changed type", body = EventTypeView),
              NoSuchType))]
async fn patch_event_type(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Json(input): Json<EventTypeIn>,
) -> Result<Json<EventTypeView>, ApiError> {
    if input.name.as_ref().is_some_and(|n| *n != name) {
        return Err(ApiError::bad_request(
            "invalid_event_type",
            "a type's name cannot change",
        ));
    }
    Ok(Json(
        state
            .event_types
            .update(&name, input.change(), false)
            .await?
            .into(),
    ))
}

#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct DeleteQuery {
    /// Remove it from the catalog instead of archiving it.
    #[serde(default)]
    expunge: bool,
}

/// Archives the type (or removes it with `expunge=true`).
#[utoipa::path(delete, path = "/v1/event-types/{name}", tag = "event-types",
    params(("name" = String, Path, description = "The event type"), DeleteQuery),
    responses((status = 204, description = "Archived or removed"),
              NoSuchType))]
async fn delete_event_type(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    state.event_types.delete(&name, query.expunge).await?;
    Ok(StatusCode::NO_CONTENT)
}
