//! `/api/v1/app/{app_id}/msg`: messages are events of the application's tenant on the topic
//! `svix`. A message's id is `msg_…`; with an `eventId` it is derived from the tenant and that
//! id, so a second message with the same `eventId` in the same application is the same event
//! and answers 409, as Svix does, while another application may use the same `eventId`.

use axum::Extension;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::application::{ApplicationIn, create_application};
use super::extract::{Admin, App, AppPath, Idempotent, Ids, MsgPath};
use super::{
    Cursor, ListResponse, Paging, Scan, SvixError, SvixResult, body, json, message_application_of,
    page_by_id, query, time, valid_svix_name,
};
use crate::api::AppState;
use crate::api::auth::Caller;
use crate::config::{EndpointConfig, defaults};
use crate::ingest::{Committed, NewEvent};
use crate::model::DeliveryStatus;
use crate::model::{Event, EventLabels, Timestamp};
use crate::store::{ApplicationRow, DeliveryFilter, EventQuery, StoreError};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(get))
        .routes(routes!(expunge_content))
}

/// `MessageIn`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageIn {
    event_type: String,
    event_id: Option<String>,
    /// Kept as it came: it is sent as it came, and only its first byte is looked at.
    payload: Box<RawValue>,
    #[serde(default)]
    channels: Option<Vec<String>>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    /// Creates the application (named by the path's `app_id` as its uid) when there is none.
    application: Option<ApplicationIn>,
    deliver_at: Option<String>,
    /// Accepted and not applied: retention decides how long payloads are kept.
    #[serde(rename = "payloadRetentionPeriod")]
    _payload_retention_period: Option<u64>,
    #[serde(rename = "payloadRetentionHours")]
    _payload_retention_hours: Option<u64>,
    /// `rawPayload` (and `headers.content-type`): a payload sent byte for byte, as the SDKs'
    /// `message_in_raw` asks; other transformation parameters are not applied.
    transformations_params: Option<Value>,
}

impl MessageIn {
    /// The bytes to deliver and their content type: the raw payload when one was given, else
    /// the JSON payload.
    fn body(&self) -> (Bytes, String) {
        let params = self.transformations_params.as_ref();
        match params.and_then(|p| p["rawPayload"].as_str()) {
            Some(raw) => {
                let content_type = params
                    .and_then(|p| p["headers"]["content-type"].as_str())
                    .unwrap_or("application/json");
                (Bytes::copy_from_slice(raw.as_bytes()), content_type.to_owned())
            }
            None => (
                Bytes::copy_from_slice(self.payload.get().as_bytes()),
                "application/json".to_owned(),
            ),
        }
    }
}

/// `MessageOut`.
#[derive(Debug, Serialize, ToSchema)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MessageOut {
    id: String,
    event_id: Option<String>,
    event_type: String,
    /// The stored payload as it is, not parsed into a tree and written out again.
    #[schema(value_type = Object)]
    payload: Box<RawValue>,
    channels: Option<Vec<String>>,
    tags: Option<Vec<String>>,
    #[schema(value_type = String, format = DateTime)]
    timestamp: Timestamp,
}

