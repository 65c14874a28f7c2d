//! Keeping the registry in step with the plugin folder: rescans (at start, on every folder
//! event) and the folder watcher.
//!
//! A rescan compiles and validates changed files off the hot path and swaps the whole map at
//! once. A file that fails keeps the previous version of its plugin serving; a deleted file
//! removes its plugin (calls then fail with `missing` until it comes back).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use notify_debouncer_full::notify::event::{AccessKind, AccessMode};
use notify_debouncer_full::notify::{EventKind, RecursiveMode};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

use super::call::{self, CallError};
use super::check::{broken_script, sample_input};
use super::registry::{FileKind, JS_ENGINE, Loaded, PluginMap, plugin_files, script_sha256};
use super::{PluginHost, empty_config};
use crate::model::Timestamp;

/// How long the watcher waits for a burst of folder events to settle before rescanning. A
/// copy in progress produces a burst; rename-into-place produces one event.
pub(crate) const DEBOUNCE: Duration = Duration::from_millis(50);

/// Whether a folder event can change what the folder holds. Reading it does not: a rescan
/// opens the folder and its files, and counting those opens (inotify reports them) as changes
/// made the watcher rescan its own reads, twenty times a second, forever.
/// A file closed after writing is a change (some writers are seen only then).
fn changes_the_folder(event: &notify_debouncer_full::notify::Event) -> bool {
    match event.kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        _ => true,
    }
}

