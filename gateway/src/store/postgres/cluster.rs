//! The cluster's tables on PostgreSQL: `nodes` (who is alive, by the database's clock),
//! `endpoint_leases` (which node delivers an endpoint's deliveries, until when), and the
//! notices nodes send each other with `NOTIFY` on the schema's channel. A notice is sent inside
//! the transaction that causes it, so it is delivered exactly when that commits.
//!
//! Every transaction that notifies holds PostgreSQL's notify lock from its notice until after
//! its commit's WAL flush: notifying commits never overlap, anywhere in the database. So an
//! ingestion group announces only the deliveries another node needs to hear of: those of
//! endpoints this node does not hold, and those of ordered endpoints (see
//! [`PgStore::endpoints_held_here`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use deadpool_postgres::{GenericClient, Object};
use futures_util::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, NoTls};

use super::{
    EVENT_COLUMNS, PENDING_SELECT, PgStore, event_from_row, execute, health_from_row, pending_from_rows,
    query, ts, u,
};
use crate::health::EndpointHealth;
use crate::model::{DeliveryId, DeliveryStatus, Event, Timestamp};
use crate::store::{
    ClusterNotice, ClusterStore, KeyActionRequest, NodeInfo, NodeRow, Notices, PendingDelivery, StoreError,
    StoreResult,
};

/// The database's clock in milliseconds since the epoch: leases and liveness are judged by one
/// clock, whatever the nodes' own say.
const NOW_MS: &str = "(extract(epoch from clock_timestamp()) * 1000)::bigint";
/// The advisory lock that orders ingestion groups with moves of leases (see
/// [`PgStore::endpoints_held_here`]), by the schema's name, as the idempotency keys' locks.
pub(super) const LEASE_MOVES: &str = "hashtextextended(current_schema() || ' endpoint leases', 0)";
/// A node not seen for this long is forgotten.
const FORGET_AFTER_MS: i64 = 3_600_000;
/// A notice's payload stays well below PostgreSQL's 8000-byte limit.
const MAX_PAYLOAD: usize = 7_000;
/// How long a heartbeat or lease call may take on the lease connection (waiting for it
/// included). One that takes longer is given up and its connection closed: a connection that
/// stopped answering must not hold the renewals up (the leases then lapse by this node's own
/// clock, see `crate::fence`, and the next call opens a new connection).
pub(super) const LEASE_CALL_TIMEOUT: Duration = Duration::from_secs(2);

impl PgStore {
    /// Tells the other nodes that these deliveries are pending (new, or a new round), with
    /// their endpoints (`node|d|e0:1,2;e1:3`; endpoint names have no `:`, `;` or `,`), so that
    /// a node reads back only those of the endpoints it delivers.
    pub(super) async fn notify_deliveries<'a, C: GenericClient>(
        &self,
        c: &C,
        deliveries: impl Iterator<Item = (&'a str, DeliveryId)>,
    ) -> StoreResult<()> {
        let prefix = format!("{}|d|", self.node_id);
        let mut payload = prefix.clone();
        let mut current: Option<&str> = None;
        for (endpoint, id) in deliveries {
            if payload.len() > MAX_PAYLOAD {
                self.notify(c, &payload).await?;
                payload.clone_from(&prefix);
                current = None;
            }
            if current == Some(endpoint) {
                payload.push(',');
            } else {
                if current.is_some() {
                    payload.push(';');
                }
                payload.push_str(endpoint);
                payload.push(':');
                current = Some(endpoint);
            }
            payload.push_str(&id.0.to_string());
        }
        if payload.len() > prefix.len() {
            self.notify(c, &payload).await?;
        }
        Ok(())
    }

    /// Which of `endpoints` this node holds the lease of, for an ingestion group that then
    /// announces none of their unordered deliveries: this node's scheduler takes those itself.
    /// The group holds the lease-moves lock shared until it commits, and reads the leases after
    /// taking it; a transaction that may move a lease to another holder takes it exclusively
    /// first ([`hold_on`], [`ClusterStore::leave`]). So no lease changes hands while a group
    /// that relied on it is uncommitted, and the next holder's full read, made after its
    /// takeover commits, finds every delivery such a group made. The read waits for the lock's
    /// answer: sent together, the two could reach the server in either order (each first
    /// prepares its statement), and a read before the lock would see a lease that is moving.
    pub(super) async fn endpoints_held_here<C: GenericClient>(
        &self,
        c: &C,
        endpoints: &[&str],
    ) -> StoreResult<HashSet<String>> {
        let lock = format!("SELECT pg_advisory_xact_lock_shared({LEASE_MOVES})");
        execute(c, &lock, &[]).await?;
        leases_held(c, &self.node_id, endpoints).await
    }

