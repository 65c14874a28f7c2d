//! Message attempts and per-endpoint delivery status: hookgate's attempts and deliveries of an
//! application's tenant. An attempt is `atmpt_<n>`; its `triggerType` is `scheduled` in a
//! delivery's first round and `manual` in a later one (a resend, recover or replay).

use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::endpoint::{EndpointOut, endpoint_of};
use super::message::{MessageOut, message_of};
use super::{Paging, SvixError, SvixResult, application_of, idempotent, json, query};
use crate::api::AppState;
use crate::api::auth::Caller;
use crate::model::{DeliveryStatus, Timestamp};
use crate::store::{ApplicationRow, AttemptListRow, AttemptQuery, DeliveryFilter, DeliveryRow};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(by_message))
        .routes(routes!(by_endpoint))
        .routes(routes!(get_attempt))
        .routes(routes!(message_endpoints))
        .routes(routes!(endpoint_messages))
        .routes(routes!(resend))
}

/// Svix's message status: 0 success, 1 pending, 2 fail, 3 sending.
fn status_of(status: DeliveryStatus) -> (u8, &'static str) {
    match status {
        DeliveryStatus::Succeeded => (0, "success"),
        DeliveryStatus::Pending => (1, "pending"),
        DeliveryStatus::Failed | DeliveryStatus::Dead => (2, "fail"),
        DeliveryStatus::Delivering => (3, "sending"),
    }
}

/// `MessageAttemptOut`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct AttemptOut {
    id: String,
    msg_id: String,
    endpoint_id: String,
    url: String,
    response: String,
    response_status_code: u16,
    response_duration_ms: u64,
    status: u8,
    status_text: &'static str,
    trigger_type: u8,
    timestamp: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    msg: Option<MessageOut>,
}

impl AttemptOut {
    fn of(state: &AppState, row: AttemptListRow) -> AttemptOut {
        let url = state
            .config
            .load()
            .endpoints
            .get(row.endpoint.as_str())
            .map(|ep| ep.destination.masked())
            .unwrap_or_default();
        let succeeded = row.attempt.status_code.is_some_and(|c| (200..300).contains(&c));
        let (status, status_text) = if succeeded { (0, "success") } else { (2, "fail") };
        AttemptOut {
            id: format!("atmpt_{}", row.id),
            msg_id: row.event_id,
            endpoint_id: row.endpoint,
            url,
            response: row
                .attempt
                .exchange
                .response_body
                .or(row.attempt.error)
                .unwrap_or_default(),
            response_status_code: row.attempt.status_code.unwrap_or(0),
            response_duration_ms: row.attempt.duration_ms,
            status,
            status_text,
            trigger_type: u8::from(row.round > 1),
            timestamp: row.attempt.started_at,
            msg: None,
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct AttemptListQuery {
    limit: Option<u32>,
    iterator: Option<String>,
    status: Option<u8>,
    status_code_class: Option<u16>,
    endpoint_id: Option<String>,
}

impl AttemptListQuery {
    fn keeps(&self, out: &AttemptOut) -> bool {
        self.status.is_none_or(|s| s == out.status)
            && self.status_code_class.is_none_or(|class| match class {
                0 => out.response_status_code == 0,
                class => out.response_status_code / 100 * 100 == class,
            })
    }
}

/// Attempts, newest first, filtered in memory by status and status class (`iterator`: the
/// last attempt's id).
async fn attempts(state: &AppState, mut base: AttemptQuery, q: &AttemptListQuery) -> SvixResult<Response> {
    let limit = Paging {
        limit: q.limit,
        ..Paging::default()
    }
    .limit()?;
    base.before = q
        .iterator
        .as_deref()
        .map(|i| {
            i.trim_start_matches("atmpt_")
                .parse::<i64>()
                .map_err(|_| SvixError::invalid(&["query", "iterator"], "not an iterator of this list"))
        })
        .transpose()?;
    let mut kept = Vec::new();
    loop {
        let rows = state
            .store
            .attempts(AttemptQuery {
                limit: limit + 1,
                ..base.clone()
            })
            .await?;
        let exhausted = rows.len() <= limit as usize;
        base.before = rows.last().map(|r| r.id).or(base.before);
        kept.extend(
            rows.into_iter()
                .map(|r| AttemptOut::of(state, r))
                .filter(|a| q.keeps(a)),
        );
        if exhausted || kept.len() > limit as usize {
            break;
        }
    }
    let list = super::page(kept, limit, |a| a.id.clone(), |a| a);
    Ok(json(StatusCode::OK, &list))
}

/// A message's attempts, newest first.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/attempt/msg/{msg_id}", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("msg_id" = String, Path, description = "The message's id or eventId")),
    responses((status = 200, description = "ListResponse_MessageAttemptOut_")))]
async fn by_message(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, msg_id)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let q: AttemptListQuery = query(raw.as_deref())?;
    let event = message_of(&state, &app, &msg_id).await?;
    let endpoint = q
        .endpoint_id
        .as_deref()
        .map(|key| endpoint_of(&state, &app, key).map(|ep| ep.name.to_string()))
        .transpose()?;
    let base = AttemptQuery {
        tenant: Some(app.tenant.clone()),
        event_id: Some(event.id),
        endpoint,
        ..AttemptQuery::default()
    };
    attempts(&state, base, &q).await
}

