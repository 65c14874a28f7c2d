//! Endpoints: their health and history, and the recovery calls (test, re-enable, replay,
//! redrive); README "Endpoint health" and "Recovering missed events".

use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use std::ops::Bound;
use std::sync::Arc;

use axum::Extension;
use utoipa::IntoParams;

use super::auth::Caller;
use super::error::{DeclaredInFile, ErrorBody, NameTaken, NoSuchEndpoint};
use super::events::read_body;
use super::extract::{BodyBytes, Path, Query};
use super::idempotency::{self, Begin};
use super::views::{
    EndpointList, EndpointView, Redriven, Reenabled, ReplayOutcome, SavedEndpoint, TestOutcome,
};
use super::{ApiError, AppState};
use crate::attempt::{self, AttemptInput, AttemptResult};
use crate::config::EndpointConfig;
use crate::endpoint_admin::Saved;
use crate::model::{EndpointState, Event, Outcome, Timestamp};
use crate::recovery::{Replay, ReplayAnswer, Replayed};
use crate::store::EndpointPage;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_endpoints, create_endpoint))
        .routes(routes!(get_endpoint, update_endpoint, delete_endpoint))
        .routes(routes!(rotate_secret))
        .routes(routes!(replay_preview))
        .routes(routes!(test_endpoint))
        .routes(routes!(reenable))
        .routes(routes!(replay))
        .routes(routes!(redrive))
}

const HISTORY_LIMIT: u32 = 100;

async fn view(state: &AppState, ep: &EndpointConfig) -> Result<EndpointView, ApiError> {
    let history = state.store.endpoint_history(&ep.name, HISTORY_LIMIT).await?;
    let health = state.health_of(&ep.name).await;
    Ok(view_with(state, ep, health, Some(history)))
}

/// The view of an endpoint with its health, and its history when a page of a list does not
/// leave it out.
fn view_with(
    state: &AppState,
    ep: &EndpointConfig,
    health: crate::health::EndpointHealth,
    history: Option<Vec<crate::store::HistoryEntry>>,
) -> EndpointView {
    let problems = state
        .status
        .lock()
        .expect("status lock")
        .binding_problems
        .iter()
        .filter(|p| p.endpoint == ep.name)
        .map(ToString::to_string)
        .collect();
    let topic_policies = {
        let config = state.config.load();
        ep.topics
            .iter()
            .map(|topic| (topic.clone(), config.policy_for(ep, topic).name().to_owned()))
            .collect()
    };
    EndpointView::new(ep, topic_policies, health, history, problems, state.clock.now())
}

/// The endpoint of that name, if the caller may see it (a tenant sees only its own; anything
/// else is 404, as if it did not exist).
pub(super) async fn visible(
    state: &AppState,
    caller: &Caller,
    name: &str,
) -> Result<Arc<EndpointConfig>, ApiError> {
    let not_found = || ApiError::not_found("endpoint_not_found", format!("no endpoint `{name}`"));
    if !state
        .endpoints
        .routing(name)
        .is_some_and(|r| caller.sees(r.tenant.as_deref()))
    {
        return Err(not_found());
    }
    state.endpoints.get(name).await?.ok_or_else(not_found)
}

/// The `{name}` of an endpoint's paths, as the operations document it.
#[derive(IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct EndpointName {
    /// The endpoint's name
    #[expect(
        dead_code,
        reason = "documents the path parameter; handlers take it as a String"
    )]
    name: String,
}

/// The most endpoints one page of the list holds, and how many it holds unless asked.
const MAX_PAGE: u32 = 500;
const DEFAULT_PAGE: u32 = 100;

#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct ListQuery {
    /// Only this tenant's endpoints (admin keys; a tenant's key always sees only its own).
    tenant: Option<String>,
    /// Only endpoints declared in the config file (`config`) or created through the API (`api`).
    source: Option<String>,
    /// Only endpoints subscribed to this topic.
    topic: Option<String>,
    /// Only endpoints in this health state: active, degraded, paused or disabled.
    state: Option<String>,
    /// Page size, 1-500 (default 100).
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

