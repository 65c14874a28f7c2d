//! `/api/v1/auth/app-portal-access/{app_id}` (and the older `dashboard-access`): a link to
//! hookgate's console signed in as the application's tenant, for a product to embed as its
//! customer's webhook portal. The token is a console token (`hgc_…`); it grants what a key of
//! the tenant grants until it expires. Unlike Svix's open-source server, whose link opens a
//! documentation page, this one opens a working portal.

use std::time::Duration;

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::application::{ApplicationIn, create_application};
use super::{SvixResult, admin_only, application_of, body, idempotent};
use crate::api::AppState;
use crate::api::auth::Caller;
use crate::api::tokens::TokenKeys;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(app_portal_access))
        .routes(routes!(dashboard_access))
}

/// Svix's default and longest token life.
const MAX_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct PortalAccessIn {
    /// Seconds; at most 7 days (the default).
    expiry: Option<u64>,
    application: Option<ApplicationIn>,
    /// Accepted; the console offers every capability of the tenant.
    #[serde(rename = "featureFlags")]
    _feature_flags: Option<Vec<String>>,
    #[serde(rename = "readOnly")]
    _read_only: Option<bool>,
    #[serde(rename = "capabilities")]
    _capabilities: Option<Vec<String>>,
    #[serde(rename = "sessionId")]
    _session_id: Option<String>,
}

#[derive(Debug, Serialize)]
struct PortalAccessOut {
    url: String,
    token: String,
}

#[utoipa::path(post, path = "/api/v1/auth/app-portal-access/{app_id}", tag = "svix", request_body = super::SvixJson,
    params(("app_id" = String, Path, description = "The application's id or uid")),
    responses((status = 200, description = "AppPortalAccessOut")))]
async fn app_portal_access(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(app_id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let path = format!("/api/v1/auth/app-portal-access/{app_id}");
    let run = portal(&state, &caller, &app_id, &headers, &bytes);
    idempotent(&state, &caller, &headers, &path, &bytes, run).await
}

/// The older name of the same call.
#[utoipa::path(post, path = "/api/v1/auth/dashboard-access/{app_id}", tag = "svix", request_body = super::SvixJson,
    params(("app_id" = String, Path, description = "The application's id or uid")),
    responses((status = 200, description = "DashboardAccessOut")))]
async fn dashboard_access(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(app_id): Path<String>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let path = format!("/api/v1/auth/dashboard-access/{app_id}");
    let run = portal(&state, &caller, &app_id, &headers, &bytes);
    idempotent(&state, &caller, &headers, &path, &bytes, run).await
}

async fn portal(
    state: &AppState,
    caller: &Caller,
    app_id: &str,
    headers: &HeaderMap,
    bytes: &[u8],
) -> SvixResult<(StatusCode, PortalAccessOut)> {
    admin_only(caller)?;
    let input: PortalAccessIn = body(bytes)?;
    let app = match application_of(state, caller, app_id).await {
        Err(e) => match input.application {
            Some(application) => create_application(state, application, Some(app_id)).await?,
            None => return Err(e),
        },
        Ok(app) => app,
    };
    let ttl = input
        .expiry
        .map_or(MAX_EXPIRY, Duration::from_secs)
        .clamp(Duration::from_secs(1), MAX_EXPIRY);
    let config = state.config.load();
    let expires_at = state.clock.now().plus(ttl);
    let token = TokenKeys::of(&config.server, &state.console_fallback_key).issue(&app.tenant, expires_at);
    Ok((
        StatusCode::OK,
        PortalAccessOut {
            url: crate::api::tenants::console_link(&config, headers, &token),
            token,
        },
    ))
}
