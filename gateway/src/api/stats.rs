//! `GET /v1/stats`: what the console's overview shows — deliveries finished and attempts failed
//! over the last hour or day, what waits, what is dead, endpoints by state.

use std::collections::BTreeMap;
use std::time::Duration;

use axum::extract::State;
use axum::{Extension, Json};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::extract::Query;
use super::{ApiError, AppState};
use crate::model::{EndpointState, Timestamp};
use crate::store::KeyListing;

/// Blocked keys counted per ordered endpoint.
const BLOCKED_KEYS_COUNTED: u32 = 1000;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(stats))
}

#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct StatsQuery {
    /// `hour` (60 buckets of a minute, the default) or `day` (24 buckets of an hour).
    period: Option<String>,
    /// Only this tenant's deliveries and endpoints (admin keys; a tenant's key sees its own).
    tenant: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct BucketView {
    #[schema(value_type = String, format = DateTime)]
    at: Timestamp,
    /// Deliveries that ended `succeeded` in this bucket.
    succeeded: u64,
    /// Deliveries that ended `failed` or `dead` (by their status now).
    failed: u64,
    /// Attempts that failed in this bucket, whatever became of their delivery: an outage
    /// whose deliveries were redelivered or redriven since still shows here.
    failed_attempts: u64,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StatsView {
    period: String,
    bucket_seconds: u64,
    buckets: Vec<BucketView>,
    /// Deliveries waiting for an attempt now.
    pending: u64,
    /// Dead letters, to redrive.
    dead: u64,
    /// Endpoints per state (`active`, `degraded`, `paused`, `disabled`).
    endpoints: BTreeMap<String, u64>,
    /// Ordering keys of ordered endpoints that are blocked behind a failing head or held
    /// behind a dead one (at most 1000 per endpoint are counted).
    blocked_keys: u64,
}

/// Deliveries finished and attempts failed per minute over the last hour (or per hour over the
/// last day), the backlog, and endpoints by state.
#[utoipa::path(get, path = "/v1/stats", tag = "ops", params(StatsQuery),
    responses((status = 200, description = "Activity and backlog", body = StatsView),
              (status = 400, description = "An unknown period", body = super::error::ErrorBody)))]
async fn stats(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<StatsQuery>,
) -> Result<Json<StatsView>, ApiError> {
    let (period, bucket, buckets) = match q.period.as_deref().unwrap_or("hour") {
        "hour" => ("hour", Duration::from_secs(60), 60),
        "day" => ("day", Duration::from_secs(3600), 24),
        other => {
            return Err(ApiError::bad_request(
                "invalid_period",
                format!("unknown period `{other}` (hour, day)"),
            ));
        }
    };
    let tenant = caller.tenant_filter(q.tenant);
    let now = state.clock.now();
    // Whole buckets, the current one last.
    let width = bucket.as_millis() as i64;
    let current = now.as_millis() - now.as_millis().rem_euclid(width);
    let since = Timestamp::from_millis(current - width * (buckets as i64 - 1));
    let activity = state
        .store
        .activity(since, bucket, buckets, tenant.clone())
        .await?;
    let backlog = state.store.backlog(tenant.clone()).await?;
    let endpoints = endpoints_by_state(&state, tenant.as_deref());
    let mut blocked_keys = 0;
    for ep in state.endpoints.ordered() {
        if tenant.is_some() && ep.tenant.as_deref() != tenant.as_deref() {
            continue;
        }
        let page = state
            .store
            .ordering_keys(&ep.name, KeyListing::Blocked, None, BLOCKED_KEYS_COUNTED)
            .await?;
        blocked_keys += page.keys.len() as u64;
    }
    Ok(Json(StatsView {
        period: period.to_owned(),
        bucket_seconds: bucket.as_secs(),
        buckets: activity
            .into_iter()
            .map(|b| BucketView {
                at: b.start,
                succeeded: b.succeeded,
                failed: b.failed,
                failed_attempts: b.failed_attempts,
            })
            .collect(),
        pending: backlog.pending,
        dead: backlog.dead,
        endpoints,
        blocked_keys,
    }))
}

/// How many endpoints (of `tenant`, or all) are in each health state that some are in. Only
/// the endpoints that are not active are looked at: every other endpoint is active.
fn endpoints_by_state(state: &AppState, tenant: Option<&str>) -> BTreeMap<String, u64> {
    let total = match tenant {
        Some(t) => state.endpoints.tenant_len(t),
        None => state.endpoints.len(),
    };
    let mut by_state: BTreeMap<String, u64> = BTreeMap::new();
    let mut not_active = 0;
    for (name, health) in state.scheduler.not_active() {
        let ours = state
            .endpoints
            .routing(&name)
            .is_some_and(|r| tenant.is_none() || r.tenant.as_deref() == tenant);
        if ours {
            *by_state.entry(health.as_str().to_owned()).or_default() += 1;
            not_active += 1;
        }
    }
    let active = total.saturating_sub(not_active) as u64;
    if active > 0 {
        by_state.insert(EndpointState::Active.as_str().to_owned(), active);
    }
    by_state
}
