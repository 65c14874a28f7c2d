//! The single writer thread, its group commit, and the syncer thread that makes groups durable.
//!
//! Every write is a [`Job`]: a closure that runs inside its own savepoint of the current
//! transaction and returns a completion to call once the transaction is durably committed
//! (or has failed). The writer takes the first waiting job, drains whatever else is waiting
//! (up to `max_batch`), runs them all in one transaction and commits once. The connection runs
//! with `synchronous=NORMAL`, so the commit writes the group's WAL frames without an fsync; the
//! group then goes to the **syncer**, and the writer starts on the next group at once. The
//! syncer takes every committed group that waits, fsyncs the WAL file once — which covers all
//! of them, since each was committed before the fsync began — and only then calls their
//! completions. So one group executes while the previous ones' fsync runs, and no one is
//! answered before the fsync that covers its write (ARCHITECTURE.md "Durability").
//!
//! A job that fails rolls back only its own savepoint. An fsync that fails leaves unknown what
//! the disk kept, and a later fsync may succeed without the lost pages (Linux drops them from
//! the cache): every later group would sit in the WAL behind a gap. So the first failed fsync
//! stops the store's writes for good — every group waiting then and after is answered with an
//! error — until the gateway restarts and recovers from what the disk holds.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
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

/// Makes everything written to the WAL file so far durable (an fsync of it).
pub(super) type SyncWal = Box<dyn FnMut() -> std::io::Result<()> + Send>;

/// Committed groups that may wait for the syncer at once: beyond them the writer waits too,
/// so that a slow disk still fills the write queue (and turns into 503s) instead of memory.
const GROUPS_AWAITING_SYNC: usize = 4;

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
    sync_wal: SyncWal,
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
        .spawn(move || run(conn, rx, sync_wal, max_batch, meters))
        .expect("spawning the writer thread");
    WriterHandle {
        tx,
        thread: Arc::new(Mutex::new(Some(thread))),
    }
}

/// The writer's two histograms, registered once.
#[derive(Clone)]
struct WriterMeters {
    batch_size: Histogram,
    commit: Histogram,
}

fn run(
    mut conn: Connection,
    mut rx: mpsc::Receiver<Msg>,
    sync_wal: SyncWal,
    max_batch: usize,
    meters: WriterMeters,
) {
    let syncer = Syncer::spawn(sync_wal, meters.clone());
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
            commit_group(&mut conn, &mut jobs, &syncer, &meters);
        }
    }
    // Every committed group is answered once its fsync is done.
    syncer.finish();
    // Closing: the database is flushed (every group was committed), checkpoint the WAL so a
    // restart opens quickly.
    let _ = conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);");
    drop(conn);
    if let Some(done) = close {
        let _ = done.send(());
    }
}

