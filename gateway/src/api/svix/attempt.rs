//! Message attempts and per-endpoint delivery status: hookgate's attempts and deliveries of an
//! application's tenant. An attempt is `atmpt_<n>`; its `triggerType` is `scheduled` in a
//! delivery's first round and `manual` in a later one (a resend, recover or replay).

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::Response;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::endpoint::{EndpointOut, endpoint_of};
use super::extract::{App, AppEndpoint, AppPath, EndpointPath, Idempotent, Ids, MsgPath};
use super::message::{MessageOut, message_of};
use super::{
    Cursor, EmptyResponse, ListResponse, Paging, Scan, SvixError, SvixResult, json, page_by_id, query,
};
use crate::api::AppState;
use crate::model::{DeliveryId, DeliveryStatus, Event, Timestamp};
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

/// Svix's message status: 0 success, 1 pending (not tried yet), 2 fail, 3 sending (being
/// tried, or waiting for its next attempt after a failed one, as Svix shows a retry).
fn status_of(delivery: &DeliveryRow) -> (u8, &'static str) {
    match delivery.status {
        DeliveryStatus::Succeeded => (0, "success"),
        DeliveryStatus::Pending if delivery.attempt_count == 0 => (1, "pending"),
        DeliveryStatus::Pending | DeliveryStatus::Delivering => (3, "sending"),
        DeliveryStatus::Failed | DeliveryStatus::Dead => (2, "fail"),
    }
}

/// The filters Svix's per-endpoint lists take beside paging: `status`, `channel`,
/// `event_types` (comma-separated, as the SDKs send a list), `before` and `after`.
#[derive(Debug, Default, Deserialize)]
struct MessageFilters {
    status: Option<u8>,
    channel: Option<String>,
    event_types: Option<String>,
    before: Option<String>,
    after: Option<String>,
}

impl MessageFilters {
    /// `[after, before)` as times, or a 422 naming the one that is not RFC 3339.
    fn window(&self) -> SvixResult<(Option<Timestamp>, Option<Timestamp>)> {
        let read = |name: &str, text: &Option<String>| {
            text.as_deref()
                .map(|t| super::time(&["query", name], t))
                .transpose()
        };
        Ok((read("after", &self.after)?, read("before", &self.before)?))
    }

    /// Whether a message of `event` passes the channel and event type filters.
    fn keeps_event(&self, event: &Event) -> bool {
        self.channel
            .as_ref()
            .is_none_or(|c| event.labels.channels.contains(c))
            && self.event_types.as_deref().is_none_or(|types| {
                types
                    .split(',')
                    .filter(|t| !t.is_empty())
                    .any(|t| t == event.event_type)
            })
    }

    /// Whether any filter needs the message itself.
    fn reads_events(&self) -> bool {
        self.channel.is_some() || self.event_types.is_some()
    }
}

/// The path's attempt.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
struct AttemptPath {
    /// The attempt's id.
    attempt_id: String,
}

/// `MessageAttemptOut`.
#[derive(Debug, Serialize, ToSchema)]
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
    #[schema(value_type = String, format = DateTime)]
    timestamp: Timestamp,
    #[serde(skip_serializing_if = "Option::is_none")]
    msg: Option<MessageOut>,
}

