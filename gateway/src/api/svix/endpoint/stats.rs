//! `/endpoint/{endpoint_id}/stats`: the endpoint's deliveries counted by Svix's statuses.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::super::extract::{AppEndpoint, AppPath, EndpointPath};
use super::super::{SvixResult, json};
use crate::api::AppState;
use crate::model::{DeliveryId, DeliveryStatus};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(stats))
}

/// `EndpointStats`.
#[derive(Debug, Default, Serialize, ToSchema)]
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
    params(AppPath, EndpointPath),
    responses((status = 200, description = "The counts", body = StatsOut)))]
async fn stats(State(state): State<AppState>, AppEndpoint { ep, .. }: AppEndpoint) -> SvixResult<Response> {
    let counts = state
        .store
        .delivery_summary(&ep.name, DeliveryId(0), DeliveryId(i64::MAX))
        .await?;
    let mut stats = StatsOut::default();
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
