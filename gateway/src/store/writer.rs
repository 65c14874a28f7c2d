//! The single writer thread and its group commit.
//!
//! Every write is a [`Job`]: a closure that runs inside its own savepoint of the current
//! transaction and returns a completion to call once the transaction is durably committed
//! (or has failed). The thread takes the first waiting job, drains whatever else is waiting
//! (up to `max_batch`), runs them all in one transaction, commits once — one fsync for the whole
//! group — and then calls every completion. A job that fails rolls back only its own savepoint.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use metrics::Histogram;
use rusqlite::Connection;
use tokio::sync::{mpsc, oneshot};

use super::StoreError;
use crate::telemetry::Metrics;

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
    /// The writer thread, joined by the first [`WriterHandle::close`].
    thread: Arc<Mutex<Option<std::thread::JoinHandle<()>>>>,
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
                StoreError::Overloaded("the write queue is full; retry shortly".into())
            }
            mpsc::error::TrySendError::Closed(_) => StoreError::Unavailable("the store is shut down".into()),
        })
    }

    /// Commits everything queued so far, stops the writer and waits for its thread to end.
    pub(super) async fn close(&self) {
        let (tx, rx) = oneshot::channel();
        if self.tx.send(Msg::Close(tx)).await.is_ok() {
            let _ = rx.await;
        }
        let thread = self.thread.lock().expect("writer thread lock").take();
        if let Some(thread) = thread {
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
    }
}

pub(super) fn spawn(
    conn: Connection,
    queue_capacity: usize,
    max_batch: usize,
    metrics: &Metrics,
) -> WriterHandle {
    let meters = WriterMeters {
        batch_size: metrics.writer_batch_size(),
        commit: metrics.writer_commit(),
    };
    let (tx, rx) = mpsc::channel(queue_capacity);
    let thread = std::thread::Builder::new()
        .name("hookgate-writer".into())
        .spawn(move || run(conn, rx, max_batch, &meters))
        .expect("spawning the writer thread");
    WriterHandle {
        tx,
        thread: Arc::new(Mutex::new(Some(thread))),
    }
}

/// The writer's two histograms, registered once.
struct WriterMeters {
    batch_size: Histogram,
    commit: Histogram,
}

