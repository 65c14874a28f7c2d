//! `/api/v1/auth/app-portal-access/{app_id}` (and the older `dashboard-access`): a link to
//! hookgate's console signed in as the application's tenant, for a product to embed as its
//! customer's webhook portal. The token is a console token (`hgc_…`); it grants what a key of
//! the tenant grants until it expires. Unlike Svix's open-source server, whose link opens a
//! documentation page, this one opens a working portal.

use std::time::Duration;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::application::{ApplicationIn, create_application};
use super::extract::{Admin, AppPath, Idempotent, Ids};
use super::{SvixResult, application_of, body, valid_svix_name};
use crate::api::AppState;
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
    /// The flagged event types the token may see (as Svix's portal tokens: a type without a
    /// flag is seen by all).
    feature_flags: Option<Vec<String>>,
    #[serde(rename = "readOnly")]
    _read_only: Option<bool>,
    #[serde(rename = "capabilities")]
    _capabilities: Option<Vec<String>>,
    #[serde(rename = "sessionId")]
    _session_id: Option<String>,
}

/// `AppPortalAccessOut` (and `DashboardAccessOut`).
#[derive(Debug, Serialize, ToSchema)]
struct PortalAccessOut {
    url: String,
    token: String,
}

#[utoipa::path(post, path = "/api/v1/auth/app-portal-access/{app_id}", tag = "svix", request_body = super::SvixJson,
    params(AppPath), responses((status = 200, description = "The portal's link", body = PortalAccessOut)))]
async fn app_portal_access(
    State(state): State<AppState>,
    idem: Idempotent,
    admin: Admin,
    Ids(path): Ids<AppPath>,
    headers: HeaderMap,
    bytes: Bytes,
) -> SvixResult<Response> {
    let out = portal(&state, &admin, &path.app_id, &headers, &bytes).await?;
    Ok(idem.answer(StatusCode::OK, &out).await)
}

/// The older name of the same call.
#[utoipa::path(post, path = "/api/v1/auth/dashboard-access/{app_id}", tag = "svix", request_body = super::SvixJson,
    params(AppPath), responses((status = 200, description = "The portal's link", body = PortalAccessOut)))]
async fn dashboard_access(
    State(state): State<AppState>,
    idem: Idempotent,
    admin: Admin,
    Ids(path): Ids<AppPath>,
    headers: HeaderMap,
    bytes: Bytes,
) -> SvixResult<Response> {
    app_portal_access(State(state), idem, admin, Ids(path), headers, bytes).await
}

/// A console token of the application `app_id` (made first when the body says how).
async fn portal(
    state: &AppState,
    Admin(caller): &Admin,
    app_id: &str,
    headers: &HeaderMap,
    bytes: &[u8],
) -> SvixResult<PortalAccessOut> {
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
    let flags = input.feature_flags.unwrap_or_default();
    for (i, flag) in flags.iter().enumerate() {
        valid_svix_name(&["body", "featureFlags", &i.to_string()], flag)?;
    }
    let keys = TokenKeys::of(&config.server, &state.console_fallback_key);
    let token = keys.issue_with_flags(&app.tenant, expires_at, &flags);
    Ok(PortalAccessOut {
        url: crate::api::tenants::console_link(&config, headers, &token),
        token,
    })
}
