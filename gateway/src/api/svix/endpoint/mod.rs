//! `/api/v1/app/{app_id}/endpoint`: an application's endpoints are the endpoints of its
//! tenant. One made here is an `api` endpoint of topic `svix` whose keys translate Svix's
//! fields (`filterTypes`/`eventTypes` → `types`, `rateLimit`/`throttleRate` →
//! `max_per_second`, `uid` → `svix.uid`) and that sends the `svix-*` headers; endpoints of the
//! tenant declared in the config file are listed too (read-only, as through hookgate's API).
//!
//! This file has the endpoint itself (its fields, CRUD); each sub-resource of Svix's has a
//! file: `secret`, `headers`, `stats`, `recover` and `example` (send-example).

mod example;
mod headers;
mod recover;
mod secret;
mod stats;

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::extract::{App, AppEndpoint, AppPath, EndpointPath, Idempotent, Ids};
use super::{
    Cursor, ListResponse, Paging, SvixError, SvixResult, body, json, page_by_id, query, valid_svix_name,
};
use crate::api::AppState;
use crate::config::{EndpointConfig, defaults};
use crate::delivery::signing;
use crate::model::Timestamp;
use crate::store::{ApplicationRow, EndpointPage};
use headers::{allowed_header, replaced_headers};
use secret::whsec;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(get, upsert, patch, delete))
        .merge(secret::router())
        .merge(headers::router())
        .merge(recover::router())
        .merge(stats::router())
        .merge(example::router())
}

/// `EndpointIn`, `EndpointUpdate` and `EndpointPatch` in one: every field optional here, the
/// handlers say which they need. Both the open-source server's names and the newer SDKs' are
/// read.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct EndpointIn {
    url: Option<String>,
    description: Option<String>,
    #[serde(default, deserialize_with = "super::double_option")]
    uid: Option<Option<String>>,
    disabled: Option<bool>,
    #[serde(default, deserialize_with = "super::double_option")]
    filter_types: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "super::double_option")]
    event_types: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "super::double_option")]
    channels: Option<Option<Vec<String>>>,
    #[serde(default, deserialize_with = "super::double_option")]
    rate_limit: Option<Option<u32>>,
    #[serde(default, deserialize_with = "super::double_option")]
    throttle_rate: Option<Option<u32>>,
    #[serde(default, deserialize_with = "super::double_option")]
    secret: Option<Option<String>>,
    metadata: Option<BTreeMap<String, String>>,
    headers: Option<BTreeMap<String, String>>,
    /// Deprecated in Svix and without effect on delivery; kept and shown (1 unless set).
    version: Option<u16>,
}

impl EndpointIn {
    fn types(&self) -> Option<Option<Vec<String>>> {
        self.event_types.clone().or_else(|| self.filter_types.clone())
    }

    fn rate(&self) -> Option<Option<u32>> {
        self.throttle_rate.or(self.rate_limit)
    }

    /// The hookgate endpoint keys this input sets, as a JSON merge patch: null clears a key.
    fn keys(&self) -> SvixResult<Map<String, Value>> {
        let mut keys = Map::new();
        if let Some(url) = &self.url {
            keys.insert("url".into(), Value::from(url.clone()));
        }
        if let Some(description) = &self.description {
            keys.insert("description".into(), Value::from(description.clone()));
        }
        if let Some(disabled) = self.disabled {
            keys.insert("disabled".into(), Value::from(disabled));
        }
        self.filter_keys(&mut keys)?;
        if let Some(rate) = self.rate() {
            keys.insert(
                "max_per_second".into(),
                rate.filter(|r| *r > 0).map_or(Value::Null, Value::from),
            );
        }
        if let Some(secret) = &self.secret {
            let secret = secret.as_deref().map(whsec).transpose()?;
            // A `whsk_` key signs with Ed25519, as Svix's asymmetric secrets do.
            let ed25519 = secret
                .as_deref()
                .is_some_and(|s| s.starts_with(signing::WHSK_PREFIX));
            keys.insert(
                "signature".into(),
                if ed25519 {
                    Value::from("ed25519")
                } else {
                    Value::Null
                },
            );
            keys.insert("secret".into(), secret.map_or(Value::Null, Value::from));
        }
        if let Some(metadata) = &self.metadata {
            keys.insert("metadata".into(), json!(metadata));
        }
        if let Some(headers) = &self.headers {
            for name in headers.keys() {
                allowed_header(name)?;
            }
            keys.insert("headers".into(), json!(headers));
        }
        self.svix_keys(&mut keys)?;
        Ok(keys)
    }