impl MessageOut {
    /// The message of `event`; without `with_content` its payload is `{}`, and an expunged
    /// one's is `{"expired": true}`, as Svix shows a message whose content is gone.
    pub(crate) fn of(event: &Event, with_content: bool) -> MessageOut {
        let payload = if with_content && event.labels.expunged {
            raw_json(r#"{"expired":true}"#)
        } else if with_content {
            payload_json(&event.payload)
        } else {
            raw_json("{}")
        };
        let list = |l: &Vec<String>| (!l.is_empty()).then(|| l.clone());
        MessageOut {
            id: event.id.clone(),
            event_id: event.labels.event_id.clone(),
            event_type: event.event_type.clone(),
            payload,
            channels: list(&event.labels.channels),
            tags: list(&event.labels.tags),
            timestamp: event.received_at,
        }
    }
}

/// A JSON text known to be valid.
fn raw_json(text: &str) -> Box<RawValue> {
    RawValue::from_string(text.to_owned()).expect("a valid JSON text")
}

/// A stored payload as JSON: itself when it is JSON (checked, not parsed into a tree), else
/// its text as a JSON string (a raw payload of another content type).
fn payload_json(payload: &[u8]) -> Box<RawValue> {
    std::str::from_utf8(payload)
        .ok()
        .and_then(|text| RawValue::from_string(text.to_owned()).ok())
        .unwrap_or_else(|| {
            serde_json::value::to_raw_value(&String::from_utf8_lossy(payload)).expect("a string serializes")
        })
}

/// The id of the message `event_id` of `tenant`: the same for the same pair, and a ULID's
/// form so that it looks like every other id.
pub(crate) fn message_id(tenant: &str, event_id: &str) -> String {
    let digest = Sha256::new()
        .chain_update(tenant.as_bytes())
        .chain_update([0])
        .chain_update(event_id.as_bytes())
        .finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    format!(
        "msg_{}",
        ulid::Ulid(u128::from_be_bytes(first)).to_string().to_lowercase()
    )
}

/// The message `key` (its id or `eventId`) of `app`, or 404.
pub(crate) async fn message_of(state: &AppState, app: &ApplicationRow, key: &str) -> SvixResult<Event> {
    let ours = |events: Vec<Event>| {
        events
            .into_iter()
            .find(|e| e.tenant.as_deref() == Some(app.tenant.as_str()))
    };
    if let Some(event) = ours(state.store.event(key, None).await?) {
        return Ok(event);
    }
    ours(state.store.event(&message_id(&app.tenant, key), None).await?).ok_or_else(SvixError::not_found)
}

#[derive(Debug, Default, Deserialize)]
struct WithContent {
    with_content: Option<bool>,
}

/// Send a message to the application's endpoints.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/msg", tag = "svix", request_body = super::SvixJson,
    params(AppPath),
    responses((status = 202, description = "Accepted", body = MessageOut)))]
async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Ids(AppPath { app_id }): Ids<AppPath>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    body: axum::body::Body,
) -> SvixResult<Response> {
    // Read to its end even when it is too large, so that the client sees the 413.
    let limit = state.config.load().server.max_body_bytes;
    let bytes = crate::api::events::read_body(body, &headers, limit).await?;
    create_message(&state, &caller, &app_id, raw.as_deref(), &headers, &bytes).await
}

async fn create_message(
    state: &AppState,
    caller: &Caller,
    app_id: &str,
    raw_query: Option<&str>,
    headers: &HeaderMap,
    bytes: &[u8],
) -> SvixResult<Response> {
    // Another tenant's application (or none) answers 404 before the body is looked at.
    let found = message_application_of(state, caller, app_id).await;
    if caller.tenant.is_some() {
        found.as_ref().map_err(|_| SvixError::not_found())?;
    }
    let options: WithContent = query(raw_query)?;
    let input: MessageIn = body(bytes)?;
    let labels = labels(&input)?;
    let (payload, content_type) = input.body();
    let MessageIn {
        event_type,
        application,
        ..
    } = input;
    // The path names the application; `application` only says how to make it when missing.
    let app = match (found, application) {
        (Ok(app), _) => app,
        (Err(_), Some(application)) => create_application(state, application, Some(app_id)).await?,
        (Err(e), None) => return Err(e),
    };
    state.event_types.check(&event_type, &payload).await?;
    let path = format!("/api/v1/app/{app_id}/msg");
    let idem = match Idempotent::begin(state, caller, headers, &path).await {
        Ok(idem) => idem,
        Err(answer) => return Ok(answer),
    };
    let event = NewEvent {
        id: Some(match &labels.event_id {
            Some(event_id) => message_id(&app.tenant, event_id),
            None => super::new_id("msg"),
        }),
        topic: defaults::SVIX_TOPIC.to_owned(),
        event_type,
        content_type,
        payload,
        ordering_key: None,
        tenant: Some(app.tenant.clone()),
        labels,
    };
    let prepared = state.ingestor.prepare(vec![event], None);
    let answer = MessageOut::of(&prepared.items[0].event, options.with_content.unwrap_or(true));
    let body = Bytes::from(serde_json::to_vec(&answer).expect("answers serialize"));
    let record = idem
        .claim()
        .map(|c| c.record(StatusCode::ACCEPTED, body.clone(), prepared.now));
    match state.ingestor.commit(prepared, record).await {
        Ok(Committed::Fresh) => Ok(super::json_bytes(StatusCode::ACCEPTED, body)),
        Ok(Committed::Earlier(first)) => Ok(crate::api::idempotency::replay(&first)),
        Err(StoreError::DuplicateEvent { .. }) => {
            Err(SvixError::conflict("A message with this eventId already exists"))
        }
        Err(e) => Err(e.into()),
    }
}

