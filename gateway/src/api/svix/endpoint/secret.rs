//! `/endpoint/{endpoint_id}/secret`: the endpoint's signing secret, shown and rotated.

use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::super::extract::{AppEndpoint, AppPath, EndpointPath, Idempotent};
use super::super::{SvixError, SvixResult, body, json};
use crate::api::AppState;
use crate::delivery::signing;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(get_secret))
        .routes(routes!(rotate_secret))
}

/// A Svix secret in its `whsec_` form (base64 of 24 to 75 bytes, with or without the
/// prefix), or a `whsk_` Ed25519 private key.
pub(super) fn whsec(secret: &str) -> SvixResult<String> {
    if secret.starts_with(signing::WHSK_PREFIX) {
        return match signing::ed25519_key(&crate::model::Secret::new(secret)) {
            Ok(_) => Ok(secret.to_owned()),
            Err(e) => Err(SvixError::invalid(&["body", "secret"], e.to_string())),
        };
    }
    let raw = secret.strip_prefix("whsec_").unwrap_or(secret);
    let ok = (32..=100).contains(&raw.len())
        && raw
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '/' | '='));
    if ok {
        Ok(format!("whsec_{raw}"))
    } else {
        Err(SvixError::invalid(
            &["body", "secret"],
            "must be base64 (32 to 100 characters), optionally prefixed with `whsec_`",
        ))
    }
}

/// `EndpointSecretOut`.
#[derive(Debug, Serialize, ToSchema)]
struct SecretOut {
    key: String,
}

/// The endpoint's signing secret (`whsec_…`).
#[utoipa::path(get, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/secret", tag = "svix",
    params(AppPath, EndpointPath),
    responses((status = 200, description = "The secret", body = SecretOut)))]
async fn get_secret(AppEndpoint { ep, .. }: AppEndpoint) -> SvixResult<Response> {
    let secret = ep.secrets.first().ok_or_else(SvixError::not_found)?;
    Ok(json(
        StatusCode::OK,
        &SecretOut {
            key: shown_key(secret.expose())?,
        },
    ))
}

/// A secret as Svix shows it: an Ed25519 endpoint's public `whpk_` key (receivers need no
/// more, and the private key stays in the gateway), an HMAC secret as it is.
fn shown_key(secret: &str) -> SvixResult<String> {
    if !secret.starts_with(signing::WHSK_PREFIX) {
        return Ok(secret.to_owned());
    }
    signing::ed25519_public_key(&crate::model::Secret::new(secret))
        .map_err(|e| SvixError::new(StatusCode::INTERNAL_SERVER_ERROR, "server_error", e.to_string()))
}

#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RotateIn {
    key: Option<String>,
    grace_period_seconds: Option<u64>,
}

/// A new secret (the one given, or a generated one of the endpoint's kind); the old one keeps
/// signing beside it for the grace period (24 hours unless asked). Answers 200 with the new
/// key: svix-server answers 204 without a body, but Svix's official SDKs (2.x) read the key
/// from the answer and fail on an empty one.
#[utoipa::path(post, path = "/api/v1/app/{app_id}/endpoint/{endpoint_id}/secret/rotate", tag = "svix", request_body = super::super::SvixJson,
    params(AppPath, EndpointPath),
    responses((status = 200, description = "The new secret", body = SecretOut)))]
async fn rotate_secret(
    State(state): State<AppState>,
    idem: Idempotent,
    AppEndpoint { ep, .. }: AppEndpoint,
    bytes: Bytes,
) -> SvixResult<Response> {
    let input: RotateIn = body(&bytes)?;
    let key = input.key.as_deref().map(whsec).transpose()?;
    let ed25519 = ep.signature == signing::SignatureScheme::Ed25519;
    if key
        .as_deref()
        .is_some_and(|k| k.starts_with(signing::WHSK_PREFIX) != ed25519)
    {
        return Err(SvixError::invalid(
            &["body", "key"],
            "the new key must be of the endpoint's kind (whsec_ for HMAC, whsk_ for Ed25519): \
             set a key of the other kind with a patch of `secret`",
        ));
    }
    let overlap = input
        .grace_period_seconds
        .map_or(crate::endpoint_admin::DEFAULT_OVERLAP, Duration::from_secs);
    let saved = state
        .endpoint_admin
        .rotate_secret(&ep.name, key, overlap, None)
        .await?;
    let key = saved
        .secret
        .or_else(|| saved.endpoint.secrets.first().map(|s| s.expose().to_owned()))
        .unwrap_or_default();
    let out = SecretOut {
        key: shown_key(&key)?,
    };
    Ok(idem.answer(StatusCode::OK, &out).await)
}
