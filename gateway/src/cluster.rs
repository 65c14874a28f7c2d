//! Several gateways on one PostgreSQL database share the work by endpoint. Each node announces
//! itself every third of `cluster.lease` (the `nodes` table, on the database's clock); every
//! node computes, from the same list of live nodes, which node should deliver each endpoint
//! (rendezvous hashing: a node joining or leaving moves only its share); and a node delivers
//! an endpoint only while it holds the endpoint's lease, renewed at every turn.
//!
//! Because one node at a time delivers an endpoint, its in-flight limit, rate limit, SNS
//! throttle and ordering keys hold for the whole cluster with the single-node code. A node
//! hands an endpoint over only once its attempts there have ended; a node that dies stops
//! renewing, and the next owner takes over once the lease has lapsed. A node that cannot
//! reach the database stops starting attempts before its leases can lapse.
//!
//! A node sends an endpoint's attempts only while it holds the lease by its own monotonic clock
//! (`crate::fence`): a node that was frozen, or cut off from the database, stops before any
//! other node may take its endpoints over, and a lease that lapsed here is taken anew, with the
//! endpoint's pending deliveries read again, before this node sends more of it. The heartbeat
//! and the renewals run on connections of their own, and a keeper renews the leases held
//! whenever the node's turn runs late (a slow database read, many notices, a turn's lease
//! transaction waiting for the lock that moves leases): the keeper has a connection of its
//! own beside the turn's, so it never waits for the turn it stands in for.
//!
//! Deliveries made pending on one node for an endpoint another node delivers reach the owner
//! by the commit's notice (`NOTIFY`); a node that gains an endpoint, or whose notice stream
//! broke, reads the endpoint's pending deliveries from the store. Health lives in the store,
//! which applies every input under a row lock; nodes learn each other's state changes by
//! notice. See docs/cluster.md.

mod key_actions;

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::endpoints::{Endpoints, Synced};
use crate::fence::Fence;
use crate::model::{DeliveryId, Event, Timestamp};
use crate::scheduler::SchedulerHandle;
use crate::store::{ClusterNotice, ClusterStore, NodeInfo, NodeRow, Notices, PendingDelivery};

pub use self::key_actions::relay as relay_key_action;

/// Notices about deliveries this node just read in full are ignored for this long: the
/// commit's notice can arrive after the read that already saw the delivery.
const RECENT_LOAD: Duration = Duration::from_secs(5);

/// The node list `GET /v1/cluster` shows.
#[derive(Clone)]
pub enum ClusterView {
    /// One node on SQLite: it delivers every endpoint.
    Solo(NodeInfo),
    /// The nodes of a cluster as last read from the database, judged with this lease.
    Shared {
        nodes: Arc<ArcSwap<NodeList>>,
        lease: Duration,
    },
}

impl ClusterView {
    /// Every node listed, with its state now.
    pub fn nodes(&self, now: Timestamp, endpoints: usize) -> Vec<(NodeRow, NodeState)> {
        match self {
            ClusterView::Solo(node) => vec![(
                NodeRow {
                    id: node.id.clone(),
                    address: node.address.clone(),
                    started_at: node.started_at,
                    last_seen_at: now,
                    leases: u32::try_from(endpoints).unwrap_or(u32::MAX),
                    left_at: None,
                },
                NodeState::Alive,
            )],
            ClusterView::Shared { nodes, lease } => {
                let list = nodes.load();
                let now = list.database_now();
                list.nodes
                    .iter()
                    .map(|n| (n.clone(), NodeState::of(n, now, *lease)))
                    .collect()
            }
        }
    }
}

/// The node list as a turn last read it, with the database's time then: a node's state is
/// judged on the database's clock, like its heartbeats, whatever this node's own says.
#[derive(Debug, Clone, Default)]
pub struct NodeList {
    pub nodes: Vec<NodeRow>,
    database_time: Timestamp,
    read: Option<Instant>,
}

