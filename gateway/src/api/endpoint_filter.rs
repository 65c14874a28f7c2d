//! Trying an endpoint's content filter, or one being edited, without changing anything
//! (README "Content filters"): on a sample event, and on the endpoint's newest events.

use axum::Json;
use axum::extract::State;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use std::sync::Arc;

use axum::Extension;

use super::auth::Caller;
use super::endpoints::{EndpointName, visible};
use super::error::{ErrorBody, FieldProblem, NoSuchEndpoint};
use super::extract::{BodyBytes, Path};
use super::views::{FilterTestOutcome, RecentOutcome};
use super::{ApiError, AppState};
use crate::config::EndpointConfig;
use crate::filter::{self, Filter, Verdict};
use crate::model::{Event, EventLabels, Timestamp};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(test_filter))
}

/// The most of the endpoint's newest events one test reads.
const MAX_RECENT: u32 = 100;

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FilterTestIn {
    /// A filter to try instead of the endpoint's own, which stays as it is; `{}` is no filter.
    #[schema(value_type = Option<Object>)]
    filter: Option<Value>,
    /// A sample event to try it on.
    event: Option<SampleEvent>,
    /// Also try it on this many of the endpoint's newest events (of the last 7 days, of its
    /// topics, types, tenant and channels), at most 100.
    recent: Option<u32>,
}

/// An event as a filter sees it; what is left out is the endpoint's (its tenant, its first
/// topic) or empty.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SampleEvent {
    /// Default `hookgate.test`.
    #[serde(rename = "type")]
    event_type: Option<String>,
    tenant: Option<String>,
    topic: Option<String>,
    id: Option<String>,
    /// Default `{}`.
    #[schema(value_type = Option<Object>)]
    payload: Option<Value>,
    #[serde(default)]
    channels: Vec<String>,
    ordering_key: Option<String>,
}

/// Tries a content filter — the endpoint's, or `filter` — on a sample `event` (whether it
/// passes, and why) and on the endpoint's `recent` events (how many it would let through).
/// Changes nothing.
#[utoipa::path(post, path = "/v1/endpoints/{name}/filter/test", tag = "endpoints",
    params(EndpointName),
    request_body(content = Option<FilterTestIn>, description = "Optional candidate filter, sample event and number of recent events"),
    responses((status = 200, description = "How the filter judges them", body = FilterTestOutcome),
              (status = 400, description = "The candidate filter is invalid (`problems` names each mistake's path)", body = ErrorBody),
              NoSuchEndpoint))]
async fn test_filter(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: BodyBytes,
) -> Result<Json<FilterTestOutcome>, ApiError> {
    let ep = visible(&state, &caller, &name).await?;
    let input: FilterTestIn = super::optional_json(&body, "a filter test")?;
    let filter: Option<Arc<Filter>> = match &input.filter {
        Some(document) => candidate(document)?.map(Arc::new),
        None => ep.filter.clone(),
    };
    let verdict = input.event.map(|sample| {
        let event = sample_event(&ep, sample, state.clock.now());
        judge(filter.as_deref(), &filter::input(&event))
    });
    let recent = match input.recent {
        None => None,
        Some(n) => {
            let events = state.recovery.recent_events(&ep, n.min(MAX_RECENT)).await?;
            let matched = events
                .iter()
                .filter(|e| filter.as_ref().is_none_or(|f| f.matches(&filter::input(e))))
                .count();
            Some(RecentOutcome {
                events: events.len(),
                matched,
            })
        }
    };
    Ok(Json(FilterTestOutcome {
        filter: filter.as_ref().map(|f| f.source().clone()),
        matched: verdict.as_ref().map(|v| v.matched),
        reason: verdict.map(|v| v.reason),
        recent,
    }))
}

/// The candidate, compiled; each mistake a problem at `filter.<its path>`.
fn candidate(document: &Value) -> Result<Option<Filter>, ApiError> {
    Filter::compile(document).map_err(|errors| {
        let problems: Vec<FieldProblem> = errors
            .into_iter()
            .map(|e| FieldProblem {
                path: if e.path.is_empty() {
                    "filter".into()
                } else {
                    format!("filter.{}", e.path)
                },
                reason: e.reason,
            })
            .collect();
        let message = format!(
            "the filter is invalid: {}: {}",
            problems[0].path, problems[0].reason
        );
        ApiError {
            problems,
            ..ApiError::bad_request("invalid_filter", message)
        }
    })
}

fn judge(filter: Option<&Filter>, view: &Value) -> Verdict {
    match filter {
        Some(f) => f.explain(view),
        None => Verdict {
            matched: true,
            reason: "the endpoint has no filter: every event passes".into(),
        },
    }
}

fn sample_event(ep: &EndpointConfig, sample: SampleEvent, now: Timestamp) -> Event {
    Event {
        id: sample.id.unwrap_or_else(|| "evt_sample".into()),
        topic: sample
            .topic
            .or_else(|| ep.topics.first().cloned())
            .unwrap_or_default(),
        event_type: sample.event_type.unwrap_or_else(|| "hookgate.test".into()),
        content_type: "application/json".into(),
        payload: Bytes::from(
            sample
                .payload
                .unwrap_or_else(|| Value::Object(Default::default()))
                .to_string(),
        ),
        ordering_key: sample.ordering_key,
        received_at: now,
        tenant: sample.tenant.or_else(|| ep.tenant.as_deref().map(str::to_owned)),
        trace: None,
        labels: EventLabels {
            channels: sample.channels,
            ..EventLabels::default()
        },
    }
}
