//! Endpoints: their health and history, and the recovery calls (test, re-enable, replay,
//! redrive). SPEC §5, §6.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::events::read_body;
use super::idempotency::{self, Begin};
use super::views::{EndpointList, EndpointView};
use super::{ApiError, AppState};
use crate::config::EndpointConfig;
use crate::model::{Event, Outcome, Timestamp};
use crate::scheduler::attempt::{self, AttemptInput, AttemptResult};
use crate::store::{AnswerFn, IngestOutcome, ReadyDelivery, ReplayWindow};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_endpoints))
        .routes(routes!(get_endpoint))
        .routes(routes!(test_endpoint))
        .routes(routes!(reenable))
        .routes(routes!(replay))
        .routes(routes!(redrive))
}

/// How far back a replay may reach (SPEC §6).
pub(crate) const REPLAY_MAX_AGE: Duration = Duration::from_secs(7 * 86_400);
/// How many events one replay re-sends at most (SPEC §6).
pub(crate) const REPLAY_MAX_EVENTS: u32 = 10_000;
const HISTORY_LIMIT: u32 = 100;

fn endpoint(state: &AppState, name: &str) -> Result<Arc<EndpointConfig>, ApiError> {
    state
        .config
        .load()
        .endpoints
        .get(name)
        .cloned()
        .ok_or_else(|| ApiError::not_found("endpoint_not_found", format!("no endpoint `{name}`")))
}

async fn view(state: &AppState, ep: &EndpointConfig) -> Result<EndpointView, ApiError> {
    let history = state.store.endpoint_history(&ep.name, HISTORY_LIMIT).await?;
    let problems = state
        .status
        .lock()
        .expect("status lock")
        .binding_problems
        .iter()
        .filter(|p| p.endpoint == ep.name)
        .map(ToString::to_string)
        .collect();
    Ok(EndpointView::new(
        ep,
        state.scheduler.health_of(&ep.name),
        history,
        problems,
    ))
}

/// Every configured endpoint with its health.
#[utoipa::path(get, path = "/v1/endpoints", tag = "endpoints",
    responses((status = 200, description = "All endpoints", body = EndpointList)))]
async fn list_endpoints(State(state): State<AppState>) -> Result<Json<EndpointList>, ApiError> {
    let config = state.config.load_full();
    let mut endpoints = Vec::with_capacity(config.endpoints.len());
    for ep in config.endpoints.values() {
        endpoints.push(view(&state, ep).await?);
    }
    Ok(Json(EndpointList {
        endpoints,
        next_cursor: None,
    }))
}

/// One endpoint: state, counters and state history (newest 100 changes).
#[utoipa::path(get, path = "/v1/endpoints/{name}", tag = "endpoints",
    params(("name" = String, Path, description = "The endpoint's name in the config")),
    responses((status = 200, description = "The endpoint", body = EndpointView),
              (status = 404, description = "No such endpoint", body = super::error::ErrorBody)))]
async fn get_endpoint(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    let ep = endpoint(&state, &name)?;
    Ok(Json(view(&state, &ep).await?))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct TestIn {
    /// Default `hookgate.test`.
    #[serde(rename = "type")]
    event_type: Option<String>,
    /// Default `{"test": true, "endpoint": <name>}`.
    #[schema(value_type = Object)]
    payload: Option<Box<serde_json::value::RawValue>>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TestOutcome {
    /// Whether the endpoint answered 2xx in time.
    delivered: bool,
    event_id: String,
    status_code: Option<u16>,
    error_kind: Option<String>,
    error: Option<String>,
    duration_ms: u64,
    /// Plugins that ran, with their time.
    plugins: Option<String>,
    /// Set when a transform plugin dropped the event.
    dropped: Option<String>,
}

/// Sends a test event now and answers with the attempt's outcome — 200 whether or not the
/// endpoint accepted it. Changes no state or counter.
#[utoipa::path(post, path = "/v1/endpoints/{name}/test", tag = "endpoints",
    params(("name" = String, Path, description = "The endpoint's name")),
    request_body(content = Option<TestIn>, description = "Optional type and payload"),
    responses((status = 200, description = "The attempt's outcome", body = TestOutcome),
              (status = 404, description = "No such endpoint", body = super::error::ErrorBody)))]