/// The endpoints by name, a page at a time: the config file's and those created through the
/// API, with their health (a page leaves each one's history out: read the endpoint for it).
/// Every endpoint that exists from the first page to the last is on exactly one page, whatever
/// is created or deleted meanwhile.
#[utoipa::path(get, path = "/v1/endpoints", tag = "endpoints", params(ListQuery),
    responses((status = 200, description = "A page of endpoints, by name", body = EndpointList),
              (status = 400, description = "A bad limit, cursor or source", body = ErrorBody)))]
async fn list_endpoints(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Query(q): Query<ListQuery>,
) -> Result<Json<EndpointList>, ApiError> {
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_limit",
            format!("limit must be 1-{MAX_PAGE}"),
        ));
    }
    let (file, api) = match q.source.as_deref() {
        None => (true, true),
        Some("config") => (true, false),
        Some("api") => (false, true),
        Some(other) => {
            return Err(ApiError::bad_request(
                "invalid_source",
                format!("unknown source `{other}` (config, api)"),
            ));
        }
    };
    let after = q.cursor.as_deref().map(cursor_name).transpose()?;
    let tenant = caller.tenant_filter(q.tenant);
    let wanted_state = q
        .state
        .as_deref()
        .map(|s| {
            s.parse::<EndpointState>().map_err(|_| {
                ApiError::bad_request(
                    "invalid_state",
                    format!("unknown state `{s}` (active, degraded, paused, disabled)"),
                )
            })
        })
        .transpose()?;
    let (page, next_cursor) = match (&q.topic, wanted_state) {
        (Some(topic), _) => {
            topic_page(
                &state,
                topic,
                tenant.as_deref(),
                after.as_deref(),
                limit,
                (file, api),
            )
            .await?
        }
        (None, Some(s)) if s != EndpointState::Active => {
            not_active_page(&state, s, tenant.as_deref(), after.as_deref(), limit, (file, api)).await?
        }
        (None, _) => name_page(&state, tenant, after, limit, (file, api)).await?,
    };
    let names: Vec<&str> = page.iter().map(|ep| &*ep.name).collect();
    let health = state.health_of_each(&names).await;
    let endpoints = page
        .iter()
        .zip(health)
        .filter(|(_, health)| wanted_state.is_none_or(|s| health.state == s))
        .map(|(ep, health)| view_with(&state, ep, health, None))
        .collect();
    Ok(Json(EndpointList {
        endpoints,
        next_cursor,
    }))
}

/// Which sources a page takes: the config file's endpoints, those created through the API.
type Sources = (bool, bool);

/// A page of every endpoint (of `tenant`), by name: the file's from the config, those created
/// through the API from the store, merged. With its next cursor, if there is a next page.
async fn name_page(
    state: &AppState,
    tenant: Option<String>,
    after: Option<String>,
    limit: u32,
    (file, api): Sources,
) -> Result<(Vec<Arc<EndpointConfig>>, Option<String>), ApiError> {
    let mut page: Vec<Arc<EndpointConfig>> = Vec::new();
    if file {
        let config = state.config.load();
        let range = match &after {
            Some(a) => config
                .file_endpoints
                .range::<str, _>((Bound::Excluded(a.as_str()), Bound::Unbounded)),
            None => config.file_endpoints.range::<str, _>(..),
        };
        page.extend(
            range
                .map(|(_, ep)| ep)
                .filter(|ep| tenant.is_none() || ep.tenant.as_deref() == tenant.as_deref())
                .take(limit as usize + 1)
                .cloned(),
        );
    }
    if api {
        let rows = state
            .store
            .api_endpoint_page(EndpointPage {
                tenant: tenant.clone(),
                after: after.clone(),
                limit: limit + 1,
                descending: false,
            })
            .await?;
        page.extend(rows.iter().filter_map(|row| state.endpoints.compiled(row)));
    }
    page.sort_by(|a, b| a.name.cmp(&b.name));
    let next_cursor = (page.len() > limit as usize).then(|| {
        page.truncate(limit as usize);
        page.last().map(|ep| cursor_of(&ep.name))
    });
    Ok((page, next_cursor.flatten()))
}

