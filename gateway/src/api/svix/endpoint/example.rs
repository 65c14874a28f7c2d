//! `/endpoint/{endpoint_id}/send-example`: a message of an event type's example (or Svix's
//! ping) sent to this endpoint alone.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::super::extract::{AppEndpoint, AppPath, EndpointPath, Idempotent};
use super::super::message::{MessageOut, send_to};
use super::super::{SvixError, SvixResult, body, stored_json, valid_svix_name};
use crate::api::AppState;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(send_example))
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ExampleIn {
    event_type: String,
    #[serde(default)]
    example_index: usize,
    payload: Option<Value>,
}

/// The event type whose example is Svix's ping, and that example.
const PING_TYPE: &str = "svix.ping";

/// Send a message of an event type to this endpoint only (200 with the message, as Svix
/// answers): the given payload, else `{"success": true}` for `svix.ping` (Svix's "send test
/// event"), else the example at `exampleIndex` of the type's latest schema (`examples`).
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/send-example", tag = "svix",
    request_body = super::super::SvixJson, params(AppPath, EndpointPath),
    responses((status = 200, description = "The message sent", body = MessageOut)))]
async fn send_example(
    State(state): State<AppState>,
    idem: Idempotent,
    AppEndpoint { app, ep }: AppEndpoint,
    bytes: Bytes,
) -> SvixResult<Response> {
    let input: ExampleIn = body(&bytes)?;
    valid_svix_name(&["body", "eventType"], &input.event_type)?;
    let payload = match input.payload {
        Some(payload) => payload,
        None if input.event_type == PING_TYPE => json!({"success": true}),
        None => example(&state, &input.event_type, input.example_index).await?,
    };
    let message: MessageOut = send_to(&state, &app, &ep, &input.event_type, payload).await?;
    Ok(idem.answer(StatusCode::OK, &message).await)
}

/// The example of an event type's latest schema: 404 for a type not in the catalog, 400
/// `invalid_scheme` for one without an example at `index` (Svix's answers).
async fn example(state: &AppState, event_type: &str, index: usize) -> SvixResult<Value> {
    let Some(row) = state.store.event_type(event_type).await? else {
        return Err(SvixError::not_found());
    };
    let schemas = stored_json(row.schemas.as_deref(), json!({}));
    let latest = schemas
        .as_object()
        .and_then(|versions| versions.iter().max_by_key(|(v, _)| v.parse::<u64>().unwrap_or(0)))
        .map(|(_, schema)| schema.clone())
        .unwrap_or_default();
    latest
        .get("examples")
        .and_then(|examples| examples.get(index))
        .cloned()
        .ok_or_else(|| {
            SvixError::new(
                StatusCode::BAD_REQUEST,
                "invalid_scheme",
                format!("the event type `{event_type}` has no example to send (its schema's `examples`)"),
            )
        })
}