async fn test_endpoint(
    State(state): State<AppState>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Json<TestOutcome>, ApiError> {
    let ep = endpoint(&state, &name)?;
    let config = state.config.load_full();
    let (parts, body) = request.into_parts();
    let body = read_body(body, &parts.headers, config.server.max_body_bytes).await?;
    let input: TestIn = if body.iter().all(u8::is_ascii_whitespace) {
        TestIn::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request("malformed_body", format!("not a test request: {e}")))?
    };
    let payload = match input.payload {
        Some(raw) => Bytes::copy_from_slice(raw.get().as_bytes()),
        None => Bytes::from(serde_json::json!({"test": true, "endpoint": name}).to_string()),
    };
    let topic = ep.topics.first().cloned().unwrap_or_default();
    let event = Event {
        id: format!("test_{}", ulid::Ulid::new().to_string().to_lowercase()),
        topic: topic.clone(),
        event_type: input.event_type.unwrap_or_else(|| "hookgate.test".into()),
        content_type: "application/json".into(),
        payload,
        ordering_key: None,
        received_at: state.clock.now(),
    };
    let policy = config.policy_for(&ep, &topic);
    let report = attempt::perform(
        &state.attempts,
        AttemptInput {
            endpoint: &ep,
            policy: &policy,
            event: &event,
            delivery_id: "test".into(),
            attempt: 1,
            round_started_at: event.received_at,
            max_attempts: 1,
            timeout: ep.timeout.unwrap_or(config.delivery.timeout),
            previous_delay: None,
        },
    )
    .await;
    let duration_ms = report.duration.as_millis() as u64;
    Ok(Json(match report.result {
        AttemptResult::Sent(outcome) => TestOutcome {
            delivered: outcome.is_success(),
            event_id: event.id,
            status_code: outcome.status_code(),
            error_kind: outcome.error_kind().map(|k| k.as_str().to_owned()),
            error: match outcome {
                Outcome::Failed { detail, .. } => Some(detail),
                Outcome::Delivered { .. } => None,
            },
            duration_ms,
            plugins: report.plugin_note,
            dropped: None,
        },
        AttemptResult::Dropped { reason } => TestOutcome {
            delivered: false,
            event_id: event.id,
            status_code: None,
            error_kind: None,
            error: None,
            duration_ms,
            plugins: report.plugin_note,
            dropped: Some(reason),
        },
    }))
}

#[derive(Debug, Serialize, ToSchema, Clone)]
pub(crate) struct ReplayOutcome {
    endpoint: String,
    #[schema(value_type = String, format = DateTime)]
    since: Timestamp,
    #[schema(value_type = String, format = DateTime)]
    until: Timestamp,
    /// Events queued again for the endpoint.
    queued: usize,
    /// More than 10 000 events matched: only the oldest were queued, up to a millisecond
    /// boundary (so possibly a few fewer than 10 000).
    truncated: bool,
    /// When truncated: pass this as `since` to continue. Every matching event before it was
    /// queued and none from it on, so continuing neither repeats nor skips an event.
    #[schema(value_type = Option<String>, format = DateTime)]
    continue_from: Option<Timestamp>,
    /// The id range of the new deliveries, to follow them (`GET /v1/deliveries/summary`).
    first_delivery: Option<String>,
    last_delivery: Option<String>,
}

fn parse_time(field: &str, text: &str) -> Result<Timestamp, ApiError> {
    Timestamp::parse_rfc3339(text)
        .map_err(|_| ApiError::bad_request("invalid_time", format!("`{field}` must be an RFC 3339 time")))
}