/// A page of the endpoints (of `tenant`) subscribed to `topic`, by name, from the endpoint
/// index. With its next cursor, if there is a next page.
async fn topic_page(
    state: &AppState,
    topic: &str,
    tenant: Option<&str>,
    after: Option<&str>,
    limit: u32,
    sources: Sources,
) -> Result<(Vec<Arc<EndpointConfig>>, Option<String>), ApiError> {
    let names = state
        .endpoints
        .topic_page(topic, tenant, after, limit as usize + 1);
    page_of(state, names, limit, sources).await
}

/// A page of the endpoints (of `tenant`) in a state other than active, by name: those are few
/// (the scheduler keeps them apart), so this reads only them.
async fn not_active_page(
    state: &AppState,
    wanted: EndpointState,
    tenant: Option<&str>,
    after: Option<&str>,
    limit: u32,
    sources: Sources,
) -> Result<(Vec<Arc<EndpointConfig>>, Option<String>), ApiError> {
    let mut names: Vec<Arc<crate::endpoints::Routing>> = state
        .scheduler
        .not_active()
        .into_iter()
        .filter(|(name, s)| *s == wanted && after.is_none_or(|a| **name > *a))
        .filter_map(|(name, _)| state.endpoints.routing(&name))
        .filter(|r| tenant.is_none() || r.tenant.as_deref() == tenant)
        .collect();
    names.sort_by(|a, b| a.name.cmp(&b.name));
    page_of(state, names, limit, sources).await
}

/// The endpoints of `names` (sorted, from the cursor on) that a page holds, compiled, with the
/// next page's cursor when there are more.
async fn page_of(
    state: &AppState,
    mut names: Vec<Arc<crate::endpoints::Routing>>,
    limit: u32,
    (file, api): Sources,
) -> Result<(Vec<Arc<EndpointConfig>>, Option<String>), ApiError> {
    let next_cursor = (names.len() > limit as usize).then(|| {
        names.truncate(limit as usize);
        names.last().map(|r| cursor_of(&r.name))
    });
    let mut page = Vec::with_capacity(names.len());
    for routing in names {
        let wanted = match routing.source {
            crate::config::EndpointSource::Config => file,
            crate::config::EndpointSource::Api => api,
        };
        if wanted && let Some(ep) = state.endpoints.get(&routing.name).await? {
            page.push(ep);
        }
    }
    Ok((page, next_cursor.flatten()))
}

/// A list's cursor: the last name of the page before, in a form that says it is a cursor.
fn cursor_of(name: &str) -> String {
    format!("ep:{name}")
}

fn cursor_name(cursor: &str) -> Result<String, ApiError> {
    cursor
        .strip_prefix("ep:")
        .filter(|name| !name.is_empty())
        .map(str::to_owned)
        .ok_or_else(|| ApiError::bad_request("invalid_cursor", "not a cursor from this API"))
}

/// One endpoint: state, counters and state history (newest 100 changes).
#[utoipa::path(get, path = "/v1/endpoints/{name}", tag = "endpoints",
    params(EndpointName),
    responses((status = 200, description = "The endpoint", body = EndpointView),
              NoSuchEndpoint))]
async fn get_endpoint(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<Json<EndpointView>, ApiError> {
    let ep = visible(&state, &caller, &name).await?;
    Ok(Json(view(&state, &ep).await?))
}

fn json_object(body: &[u8]) -> Result<serde_json::Map<String, serde_json::Value>, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("malformed_body", format!("the body is not a JSON object: {e}")))
}

/// Creates an endpoint (`source: api`), kept in the store: it survives restarts and config
/// reloads. The body holds the config file's endpoint keys as JSON (`url`, `topics`, `types`,
/// `policy`, `headers`, `transform`, `signer`, `max_per_second`, `ordered`, …) plus optional
/// `name` (default `ep_<ulid>`), `tenant`, `description` and `secret` (default: a new
/// `whsec_` secret, or `whsk_` key with `signature: ed25519`), validated like the file. The
/// answer shows the secret, this once.
#[utoipa::path(post, path = "/v1/endpoints", tag = "endpoints",
    request_body(content = Object, description = "The endpoint's keys, as in the config file, plus name, tenant, description, secret"),
    responses((status = 201, description = "Created; `secret` is shown this once", body = SavedEndpoint),
              (status = 400, description = "A key is invalid (`problems` names each), or the URL is a blocked address", body = ErrorBody),
              (status = 403, description = "A tenant's key asked for another tenant", body = ErrorBody),
              NameTaken))]