impl NodeList {
    fn read(nodes: Vec<NodeRow>, database_time: Timestamp) -> NodeList {
        NodeList {
            nodes,
            database_time,
            read: Some(Instant::now()),
        }
    }

    /// The database's time now, from its time at the read and how long ago that was (a turn
    /// at most, while the node runs), without asking it.
    fn database_now(&self) -> Timestamp {
        self.database_time
            .plus(self.read.map_or(Duration::ZERO, |at| at.elapsed()))
    }
}

/// What a listed node is doing, as the others see it from its last heartbeat and the lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Seen within a lease: it delivers its endpoints.
    Alive,
    /// Not seen for longer than a lease (killed, frozen, cut off from the database): the
    /// others take its endpoints over at their next turn. Listed until it is forgotten, an
    /// hour after it was last seen, or until it comes back.
    Lapsed,
    /// It stopped cleanly and said so, giving its leases back.
    Left,
}

impl NodeState {
    pub fn of(node: &NodeRow, now: Timestamp, lease: Duration) -> NodeState {
        if node.left_at.is_some() {
            NodeState::Left
        } else if node.last_seen_at.plus(lease) > now {
            NodeState::Alive
        } else {
            NodeState::Lapsed
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Alive => "alive",
            NodeState::Lapsed => "lapsed",
            NodeState::Left => "left",
        }
    }
}

/// A node id for this start: the host's name and a random suffix.
pub fn generated_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "node".into());
    let host: String = host
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || "._-".contains(*c))
        .take(48)
        .collect();
    format!("{host}-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

/// Which live node should deliver `endpoint`: the one whose hash with it is highest
/// (rendezvous hashing). Every node computes the same from the same list.
pub fn owner_of<'a>(live: &[&'a str], endpoint: &str) -> Option<&'a str> {
    live.iter()
        .copied()
        .max_by_key(|node| (score(node, endpoint), *node))
}

/// The first 8 bytes of SHA-256 over `node \0 endpoint`: the same on every node and every
/// release (unlike the standard library's hasher), and well spread even for names that differ
/// in one character, which simpler hashes are not.
fn score(node: &str, endpoint: &str) -> u64 {
    use sha2::Digest;
    let mut h = sha2::Sha256::new();
    h.update(node.as_bytes());
    h.update([0]);
    h.update(endpoint.as_bytes());
    let digest = h.finalize();
    u64::from_be_bytes(digest[..8].try_into().expect("8 bytes"))
}

/// The task that keeps this node's place in the cluster.
pub struct ClusterTask {
    pub store: Arc<dyn ClusterStore>,
    pub node: NodeInfo,
    pub lease: Duration,
    pub scheduler: SchedulerHandle,
    pub config: Arc<ArcSwap<Config>>,
    pub view: Arc<ArcSwap<NodeList>>,
    /// Endpoints the scheduler delivers here.
    owned: HashSet<Arc<str>>,
    /// Endpoints given up whose attempts still run here: their leases are renewed until the
    /// attempts have ended (then the mark of the scheduler's state changes so far is taken)
    /// and their outcomes are committed (the changes through the mark), then given back.
    draining: HashMap<Arc<str>, Option<u64>>,
    /// Which leases this node holds by its own clock; shared with the scheduler.
    fence: Arc<Fence>,
    /// What the keeper renews, and when a renewal last succeeded.
    renewal: Arc<std::sync::Mutex<Renewal>>,
    /// Leases found lapsed by this node's clock.
    lapses: metrics::Counter,
    /// Deliveries read in full lately, with when.
    recent: Vec<(Instant, HashSet<(DeliveryId, u32)>)>,
    /// The running endpoints, which another node's change of one reaches by notice.
    endpoints: Endpoints,
}