    /// `filterTypes` (`types`) and `channels`: each null, or a list of 1 or more (at most 10
    /// channels) valid names, as Svix checks them.
    fn filter_keys(&self, keys: &mut Map<String, Value>) -> SvixResult<()> {
        if let Some(types) = self.types() {
            if types.as_ref().is_some_and(Vec::is_empty) {
                return Err(SvixError::invalid(
                    &["body", "filterTypes"],
                    "filterTypes must name at least one event type, or be null",
                ));
            }
            for (i, t) in types.iter().flatten().enumerate() {
                valid_svix_name(&["body", "filterTypes", &i.to_string()], t)?;
            }
            keys.insert("types".into(), types.map_or(Value::Null, Value::from));
        }
        if let Some(channels) = &self.channels {
            let list = channels.clone().unwrap_or_default();
            if channels.is_some() && !(1..=10).contains(&list.len()) {
                return Err(SvixError::invalid(
                    &["body", "channels"],
                    "channels must name 1 to 10 channels, or be null",
                ));
            }
            for (i, c) in list.iter().enumerate() {
                if !crate::config::valid_name(c) {
                    return Err(SvixError::invalid(
                        &["body", "channels", &i.to_string()],
                        format!("`{c}` must be {}", crate::config::NAME_RULE),
                    ));
                }
            }
            keys.insert(
                "channels".into(),
                Some(list)
                    .filter(|l| !l.is_empty())
                    .map_or(Value::Null, Value::from),
            );
        }
        Ok(())
    }

    /// What the `svix` key keeps: `uid` and `version`.
    fn svix_keys(&self, keys: &mut Map<String, Value>) -> SvixResult<()> {
        let mut svix = Map::new();
        if let Some(uid) = &self.uid {
            if let Some(uid) = uid {
                valid_svix_name(&["body", "uid"], uid)?;
            }
            svix.insert("uid".into(), json!(uid));
        }
        if let Some(version) = self.version {
            if version == 0 {
                return Err(SvixError::invalid(&["body", "version"], "versions start at 1"));
            }
            svix.insert("version".into(), json!(version));
        }
        if !svix.is_empty() {
            keys.insert("svix".into(), Value::Object(svix));
        }
        Ok(())
    }
}

/// `EndpointOut`, with both names of the renamed fields.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EndpointOut {
    id: String,
    uid: Option<String>,
    url: String,
    description: String,
    version: u16,
    rate_limit: Option<u32>,
    throttle_rate: Option<u32>,
    filter_types: Option<Vec<String>>,
    event_types: Option<Vec<String>>,
    channels: Option<Vec<String>>,
    disabled: bool,
    metadata: BTreeMap<String, String>,
    #[schema(value_type = String, format = DateTime)]
    created_at: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    updated_at: Timestamp,
}

impl EndpointOut {
    pub(crate) async fn of(state: &AppState, ep: &EndpointConfig) -> EndpointOut {
        let health = state.health_of(&ep.name).await;
        let (created_at, updated_at) = ep.stored.map_or((Timestamp::EPOCH, Timestamp::EPOCH), |s| {
            (s.created_at, s.updated_at)
        });
        let types = (!ep.types.is_empty()).then(|| ep.types.clone());
        let rate = ep.max_per_second.map(|r| r.round().max(1.0) as u32);
        EndpointOut {
            id: ep.name.to_string(),
            uid: ep.svix_uid.clone(),
            url: ep.destination.masked(),
            description: ep.description.clone().unwrap_or_default(),
            version: ep.svix_version,
            rate_limit: rate,
            throttle_rate: rate,
            filter_types: types.clone(),
            event_types: types,
            channels: (!ep.channels.is_empty()).then(|| ep.channels.clone()),
            disabled: ep.disabled || !health.state.receives_events(),
            metadata: ep.metadata.clone(),
            created_at,
            updated_at,
        }
    }
}

/// The endpoint `key` (its id or uid) of `app`, or 404.
pub(crate) async fn endpoint_of(
    state: &AppState,
    app: &ApplicationRow,
    key: &str,
) -> SvixResult<Arc<EndpointConfig>> {
    let tenant = Some(app.tenant.as_str());
    let routing = state
        .endpoints
        .routing(key)
        .filter(|r| r.tenant.as_deref() == tenant)
        .or_else(|| state.endpoints.by_uid(tenant, key))
        .ok_or_else(SvixError::not_found)?;
    state
        .endpoints
        .get(&routing.name)
        .await?
        .ok_or_else(SvixError::not_found)
}

