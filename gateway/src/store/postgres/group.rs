//! Group commit for ingestion on PostgreSQL: concurrent ingestion requests share one
//! transaction and one commit, as they share the SQLite writer's.
//!
//! A request queues its batch and then either waits for its answer or, when one of the
//! [`GROUPS_IN_FLIGHT`] slots is free, becomes the group's leader: it takes what waits in the
//! queue (its own batch among it, unless another leader took that already), writes all of it in
//! one transaction — one statement for the events, one for the deliveries — commits once and
//! answers every request of the group. Several groups run at once, so the next group executes
//! while the previous one's commit waits for the WAL flush; each request is answered only after
//! the commit that holds its batch, so a `202` still means "committed". There is no task of its
//! own: a leader is a request, so nothing outlives the store.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use futures_util::future::try_join_all;
use tokio::sync::{Semaphore, oneshot};

use super::{PgStore, idempotency_locked, insert_idempotency, insert_planned, plan_batches};
use crate::store::{IdempotencyRecord, IngestBatch, IngestOutcome, StoreError, StoreResult};

/// Groups written at once. More overlap commits with the next group's statements; each holds
/// one pooled connection, and the rest of the pool stays for reads, outcomes and leases.
const GROUPS_IN_FLIGHT: usize = 4;
/// A group takes at most this many events (over all its requests)…
const MAX_GROUP_EVENTS: usize = 2_000;
/// …and at most this many requests.
const MAX_GROUP_REQUESTS: usize = 512;
/// Requests waiting for a group at most; more are refused as overload (`503`) rather than
/// queued without bound.
const MAX_QUEUED: usize = 8_192;

/// The queue of batches waiting for a group, and the slots of the groups being written.
pub(super) struct Groups {
    queue: Mutex<VecDeque<Job>>,
    slots: Semaphore,
    group_size: metrics::Histogram,
}

struct Job {
    batch: IngestBatch,
    answer: oneshot::Sender<StoreResult<IngestOutcome>>,
}

impl Groups {
    pub(super) fn new(pool_size: usize, group_size: metrics::Histogram) -> Groups {
        // One connection of a small pool stays free of ingestion.
        let slots = GROUPS_IN_FLIGHT.min(pool_size.saturating_sub(1)).max(1);
        Groups {
            queue: Mutex::new(VecDeque::new()),
            slots: Semaphore::new(slots),
            group_size,
        }
    }

    fn push(&self, job: Job) -> StoreResult<()> {
        let mut queue = self.queue.lock().expect("ingest queue lock");
        if queue.len() >= MAX_QUEUED {
            return Err(StoreError::Overloaded(format!(
                "{MAX_QUEUED} ingestion requests wait for the database"
            )));
        }
        queue.push_back(job);
        Ok(())
    }

    /// The next group, in arrival order. A request whose idempotency key is already in the
    /// group waits for the next one, where it finds the first request's answer.
    fn take(&self) -> Vec<Job> {
        let mut queue = self.queue.lock().expect("ingest queue lock");
        let (mut group, mut later) = (Vec::new(), Vec::new());
        let mut keys: HashSet<(String, String)> = HashSet::new();
        let mut events = 0;
        while group.len() < MAX_GROUP_REQUESTS
            && let Some(job) = queue.pop_front()
        {
            let size = job.batch.items.len();
            if !group.is_empty() && events + size > MAX_GROUP_EVENTS {
                queue.push_front(job);
                break;
            }
            if let Some(r) = &job.batch.idempotency
                && !keys.insert((r.scope.clone(), r.key.clone()))
            {
                later.push(job);
                continue;
            }
            events += size;
            group.push(job);
        }
        for job in later.into_iter().rev() {
            queue.push_front(job);
        }
        group
    }
}

impl PgStore {
    /// [`crate::store::Store::ingest`] through a group commit.
    pub(super) async fn ingest_grouped(&self, batch: IngestBatch) -> StoreResult<IngestOutcome> {
        let (answer, mut answered) = oneshot::channel();
        self.groups.push(Job { batch, answer })?;
        loop {
            tokio::select! {
                biased;
                result = &mut answered => return abandoned_if_dropped(result),
                permit = self.groups.slots.acquire() => {
                    let _permit = permit.expect("the slots are never closed");
                    let group = self.groups.take();
                    if group.is_empty() {
                        // Another leader took this request's batch: its answer comes from there.
                        drop(_permit);
                        return abandoned_if_dropped((&mut answered).await);
                    }
                    self.lead(group).await;
                }
            }
        }
    }

    /// Writes a group and answers each of its requests.
    async fn lead(&self, group: Vec<Job>) {
        self.groups.group_size.record(group.len() as f64);
        let batches: Vec<&IngestBatch> = group.iter().map(|j| &j.batch).collect();
        let answers = match self.write_group(&batches).await {
            Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
            // An event of the group is stored already (or sent twice within it): the whole
            // group was rolled back, and each request is written alone, so that only the
            // request with the duplicate is refused.
            Err(StoreError::DuplicateEvent { .. }) if batches.len() > 1 => {
                let mut answers = Vec::with_capacity(batches.len());
                for batch in &batches {
                    let alone = self.write_group(&[*batch]).await;
                    answers.push(alone.map(|mut one| one.pop().expect("one answer per batch")));
                }
                answers
            }
            Err(e) => vec![Err(e); batches.len()],
        };
        for (job, answer) in group.into_iter().zip(answers) {
            let _ = job.answer.send(answer);
        }
    }

