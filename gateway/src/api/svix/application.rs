//! `/api/v1/app`: applications. An application is a tenant; its row keeps what Svix shows of
//! it (name, uid, metadata, rate limit). Its tenant is its `uid` when it is made with one (so
//! a `{key, tenant}` API key of that name is the application's key), else its `id`.

use std::collections::BTreeMap;

use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{Admin, App, AppPath, Idempotent, Ids};
use super::{
    Cursor, ListResponse, Paging, SvixError, SvixResult, body, json, new_id, page_by_id, query,
    valid_svix_name,
};
use crate::api::AppState;
use crate::api::auth::Caller;
use crate::model::Timestamp;
use crate::store::{ApplicationRow, StoreError};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(get, upsert, patch, delete))
}

/// `ApplicationIn` (and `ApplicationPatch`: every field optional). `rateLimit` is the open-source
/// server's name, `throttleRate` the SDKs' newer one; both are read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApplicationIn {
    pub(crate) name: Option<String>,
    #[serde(default, deserialize_with = "super::double_option")]
    pub(crate) uid: Option<Option<String>>,
    pub(crate) metadata: Option<BTreeMap<String, String>>,
    #[serde(default, deserialize_with = "super::double_option")]
    rate_limit: Option<Option<u32>>,
    #[serde(default, deserialize_with = "super::double_option")]
    throttle_rate: Option<Option<u32>>,
}

impl ApplicationIn {
    fn rate(&self) -> Option<Option<u32>> {
        self.throttle_rate.or(self.rate_limit)
    }
}

/// `ApplicationOut`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ApplicationOut {
    id: String,
    uid: Option<String>,
    name: String,
    rate_limit: Option<u32>,
    throttle_rate: Option<u32>,
    metadata: serde_json::Value,
    #[schema(value_type = String, format = DateTime)]
    created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    updated_at: Timestamp,
}

impl From<ApplicationRow> for ApplicationOut {
    fn from(row: ApplicationRow) -> Self {
        ApplicationOut {
            metadata: super::stored_json(Some(&row.metadata), serde_json::json!({})),
            id: row.id,
            uid: row.uid,
            name: row.name,
            rate_limit: row.rate_limit,
            throttle_rate: row.rate_limit,
            created_at: row.created_at,
            updated_at: row.updated_at,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct CreateQuery {
    #[serde(default)]
    get_if_exists: bool,
}

/// List applications (a tenant's key: its own).
#[utoipa::path(get, path = "/api/v1/app", tag = "svix",
    responses((status = 200, description = "The applications", body = ListResponse<ApplicationOut>)))]
async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    // An app portal's token is scoped to one application, as Svix's are: listing them is an
    // organization's call (a tenant's API key lists its own application).
    if caller.console_token {
        return Err(SvixError::new(
            StatusCode::FORBIDDEN,
            "insufficient access",
            "an app portal token cannot list applications",
        ));
    }
    let paging: Paging = query(raw.as_deref())?;
    let limit = paging.limit()?;
    // Svix lists applications oldest first unless asked otherwise.
    let descending = !paging.ascending_unless(true)?;
    let cursor = Cursor::of(paging.iterator.as_deref(), |id| {
        id.starts_with("app_") && id.len() > "app_".len()
    })?;
    let rows = match &caller.tenant {
        None => {
            state
                .store
                .applications(cursor.id(), limit + 1, descending != cursor.backwards())
                .await?
        }
        Some(tenant) => state
            .store
            .application(tenant)
            .await?
            .into_iter()
            .filter(|app| app.tenant == *tenant && cursor == Cursor::Start)
            .collect(),
    };
    let list: ListResponse<ApplicationOut> =
        page_by_id(rows, limit, &cursor, |r| r.id.clone(), ApplicationOut::from);
    Ok(json(StatusCode::OK, &list))
}

/// Create an application (`?get_if_exists=true`: or answer the one with that uid).
#[utoipa::path(post, path = "/api/v1/app", tag = "svix", request_body = super::SvixJson,
    responses((status = 201, description = "Created", body = ApplicationOut),
              (status = 200, description = "The existing one (`get_if_exists`)", body = ApplicationOut)))]
async fn create(
    State(state): State<AppState>,
    idem: Idempotent,
    _: Admin,
    RawQuery(raw): RawQuery,
    bytes: Bytes,
) -> SvixResult<Response> {
    let options: CreateQuery = query(raw.as_deref())?;
    let input: ApplicationIn = body(&bytes)?;
    let uid = input.uid.clone().flatten();
    if options.get_if_exists
        && let Some(uid) = &uid
        && let Some(existing) = state.store.application(uid).await?
        && existing.uid.as_deref() == Some(uid.as_str())
    {
        return Ok(idem.answer(StatusCode::OK, &ApplicationOut::from(existing)).await);
    }
    let row = create_application(&state, input, None).await?;
    Ok(idem.answer(StatusCode::CREATED, &ApplicationOut::from(row)).await)
}

