//! Watching the config file. The folder is watched, not the file: editors save by writing a
//! temporary file and renaming it over the old one (a new inode), or by truncating and
//! rewriting; both show up as events for the file's name in its folder. Events are debounced,
//! and a save that leaves the content unchanged triggers nothing.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify_debouncer_full::notify::{self, RecursiveMode};
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

/// A running watch of the config file. Watching starts when this is created (so a change made
/// right after start-up is not missed); [`ConfigWatcher::run`] delivers the changes.
pub struct ConfigWatcher {
    path: PathBuf,
    rx: mpsc::UnboundedReceiver<()>,
    last: Option<[u8; 32]>,
    _debouncer: notify_debouncer_full::Debouncer<
        notify_debouncer_full::notify::RecommendedWatcher,
        notify_debouncer_full::RecommendedCache,
    >,
}

impl ConfigWatcher {
    /// Starts watching the folder of `path`. Fails if the platform cannot watch it; the caller
    /// then relies on SIGHUP.
    pub fn start(path: PathBuf) -> Result<ConfigWatcher, notify::Error> {
        let folder = match path.parent() {
            Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
            _ => PathBuf::from("."),
        };
        let file_name = path
            .file_name()
            .map(|n| n.to_os_string())
            .ok_or_else(|| notify::Error::generic("not a file path"))?;
        let (tx, rx) = mpsc::unbounded_channel::<()>();
        let mut debouncer = new_debouncer(DEBOUNCE, None, move |result: DebounceEventResult| {
            if let Ok(events) = result
                && events.iter().any(|e| {
                    e.paths
                        .iter()
                        .any(|p| p.file_name() == Some(file_name.as_os_str()))
                })
            {
                let _ = tx.send(());
            }
        })?;
        debouncer.watch(&folder, RecursiveMode::NonRecursive)?;
        tracing::info!(path = %path.display(), "watching the config file for changes");
        let last = content_hash(&path);
        Ok(ConfigWatcher {
            path,
            rx,
            last,
            _debouncer: debouncer,
        })
    }

    /// Calls `on_change` after each settled change of the file's content, until `shutdown`.
    pub async fn run<F: Future<Output = ()> + Send>(
        mut self,
        shutdown: CancellationToken,
        on_change: impl Fn() -> F + Send + 'static,
    ) {
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                event = self.rx.recv() => {
                    if event.is_none() {
                        break;
                    }
                    // Several events of one save arrive together; take them all.
                    while self.rx.try_recv().is_ok() {}
                    let now = content_hash(&self.path);
                    // A missing file mid-rename is not a change: the rename's own event follows.
                    if now.is_some() && now != self.last {
                        self.last = now;
                        on_change().await;
                    }
                }
            }
        }
    }
}
