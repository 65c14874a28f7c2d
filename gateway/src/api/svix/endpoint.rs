//! `/api/v1/app/{app_id}/endpoint`: an application's endpoints are the endpoints of its
//! tenant. One made here is an `api` endpoint of topic `svix` whose keys translate Svix's
//! fields (`filterTypes`/`eventTypes` → `types`, `rateLimit`/`throttleRate` →
//! `max_per_second`, `uid` → `svix.uid`) and that sends the `svix-*` headers; endpoints of the
//! tenant declared in the config file are listed too (read-only, as through hookgate's API).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::message::{MessageOut, send_to};
use super::{
    Paging, SvixError, SvixResult, application_of, body, idempotent, json, page, query, time, valid_svix_name,
};
use crate::api::AppState;
use crate::api::auth::Caller;
use crate::config::{EndpointConfig, defaults};
use crate::model::{DeliveryId, DeliveryStatus, Timestamp};
use crate::store::ApplicationRow;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(get, upsert, patch, delete))
        .routes(routes!(get_secret))
        .routes(routes!(rotate_secret))
        .routes(routes!(get_headers, set_headers, patch_headers))
        .routes(routes!(recover))
        .routes(routes!(stats))
        .routes(routes!(send_example))
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
    /// Deprecated in Svix and without effect; read so that old clients are not refused.
    #[serde(rename = "version")]
    _version: Option<u32>,
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
        if let Some(types) = self.types() {
            for (i, t) in types.iter().flatten().enumerate() {
                valid_svix_name(&["body", "filterTypes", &i.to_string()], t)?;
            }
            keys.insert(
                "types".into(),
                types.filter(|t| !t.is_empty()).map_or(Value::Null, Value::from),
            );
        }
        if let Some(channels) = &self.channels {
            let list = channels.clone().unwrap_or_default();
            if list.len() > 10 {
                return Err(SvixError::invalid(&["body", "channels"], "at most 10 channels"));
            }
            for (i, c) in list.iter().enumerate() {
                if !crate::config::valid_name(c) {
                    return Err(SvixError::invalid(
                        &["body", "channels", &i.to_string()],
                        format!("`{c}` must be 1-128 characters of a-z, A-Z, 0-9, `.`, `_`, `-`"),
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
        if let Some(rate) = self.rate() {
            keys.insert(
                "max_per_second".into(),
                rate.filter(|r| *r > 0).map_or(Value::Null, Value::from),
            );
        }
        if let Some(secret) = &self.secret {
            keys.insert(
                "secret".into(),
                secret
                    .as_deref()
                    .map(whsec)
                    .transpose()?
                    .map_or(Value::Null, Value::from),
            );
        }
        if let Some(metadata) = &self.metadata {
            keys.insert("metadata".into(), json!(metadata));
        }
        if let Some(headers) = &self.headers {
            keys.insert("headers".into(), json!(headers));
        }
        if let Some(uid) = &self.uid {
            if let Some(uid) = uid {
                valid_svix_name(&["body", "uid"], uid)?;
            }
            keys.insert("svix".into(), json!({"uid": uid}));
        }
        Ok(keys)
    }
}

/// A Svix secret in its `whsec_` form: base64 of 24 to 75 bytes, with or without the prefix.
fn whsec(secret: &str) -> SvixResult<String> {
    let raw = secret.strip_prefix("whsec_").unwrap_or(secret);
    let ok = (32..=100).contains(&raw.len())
        && raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='));
    if ok {
        Ok(format!("whsec_{raw}"))
    } else {
        Err(SvixError::invalid(
            &["body", "secret"],
            "must be base64 (32 to 100 characters), optionally prefixed with `whsec_`",
        ))
    }
}

/// `EndpointOut`, with both names of the renamed fields.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct EndpointOut {
    id: String,
    uid: Option<String>,
    url: String,
    description: String,
    version: u32,
    rate_limit: Option<u32>,
    throttle_rate: Option<u32>,
    filter_types: Option<Vec<String>>,
    event_types: Option<Vec<String>>,
    channels: Option<Vec<String>>,
    disabled: bool,
    metadata: BTreeMap<String, String>,
    created_at: Timestamp,
    updated_at: Timestamp,
}

impl EndpointOut {
    pub(crate) async fn of(state: &AppState, ep: &EndpointConfig) -> EndpointOut {
        let health = state.health_of(&ep.name).await;
        let (created_at, updated_at) = state
            .config
            .load()
            .api_endpoints
            .iter()
            .find(|r| *r.name == *ep.name)
            .map_or((Timestamp::EPOCH, Timestamp::EPOCH), |r| {
                (r.created_at, r.updated_at)
            });
        let types = (!ep.types.is_empty()).then(|| ep.types.clone());
        let rate = ep.max_per_second.map(|r| r.round().max(1.0) as u32);
        EndpointOut {
            id: ep.name.to_string(),
            uid: ep.svix_uid.clone(),
            url: ep.destination.masked(),
            description: ep.description.clone().unwrap_or_default(),
            version: 1,
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
pub(crate) fn endpoint_of(
    state: &AppState,
    app: &ApplicationRow,
    key: &str,
) -> SvixResult<Arc<EndpointConfig>> {
    let config = state.config.load();
    let ours = |ep: &&Arc<EndpointConfig>| ep.tenant.as_deref() == Some(app.tenant.as_str());
    config
        .endpoints
        .get(key)
        .filter(ours)
        .or_else(|| {
            config
                .endpoints
                .values()
                .filter(ours)
                .find(|ep| ep.svix_uid.as_deref() == Some(key))
        })
        .cloned()
        .ok_or_else(SvixError::not_found)
}

/// Every endpoint of `app`, by id.
pub(crate) fn endpoints_of(state: &AppState, app: &ApplicationRow) -> Vec<Arc<EndpointConfig>> {
    state
        .config
        .load()
        .endpoints
        .values()
        .filter(|ep| ep.tenant.as_deref() == Some(app.tenant.as_str()))
        .cloned()
        .collect()
}

#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid")),
    responses((status = 200, description = "ListResponse_EndpointOut_")))]
async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(app_id): Path<String>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let paging: Paging = query(raw.as_deref())?;
    let (limit, ascending) = (paging.limit()?, paging.ascending()?);
    let mut endpoints = endpoints_of(&state, &app);
    endpoints.sort_by(|a, b| {
        if ascending {
            a.name.cmp(&b.name)
        } else {
            b.name.cmp(&a.name)
        }
    });
    let rows: Vec<Arc<EndpointConfig>> = endpoints
        .into_iter()
        .filter(|ep| match &paging.iterator {
            None => true,
            Some(after) if ascending => *ep.name > **after,
            Some(before) => *ep.name < **before,
        })
        .take(limit as usize + 1)
        .collect();
    let list = page(rows, limit, |ep| ep.name.to_string(), |ep| ep);
    let mut data = Vec::with_capacity(list.data.len());
    for ep in &list.data {
        data.push(EndpointOut::of(&state, ep).await);
    }
    Ok(json(
        StatusCode::OK,
        &super::ListResponse {
            data,
            iterator: list.iterator,
            prev_iterator: None,
            done: list.done,
        },
    ))
}

#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint", tag = "svix", request_body = super::SvixJson,
    params(("app_id" = String, Path, description = "The application's id or uid")),
    responses((status = 201, description = "EndpointOut")))]