fn run(mut conn: Connection, mut rx: mpsc::Receiver<Msg>, max_batch: usize, meters: &WriterMeters) {
    let mut jobs: VecDeque<Job> = VecDeque::with_capacity(max_batch);
    let mut close: Option<oneshot::Sender<()>> = None;
    // Jobs left over by a group that SQLite rolled back are committed before anything else,
    // and before closing.
    while close.is_none() || !jobs.is_empty() {
        if jobs.is_empty() {
            let Some(first) = rx.blocking_recv() else { break };
            match first {
                Msg::Job(job) => jobs.push_back(job),
                Msg::Close(done) => close = Some(done),
            }
        }
        while close.is_none() && jobs.len() < max_batch {
            match rx.try_recv() {
                Ok(Msg::Job(job)) => jobs.push_back(job),
                Ok(Msg::Close(done)) => close = Some(done),
                Err(_) => break,
            }
        }
        if !jobs.is_empty() {
            commit_group(&mut conn, &mut jobs, meters);
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

/// Runs the waiting jobs in one transaction and answers them after its commit.
///
/// After a disk-full or I/O error SQLite may roll back the *whole* transaction, not only the
/// failing statement. The group then stops at once: the jobs that ran before lost their writes
/// and are answered with the error, and the jobs not yet run stay in `jobs` for a fresh
/// transaction. Running them on would execute them outside any transaction — each savepoint
/// would commit by itself, and its waiter would be told "failed" about data that is on disk.
fn commit_group(conn: &mut Connection, jobs: &mut VecDeque<Job>, meters: &WriterMeters) {
    let started = Instant::now();
    let mut completions: Vec<Completion> = Vec::with_capacity(jobs.len());
    let mut rolled_back = false;
    let result = (|| -> Result<(), StoreError> {
        let mut tx = conn.transaction()?;
        while let Some(job) = jobs.pop_front() {
            let sp = tx.savepoint()?;
            let JobResult { keep, completion } = job(&sp);
            completions.push(completion);
            if sp.is_autocommit() {
                // The savepoint is gone with the transaction: dropping it is a no-op.
                rolled_back = true;
                return Err(StoreError::Unavailable(
                    "the database rolled the transaction back after a write error".into(),
                ));
            }
            if keep {
                sp.commit()?;
            }
            // else: dropping the savepoint rolls it back.
        }
        tx.commit()?;
        Ok(())
    })();
    if !rolled_back {
        // Any other failure: the jobs not run are dropped, which answers their waiters with
        // "dropped before its commit" instead of retrying a transaction that cannot start.
        jobs.clear();
    }
    let group_size = completions.len();
    if let Err(e) = &result {
        tracing::error!(error = %e, group_size, "commit failed; the group's writes were not kept");
    }
    meters.batch_size.record(group_size as f64);
    meters.commit.record(started.elapsed().as_secs_f64());
    for completion in completions {
        completion(result.clone());
    }
    if result.is_err() {
        // Give a full disk a moment before the next group hammers it again.
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::mpsc as std_mpsc;

    use super::*;

    fn insert(value: &'static str) -> (Job, oneshot::Receiver<Result<(), StoreError>>) {
        let (tx, rx) = oneshot::channel();
        let job: Job = Box::new(move |conn| {
            let written = conn.execute("INSERT INTO t (v) VALUES (?1)", [value]);
            JobResult {
                keep: written.is_ok(),
                completion: Box::new(move |committed| {
                    let _ = tx.send(committed.and(written.map(|_| ()).map_err(StoreError::from)));
                }),
            }
        });
        (job, rx)
    }

    fn rows(path: &std::path::Path) -> Vec<String> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn.prepare("SELECT v FROM t ORDER BY v").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// SQLite may answer a disk-full or I/O error by rolling back the whole transaction. The
    /// group's earlier writes are then lost and must be reported so, and the later jobs must
    /// run in a transaction of their own — not in autocommit mode, where they would be written
    /// yet reported as failed.
    #[tokio::test]
    async fn a_group_rolled_back_by_sqlite_fails_its_earlier_jobs_and_reruns_the_later_ones() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (v TEXT NOT NULL);")
            .unwrap();
        let writer = spawn(conn, 16, 16, &Metrics::new());

        // Hold the writer so that the next jobs form one group.
        let (started_tx, started_rx) = std_mpsc::channel();
        let (release_tx, release_rx) = std_mpsc::channel::<()>();
        writer
            .try_submit(Box::new(move |_| {
                started_tx.send(()).unwrap();
                let _ = release_rx.recv_timeout(Duration::from_secs(30));
                JobResult {
                    keep: true,
                    completion: Box::new(|_| {}),
                }
            }))
            .unwrap();
        started_rx.recv_timeout(Duration::from_secs(10)).unwrap();

        let (before, before_rx) = insert("before");
        writer.try_submit(before).unwrap();
        let (rollback_tx, rollback_rx) = oneshot::channel::<Result<(), StoreError>>();
        writer
            .try_submit(Box::new(move |conn| {
                // What SQLite does by itself after some SQLITE_FULL / SQLITE_IOERR failures.
                conn.execute_batch("ROLLBACK").unwrap();
                JobResult {
                    keep: false,
                    completion: Box::new(move |_| {
                        let _ = rollback_tx.send(Err(StoreError::Unavailable("disk full".into())));
                    }),
                }
            }))
            .unwrap();
        let (after, after_rx) = insert("after");
        writer.try_submit(after).unwrap();
        release_tx.send(()).unwrap();

        assert!(matches!(
            before_rx.await.unwrap(),
            Err(StoreError::Unavailable(_))
        ));
        assert!(rollback_rx.await.unwrap().is_err());
        after_rx.await.unwrap().unwrap();
        writer.close().await;
        assert_eq!(rows(&path), vec!["after".to_owned()]);
    }
}