/// An endpoint's attempts, newest first.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/attempt/endpoint/{endpoint_id}", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 200, description = "ListResponse_MessageAttemptOut_")))]
async fn by_endpoint(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let q: AttemptListQuery = query(raw.as_deref())?;
    let ep = endpoint_of(&state, &app, &endpoint_id)?;
    let base = AttemptQuery {
        tenant: Some(app.tenant.clone()),
        endpoint: Some(ep.name.to_string()),
        ..AttemptQuery::default()
    };
    attempts(&state, base, &q).await
}

/// One attempt of a message.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("msg_id" = String, Path, description = "The message's id or eventId"),
           ("attempt_id" = String, Path, description = "The attempt's id")),
    responses((status = 200, description = "MessageAttemptOut")))]
async fn get_attempt(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, msg_id, attempt_id)): Path<(String, String, String)>,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let event = message_of(&state, &app, &msg_id).await?;
    let n: i64 = attempt_id
        .strip_prefix("atmpt_")
        .and_then(|n| n.parse().ok())
        .ok_or_else(SvixError::not_found)?;
    let row = state
        .store
        .attempts(AttemptQuery {
            tenant: Some(app.tenant.clone()),
            event_id: Some(event.id),
            before: Some(n.saturating_add(1)),
            limit: 1,
            ..AttemptQuery::default()
        })
        .await?
        .into_iter()
        .find(|r| r.id == n)
        .ok_or_else(SvixError::not_found)?;
    Ok(json(StatusCode::OK, &AttemptOut::of(&state, row)))
}

/// Deliveries of the tenant matching `filter`, one page by delivery id (`iterator`).
async fn deliveries(
    state: &AppState,
    app: &ApplicationRow,
    mut filter: DeliveryFilter,
    raw: Option<&str>,
) -> SvixResult<(Vec<DeliveryRow>, u32)> {
    let paging: Paging = query(raw)?;
    let limit = paging.limit()?;
    filter.tenant = Some(app.tenant.clone());
    filter.limit = limit + 1;
    filter.before = paging
        .iterator
        .as_deref()
        .map(|i| {
            i.parse()
                .map_err(|_| SvixError::invalid(&["query", "iterator"], "not an iterator of this list"))
        })
        .transpose()?;
    Ok((state.store.deliveries(filter).await?, limit))
}

/// `MessageEndpointOut`: an endpoint with the status of one message's delivery to it.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct MessageEndpointOut {
    #[serde(flatten)]
    endpoint: EndpointOut,
    status: u8,
    status_text: &'static str,
    next_attempt: Option<Timestamp>,
}

/// The endpoints a message went to, with its delivery status at each.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg/{msg_id}/endpoint", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("msg_id" = String, Path, description = "The message's id or eventId")),
    responses((status = 200, description = "ListResponse_MessageEndpointOut_")))]