async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(app_id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let path = format!("/api/v1/app/{app_id}/endpoint");
    let run = async {
        let app = application_of(&state, &caller, &app_id).await?;
        let input: EndpointIn = body(&bytes)?;
        let ep = create_endpoint(&state, &app, &input, None).await?;
        Ok((StatusCode::CREATED, EndpointOut::of(&state, &ep).await))
    };
    idempotent(&state, &caller, &headers, &path, &bytes, run).await
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
    let uid = input.uid.clone().flatten().or(uid.map(str::to_owned));
    if let Some(uid) = &uid {
        valid_svix_name(&["body", "uid"], uid)?;
        if endpoint_of(state, app, uid).is_ok() {
            return Err(SvixError::conflict("An endpoint with this uid already exists"));
        }
    }
    keys.retain(|_, v| !v.is_null());
    keys.insert("name".into(), Value::from(super::new_id("ep")));
    keys.insert("topics".into(), json!([defaults::SVIX_TOPIC]));
    keys.insert("tenant".into(), Value::from(app.tenant.clone()));
    keys.insert("svix".into(), json!({"uid": uid, "headers": true}));
    let saved = state.endpoint_admin.create(keys, None).await?;
    Ok(saved.endpoint)
}

#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 200, description = "EndpointOut")))]
async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let ep = endpoint_of(&state, &app, &endpoint_id)?;
    Ok(json(StatusCode::OK, &EndpointOut::of(&state, &ep).await))
}