    /// Tells the other nodes that an endpoint's health changed state.
    pub(super) async fn notify_health<C: GenericClient>(&self, c: &C, endpoint: &str) -> StoreResult<()> {
        self.notify(c, &format!("{}|h|{endpoint}", self.node_id)).await
    }

    /// Tells the other nodes that an endpoint created through the API was created, changed
    /// or deleted: they read that one row again.
    pub(super) async fn notify_endpoint<C: GenericClient>(&self, c: &C, name: &str) -> StoreResult<()> {
        self.notify(c, &format!("{}|c|{name}", self.node_id)).await
    }

    async fn notify<C: GenericClient>(&self, c: &C, payload: &str) -> StoreResult<()> {
        execute(c, "SELECT pg_notify($1, $2)", &[&self.channel, &payload]).await?;
        Ok(())
    }
}

/// A notice from its payload (None for one that cannot be read, or a health change this node
/// made itself).
fn parse_notice(own_node: &str, payload: &str) -> Option<ClusterNotice> {
    let mut parts = payload.splitn(3, '|');
    let (node, kind, rest) = (parts.next()?, parts.next()?, parts.next()?);
    let own = node == own_node;
    match kind {
        "d" => {
            let mut ids = Vec::new();
            for group in rest.split(';') {
                let Some((endpoint, list)) = group.split_once(':') else {
                    continue;
                };
                let endpoint: Arc<str> = Arc::from(endpoint);
                for id in list.split(',').filter_map(|id| id.parse().ok()) {
                    ids.push((endpoint.clone(), DeliveryId(id)));
                }
            }
            Some(ClusterNotice::Deliveries { ids, own })
        }
        "h" if !own => Some(ClusterNotice::Health(Arc::from(rest))),
        "c" if !own && !rest.is_empty() => Some(ClusterNotice::Endpoint(Arc::from(rest))),
        "k" => rest.parse().ok().map(ClusterNotice::KeyAction),
        _ => None,
    }
}

impl PgStore {
    /// The lease connection (see [`PgStore::lease_pool`]), opened again when it was closed.
    async fn lease_conn(&self) -> StoreResult<Object> {
        Ok(self.lease_pool.get().await?)
    }
}

/// The answer of a call on the lease connection, or an error when it took too long; such a
/// connection is closed rather than given back, since its answer may still come and would be
/// read as the next call's.
fn lease_call_done<T>(
    conn: Object,
    answer: Result<StoreResult<T>, tokio::time::error::Elapsed>,
) -> StoreResult<T> {
    match answer {
        Ok(result) => result,
        Err(_) => {
            drop(Object::take(conn));
            Err(StoreError::Unavailable(format!(
                "postgres: no answer to a lease call within {LEASE_CALL_TIMEOUT:?}"
            )))
        }
    }
}

/// Records that `node` is alive now, by the database's clock.
async fn mark_seen<C: GenericClient>(c: &C, node: &NodeInfo) -> StoreResult<()> {
    execute(
        c,
        &format!(
            "INSERT INTO nodes (id, address, started_at, last_seen_at) VALUES ($1, $2, $3, {NOW_MS})
             ON CONFLICT (id) DO UPDATE SET address = EXCLUDED.address, started_at = EXCLUDED.started_at,
                 last_seen_at = EXCLUDED.last_seen_at, left_at = NULL"
        ),
        &[&node.id, &node.address, &node.started_at.as_millis()],
    )
    .await?;
    Ok(())
}

async fn heartbeat_on(conn: &Object, node: &NodeInfo) -> StoreResult<(Timestamp, Vec<NodeRow>)> {
    mark_seen(conn, node).await?;
    execute(
        conn,
        &format!("DELETE FROM nodes WHERE last_seen_at < {NOW_MS} - $1"),
        &[&FORGET_AFTER_MS],
    )
    .await?;
    let rows = query(
        conn,
        &format!(
            "SELECT n.id, n.address, n.started_at, n.last_seen_at,
                     (SELECT count(*) FROM endpoint_leases l WHERE l.node = n.id AND l.expires_at > {NOW_MS}),
                     {NOW_MS}, n.left_at
                 FROM nodes n ORDER BY n.id"
        ),
        &[],
    )
    .await?;
    let now = rows.first().map_or(node.started_at, |r| ts(r, 5));
    let nodes = rows
        .iter()
        .map(|r| NodeRow {
            id: r.get(0),
            address: r.get(1),
            started_at: ts(r, 2),
            last_seen_at: ts(r, 3),
            leases: u(r.get(4)),
            left_at: r.get::<_, Option<i64>>(6).map(Timestamp::from_millis),
        })
        .collect();
    Ok((now, nodes))
}