impl PluginHost {
    /// Watches the plugin folder until `shutdown` is cancelled. Dropping in, replacing,
    /// deleting or renaming a `.wasm` file into place takes effect without restart. A file that
    /// fails to compile or validate keeps the previous version serving, logs a warning naming
    /// the file and the reason, and counts `hookgate_plugin_reload_failures_total`.
    pub async fn watch(&self, shutdown: CancellationToken) {
        let (events_tx, mut events_rx) = tokio::sync::mpsc::channel::<()>(1);
        let debouncer = notify_debouncer_full::new_debouncer(
            DEBOUNCE,
            None,
            move |result: notify_debouncer_full::DebounceEventResult| {
                let rescan = match &result {
                    Err(errors) => {
                        tracing::warn!(?errors, "plugin folder watcher reported errors; rescanning");
                        true
                    }
                    Ok(events) => events.iter().any(|e| changes_the_folder(&e.event)),
                };
                // A full channel already holds a pending rescan, which will see this change too.
                if rescan {
                    let _ = events_tx.try_send(());
                }
            },
        );
        let mut debouncer = match debouncer {
            Ok(d) => d,
            Err(e) => {
                tracing::error!(error = %e, "cannot watch the plugin folder; plugins will not hot-reload");
                shutdown.cancelled().await;
                return;
            }
        };
        if let Err(e) = debouncer.watch(&self.inner.dir, RecursiveMode::NonRecursive) {
            tracing::error!(dir = %self.inner.dir.display(), error = %e, "cannot watch the plugin folder; plugins will not hot-reload");
            shutdown.cancelled().await;
            return;
        }
        // Catch up with whatever changed between `new` and the watch starting.
        self.rescan_logged().await;
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                event = events_rx.recv() => match event {
                    Some(()) => self.rescan_logged().await,
                    None => break,
                },
            }
        }
        debouncer.stop_nonblocking();
    }

    /// Rescans the plugin folder now (the watcher does this on every change).
    pub async fn rescan(&self) -> anyhow::Result<()> {
        let dir = &self.inner.dir;
        let files = plugin_files(dir)
            .map_err(|e| anyhow::anyhow!("cannot read the plugin folder {}: {e}", dir.display()))?;
        let current = self.inner.registry.load_full();
        let mut scan = Scan {
            next: (*current).clone(),
            current,
            present: HashSet::new(),
            changed: false,
        };
        // Components first, the bundled ones next: a `.js` file runs on the `js` component.
        let (components, scripts): (Vec<_>, Vec<_>) = files
            .into_iter()
            .partition(|(_, _, kind)| *kind == FileKind::Wasm);
        for (name, path, _) in components {
            self.rescan_file(&mut scan, name, &path, None).await;
        }
        // A `.js` file overrides a bundled plugin of its name as a `.wasm` file does (but
        // never the engine it runs on).
        let overridden: HashSet<&str> = scripts
            .iter()
            .map(|(name, _, _)| name.as_str())
            .filter(|name| *name != JS_ENGINE)
            .collect();
        self.load_bundled(&mut scan, &overridden).await;
        for (name, path, _) in scripts {
            match scan.next.get(JS_ENGINE).cloned() {
                Some(engine) => self.rescan_file(&mut scan, name, &path, Some(engine)).await,
                None => {
                    tracing::warn!(file = %path.display(), "a .js plugin needs the `{JS_ENGINE}` plugin to run it, and none is loaded (bundled, or {JS_ENGINE}.wasm in the folder); ignoring the file");
                }
            }
        }
        let Scan {
            current,
            mut next,
            present,
            mut changed,
        } = scan;
        for name in current.keys() {
            if !present.contains(name) {
                tracing::info!(plugin = %name, "plugin file deleted; plugin unloaded");
                next.remove(name);
                changed = true;
            }
        }
        self.inner
            .rejected
            .lock()
            .expect("rejected-files lock poisoned")
            .retain(|name, _| present.contains(name));
        if changed {
            let live: HashSet<u64> = next.values().map(|loaded| loaded.load_id).collect();
            self.share_slots(&next);
            self.inner.registry.store(Arc::new(next));
            // Idle instances of replaced or deleted versions would never be taken again.
            self.inner.pool.retain_versions(|load_id| live.contains(&load_id));
            self.inner.changes.send_modify(|generation| *generation += 1);
        }
        Ok(())
    }

    /// Loads plugin `name` from the file at `path` into `scan.next` when it changed: a
    /// component, or with `engine` the JavaScript that engine runs. A file that fails keeps
    /// the previous version serving.
    async fn rescan_file(
        &self,
        scan: &mut Scan,
        name: String,
        path: &std::path::Path,
        engine: Option<Arc<Loaded>>,
    ) {
        if !scan.present.insert(name.clone()) {
            tracing::warn!(file = %path.display(), plugin = %name, "two files name the same plugin (`-` and `_` count as the same, foo.wasm and foo.js are both `foo`); ignoring this one");
            return;
        }
        let Some(bytes) = self.read_file(&name, path, &mut scan.changed).await else {
            return;
        };
        let sha256 = match &engine {
            None => Sha256::digest(&bytes).into(),
            Some(engine) => script_sha256(engine, &bytes),
        };
        if scan.current.get(&name).is_some_and(|l| l.sha256 == sha256) || self.rejected_before(&name, &sha256)
        {
            return;
        }
        let loaded = match engine {
            None => self.load(&name, bytes).await,
            Some(engine) => self.load_script(&engine, &name, bytes).await,
        };
        match loaded {
            Ok(loaded) => {
                tracing::info!(
                    plugin = %name, world = %loaded.world, version = %loaded.version,
                    compile_ms = loaded.compile_time.as_millis() as u64, from_cache = loaded.from_cache,
                    replaced = scan.current.contains_key(&name),
                    "plugin loaded"
                );
                self.forget_rejection(&name);
                scan.next.insert(name, Arc::new(loaded));
                scan.changed = true;
            }
            Err(e) => {
                match scan.current.get(&name) {
                    Some(old) => tracing::warn!(
                        file = %path.display(), plugin = %name, serving = %old.version,
                        "plugin file rejected, the previous version keeps serving: {e:#}"
                    ),
                    None => tracing::warn!(
                        file = %path.display(), plugin = %name,
                        "plugin file rejected, the plugin is not loaded: {e:#}"
                    ),
                }
                self.inner.metrics.plugin_reload_failures().increment(1);
                self.remember_rejection(&name, sha256, format!("{e:#}"));
                scan.changed = true;
            }
        }
    }

    /// Serves the plugins built into the binary whose names no file in the folder took: a file
    /// overrides a bundled plugin, and when it goes the bundled one serves again.
    async fn load_bundled(&self, scan: &mut Scan, overridden: &HashSet<&str>) {
        for (name, bytes, sha256) in &self.inner.bundled {
            if overridden.contains(name.as_str()) || !scan.present.insert(name.clone()) {
                continue;
            }
            if scan.current.get(name).is_some_and(|l| l.sha256 == *sha256) {
                continue;
            }
            match self.load(name, bytes.to_vec()).await {
                Ok(loaded) => {
                    tracing::info!(plugin = %name, world = %loaded.world, version = %loaded.version, "bundled plugin loaded");
                    scan.next.insert(name.clone(), Arc::new(loaded));
                    scan.changed = true;
                }
                Err(e) => tracing::error!(plugin = %name, "the bundled plugin does not load: {e:#}"),
            }
        }
    }

    /// The content of plugin `name`'s file, or `None` when it cannot be read or is over the
    /// size limit. A file over the limit is refused without being read or compiled, said once
    /// per size (which sets `changed`, as any rejection does).
    async fn read_file(&self, name: &str, path: &std::path::Path, changed: &mut bool) -> Option<Vec<u8>> {
        let max_file_bytes = self.inner.limits.max_file_bytes;
        match read_plugin_file(path, max_file_bytes).await {
            Ok(bytes) => Some(bytes),
            Err(PluginFileError::TooLarge(size_bytes)) => {
                let sha256: [u8; 32] = Sha256::digest(format!("too large: {size_bytes}")).into();
                if !self.rejected_before(name, &sha256) {
                    tracing::warn!(
                        file = %path.display(), plugin = %name, size_bytes, max_file_bytes,
                        "plugin file refused without compiling it: {size_bytes} bytes is over the limit of {max_file_bytes} bytes"
                    );
                    self.inner.metrics.plugin_reload_failures().increment(1);
                    let error = format!("{size_bytes} bytes is over the limit of {max_file_bytes} bytes");
                    self.remember_rejection(name, sha256, error);
                    *changed = true;
                }
                None
            }
            Err(PluginFileError::Io(e)) => {
                tracing::warn!(file = %path.display(), error = %e, "cannot read a plugin file; keeping what is loaded");
                None
            }
        }
    }

    async fn rescan_logged(&self) {
        if let Err(e) = self.rescan().await {
            tracing::warn!("{e:#}");
        }
    }

    fn rejected_before(&self, name: &str, sha256: &[u8; 32]) -> bool {
        let rejected = self.inner.rejected.lock().expect("rejected-files lock poisoned");
        rejected.get(name).is_some_and(|r| r.sha256 == *sha256)
    }

    fn remember_rejection(&self, name: &str, sha256: [u8; 32], error: String) {
        let mut rejected = self.inner.rejected.lock().expect("rejected-files lock poisoned");
        let at = Timestamp::from_system_time(std::time::SystemTime::now());
        rejected.insert(
            name.to_owned(),
            super::Rejected {
                name: name.to_owned(),
                sha256,
                error,
                at,
            },
        );
    }

    fn forget_rejection(&self, name: &str) {
        let mut rejected = self.inner.rejected.lock().expect("rejected-files lock poisoned");
        rejected.remove(name);
    }

    /// Compiles (on the blocking pool: compiling is CPU-heavy) and validates one file.
    async fn load(&self, name: &str, bytes: Vec<u8>) -> anyhow::Result<Loaded> {
        let host = self.clone();
        let file_name = name.to_owned();
        let loaded = tokio::task::spawn_blocking(move || host.inner.compiler.compile(&file_name, &bytes))
            .await
            .map_err(|e| anyhow::anyhow!("compilation panicked: {e}"))??;
        let loaded = Arc::new(loaded);
        self.validate(&loaded).await?;
        Ok(Arc::into_inner(loaded).expect("validation keeps no reference"))
    }

    /// Makes plugin `name` of the JavaScript `code` on `engine` and validates it: code that
    /// does not parse or defines no handler is rejected like a component that does not load.
    async fn load_script(&self, engine: &Loaded, name: &str, code: Vec<u8>) -> anyhow::Result<Loaded> {
        let loaded = Arc::new(self.inner.compiler.script(engine, name, code)?);
        self.validate(&loaded).await?;
        Ok(Arc::into_inner(loaded).expect("validation keeps no reference"))
    }

    /// Instantiates the plugin under the call limits and type-checks its export against its
    /// world: a plugin that cannot start, or whose export has the wrong type, is rejected.
    /// Then runs it once on a sample input; that answer is only logged, since a plugin may
    /// legitimately refuse a sample (no config, not its kind of payload) — and the hostile
    /// test fixtures must still load so that their calls can fail.
    async fn validate(&self, loaded: &Arc<Loaded>) -> anyhow::Result<()> {
        let _permit = self
            .inner
            .validations
            .acquire()
            .await
            .map_err(|_| anyhow::anyhow!("the plugin host is shutting down"))?;
        let (input, keys) = sample_input(loaded.world);
        // A fresh instance, dropped after the call: the sample is not any binding's call.
        let result = call::run(
            &self.inner.engine,
            loaded,
            &self.inner.limits,
            &loaded.call_config(&empty_config()),
            keys,
            input,
            None,
        )
        .await
        .result;
        match result {
            Ok(_) => Ok(()),
            Err(CallError {
                failure,
                before_export: true,
            }) => anyhow::bail!("{}: {}", failure.detail, failure.message),
            Err(CallError { failure, .. }) if broken_script(loaded, &failure) => {
                anyhow::bail!("{}", failure.message)
            }
            Err(CallError { failure, .. }) => {
                tracing::info!(plugin = %loaded.name, "plugin loaded; its call on a sample input failed ({failure})");
                Ok(())
            }
        }
    }
}

