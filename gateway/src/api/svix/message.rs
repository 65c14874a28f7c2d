//! `/api/v1/app/{app_id}/msg`: messages are events of the application's tenant on the topic
//! `svix`. A message's id is `msg_…`; with an `eventId` it is derived from the tenant and that
//! id, so a second message with the same `eventId` in the same application is the same event
//! and answers 409, as Svix does, while another application may use the same `eventId`.

use axum::Extension;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use sha2::{Digest, Sha256};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::application::{ApplicationIn, create_application};
use super::{SvixError, SvixResult, application_of, body, json, query, time, valid_svix_name};
use crate::api::AppState;
use crate::api::auth::Caller;
use crate::api::idempotency::Begin;
use crate::config::{EndpointConfig, defaults};
use crate::ingest::{Committed, NewEvent};
use crate::model::{Event, EventLabels, Timestamp};
use crate::store::{ApplicationRow, EventQuery, StoreError};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list, create))
        .routes(routes!(get))
}

/// `MessageIn`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageIn {
    event_type: String,
    event_id: Option<String>,
    payload: Value,
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
                Bytes::from(serde_json::to_vec(&self.payload).expect("JSON serializes")),
                "application/json".to_owned(),
            ),
        }
    }
}

/// `MessageOut`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct MessageOut {
    id: String,
    event_id: Option<String>,
    event_type: String,
    payload: Value,
    channels: Option<Vec<String>>,
    tags: Option<Vec<String>>,
    timestamp: Timestamp,
}

impl MessageOut {
    /// The message of `event`; without `with_content` its payload is `{}`.
    pub(crate) fn of(event: &Event, with_content: bool) -> MessageOut {
        let payload = if with_content {
            serde_json::from_slice(&event.payload)
                .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&event.payload).into_owned()))
        } else {
            Value::Object(Default::default())
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
    params(("app_id" = String, Path, description = "The application's id or uid")),
    responses((status = 202, description = "MessageOut")))]
async fn create(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(app_id): Path<String>,
    RawQuery(raw): RawQuery,
    headers: HeaderMap,
    bytes: Bytes,
) -> Response {
    match create_message(&state, &caller, &app_id, raw.as_deref(), &headers, &bytes).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
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
    let found = application_of(state, caller, app_id).await;
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
    let app = match (found, application) {
        (Ok(app), _) => app,
        (Err(_), Some(application)) => create_application(state, application, Some(app_id)).await?,
        (Err(e), None) => return Err(e),
    };
    state.event_types.check(&event_type, &payload).await?;
    let path = format!("/api/v1/app/{app_id}/msg");
    let claim = match super::begin_idempotent(state, caller, headers, &path, bytes).await? {
        Begin::Replay(response) => return Ok(response),
        Begin::NoKey => None,
        Begin::Fresh(claim) => Some(claim),
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
    let record = claim
        .as_ref()
        .map(|c| c.record(StatusCode::ACCEPTED, body.clone(), prepared.now));
    match state.ingestor.commit(prepared, record).await {
        Ok(Committed::Fresh) => Ok(super::json(StatusCode::ACCEPTED, &answer)),
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
    if !input.payload.is_object() {
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

/// The application's messages, newest first (`iterator`: continue after that one).
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid")),
    responses((status = 200, description = "ListResponse_MessageOut_")))]
async fn list(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(app_id): Path<String>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let q: ListQuery = query(raw.as_deref())?;
    let paging = super::Paging {
        limit: q.limit,
        ..super::Paging::default()
    };
    let limit = paging.limit()?;
    let mut before = q
        .iterator
        .as_deref()
        .map(|i| {
            i.parse::<i64>()
                .map_err(|_| SvixError::invalid(&["query", "iterator"], "not an iterator of this list"))
        })
        .transpose()?;
    let filtered = q.channel.is_some() || q.tag.is_some();
    let base = EventQuery {
        tenant: app.tenant.clone(),
        before: None,
        since: q
            .after
            .as_deref()
            .map(|t| time(&["query", "after"], t))
            .transpose()?,
        until: q
            .before
            .as_deref()
            .map(|t| time(&["query", "before"], t))
            .transpose()?,
        event_types: q
            .event_types
            .as_deref()
            .map(|t| {
                t.split(',')
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default(),
        limit: if filtered { SCAN_PAGE } else { limit + 1 },
    };
    let mut rows: Vec<(i64, Event)> = Vec::new();
    let mut exhausted = false;
    for _ in 0..SCAN_PAGES {
        let page = state
            .store
            .tenant_events(EventQuery {
                before,
                ..base.clone()
            })
            .await?;
        exhausted = page.len() < base.limit as usize;
        before = page.last().map(|(seq, _)| *seq).or(before);
        rows.extend(page.into_iter().filter(|(_, e)| {
            q.channel.as_ref().is_none_or(|c| e.labels.channels.contains(c))
                && q.tag.as_ref().is_none_or(|t| e.labels.tags.contains(t))
        }));
        if exhausted || rows.len() > limit as usize {
            break;
        }
    }
    let with_content = q.with_content.unwrap_or(true);
    let mut list = super::page(
        rows,
        limit,
        |(seq, _)| seq.to_string(),
        |(_, e)| MessageOut::of(&e, with_content),
    );
    // The scan stopped before the end without filling the page: the rest is for the next one.
    if list.done && !exhausted {
        list.done = false;
        list.iterator = before.map(|seq| seq.to_string());
    }
    Ok(json(StatusCode::OK, &list))
}

/// A message by its id or `eventId`.
#[utoipa::path(get, path = "/api/v1/app/{app_id}/msg/{msg_id}", tag = "svix",
    params(("app_id" = String, Path, description = "The application's id or uid"),
           ("msg_id" = String, Path, description = "The message's id or eventId")),
    responses((status = 200, description = "MessageOut")))]
async fn get(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path((app_id, msg_id)): Path<(String, String)>,
    RawQuery(raw): RawQuery,
) -> SvixResult<Response> {
    let app = application_of(&state, &caller, &app_id).await?;
    let options: WithContent = query(raw.as_deref())?;
    let event = message_of(&state, &app, &msg_id).await?;
    Ok(json(
        StatusCode::OK,
        &MessageOut::of(&event, options.with_content.unwrap_or(true)),
    ))
}
