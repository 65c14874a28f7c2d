//! `GET /api/v1/health` and `GET /api/v1/health/ping`: Svix's liveness checks (open, like
//! `/healthz`; probes written for Svix call the second).

use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(health)).routes(routes!(ping))
}

#[utoipa::path(get, path = "/api/v1/health", tag = "svix",
    responses((status = 204, description = "Up")))]
async fn health() -> StatusCode {
    StatusCode::NO_CONTENT
}

#[utoipa::path(get, path = "/api/v1/health/ping", tag = "svix",
    responses((status = 204, description = "Up")))]
async fn ping() -> StatusCode {
    StatusCode::NO_CONTENT
}