/// One rescan's state: the registry it started from, the one it builds, the names it saw.
struct Scan {
    current: Arc<PluginMap>,
    next: PluginMap,
    present: HashSet<String>,
    changed: bool,
}

/// Why a plugin file was not read.
#[derive(Debug)]
pub(crate) enum PluginFileError {
    /// The file is larger than the limit (its size, in bytes).
    TooLarge(u64),
    Io(std::io::Error),
}

/// Reads a plugin file of at most `max_bytes`: its size is checked before reading, and the
/// read stops past the limit should the file grow meanwhile.
pub(crate) async fn read_plugin_file(
    path: &std::path::Path,
    max_bytes: u64,
) -> Result<Vec<u8>, PluginFileError> {
    use tokio::io::AsyncReadExt as _;
    let file = tokio::fs::File::open(path).await.map_err(PluginFileError::Io)?;
    let size_bytes = file.metadata().await.map_err(PluginFileError::Io)?.len();
    if size_bytes > max_bytes {
        return Err(PluginFileError::TooLarge(size_bytes));
    }
    let mut bytes = Vec::with_capacity(size_bytes as usize);
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut bytes)
        .await
        .map_err(PluginFileError::Io)?;
    if bytes.len() as u64 > max_bytes {
        return Err(PluginFileError::TooLarge(bytes.len() as u64));
    }
    Ok(bytes)
}

#[cfg(test)]
mod tests {
    use notify_debouncer_full::notify::Event;
    use notify_debouncer_full::notify::event::{CreateKind, DataChange, ModifyKind, RemoveKind, RenameMode};

    use super::*;

    /// A rescan reads the folder, and reading it must not start the next rescan: only what can
    /// change a plugin does.
    #[test]
    fn only_what_can_change_a_plugin_starts_a_rescan() {
        let event = |kind| Event::new(kind);
        for read in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
        ] {
            assert!(!changes_the_folder(&event(read)), "{read:?}");
        }
        for change in [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Content)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Remove(RemoveKind::File),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
            EventKind::Any,
        ] {
            assert!(changes_the_folder(&event(change)), "{change:?}");
        }
    }
}