/// A message's channels, tags and `eventId`, checked as Svix checks them.
fn labels(input: &MessageIn) -> SvixResult<EventLabels> {
    valid_svix_name(&["body", "eventType"], &input.event_type)?;
    if let Some(event_id) = &input.event_id {
        valid_svix_name(&["body", "eventId"], event_id)?;
    }
    if !input.payload.get().starts_with('{') {
        return Err(SvixError::invalid(&["body", "payload"], "must be a JSON object"));
    }
    if input.deliver_at.is_some() {
        return Err(SvixError::invalid(
            &["body", "deliverAt"],
            "scheduled messages are not offered by hookgate; send the message when it is due",
        ));
    }
    let channels = input.channels.clone().unwrap_or_default();
    crate::api::events::valid_channels(&channels)
        .map_err(|e| SvixError::invalid(&["body", "channels"], e.message))?;
    let tags = input.tags.clone().unwrap_or_default();
    if tags.len() > 5 {
        return Err(SvixError::invalid(&["body", "tags"], "at most 5 tags"));
    }
    for (i, tag) in tags.iter().enumerate() {
        valid_svix_name(&["body", "tags", &i.to_string()], tag)?;
    }
    Ok(EventLabels {
        channels,
        tags,
        event_id: input.event_id.clone(),
        expunged: false,
    })
}

/// Sends a message of `event_type` to `endpoint` alone (send-example), whatever its filters.
pub(crate) async fn send_to(
    state: &AppState,
    app: &ApplicationRow,
    endpoint: &EndpointConfig,
    event_type: &str,
    payload: Value,
) -> SvixResult<MessageOut> {
    let payload = Bytes::from(serde_json::to_vec(&payload).expect("JSON serializes"));
    let event = NewEvent {
        id: Some(super::new_id("msg")),
        topic: defaults::SVIX_TOPIC.to_owned(),
        event_type: event_type.to_owned(),
        content_type: "application/json".into(),
        payload,
        ordering_key: None,
        tenant: Some(app.tenant.clone()),
        labels: EventLabels::default(),
    };
    let mut prepared = state.ingestor.prepare(vec![event], None);
    prepared.items[0].endpoints = vec![endpoint.target()];
    let answer = MessageOut::of(&prepared.items[0].event, true);
    state.ingestor.commit(prepared, None).await?;
    Ok(answer)
}

#[derive(Debug, Default, Deserialize)]
struct ListQuery {
    limit: Option<u32>,
    iterator: Option<String>,
    channel: Option<String>,
    tag: Option<String>,
    before: Option<String>,
    after: Option<String>,
    with_content: Option<bool>,
    /// Comma-separated, as the SDKs send a list.
    event_types: Option<String>,
}

/// Rows read per store page while filtering by channel or tag.
const SCAN_PAGE: u32 = 250;
/// Store pages read at most for one filtered page, so that a rare channel cannot make one
/// request scan a tenant's whole history.
const SCAN_PAGES: usize = 40;

impl ListQuery {
    /// The store's query of the application's messages that pass the filters the store applies
    /// (time and event types), `rows` at a time.
    fn events(&self, tenant: &str, rows: u32) -> SvixResult<EventQuery> {
        let read_time = |name: &str, text: &Option<String>| {
            text.as_deref().map(|t| time(&["query", name], t)).transpose()
        };
        let types = self.event_types.as_deref().unwrap_or_default().split(',');
        Ok(EventQuery {
            tenant: tenant.to_owned(),
            since: read_time("after", &self.after)?,
            until: read_time("before", &self.before)?,
            event_types: types.filter(|s| !s.is_empty()).map(str::to_owned).collect(),
            limit: rows,
            ..EventQuery::default()
        })
    }