async fn hold_on(
    conn: &mut Object,
    node_id: &str,
    wanted: &[Arc<str>],
    release: &[Arc<str>],
    lease: Duration,
) -> StoreResult<Vec<Arc<str>>> {
    let tx = conn.transaction().await?;
    let names = |list: &[Arc<str>]| -> Vec<String> {
        let mut v: Vec<String> = list.iter().map(|e| e.to_string()).collect();
        // One order for every node, so that two nodes taking overlapping sets never wait
        // on each other's rows in opposite orders.
        v.sort();
        v
    };
    let (wanted, release) = (names(wanted), names(release));
    if !release.is_empty() || !holds_all(&tx, node_id, &wanted).await? {
        lock_lease_moves(&tx).await?;
    }
    execute(
        &tx,
        "DELETE FROM endpoint_leases WHERE node = $1 AND endpoint = ANY($2)",
        &[&node_id, &release],
    )
    .await?;
    let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
    execute(
        &tx,
        &format!(
            "INSERT INTO endpoint_leases (endpoint, node, expires_at)
                 SELECT e, $1, {NOW_MS} + $3 FROM unnest($2::text[]) AS e
                 ON CONFLICT (endpoint) DO UPDATE SET node = EXCLUDED.node, expires_at = EXCLUDED.expires_at
                 WHERE endpoint_leases.node = EXCLUDED.node OR endpoint_leases.expires_at < {NOW_MS}"
        ),
        &[&node_id, &wanted, &lease_ms],
    )
    .await?;
    let held = query(
        &tx,
        &format!("SELECT endpoint FROM endpoint_leases WHERE node = $1 AND expires_at > {NOW_MS}"),
        &[&node_id],
    )
    .await?;
    tx.commit().await?;
    Ok(held.iter().map(|r| Arc::from(r.get::<_, String>(0))).collect())
}