    /// One transaction for the batches: the endpoints this node holds read under the
    /// lease-moves lock, each idempotency key looked up under its lock (in key order, so that
    /// two groups never wait on each other's keys), the new batches' events and deliveries
    /// inserted together, their idempotency records, the cluster's notice of the deliveries
    /// another node needs to hear of, one commit. Statements that do not wait for another's
    /// answer are sent together: without idempotency keys a group is five round trips (begin;
    /// the lease-moves lock with the sequences' keys; the leases; the rows and the notice;
    /// commit). Answers in the order of `batches`.
    async fn write_group(&self, batches: &[&IngestBatch]) -> StoreResult<Vec<IngestOutcome>> {
        let mut conn = self.conn().await?;
        let tx = conn.transaction().await?;
        let endpoints = endpoints_of(batches);
        let held = self.endpoints_held_here(&tx, &endpoints);
        let keyed = keyed_in_order(batches);
        let (held, first_answers, fresh, planned) = if keyed.is_empty() {
            let (held, planned) = tokio::try_join!(held, plan_batches(&tx, batches))?;
            (held, vec![None; batches.len()], batches.to_vec(), planned)
        } else {
            // The lease-moves lock comes before any key's: a group never holds a key while
            // it waits for a lease to move.
            let held = held.await?;
            let mut first_answers: Vec<Option<IdempotencyRecord>> = vec![None; batches.len()];
            for (i, record) in keyed {
                first_answers[i] = idempotency_locked(&tx, &self.sealer, &record.scope, &record.key).await?;
            }
            let fresh = fresh(batches, &first_answers);
            let planned = plan_batches(&tx, &fresh).await?;
            (held, first_answers, fresh, planned)
        };
        let records: Vec<IdempotencyRecord> = fresh
            .iter()
            .filter_map(|b| b.idempotency.as_ref())
            .map(|r| self.sealer.seal_idempotency(r))
            .collect();
        let announced = planned
            .targets
            .iter()
            .filter(|(target, _)| target.ordered || !held.contains(&*target.endpoint))
            .map(|(target, id)| (&*target.endpoint, *id));
        tokio::try_join!(
            insert_planned(&tx, &planned),
            try_join_all(records.iter().map(|r| insert_idempotency(&tx, r))),
            self.notify_deliveries(&tx, announced),
        )?;
        self.commit(tx).await?;
        let mut inserted = planned.ready.into_iter();
        Ok(first_answers
            .into_iter()
            .map(|first| match first {
                Some(record) => IngestOutcome::AlreadyDone(record),
                None => IngestOutcome::Committed(inserted.next().expect("one answer per new batch")),
            })
            .collect())
    }
}

/// The endpoints the batches' deliveries go to, each once.
fn endpoints_of<'a>(batches: &[&'a IngestBatch]) -> Vec<&'a str> {
    let all = batches.iter().flat_map(|b| &b.items).flat_map(|i| &i.endpoints);
    let mut endpoints: Vec<&str> = all.map(|t| &*t.endpoint).collect();
    endpoints.sort_unstable();
    endpoints.dedup();
    endpoints
}

/// The batches whose idempotency key has no first answer yet (or that have no key).
fn fresh<'a>(
    batches: &[&'a IngestBatch],
    first_answers: &[Option<IdempotencyRecord>],
) -> Vec<&'a IngestBatch> {
    batches
        .iter()
        .zip(first_answers)
        .filter(|(_, first)| first.is_none())
        .map(|(b, _)| *b)
        .collect()
}

/// The batches with an idempotency key, by index, in key order.
fn keyed_in_order<'a>(batches: &[&'a IngestBatch]) -> Vec<(usize, &'a IdempotencyRecord)> {
    let mut keyed: Vec<(usize, &IdempotencyRecord)> = batches
        .iter()
        .enumerate()
        .filter_map(|(i, b)| Some((i, b.idempotency.as_ref()?)))
        .collect();
    keyed.sort_by(|(_, a), (_, b)| (&a.scope, &a.key).cmp(&(&b.scope, &b.key)));
    keyed
}

/// The answer of a request whose group's leader went away before answering (its task was
/// cancelled): whether the group committed is unknown, so the client is told to try again,
/// which an idempotency key or the event's own id makes safe.
fn abandoned_if_dropped(
    answer: Result<StoreResult<IngestOutcome>, oneshot::error::RecvError>,
) -> StoreResult<IngestOutcome> {
    answer.unwrap_or_else(|_| {
        Err(StoreError::Unavailable(
            "the ingestion group was abandoned before its commit was known".into(),
        ))
    })
}
