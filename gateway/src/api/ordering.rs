//! The ordering keys of an ordered endpoint: which flow, which are blocked behind a failing
//! head or held behind a dead one, and how much waits (README "Ordered delivery").

use std::sync::Arc;

use axum::Extension;
use axum::Json;
use axum::extract::{Request, State};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::auth::Caller;
use super::endpoints::{EndpointName, visible};
use super::error::{ErrorBody, HeadBusy, NoSuchEndpoint};
use super::events::read_body;
use super::extract::{Path, Query};
use super::{ApiError, AppState};
use crate::config::EndpointConfig;
use crate::model::{DeliveryId, DeliveryStatus, Timestamp};
use crate::scheduler::{KeyAction, KeyAnswer};
use crate::store::{KeyHead, KeyListing, OrderingKeyRow};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(list_keys))
        .routes(routes!(skip_head))
        .routes(routes!(retry_head))
        .routes(routes!(release_key))
}

const DEFAULT_PAGE: u32 = 100;
/// How long an action's answer waits for its change to be committed.
const COMMIT_WAIT: std::time::Duration = std::time::Duration::from_secs(5);
const MAX_PAGE: u32 = 1000;

#[derive(Debug, Deserialize, IntoParams)]
pub(crate) struct KeysQuery {
    /// `blocked` (blocked and held keys), `waiting` (keys with events behind their head) or
    /// `all` (every key with a pending event or a hold; the default).
    state: Option<String>,
    /// Keys per page, 1-1000 (default 100).
    limit: Option<u32>,
    /// `next_cursor` of the previous page.
    cursor: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct KeyHeadView {
    /// `dlv_<n>`
    pub(crate) delivery_id: String,
    pub(crate) event_id: String,
    /// pending, delivering (an attempt is running now) or dead (a held key's head).
    #[schema(value_type = String, example = "pending")]
    pub(crate) status: DeliveryStatus,
    pub(crate) round: u32,
    pub(crate) attempt_count: u32,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) next_attempt_at: Option<Timestamp>,
    pub(crate) last_error: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct OrderingKeyView {
    pub(crate) key: String,
    /// flowing, blocked (the head failed at least once and others wait behind it) or held
    /// (`on_final_failure: hold` stopped it behind a head that finally failed).
    pub(crate) state: String,
    /// The delivery at the front: the oldest pending one, or a held key's dead letter.
    pub(crate) head: Option<KeyHeadView>,
    /// Events waiting behind the head.
    pub(crate) waiting: u64,
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) oldest_waiting_at: Option<Timestamp>,
    /// When the key was held; null unless held.
    #[schema(value_type = Option<String>, format = DateTime)]
    pub(crate) held_since: Option<Timestamp>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct OrderingKeyList {
    pub(crate) keys: Vec<OrderingKeyView>,
    pub(crate) next_cursor: Option<String>,
}

impl OrderingKeyView {
    fn new(row: OrderingKeyRow, in_flight: impl Fn(&KeyHead) -> bool) -> OrderingKeyView {
        let state = row.state().as_str().to_owned();
        OrderingKeyView {
            head: row.head.map(|h| {
                let status = if h.status == DeliveryStatus::Pending && in_flight(&h) {
                    DeliveryStatus::Delivering
                } else {
                    h.status
                };
                KeyHeadView {
                    delivery_id: h.delivery_id.to_string(),
                    event_id: h.event_id,
                    status,
                    round: h.round,
                    attempt_count: h.attempt_count,
                    next_attempt_at: h.next_attempt_at,
                    last_error: h.last_error,
                }
            }),
            key: row.key,
            state,
            waiting: row.waiting,
            oldest_waiting_at: row.oldest_waiting_at,
            held_since: row.held_since,
        }
    }
}

/// The endpoint, if the caller may see it and it is ordered.
pub(super) async fn ordered_endpoint(
    state: &AppState,
    caller: &Caller,
    name: &str,
) -> Result<Arc<EndpointConfig>, ApiError> {
    let ep = visible(state, caller, name).await?;
    if !ep.ordered {
        return Err(ApiError::conflict(
            "endpoint_not_ordered",
            format!("endpoint `{name}` is not ordered (`ordered: true`): it has no ordering keys"),
        ));
    }
    Ok(ep)
}

fn listing(text: Option<&str>) -> Result<KeyListing, ApiError> {
    match text {
        None | Some("all") => Ok(KeyListing::All),
        Some("blocked") => Ok(KeyListing::Blocked),
        Some("waiting") => Ok(KeyListing::Waiting),
        Some(other) => Err(ApiError::bad_request(
            "invalid_state",
            format!("unknown state `{other}` (blocked, waiting, all)"),
        )),
    }
}

/// A cursor is the last key of the previous page, base64url: keys are any text.
fn cursor_key(cursor: &str) -> Result<String, ApiError> {
    URL_SAFE_NO_PAD
        .decode(cursor)
        .ok()
        .and_then(|bytes| String::from_utf8(bytes).ok())
        .ok_or_else(|| ApiError::bad_request("invalid_cursor", "not a cursor from this API"))
}

/// An ordered endpoint's ordering keys in key order: each key's state, its head (delivery,
/// attempts, next attempt, last error), how many events wait behind it and since when.
#[utoipa::path(get, path = "/v1/endpoints/{name}/ordering-keys", tag = "endpoints",
    params(EndpointName, KeysQuery),
    responses((status = 200, description = "A page of keys", body = OrderingKeyList),
              (status = 400, description = "A bad filter or cursor", body = ErrorBody),
              NoSuchEndpoint,
              (status = 409, description = "The endpoint is not ordered", body = ErrorBody)))]
