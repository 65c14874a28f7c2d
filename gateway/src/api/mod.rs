//! The HTTP API (axum on hyper). The only module that knows the JSON shapes.
//!
//! One file per resource, each with its own router; the routes are registered through
//! `utoipa-axum`, so the OpenAPI document at `/openapi.json` is generated from the very
//! handlers that serve them and cannot drift from them.

mod auth;
mod deliveries;
mod endpoint_filter;
mod endpoints;
mod error;
mod event_types;
mod events;
mod extract;
mod idempotency;
mod ops;
mod ordering;
mod plugins;
mod policies;
mod stats;
mod svix;
mod tenants;
mod tokens;
mod topics;
pub(crate) mod views;

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use axum::Router;
use utoipa::OpenApi;
use utoipa_axum::router::OpenApiRouter;

pub use error::ApiError;
pub use events::{BodyForm, parse_body};
pub use tokens::CONSOLE_TOKEN_PREFIX;

pub use crate::reload::{ReloadStatus, RuntimeStatus};

use self::auth::BearerScheme;

use crate::attempt::AttemptEnv;
use crate::clock::Clock;
use crate::config::Config;
use crate::ingest::Ingestor;
use crate::recovery::Recovery;
use crate::scheduler::SchedulerHandle;
use crate::store::Store;
use crate::telemetry::Metrics;

/// What the handlers share: one `Arc`, because axum clones the state for every request and
/// every extractor (cloning the parts one by one cost 2–3 % of a request's CPU).
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0
    }
}

/// The parts of [`AppState`]: the gateway's parts the API serves from (reached through
/// `Deref`), and the API's own.
pub struct Shared {
    deps: ApiDeps,
    pub(crate) idempotency: idempotency::InFlight,
    /// The applications Svix messages were sent to lately.
    pub(crate) svix_apps: svix::AppCache,
    pub(crate) rate_limits: auth::RateLimits,
    /// Signs console tokens when the config has neither console keys nor admin keys.
    pub(crate) console_fallback_key: crate::model::Secret,
    /// The endpoints whose `hookgate_endpoint_state` the last scrape showed not active.
    pub(crate) state_gauges_shown: Mutex<Vec<Arc<str>>>,
}

impl std::ops::Deref for Shared {
    type Target = ApiDeps;

    fn deref(&self) -> &ApiDeps {
        &self.deps
    }
}

#[derive(OpenApi)]
#[openapi(
    info(
        title = "hookgate",
        description = "Webhook delivery gateway: ingest events, deliver them with retries, watch endpoint health, recover missed events."
    ),
    components(schemas(error::ErrorBody)),
    modifiers(&BearerScheme)
)]
struct ApiDoc;

/// The API's router and its OpenAPI document.
pub fn router(state: AppState) -> (Router, utoipa::openapi::OpenApi) {
    let (routes, openapi) = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(events::router())
        .merge(deliveries::router())
        .merge(endpoints::router())
        .merge(ordering::router())
        .merge(endpoint_filter::router())
        .merge(plugins::router())
        .merge(policies::router())
        .merge(topics::router())
        .merge(tenants::router())
        .merge(stats::router())
        .merge(ops::router())
        .merge(event_types::router())
        .merge(svix::router())
        .split_for_parts();
    let doc = Arc::new(openapi.clone());
    let router = routes
        .route(
            "/openapi.json",
            axum::routing::get(move || {
                let doc = doc.clone();
                async move { axum::Json(doc.as_ref().clone()) }
            }),
        )
        .merge(crate::console::router())
        .merge(svix::unsupported_router())
        // Once every route is in, and before the layers, so that a wrong method is
        // authenticated like a right one: it answers in the JSON error shape too.
        .method_not_allowed_fallback(extract::method_not_allowed)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        .fallback(|| async { ApiError::not_found("route_not_found", "no such route") })
        .with_state(state);
    // Paths are rewritten before the router picks a route, so this wraps the whole router.
    let router = Router::new().fallback_service(
        tower::ServiceBuilder::new()
            .map_request(svix::trim_trailing_slash)
            .service(router),
    );
    (router, openapi)
}

/// An RFC 3339 time of a request, or a 400 `invalid_time` naming `field`.
pub(crate) fn parse_time(field: &str, text: &str) -> Result<crate::model::Timestamp, ApiError> {
    crate::model::Timestamp::parse_rfc3339(text)
        .map_err(|_| ApiError::bad_request("invalid_time", format!("`{field}` must be an RFC 3339 time")))
}

/// A JSON body that may be left empty (then every field takes its default); `what` names it in
/// the 400.
pub(crate) fn optional_json<T: Default + serde::de::DeserializeOwned>(
    body: &[u8],
    what: &str,
) -> Result<T, ApiError> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(body)
        .map_err(|e| ApiError::bad_request("malformed_body", format!("not {what}: {e}")))
}

/// The gateway's parts the API serves from.
pub struct ApiDeps {
    pub(crate) config: Arc<ArcSwap<Config>>,
    /// The running endpoints (the file's and those created through the API).
    pub(crate) endpoints: crate::endpoints::Endpoints,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) scheduler: SchedulerHandle,
    pub(crate) ingestor: Ingestor,
    pub(crate) recovery: Recovery,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) attempts: Arc<AttemptEnv>,
    pub(crate) metrics: Metrics,
    pub(crate) status: Arc<Mutex<RuntimeStatus>>,
    pub(crate) cluster: crate::cluster::ClusterView,
    pub(crate) endpoint_admin: crate::endpoint_admin::EndpointAdmin,
    /// The ingestion spans (and the ids of every request's trace).
    pub(crate) traces: crate::traces::Traces,
    /// The event type catalog, which checks payloads against their type's schema.
    pub(crate) event_types: crate::event_types::EventTypes,
}

impl AppState {
    /// An endpoint's health as the API shows it. In a cluster the database's: the node
    /// delivering the endpoint may be another, and this node learns only its state changes.
    pub(crate) async fn health_of(&self, endpoint: &str) -> crate::health::EndpointHealth {
        if let crate::cluster::ClusterView::Shared { .. } = self.cluster
            && let Some(cluster) = self.store.clone().cluster()
            && let Ok(Some(health)) = cluster.health_of(endpoint).await
        {
            return health;
        }
        self.scheduler.health_of(endpoint)
    }

    /// The health of each of `endpoints`, as [`AppState::health_of`] has it: in a cluster read
    /// in one query, for a page of a list.
    pub(crate) async fn health_of_each(&self, endpoints: &[&str]) -> Vec<crate::health::EndpointHealth> {
        if let crate::cluster::ClusterView::Shared { .. } = self.cluster
            && let Some(cluster) = self.store.clone().cluster()
            && let Ok(found) = cluster.health_of_each(endpoints).await
        {
            return endpoints
                .iter()
                .map(|e| {
                    found
                        .iter()
                        .find(|(name, _)| name == e)
                        .map_or_else(|| self.scheduler.health_of(e), |(_, h)| h.clone())
                })
                .collect();
        }
        endpoints.iter().map(|e| self.scheduler.health_of(e)).collect()
    }

    pub(crate) fn new(deps: ApiDeps) -> Self {
        AppState(Arc::new(Shared {
            deps,
            idempotency: idempotency::InFlight::default(),
            svix_apps: svix::AppCache::default(),
            rate_limits: auth::RateLimits::default(),
            console_fallback_key: crate::model::Secret::new(hex::encode(rand::random::<[u8; 32]>())),
            state_gauges_shown: Mutex::default(),
        }))
    }
}