#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint", tag = "svix",
    params(AppPath),
    responses((status = 200, description = "The endpoints", body = ListResponse<EndpointOut>)))]
async fn list(State(state): State<AppState>, App(app): App, RawQuery(raw): RawQuery) -> SvixResult<Response> {
    let paging: Paging = query(raw.as_deref())?;
    let (limit, ascending) = (paging.limit()?, paging.ascending()?);
    let cursor = Cursor::of(paging.iterator.as_deref(), crate::config::valid_name)?;
    let stored = state
        .store
        .api_endpoint_page(EndpointPage {
            tenant: Some(app.tenant.clone()),
            after: cursor.id(),
            limit: limit + 1,
            descending: ascending == cursor.backwards(),
        })
        .await?;
    let rows: Vec<Arc<EndpointConfig>> = stored
        .iter()
        .filter_map(|row| state.endpoints.compiled(row))
        .collect();
    let list = page_by_id(rows, limit, &cursor, |ep| ep.name.to_string(), |ep| ep);
    let mut data = Vec::with_capacity(list.data.len());
    for ep in &list.data {
        data.push(EndpointOut::of(&state, ep).await);
    }
    Ok(json(
        StatusCode::OK,
        &ListResponse {
            data,
            iterator: list.iterator,
            prev_iterator: list.prev_iterator,
            done: list.done,
        },
    ))
}

#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint", tag = "svix", request_body = super::SvixJson,
    params(AppPath),
    responses((status = 201, description = "Created", body = EndpointOut)))]
async fn create(
    State(state): State<AppState>,
    idem: Idempotent,
    App(app): App,
    bytes: Bytes,
) -> SvixResult<Response> {
    let input: EndpointIn = body(&bytes)?;
    let ep = create_endpoint(&state, &app, &input, None).await?;
    Ok(idem
        .answer(StatusCode::CREATED, &EndpointOut::of(&state, &ep).await)
        .await)
}

/// Makes an endpoint of `app` from `input` (`uid` when the input has none: an upsert by uid).
async fn create_endpoint(
    state: &AppState,
    app: &ApplicationRow,
    input: &EndpointIn,
    uid: Option<&str>,
) -> SvixResult<Arc<EndpointConfig>> {
    if input.url.is_none() {
        return Err(SvixError::invalid(&["body", "url"], "field required"));
    }
    let mut keys = input.keys()?;
    known_types(state, input).await?;
    let given = input.uid.clone().flatten();
    // An endpoint made for a path (an upsert) is the one the path names.
    if let (Some(path), Some(given)) = (uid, &given)
        && path != given.as_str()
    {
        return Err(SvixError::invalid(
            &["body", "uid"],
            format!("`{given}` differs from the endpoint `{path}` of the path"),
        ));
    }
    let uid = given.or(uid.map(str::to_owned));
    if let Some(uid) = &uid {
        valid_svix_name(&["body", "uid"], uid)?;
        if endpoint_of(state, app, uid).await.is_ok() {
            return Err(SvixError::conflict("An endpoint with this uid already exists"));
        }
    }
    keys.retain(|_, v| !v.is_null());
    keys.insert("name".into(), Value::from(super::new_id("ep")));
    keys.insert("topics".into(), json!([defaults::SVIX_TOPIC]));
    keys.insert("tenant".into(), Value::from(app.tenant.clone()));
    let mut svix = match keys.remove("svix") {
        Some(Value::Object(svix)) => svix,
        _ => Map::new(),
    };
    svix.insert("uid".into(), json!(uid));
    svix.insert("headers".into(), Value::Bool(true));
    keys.insert("svix".into(), Value::Object(svix));
    let saved = state.endpoint_admin.create(keys, None).await?;
    Ok(saved.endpoint)
}

#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", tag = "svix",
    params(AppPath, EndpointPath),
    responses((status = 200, description = "The endpoint", body = EndpointOut)))]
async fn get(State(state): State<AppState>, AppEndpoint { ep, .. }: AppEndpoint) -> SvixResult<Response> {
    Ok(json(StatusCode::OK, &EndpointOut::of(&state, &ep).await))
}

/// Replace an endpoint's fields (those left out are cleared), or create it with
/// `endpoint_id` as its uid.
#[utoipa::path(put, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", tag = "svix", request_body = super::SvixJson,
    params(AppPath, EndpointPath),
    responses((status = 200, description = "Replaced", body = EndpointOut),
              (status = 201, description = "Created", body = EndpointOut)))]
