//! `GET /api/v1/health`: Svix's liveness check (open, like `/healthz`).

use axum::http::StatusCode;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use crate::api::AppState;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(health))
}

#[utoipa::path(get, path = "/api/v1/health", tag = "svix",
    responses((status = 204, description = "Up")))]
async fn health() -> StatusCode {
    StatusCode::NO_CONTENT
}