impl AttemptOut {
    async fn of(state: &AppState, row: AttemptListRow) -> AttemptOut {
        let url = match state.endpoints.get(&row.endpoint).await {
            Ok(Some(ep)) => ep.destination.masked(),
            _ => String::new(),
        };
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
    status_code_class: Option<u16>,
    endpoint_id: Option<String>,
    status: Option<u8>,
}

impl AttemptListQuery {
    fn keeps(&self, out: &AttemptOut, window: (Option<Timestamp>, Option<Timestamp>)) -> bool {
        self.status.is_none_or(|s| s == out.status)
            && self.status_code_class.is_none_or(|class| match class {
                0 => out.response_status_code == 0,
                class => out.response_status_code / 100 * 100 == class,
            })
            && window.0.is_none_or(|after| out.timestamp >= after)
            && window.1.is_none_or(|before| out.timestamp < before)
    }
}

/// Attempts, newest first, filtered in memory by status and status class (`iterator`: the
/// last attempt's id).
async fn attempts(state: &AppState, base: AttemptQuery, raw: Option<&str>) -> SvixResult<Response> {
    let q: AttemptListQuery = query(raw)?;
    // The same query read again for the filters every per-endpoint list takes.
    let filters: MessageFilters = query(raw)?;
    let limit = Paging {
        limit: q.limit,
        ..Paging::default()
    }
    .limit()?;
    let cursor = Cursor::of(q.iterator.as_deref(), |i| attempt_number(i).is_some())?;
    let mut scan = Scan::of(&cursor, attempt_number);
    let window = filters.window()?;
    let mut kept = Vec::new();
    loop {
        let page = AttemptQuery {
            before: scan.before,
            after: scan.after,
            limit: limit + 1,
            ..base.clone()
        };
        let rows = state.store.attempts(page).await?;
        let exhausted = rows.len() <= limit as usize;
        scan.past(rows.last().map(|r| r.id));
        for row in rows {
            if filters.reads_events() && !message_passes(state, &row.event_id, &filters).await? {
                continue;
            }
            let attempt = AttemptOut::of(state, row).await;
            if q.keeps(&attempt, window) {
                kept.push(attempt);
            }
        }
        if exhausted || kept.len() > limit as usize {
            break;
        }
    }
    let list = page_by_id(kept, limit, &cursor, |a| a.id.clone(), |a| a);
    Ok(json(StatusCode::OK, &list))
}

/// The number of an attempt's id (`atmpt_<n>`; the bare number is read too).
fn attempt_number(id: &str) -> Option<i64> {
    id.strip_prefix("atmpt_").unwrap_or(id).parse().ok()
}

/// Whether the message `event_id` passes `filters`' channel and event type (a message gone
/// with retention passes none).
async fn message_passes(state: &AppState, event_id: &str, filters: &MessageFilters) -> SvixResult<bool> {
    let events = state
        .store
        .event(event_id, Some(crate::config::defaults::SVIX_TOPIC))
        .await?;
    Ok(events.first().is_some_and(|e| filters.keeps_event(e)))
}

/// A message's attempts, newest first.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/attempt/msg/{msg_id}", tag = "svix",
    params(AppPath, MsgPath),
    responses((status = 200, description = "The attempts", body = ListResponse<AttemptOut>)))]
async fn by_message(
    State(state): State<AppState>,
    App(app): App,
    Ids(MsgPath { msg_id }): Ids<MsgPath>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let q: AttemptListQuery = query(raw.as_deref())?;
    let event = message_of(&state, &app, &msg_id).await?;
    let endpoint = match q.endpoint_id.as_deref() {
        Some(key) => Some(endpoint_of(&state, &app, key).await?.name.to_string()),
        None => None,
    };
    let base = AttemptQuery {
        tenant: Some(app.tenant.clone()),
        event_id: Some(event.id),
        endpoint,
        ..AttemptQuery::default()
    };
    attempts(&state, base, raw.as_deref()).await
}

/// An endpoint's attempts, newest first.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/attempt/endpoint/{endpoint_id}", tag = "svix",
    params(AppPath, EndpointPath),
    responses((status = 200, description = "The attempts", body = ListResponse<AttemptOut>)))]
async fn by_endpoint(
    State(state): State<AppState>,
    AppEndpoint { app, ep }: AppEndpoint,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let base = AttemptQuery {
        tenant: Some(app.tenant.clone()),
        endpoint: Some(ep.name.to_string()),
        ..AttemptQuery::default()
    };
    attempts(&state, base, raw.as_deref()).await
}

/// One attempt of a message.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg/{msg_id}/attempt/{attempt_id}", tag = "svix",
    params(AppPath, MsgPath, AttemptPath),
    responses((status = 200, description = "The attempt", body = AttemptOut)))]