async fn create_endpoint(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    body: BodyBytes,
) -> Result<(StatusCode, Json<SavedEndpoint>), ApiError> {
    let saved = state
        .endpoint_admin
        .create(json_object(&body)?, caller.tenant.as_deref())
        .await?;
    Ok((StatusCode::CREATED, Json(saved_view(&state, saved).await?)))
}

/// Changes an endpoint created through the API: a JSON merge patch of its keys (`null`
/// removes one; a `filter` replaces the old one whole). Applies from the next attempt, like
/// an edit of the config file.
#[utoipa::path(patch, path = "/v1/endpoints/{name}", tag = "endpoints",
    params(EndpointName),
    request_body(content = Object, description = "A JSON merge patch of the endpoint's keys"),
    responses((status = 200, description = "The endpoint as changed", body = SavedEndpoint),
              (status = 400, description = "A key is invalid, or the URL is a blocked address", body = ErrorBody),
              NoSuchEndpoint,
              DeclaredInFile))]
async fn update_endpoint(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: BodyBytes,
) -> Result<Json<SavedEndpoint>, ApiError> {
    let patch = serde_json::Value::Object(json_object(&body)?);
    let saved = state
        .endpoint_admin
        .update(&name, patch, caller.tenant.as_deref())
        .await?;
    Ok(Json(saved_view(&state, saved).await?))
}

/// Deletes an endpoint created through the API. Its waiting deliveries end `failed` with
/// `endpoint_removed`; its deliveries stay readable until retention removes them.
#[utoipa::path(delete, path = "/v1/endpoints/{name}", tag = "endpoints",
    params(EndpointName),
    responses((status = 204, description = "Deleted"),
              NoSuchEndpoint,
              DeclaredInFile))]
async fn delete_endpoint(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<StatusCode, ApiError> {
    state
        .endpoint_admin
        .delete(&name, caller.tenant.as_deref())
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RotateIn {
    /// The new secret; default a generated one of the endpoint's kind.
    secret: Option<String>,
    /// How long the old secret keeps signing beside the new one, e.g. `24h` (the default) or
    /// `0s` (at once).
    overlap: Option<String>,
}

/// Gives an endpoint created through the API a new signing secret, shown this once. Until the
/// overlap ends both secrets sign (two signatures in `webhook-signature`), so the receiver can
/// switch to the new one without refusing a delivery.
#[utoipa::path(post, path = "/v1/endpoints/{name}/secret/rotate", tag = "endpoints",
    params(EndpointName),
    request_body(content = Option<RotateIn>, description = "Optional secret and overlap"),
    responses((status = 200, description = "Rotated; `secret` is shown this once", body = SavedEndpoint),
              (status = 400, description = "A bad secret or overlap", body = ErrorBody),
              NoSuchEndpoint,
              DeclaredInFile))]
async fn rotate_secret(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    body: BodyBytes,
) -> Result<Json<SavedEndpoint>, ApiError> {
    visible(&state, &caller, &name).await?;
    let input: RotateIn = super::optional_json(&body, "a rotation request")?;
    let overlap = match input.overlap.as_deref() {
        None => crate::endpoint_admin::DEFAULT_OVERLAP,
        Some(text) => crate::policy::parse_duration(text)
            .map_err(|why| format!("overlap: {why}"))
            .and_then(|d| match d <= MAX_OVERLAP {
                true => Ok(d),
                false => Err(format!("overlap `{text}` is longer than the most, 30d")),
            })
            .map_err(|message| ApiError::bad_request("invalid_overlap", message))?,
    };
    let saved = state
        .endpoint_admin
        .rotate_secret(&name, input.secret, overlap, caller.tenant.as_deref())
        .await?;
    Ok(Json(saved_view(&state, saved).await?))
}

/// The longest a rotated-out secret keeps signing.
const MAX_OVERLAP: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

async fn saved_view(state: &AppState, saved: Saved) -> Result<SavedEndpoint, ApiError> {
    Ok(SavedEndpoint {
        endpoint: view(state, &saved.endpoint).await?,
        secret: saved.secret,
    })
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

/// Sends a test event now and answers with the attempt's outcome — 200 whether or not the
/// endpoint accepted it. Changes no state or counter.
#[utoipa::path(post, path = "/v1/endpoints/{name}/test", tag = "endpoints",
    params(EndpointName),
    request_body(content = Option<TestIn>, description = "Optional type and payload"),
    responses((status = 200, description = "The attempt's outcome", body = TestOutcome),
              NoSuchEndpoint))]
