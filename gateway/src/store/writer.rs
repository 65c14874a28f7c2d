//! The single writer thread and its group commit.
//!
//! Every write is a [`Job`]: a closure that runs inside its own savepoint of the current
//! transaction and returns a completion to call once the transaction is durably committed
//! (or has failed). The thread takes the first waiting job, drains whatever else is waiting
//! (up to `max_batch`), runs them all in one transaction, commits once — one fsync for the whole
//! group — and then calls every completion. A job that fails rolls back only its own savepoint.

use std::time::{Duration, Instant};

use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::StoreError;

/// Called after the commit with its result.
pub(super) type Completion = Box<dyn FnOnce(Result<(), StoreError>) + Send>;

/// What a job tells the writer: keep its savepoint or roll it back, and what to do after commit.
pub(super) struct JobResult {
    pub(super) keep: bool,
    pub(super) completion: Completion,
}

pub(super) type Job = Box<dyn FnOnce(&Connection) -> JobResult + Send>;

pub(super) enum Msg {
    Job(Job),
    /// Stop after everything queued before this message is committed.
    Close(oneshot::Sender<()>),
}

#[derive(Clone)]
pub(super) struct WriterHandle {
    tx: mpsc::Sender<Msg>,
}

impl WriterHandle {
    /// Queues a job, waiting for room when the queue is full.
    pub(super) async fn submit(&self, job: Job) -> Result<(), StoreError> {
        self.tx
            .send(Msg::Job(job))
            .await
            .map_err(|_| StoreError::Unavailable("the store is shut down".into()))
    }

    /// Queues a job only if there is room now: ingestion uses this, so that a saturated writer
    /// turns into a 503 for the client instead of unbounded memory.
    pub(super) fn try_submit(&self, job: Job) -> Result<(), StoreError> {
        self.tx.try_send(Msg::Job(job)).map_err(|e| match e {
            mpsc::error::TrySendError::Full(_) => {
                StoreError::Unavailable("the write queue is full; retry shortly".into())
            }
            mpsc::error::TrySendError::Closed(_) => StoreError::Unavailable("the store is shut down".into()),
        })
    }

    pub(super) async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Close(tx)).await.is_ok() {
            let _ = rx.await;
        }
    }
}

pub(super) fn spawn(conn: Connection, queue_capacity: usize, max_batch: usize) -> WriterHandle {
    let (tx, rx) = mpsc::channel(queue_capacity);
    std::thread::Builder::new()
        .name("hookgate-writer".into())
        .spawn(move || run(conn, rx, max_batch))
        .expect("spawning the writer thread");
    WriterHandle { tx }
}

fn run(mut conn: Connection, mut rx: mpsc::Receiver<Msg>, max_batch: usize) {
    let mut jobs: Vec<Job> = Vec::with_capacity(max_batch);
    let mut close: Option<oneshot::Sender<()>> = None;
    while close.is_none() {
        let Some(first) = rx.blocking_recv() else { break };
        match first {
            Msg::Job(job) => jobs.push(job),
            Msg::Close(done) => close = Some(done),
        }
        while close.is_none() && jobs.len() < max_batch {
            match rx.try_recv() {
                Ok(Msg::Job(job)) => jobs.push(job),
                Ok(Msg::Close(done)) => close = Some(done),
                Err(_) => break,
            }
        }
        if !jobs.is_empty() {
            commit_group(&mut conn, &mut jobs);
        }
    }
    // Closing: the database is flushed (every group was committed), checkpoint the WAL so a
    // restart opens quickly.
    let _ = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);");
    drop(conn);
    if let Some(done) = close {
        let _ = done.send(());
    }
}

fn commit_group(conn: &mut Connection, jobs: &mut Vec<Job>) {
    let started = Instant::now();
    let group_size = jobs.len();
    let mut completions: Vec<Completion> = Vec::with_capacity(group_size);
    let result = (|| -> Result<(), StoreError> {
        let mut tx = conn.transaction()?;
        for job in jobs.drain(..) {
            let sp = tx.savepoint()?;
            let JobResult { keep, completion } = job(&sp);
            completions.push(completion);
            if keep {
                sp.commit()?;
            }
            // else: dropping the savepoint rolls it back.
        }
        tx.commit()?;
        Ok(())
    })();
    // A job whose closure never ran (the transaction failed to open) still has to be answered.
    jobs.clear();
    if let Err(e) = &result {
        tracing::error!(error = %e, group_size, "commit failed; the group's writes were not kept");
    }
    metrics::histogram!("hookgate_writer_batch_size").record(group_size as f64);
    metrics::histogram!("hookgate_writer_commit_seconds").record(started.elapsed().as_secs_f64());
    for completion in completions {
        completion(result.clone());
    }
    if result.is_err() {
        // Give a full disk a moment before the next group hammers it again.
        std::thread::sleep(Duration::from_millis(5));
    }
}
