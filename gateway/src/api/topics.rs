//! `GET /v1/topics`: the topics apps may post to, with their policy and subscribers.

use axum::extract::State;
use axum::{Extension, Json};
use serde::Serialize;
use utoipa::ToSchema;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

use super::AppState;
use super::auth::Caller;

pub(super) fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(list_topics))
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TopicView {
    name: String,
    /// The topic's own policy; null when its deliveries use their endpoint's or `standard`.
    policy: Option<String>,
    /// The endpoints subscribed to it, by name.
    endpoints: Vec<String>,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TopicList {
    topics: Vec<TopicView>,
    /// Always null: every topic fits on one page.
    next_cursor: Option<String>,
}

/// Every topic of the config, by name.
#[utoipa::path(get, path = "/v1/topics", tag = "topics",
    responses((status = 200, description = "All topics", body = TopicList)))]
async fn list_topics(State(state): State<AppState>, Extension(caller): Extension<Caller>) -> Json<TopicList> {
    let config = state.config.load();
    let topics = config
        .topics
        .iter()
        .map(|(name, topic)| TopicView {
            name: name.clone(),
            policy: topic.policy.clone(),
            endpoints: config
                .endpoints
                .values()
                .filter(|ep| ep.topics.contains(name) && caller.sees(ep.tenant.as_deref()))
                .map(|ep| ep.name.to_string())
                .collect(),
        })
        .collect();
    Json(TopicList {
        topics,
        next_cursor: None,
    })
}
