//! Power loss: the store answers an ingestion only once the event is durable, so cutting the
//! power anywhere — in a group's WAL writes, between them and their fsync, in a checkpoint, in
//! the writes that start the WAL over — loses no acknowledged event, and the database the disk
//! kept opens and passes `PRAGMA integrity_check`. Nor is an answer "already done" to a
//! request under the same idempotency key.
//!
//! The power cut is [`super::power_cut_vfs`]: it drops every write no fsync covered. A cut
//! falls on a numbered disk operation, not at a moment in time, so each seed cuts at the same
//! point on every run (which requests share a group still depends on the threads).

use rand::{Rng, SeedableRng};

use super::power_cut_vfs::{Cut, Disk, DiskCounts, VFS_NAME};
use super::tests::NOW;
use super::*;

/// Clients ingesting at once, each one event at a time until the power fails.
const CLIENTS: usize = 8;
/// Clients that send the same events as the first clients, under the same idempotency keys,
/// at the same time: a twin's request often finds its event written by a group whose fsync
/// has not finished, and its "already done" answer must wait for an fsync as well.
const TWINS: usize = 4;
const EVENTS_PER_CLIENT: usize = 80;
/// Big enough that the run's WAL passes SQLite's checkpoint threshold (1000 pages) more than
/// once, so that the cuts also fall in checkpoints and in a restarted WAL.
const PAYLOAD_BYTES: usize = 8 * 1024;

/// One event under an idempotency key of its own, so that a restart's answer to a repeated
/// request is checked too.
fn one_event(id: &str) -> IngestBatch {
    let mut batch = super::tests::batch(id, PAYLOAD_BYTES);
    batch.idempotency = Some(IdempotencyRecord {
        scope: "power-loss".into(),
        key: id.to_owned(),
        request_hash: id.as_bytes().to_vec(),
        status: 202,
        response: Bytes::new(),
        created_at: NOW,
    });
    batch
}

/// What one power cut did.
struct Run {
    cut: Cut,
    acknowledged: Vec<String>,
    /// Acknowledged, yet not in the database after the restart.
    lost: Vec<String>,
    /// Whether the armed cut fell while the clients were still writing.
    cut_while_writing: bool,
    counts: DiskCounts,
    integrity: String,
}

/// Ingests from [`CLIENTS`] and [`TWINS`] tasks until each has sent its events or seen a
/// failure; returns the ids the store acknowledged, once each.
async fn ingest_until_the_power_fails(store: &Arc<SqliteStore>) -> Vec<String> {
    let mut clients = tokio::task::JoinSet::new();
    for client in 0..CLIENTS + TWINS {
        let store = store.clone();
        clients.spawn(async move {
            let mut acknowledged = Vec::new();
            for n in 0..EVENTS_PER_CLIENT {
                let id = format!("c{}-{n}", client % CLIENTS);
                match store.ingest(one_event(&id)).await {
                    Ok(IngestOutcome::Committed(_) | IngestOutcome::AlreadyDone(_)) => acknowledged.push(id),
                    Err(_) => break,
                }
            }
            acknowledged
        });
    }
    let mut acknowledged = Vec::new();
    while let Some(client) = clients.join_next().await {
        acknowledged.extend(client.expect("a client task"));
    }
    acknowledged.sort();
    acknowledged.dedup();
    acknowledged
}

/// Opens a store on a disk that loses power at `cut`, ingests until it does, then opens the
/// database again on what the disk kept and looks for every acknowledged event.
async fn run(cut: Cut, disk_ignores_syncs: bool) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let disk = Disk::attach(dir.path());
    let store = Arc::new(
        SqliteStore::open(SqliteOptions {
            vfs: Some(VFS_NAME),
            ..SqliteOptions::new(&path)
        })
        .unwrap(),
    );
    if disk_ignores_syncs {
        disk.ignore_syncs();
    }
    disk.arm(cut);
    let acknowledged = ingest_until_the_power_fails(&store).await;
    let cut_while_writing = disk.is_powered_off();
    disk.cut_now();
    let counts = disk.counts();
    store.close().await;
    drop(store);
    disk.restore_synced().unwrap();

    let restarted = SqliteStore::open(SqliteOptions::new(&path)).unwrap();
    let mut lost = Vec::new();
    for id in &acknowledged {
        if restarted.event(id, None).await.unwrap().is_empty() {
            lost.push(id.clone());
        }
    }
    restarted.close().await;
    let conn = Connection::open_with_flags(&path, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let integrity = conn
        .query_row("PRAGMA integrity_check", [], |r| r.get(0))
        .unwrap();
    Run {
        cut,
        acknowledged,
        lost,
        cut_while_writing,
        counts,
        integrity,
    }
}

/// The cuts: seeded operations across the whole run; seeded fsyncs of the WAL, where what was
/// committed since the previous one is lost; one in a checkpoint; one in the writes that start
/// the WAL over after a checkpoint.
///
/// Each comes in every run, however the threads group the requests: a run writes at least
/// two WAL frames (four writes) per event, and one fsync covers at most one request per
/// client (each waits for its answer before it sends again), so the 640 events take over 2500
/// operations and 53 fsyncs; and 200 operations or 5 fsyncs see some events answered.
fn cuts() -> Vec<Cut> {
    let mut cuts: Vec<Cut> = (1..=6)
        .map(|seed| {
            let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
            Cut::AtOperation(rng.random_range(200..=2000))
        })
        .collect();
    cuts.extend((7..=9).map(|seed| {
        let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
        Cut::AtWalSync(rng.random_range(5..=50))
    }));
    cuts.push(Cut::AtDatabaseWrite(20));
    cuts.push(Cut::AfterCheckpoint(30));
    cuts
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_acknowledged_event_is_lost_when_the_power_is_cut() {
    for cut in cuts() {
        let run = run(cut, false).await;
        assert!(
            run.lost.is_empty(),
            "{cut:?}: {} of {} acknowledged events lost, e.g. {:?} ({:?})",
            run.lost.len(),
            run.acknowledged.len(),
            &run.lost[..run.lost.len().min(5)],
            run.counts
        );
        assert_eq!(run.integrity, "ok", "{cut:?}");
        assert!(run.cut_while_writing, "{cut:?} never came ({:?})", run.counts);
        assert!(
            !run.acknowledged.is_empty(),
            "{cut:?} came before any acknowledgement"
        );
    }
}

/// The check above has teeth: on a disk that acknowledges fsync without flushing, as SQLite's
/// `synchronous=OFF` would treat any disk, acknowledged events are lost and it sees them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_that_ignores_fsync_loses_acknowledged_events_and_the_check_sees_it() {
    let run = run(Cut::AtOperation(600), true).await;
    assert!(
        run.cut_while_writing,
        "{:?} never came ({:?})",
        run.cut, run.counts
    );
    assert!(
        !run.lost.is_empty(),
        "nothing of {} acknowledged events was lost",
        run.acknowledged.len()
    );
    assert_eq!(run.integrity, "ok");
}