impl ClusterTask {
    #[expect(
        clippy::too_many_arguments,
        reason = "the parts of the gateway a node's turn touches"
    )]
    pub fn new(
        store: Arc<dyn ClusterStore>,
        node: NodeInfo,
        lease: Duration,
        scheduler: SchedulerHandle,
        config: Arc<ArcSwap<Config>>,
        view: Arc<ArcSwap<NodeList>>,
        endpoints: Endpoints,
        fence: Arc<Fence>,
        metrics: &crate::telemetry::Metrics,
    ) -> ClusterTask {
        ClusterTask {
            store,
            node,
            lease,
            scheduler,
            config,
            view,
            endpoints,
            owned: HashSet::new(),
            draining: HashMap::new(),
            fence,
            renewal: Arc::default(),
            lapses: metrics.lease_lapses(),
            recent: Vec::new(),
        }
    }

    fn turn(&self) -> Duration {
        self.lease / 3
    }

    /// The first turn, before the node serves: it listens, announces itself and takes the
    /// endpoints it should deliver.
    pub async fn start(&mut self) -> Option<Notices> {
        let notices = self.listen().await;
        self.renew().await;
        notices
    }

    /// Runs until `shutdown`, from the first turn's notice stream. The node's leases are
    /// given back by the supervisor once the scheduler has stopped ([`ClusterStore::leave`]).
    pub async fn run(mut self, notices: Option<Notices>, shutdown: CancellationToken) {
        let keeper = Keeper {
            store: self.store.clone(),
            node: self.node.clone(),
            lease: self.lease,
            fence: self.fence.clone(),
            renewal: self.renewal.clone(),
        };
        tokio::join!(keeper.run(shutdown.clone()), self.turns(notices, shutdown));
    }

    async fn turns(&mut self, mut notices: Option<Notices>, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval_at(tokio::time::Instant::now() + self.turn(), self.turn());
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let scheduler = self.scheduler.clone();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {
                    if notices.is_none() {
                        notices = self.listen().await;
                    }
                    self.renew().await;
                }
                // Endpoints added by a reload are claimed at once, not a turn later; and an
                // endpoint created through the API (here, or by notice) alone.
                _ = scheduler.config_changed() => self.renew().await,
                changed = scheduler.changed_endpoints() => self.claim(changed).await,
                notice = next_notice(&mut notices) => match notice {
                    Some(first) => self.take_notices(first, notices.as_mut()).await,
                    None => {
                        tracing::warn!("the cluster notice stream ended; reconnecting");
                        notices = None;
                    }
                },
            }
        }
    }

    /// Opens the notice stream, then reads again what a broken stream may have missed: the
    /// pending deliveries of every endpoint delivered here, and every endpoint's health.
    async fn listen(&mut self) -> Option<Notices> {
        let notices = match self.store.listen().await {
            Ok(n) => n,
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for cluster notices; trying again");
                return None;
            }
        };
        for endpoint in std::mem::take(&mut self.owned) {
            self.let_go(endpoint);
        }
        self.sync_all_endpoints().await;
        match self.store.every_health().await {
            Ok(all) => {
                for (endpoint, health) in all {
                    self.scheduler.health_changed(Arc::from(endpoint), health);
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot read the endpoints' health after listening again"),
        }
        Some(notices)
    }

    /// One turn: announce this node, work out which endpoints it should deliver, renew and
    /// take their leases, give back what it no longer delivers, and load what it gained.
    async fn renew(&mut self) {
        self.note_lapse();
        let (now, mut nodes) = match self.store.heartbeat(&self.node).await {
            Ok(answer) => answer,
            Err(e) => return self.renewal_failed(&e),
        };
        let desired = self.desired(now, &nodes);
        let given_up: Vec<Arc<str>> = self
            .owned
            .iter()
            .filter(|e| !desired.contains(*e))
            .cloned()
            .collect();
        for endpoint in given_up {
            self.owned.remove(&endpoint);
            self.let_go(endpoint.clone());
            self.draining.insert(endpoint, None);
        }
        let release = self.drained();
        let wanted: Vec<Arc<str>> = desired.iter().chain(self.draining.keys()).cloned().collect();
        let asked = self.fence.now();
        let held = match self.store.hold_endpoints(&wanted, &release, self.lease).await {
            Ok(held) => held.into_iter().collect::<HashSet<_>>(),
            Err(e) => {
                self.view.store(Arc::new(NodeList::read(nodes, now)));
                return self.renewal_failed(&e);
            }
        };
        // The heartbeat counted this node's leases before this turn took any: the view shows
        // what it holds now, so that a node shows its leases as soon as it serves.
        if let Some(own) = nodes.iter_mut().find(|n| n.id == self.node.id) {
            own.leases = u32::try_from(held.len()).unwrap_or(u32::MAX);
        }
        self.view.store(Arc::new(NodeList::read(nodes, now)));
        // Leases of an earlier run under this node id: given back at the next turn.
        for stale in held.iter().filter(|e| !wanted.contains(*e)) {
            self.draining.insert(stale.clone(), Some(0));
        }
        let lost: Vec<Arc<str>> = self
            .owned
            .iter()
            .filter(|e| !held.contains(*e))
            .cloned()
            .collect();
        for endpoint in lost {
            tracing::warn!(endpoint = %endpoint, "another node took this endpoint's lease over");
            self.owned.remove(&endpoint);
            self.let_go(endpoint);
        }
        // A lease extended only if it still held here when the answer came; one that lapsed
        // (a pause, a slow database) may have been another node's meanwhile: what waits here
        // for it is dropped, and it is taken anew below, its pending deliveries read again.
        let lapsed: Vec<Arc<str>> = self
            .owned
            .iter()
            .filter(|e| !self.fence.renew(e, asked))
            .cloned()
            .collect();
        for endpoint in lapsed {
            tracing::warn!(endpoint = %endpoint, "this endpoint's lease lapsed by this node's clock; reading its deliveries again");
            self.owned.remove(&endpoint);
            self.let_go(endpoint);
        }
        let gained: Vec<Arc<str>> = desired
            .into_iter()
            .filter(|e| held.contains(e) && !self.owned.contains(e))
            .collect();
        for endpoint in &gained {
            self.fence.grant(endpoint.clone(), asked);
        }
        let keep: Vec<Arc<str>> = held.iter().filter(|e| wanted.contains(e)).cloned().collect();
        self.renewal.lock().expect("renewal lock").renewed(asked, keep);
        self.gain(gained).await;
    }

    /// Takes the leases of endpoints just created (here or on another node) that this node
    /// should deliver, by the node list of the last turn: one statement for those endpoints,
    /// not a turn over every endpoint. A changed or deleted endpoint needs nothing here (its
    /// lease stays with its node, and a deleted one's goes at the next turn).
    async fn claim(&mut self, changed: Vec<Arc<str>>) {
        let list = self.view.load_full();
        let live = live_nodes(&list.nodes, list.database_now(), self.lease, &self.node.id);
        let mine: Vec<Arc<str>> = changed
            .into_iter()
            .filter(|e| !self.owned.contains(e) && self.endpoints.contains(e))
            .filter(|e| owner_of(&live, e) == Some(self.node.id.as_str()))
            .collect();
        if mine.is_empty() {
            return;
        }
        let asked = self.fence.now();
        let held = match self.store.hold_endpoints(&mine, &[], self.lease).await {
            Ok(held) => held.into_iter().collect::<HashSet<_>>(),
            Err(e) => {
                tracing::warn!(error = %e, "cannot take the leases of new endpoints; the next turn tries again");
                return;
            }
        };
        let gained: Vec<Arc<str>> = mine.into_iter().filter(|e| held.contains(e)).collect();
        for endpoint in &gained {
            self.fence.grant(endpoint.clone(), asked);
        }
        self.renewal
            .lock()
            .expect("renewal lock")
            .endpoints
            .extend(gained.iter().cloned());
        self.gain(gained).await;
    }

    /// This node no longer sends the endpoint's attempts: the scheduler drops what waits for
    /// it, and the fence stops any attempt of it that has not been sent yet. Counted as a lapse
    /// when its lease had lapsed here already (whatever the reason it is let go now).
    fn let_go(&self, endpoint: Arc<str>) {
        if !self.fence.holds(&endpoint) {
            self.lapses.increment(1);
        }
        self.fence.revoke(&endpoint);
        self.scheduler.disown(endpoint);
    }

    /// Says so when this node's leases lapsed by its own clock since its last renewal: it was
    /// paused (a freeze, a VM migration) or could not reach the database.
    fn note_lapse(&self) {
        let last = self.renewal.lock().expect("renewal lock").at;
        if let Some(at) = last {
            let since = self.fence.now().saturating_duration_since(at);
            if since > self.lease - Fence::margin(self.lease) && !self.owned.is_empty() {
                tracing::warn!(
                    seconds = since.as_secs_f64(),
                    "no lease renewed for longer than a lease allows (a pause, or no database): this node sent nothing meanwhile and now asks for its leases again"
                );
            }
        }
    }

    /// Waits (up to a lease) until the outcomes decided so far are committed, so that a full
    /// read after it does not find deliveries this node has just made as still pending.
    async fn wait_committed(&self) {
        let mark = self.scheduler.changes_sent();
        let deadline = Instant::now() + self.lease;
        while !self.scheduler.changes_done_through(mark) && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The endpoints given up that may be handed over now (forgotten here): no attempt of
    /// theirs runs, and every outcome decided before that moment is committed.
    fn drained(&mut self) -> Vec<Arc<str>> {
        let mut release = Vec::new();
        for (endpoint, mark) in self.draining.iter_mut() {
            if mark.is_none() && self.scheduler.in_flight_for(endpoint) == 0 {
                *mark = Some(self.scheduler.changes_sent());
            }
            if mark.is_some_and(|m| self.scheduler.changes_done_through(m)) {
                release.push(endpoint.clone());
            }
        }
        for endpoint in &release {
            self.draining.remove(endpoint);
        }
        release
    }

    /// The endpoints this node should deliver, given the nodes alive (seen within a lease and
    /// not left).
    fn desired(&self, now: Timestamp, nodes: &[NodeRow]) -> HashSet<Arc<str>> {
        let live = live_nodes(nodes, now, self.lease, &self.node.id);
        self.endpoints
            .names()
            .into_iter()
            .filter(|e| owner_of(&live, e) == Some(self.node.id.as_str()))
            .collect()
    }

    /// Takes over endpoints whose leases this node now holds: the scheduler takes them, then
    /// their pending deliveries as read after that (see [`SchedulerHandle::own`]). An endpoint
    /// whose read fails is let go and tried again at the next turn.
    async fn gain(&mut self, gained: Vec<Arc<str>>) {
        if gained.is_empty() {
            return;
        }
        for endpoint in &gained {
            self.scheduler.own(endpoint.clone());
        }
        // The fence was granted with the hold: an endpoint whose read fails below is let go.
        // An endpoint taken back (after a broken notice stream or lost leases) may have
        // outcomes of this node's on their way to the store: read after they are there.
        self.wait_committed().await;
        let pending = match self.store.pending_of(&gained).await {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the pending deliveries of endpoints taken over; trying again");
                for endpoint in gained {
                    self.let_go(endpoint);
                }
                return;
            }
        };
        let held = match self.store.held_ordering_keys().await {
            Ok(held) => held,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the held ordering keys of endpoints taken over; trying again");
                for endpoint in gained {
                    self.let_go(endpoint);
                }
                return;
            }
        };
        self.remember(pending.iter().map(|p| (p.id, p.round)).collect());
        let mut by_endpoint: HashMap<Arc<str>, Vec<PendingDelivery>> = HashMap::new();
        for p in pending {
            by_endpoint.entry(p.endpoint.clone()).or_default().push(p);
        }
        for endpoint in gained {
            let pending = by_endpoint.remove(&endpoint).unwrap_or_default();
            tracing::info!(endpoint = %endpoint, pending = pending.len(), "delivering this endpoint from this node");
            self.owned.insert(endpoint.clone());
            let held = held.iter().filter(|h| h.endpoint == endpoint).cloned().collect();
            self.scheduler.owned(endpoint, pending, held);
        }
    }

    /// The database did not answer. The fence already stops every attempt of an endpoint
    /// whose lease lapsed by this node's clock (before any other node may take it over); what
    /// waits here for those endpoints is dropped, and they are taken anew, read again, once the
    /// database answers.
    fn renewal_failed(&mut self, error: &crate::store::StoreError) {
        tracing::warn!(error = %error, "cannot renew this node's leases");
        let lapsed: Vec<Arc<str>> = self
            .owned
            .iter()
            .filter(|e| !self.fence.holds(e))
            .cloned()
            .collect();
        if !lapsed.is_empty() {
            tracing::warn!(
                endpoints = lapsed.len(),
                "leases lapsed: this node sends nothing of these endpoints until the database answers"
            );
        }
        for endpoint in lapsed {
            self.owned.remove(&endpoint);
            self.let_go(endpoint);
        }
    }

    /// Acts on notices, taking every one already waiting in the same go.
    async fn take_notices(&mut self, first: ClusterNotice, notices: Option<&mut Notices>) {
        let (mut others, mut own) = (Vec::new(), Vec::new());
        let mut health = Vec::new();
        let mut endpoints_changed = Vec::new();
        let mut key_actions = Vec::new();
        let mut sort = |notice| match notice {
            ClusterNotice::Deliveries { ids, own: false } => others.extend(ids),
            ClusterNotice::Deliveries { ids, own: true } => own.extend(ids),
            ClusterNotice::Health(endpoint) => health.push(endpoint),
            ClusterNotice::Endpoint(name) => endpoints_changed.push(name),
            ClusterNotice::KeyAction(id) => key_actions.push(id),
        };
        sort(first);
        if let Some(notices) = notices {
            while let Some(more) = notices.try_next() {
                sort(more);
            }
        }
        for name in endpoints_changed {
            self.sync_endpoint(name).await;
        }
        self.load_deliveries(others, own).await;
        if !key_actions.is_empty() {
            let owned = &self.owned;
            key_actions::answer(&self.store, &self.scheduler, |e| owned.contains(e), key_actions).await;
        }
        for endpoint in health {
            match self.store.health_of(&endpoint).await {
                Ok(Some(h)) => self.scheduler.health_changed(endpoint, h),
                Ok(None) => {}
                Err(e) => tracing::warn!(error = %e, "cannot read an endpoint's health after a notice"),
            }
        }
    }

    /// Runs an endpoint another node created, changed or deleted as the store now holds it.
    /// Its deliveries wait in the store meanwhile: only endpoints this node knows are claimed.
    async fn sync_endpoint(&self, name: Arc<str>) {
        match self.endpoints.sync(&name).await {
            Ok(Synced::Unchanged) => {}
            Ok(_) => self.scheduler.endpoint_changed(name),
            Err(e) => {
                tracing::warn!(endpoint = %name, error = %e, "cannot read an endpoint another node changed; keeping the version running");
            }
        }
    }

    /// Runs every endpoint as the store holds it: after the notice stream broke, when notices
    /// of changes may have been missed.
    async fn sync_all_endpoints(&self) {
        match self.endpoints.sync_all().await {
            Ok(changed) => {
                for name in changed {
                    self.scheduler.endpoint_changed(name);
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the endpoints created through the API; keeping those running");
            }
        }
    }

    /// Deliveries made pending, by notice: those of endpoints delivered here are read, with
    /// their events, and go to the scheduler, unless a full read took them in a moment ago.
    /// Of this node's own, only those of ordered endpoints: the scheduler takes ordered
    /// deliveries from notices alone, which arrive in commit order from every node (see
    /// `Actor::takes_directly`).
    async fn load_deliveries(
        &mut self,
        others: Vec<(Arc<str>, DeliveryId)>,
        own: Vec<(Arc<str>, DeliveryId)>,
    ) {
        let ordered = |e: &str| self.endpoints.routing(e).is_some_and(|ep| ep.ordered);
        let noticed: Vec<DeliveryId> = own
            .iter()
            .filter(|(e, _)| self.owned.contains(e) && ordered(e))
            .map(|(_, id)| *id)
            .collect();
        let mut ask: Vec<DeliveryId> = others
            .iter()
            .filter(|(e, _)| self.owned.contains(e))
            .map(|(_, id)| *id)
            .collect();
        ask.extend(&noticed);
        if ask.is_empty() {
            return;
        }
        let pending = match self.store.pending_by_ids(&ask).await {
            Ok(p) => p,
            Err(e) => {
                // They stay pending in the store, but the notices of later deliveries would
                // come in without them: an ordered key would skip ahead, and the missed ones
                // would wait for some later full read. So their endpoints are let go and
                // taken anew at the next turn, with a full read in order.
                let endpoints: HashSet<Arc<str>> = others
                    .iter()
                    .chain(&own)
                    .map(|(e, _)| e.clone())
                    .filter(|e| self.owned.contains(e))
                    .collect();
                tracing::warn!(error = %e, endpoints = endpoints.len(), "cannot read deliveries announced; reading their endpoints again at the next turn");
                for endpoint in endpoints {
                    self.owned.remove(&endpoint);
                    self.let_go(endpoint);
                }
                return;
            }
        };
        self.recent.retain(|(at, _)| at.elapsed() < RECENT_LOAD);
        let fresh: Vec<(PendingDelivery, Arc<Event>)> = pending
            .into_iter()
            .filter(|(p, _)| {
                !self
                    .recent
                    .iter()
                    .any(|(_, read)| read.contains(&(p.id, p.round)))
            })
            .collect();
        self.scheduler.load(fresh, noticed);
    }

    fn remember(&mut self, ids: HashSet<(DeliveryId, u32)>) {
        self.recent.retain(|(at, _)| at.elapsed() < RECENT_LOAD);
        self.recent.push((Instant::now(), ids));
    }
}