    /// Whether a message passes the filters applied in memory (channel and tag).
    fn keeps(&self, event: &Event) -> bool {
        self.channel
            .as_ref()
            .is_none_or(|c| event.labels.channels.contains(c))
            && self.tag.as_ref().is_none_or(|t| event.labels.tags.contains(t))
    }
}

/// The application's messages, newest first (`iterator`: continue after that one;
/// `prevIterator`: the page before, as Svix pages back).
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg", tag = "svix",
    params(AppPath),
    responses((status = 200, description = "The messages", body = ListResponse<MessageOut>)))]
async fn list(State(state): State<AppState>, App(app): App, RawQuery(raw): RawQuery) -> SvixResult<Response> {
    let q: ListQuery = query(raw.as_deref())?;
    let limit = Paging {
        limit: q.limit,
        ..Paging::default()
    }
    .limit()?;
    let cursor = Cursor::of(q.iterator.as_deref(), |i| i.parse::<i64>().is_ok())?;
    let filtered = q.channel.is_some() || q.tag.is_some();
    let base = q.events(&app.tenant, if filtered { SCAN_PAGE } else { limit + 1 })?;
    let mut scan = Scan::of(&cursor, |i| i.parse().ok());
    let mut rows: Vec<(i64, Event)> = Vec::new();
    let mut exhausted = false;
    for _ in 0..SCAN_PAGES {
        let query = EventQuery {
            before: scan.before,
            after: scan.after,
            ..base.clone()
        };
        let page = state.store.tenant_events(query).await?;
        exhausted = page.len() < base.limit as usize;
        scan.past(page.last().map(|(seq, _)| *seq));
        rows.extend(page.into_iter().filter(|(_, e)| q.keeps(e)));
        if exhausted || rows.len() > limit as usize {
            break;
        }
    }
    let with_content = q.with_content.unwrap_or(true);
    let view = |(_, e): (i64, Event)| MessageOut::of(&e, with_content);
    let mut list = page_by_id(rows, limit, &cursor, |(seq, _)| seq.to_string(), view);
    // The scan stopped before the end without filling the page: the rest is for the next one.
    if list.done && !exhausted {
        scan.resume(&mut list, |seq| seq.to_string());
    }
    Ok(json(StatusCode::OK, &list))
}

/// A message by its id or `eventId`.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg/{msg_id}", tag = "svix",
    params(AppPath, MsgPath),
    responses((status = 200, description = "The message", body = MessageOut)))]
async fn get(
    State(state): State<AppState>,
    App(app): App,
    Ids(MsgPath { msg_id }): Ids<MsgPath>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let options: WithContent = query(raw.as_deref())?;
    let event = message_of(&state, &app, &msg_id).await?;
    Ok(json(
        StatusCode::OK,
        &MessageOut::of(&event, options.with_content.unwrap_or(true)),
    ))
}

/// Remove a message's payload (Svix's `expunge_content`, for a message sent with what it
/// should not have held): the message stays, its payload shows as `{"expired": true}`, and it
/// can no longer be resent, replayed or recovered. While a delivery of it waits for an attempt
/// the answer is 409: that attempt would still send the payload.
#[utoipa::path(delete, path = "/api/v1/app/{app_id}/msg/{msg_id}/content", tag = "svix",
    params(AppPath, MsgPath), responses((status = 204, description = "Expunged")))]
async fn expunge_content(
    State(state): State<AppState>,
    _: Admin,
    App(app): App,
    Ids(MsgPath { msg_id }): Ids<MsgPath>,
) -> SvixResult<StatusCode> {
    let event = message_of(&state, &app, &msg_id).await?;
    for status in [DeliveryStatus::Pending, DeliveryStatus::Delivering] {
        let waiting = DeliveryFilter {
            event_id: Some(event.id.clone()),
            tenant: Some(app.tenant.clone()),
            status: Some(status),
            limit: 1,
            ..DeliveryFilter::default()
        };
        if !state.store.deliveries(waiting).await?.is_empty() {
            return Err(SvixError::conflict(
                "the message is still being delivered; expunge its content once its deliveries end",
            ));
        }
    }
    let mut labels = event.labels.clone();
    labels.expunged = true;
    state
        .store
        .expunge_payload(&event.topic, &event.id, &labels)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}