/// The start of a replay window, at most 7 days back (SPEC §6).
fn replay_start(now: Timestamp, field: &str, text: &str) -> Result<Timestamp, ApiError> {
    let since = parse_time(field, text)?;
    if since < now.minus(REPLAY_MAX_AGE) {
        return Err(ApiError::bad_request(
            "replay_window_too_large",
            format!(
                "`{field}` may be at most 7 days back (not before {})",
                now.minus(REPLAY_MAX_AGE)
            ),
        ));
    }
    Ok(since)
}

/// Checks a replay window against SPEC §6's limits.
fn replay_window(
    now: Timestamp,
    since: &str,
    until: Option<&str>,
) -> Result<(Timestamp, Timestamp), ApiError> {
    let since = replay_start(now, "since", since)?;
    // The window is [since, until); by default it ends just after now, so that an event
    // received this very millisecond is included.
    let end_of_now = now.plus(Duration::from_millis(1));
    let until = until
        .map(|u| parse_time("until", u))
        .transpose()?
        .unwrap_or(end_of_now)
        .min(end_of_now);
    if until <= since {
        return Err(ApiError::bad_request(
            "invalid_window",
            "`until` must be after `since`",
        ));
    }
    Ok((since, until))
}

/// The events one replay call queues, oldest first, and where the next call continues if
/// the window holds more than [`REPLAY_MAX_EVENTS`].
///
/// The cursor is a time (SPEC §6), and times have millisecond precision while a batch of
/// events shares one receipt time. So a truncated batch ends at a millisecond boundary: it
/// holds every matching event before `continue_from` and none from it on, and continuing
/// from there neither repeats nor skips an event. That may queue a few fewer than 10 000.
/// Should more than 10 000 events share the window's first millisecond, that millisecond is
/// queued whole: a little over the limit, rather than a cursor that cannot move forward.
async fn replay_batch(
    state: &AppState,
    window: impl Fn(Timestamp, Timestamp) -> ReplayWindow,
    since: Timestamp,
    until: Timestamp,
) -> Result<(Vec<Arc<Event>>, Option<Timestamp>), ApiError> {
    let limit = REPLAY_MAX_EVENTS as usize;
    let mut events = state
        .store
        .events_in_window(window(since, until), REPLAY_MAX_EVENTS + 1)
        .await?;
    if events.len() <= limit {
        return Ok((events, None));
    }
    let first_unsent = events[limit].received_at;
    events.truncate(limit);
    let whole_milliseconds = events.partition_point(|e| e.received_at < first_unsent);
    if whole_milliseconds > 0 {
        events.truncate(whole_milliseconds);
        return Ok((events, Some(first_unsent)));
    }
    let next_millisecond = first_unsent.plus(Duration::from_millis(1));
    let crowded = state
        .store
        .events_in_window(window(first_unsent, next_millisecond), u32::MAX)
        .await?;
    let more = !state
        .store
        .events_in_window(window(next_millisecond, until), 1)
        .await?
        .is_empty();
    Ok((crowded, more.then_some(next_millisecond)))
}

enum Queued {
    Fresh(ReplayOutcome),
    /// The idempotency key's first answer, found at commit time.
    Earlier(Response),
}