async fn get_attempt(
    State(state): State<AppState>,
    App(app): App,
    Ids(MsgPath { msg_id }): Ids<MsgPath>,
    Ids(AttemptPath { attempt_id }): Ids<AttemptPath>,
) -> SvixResult<Response> {
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
    Ok(json(StatusCode::OK, &AttemptOut::of(&state, row).await))
}

/// Rows read per store page while filtering a list in memory.
const SCAN_PAGE: u32 = 250;
/// Store pages read at most for one filtered page, so that a rare filter cannot make one
/// request scan an endpoint's whole history.
const SCAN_PAGES: usize = 40;

/// Every delivery of one message, oldest first: a message goes to each endpoint once, so
/// they are few, and Svix lists them in the order they were made.
async fn deliveries_of_message(
    state: &AppState,
    app: &ApplicationRow,
    event_id: &str,
) -> SvixResult<Vec<DeliveryRow>> {
    let mut all = Vec::new();
    let mut before = None;
    loop {
        let rows = state
            .store
            .deliveries(DeliveryFilter {
                event_id: Some(event_id.to_owned()),
                tenant: Some(app.tenant.clone()),
                before,
                limit: SCAN_PAGE,
                ..DeliveryFilter::default()
            })
            .await?;
        let exhausted = rows.len() < SCAN_PAGE as usize;
        before = rows.last().map(|d| d.id);
        all.extend(rows);
        if exhausted {
            break;
        }
    }
    all.reverse();
    Ok(all)
}

/// `MessageEndpointOut`: an endpoint with the status of one message's delivery to it.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct MessageEndpointOut {
    #[serde(flatten)]
    endpoint: EndpointOut,
    status: u8,
    status_text: &'static str,
    #[schema(value_type = Option<String>, format = DateTime)]
    next_attempt: Option<Timestamp>,
}

/// The endpoints a message went to, with its delivery status at each.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg/{msg_id}/endpoint", tag = "svix",
    params(AppPath, MsgPath),
    responses((status = 200, description = "The endpoints", body = ListResponse<MessageEndpointOut>)))]
async fn message_endpoints(
    State(state): State<AppState>,
    App(app): App,
    Ids(MsgPath { msg_id }): Ids<MsgPath>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let event = message_of(&state, &app, &msg_id).await?;
    let paging: Paging = query(raw.as_deref())?;
    let limit = paging.limit()?;
    let cursor = Cursor::of(paging.iterator.as_deref(), |i| i.parse::<i64>().is_ok())?;
    let mut rows = deliveries_of_message(&state, &app, &event.id).await?;
    // Oldest first; a page back reads the nearest first, as `page_by_id` takes it.
    let at = cursor.id().and_then(|i| i.parse().ok()).map(DeliveryId);
    match &cursor {
        Cursor::Start => {}
        Cursor::After(_) => rows.retain(|d| at.is_none_or(|at| d.id > at)),
        Cursor::Before(_) => {
            rows.retain(|d| at.is_none_or(|at| d.id < at));
            rows.reverse();
        }
    }
    rows.truncate(limit as usize + 1);
    let list = page_by_id(rows, limit, &cursor, |d| d.id.0.to_string(), |d| d);
    let mut data = Vec::with_capacity(list.data.len());
    for d in list.data {
        // Deliveries to endpoints deleted since are not shown: Svix lists existing endpoints.
        let Some(ep) = state.endpoints.get(&d.endpoint).await? else {
            continue;
        };
        let ep = &ep;
        let (status, status_text) = status_of(&d);
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
            prev_iterator: list.prev_iterator,
            done: list.done,
        },
    ))
}

/// `EndpointMessageOut`: a message with the status of its delivery to one endpoint.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
struct EndpointMessageOut {
    #[serde(flatten)]
    message: MessageOut,
    status: u8,
    status_text: &'static str,
    #[schema(value_type = Option<String>, format = DateTime)]
    next_attempt: Option<Timestamp>,
}

#[derive(Debug, Default, Deserialize)]
struct EndpointMessagesQuery {
    with_content: Option<bool>,
}