/// Which of `endpoints` `node_id` holds the lease of now, by the database's clock.
async fn leases_held<C: GenericClient>(
    c: &C,
    node_id: &str,
    endpoints: &[&str],
) -> StoreResult<HashSet<String>> {
    let rows = query(
        c,
        &format!(
            "SELECT endpoint FROM endpoint_leases WHERE node = $1 AND endpoint = ANY($2) AND expires_at > {NOW_MS}"
        ),
        &[&node_id, &endpoints],
    )
    .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Whether this node holds every one of `endpoints` already: then holding them moves no lease.
async fn holds_all<C: GenericClient>(c: &C, node_id: &str, endpoints: &[String]) -> StoreResult<bool> {
    let names: Vec<&str> = endpoints.iter().map(String::as_str).collect();
    let held = leases_held(c, node_id, &names).await?;
    Ok(names.iter().all(|e| held.contains(*e)))
}

/// Waits until no ingestion group relies on a lease's holder, and keeps new groups from reading
/// the leases until this transaction ends (see [`PgStore::endpoints_held_here`]).
async fn lock_lease_moves<C: GenericClient>(c: &C) -> StoreResult<()> {
    execute(c, &format!("SELECT pg_advisory_xact_lock({LEASE_MOVES})"), &[]).await?;
    Ok(())
}

#[async_trait]
impl ClusterStore for PgStore {
    fn node_id(&self) -> &str {
        &self.node_id
    }

    async fn heartbeat(&self, node: &NodeInfo) -> StoreResult<(Timestamp, Vec<NodeRow>)> {
        let conn = self.lease_conn().await?;
        let answer = tokio::time::timeout(LEASE_CALL_TIMEOUT, heartbeat_on(&conn, node)).await;
        lease_call_done(conn, answer)
    }

    async fn hold_endpoints(
        &self,
        wanted: &[Arc<str>],
        release: &[Arc<str>],
        lease: Duration,
    ) -> StoreResult<Vec<Arc<str>>> {
        let mut conn = self.lease_conn().await?;
        let work = hold_on(&mut conn, &self.node_id, wanted, release, lease);
        let answer = tokio::time::timeout(LEASE_CALL_TIMEOUT, work).await;
        lease_call_done(conn, answer)
    }

    async fn renew_leases(
        &self,
        node: &NodeInfo,
        endpoints: &[Arc<str>],
        lease: Duration,
    ) -> StoreResult<Vec<Arc<str>>> {
        let conn = self.lease_conn().await?;
        let work = async {
            mark_seen(&conn, node).await?;
            let lease_ms = i64::try_from(lease.as_millis()).unwrap_or(i64::MAX);
            let names: Vec<&str> = endpoints.iter().map(|e| &**e).collect();
            let rows = query(
                &conn,
                &format!(
                    "UPDATE endpoint_leases SET expires_at = {NOW_MS} + $3
                     WHERE node = $1 AND endpoint = ANY($2) AND expires_at > {NOW_MS}
                     RETURNING endpoint"
                ),
                &[&self.node_id, &names, &lease_ms],
            )
            .await?;
            Ok(rows.iter().map(|r| Arc::from(r.get::<_, String>(0))).collect())
        };
        let answer = tokio::time::timeout(LEASE_CALL_TIMEOUT, work).await;
        lease_call_done(conn, answer)
    }

    async fn pending_of(&self, endpoints: &[Arc<str>]) -> StoreResult<Vec<PendingDelivery>> {
        let conn = self.conn().await?;
        let names: Vec<&str> = endpoints.iter().map(|e| &**e).collect();
        let rows = query(
            &conn,
            &format!("{PENDING_SELECT} AND d.endpoint = ANY($1) ORDER BY d.id"),
            &[&names],
        )
        .await?;
        Ok(pending_from_rows(&rows))
    }

    async fn pending_by_ids(&self, ids: &[DeliveryId]) -> StoreResult<Vec<(PendingDelivery, Arc<Event>)>> {
        let conn = self.conn().await?;
        let ids: Vec<i64> = ids.iter().map(|id| id.0).collect();
        // The columns `pending_from_rows` reads, without the join to `events`: the ordering
        // key comes with the event, read next. The status is tested here, not in SQL, which
        // keeps the read on the primary key: with `status = 'pending'` the planner may scan
        // the whole index of pending deliveries instead.
        let mut rows = query(
            &conn,
            "SELECT d.id, d.endpoint, d.next_attempt_at, d.round, d.attempt_count, NULL::text, d.round_started_at,
                 d.event_seq, d.status
             FROM deliveries d WHERE d.id = ANY($1) ORDER BY d.id",
            &[&ids],
        )
        .await?;
        rows.retain(|r| r.get::<_, &str>(8) == DeliveryStatus::Pending.as_str());
        // Each event once, however many of its deliveries were announced.
        let seqs: HashSet<i64> = rows.iter().map(|r| r.get(7)).collect();
        let seqs: Vec<i64> = seqs.into_iter().collect();
        let events: HashMap<i64, Arc<Event>> = query(
            &conn,
            &format!("SELECT e.seq, {EVENT_COLUMNS} FROM events e WHERE e.seq = ANY($1)"),
            &[&seqs],
        )
        .await?
        .iter()
        .map(|r| (r.get(0), Arc::new(event_from_row(r, 1))))
        .collect();
        // An event is purged only after its last delivery is: one missing here belongs to
        // deliveries that ended (and were purged) between the two reads.
        Ok(pending_from_rows(&rows)
            .into_iter()
            .zip(&rows)
            .filter_map(|(p, row)| {
                let event = events.get(&row.get::<_, i64>(7))?.clone();
                let ordering_key = event.ordering_key.clone();
                Some((PendingDelivery { ordering_key, ..p }, event))
            })
            .collect())
    }

    async fn health_of(&self, endpoint: &str) -> StoreResult<Option<EndpointHealth>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            "SELECT state, consecutive_failures, failing_since, last_success_at, changed_at
             FROM endpoint_health WHERE endpoint = $1",
            &[&endpoint],
        )
        .await?;
        rows.first().map(|r| health_from_row(r, 0)).transpose()
    }

    async fn health_of_each(&self, endpoints: &[&str]) -> StoreResult<Vec<(String, EndpointHealth)>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            "SELECT endpoint, state, consecutive_failures, failing_since, last_success_at, changed_at
             FROM endpoint_health WHERE endpoint = ANY($1)",
            &[&endpoints],
        )
        .await?;
        rows.iter()
            .map(|r| Ok((r.get::<_, String>(0), health_from_row(r, 1)?)))
            .collect()
    }

    async fn every_health(&self) -> StoreResult<Vec<(String, EndpointHealth)>> {
        crate::store::Store::endpoint_health(self).await
    }

    async fn held_ordering_keys(&self) -> StoreResult<Vec<crate::store::HeldKey>> {
        let conn = self.conn().await?;
        super::ordering::held_keys(&conn).await
    }

    async fn request_key_action(&self, request: &KeyActionRequest, now: Timestamp) -> StoreResult<i64> {
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let row = query(
            &tx,
            "INSERT INTO ordering_actions (endpoint, ordering_key, action, delivery_id, requested_at)
             VALUES ($1, $2, $3, $4, $5) RETURNING id",
            &[
                &&*request.endpoint,
                &request.key,
                &request.action,
                &request.delivery.map(|d| d.0),
                &now.as_millis(),
            ],
        )
        .await?;
        let id: i64 = row[0].get(0);
        // Every node hears it, the asker too: whichever delivers the endpoint acts.
        self.notify(&tx, &format!("{}|k|{id}", self.node_id)).await?;
        tx.commit().await?;
        Ok(id)
    }

    async fn key_action_request(&self, id: i64) -> StoreResult<Option<KeyActionRequest>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            "SELECT endpoint, ordering_key, action, delivery_id FROM ordering_actions
             WHERE id = $1 AND answer IS NULL",
            &[&id],
        )
        .await?;
        Ok(rows.first().map(|r| KeyActionRequest {
            endpoint: Arc::from(r.get::<_, String>(0)),
            key: r.get(1),
            action: r.get(2),
            delivery: r.get::<_, Option<i64>>(3).map(DeliveryId),
        }))
    }

    async fn answer_key_action(&self, id: i64, answer: &str) -> StoreResult<()> {
        let conn = self.conn().await?;
        execute(
            &conn,
            "UPDATE ordering_actions SET answer = $2 WHERE id = $1 AND answer IS NULL",
            &[&id, &answer],
        )
        .await?;
        Ok(())
    }

    async fn take_key_action_answer(&self, id: i64, give_up: bool) -> StoreResult<Option<String>> {
        let conn = self.conn().await?;
        let rows = query(
            &conn,
            "DELETE FROM ordering_actions WHERE id = $1 AND (answer IS NOT NULL OR $2) RETURNING answer",
            &[&id, &give_up],
        )
        .await?;
        Ok(rows.first().and_then(|r| r.get(0)))
    }

    async fn listen(&self) -> StoreResult<Notices> {
        let (client, mut connection) = self.config.connect(NoTls).await?;
        let (tx, rx) = mpsc::unbounded_channel();
        let own = self.node_id.clone();
        // The connection's messages: notifications go to the stream; the task (and with it the
        // stream) ends when the connection does.
        tokio::spawn(async move {
            let mut messages = futures_util::stream::poll_fn(move |cx| connection.poll_message(cx));
            while let Some(Ok(message)) = messages.next().await {
                if let AsyncMessage::Notification(n) = message
                    && let Some(notice) = parse_notice(&own, n.payload())
                    && tx.send(notice).is_err()
                {
                    return;
                }
            }
        });
        let channel = self.channel.replace('"', "\"\"");
        client.batch_execute(&format!("LISTEN \"{channel}\"")).await?;
        Ok(Notices {
            rx,
            _keep: Box::new(client),
        })
    }

    async fn leave(&self) {
        let result = async {
            let mut conn = self.conn().await?;
            let tx = conn.transaction().await?;
            lock_lease_moves(&tx).await?;
            execute(
                &tx,
                "DELETE FROM endpoint_leases WHERE node = $1",
                &[&self.node_id],
            )
            .await?;
            execute(
                &tx,
                &format!("UPDATE nodes SET left_at = {NOW_MS}, last_seen_at = {NOW_MS} WHERE id = $1"),
                &[&self.node_id],
            )
            .await?;
            self.commit(tx).await
        }
        .await;
        if let Err(e) = result {
            tracing::warn!(error = %e, "could not give the node's leases back; they lapse by themselves");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notices_name_their_sender_and_a_node_ignores_its_own_health_notices() {
        let e = |name: &str, id: i64| (Arc::from(name), DeliveryId(id));
        assert_eq!(
            parse_notice("a", "a|d|x:1,2"),
            Some(ClusterNotice::Deliveries {
                ids: vec![e("x", 1), e("x", 2)],
                own: true
            })
        );
        assert_eq!(
            parse_notice("a", "b|d|x:1,2,z;y.1:3;bad"),
            Some(ClusterNotice::Deliveries {
                ids: vec![e("x", 1), e("x", 2), e("y.1", 3)],
                own: false
            })
        );
        assert_eq!(
            parse_notice("a", "a|h|e"),
            None,
            "a node ignores its own health notices"
        );
        assert_eq!(
            parse_notice("a", "b|h|orders-eu"),
            Some(ClusterNotice::Health(Arc::from("orders-eu")))
        );
        assert_eq!(parse_notice("a", "b|z|1"), None);
        assert_eq!(parse_notice("a", "garbage"), None);
    }
}
