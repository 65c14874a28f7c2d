//! `GET /v1/topics`: the topics apps may post to, with their policy and how many endpoints
//! subscribe (`GET /v1/endpoints?topic=` pages through them).

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
    /// How many endpoints subscribe to it (a tenant's key: how many of its own):
    /// `GET /v1/endpoints?topic=NAME` lists them, a page at a time.
    subscribers: usize,
}

#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TopicList {
    topics: Vec<TopicView>,
    /// Always null: the topics are the config file's, and all fit on one page.
    next_cursor: Option<String>,
}

/// Every topic of the config, by name, with how many endpoints subscribe to it.
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
            subscribers: state.endpoints.topic_len(name, caller.tenant.as_deref()),
        })
        .collect();
    Json(TopicList {
        topics,
        next_cursor: None,
    })
}