/// What the keeper renews: the leases the last turn held, and when that turn asked.
#[derive(Default)]
struct Renewal {
    at: Option<Instant>,
    endpoints: Vec<Arc<str>>,
}

impl Renewal {
    fn renewed(&mut self, at: Instant, endpoints: Vec<Arc<str>>) {
        self.at = Some(at);
        self.endpoints = endpoints;
    }
}

/// Renews the leases this node holds whenever its turn runs late (reading a large takeover,
/// many notices, a slow database): a turn's work must not let the leases lapse. It takes and
/// gives back nothing: that is the turn's.
struct Keeper {
    store: Arc<dyn ClusterStore>,
    node: NodeInfo,
    lease: Duration,
    fence: Arc<Fence>,
    renewal: Arc<std::sync::Mutex<Renewal>>,
}

impl Keeper {
    async fn run(self, shutdown: CancellationToken) {
        let turn = self.lease / 3;
        // The turn renews every third of a lease; the keeper steps in once it is half a turn
        // late. It sleeps until that very moment (read again on waking, since a turn may have
        // renewed meanwhile) rather than looking on a fixed tick: a tick would spend part of the
        // little time left before the leases lapse here (a fifth of a lease) on waiting for it.
        let late_after = turn + turn / 2;
        loop {
            let last = self.renewal.lock().expect("renewal lock").at;
            let now = self.fence.now();
            let wait = match last {
                Some(at) if now < at + late_after => at + late_after - now,
                // Lapsed here already: renewing cannot extend them; the turn takes them anew.
                Some(at) if now >= at + self.lease => turn / 2,
                Some(_) => Duration::ZERO,
                None => turn / 2,
            };
            if !wait.is_zero() {
                tokio::select! {
                    _ = shutdown.cancelled() => return,
                    _ = tokio::time::sleep(wait) => continue,
                }
            }
            self.renew_late().await;
            // A renewal that failed is tried again soon, not a whole turn later.
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(turn / 8) => {}
            }
        }
    }

    /// Renews what the last turn held, the turn being late.
    async fn renew_late(&self) {
        let endpoints = self.renewal.lock().expect("renewal lock").endpoints.clone();
        let asked = self.fence.now();
        match self.store.renew_leases(&self.node, &endpoints, self.lease).await {
            Ok(renewed) => {
                for endpoint in &renewed {
                    self.fence.renew(endpoint, asked);
                }
                self.renewal.lock().expect("renewal lock").renewed(asked, renewed);
            }
            Err(e) => tracing::debug!(error = %e, "the keeper could not renew this node's leases"),
        }
    }
}

