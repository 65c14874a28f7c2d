//! Bearer API keys and per-key rate limits.
//!
//! With `server.api_keys` empty (allowed only on a loopback listener) every caller is
//! `anonymous`. Otherwise a request without `Authorization` gets 401 and one with a wrong key 403.
//! `/healthz`, `/metrics` and `/openapi.json` stay open so probes and scrapers need no key.
//! A caller's scope — what idempotency keys and rate limits are counted per — is a short hash of
//! its key, never the key.

use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use sha2::{Digest, Sha256};
use utoipa::Modify;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};

use super::{ApiError, AppState};

/// Who is calling, as far as idempotency and rate limits are concerned.
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub(crate) scope: String,
}

const OPEN_PATHS: &[&str] = &["/healthz", "/metrics", "/openapi.json"];

pub(super) async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let config = state.config.load();
    if config.server.api_keys.is_empty() || OPEN_PATHS.contains(&request.uri().path()) {
        request.extensions_mut().insert(Caller {
            scope: "anonymous".into(),
        });
        return next.run(request).await;
    }
    let Some(presented) = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
    else {
        let mut response = ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send `Authorization: Bearer <api key>`",
        )
        .into_response();
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    };
    let presented_hash = Sha256::digest(presented.as_bytes());
    // Compare hashes in constant time, so the answer's timing says nothing about the keys.
    let known = config.server.api_keys.iter().any(|key| {
        let key_hash = Sha256::digest(key.expose().as_bytes());
        key_hash
            .iter()
            .zip(presented_hash.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    });
    if !known {
        return ApiError::new(StatusCode::FORBIDDEN, "forbidden", "the API key is not valid").into_response();
    }
    request.extensions_mut().insert(Caller {
        scope: hex::encode(&presented_hash[..8]),
    });
    next.run(request).await
}

/// Per-API-key ingestion rate limits (`server.rate_limit_per_key`), rebuilt when the limit in
/// the config changes.
#[derive(Clone, Default)]
pub(crate) struct RateLimits {
    current: Arc<Mutex<Option<KeyedLimit>>>,
}

/// A limiter and the rate it was built for.
type KeyedLimit = (u32, Arc<DefaultKeyedRateLimiter<String>>);

impl RateLimits {
    /// Ok, or a 429 with `Retry-After` when the caller is over its limit.
    pub(crate) fn check(&self, caller: &Caller, limit_per_second: Option<u32>) -> Result<(), ApiError> {
        let Some(rate) = limit_per_second.and_then(NonZeroU32::new) else {
            return Ok(());
        };
        let limiter = {
            let mut current = self.current.lock().expect("rate limit lock");
            match &*current {
                Some((r, limiter)) if *r == rate.get() => limiter.clone(),
                _ => {
                    let limiter = Arc::new(RateLimiter::keyed(Quota::per_second(rate)));
                    *current = Some((rate.get(), limiter.clone()));
                    limiter
                }
            }
        };
        limiter.check_key(&caller.scope).map_err(|not_until| {
            let wait = not_until.wait_time_from(governor::clock::Clock::now(
                &governor::clock::DefaultClock::default(),
            ));
            ApiError {
                retry_after: Some(wait.as_secs().max(1)),
                ..ApiError::new(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limited",
                    format!("over the limit of {rate} requests per second for this API key"),
                )
            }
        })
    }
}

/// Declares the bearer scheme in the OpenAPI document.
pub(super) struct BearerScheme;

impl Modify for BearerScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "api_key",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
        openapi.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new::<
            _,
            _,
            &str,
        >("api_key", [])]);
    }
}
