//! Liveness, Prometheus metrics and the runtime status.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use std::sync::Arc;

use super::AppState;
use super::views::{ClusterNodesView, NodeView};
use crate::model::{EndpointState, Timestamp};
use crate::reload::ReloadStatus;
use crate::store::{KeyListing, KeyState};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
        .routes(routes!(readyz))
        .routes(routes!(metrics))
        .routes(routes!(status))
        .routes(routes!(cluster))
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Liveness {
    status: &'static str,
}

/// Liveness: 200 while the gateway serves.
#[utoipa::path(get, path = "/healthz", tag = "ops", security(()),
    responses((status = 200, description = "Alive", body = Liveness)))]
async fn healthz() -> Json<Liveness> {
    Json(Liveness { status: "ok" })
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Readiness {
    /// `ready` or `not_ready`.
    status: &'static str,
    /// Why not: `storage_unavailable` (the store takes no writes: a full disk or
    /// `storage.max_size`, an I/O error, a failed fsync; on PostgreSQL a database that does
    /// not answer) or `stopping`.
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
}

/// Readiness: 200 when the gateway can take events, 503 with the reason while it cannot — for
/// a load balancer, which should stop sending it events meanwhile. Liveness is `/healthz`: a
/// node that is not ready recovers by itself once the disk or the database is back, so it
/// should not be restarted for it.
#[utoipa::path(get, path = "/readyz", tag = "ops", security(()),
    responses((status = 200, description = "Ready to take events", body = Readiness),
              (status = 503, description = "Not ready, and why", body = Readiness)))]
async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<Readiness>) {
    let not_ready = |reason, message| {
        let body = Readiness {
            status: "not_ready",
            reason: Some(reason),
            message: Some(message),
        };
        (StatusCode::SERVICE_UNAVAILABLE, Json(body))
    };
    if state.status.lock().expect("status lock").stopping {
        return not_ready("stopping", "the gateway is shutting down".to_owned());
    }
    match state.store.check_writable().await {
        Ok(()) => (
            StatusCode::OK,
            Json(Readiness {
                status: "ready",
                reason: None,
                message: None,
            }),
        ),
        Err(e) => not_ready("storage_unavailable", e.to_string()),
    }
}

/// Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "ops", security(()),
    responses((status = 200, description = "Metrics", content_type = "text/plain", body = String)))]
async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    // Gauges that are cheaper to read at scrape time than to keep up to date.
    ordering_gauges(&state).await;
    state
        .metrics
        .queue_depth()
        .set(state.scheduler.queue_depth() as f64);
    endpoint_state_gauges(&state);
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// `hookgate_endpoints{state}`, and `hookgate_endpoint_state` of each endpoint that is not
/// active or was not at the last scrape: a gateway of a million endpoints does not export four
/// million series, and the endpoints that need attention stand out.
fn endpoint_state_gauges(state: &AppState) {
    let not_active: Vec<(Arc<str>, EndpointState)> = state
        .scheduler
        .not_active()
        .into_iter()
        .filter(|(name, _)| state.endpoints.contains(name))
        .collect();
    let mut shown = state.state_gauges_shown.lock().expect("gauges lock");
    let recovered: Vec<Arc<str>> = shown
        .iter()
        .filter(|name| !not_active.iter().any(|(n, _)| n == *name))
        .cloned()
        .collect();
    let all = [
        EndpointState::Active,
        EndpointState::Degraded,
        EndpointState::Paused,
        EndpointState::Disabled,
    ];
    let current = not_active
        .iter()
        .map(|(name, s)| (name.clone(), *s))
        .chain(recovered.into_iter().map(|name| (name, EndpointState::Active)));
    for (name, current) in current {
        for s in all {
            state
                .metrics
                .endpoint_state(&name, s.as_str())
                .set(if s == current { 1.0 } else { 0.0 });
        }
    }
    *shown = not_active.iter().map(|(name, _)| name.clone()).collect();
    for s in all {
        let n = match s {
            EndpointState::Active => state.endpoints.len().saturating_sub(not_active.len()),
            other => not_active.iter().filter(|(_, st)| *st == other).count(),
        };
        state.metrics.endpoints_in_state(s.as_str()).set(n as f64);
    }
}

/// Keys the gauges look at per ordered endpoint and scrape.
const ORDERING_GAUGE_KEYS: u32 = 1000;