/// Replace an endpoint's fields (those left out are cleared), or create it with
/// `endpoint_id` as its uid.
#[utoipa::path(put, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", tag = "svix", request_body = super::SvixJson,
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 200, description = "EndpointOut")))]
async fn upsert(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    bytes: Bytes,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let mut input: EndpointIn = body(&bytes)?;
    let Ok(ep) = endpoint_of(&state, &app, &endpoint_id) else {
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
    let ep = change(&state, &ep, &input).await?;
    Ok(json(StatusCode::OK, &EndpointOut::of(&state, &ep).await))
}

#[utoipa::path(patch, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", tag = "svix", request_body = super::SvixJson,
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 200, description = "EndpointOut")))]
async fn patch(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    bytes: Bytes,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let ep = endpoint_of(&state, &app, &endpoint_id)?;
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
    if let (Some(Some(uid)), Ok(other)) = (&input.uid, endpoint_of_tenant(state, ep, input))
        && other.name != ep.name
    {
        return Err(SvixError::conflict(format!(
            "An endpoint with uid `{uid}` already exists"
        )));
    }
    if let Some(headers) = keys.remove("headers") {
        keys.insert("headers".into(), replaced_headers(state, ep, headers));
    }
    let saved = state
        .endpoint_admin
        .update(&ep.name, Value::Object(keys), None)
        .await?;
    if input.disabled == Some(false) && !state.health_of(&ep.name).await.state.receives_events() {
        let endpoint = state.recovery.endpoint(&ep.name)?;
        state.recovery.reenable(&endpoint, None).await?;
    }
    Ok(saved.endpoint)
}

/// The endpoint of `ep`'s tenant with the uid `input` asks for.
fn endpoint_of_tenant(
    state: &AppState,
    ep: &EndpointConfig,
    input: &EndpointIn,
) -> SvixResult<Arc<EndpointConfig>> {
    let uid = input.uid.clone().flatten().ok_or_else(SvixError::not_found)?;
    let config = state.config.load();
    config
        .endpoints
        .values()
        .find(|other| other.tenant == ep.tenant && other.svix_uid.as_deref() == Some(uid.as_str()))
        .cloned()
        .ok_or_else(SvixError::not_found)
}

/// A merge patch that makes the endpoint's headers exactly `wanted`: the names it drops are
/// removed (header names are matched without regard to case).
fn replaced_headers(state: &AppState, ep: &EndpointConfig, wanted: Value) -> Value {
    let mut patch = Map::new();
    for (name, _) in stored_headers(state, ep) {
        patch.insert(name, Value::Null);
    }
    if let Value::Object(wanted) = wanted {
        patch.retain(|name, _| !wanted.contains_key(name));
        patch.extend(wanted);
    }
    Value::Object(patch)
}

/// The endpoint's headers with their names as written (HTTP header names are matched without
/// regard to case, but Svix shows them as they were set).
fn stored_headers(state: &AppState, ep: &EndpointConfig) -> BTreeMap<String, String> {
    let config = state.config.load();
    let written = config
        .api_endpoints
        .iter()
        .find(|r| *r.name == *ep.name)
        .and_then(|r| serde_json::from_str::<Value>(&r.spec).ok())
        .and_then(|spec| serde_json::from_value::<BTreeMap<String, String>>(spec["headers"].clone()).ok());
    written.unwrap_or_else(|| {
        ep.headers
            .iter()
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
            .collect()
    })
}

#[utoipa::path(delete, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 204, description = "Deleted")))]
async fn delete(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
) -> SvixResult<StatusCode> {
    let app = application_of(&state, &caller, &app_id).await?;
    let ep = endpoint_of(&state, &app, &endpoint_id)?;
    state.endpoint_admin.delete(&ep.name, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Serialize)]
struct SecretOut {
    key: String,
}