/// Queues the endpoint's matching events of the window again (at most 10 000).
async fn queue_replay(
    state: &AppState,
    ep: &EndpointConfig,
    since: Timestamp,
    until: Timestamp,
    claim: Option<idempotency::Claim>,
) -> Result<Queued, ApiError> {
    let matcher = {
        let ep = ep.clone();
        Arc::new(move |e: &Event| ep.matches_type(&e.event_type))
    };
    let window = |since: Timestamp, until: Timestamp| ReplayWindow {
        topics: ep.topics.clone(),
        since,
        until,
        matches: matcher.clone(),
    };
    let (events, continue_from) = replay_batch(state, window, since, until).await?;
    let truncated = continue_from.is_some();
    let endpoint_name = ep.name.to_string();
    // The answer names the new deliveries, so it is made inside the commit that creates them.
    let answer = move |ready: &[ReadyDelivery]| ReplayOutcome {
        endpoint: endpoint_name.clone(),
        since,
        until,
        queued: ready.len(),
        truncated,
        continue_from,
        first_delivery: ready.first().map(|d| d.id.to_string()),
        last_delivery: ready.last().map(|d| d.id.to_string()),
    };
    let now = state.clock.now();
    let idempotency = claim.as_ref().map(|c| {
        let answer = answer.clone();
        let make: AnswerFn = Box::new(move |ready: &[ReadyDelivery]| {
            Bytes::from(serde_json::to_vec(&answer(ready)).expect("serializes"))
        });
        (c.record(StatusCode::ACCEPTED, Bytes::new(), now), make)
    });
    match state
        .store
        .create_deliveries(&ep.name, events, idempotency, now)
        .await?
    {
        IngestOutcome::Committed(ready) => {
            let outcome = answer(&ready);
            state.scheduler.enqueue(ready);
            Ok(Queued::Fresh(outcome))
        }
        IngestOutcome::AlreadyDone(first) => Ok(Queued::Earlier(idempotency::replay(&first))),
    }
}

fn ensure_receiving(state: &AppState, ep: &EndpointConfig) -> Result<(), ApiError> {
    let health = state.scheduler.health_of(&ep.name);
    if health.state.receives_events() {
        Ok(())
    } else {
        Err(ApiError::conflict(
            "endpoint_not_active",
            format!("endpoint `{}` is {}; re-enable it first", ep.name, health.state),
        ))
    }
}

#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReplayIn {
    /// RFC 3339; at most 7 days back.
    since: String,
    /// RFC 3339; default now.
    until: Option<String>,
}

/// Re-sends the endpoint's matching events of a time window. Needs an `Idempotency-Key`: the
/// same key and body answer the same, and nothing is sent twice.
#[utoipa::path(post, path = "/v1/endpoints/{name}/replay", tag = "endpoints",
    params(("name" = String, Path, description = "The endpoint's name"),
           ("Idempotency-Key" = String, Header, description = "Required")),
    request_body = ReplayIn,
    responses((status = 202, description = "Queued", body = ReplayOutcome),
              (status = 400, description = "No Idempotency-Key, or the window is too large", body = super::error::ErrorBody),
              (status = 404, description = "No such endpoint", body = super::error::ErrorBody),
              (status = 409, description = "Endpoint paused/disabled, or the key is in use", body = super::error::ErrorBody),
              (status = 422, description = "The key was used for another request", body = super::error::ErrorBody)))]
async fn replay(
    State(state): State<AppState>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let ep = endpoint(&state, &name)?;
    let caller = request
        .extensions()
        .get::<Caller>()
        .cloned()
        .expect("authenticate sets the caller");
    let (parts, body) = request.into_parts();
    if !parts.headers.contains_key(idempotency::HEADER) {
        return Err(ApiError::bad_request(
            "idempotency_key_required",
            "a replay needs an Idempotency-Key header, so that a retried call sends nothing twice",
        ));
    }
    let body = read_body(body, &parts.headers, 64 * 1024).await?;
    let input: ReplayIn = serde_json::from_slice(&body)
        .map_err(|e| ApiError::bad_request("malformed_body", format!("not a replay request: {e}")))?;
    let hash = idempotency::request_hash("POST", parts.uri.path(), &[&body]);
    let claim = match idempotency::begin(&state, &caller, &parts.headers, hash).await? {
        Begin::Replay(response) => return Ok(response),
        Begin::Fresh(claim) => claim,
        Begin::NoKey => unreachable!("checked above"),
    };
    ensure_receiving(&state, &ep)?;
    let (since, until) = replay_window(state.clock.now(), &input.since, input.until.as_deref())?;
    match queue_replay(&state, &ep, since, until, Some(claim)).await? {
        Queued::Fresh(answer) => Ok((StatusCode::ACCEPTED, Json(answer)).into_response()),
        Queued::Earlier(response) => Ok(response),
    }
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReenableIn {
    /// RFC 3339, at most 7 days back — normally the time of the last good delivery: the
    /// endpoint's matching events since then are sent again (at most 10 000).
    replay_since: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Reenabled {
    endpoint: EndpointView,
    /// Events queued again by `replay_since` (0 without it).
    replayed: usize,
    replay: Option<ReplayOutcome>,
}

/// Makes a paused or disabled endpoint active again, optionally replaying what it missed.
#[utoipa::path(post, path = "/v1/endpoints/{name}/reenable", tag = "endpoints",
    params(("name" = String, Path, description = "The endpoint's name")),
    request_body(content = Option<ReenableIn>, description = "Optional replay_since"),
    responses((status = 200, description = "Active again", body = Reenabled),
              (status = 400, description = "replay_since too far back", body = super::error::ErrorBody),
              (status = 404, description = "No such endpoint", body = super::error::ErrorBody)))]
