//! `GET /v1/policies`, `GET /v1/policies/{name}/preview`: what a policy will do, before anyone
//! trusts it (README "Retry policies").

use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::error::NoSuchPolicy;
use super::extract::Path;
use super::{ApiError, AppState};
use crate::policy;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_policies))
        .routes(routes!(preview))
        .routes(routes!(chart))
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PolicyList {
    policies: Vec<String>,
}

/// The names of every policy: the presets and the config's own.
#[utoipa::path(get, path = "/v1/policies", tag = "policies",
    responses((status = 200, description = "Policy names", body = PolicyList)))]
async fn list_policies(State(state): State<AppState>) -> Json<PolicyList> {
    Json(PolicyList {
        policies: state.config.load().policies.keys().cloned().collect(),
    })
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PlannedAttemptView {
    /// 1 for the first attempt.
    n: u32,
    /// Wait after the previous attempt, seconds, without jitter.
    #[schema(value_type = f64)]
    wait_s: serde_json::Number,
    /// Time since the event was received, seconds, without jitter, deadline applied.
    #[schema(value_type = f64)]
    at_s: serde_json::Number,
    /// The shortest and longest wait jitter can make of it.
    #[schema(value_type = f64)]
    min_wait_s: serde_json::Number,
    #[schema(value_type = f64)]
    max_wait_s: serde_json::Number,
    /// initial, schedule, no_delay, pre_backoff, backoff, post_backoff.
    phase: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PreviewView {
    policy: String,
    /// The jitter fraction, e.g. 0.2 for ±20 %.
    jitter: f64,
    /// The deadline from the event's receipt, seconds; null when the policy has none.
    deadline_s: Option<u64>,
    attempts: Vec<PlannedAttemptView>,
}

/// Seconds as a JSON number: whole numbers stay integers (`30`, not `30.0`).
fn seconds(d: std::time::Duration) -> serde_json::Number {
    let ms = d.as_millis();
    if ms.is_multiple_of(1000) {
        serde_json::Number::from((ms / 1000) as u64)
    } else {
        serde_json::Number::from_f64(ms as f64 / 1000.0).unwrap_or_else(|| 0.into())
    }
}

/// A policy's planned attempts as an SVG chart (what `hookgate policy preview --svg` draws).
#[utoipa::path(get, path = "/v1/policies/{name}/chart.svg", tag = "policies",
    params(("name" = String, Path, description = "A preset or a configured policy")),
    responses((status = 200, description = "The chart", content_type = "image/svg+xml", body = String),
              NoSuchPolicy))]
async fn chart(State(state): State<AppState>, Path(name): Path<String>) -> Result<Response, ApiError> {
    let config = state.config.load();
    let policy = config
        .policies
        .get(&name)
        .ok_or_else(|| ApiError::not_found("policy_not_found", format!("no policy `{name}`")))?;
    let svg = crate::charts::render_preview_svg(policy);
    Ok(([(header::CONTENT_TYPE, "image/svg+xml")], svg).into_response())
}

/// The planned attempts of a policy, without jitter and with the deadline applied.
#[utoipa::path(get, path = "/v1/policies/{name}/preview", tag = "policies",
    params(("name" = String, Path, description = "A preset or a configured policy")),
    responses((status = 200, description = "The schedule", body = PreviewView),
              NoSuchPolicy))]
async fn preview(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<PreviewView>, ApiError> {
    let config = state.config.load();
    let policy = config
        .policies
        .get(&name)
        .ok_or_else(|| ApiError::not_found("policy_not_found", format!("no policy `{name}`")))?;
    let jitter = policy.jitter();
    let attempts = policy::preview(policy)
        .into_iter()
        .map(|a| PlannedAttemptView {
            n: a.n,
            wait_s: seconds(a.wait),
            at_s: seconds(a.at),
            min_wait_s: seconds(a.wait.mul_f64((1.0 - jitter).max(0.0))),
            max_wait_s: seconds(a.wait.mul_f64(1.0 + jitter)),
            phase: a.phase.as_str().to_owned(),
        })
        .collect();
    Ok(Json(PreviewView {
        policy: name,
        jitter,
        deadline_s: policy.deadline().map(|d| d.as_secs()),
        attempts,
    }))
}
