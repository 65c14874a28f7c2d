//! Bearer API keys, console tokens and per-key rate limits.
//!
//! With `server.api_keys` empty (allowed only on a loopback listener) every caller is
//! `anonymous`. Otherwise a request without `Authorization` gets 401 and one with a wrong key 403.
//! `/healthz`, `/readyz`, `/metrics` and `/openapi.json` stay open so probes and scrapers need no
//! key.
//! A caller's scope — what idempotency keys and rate limits are counted per — is a short hash of
//! its key, never the key.
//!
//! A tenant's key, or a console token, makes a tenant caller: it may call only the routes of
//! [`tenant_may_call`] (everything else is 403 `admin_only`), and the handlers show it only
//! its tenant's endpoints, deliveries and events (anything else is 404, as if it did not exist).

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

use super::tokens::{CONSOLE_TOKEN_PREFIX, TokenError, TokenKeys};
use super::{ApiError, AppState};

/// Who is calling: what idempotency keys and rate limits are counted per, and the tenant it
/// is limited to (None: an admin).
#[derive(Debug, Clone)]
pub(crate) struct Caller {
    pub(crate) scope: String,
    pub(crate) tenant: Option<String>,
    /// Whether a console token (an app portal's) rather than an API key is calling.
    pub(crate) console_token: bool,
    /// A console token's feature flags (Svix's app portal `featureFlags`).
    pub(crate) feature_flags: Vec<String>,
}

impl Caller {
    /// The caller of a request that passed [`authenticate`] (handlers taking the whole request
    /// cannot take the `Extension` too).
    pub(crate) fn of(request: &Request) -> Caller {
        request
            .extensions()
            .get::<Caller>()
            .cloned()
            .expect("authenticate sets the caller")
    }

    /// Whether this caller may see something of `tenant` (None: of no tenant).
    pub(crate) fn sees(&self, tenant: Option<&str>) -> bool {
        self.tenant.is_none() || self.tenant.as_deref() == tenant
    }

    /// The tenant a list shows: a tenant caller's own, or what an admin asked for.
    pub(crate) fn tenant_filter(&self, asked: Option<String>) -> Option<String> {
        self.tenant.clone().or(asked)
    }

    /// Whether this caller may see an event type flagged `flags`: as Svix's app portal tokens
    /// do, a console token sees a flagged type only if it holds one of its flags; a type
    /// without flags, and every type for an API key, is seen.
    pub(crate) fn sees_flagged(&self, flags: &[String]) -> bool {
        !self.console_token || flags.is_empty() || flags.iter().any(|f| self.feature_flags.contains(f))
    }
}

const OPEN_PATHS: &[&str] = &[
    "/healthz",
    "/readyz",
    "/metrics",
    "/openapi.json",
    "/api/v1/health",
    "/api/v1/health/ping",
];

/// Open paths beside [`OPEN_PATHS`]: the console's static files, which hold no data (the
/// console calls the API with the user's key or token like any client).
const OPEN_PREFIXES: &[&str] = &["/console"];

/// The routes a tenant caller may call; every other route is an admin's. New routes are
/// admin-only until listed here (and scoped in their handler).
pub(crate) fn tenant_may_call(method: &axum::http::Method, path: &str) -> bool {
    use axum::http::Method;
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    match segments.as_slice() {
        ["v1", "topics", _, "events"] | ["v1", "topics", _, "events", "batch"] => method == Method::POST,
        ["v1", "topics"]
        | ["v1", "policies"]
        | ["v1", "policies", _, "preview" | "chart.svg"]
        | ["v1", "events", _]
        | ["v1", "stats"]
        | ["v1", "me"] => method == Method::GET,
        ["v1", "deliveries", ..] | ["v1", "endpoints", ..] => true,
        ["v1", "event-types", ..] => method == Method::GET,
        // The Svix API: a tenant reads the catalog and its own application, and manages what
        // is under it (each handler answers 404 for another tenant's application); creating,
        // changing or deleting applications and portal links are an admin's.
        ["api", "v1", "event-type", ..] | ["api", "v1", "app"] | ["api", "v1", "app", _] => {
            method == Method::GET
        }
        ["api", "v1", "app", _, ..] => true,
        _ => false,
    }
}

/// A refusal in the shape of the API the path belongs to: Svix's for `/api/v1/…`.
fn refusal(path: &str, error: ApiError) -> Response {
    if super::svix::is_svix_path(path) {
        super::svix::SvixError::from(error).into_response()
    } else {
        error.into_response()
    }
}

pub(super) async fn authenticate(
    State(state): State<AppState>,
    mut request: Request,
    next: Next,
) -> Response {
    let config = state.config.load();
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim);
    let path = request.uri().path();
    let under = |prefix: &str| {
        path.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
    };
    if OPEN_PATHS.contains(&path)
        || OPEN_PREFIXES.iter().any(|p| under(p))
        || (config.server.api_keys.is_empty()
            && !presented.is_some_and(|p| p.starts_with(CONSOLE_TOKEN_PREFIX)))
    {
        request.extensions_mut().insert(Caller {
            scope: "anonymous".into(),
            tenant: None,
            console_token: false,
            feature_flags: Vec::new(),
        });
        return next.run(request).await;
    }
    let Some(presented) = presented else {
        let mut response = refusal(
            path,
            ApiError::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "send `Authorization: Bearer <api key>`",
            ),
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    };
    let caller = match identify(&state, &config.server, presented) {
        Ok(caller) => caller,
        Err(mut error) => {
            // Svix answers an unknown or invalid token 401, and its SDKs raise by that status.
            if super::svix::is_svix_path(path) && error.status == StatusCode::FORBIDDEN {
                error.status = StatusCode::UNAUTHORIZED;
            }
            return refusal(path, error);
        }
    };
    if caller.tenant.is_some() && !tenant_may_call(request.method(), path) {
        return refusal(
            path,
            ApiError::new(
                StatusCode::FORBIDDEN,
                "admin_only",
                "this route needs an admin API key; a tenant's key or console token cannot call it",
            ),
        );
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// The caller a presented key or console token stands for.
fn identify(
    state: &AppState,
    server: &crate::config::ServerConfig,
    presented: &str,
) -> Result<Caller, ApiError> {
    let presented_hash = Sha256::digest(presented.as_bytes());
    let scope = hex::encode(&presented_hash[..8]);
    if presented.starts_with(CONSOLE_TOKEN_PREFIX) {
        let keys = TokenKeys::of(server, &state.console_fallback_key);
        return match keys.verify(presented, state.clock.now()) {
            Ok(claims) => Ok(Caller {
                scope,
                tenant: Some(claims.tenant),
                console_token: true,
                feature_flags: claims.feature_flags,
            }),
            Err(TokenError::Expired) => Err(ApiError::new(
                StatusCode::UNAUTHORIZED,
                "token_expired",
                "the console token has expired; ask for a new link",
            )),
            Err(TokenError::Invalid) => Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "forbidden",
                "the console token is not valid",
            )),
        };
    }
    // Compare hashes in constant time, so the answer's timing says nothing about the keys.
    let known = server.api_keys.iter().find(|key| {
        let key_hash = Sha256::digest(key.key.expose().as_bytes());
        key_hash
            .iter()
            .zip(presented_hash.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b))
            == 0
    });
    match known {
        Some(key) => Ok(Caller {
            scope,
            tenant: key.tenant.clone(),
            console_token: false,
            feature_flags: Vec::new(),
        }),
        None => Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "the API key is not valid",
        )),
    }
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