/// The endpoint's signing secret (`whsec_…`).
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/secret", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 200, description = "EndpointSecretOut")))]
async fn get_secret(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let ep = endpoint_of(&state, &app, &endpoint_id)?;
    let key = ep
        .secrets
        .first()
        .map(|s| s.expose().to_owned())
        .ok_or_else(SvixError::not_found)?;
    Ok(json(StatusCode::OK, &SecretOut { key }))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RotateIn {
    key: Option<String>,
    grace_period_seconds: Option<u64>,
}

/// A new secret (the one given, or a generated one); the old one keeps signing beside it for
/// the grace period (24 hours unless asked).
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/secret/rotate", tag = "svix", request_body = super::SvixJson,
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 200, description = "EndpointSecretOut")))]
async fn rotate_secret(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let path = format!("/api/v1/app/{app_id}/endpoint/{endpoint_id}/secret/rotate");
    let run = async {
        let app = application_of(&state, &caller, &app_id).await?;
        let ep = endpoint_of(&state, &app, &endpoint_id)?;
        let input: RotateIn = body(&bytes)?;
        let key = input.key.as_deref().map(whsec).transpose()?;
        let overlap = input
            .grace_period_seconds
            .map_or(crate::endpoint_admin::DEFAULT_OVERLAP, Duration::from_secs);
        let saved = state
            .endpoint_admin
            .rotate_secret(&ep.name, key, overlap, None)
            .await?;
        let key = saved
            .secret
            .or_else(|| saved.endpoint.secrets.first().map(|s| s.expose().to_owned()))
            .unwrap_or_default();
        Ok((StatusCode::OK, SecretOut { key }))
    };
    idempotent(&state, &caller, &headers, &path, &bytes, run).await
}

#[derive(Debug, Serialize)]
struct HeadersOut {
    headers: BTreeMap<String, String>,
    sensitive: Vec<String>,
}

/// Header names whose values are credentials: listed in `sensitive`, their values not shown.
fn is_sensitive(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    [
        "authorization",
        "cookie",
        "token",
        "secret",
        "api-key",
        "apikey",
        "password",
    ]
    .iter()
    .any(|s| name.contains(s))
}

/// The endpoint's own headers; the values of sensitive ones are left out.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 200, description = "EndpointHeadersOut")))]
async fn get_headers(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let ep = endpoint_of(&state, &app, &endpoint_id)?;
    let (sensitive, headers): (BTreeMap<_, _>, BTreeMap<_, _>) = stored_headers(&state, &ep)
        .into_iter()
        .partition(|(name, _)| is_sensitive(name));
    Ok(json(
        StatusCode::OK,
        &HeadersOut {
            headers,
            sensitive: sensitive.into_keys().collect(),
        },
    ))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct HeadersIn {
    headers: BTreeMap<String, Option<String>>,
    #[serde(default)]
    delete_headers: Vec<String>,
}

/// Replace the endpoint's headers.
#[utoipa::path(put, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers", tag = "svix", request_body = super::SvixJson,
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 204, description = "Replaced")))]
async fn set_headers(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    bytes: Bytes,
) -> SvixResult<StatusCode> {
    let app = application_of(&state, &caller, &app_id).await?;
    let ep = endpoint_of(&state, &app, &endpoint_id)?;
    let input: HeadersIn = body(&bytes)?;
    let wanted: Map<String, Value> = input
        .headers
        .into_iter()
        .filter_map(|(name, value)| Some((name, Value::from(value?))))
        .collect();
    let patch = json!({"headers": replaced_headers(&state, &ep, Value::Object(wanted))});
    state.endpoint_admin.update(&ep.name, patch, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Set some headers (a null value, or a name in `deleteHeaders`, removes one).
#[utoipa::path(patch, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers", tag = "svix", request_body = super::SvixJson,
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 204, description = "Changed")))]
async fn patch_headers(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    bytes: Bytes,
) -> SvixResult<StatusCode> {
    let app = application_of(&state, &caller, &app_id).await?;
    let ep = endpoint_of(&state, &app, &endpoint_id)?;
    let input: HeadersIn = body(&bytes)?;
    let mut wanted = stored_headers(&state, &ep);
    let changes = input
        .headers
        .into_iter()
        .chain(input.delete_headers.into_iter().map(|name| (name, None)));
    for (name, value) in changes {
        wanted.retain(|existing, _| !existing.eq_ignore_ascii_case(&name));
        if let Some(value) = value {
            wanted.insert(name, value);
        }
    }
    let patch = json!({"headers": replaced_headers(&state, &ep, json!(wanted))});
    state.endpoint_admin.update(&ep.name, patch, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Deserialize)]
struct RecoverIn {
    since: String,
    until: Option<String>,
}

#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct RecoverOut {
    id: String,
    status: &'static str,
    task: &'static str,
    updated_at: Timestamp,
}