async fn list_keys(
    State(state): State<AppState>,
    Extension(caller): Extension<Caller>,
    Path(name): Path<String>,
    Query(q): Query<KeysQuery>,
) -> Result<Json<OrderingKeyList>, ApiError> {
    let ep = ordered_endpoint(&state, &caller, &name).await?;
    let listing = listing(q.state.as_deref())?;
    let limit = q.limit.unwrap_or(DEFAULT_PAGE);
    if !(1..=MAX_PAGE).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid_limit",
            format!("limit must be 1-{MAX_PAGE}"),
        ));
    }
    let after = q.cursor.as_deref().map(cursor_key).transpose()?;
    let page = state.store.ordering_keys(&ep.name, listing, after, limit).await?;
    let keys = page
        .keys
        .into_iter()
        .map(|row| OrderingKeyView::new(row, |h| state.scheduler.is_in_flight(h.delivery_id)))
        .collect();
    Ok(Json(OrderingKeyList {
        keys,
        next_cursor: page.next_after.map(|k| URL_SAFE_NO_PAD.encode(k)),
    }))
}

/// Optional body of an action: the head it is meant for. With it, an action is idempotent and
/// safe against a head that moved on meanwhile (it then does nothing and says so).
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KeyActionIn {
    /// `dlv_<n>`: act only if this delivery is still the key's head.
    delivery_id: Option<String>,
}

#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub(crate) struct KeyActionOut {
    pub(crate) key: String,
    /// skip, retry or release.
    pub(crate) action: String,
    /// Whether this call changed anything.
    pub(crate) applied: bool,
    /// The head acted on (applied), or the key's head now (not applied); null for a key with
    /// nothing pending.
    pub(crate) head: Option<String>,
    /// Why nothing changed: `not_head` (the head named is not the key's head any more),
    /// `no_head` (nothing pending for the key), `not_held` (release of a key not held).
    pub(crate) reason: Option<String>,
}

/// Skips the key's head: it ends as a dead letter with reason `skipped` and the key's next
/// event goes at once. On a held key, the same as release.
#[utoipa::path(post, path = "/v1/endpoints/{name}/ordering-keys/{key}/skip", tag = "endpoints",
    params(EndpointName,
           ("key" = String, Path, description = "The ordering key")),
    request_body(content = Option<KeyActionIn>, description = "Optional: the head meant"),
    responses((status = 200, description = "Done, or nothing to do", body = KeyActionOut),
              NoSuchEndpoint,
              HeadBusy))]
async fn skip_head(
    State(state): State<AppState>,
    Path((name, key)): Path<(String, String)>,
    request: Request,
) -> Result<Json<KeyActionOut>, ApiError> {
    act(&state, &name, key, KeyAction::Skip, request).await
}