async fn test_endpoint(
    State(state): State<AppState>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Json<TestOutcome>, ApiError> {
    let ep = visible(&state, &Caller::of(&request), &name).await?;
    let config = state.config.load_full();
    let (parts, body) = request.into_parts();
    let body = read_body(body, &parts.headers, config.server.max_body_bytes).await?;
    let input: TestIn = super::optional_json(&body, "a test request")?;
    let event = test_event(&ep, input, state.clock.now());
    let policy = config.policy_for(&ep, &event.topic);
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
    Ok(Json(test_outcome(&ep, event.id, report)))
}

/// The event a test call sends: the request's type and payload, or the defaults, on the
/// endpoint's first topic and for its tenant.
fn test_event(ep: &EndpointConfig, input: TestIn, now: Timestamp) -> Event {
    let payload = match input.payload {
        Some(raw) => Bytes::copy_from_slice(raw.get().as_bytes()),
        None => Bytes::from(serde_json::json!({"test": true, "endpoint": &*ep.name}).to_string()),
    };
    Event {
        id: format!("test_{}", ulid::Ulid::new().to_string().to_lowercase()),
        topic: ep.topics.first().cloned().unwrap_or_default(),
        event_type: input.event_type.unwrap_or_else(|| "hookgate.test".into()),
        content_type: "application/json".into(),
        payload,
        ordering_key: None,
        received_at: now,
        tenant: ep.tenant.as_deref().map(str::to_owned),
        // A test call belongs to no ingestion: its attempt starts a trace of its own.
        trace: None,
        labels: Default::default(),
    }
}

/// What a test call answers: the attempt's outcome, or why it was dropped.
fn test_outcome(ep: &EndpointConfig, event_id: String, report: attempt::AttemptReport) -> TestOutcome {
    let duration_ms = report.duration.as_millis() as u64;
    let (kind, target) = (ep.destination.kind().to_owned(), ep.destination.target());
    // A broker's answer is the attempt record's one line; HTTP's is its status code.
    let answer = report
        .exchange
        .response_body
        .clone()
        .filter(|_| !ep.destination.is_http());
    match report.result {
        AttemptResult::Sent(outcome) => TestOutcome {
            delivered: outcome.is_success(),
            event_id,
            kind,
            target,
            answer,
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
            event_id,
            kind,
            target,
            answer: None,
            status_code: None,
            error_kind: None,
            error: None,
            duration_ms,
            plugins: report.plugin_note,
            dropped: Some(reason),
        },
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
    params(EndpointName,
           ("Idempotency-Key" = String, Header, description = "Required")),
    request_body = ReplayIn,
    responses((status = 202, description = "Queued", body = ReplayOutcome),
              (status = 400, description = "No Idempotency-Key, or the window is too large", body = ErrorBody),
              NoSuchEndpoint,
              (status = 409, description = "Endpoint paused/disabled, or the key is in use", body = ErrorBody),
              (status = 422, description = "The key was used for another request", body = ErrorBody)))]
async fn replay(
    State(state): State<AppState>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let caller = Caller::of(&request);
    let ep = visible(&state, &caller, &name).await?;
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
    let hash = || idempotency::request_hash("POST", parts.uri.path(), &[&body]);
    let claim = match idempotency::begin(&state, &caller, &parts.headers, hash).await? {
        Begin::Replay(response) => return Ok(response),
        Begin::Fresh(claim) => claim,
        Begin::NoKey => unreachable!("checked above"),
    };
    state.recovery.ensure_receiving(&ep.name)?;
    let since = super::parse_time("since", &input.since)?;
    let until = input
        .until
        .as_deref()
        .map(|u| super::parse_time("until", u))
        .transpose()?;
    let window = state.recovery.window(since, until)?;
    // The answer names the new deliveries, so it is made inside the commit that creates them.
    let record = claim.record(StatusCode::ACCEPTED, Bytes::new(), state.clock.now());
    let answer: ReplayAnswer = Box::new(|replayed: &Replayed| {
        Bytes::from(serde_json::to_vec(&ReplayOutcome::from(replayed)).expect("serializes"))
    });
    match state.recovery.replay(&ep, window, Some((record, answer))).await? {
        Replay::Fresh(replayed) => {
            Ok((StatusCode::ACCEPTED, Json(ReplayOutcome::from(&replayed))).into_response())
        }
        Replay::Earlier(first) => Ok(idempotency::replay(&first)),
    }
}

#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct ReplayPreviewQuery {
    /// RFC 3339; at most 7 days back. Required.
    since: Option<String>,
    /// RFC 3339; default now.
    until: Option<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReplayPreview {
    /// How many events a replay of the window would send now.
    events: usize,
    /// Set when the window holds more than one replay sends: where the next would continue.
    #[schema(value_type = Option<String>, format = DateTime)]
    continue_from: Option<Timestamp>,
}

/// How many events a replay of this window would send, without sending anything (the console
/// shows it before the operator confirms).
#[utoipa::path(get, path = "/v1/endpoints/{name}/replay/preview", tag = "endpoints",
    params(EndpointName, ReplayPreviewQuery),
    responses((status = 200, description = "What a replay would send", body = ReplayPreview),
              (status = 400, description = "A bad window", body = ErrorBody),
              NoSuchEndpoint))]
