//! What a Svix handler works on, taken from the request as axum extractors so that no handler
//! repeats the lookup: the path's ids ([`Ids`]), the application of the path checked for the
//! caller ([`App`]), one of its endpoints ([`AppEndpoint`]), and a POST's idempotency key
//! ([`Idempotent`]). Their refusals are Svix's (`SvixError`), like the handlers'.

use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use utoipa::IntoParams;

use super::endpoint::endpoint_of;
use super::{SvixError, SvixResult, application_of};
use crate::api::AppState;
use crate::api::auth::Caller;
use crate::api::idempotency::{self, Begin, Claim};
use crate::config::EndpointConfig;
use crate::store::ApplicationRow;

/// The path's ids as `T` (a struct naming those a handler reads; the others are ignored).
pub(crate) struct Ids<T>(pub(crate) T);

impl<T: DeserializeOwned + Send> FromRequestParts<AppState> for Ids<T> {
    type Rejection = SvixError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> SvixResult<Self> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(ids)| Ids(ids))
            .map_err(|e| SvixError::invalid(&["path"], e.body_text()))
    }
}

/// The path's application, for the OpenAPI document.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct AppPath {
    /// The application's id or uid.
    pub(crate) app_id: String,
}

/// The path's endpoint.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct EndpointPath {
    /// The endpoint's id or uid.
    pub(crate) endpoint_id: String,
}

/// The path's message.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub(crate) struct MsgPath {
    /// The message's id or eventId.
    pub(crate) msg_id: String,
}

/// The caller the authentication layer let in.
pub(crate) fn caller(parts: &Parts) -> SvixResult<Caller> {
    parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
        SvixError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "the request was not authenticated",
        )
    })
}

/// The application of the path's `app_id`, as the caller may see it: 404 otherwise, as if it
/// did not exist.
pub(crate) struct App(pub(crate) ApplicationRow);

impl FromRequestParts<AppState> for App {
    type Rejection = SvixError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> SvixResult<Self> {
        let Ids(AppPath { app_id }) = Ids::from_request_parts(parts, state).await?;
        let caller = caller(parts)?;
        application_of(state, &caller, &app_id).await.map(App)
    }
}

/// The endpoint of the path's `endpoint_id` in the path's application (404 when either is
/// not the caller's to see).
pub(crate) struct AppEndpoint {
    pub(crate) app: ApplicationRow,
    pub(crate) ep: Arc<EndpointConfig>,
}

impl FromRequestParts<AppState> for AppEndpoint {
    type Rejection = SvixError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> SvixResult<Self> {
        let App(app) = App::from_request_parts(parts, state).await?;
        let Ids(EndpointPath { endpoint_id }) = Ids::from_request_parts(parts, state).await?;
        let ep = endpoint_of(state, &app, &endpoint_id).await?;
        Ok(AppEndpoint { app, ep })
    }
}

/// A POST run under its `idempotency-key` (Svix's SDKs send `auto_<uuid>` on every POST and the
/// same one on their retries). Taking it begins the request: a key used before answers the
/// first answer again (as the extractor's rejection, so the handler does not run), a fresh one
/// is held until [`Idempotent::answer`] keeps the answer, or dropped with an error so that a
/// retry runs again. As Svix's server does, the key and the path decide, not the body: the
/// same key with another body replays the first answer too.
pub(crate) struct Idempotent {
    state: AppState,
    claim: Option<Claim>,
}

impl FromRequestParts<AppState> for Idempotent {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let caller = caller(parts).map_err(IntoResponse::into_response)?;
        Idempotent::begin(state, &caller, &parts.headers, parts.uri.path()).await
    }
}

impl Idempotent {
    /// Begins a POST to `path` under its key (for a handler that checks its input first): the
    /// `Err` is the answer to give now, a replay or a refusal of the key.
    pub(crate) async fn begin(
        state: &AppState,
        caller: &Caller,
        headers: &HeaderMap,
        path: &str,
    ) -> Result<Idempotent, Response> {
        let begun = idempotency::begin(state, caller, headers, || {
            idempotency::request_hash("POST", path, &[])
        })
        .await
        .map_err(|e| SvixError::from(e).into_response())?;
        let claim = match begun {
            Begin::Replay(first) => return Err(first),
            Begin::NoKey => None,
            Begin::Fresh(claim) => Some(claim),
        };
        Ok(Idempotent {
            state: state.clone(),
            claim,
        })
    }

    /// The key held, for a handler that keeps its answer in the same commit as its writes.
    pub(crate) fn claim(&self) -> Option<&Claim> {
        self.claim.as_ref()
    }

    /// Answers the POST and keeps the answer for its key (a 204 has no body).
    pub(crate) async fn answer<T: Serialize>(self, status: StatusCode, value: &T) -> Response {
        let bytes = match status {
            StatusCode::NO_CONTENT => Bytes::new(),
            _ => Bytes::from(serde_json::to_vec(value).expect("answers serialize")),
        };
        if let Some(claim) = &self.claim {
            let record = claim.record(status, bytes.clone(), self.state.clock.now());
            // The write is done: a failure to keep the answer costs only the replay of a retry.
            if let Err(e) = self.state.store.save_idempotency(record).await {
                tracing::warn!(error = %e, "could not keep the answer of an idempotency key");
            }
        }
        if status == StatusCode::NO_CONTENT {
            return status.into_response();
        }
        (
            status,
            [(axum::http::header::CONTENT_TYPE, "application/json")],
            bytes,
        )
            .into_response()
    }
}

/// An admin caller (Svix's organization-level key): a tenant's key or console token is
/// refused with 403 before anything else is looked at.
pub(crate) struct Admin(pub(crate) Caller);

impl FromRequestParts<AppState> for Admin {
    type Rejection = SvixError;

    async fn from_request_parts(parts: &mut Parts, _state: &AppState) -> SvixResult<Self> {
        let caller = caller(parts)?;
        super::admin_only(&caller)?;
        Ok(Admin(caller))
    }
}
