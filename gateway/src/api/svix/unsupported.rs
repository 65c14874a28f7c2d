//! The parts of Svix's API that hookgate does not offer answer `501 not_implemented` (the
//! calls of Svix's cloud: streaming, ingest, connectors, integrations, operational webhooks,
//! background tasks, usage statistics, transformations, bulk payload expunging, token logout…;
//! Svix's ingest API under `/ingest/api/v1/` too;
//! docs/svix.md lists them and says why). A path that is not Svix's at all answers Svix's 404.

use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::SvixError;
use crate::api::AppState;

pub(super) fn router() -> Router<AppState> {
    Router::new()
        .route("/api/v1/{*rest}", axum::routing::any(answer))
        .route("/ingest/api/v1/{*rest}", axum::routing::any(ingest))
}

/// Svix's inbound webhooks ("Ingest"), under a prefix of their own.
async fn ingest(Path(rest): Path<String>) -> Response {
    SvixError::not_implemented(format!(
        "hookgate does not offer Svix's ingest API (`/ingest/api/v1/{rest}`): it sends webhooks, it does not receive them"
    ))
    .into_response()
}

/// The first segments of Svix's API paths: a call under one of them that hookgate has no route
/// for is a call of Svix's it does not offer.
const SVIX_FAMILIES: &[&str] = &[
    "app",
    "auth",
    "event-type",
    "stats",
    "stream",
    "streaming",
    "ingest",
    "connector",
    "environment",
    "operational-webhook",
    "background-task",
    "autoconfig",
];

async fn answer(Path(rest): Path<String>) -> Response {
    let family = rest.split('/').next().unwrap_or_default();
    if SVIX_FAMILIES.contains(&family) {
        SvixError::not_implemented(format!(
            "hookgate does not offer `/api/v1/{rest}` of Svix's API (docs/svix.md lists what it offers)"
        ))
        .into_response()
    } else {
        SvixError::new(StatusCode::NOT_FOUND, "not_found", "no such route").into_response()
    }
}
