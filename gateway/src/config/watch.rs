//! Watching the config file. The folder is watched, not the file: editors save by writing a
//! temporary file and renaming it over the old one (a new inode), or by truncating and
//! rewriting; both show up as events for the file's name in its folder. Events are debounced,
//! and a save that leaves the content unchanged triggers nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify_debouncer_full::notify::RecursiveMode;
use notify_debouncer_full::{DebounceEventResult, new_debouncer};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const DEBOUNCE: Duration = Duration::from_millis(200);

fn content_hash(path: &Path) -> Option<[u8; 32]> {
    std::fs::read(path)
        .ok()
        .map(|bytes| Sha256::digest(&bytes).into())
}

/// Calls `on_change` after each settled change of the file's content, until `shutdown`.
pub async fn watch(path: PathBuf, shutdown: CancellationToken, on_change: impl Fn() + Send + 'static) {
    let folder = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let Some(file_name) = path.file_name().map(|n| n.to_os_string()) else {
        tracing::warn!(path = %path.display(), "not a file path; config changes are not watched");
        return;
    };
    let (tx, mut rx) = mpsc::unbounded_channel::<()>();
    let mut debouncer = match new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
        if let Ok(events) = result
            && events.iter().any(|e| {
                e.paths
                    .iter()
                    .any(|p| p.file_name() == Some(file_name.as_os_str()))
            })
        {
            let _ = tx.send(());
        }
    }) {
        Ok(d) => d,
        Err(e) => {
            tracing::warn!(error = %e, "cannot watch the config file; use SIGHUP to reload");
            return;
        }
    };
    if let Err(e) = debouncer.watch(&folder, RecursiveMode::NonRecursive) {
        tracing::warn!(error = %e, folder = %folder.display(), "cannot watch the config folder; use SIGHUP to reload");
        return;
    }
    tracing::info!(path = %path.display(), "watching the config file for changes");
    let mut last = content_hash(&path);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => break,
            event = rx.recv() => {
                if event.is_none() {
                    break;
                }
                // Several events of one save arrive together; take them all.
                while rx.try_recv().is_ok() {}
                let now = content_hash(&path);
                // A missing file mid-rename is not a change: the rename's own event follows.
                if now.is_some() && now != last {
                    last = now;
                    on_change();
                }
            }
        }
    }
    drop(debouncer);
}