/// Re-send the endpoint's messages of `[since, until)` (hookgate's replay: at most 7 days
/// back, every matching message of the window, not only the failed ones). A paused or disabled
/// endpoint is re-enabled first, its window starting at `since`.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/recover", tag = "svix", request_body = super::SvixJson,
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 202, description = "RecoverOut")))]
async fn recover(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let path = format!("/api/v1/app/{app_id}/endpoint/{endpoint_id}/recover");
    let run = async {
        let app = application_of(&state, &caller, &app_id).await?;
        let ep = endpoint_of(&state, &app, &endpoint_id)?;
        let input: RecoverIn = body(&bytes)?;
        let since = time(&["body", "since"], &input.since)?;
        let until = input
            .until
            .as_deref()
            .map(|u| time(&["body", "until"], u))
            .transpose()?;
        if ep.disabled {
            return Err(SvixError::conflict("the endpoint is disabled; enable it first"));
        }
        if state.health_of(&ep.name).await.state.receives_events() {
            let window = state.recovery.window(since, until)?;
            state.recovery.replay(&ep, window, None).await?;
        } else {
            state.recovery.reenable(&ep, Some(since)).await?;
        }
        Ok((
            StatusCode::ACCEPTED,
            RecoverOut {
                id: super::new_id("qtask"),
                status: "finished",
                task: "endpoint.recover",
                updated_at: state.clock.now(),
            },
        ))
    };
    idempotent(&state, &caller, &headers, &path, &bytes, run).await
}

#[derive(Debug, Serialize)]
struct StatsOut {
    success: u64,
    pending: u64,
    sending: u64,
    fail: u64,
    canceled: u64,
}

/// The endpoint's deliveries by status (of all that retention kept; `since`/`until` are not
/// applied).
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/stats", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 200, description = "EndpointStats")))]
async fn stats(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let ep = endpoint_of(&state, &app, &endpoint_id)?;
    let counts = state
        .store
        .delivery_summary(&ep.name, DeliveryId(0), DeliveryId(i64::MAX))
        .await?;
    let mut stats = StatsOut {
        success: 0,
        pending: 0,
        sending: 0,
        fail: 0,
        canceled: 0,
    };
    for (status, n) in counts {
        match status {
            DeliveryStatus::Succeeded => stats.success += n,
            DeliveryStatus::Pending => stats.pending += n,
            DeliveryStatus::Delivering => stats.sending += n,
            DeliveryStatus::Failed | DeliveryStatus::Dead => stats.fail += n,
        }
    }
    Ok(json(StatusCode::OK, &stats))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExampleIn {
    event_type: String,
    #[serde(default)]
    example_index: usize,
    payload: Option<Value>,
}

/// Send a message of an event type to this endpoint only: the given payload, else the
/// example at `exampleIndex` of the type's latest schema (`examples`), else `{}`.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/send-example", tag = "svix", request_body = super::SvixJson,
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 202, description = "MessageOut")))]
async fn send_example(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let path = format!("/api/v1/app/{app_id}/endpoint/{endpoint_id}/send-example");
    let run = async {
        let app = application_of(&state, &caller, &app_id).await?;
        let ep = endpoint_of(&state, &app, &endpoint_id)?;
        let input: ExampleIn = body(&bytes)?;
        valid_svix_name(&["body", "eventType"], &input.event_type)?;
        let payload = match input.payload {
            Some(payload) => payload,
            None => example(&state, &input.event_type, input.example_index).await?,
        };
        let message: MessageOut = send_to(&state, &app, &ep, &input.event_type, payload).await?;
        Ok((StatusCode::ACCEPTED, message))
    };
    idempotent(&state, &caller, &headers, &path, &bytes, run).await
}

/// The example of an event type's latest schema, or `{}`.
async fn example(state: &AppState, event_type: &str, index: usize) -> SvixResult<Value> {
    let Some(row) = state.store.event_type(event_type).await? else {
        return Ok(json!({}));
    };
    let schemas = super::stored_json(row.schemas.as_deref(), json!({}));
    let latest = schemas
        .as_object()
        .and_then(|versions| versions.iter().max_by_key(|(v, _)| v.parse::<u64>().unwrap_or(0)))
        .map(|(_, schema)| schema.clone())
        .unwrap_or_default();
    Ok(latest
        .get("examples")
        .and_then(|examples| examples.get(index))
        .cloned()
        .unwrap_or_else(|| json!({})))
}
