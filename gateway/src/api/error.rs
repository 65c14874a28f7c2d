//! The API's one error type: a status, a snake_case code and a message, answered as
//! `{"error": {"code": "...", "message": "..."}}`.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

use crate::endpoint_admin::AdminError;
use crate::event_types::CatalogError;
use crate::recovery::RecoveryError;
use crate::store::StoreError;

#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
    /// Seconds, for 429 and 503.
    pub retry_after: Option<u64>,
    /// The existing resource a conflict is about (a duplicate event's id), for clients that
    /// carry on with it.
    pub id: Option<String>,
    /// Each invalid field of the request, for `invalid_endpoint`.
    pub problems: Vec<FieldProblem>,
}

/// One invalid field: its path in the request (`url`, `topics[0]`) and what is wrong with it.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct FieldProblem {
    pub path: String,
    pub reason: String,
}

/// The body of every error answer.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorBody {
    error: ErrorDetail,
}

/// Declares error answers that several operations document alike, each a type the operations
/// name in their `responses(…)`: the status, what it means, and the one error body.
macro_rules! documented_errors {
    ($($name:ident = $status:literal, $description:literal;)*) => {$(
        #[derive(utoipa::IntoResponses)]
        #[response(status = $status, description = $description)]
        pub(crate) struct $name(#[expect(dead_code, reason = "documents the answer's body")] ErrorBody);
    )*};
}

documented_errors! {
    NoSuchEndpoint = 404, "No such endpoint";
    NoSuchType = 404, "No such type";
    NoSuchPolicy = 404, "No such policy";
    NoSuchDelivery = 404, "No such delivery";
    DeclaredInFile = 409, "Declared in the config file";
    NameTaken = 409, "The name is taken";
    HeadBusy = 409, "Not ordered, an attempt of the head is running, or another node delivers the endpoint";
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ErrorDetail {
    /// Stable, snake_case: scripts may match on it.
    code: &'static str,
    /// For humans.
    message: String,
    /// The id of the existing resource a conflict is about (`duplicate_event`).
    #[serde(skip_serializing_if = "Option::is_none")]
    id: Option<String>,
    /// Every invalid field (`invalid_endpoint`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    problems: Vec<FieldProblem>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            message: message.into(),
            retry_after: None,
            id: None,
            problems: Vec::new(),
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }

    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }

    pub fn unprocessable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNPROCESSABLE_ENTITY, code, message)
    }

    pub fn unavailable(message: impl Into<String>) -> Self {
        ApiError {
            retry_after: Some(1),
            ..Self::new(StatusCode::SERVICE_UNAVAILABLE, "unavailable", message)
        }
    }
}

/// A full or failing disk is not fixed in a second: clients back off longer than for a
/// saturated writer.
const STORAGE_RETRY_AFTER_S: u64 = 5;

impl From<StoreError> for ApiError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::DuplicateEvent { topic, id } => ApiError {
                id: Some(id.clone()),
                ..ApiError::conflict(
                    "duplicate_event",
                    format!("event `{id}` already exists in topic `{topic}`"),
                )
            },
            StoreError::NotFound(what) => ApiError::not_found("not_found", format!("{what} not found")),
            StoreError::Conflict(message) => ApiError::conflict("conflict", message),
            StoreError::Unavailable(message) => {
                tracing::warn!(error = %message, "storage unavailable; refusing the write");
                ApiError {
                    retry_after: Some(STORAGE_RETRY_AFTER_S),
                    ..Self::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "storage_unavailable",
                        "the database cannot take writes (full or failing); nothing was written, retry later",
                    )
                }
            }
            StoreError::Overloaded(message) => {
                tracing::debug!(error = %message, "writer saturated; refusing the write");
                ApiError {
                    retry_after: Some(1),
                    ..Self::new(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "overloaded",
                        "too many writes are waiting; nothing was written, retry shortly",
                    )
                }
            }
            StoreError::Internal(message) => {
                tracing::error!(error = %message, "storage error");
                ApiError::new(
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "internal",
                    "an internal error occurred",
                )
            }
        }
    }
}

impl From<RecoveryError> for ApiError {
    fn from(e: RecoveryError) -> Self {
        let message = e.to_string();
        match e {
            RecoveryError::EndpointNotFound(_) => ApiError::not_found("endpoint_not_found", message),
            RecoveryError::DeliveryNotFound(_) => ApiError::not_found("delivery_not_found", message),
            RecoveryError::EndpointNotActive { .. } => ApiError::conflict("endpoint_not_active", message),
            RecoveryError::EndpointRemoved(_) => ApiError::conflict("endpoint_removed", message),
            RecoveryError::DeliveryInFlight(_) => ApiError::conflict("delivery_in_flight", message),
            RecoveryError::PayloadExpunged(_) => ApiError::conflict("payload_expunged", message),
            RecoveryError::WindowTooFarBack { .. } => {
                ApiError::bad_request("replay_window_too_large", message)
            }
            RecoveryError::InvalidWindow(_) => ApiError::bad_request("invalid_window", message),
            RecoveryError::ShuttingDown => ApiError::unavailable(message),
            RecoveryError::Store(e) => e.into(),
        }
    }
}

/// A 400 whose message lists the endpoint's problems, which `problems` gives one by one.
fn with_problems(code: &'static str, problems: Vec<crate::config::Problem>) -> ApiError {
    let problems: Vec<FieldProblem> = problems
        .into_iter()
        .map(|p| FieldProblem {
            path: p.path,
            reason: p.reason,
        })
        .collect();
    let listed: Vec<String> = problems
        .iter()
        .map(|p| {
            if p.path.is_empty() {
                p.reason.clone()
            } else {
                format!("{}: {}", p.path, p.reason)
            }
        })
        .collect();
    ApiError {
        problems,
        ..ApiError::bad_request(code, listed.join("; "))
    }
}

impl From<AdminError> for ApiError {
    fn from(e: AdminError) -> Self {
        let message = e.to_string();
        match e {
            AdminError::Invalid(problems) => with_problems("invalid_endpoint", problems),
            AdminError::Blocked(problems) => with_problems("blocked_address", problems),
            AdminError::DeclaredInConfig(_) => ApiError::conflict("endpoint_declared_in_config", message),
            AdminError::NotFound(_) => ApiError::not_found("endpoint_not_found", message),
            AdminError::Taken(_) => ApiError::conflict("name_taken", message),
            AdminError::Changed(_) => ApiError::conflict("endpoint_changed", message),
            AdminError::OtherTenant(_) => ApiError::new(StatusCode::FORBIDDEN, "tenant_mismatch", message),
            AdminError::Store(e) => e.into(),
        }
    }
}

impl From<CatalogError> for ApiError {
    fn from(e: CatalogError) -> Self {
        let message = e.to_string();
        match e {
            CatalogError::Invalid { .. } => ApiError::bad_request("invalid_event_type", message),
            CatalogError::NotFound(_) => ApiError::not_found("event_type_not_found", message),
            CatalogError::Exists(_) => ApiError::conflict("event_type_exists", message),
            CatalogError::PayloadInvalid { .. } => ApiError::bad_request("payload_schema_mismatch", message),
            CatalogError::Store(e) => e.into(),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let retry_after = self.retry_after;
        let mut response = (
            self.status,
            Json(ErrorBody {
                error: ErrorDetail {
                    code: self.code,
                    message: self.message,
                    id: self.id,
                    problems: self.problems,
                },
            }),
        )
            .into_response();
        if let Some(seconds) = retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        response
    }
}
