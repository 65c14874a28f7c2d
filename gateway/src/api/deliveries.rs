//! The delivery log: list, one delivery with its attempts, redeliver.

use axum::extract::State;
use axum::http::StatusCode;
use axum::{Extension, Json};
use serde::Deserialize;
use utoipa::IntoParams;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::error::{ErrorBody, NoSuchDelivery};
use super::extract::{Path, Query};
use super::views::{AttemptView, DeliveryDetailView, DeliveryList, DeliveryView, Summary};
use super::{ApiError, AppState};
use crate::model::{DeliveryId, DeliveryStatus};
use crate::store::DeliveryFilter;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_deliveries))
        .routes(routes!(summary))
        .routes(routes!(get_delivery))
        .routes(routes!(redeliver))
}

const DEFAULT_PAGE: u32 = 50;
const MAX_PAGE: u32 = 1000;

#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct ListQuery {
    /// Only this endpoint's deliveries.
    endpoint: Option<String>,
    /// pending, delivering, succeeded, failed or dead.
    status: Option<String>,
    /// Only deliveries of this event id.
    event_id: Option<String>,
    /// Only deliveries to this tenant's endpoints (admin keys; a tenant's key always sees only
    /// its own).
    tenant: Option<String>,
    /// Only deliveries of events of this type.
    event_type: Option<String>,
    /// Only deliveries made at or after this RFC 3339 time.
    since: Option<String>,
    /// Only deliveries made before this RFC 3339 time.
    until: Option<String>,
    /// Page size, 1-1000 (default 50).
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

pub(super) fn parse_delivery_id(text: &str) -> Result<DeliveryId, ApiError> {
    text.parse()
        .map_err(|_| ApiError::not_found("delivery_not_found", format!("no delivery `{text}`")))
}

/// The delivery log, newest first.
#[utoipa::path(
    get,
    path = "/v1/deliveries",
    tag = "deliveries",
    params(ListQuery),
    responses(
        (status = 200, description = "A page of deliveries", body = DeliveryList),
        (status = 400, description = "A bad filter", body = ErrorBody),
    )
)]
async fn list_deliveries(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<ListQuery>,
) -> Result<Json<DeliveryList>, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_limit",
            format!("limit must be 1-{MAX_PAGE}"),
        ));
    }
    // `delivering` is not stored: it is a pending delivery with an attempt running now.
    let (status, only_in_flight) = match q.status.as_deref() {
        None => (None, false),
        Some("delivering") => (Some(DeliveryStatus::Pending), true),
        Some(s) => (
            Some(s.parse::<DeliveryStatus>().map_err(|_| {
                ApiError::bad_request(
                    "invalid_status",
                    format!("unknown status `{s}` (pending, delivering, succeeded, failed, dead)"),
                )
            })?),
            false,
        ),
    };
    let before = q
        .cursor
        .as_deref()
        .map(|c| {
            c.parse::<DeliveryId>()
                .map_err(|_| ApiError::bad_request("invalid_cursor", "not a cursor from this API"))
        })
        .transpose()?;
    let rows = state
        .store
        .deliveries(DeliveryFilter {
            endpoint: q.endpoint,
            status,
            event_id: q.event_id,
            tenant: caller.tenant_filter(q.tenant),
            event_type: q.event_type,
            since: q
                .since
                .as_deref()
                .map(|t| super::parse_time("since", t))
                .transpose()?,
            until: q
                .until
                .as_deref()
                .map(|t| super::parse_time("until", t))
                .transpose()?,
            before,
            after: None,
            limit,
        })
        .await?;
    let next_cursor = if rows.len() == limit as usize {
        rows.last().map(|r| r.id.to_string())
    } else {
        None
    };
    let deliveries = rows
        .into_iter()
        .map(|r| {
            let in_flight = state.scheduler.is_in_flight(r.id);
            DeliveryView::new(r, in_flight)
        })
        .filter(|d| !only_in_flight || d.status == DeliveryStatus::Delivering)
        .collect();
    Ok(Json(DeliveryList {
        deliveries,
        next_cursor,
    }))
}

