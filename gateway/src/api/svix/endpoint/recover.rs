//! `/endpoint/{endpoint_id}/recover`: Svix's recovery of missed messages, as hookgate's replay
//! (or the re-enabling of an endpoint its health stopped).

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::super::extract::{AppEndpoint, AppPath, EndpointPath, Idempotent};
use super::super::{SvixError, SvixResult, body, new_id, time};
use crate::api::AppState;
use crate::model::Timestamp;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(recover))
}

#[derive(Debug, Deserialize)]
struct RecoverIn {
    since: String,
    until: Option<String>,
}

/// `RecoverOut`: the background task Svix would run, finished.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct RecoverOut {
    id: String,
    status: &'static str,
    task: &'static str,
    #[schema(value_type = String, format = DateTime)]
    updated_at: Timestamp,
}

/// Re-send the endpoint's messages of `[since, until)` (hookgate's replay: at most 7 days
/// back, every matching message of the window, not only the failed ones). A paused or disabled
/// endpoint is re-enabled first, its window starting at `since`.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/recover", tag = "svix",
    request_body = super::super::SvixJson, params(AppPath, EndpointPath),
    responses((status = 202, description = "Recovering", body = RecoverOut)))]
async fn recover(
    State(state): State<AppState>,
    idem: Idempotent,
    AppEndpoint { ep, .. }: AppEndpoint,
    bytes: Bytes,
) -> SvixResult<Response> {
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
    // A window Svix would not recover (too far back, ending before it starts) is a 422.
    let window = state
        .recovery
        .window(since, until)
        .map_err(|e| SvixError::invalid(&["body", "since"], e.to_string()))?;
    if state.health_of(&ep.name).await.state.receives_events() {
        state.recovery.replay(&ep, window, None).await?;
    } else {
        state.recovery.reenable(&ep, Some(since)).await?;
    }
    let out = RecoverOut {
        id: new_id("qtask"),
        status: "finished",
        task: "endpoint.recover",
        updated_at: state.clock.now(),
    };
    Ok(idem.answer(StatusCode::ACCEPTED, &out).await)
}
