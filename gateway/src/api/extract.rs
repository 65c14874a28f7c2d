//! The API's extractors: axum's `Query`, `Path` and `Json` under the same names, and `Bytes` as
//! [`BodyBytes`], whose refusals are [`ApiError`]s. Axum's own answer a bad query string, path
//! parameter or body in `text/plain` ("Failed to deserialize query string…"); the handlers of
//! `api/` use these instead, so that every refusal of the HTTP API has the JSON error shape,
//! as do a wrong method ([`method_not_allowed`]) and an unknown route (the router's fallback).
//! (The Svix API under `/api/v1/` answers in Svix's shape, `svix/mod.rs`.)

use std::ops::Deref;

use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::StatusCode;
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::ApiError;

/// The query string as `T`; a missing or malformed parameter is a 400 `invalid_query` that
/// names it.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Query<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _state: &S) -> Result<Self, ApiError> {
        let query = parts.uri.query().unwrap_or_default();
        let parameters = serde_urlencoded::Deserializer::new(form_urlencoded::parse(query.as_bytes()));
        serde_path_to_error::deserialize(parameters)
            .map(Query)
            .map_err(|e| {
                let message = match e.path().to_string().as_str() {
                    "." => format!("the query string is invalid: {}", e.inner()),
                    parameter => format!("query parameter `{parameter}`: {}", e.inner()),
                };
                ApiError::bad_request("invalid_query", message)
            })
    }
}

/// The route's path parameters as `T`; one that does not decode (`%FF` in a name) is a 400
/// `invalid_path`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Path<T>(pub(crate) T);

impl<T: DeserializeOwned + Send, S: Send + Sync> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| Path(value))
            .map_err(|e| ApiError::new(e.status(), "invalid_path", e.body_text()))
    }
}

/// A JSON body as `T` (a 400 `malformed_body` when it is not, a 415 without `Content-Type:
/// application/json`), and a JSON answer.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Json<T>(pub(crate) T);

impl<T: DeserializeOwned, S: Send + Sync> FromRequest<S> for Json<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        use axum::extract::rejection::JsonRejection as R;
        match axum::Json::<T>::from_request(request, state).await {
            Ok(axum::Json(value)) => Ok(Json(value)),
            Err(R::MissingJsonContentType(e)) => Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                e.body_text(),
            )),
            Err(R::BytesRejection(e)) => Err(body_refused(e)),
            Err(e) => Err(ApiError::bad_request("malformed_body", e.body_text())),
        }
    }
}

impl<T: Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        axum::Json(self.0).into_response()
    }
}

/// The raw body (axum's `Bytes`, which names the body's type in these files too); one over
/// axum's limit is a 413 `payload_too_large`.
#[derive(Debug, Clone, Default)]
pub(crate) struct BodyBytes(pub(crate) bytes::Bytes);

impl Deref for BodyBytes {
    type Target = bytes::Bytes;

    fn deref(&self) -> &bytes::Bytes {
        &self.0
    }
}

impl<S: Send + Sync> FromRequest<S> for BodyBytes {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        bytes::Bytes::from_request(request, state)
            .await
            .map(BodyBytes)
            .map_err(body_refused)
    }
}

fn body_refused(e: axum::extract::rejection::BytesRejection) -> ApiError {
    let code = match e.status() {
        StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
        _ => "unreadable_body",
    };
    ApiError::new(e.status(), code, e.body_text())
}

/// What a route answers to a method it does not have: a 405 in the JSON error shape (axum adds
/// the `Allow` header), or in Svix's under its paths.
pub(super) async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    let message = format!("`{method}` is not a method of `{}`", uri.path());
    if super::svix::is_svix_path(uri.path()) {
        return super::svix::SvixError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", message)
            .into_response();
    }
    ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", message).into_response()
}

#[cfg(test)]
mod tests {
    /// A handler of hookgate's API that takes axum's `Query`, `Path` or `Json` again would
    /// answer a bad parameter or body in `text/plain`: no file of `api/` imports them from
    /// `axum::extract` (the Svix API's files, in `svix/`, have their own shape).
    #[test]
    fn no_handler_of_the_api_takes_axums_own_extractors() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src/api");
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|e| e != "rs") || path.ends_with("extract.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for line in text.lines().filter(|l| l.starts_with("use axum::extract")) {
                for name in ["Query", "Path", "Json"] {
                    assert!(
                        !line
                            .split(|c: char| !c.is_alphanumeric())
                            .any(|word| word == name),
                        "{}: `{line}`: use super::extract::{name}",
                        path.display()
                    );
                }
            }
        }
    }
}