async fn upsert(
    State(state): State<AppState>,
    App(app): App,
    Ids(EndpointPath { endpoint_id }): Ids<EndpointPath>,
    bytes: Bytes,
) -> SvixResult<Response> {
    let mut input: EndpointIn = body(&bytes)?;
    let Ok(ep) = endpoint_of(&state, &app, &endpoint_id).await else {
        let ep = create_endpoint(&state, &app, &input, Some(&endpoint_id)).await?;
        return Ok(json(StatusCode::CREATED, &EndpointOut::of(&state, &ep).await));
    };
    if input.url.is_none() {
        return Err(SvixError::invalid(&["body", "url"], "field required"));
    }
    input.description.get_or_insert_with(String::new);
    input.disabled.get_or_insert(false);
    if input.types().is_none() {
        input.filter_types = Some(None);
    }
    input.channels.get_or_insert(None);
    if input.rate().is_none() {
        input.rate_limit = Some(None);
    }
    input.metadata.get_or_insert_with(BTreeMap::new);
    input.uid.get_or_insert(None);
    input.version.get_or_insert(1);
    let ep = change(&state, &ep, &input).await?;
    Ok(json(StatusCode::OK, &EndpointOut::of(&state, &ep).await))
}

#[utoipa::path(patch, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", tag = "svix", request_body = super::SvixJson,
    params(AppPath, EndpointPath),
    responses((status = 200, description = "Changed", body = EndpointOut)))]
async fn patch(
    State(state): State<AppState>,
    AppEndpoint { ep, .. }: AppEndpoint,
    bytes: Bytes,
) -> SvixResult<Response> {
    let input: EndpointIn = body(&bytes)?;
    let ep = change(&state, &ep, &input).await?;
    Ok(json(StatusCode::OK, &EndpointOut::of(&state, &ep).await))
}

/// Applies `input` to an endpoint. `disabled: false` also re-enables an endpoint that its
/// health paused or disabled (Svix shows both as `disabled`).
async fn change(
    state: &AppState,
    ep: &EndpointConfig,
    input: &EndpointIn,
) -> SvixResult<Arc<EndpointConfig>> {
    let mut keys = input.keys()?;
    known_types(state, input).await?;
    if let Some(metadata) = keys.remove("metadata") {
        // Svix replaces the whole map (`{}` clears it); a merge patch would keep the rest.
        let mut replaced: Map<String, Value> = ep.metadata.keys().map(|k| (k.clone(), Value::Null)).collect();
        if let Value::Object(wanted) = metadata {
            replaced.extend(wanted);
        }
        keys.insert("metadata".into(), Value::Object(replaced));
    }
    if let Some(Some(uid)) = &input.uid
        && let Some(other) = state.endpoints.by_uid(ep.tenant.as_deref(), uid)
        && other.name != ep.name
    {
        return Err(SvixError::conflict(format!(
            "An endpoint with uid `{uid}` already exists"
        )));
    }
    if let Some(headers) = keys.remove("headers") {
        keys.insert("headers".into(), replaced_headers(state, ep, headers).await);
    }
    let saved = state
        .endpoint_admin
        .update(&ep.name, Value::Object(keys), None)
        .await?;
    if input.disabled == Some(false) && !state.health_of(&ep.name).await.state.receives_events() {
        let endpoint = state.recovery.endpoint(&ep.name).await?;
        state.recovery.reenable(&endpoint, None).await?;
    }
    Ok(saved.endpoint)
}

/// Svix's check of `filterTypes`: each must be an event type of the catalog that is not
/// archived (Svix's deleted ones), or the endpoint would wait for messages that cannot come.
async fn known_types(state: &AppState, input: &EndpointIn) -> SvixResult<()> {
    let mut missing = Vec::new();
    for name in input.types().flatten().unwrap_or_default() {
        match state.store.event_type(&name).await? {
            Some(row) if !row.archived => {}
            _ => missing.push(name),
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(SvixError::invalid(
        &["body", "filterTypes"],
        format!(
            "these event types do not exist (or are archived): {}",
            missing.join(", ")
        ),
    ))
}

#[utoipa::path(delete, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", tag = "svix",
    params(AppPath, EndpointPath),
    responses((status = 204, description = "Deleted")))]
async fn delete(
    State(state): State<AppState>,
    AppEndpoint { ep, .. }: AppEndpoint,
) -> SvixResult<StatusCode> {
    state.endpoint_admin.delete(&ep.name, None).await?;
    Ok(StatusCode::NO_CONTENT)
}