async fn reenable(
    State(state): State<AppState>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let ep = endpoint(&state, &name)?;
    let (parts, body) = request.into_parts();
    let body = read_body(body, &parts.headers, 64 * 1024).await?;
    let input: ReenableIn = if body.iter().all(u8::is_ascii_whitespace) {
        ReenableIn::default()
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::bad_request("malformed_body", format!("not a re-enable request: {e}")))?
    };
    // Check `replay_since` before changing anything, so a bad request has no effect.
    let now = state.clock.now();
    let replay_since = input
        .replay_since
        .as_deref()
        .map(|text| replay_start(now, "replay_since", text))
        .transpose()?;
    if replay_since.is_some_and(|since| since > now) {
        return Err(ApiError::bad_request(
            "invalid_window",
            "`replay_since` is in the future",
        ));
    }
    state
        .scheduler
        .reenable(ep.name.clone())
        .await
        .ok_or_else(|| ApiError::unavailable("the gateway is shutting down"))?;
    // The window closes only once the endpoint receives events again, and takes in that
    // millisecond whole: an event the paused endpoint missed can share its millisecond with
    // the re-enable. An event of that millisecond that was delivered anyway may then be sent
    // twice (receivers deduplicate by webhook-id) — better than lost.
    let until = state.clock.now().plus(Duration::from_millis(1));
    let replay = match replay_since {
        Some(since) => match queue_replay(&state, &ep, since, until, None).await? {
            Queued::Fresh(answer) => Some(answer),
            Queued::Earlier(_) => None,
        },
        None => None,
    };
    Ok(Json(Reenabled {
        endpoint: view(&state, &ep).await?,
        replayed: replay.as_ref().map_or(0, |r| r.queued),
        replay,
    })
    .into_response())
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Redriven {
    /// Dead deliveries queued again.
    queued: usize,
}

/// Sends the endpoint's dead deliveries again (at most 10 000 per call), each with a fresh
/// attempt counter.
#[utoipa::path(post, path = "/v1/endpoints/{name}/redrive", tag = "endpoints",
    params(("name" = String, Path, description = "The endpoint's name")),
    responses((status = 202, description = "Queued", body = Redriven),
              (status = 404, description = "No such endpoint", body = super::error::ErrorBody),
              (status = 409, description = "Endpoint paused or disabled", body = super::error::ErrorBody)))]
async fn redrive(
    State(state): State<AppState>,
    Path(name): Path<String>,
) -> Result<(StatusCode, Json<Redriven>), ApiError> {
    let ep = endpoint(&state, &name)?;
    ensure_receiving(&state, &ep)?;
    let ready = state
        .store
        .restart_dead(&ep.name, state.clock.now(), REPLAY_MAX_EVENTS)
        .await?;
    let queued = ready.len();
    state.scheduler.enqueue(ready);
    Ok((StatusCode::ACCEPTED, Json(Redriven { queued })))
}