/// The nodes alive at `now` (seen within a lease and not left), this one always among them.
fn live_nodes<'a>(nodes: &'a [NodeRow], now: Timestamp, lease: Duration, own: &'a str) -> Vec<&'a str> {
    let mut live: Vec<&str> = nodes
        .iter()
        .filter(|n| NodeState::of(n, now, lease) == NodeState::Alive)
        .map(|n| n.id.as_str())
        .collect();
    if !live.contains(&own) {
        live.push(own);
    }
    live
}

async fn next_notice(notices: &mut Option<Notices>) -> Option<ClusterNotice> {
    match notices {
        Some(n) => n.next().await,
        None => std::future::pending().await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_node_names_the_same_owner_and_a_leaving_node_moves_only_its_share() {
        let three = ["node-1", "node-2", "node-3"];
        let two = ["node-1", "node-2"];
        let endpoints: Vec<String> = (0..3000).map(|i| format!("endpoint-{i}")).collect();
        let mut share: HashMap<&str, usize> = HashMap::new();
        let mut moved = 0;
        for e in &endpoints {
            let owner = owner_of(&three, e).unwrap();
            // The order of the list does not matter.
            assert_eq!(owner_of(&["node-3", "node-1", "node-2"], e), Some(owner));
            *share.entry(owner).or_default() += 1;
            let after = owner_of(&two, e).unwrap();
            if owner != "node-3" {
                assert_eq!(after, owner, "{e} moved although its node stayed");
            } else {
                moved += 1;
            }
        }
        for node in three {
            let n = share[node];
            assert!((800..1200).contains(&n), "{node} got {n} of 3000 endpoints");
        }
        assert_eq!(moved, share["node-3"]);
        assert_eq!(owner_of(&[], "x"), None);
    }

    #[test]
    fn a_node_is_alive_within_a_lease_of_its_heartbeat_lapsed_after_and_left_when_it_said_so() {
        let lease = Duration::from_secs(15);
        let seen = Timestamp::from_millis(1_000_000);
        let node = |left_at| NodeRow {
            id: "n".into(),
            address: "a".into(),
            started_at: Timestamp::EPOCH,
            last_seen_at: seen,
            leases: 0,
            left_at,
        };
        let at = |ms: u64| seen.plus(Duration::from_millis(ms));
        assert_eq!(NodeState::of(&node(None), seen, lease), NodeState::Alive);
        assert_eq!(NodeState::of(&node(None), at(14_999), lease), NodeState::Alive);
        assert_eq!(NodeState::of(&node(None), at(15_000), lease), NodeState::Lapsed);
        assert_eq!(
            NodeState::of(&node(None), at(3_600_000), lease),
            NodeState::Lapsed
        );
        assert_eq!(NodeState::of(&node(Some(seen)), seen, lease), NodeState::Left);
        assert_eq!(
            NodeState::of(&node(Some(seen)), at(60_000), lease),
            NodeState::Left
        );
    }
}
