//! Liveness, Prometheus metrics and the runtime status.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::views::{ClusterNodesView, NodeView};
use crate::model::{EndpointState, Timestamp};
use crate::reload::ReloadStatus;
use crate::store::{KeyListing, KeyState};

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(healthz))
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
    let config = state.config.load();
    for name in config.endpoints.keys() {
        let current = state.scheduler.health_of(name).state;
        for s in [
            EndpointState::Active,
            EndpointState::Degraded,
            EndpointState::Paused,
            EndpointState::Disabled,
        ] {
            state
                .metrics
                .endpoint_state(name, s.as_str())
                .set(if s == current { 1.0 } else { 0.0 });
        }
    }
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// Keys the gauges look at per ordered endpoint and scrape.
const ORDERING_GAUGE_KEYS: u32 = 1000;

/// The ordering gauges of every ordered endpoint, from the store (so in a cluster every node
/// shows the same): blocked and held keys, and the age of the oldest event waiting behind
/// one. The store answers from the failed heads' index: the cost is the blocked keys'.
async fn ordering_gauges(state: &AppState) {
    let config = state.config.load_full();
    let now = state.clock.now();
    for ep in config.endpoints.values().filter(|ep| ep.ordered) {
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
        endpoints: config.endpoints.len(),
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
    let endpoints = state.config.load().endpoints.len();
    let nodes = state.cluster.nodes(state.clock.now(), endpoints);
    Json(ClusterNodesView {
        nodes: nodes
            .into_iter()
            .map(|(node, node_state)| NodeView::new(node, node_state))
            .collect(),
    })
}
