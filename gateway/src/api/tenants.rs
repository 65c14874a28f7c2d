//! Tenants: console tokens that open the console for one tenant (README "Webhooks for your
//! customers").

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::extract::{BodyBytes, Path};
use super::tokens::TokenKeys;
use super::{ApiError, AppState};
use crate::model::Timestamp;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(console_token))
        .routes(routes!(me))
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct Me {
    /// True for an admin key (or no keys configured): everything.
    pub(crate) admin: bool,
    /// The tenant a tenant's key or console token is limited to.
    pub(crate) tenant: Option<String>,
    /// True when the gateway has no API keys (it then listens on loopback only): every caller
    /// without a console token is an admin, and there is nothing to sign in or out of.
    #[serde(default)]
    pub(crate) open: bool,
}

/// Who the presented key or token stands for: an admin, or a tenant (the console shows what
/// each may do).
#[utoipa::path(get, path = "/v1/me", tag = "tenants",
    responses((status = 200, description = "The caller", body = Me),
              (status = 401, description = "No key, or an expired console token", body = super::error::ErrorBody),
              (status = 403, description = "A wrong key or token", body = super::error::ErrorBody)))]
async fn me(State(state): State<AppState>, Extension(caller): Extension<Caller>) -> Json<Me> {
    Json(Me {
        admin: caller.tenant.is_none(),
        tenant: caller.tenant,
        open: state.config.load().server.api_keys.is_empty(),
    })
}

/// A console token lives this long unless the request says.
const DEFAULT_TTL: std::time::Duration = std::time::Duration::from_secs(3600);
/// And at most this long.
const MAX_TTL: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ConsoleTokenIn {
    /// How long the token holds, e.g. `1h` (the default); at most `7d`.
    ttl: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct ConsoleToken {
    /// `hgc_…`: send as `Authorization: Bearer <token>`, or open `url`.
    pub(crate) token: String,
    /// The console, signed in as the tenant.
    pub(crate) url: String,
    #[schema(value_type = String, format = DateTime)]
    pub(crate) expires_at: Timestamp,
}

/// A signed, expiring token that grants what a key of the tenant grants (its endpoints,
/// deliveries and events, nothing else), to embed in a product as its customer's webhook
/// portal. Admin keys only.
#[utoipa::path(post, path = "/v1/tenants/{tenant}/console-token", tag = "tenants",
    params(("tenant" = String, Path, description = "The tenant")),
    request_body(content = Option<ConsoleTokenIn>, description = "Optional ttl"),
    responses((status = 200, description = "The token and its console link", body = ConsoleToken),
              (status = 400, description = "A bad tenant name or ttl", body = super::error::ErrorBody),
              (status = 403, description = "Not an admin key", body = super::error::ErrorBody)))]
async fn console_token(
    State(state): State<AppState>,
    Path(tenant): Path<String>,
    headers: HeaderMap,
    body: BodyBytes,
) -> Result<Json<ConsoleToken>, ApiError> {
    super::events::valid_tenant(&tenant)?;
    let input: ConsoleTokenIn = super::optional_json(&body, "a console token request")?;
    let ttl = match input.ttl.as_deref() {
        None => DEFAULT_TTL,
        Some(text) => crate::policy::parse_duration(text)
            .map_err(|why| format!("ttl: {why}"))
            .and_then(|d| match !d.is_zero() && d <= MAX_TTL {
                true => Ok(d),
                false => Err(format!("ttl `{text}` must be longer than 0s and at most 7d")),
            })
            .map_err(|message| ApiError::bad_request("invalid_ttl", message))?,
    };
    let config = state.config.load();
    let expires_at = state.clock.now().plus(ttl);
    let token = TokenKeys::of(&config.server, &state.console_fallback_key).issue(&tenant, expires_at);
    Ok(Json(ConsoleToken {
        url: console_link(&config, &headers, &token),
        token,
        expires_at,
    }))
}

/// The console's address signed in with `token`: under `server.public_url`, or else the
/// address the caller reached this gateway at.
pub(super) fn console_link(config: &crate::config::Config, headers: &HeaderMap, token: &str) -> String {
    let base = config.server.public_url.clone().unwrap_or_else(|| {
        let host = headers.get(header::HOST).and_then(|h| h.to_str().ok());
        format!(
            "http://{}",
            host.map_or_else(|| config.server.listen.to_string(), str::to_owned)
        )
    });
    format!("{base}/console/#token={token}")
}