async fn replay_preview(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Query(q): Query<ReplayPreviewQuery>,
) -> Result<Json<ReplayPreview>, ApiError> {
    let ep = visible(&state, &caller, &name).await?;
    let since = q
        .since
        .as_deref()
        .ok_or_else(|| ApiError::bad_request("invalid_window", "`since` is required"))?;
    let since = super::parse_time("since", since)?;
    let until = q
        .until
        .as_deref()
        .map(|u| super::parse_time("until", u))
        .transpose()?;
    let window = state.recovery.window(since, until)?;
    let (events, continue_from) = state.recovery.replay_preview(&ep, window).await?;
    Ok(Json(ReplayPreview {
        events,
        continue_from,
    }))
}

#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReenableIn {
    /// RFC 3339, at most 7 days back — normally the time of the last good delivery: the
    /// endpoint's matching events since then are sent again (at most 10 000).
    replay_since: Option<String>,
}

/// Makes a paused or disabled endpoint active again, optionally replaying what it missed.
#[utoipa::path(post, path = "/v1/endpoints/{name}/reenable", tag = "endpoints",
    params(EndpointName),
    request_body(content = Option<ReenableIn>, description = "Optional replay_since"),
    responses((status = 200, description = "Active again", body = Reenabled),
              (status = 400, description = "replay_since too far back", body = ErrorBody),
              NoSuchEndpoint))]
async fn reenable(
    State(state): State<AppState>,
    Path(name): Path<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let ep = visible(&state, &Caller::of(&request), &name).await?;
    let (parts, body) = request.into_parts();
    let body = read_body(body, &parts.headers, 64 * 1024).await?;
    let input: ReenableIn = super::optional_json(&body, "a re-enable request")?;
    let replay_since = input
        .replay_since
        .as_deref()
        .map(|text| super::parse_time("replay_since", text))
        .transpose()?;
    let replay = state.recovery.reenable(&ep, replay_since).await?;
    Ok(Json(Reenabled {
        endpoint: view(&state, &ep).await?,
        replayed: replay.as_ref().map_or(0, |r| r.queued),
        replay: replay.as_ref().map(ReplayOutcome::from),
    })
    .into_response())
}

/// Sends the endpoint's dead deliveries again (at most 10 000 per call), each with a fresh
/// attempt counter.
#[utoipa::path(post, path = "/v1/endpoints/{name}/redrive", tag = "endpoints",
    params(EndpointName),
    responses((status = 202, description = "Queued", body = Redriven),
              NoSuchEndpoint,
              (status = 409, description = "Endpoint paused or disabled", body = ErrorBody)))]
async fn redrive(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
) -> Result<(StatusCode, Json<Redriven>), ApiError> {
    let ep = visible(&state, &caller, &name).await?;
    let queued = state.recovery.redrive(&ep).await?;
    Ok((StatusCode::ACCEPTED, Json(Redriven { queued })))
}