/// The messages sent to an endpoint, newest first, with their delivery status there; Svix's
/// filters (`status`, `channel`, `event_types`, `before`, `after`) apply.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/msg", tag = "svix",
    params(AppPath, EndpointPath),
    responses((status = 200, description = "The messages", body = ListResponse<EndpointMessageOut>)))]
async fn endpoint_messages(
    State(state): State<AppState>,
    AppEndpoint { app, ep }: AppEndpoint,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let options: EndpointMessagesQuery = query(raw.as_deref())?;
    let filters: MessageFilters = query(raw.as_deref())?;
    let paging: Paging = query(raw.as_deref())?;
    let limit = paging.limit()?;
    let (since, until) = filters.window()?;
    let cursor = Cursor::of(paging.iterator.as_deref(), |i| i.parse::<i64>().is_ok())?;
    let base = DeliveryFilter {
        endpoint: Some(ep.name.to_string()),
        tenant: Some(app.tenant.clone()),
        since,
        until,
        limit: SCAN_PAGE,
        ..DeliveryFilter::default()
    };
    let mut scan = Scan::of(&cursor, |i| i.parse().ok());
    let (rows, exhausted) = filtered_deliveries(&state, base, &mut scan, &filters, limit).await?;
    let with_content = options.with_content.unwrap_or(true);
    let view = |(d, event): (DeliveryRow, Event)| {
        let (status, status_text) = status_of(&d);
        EndpointMessageOut {
            message: MessageOut::of(&event, with_content),
            status,
            status_text,
            next_attempt: d.next_attempt_at,
        }
    };
    let mut list = page_by_id(rows, limit, &cursor, |(d, _)| d.id.0.to_string(), view);
    // The scan stopped before the end without filling the page: the rest is for the next one.
    if list.done && !exhausted {
        scan.resume(&mut list, |id| id.to_string());
    }
    Ok(json(StatusCode::OK, &list))
}

/// The deliveries of `base` whose status and message pass `filters`, with their messages, in
/// the order `scan` reads: up to `limit + 1`, a store page at a time for at most
/// [`SCAN_PAGES`] pages; and whether the deliveries ran out (else `scan` is where it stopped).
async fn filtered_deliveries(
    state: &AppState,
    base: DeliveryFilter,
    scan: &mut Scan,
    filters: &MessageFilters,
    limit: u32,
) -> SvixResult<(Vec<(DeliveryRow, Event)>, bool)> {
    let mut kept = Vec::new();
    for _ in 0..SCAN_PAGES {
        let page = DeliveryFilter {
            before: scan.before.map(DeliveryId),
            after: scan.after.map(DeliveryId),
            ..base.clone()
        };
        let rows = state.store.deliveries(page).await?;
        let exhausted = rows.len() < SCAN_PAGE as usize;
        scan.past(rows.last().map(|d| d.id.0));
        for d in rows {
            if filters.status.is_some_and(|s| s != status_of(&d).0) {
                continue;
            }
            let Some(event) = state
                .store
                .event(&d.event_id, Some(&d.topic))
                .await?
                .into_iter()
                .next()
            else {
                continue;
            };
            if filters.keeps_event(&event) {
                kept.push((d, event));
            }
        }
        if exhausted {
            return Ok((kept, true));
        }
        if kept.len() > limit as usize {
            break;
        }
    }
    Ok((kept, false))
}

/// Send a message to an endpoint again now (hookgate's redeliver: a new round of attempts).
#[utoipa::path(post, path = "/api/v1/app/{app_id}/msg/{msg_id}/endpoint/{endpoint_id}/resend", tag = "svix",
    params(AppPath, MsgPath, EndpointPath),
    responses((status = 202, description = "Resending", body = EmptyResponse)))]
async fn resend(
    State(state): State<AppState>,
    idem: Idempotent,
    AppEndpoint { app, ep }: AppEndpoint,
    Ids(MsgPath { msg_id }): Ids<MsgPath>,
) -> SvixResult<Response> {
    let event = message_of(&state, &app, &msg_id).await?;
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
    Ok(idem.answer(StatusCode::ACCEPTED, &EmptyResponse {}).await)
}