/// Makes an application from `input` (`uid` when the input has none: a message or upsert that
/// names one by a uid that does not exist yet).
pub(crate) async fn create_application(
    state: &AppState,
    input: ApplicationIn,
    uid: Option<&str>,
) -> SvixResult<ApplicationRow> {
    let name = input
        .name
        .clone()
        .filter(|n| !n.is_empty())
        .ok_or_else(|| SvixError::invalid(&["body", "name"], "field required"))?;
    let given = input.uid.clone().flatten();
    // An application made for a path (an upsert, a message, a portal link) is the one the
    // path names: a body naming another is refused, as Svix refuses it.
    if let (Some(path), Some(given)) = (uid, &given)
        && path != given.as_str()
    {
        return Err(SvixError::invalid(
            &["body", "uid"],
            format!("`{given}` differs from the application `{path}` of the path"),
        ));
    }
    let uid = given.or(uid.map(str::to_owned));
    if let Some(uid) = &uid {
        valid_svix_name(&["body", "uid"], uid)?;
    }
    let id = new_id("app");
    let now = state.clock.now();
    let row = ApplicationRow {
        tenant: uid
            .clone()
            .filter(|u| crate::config::valid_name(u))
            .unwrap_or_else(|| id.clone()),
        id,
        uid,
        name,
        metadata: serde_json::to_string(&input.metadata.clone().unwrap_or_default())
            .expect("a map serializes"),
        rate_limit: input.rate().flatten(),
        created_at: now,
        updated_at: now,
    };
    state
        .store
        .save_application(row.clone(), None)
        .await
        .map_err(|e| match e {
            StoreError::Conflict(_) => SvixError::conflict("An application with this uid already exists"),
            other => other.into(),
        })?;
    Ok(row)
}

#[utoipa::path(get, path = "/api/v1/app/{app_id}", tag = "svix", params(AppPath),
    responses((status = 200, description = "The application", body = ApplicationOut)))]
async fn get(App(app): App) -> SvixResult<Response> {
    Ok(json(StatusCode::OK, &ApplicationOut::from(app)))
}

/// Replace an application's fields, or create it (with `app_id` as its uid).
#[utoipa::path(put, path = "/api/v1/app/{app_id}", tag = "svix", request_body = super::SvixJson,
    params(AppPath),
    responses((status = 200, description = "Replaced", body = ApplicationOut),
              (status = 201, description = "Created", body = ApplicationOut)))]
async fn upsert(
    State(state): State<AppState>,
    _: Admin,
    Ids(AppPath { app_id }): Ids<AppPath>,
    bytes: Bytes,
) -> SvixResult<Response> {
    let mut input: ApplicationIn = body(&bytes)?;
    match state.store.application(&app_id).await? {
        None => {
            let row = create_application(&state, input, Some(&app_id)).await?;
            Ok(json(StatusCode::CREATED, &ApplicationOut::from(row)))
        }
        Some(app) => {
            // A PUT sets every field: those left out are cleared.
            input.metadata.get_or_insert_with(BTreeMap::new);
            input.uid.get_or_insert(None);
            if input.rate().is_none() {
                input.rate_limit = Some(None);
            }
            let row = change(&state, app, input).await?;
            Ok(json(StatusCode::OK, &ApplicationOut::from(row)))
        }
    }
}

#[utoipa::path(patch, path = "/api/v1/app/{app_id}", tag = "svix", request_body = super::SvixJson,
    params(AppPath),
    responses((status = 200, description = "Changed", body = ApplicationOut)))]
async fn patch(State(state): State<AppState>, _: Admin, App(app): App, bytes: Bytes) -> SvixResult<Response> {
    let input: ApplicationIn = body(&bytes)?;
    let row = change(&state, app, input).await?;
    Ok(json(StatusCode::OK, &ApplicationOut::from(row)))
}

async fn change(state: &AppState, app: ApplicationRow, input: ApplicationIn) -> SvixResult<ApplicationRow> {
    let previous = app.updated_at;
    let mut row = app;
    if let Some(name) = input.name.clone() {
        if name.is_empty() {
            return Err(SvixError::invalid(&["body", "name"], "must not be empty"));
        }
        row.name = name;
    }
    if let Some(uid) = input.uid.clone() {
        if let Some(uid) = &uid {
            valid_svix_name(&["body", "uid"], uid)?;
        }
        row.uid = uid;
    }
    if let Some(metadata) = &input.metadata {
        row.metadata = serde_json::to_string(metadata).expect("a map serializes");
    }
    if let Some(rate) = input.rate() {
        row.rate_limit = rate;
    }
    row.updated_at = state
        .clock
        .now()
        .max(previous.plus(std::time::Duration::from_millis(1)));
    state
        .store
        .save_application(row.clone(), Some(previous))
        .await
        .map_err(|e| match e {
            StoreError::Conflict(m) if m.contains("exists") => {
                SvixError::conflict("An application with this uid already exists")
            }
            other => other.into(),
        })?;
    state.svix_apps.forget_all();
    Ok(row)
}

/// Delete an application and the endpoints made for it through the API; its events and
/// deliveries stay until retention removes them.
#[utoipa::path(delete, path = "/api/v1/app/{app_id}", tag = "svix",
    params(AppPath), responses((status = 204, description = "Deleted")))]
async fn delete(State(state): State<AppState>, _: Admin, App(app): App) -> SvixResult<StatusCode> {
    for endpoint in state.endpoints.of_tenant(&app.tenant) {
        if endpoint.source == crate::config::EndpointSource::Api {
            state.endpoint_admin.delete(&endpoint.name, None).await?;
        }
    }
    state.store.delete_application(&app.id).await?;
    state.svix_apps.forget_all();
    Ok(StatusCode::NO_CONTENT)
}