#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct SummaryQuery {
    endpoint: String,
    /// The first delivery id of the range (e.g. a replay's `first_delivery`).
    from: String,
    /// The last delivery id of the range, inclusive.
    to: String,
}

/// How many deliveries of an id range are in each status (to follow a replay's progress).
#[utoipa::path(
    get,
    path = "/v1/deliveries/summary",
    tag = "deliveries",
    params(SummaryQuery),
    responses((status = 200, description = "Counts per status", body = Summary))
)]
async fn summary(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<SummaryQuery>,
) -> Result<Json<Summary>, ApiError> {
    if caller.tenant.is_some() {
        let theirs = state
            .endpoints
            .routing(&q.endpoint)
            .is_some_and(|ep| caller.sees(ep.tenant.as_deref()));
        if !theirs {
            return Err(ApiError::not_found(
                "endpoint_not_found",
                format!("no endpoint `{}`", q.endpoint),
            ));
        }
    }
    let from = parse_delivery_id(&q.from)?;
    let to = parse_delivery_id(&q.to)?;
    let mut out = Summary::default();
    for (status, n) in state.store.delivery_summary(&q.endpoint, from, to).await? {
        match status {
            DeliveryStatus::Pending | DeliveryStatus::Delivering => out.pending += n,
            DeliveryStatus::Succeeded => out.succeeded += n,
            DeliveryStatus::Failed => out.failed += n,
            DeliveryStatus::Dead => out.dead += n,
        }
    }
    Ok(Json(out))
}

/// One delivery with all its attempts, oldest first.
#[utoipa::path(
    get,
    path = "/v1/deliveries/{id}",
    tag = "deliveries",
    params(("id" = String, Path, description = "dlv_<n>")),
    responses(
        (status = 200, description = "The delivery", body = DeliveryDetailView),
        NoSuchDelivery,
    )
)]
async fn get_delivery(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<Json<DeliveryDetailView>, ApiError> {
    let id = parse_delivery_id(&id)?;
    let (row, attempts) = state
        .store
        .delivery(id)
        .await?
        .filter(|(row, _)| caller.sees(row.tenant.as_deref()))
        .ok_or_else(|| ApiError::not_found("delivery_not_found", format!("no delivery `{id}`")))?;
    let in_flight = state.scheduler.is_in_flight(id);
    Ok(Json(DeliveryDetailView {
        delivery: DeliveryView::new(row, in_flight),
        attempts: attempts.into_iter().map(AttemptView::from).collect(),
    }))
}

/// Attempts a delivery again now, in a new round: attempt counter from 1 and the whole policy,
/// its deadline counted from now. A delivery waiting for a retry is attempted now instead (the
/// waiting attempt is cancelled, not added to).
///
/// Refused (409) while an attempt of it is running, or while its endpoint is paused or
/// disabled — re-enable it first.
#[utoipa::path(
    post,
    path = "/v1/deliveries/{id}/redeliver",
    tag = "deliveries",
    params(("id" = String, Path, description = "dlv_<n>")),
    responses(
        (status = 202, description = "Queued for now", body = DeliveryView),
        NoSuchDelivery,
        (status = 409, description = "An attempt is running now, or the endpoint is paused/disabled", body = ErrorBody),
    )
)]
async fn redeliver(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(id): Path<String>,
) -> Result<(StatusCode, Json<DeliveryView>), ApiError> {
    let id = parse_delivery_id(&id)?;
    if caller.tenant.is_some() {
        let theirs = state
            .store
            .delivery(id)
            .await?
            .is_some_and(|(row, _)| caller.sees(row.tenant.as_deref()));
        if !theirs {
            return Err(ApiError::not_found(
                "delivery_not_found",
                format!("no delivery `{id}`"),
            ));
        }
    }
    let row = state.recovery.redeliver(id).await?;
    Ok((StatusCode::ACCEPTED, Json(DeliveryView::new(row, false))))
}