/// The ordering gauges of every ordered endpoint, from the store (so in a cluster every node
/// shows the same): blocked and held keys, and the age of the oldest event waiting behind
/// one. The store answers from the failed heads' index: the cost is the blocked keys'.
async fn ordering_gauges(state: &AppState) {
    let now = state.clock.now();
    for ep in state.endpoints.ordered() {
        let page = match state
            .store
            .ordering_keys(&ep.name, KeyListing::Blocked, None, ORDERING_GAUGE_KEYS)
            .await
        {
            Ok(page) => page,
            Err(e) => {
                tracing::debug!(endpoint = %ep.name, error = %e, "cannot read the ordering keys for the metrics");
                continue;
            }
        };
        let count = |s: KeyState| page.keys.iter().filter(|k| k.state() == s).count() as f64;
        let oldest = page
            .keys
            .iter()
            .filter_map(|k| k.oldest_waiting_at)
            .min()
            .map_or(0.0, |at| now.since(at).as_secs_f64());
        state
            .metrics
            .ordering_keys_blocked(&ep.name)
            .set(count(KeyState::Blocked));
        state
            .metrics
            .ordering_keys_held(&ep.name)
            .set(count(KeyState::Held));
        state.metrics.ordering_oldest_waiting(&ep.name).set(oldest);
    }
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct ReloadView {
    #[schema(value_type = String, format = DateTime)]
    at: Timestamp,
    ok: bool,
    /// `file:line: path: reason` lines of a refused reload.
    errors: Vec<String>,
    /// Settings the file changes that are read only at start; they apply after a restart.
    needs_restart: Vec<&'static str>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct StatusView {
    version: &'static str,
    /// The commit the binary was built from (`unknown` outside a git checkout).
    commit: &'static str,
    #[schema(value_type = Option<String>, format = DateTime)]
    started_at: Option<Timestamp>,
    /// The gateway's clock (simulated under --time-scale).
    #[schema(value_type = String, format = DateTime)]
    now: Timestamp,
    config_file: Option<String>,
    endpoints: usize,
    topics: usize,
    /// Deliveries the scheduler holds (waiting or in flight).
    queue_depth: u64,
    /// The worker threads this process runs on: `server.workers`, or one per CPU it may use.
    workers: usize,
    /// True when what runs is not the config file on disk (as last read): its last reload was
    /// refused (`last_reload.errors` say why), or it changes settings read only at start
    /// (`last_reload.needs_restart`).
    config_differs_from_file: bool,
    last_reload: Option<ReloadView>,
    /// What keeps parts of the config from working now, e.g. `endpoint billing binds transform
    /// plugin "cloudevent" which is not loaded`. Empty when all is well.
    problems: Vec<String>,
}

/// What the gateway is running: version, config, queue depth and the last config reload.
#[utoipa::path(get, path = "/v1/status", tag = "ops",
    responses((status = 200, description = "Status", body = StatusView)))]
async fn status(State(state): State<AppState>) -> Json<StatusView> {
    let config = state.config.load();
    let runtime = state.status.lock().expect("status lock").clone();
    Json(StatusView {
        version: env!("CARGO_PKG_VERSION"),
        commit: env!("HOOKGATE_COMMIT"),
        started_at: runtime.started_at,
        now: state.clock.now(),
        config_file: config.source.as_ref().map(|p| p.display().to_string()),
        endpoints: state.endpoints.len(),
        topics: config.topics.len(),
        queue_depth: state.scheduler.queue_depth(),
        workers: tokio::runtime::Handle::current().metrics().num_workers(),
        config_differs_from_file: runtime
            .last_reload
            .as_ref()
            .is_some_and(ReloadStatus::differs_from_file),
        last_reload: runtime.last_reload.map(|r| ReloadView {
            at: r.at,
            ok: r.ok,
            errors: r.errors,
            needs_restart: r.needs_restart,
        }),
        problems: runtime.binding_problems.iter().map(ToString::to_string).collect(),
    })
}

/// The nodes that share this gateway's database and how many endpoint leases each holds. On
/// SQLite, the one node.
#[utoipa::path(get, path = "/v1/cluster", tag = "ops",
    responses((status = 200, description = "Nodes", body = ClusterNodesView)))]
async fn cluster(State(state): State<AppState>) -> Json<ClusterNodesView> {
    let endpoints = state.endpoints.len();
    let nodes = state.cluster.nodes(state.clock.now(), endpoints);
    Json(ClusterNodesView {
        nodes: nodes
            .into_iter()
            .map(|(node, node_state)| NodeView::new(node, node_state))
            .collect(),
    })
}