async fn message_endpoints(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, msg_id)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let event = message_of(&state, &app, &msg_id).await?;
    let filter = DeliveryFilter {
        event_id: Some(event.id),
        ..DeliveryFilter::default()
    };
    let (rows, limit) = deliveries(&state, &app, filter, raw.as_deref()).await?;
    let config = state.config.load_full();
    let mut list = super::page(rows, limit, |d| d.id.0.to_string(), |d| d);
    // Deliveries to endpoints deleted since are not shown: Svix lists existing endpoints.
    list.data
        .retain(|d| config.endpoints.contains_key(d.endpoint.as_str()));
    let mut data = Vec::with_capacity(list.data.len());
    for d in list.data {
        let ep = &config.endpoints[d.endpoint.as_str()];
        let (status, status_text) = status_of(d.status);
        data.push(MessageEndpointOut {
            endpoint: EndpointOut::of(&state, ep).await,
            status,
            status_text,
            next_attempt: d.next_attempt_at,
        });
    }
    Ok(json(
        StatusCode::OK,
        &super::ListResponse {
            data,
            iterator: list.iterator,
            prev_iterator: None,
            done: list.done,
        },
    ))
}

/// `EndpointMessageOut`: a message with the status of its delivery to one endpoint.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
struct EndpointMessageOut {
    #[serde(flatten)]
    message: MessageOut,
    status: u8,
    status_text: &'static str,
    next_attempt: Option<Timestamp>,
}

#[derive(Debug, Default, Deserialize)]
struct EndpointMessagesQuery {
    with_content: Option<bool>,
}

/// The messages sent to an endpoint, newest first, with their delivery status there.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/msg", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 200, description = "ListResponse_EndpointMessageOut_")))]
async fn endpoint_messages(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, endpoint_id)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let ep = endpoint_of(&state, &app, &endpoint_id)?;
    let options: EndpointMessagesQuery = query(raw.as_deref())?;
    let filter = DeliveryFilter {
        endpoint: Some(ep.name.to_string()),
        ..DeliveryFilter::default()
    };
    let (rows, limit) = deliveries(&state, &app, filter, raw.as_deref()).await?;
    let list = super::page(rows, limit, |d| d.id.0.to_string(), |d| d);
    let mut data = Vec::with_capacity(list.data.len());
    for d in list.data {
        let Some(event) = state
            .store
            .event(&d.event_id, Some(&d.topic))
            .await?
            .into_iter()
            .next()
        else {
            continue;
        };
        let (status, status_text) = status_of(d.status);
        data.push(EndpointMessageOut {
            message: MessageOut::of(&event, options.with_content.unwrap_or(true)),
            status,
            status_text,
            next_attempt: d.next_attempt_at,
        });
    }
    Ok(json(
        StatusCode::OK,
        &super::ListResponse {
            data,
            iterator: list.iterator,
            prev_iterator: None,
            done: list.done,
        },
    ))
}

/// Send a message to an endpoint again now (hookgate's redeliver: a new round of attempts).
#[utoipa::path(post, path = "/api/v1/app/{app_id}/msg/{msg_id}/endpoint/{endpoint_id}/resend", tag = "svix", request_body = super::SvixJson,
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("msg_id" = String, Path, description = "The message's id or eventId"),
           ("endpoint_id" = String, Path, description = "The endpoint's id or uid")),
    responses((status = 202, description = "EmptyResponse")))]
async fn resend(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, msg_id, endpoint_id)): Path<(String, String, String)>,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    let path = format!("/api/v1/app/{app_id}/msg/{msg_id}/endpoint/{endpoint_id}/resend");
    let run = async {
        let app = application_of(&state, &caller, &app_id).await?;
        let event = message_of(&state, &app, &msg_id).await?;
        let ep = endpoint_of(&state, &app, &endpoint_id)?;
        let delivery = state
            .store
            .deliveries(DeliveryFilter {
                event_id: Some(event.id),
                endpoint: Some(ep.name.to_string()),
                tenant: Some(app.tenant.clone()),
                limit: 1,
                ..DeliveryFilter::default()
            })
            .await?
            .into_iter()
            .next()
            .ok_or_else(SvixError::not_found)?;
        state.recovery.redeliver(delivery.id).await?;
        Ok((StatusCode::ACCEPTED, serde_json::json!({})))
    };
    idempotent(&state, &caller, &headers, &path, &bytes, run).await
}
