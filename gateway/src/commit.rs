//! The one path by which deliveries become durable and scheduled: "commit, then schedule".
//!
//! Every writer of deliveries — ingestion, operator events, replay, re-enable, redrive,
//! redeliver — goes through [`Committer::commit`]. The write and the hand-off to the scheduler
//! run in a task of their own, tracked by the gateway: a client that hangs up cannot cancel it
//! between the commit and the scheduling (which would leave committed deliveries waiting for a
//! restart), and shutdown waits for it.

use std::future::Future;

use tokio_util::task::TaskTracker;

use crate::scheduler::SchedulerHandle;
use crate::store::{ReadyDelivery, Restarted, StoreError};

/// What a committed write hands to the scheduler.
#[derive(Debug)]
pub enum ToSchedule {
    /// New deliveries (ingestion, replay) or restarted finished ones (redrive).
    Ready(Vec<ReadyDelivery>),
    /// One restarted delivery, which may replace a waiting attempt of its old round.
    Restarted(Restarted),
    /// The write created nothing to attempt (an idempotent request answered before).
    Nothing,
}

#[derive(Clone)]
pub struct Committer {
    scheduler: SchedulerHandle,
    /// Owns the commit tasks, so that shutdown waits for them.
    tasks: TaskTracker,
}

impl Committer {
    pub fn new(scheduler: SchedulerHandle, tasks: TaskTracker) -> Self {
        Committer { scheduler, tasks }
    }

    /// Runs `write` (a store write), then schedules what it created, in a tracked task;
    /// answers what the write answered.
    pub async fn commit<T, W>(&self, write: W) -> Result<T, StoreError>
    where
        T: Send + 'static,
        W: Future<Output = Result<(T, ToSchedule), StoreError>> + Send + 'static,
    {
        let scheduler = self.scheduler.clone();
        let task = self.tasks.spawn(async move {
            let (answer, to_schedule) = write.await?;
            match to_schedule {
                ToSchedule::Ready(ready) => scheduler.enqueue(ready),
                ToSchedule::Restarted(restarted) => scheduler.restarted(restarted),
                ToSchedule::Nothing => {}
            }
            Ok(answer)
        });
        task.await
            .map_err(|e| StoreError::Internal(format!("commit task failed: {e}")))?
    }

    /// Like [`Committer::commit`], without waiting for the outcome: for writes nobody waits on
    /// (operator events). A failure is logged.
    pub fn commit_in_background<W>(&self, what: &'static str, write: W)
    where
        W: Future<Output = Result<((), ToSchedule), StoreError>> + Send + 'static,
    {
        let this = self.clone();
        self.tasks.spawn(async move {
            if let Err(e) = this.commit(write).await {
                tracing::warn!(error = %e, what, "a background write failed");
            }
        });
    }
}
