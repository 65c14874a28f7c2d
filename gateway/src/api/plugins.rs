//! `GET /v1/plugins`: what is loaded from the plugin folder right now.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use crate::model::Timestamp;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_plugins))
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PluginView {
    /// The file name without `.wasm`; what endpoints bind.
    name: String,
    /// transformer, signer or backoff.
    world: String,
    /// SHA-256 of the file: the version attempts record.
    sha256: String,
    size_bytes: u64,
    #[schema(value_type = String, format = DateTime)]
    loaded_at: Timestamp,
}

/// A plugin file that failed to load; the previous version, if any, keeps serving.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct RejectedView {
    name: String,
    /// SHA-256 of the refused file.
    sha256: String,
    error: String,
    #[schema(value_type = String, format = DateTime)]
    at: Timestamp,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PluginList {
    plugins: Vec<PluginView>,
    /// Files in the folder that failed to load, with why.
    rejected: Vec<RejectedView>,
    /// The folder that is watched.
    dir: String,
}

/// The plugins loaded from the plugin folder, with the version each one serves.
#[utoipa::path(get, path = "/v1/plugins", tag = "plugins",
    responses((status = 200, description = "Loaded plugins", body = PluginList)))]
async fn list_plugins(State(state): State<AppState>) -> Json<PluginList> {
    let host = &state.attempts.plugins;
    let mut plugins: Vec<PluginView> = host
        .loaded()
        .into_iter()
        .map(|p| PluginView {
            name: p.name,
            world: p.world.as_str().to_owned(),
            sha256: p.sha256,
            size_bytes: p.size_bytes,
            loaded_at: p.loaded_at,
        })
        .collect();
    plugins.sort_by(|a, b| a.name.cmp(&b.name));
    let rejected = host
        .rejected()
        .into_iter()
        .map(|r| RejectedView {
            name: r.name,
            sha256: hex::encode(r.sha256),
            error: r.error,
            at: r.at,
        })
        .collect();
    Json(PluginList {
        plugins,
        rejected,
        dir: host.dir().display().to_string(),
    })
}
