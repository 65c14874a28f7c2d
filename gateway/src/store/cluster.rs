//! What nodes sharing one database keep there to split the work: who is alive, which node
//! holds which endpoint's deliveries (a lease), and the notices one node sends the others when
//! it makes deliveries pending or changes an endpoint's state. The rules that use them live in
//! `crate::cluster`; this is only their storage.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::mpsc;

use super::{PendingDelivery, StoreResult};
use crate::health::EndpointHealth;
use crate::model::{DeliveryId, Event, Timestamp};

/// This node, as it announces itself.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    pub id: String,
    /// Where its API listens.
    pub address: String,
    pub started_at: Timestamp,
}

/// A node as the database lists it. Times are the database's clock, so that nodes whose
/// clocks differ still agree on who is alive.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    pub id: String,
    pub address: String,
    pub started_at: Timestamp,
    pub last_seen_at: Timestamp,
    /// Endpoint leases it holds now.
    pub leases: u32,
    /// When it stopped cleanly and said so; None while it runs, or once it died without a word.
    pub left_at: Option<Timestamp>,
}

/// Something another node did that this one may have to act on.
#[derive(Debug, Clone, PartialEq)]
pub enum ClusterNotice {
    /// Deliveries made pending, with their endpoints: new ones, or a new round of an old one.
    /// `own`: this node made them (its scheduler has them already, except those of ordered
    /// endpoints).
    Deliveries {
        ids: Vec<(Arc<str>, DeliveryId)>,
        own: bool,
    },
    /// Another node changed an endpoint's health state.
    Health(Arc<str>),
    /// Another node created, changed or deleted this endpoint through the API.
    Endpoint(Arc<str>),
    /// An operator's action on an ordering key, for the node that delivers its endpoint
    /// ([`ClusterStore::key_action_request`] reads it).
    KeyAction(i64),
}

/// An operator's action on an ordering key, asked of the node that delivers the endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct KeyActionRequest {
    pub endpoint: Arc<str>,
    pub key: String,
    /// `skip`, `retry` or `release`.
    pub action: String,
    /// The head it is meant for.
    pub delivery: Option<DeliveryId>,
}

/// The notices of other nodes, until the connection that brings them ends (then `next`
/// answers None, and notices may have been missed meanwhile).
pub struct Notices {
    pub(super) rx: mpsc::UnboundedReceiver<ClusterNotice>,
    /// Whatever keeps the stream open (the listening connection); dropping it closes it.
    pub(super) _keep: Box<dyn Any + Send>,
}

impl Notices {
    pub async fn next(&mut self) -> Option<ClusterNotice> {
        self.rx.recv().await
    }

    /// A notice that has arrived already, without waiting.
    pub fn try_next(&mut self) -> Option<ClusterNotice> {
        self.rx.try_recv().ok()
    }
}

#[async_trait]
pub trait ClusterStore: Send + Sync {
    /// This node's id, as its notices carry it.
    fn node_id(&self) -> &str;

    /// Records that this node is alive now; answers the database's time and every node it
    /// knows (those gone for an hour are forgotten).
    async fn heartbeat(&self, node: &NodeInfo) -> StoreResult<(Timestamp, Vec<NodeRow>)>;

    /// Gives back the leases of `release`, then takes or renews for `lease` those of `wanted`
    /// that are free, expired or this node's already. Answers every endpoint this node holds
    /// a live lease on afterwards.
    async fn hold_endpoints(
        &self,
        wanted: &[Arc<str>],
        release: &[Arc<str>],
        lease: Duration,
    ) -> StoreResult<Vec<Arc<str>>>;

    /// Records that this node is alive now and renews those of `endpoints` whose leases it
    /// still holds (it takes none): the renewal that keeps leases when the node's turn is late.
    /// Answers the endpoints renewed. Like [`ClusterStore::heartbeat`] and
    /// [`ClusterStore::hold_endpoints`], it runs on a connection of its own, never waiting
    /// for one that other queries use.
    async fn renew_leases(
        &self,
        node: &NodeInfo,
        endpoints: &[Arc<str>],
        lease: Duration,
    ) -> StoreResult<Vec<Arc<str>>>;

    /// Every pending delivery of these endpoints, oldest first.
    async fn pending_of(&self, endpoints: &[Arc<str>]) -> StoreResult<Vec<PendingDelivery>>;

    /// Those of these deliveries that are pending, oldest first, each with its event (one
    /// `Arc` per event, shared by its deliveries): a node takes another's deliveries in whole,
    /// so that their attempts need not read their events one by one.
    async fn pending_by_ids(&self, ids: &[DeliveryId]) -> StoreResult<Vec<(PendingDelivery, Arc<Event>)>>;

    async fn health_of(&self, endpoint: &str) -> StoreResult<Option<EndpointHealth>>;

    /// Every endpoint's health that the store keeps (endpoints never attempted have none), in
    /// one read: for a node that listens again after its notices broke off.
    async fn every_health(&self) -> StoreResult<Vec<(String, EndpointHealth)>>;

    /// The health the store keeps of each of these endpoints (those never attempted have none).
    async fn health_of_each(&self, endpoints: &[&str]) -> StoreResult<Vec<(String, EndpointHealth)>>;

    /// Every held ordering key, for a node taking endpoints over.
    async fn held_ordering_keys(&self) -> StoreResult<Vec<super::HeldKey>>;

    /// Writes an operator's action for the node that delivers its endpoint and sends its
    /// notice in the same commit; answers the request's id.
    async fn request_key_action(&self, request: &KeyActionRequest, now: Timestamp) -> StoreResult<i64>;

    /// A request not answered yet.
    async fn key_action_request(&self, id: i64) -> StoreResult<Option<KeyActionRequest>>;

    /// The delivering node's answer to a request.
    async fn answer_key_action(&self, id: i64, answer: &str) -> StoreResult<()>;

    /// The answer to a request once there, which removes the request; with `give_up`, the
    /// request is removed answered or not.
    async fn take_key_action_answer(&self, id: i64, give_up: bool) -> StoreResult<Option<String>>;

    /// Starts listening for the notices of other nodes.
    async fn listen(&self) -> StoreResult<Notices>;

    /// Gives back every lease of this node and marks it as left in the node list (a clean
    /// stop), where it stays, like a node that died, until it is forgotten.
    async fn leave(&self);
}