/// Runs the waiting jobs in one transaction; after its commit the syncer answers them.
///
/// After a disk-full or I/O error SQLite may roll back the *whole* transaction, not only the
/// failing statement. The group then stops at once: the jobs that ran before lost their writes
/// and are answered with the error, and the jobs not yet run stay in `jobs` for a fresh
/// transaction. Running them on would execute them outside any transaction — each savepoint
/// would commit by itself, and its waiter would be told "failed" about data that is on disk.
fn commit_group(conn: &mut Connection, jobs: &mut VecDeque<Job>, syncer: &Syncer, meters: &WriterMeters) {
    if syncer.failed() {
        // Nothing written after a failed fsync could be made durable: the jobs are dropped
        // unrun, which answers their waiters with "dropped before its commit".
        jobs.clear();
        return;
    }
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
    meters.batch_size.record(group_size as f64);
    match result {
        Ok(()) => syncer.after_commit(Committed { started, completions }),
        Err(e) => {
            tracing::error!(error = %e, group_size, "commit failed; the group's writes were not kept");
            meters.commit.record(started.elapsed().as_secs_f64());
            for completion in completions {
                completion(Err(e.clone()));
            }
            // Give a full disk a moment before the next group hammers it again.
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

fn sync_failed() -> StoreError {
    StoreError::Unavailable(
        "the database's log could not be synced to disk; restart the gateway to recover".into(),
    )
}

/// A group committed to the WAL, waiting for the fsync that makes it durable.
struct Committed {
    started: Instant,
    completions: Vec<Completion>,
}

/// The syncer thread's handle, owned by the writer thread.
struct Syncer {
    tx: std::sync::mpsc::SyncSender<Committed>,
    failed: Arc<AtomicBool>,
    thread: std::thread::JoinHandle<()>,
}

impl Syncer {
    fn spawn(sync_wal: SyncWal, meters: WriterMeters) -> Syncer {
        let (tx, rx) = std::sync::mpsc::sync_channel(GROUPS_AWAITING_SYNC);
        let failed = Arc::new(AtomicBool::new(false));
        let flag = failed.clone();
        let thread = std::thread::Builder::new()
            .name("hookgate-syncer".into())
            .spawn(move || sync_groups(&rx, sync_wal, &flag, &meters))
            .expect("spawning the syncer thread");
        Syncer { tx, failed, thread }
    }

    /// Whether an fsync has failed: the store takes no more writes.
    fn failed(&self) -> bool {
        self.failed.load(Ordering::Acquire)
    }

    /// Hands a committed group over; waits while [`GROUPS_AWAITING_SYNC`] groups already do.
    fn after_commit(&self, group: Committed) {
        if let Err(std::sync::mpsc::SendError(group)) = self.tx.send(group) {
            // The syncer is gone (it panicked): nobody can say the group is durable.
            for completion in group.completions {
                completion(Err(sync_failed()));
            }
        }
    }

    /// Answers every group handed over, then ends the thread.
    fn finish(self) {
        drop(self.tx);
        let _ = self.thread.join();
    }
}

/// The syncer thread: one fsync for every group that waits, then their answers.
fn sync_groups(
    rx: &std::sync::mpsc::Receiver<Committed>,
    mut sync_wal: SyncWal,
    failed: &AtomicBool,
    meters: &WriterMeters,
) {
    while let Ok(first) = rx.recv() {
        let mut groups = vec![first];
        groups.extend(rx.try_iter());
        let result = if failed.load(Ordering::Acquire) {
            Err(sync_failed())
        } else {
            sync_wal().map_err(|e| {
                tracing::error!(error = %e, "fsync of the database's log failed; the store takes no more writes until a restart");
                failed.store(true, Ordering::Release);
                sync_failed()
            })
        };
        for group in groups {
            meters.commit.record(group.started.elapsed().as_secs_f64());
            for completion in group.completions {
                completion(result.clone());
            }
        }
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

    /// The fsync of `path`'s WAL, as the store does it.
    fn wal_sync(path: &std::path::Path) -> SyncWal {
        let wal = std::fs::File::open(format!("{}-wal", path.display())).unwrap();
        Box::new(move || wal.sync_data())
    }

    fn rows(path: &std::path::Path) -> Vec<String> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn.prepare("SELECT v FROM t ORDER BY v").unwrap();
        stmt.query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// A database with the table `t`, in WAL mode as the store's.
    fn database(dir: &tempfile::TempDir) -> (std::path::PathBuf, Connection) {
        let path = dir.path().join("db");
        let conn = Connection::open(&path).unwrap();
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; CREATE TABLE t (v TEXT NOT NULL);",
        )
        .unwrap();
        (path, conn)
    }

    /// An fsync that says when it starts and finishes only when released, each time.
    fn held_sync(path: &std::path::Path) -> (SyncWal, std_mpsc::Receiver<()>, std_mpsc::Sender<()>) {
        let mut fsync = wal_sync(path);
        let (started_tx, started_rx) = std_mpsc::channel();
        let (release_tx, release_rx) = std_mpsc::channel::<()>();
        let sync: SyncWal = Box::new(move || {
            started_tx.send(()).unwrap();
            release_rx.recv_timeout(Duration::from_secs(30)).unwrap();
            fsync()
        });
        (sync, started_rx, release_tx)
    }

    /// The pipeline: while the fsync of the first group runs, the writer commits the next
    /// one; neither is answered before an fsync that began after its commit.
    #[tokio::test]
    async fn the_next_group_commits_during_an_fsync_and_each_is_answered_after_its_own() {
        let dir = tempfile::tempdir().unwrap();
        let (path, conn) = database(&dir);
        let (sync, sync_started, release) = held_sync(&path);
        let writer = spawn(conn, sync, 16, 16, &Metrics::new());

        let (first, mut first_rx) = insert("first");
        writer.try_submit(first).unwrap();
        sync_started.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(first_rx.try_recv().is_err(), "answered before its fsync finished");
        assert_eq!(rows(&path), ["first"], "committed, and visible, before its fsync");

        let (ran_tx, ran_rx) = std_mpsc::channel();
        let (second, mut second_rx) = insert("second");
        writer
            .try_submit(Box::new(move |conn| {
                let result = second(conn);
                ran_tx.send(()).unwrap();
                result
            }))
            .unwrap();
        ran_rx.recv_timeout(Duration::from_secs(10)).unwrap();
        release.send(()).unwrap();
        first_rx.await.unwrap().unwrap();
        // The first fsync began before the second group ran: the second waits for the next.
        sync_started.recv_timeout(Duration::from_secs(10)).unwrap();
        assert!(
            second_rx.try_recv().is_err(),
            "answered before an fsync after its commit"
        );
        release.send(()).unwrap();
        second_rx.await.unwrap().unwrap();
        writer.close().await;
        assert_eq!(rows(&path), ["first", "second"]);
    }

    /// After a failed fsync nobody can say what the disk kept, and a later fsync may succeed
    /// without the lost pages: the group is failed, and so is every write after it.
    #[tokio::test]
    async fn a_failed_fsync_fails_its_group_and_every_later_write() {
        let dir = tempfile::tempdir().unwrap();
        let (path, conn) = database(&dir);
        let mut fsyncs = 0;
        let mut fsync = wal_sync(&path);
        let sync: SyncWal = Box::new(move || {
            fsyncs += 1;
            if fsyncs == 2 {
                return Err(std::io::Error::other("EIO"));
            }
            fsync()
        });
        let writer = spawn(conn, sync, 16, 16, &Metrics::new());
        let (before, before_rx) = insert("before");
        writer.try_submit(before).unwrap();
        before_rx.await.unwrap().unwrap();
        let (failing, failing_rx) = insert("failing");
        writer.try_submit(failing).unwrap();
        assert!(matches!(
            failing_rx.await.unwrap(),
            Err(StoreError::Unavailable(_))
        ));
        let (after, after_rx) = insert("after");
        writer.try_submit(after).unwrap();
        assert!(
            after_rx.await.is_err(),
            "dropped unrun: its waiter hears no answer"
        );
        writer.close().await;
        assert!(!rows(&path).contains(&"after".to_owned()));
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
        let writer = spawn(conn, wal_sync(&path), 16, 16, &Metrics::new());

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