/// Attempts the key's head now (a new round of its policy when it had finally failed, on a
/// held key).
#[utoipa::path(post, path = "/v1/endpoints/{name}/ordering-keys/{key}/retry", tag = "endpoints",
    params(EndpointName,
           ("key" = String, Path, description = "The ordering key")),
    request_body(content = Option<KeyActionIn>, description = "Optional: the head meant"),
    responses((status = 200, description = "Done, or nothing to do", body = KeyActionOut),
              NoSuchEndpoint,
              HeadBusy))]
async fn retry_head(
    State(state): State<AppState>,
    Path((name, key)): Path<(String, String)>,
    request: Request,
) -> Result<Json<KeyActionOut>, ApiError> {
    act(&state, &name, key, KeyAction::Retry, request).await
}

/// Moves a held key on: its failed head stays a dead letter, the next event goes.
#[utoipa::path(post, path = "/v1/endpoints/{name}/ordering-keys/{key}/release", tag = "endpoints",
    params(EndpointName,
           ("key" = String, Path, description = "The ordering key")),
    request_body(content = Option<KeyActionIn>, description = "Optional: the head meant"),
    responses((status = 200, description = "Done, or nothing to do", body = KeyActionOut),
              NoSuchEndpoint,
              (status = 409, description = "Not ordered, or another node delivers the endpoint", body = ErrorBody)))]
async fn release_key(
    State(state): State<AppState>,
    Path((name, key)): Path<(String, String)>,
    request: Request,
) -> Result<Json<KeyActionOut>, ApiError> {
    act(&state, &name, key, KeyAction::Release, request).await
}

async fn act(
    state: &AppState,
    name: &str,
    key: String,
    action: KeyAction,
    request: Request,
) -> Result<Json<KeyActionOut>, ApiError> {
    let ep = ordered_endpoint(state, &Caller::of(&request), name).await?;
    let (parts, body) = request.into_parts();
    let body = read_body(body, &parts.headers, 16 * 1024).await?;
    let input: KeyActionIn = super::optional_json(&body, "an ordering key action")?;
    let expected = input
        .delivery_id
        .as_deref()
        .map(|text| {
            text.parse::<DeliveryId>().map_err(|_| {
                ApiError::bad_request("invalid_delivery_id", format!("`{text}` is not a delivery id"))
            })
        })
        .transpose()?;
    let mut answer = state
        .scheduler
        .key_action(ep.name.clone(), Arc::from(key.as_str()), action, expected)
        .await;
    // In a cluster, the node that delivers the endpoint decides, through the store.
    if answer == KeyAnswer::NotOwner
        && let Some(cluster) = state.store.clone().cluster()
    {
        let now = state.clock.now();
        answer = crate::cluster::relay_key_action(cluster, ep.name.clone(), &key, action, expected, now)
            .await
            .ok_or_else(|| {
                ApiError::unavailable("the node delivering this endpoint did not answer; try again")
            })?;
    }
    // What the action changed is on disk before the answer, so a listing read next shows it.
    state.scheduler.committed(COMMIT_WAIT).await;
    let out = |applied: bool, head: Option<DeliveryId>, reason: Option<&str>| KeyActionOut {
        key: key.clone(),
        action: action.as_str().to_owned(),
        applied,
        head: head.map(|h| h.to_string()),
        reason: reason.map(str::to_owned),
    };
    let answer = match answer {
        KeyAnswer::Applied(head) => out(true, Some(head), None),
        KeyAnswer::NewRound(head) => {
            state.recovery.redeliver(head).await?;
            out(true, Some(head), None)
        }
        KeyAnswer::Unchanged { front: None } => out(false, None, Some("no_head")),
        KeyAnswer::Unchanged { front } => out(false, front, Some("not_head")),
        KeyAnswer::NotHeld { front } => out(false, front, Some("not_held")),
        KeyAnswer::InFlight(head) => {
            return Err(ApiError::conflict(
                "head_in_flight",
                format!("an attempt of the head {head} is running; its outcome decides, act again after it"),
            ));
        }
        KeyAnswer::NotOwner => {
            return Err(ApiError::unavailable(format!(
                "no node delivers endpoint `{name}` at the moment; try again"
            )));
        }
        KeyAnswer::Stopped => return Err(ApiError::unavailable("the scheduler is stopping")),
    };
    Ok(Json(answer))
}
