//! Streams the actor's state changes to the store, in decision order, in groups.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;

use crate::health::{HealthInput, Step};
use crate::store::{StateChange, Store, StoreError};

/// What became of the health inputs of a committed (or dropped) batch, for the actor: the
/// store's step for each, in order, or `None` when the batch could not be written.
pub(super) type HealthReport = Vec<(Arc<str>, HealthInput, Option<Step>)>;

/// Commits state changes in decision order, as many per commit as have piled up meanwhile.
///
/// While the store cannot take writes (disk full, size cap reached, I/O error) the changes are
/// kept, in order, and committed as soon as it can again, so the disk catches up with memory
/// without a restart. They wait in memory only, bounded by the attempts made meanwhile: a crash
/// loses them like any uncommitted write, and the deliveries they concern, still pending on
/// disk, are attempted again after the restart. When the scheduler stops they get one last
/// try. Any other failure would fail again: the batch is logged and dropped.
pub(super) async fn feed_store(
    store: Arc<dyn Store>,
    mut rx: mpsc::UnboundedReceiver<StateChange>,
    reports: mpsc::UnboundedSender<HealthReport>,
    write_failures: metrics::Counter,
    done: Arc<super::handle::Shared>,
) {
    let done = |count: usize| {
        done.changes_done
            .fetch_add(count as u64, std::sync::atomic::Ordering::SeqCst);
    };
    const FIRST_RETRY: Duration = Duration::from_millis(50);
    const MAX_RETRY: Duration = Duration::from_secs(2);
    let mut pending: Vec<StateChange> = Vec::with_capacity(1024);
    let mut open = true;
    let mut retry = FIRST_RETRY;
    let mut failing_since: Option<std::time::Instant> = None;
    loop {
        // A batch kept from a failed try goes again as it is (plus what came meanwhile).
        if pending.is_empty() && (!open || rx.recv_many(&mut pending, 4096).await == 0) {
            return;
        }
        let batch: Arc<[StateChange]> = std::mem::take(&mut pending).into();
        let count = batch.len();
        match store.apply(batch.clone()).await {
            Ok(applied) => {
                let report = applied
                    .into_iter()
                    .map(|a| (a.endpoint, a.input, Some(a.step)))
                    .collect();
                let _ = reports.send(report);
                done(count);
                retry = FIRST_RETRY;
                if let Some(since) = failing_since.take() {
                    tracing::info!(
                        count,
                        after_s = since.elapsed().as_secs(),
                        "delivery outcomes are recorded again"
                    );
                }
            }
            Err(StoreError::Unavailable(e)) if open => {
                if failing_since.is_none() {
                    tracing::error!(error = %e, count, "could not record delivery outcomes; keeping them until the store takes writes again");
                    failing_since = Some(std::time::Instant::now());
                }
                write_failures.increment(1);
                // The batch goes again first; collect what arrives meanwhile, in order, until
                // it is time to try again.
                pending = batch.to_vec();
                let wait = tokio::time::sleep(retry);
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        _ = &mut wait => break,
                        received = rx.recv_many(&mut pending, 4096) => if received == 0 {
                            open = false;
                            break;
                        },
                    }
                }
                retry = (retry * 2).min(MAX_RETRY);
            }
            Err(e) => {
                // The deliveries stay pending on disk and are attempted again after a restart.
                tracing::error!(error = %e, count, "could not record delivery outcomes; dropping them");
                write_failures.increment(1);
                let report = batch
                    .iter()
                    .filter_map(|change| match change {
                        StateChange::Health(h) => Some((h.endpoint.clone(), h.input, None)),
                        _ => None,
                    })
                    .collect();
                let _ = reports.send(report);
                done(count);
            }
        }
    }
}
