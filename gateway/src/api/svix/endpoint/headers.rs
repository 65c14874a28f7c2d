//! `/endpoint/{endpoint_id}/headers`: the headers an endpoint sends with each message, and
//! the names Svix refuses there.

use std::collections::BTreeMap;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::super::extract::{AppEndpoint, AppPath, EndpointPath};
use super::super::{SvixError, SvixResult, body, json};
use crate::api::AppState;
use crate::config::EndpointConfig;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(get_headers, set_headers, patch_headers))
}

/// Header names Svix's server refuses on an endpoint: hop-by-hop and body-describing headers
/// the sender sets itself, and prefixes that proxies and clouds (and Svix) reserve.
const RESERVED_HEADERS: &[&str] = &[
    "user-agent",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailers",
    "transfer-encoding",
    "upgrade",
    "age",
    "cache-control",
    "clear-site-data",
    "expires",
    "pragma",
    "warning",
    "content-length",
    "content-type",
    "content-encoding",
    "content-language",
    "content-location",
];
const RESERVED_HEADER_PREFIXES: &[&str] = &[
    "x-amz-", "x-amzn-", "x-google", "x-goog-", "x-gfe", "x-azure-", "x-fd-", "x-svix-", "svix-",
];

/// A header name an endpoint may set, or Svix's 422.
pub(super) fn allowed_header(name: &str) -> SvixResult<()> {
    let lower = name.to_ascii_lowercase();
    let why = if axum::http::HeaderName::from_bytes(lower.as_bytes()).is_err() {
        "is not a valid header name"
    } else if RESERVED_HEADERS.contains(&lower.as_str()) {
        "is set by the sender and cannot be given"
    } else if RESERVED_HEADER_PREFIXES.iter().any(|p| lower.starts_with(p)) {
        "starts with a reserved prefix"
    } else {
        return Ok(());
    };
    Err(SvixError::invalid(
        &["body", "headers"],
        format!("`{name}` {why}"),
    ))
}

/// A merge patch that makes the endpoint's headers exactly `wanted`: the names it drops are
/// removed (header names are matched without regard to case).
pub(super) async fn replaced_headers(state: &AppState, ep: &EndpointConfig, wanted: Value) -> Value {
    let mut patch = Map::new();
    for (name, _) in stored_headers(state, ep).await {
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
async fn stored_headers(state: &AppState, ep: &EndpointConfig) -> BTreeMap<String, String> {
    let row = state.store.api_endpoint(&ep.name).await.ok().flatten();
    let written = row
        .and_then(|r| serde_json::from_str::<Value>(&r.spec).ok())
        .and_then(|spec| serde_json::from_value::<BTreeMap<String, String>>(spec["headers"].clone()).ok());
    written.unwrap_or_else(|| {
        ep.headers
            .iter()
            .filter_map(|(name, value)| Some((name.to_string(), value.to_str().ok()?.to_owned())))
            .collect()
    })
}

/// `EndpointHeadersOut`.
#[derive(Debug, Serialize, ToSchema)]
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
    params(AppPath, EndpointPath),
    responses((status = 200, description = "The headers", body = HeadersOut)))]
async fn get_headers(
    State(state): State<AppState>,
    AppEndpoint { ep, .. }: AppEndpoint,
) -> SvixResult<Response> {
    let (sensitive, headers): (BTreeMap<_, _>, BTreeMap<_, _>) = stored_headers(&state, &ep)
        .await
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

impl HeadersIn {
    /// The body, its header names checked.
    fn read(bytes: &[u8]) -> SvixResult<HeadersIn> {
        let input: HeadersIn = body(bytes)?;
        input.headers.keys().try_for_each(|name| allowed_header(name))?;
        Ok(input)
    }
}

/// Makes the endpoint's headers exactly `wanted`.
async fn save(
    state: &AppState,
    ep: &EndpointConfig,
    wanted: BTreeMap<String, String>,
) -> SvixResult<StatusCode> {
    let patch = json!({"headers": replaced_headers(state, ep, json!(wanted)).await});
    state.endpoint_admin.update(&ep.name, patch, None).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Replace the endpoint's headers.
#[utoipa::path(put, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers", tag = "svix", request_body = super::super::SvixJson,
    params(AppPath, EndpointPath),
    responses((status = 204, description = "Replaced")))]
async fn set_headers(
    State(state): State<AppState>,
    AppEndpoint { ep, .. }: AppEndpoint,
    bytes: Bytes,
) -> SvixResult<StatusCode> {
    let input = HeadersIn::read(&bytes)?;
    let wanted = input
        .headers
        .into_iter()
        .filter_map(|(name, value)| Some((name, value?)))
        .collect();
    save(&state, &ep, wanted).await
}

/// Set some headers (a null value, or a name in `deleteHeaders`, removes one).
#[utoipa::path(patch, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/headers", tag = "svix", request_body = super::super::SvixJson,
    params(AppPath, EndpointPath),
    responses((status = 204, description = "Changed")))]
async fn patch_headers(
    State(state): State<AppState>,
    AppEndpoint { ep, .. }: AppEndpoint,
    bytes: Bytes,
) -> SvixResult<StatusCode> {
    let input = HeadersIn::read(&bytes)?;
    let mut wanted = stored_headers(&state, &ep).await;
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
    save(&state, &ep, wanted).await
}
