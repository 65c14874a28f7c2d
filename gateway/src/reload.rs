//! Config reloads: from the file watcher, SIGHUP or a test, to a [`ReloadOutcome`] that is
//! logged, counted and shown in `GET /v1/status`; and the review of plugin bindings that follows
//! every reload and every change of the plugin folder.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::config::{self, Config, ConfigError};
use crate::delivery::Sender;
use crate::plugins::{PluginHost, World};
use crate::scheduler::SchedulerHandle;
use crate::store::{ApiEndpointRow, Store};
use crate::telemetry::Metrics;

/// What `GET /v1/status` reports besides counters: when the gateway started and how the last
/// config reload went. The reloader writes it; the API reads it.
#[derive(Debug, Clone, Default)]
pub struct RuntimeStatus {
    pub started_at: Option<crate::model::Timestamp>,
    pub last_reload: Option<ReloadStatus>,
    /// Plugin bindings that cannot work now (plugin missing or of another kind).
    pub binding_problems: Vec<crate::config::BindingProblem>,
}

/// How the last config reload went.
#[derive(Debug, Clone)]
pub struct ReloadStatus {
    pub at: crate::model::Timestamp,
    pub ok: bool,
    /// `file:line: path: reason` lines when the reload was refused.
    pub errors: Vec<String>,
    /// Settings the file changes that are read only at start: they keep their running value
    /// until a restart.
    pub needs_restart: Vec<&'static str>,
}

impl ReloadStatus {
    /// Whether what runs differs from the file on disk (as last read): the file was refused,
    /// or it changes settings that wait for a restart.
    pub fn differs_from_file(&self) -> bool {
        !self.ok || !self.needs_restart.is_empty()
    }
}

/// Applies config reloads (from the file watcher, SIGHUP or a test) and records how they went.
#[derive(Clone)]
pub struct Reloader {
    pub(crate) config: Arc<ArcSwap<Config>>,
    pub(crate) plugins: PluginHost,
    pub(crate) scheduler: SchedulerHandle,
    pub(crate) sender: Sender,
    pub(crate) status: Arc<Mutex<RuntimeStatus>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) store: Arc<dyn Store>,
    pub(crate) metrics: Metrics,
    /// Owns the store jobs a reload starts; shutdown waits for them before closing the store.
    pub(crate) tasks: TaskTracker,
    /// One change of the running config at a time: a file reload and a change of the
    /// endpoints created through the API each start from what the other left.
    pub(crate) changing: Arc<Mutex<()>>,
}

/// How one reload went. Every reload ends in exactly one of these, and [`Reloader::record`] is
/// the one place that tells the operator (log, `hookgate_config_reloads_total`,
/// `GET /v1/status`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReloadOutcome {
    /// The new config runs. `needs_restart` names the settings it wanted to change that are
    /// read only at start: they keep their running value.
    Applied {
        added: usize,
        removed: usize,
        changed: usize,
        needs_restart: Vec<&'static str>,
    },
    /// The file has problems; the running config keeps serving.
    Refused { problems: Vec<String> },
    /// The gateway runs on the embedded default: there is no file to read again.
    NoFile,
}

impl Reloader {
    /// Reads the config file again: applies it if valid, else keeps the running config.
    pub fn reload_from_file(&self) -> ReloadOutcome {
        let outcome = match self.config.load().source.clone() {
            None => ReloadOutcome::NoFile,
            Some(path) => match config::load_file(&path) {
                Ok(new) => return self.apply(new),
                Err(e) => ReloadOutcome::Refused {
                    problems: e.problems.iter().map(ToString::to_string).collect(),
                },
            },
        };
        self.record(&outcome);
        outcome
    }

    /// Applies a validated config. Endpoints and policies added, changed or removed take effect
    /// at the next planning step of each delivery; the settings read only at start keep their
    /// running value (see [`keep_restart_only_settings`]).
    pub fn apply(&self, new: Config) -> ReloadOutcome {
        let _one_at_a_time = self.changing.lock().expect("config change lock");
        let old = self.config.load_full();
        // The endpoints created through the API stay, checked against the new file.
        let mut new = match new.with_api_endpoints(old.api_endpoints.clone()) {
            Ok(new) => new,
            Err(e) => {
                let outcome = ReloadOutcome::Refused {
                    problems: e.problems.iter().map(ToString::to_string).collect(),
                };
                self.record(&outcome);
                return outcome;
            }
        };
        let needs_restart = keep_restart_only_settings(&mut new, &old);
        if new.storage.max_size_bytes != old.storage.max_size_bytes {
            // Through the writer, between two commits: raising the cap is how a full store
            // gets room again, without a restart.
            let (store, max_bytes) = (self.store.clone(), new.storage.max_size_bytes);
            self.tasks.spawn(async move {
                if let Err(e) = store.set_size_limit(max_bytes).await {
                    tracing::error!(error = %e, "could not apply storage.max_size");
                }
            });
        }
        let (added, removed, changed) = endpoint_changes(&old, &new);
        self.sender
            .set_allow_networks(new.delivery.allow_networks.clone());
        self.config.store(Arc::new(new));
        self.scheduler.reconfigured();
        let outcome = ReloadOutcome::Applied {
            added,
            removed,
            changed,
            needs_restart,
        };
        self.record(&outcome);
        self.review_bindings(Announce::All);
        outcome
    }

    /// Runs the endpoints created through the API as the store holds them (`rows`), in place
    /// of those running; the rest of the config stays. Refused, with the running config kept,
    /// when they do not fit it.
    pub(crate) fn apply_api_endpoints(&self, rows: Vec<ApiEndpointRow>) -> Result<(), ConfigError> {
        let _one_at_a_time = self.changing.lock().expect("config change lock");
        let old = self.config.load_full();
        if *old.api_endpoints == *rows {
            return Ok(());
        }
        let new = Config::clone(&old).with_api_endpoints(Arc::from(rows))?;
        let (added, removed, changed) = endpoint_changes(&old, &new);
        self.config.store(Arc::new(new));
        self.scheduler.reconfigured();
        tracing::info!(
            added,
            removed,
            changed,
            "endpoints created through the API changed"
        );
        self.review_bindings(Announce::Changes);
        Ok(())
    }

    /// Tells the operator how a reload went.
    fn record(&self, outcome: &ReloadOutcome) {
        let (result, ok, errors, needs_restart) = match outcome {
            ReloadOutcome::NoFile => {
                tracing::warn!("no config file to reload: the gateway runs on the embedded default");
                return;
            }
            ReloadOutcome::Refused { problems } => {
                for line in problems {
                    tracing::error!("config reload refused: {line}");
                }
                // The line an operator looks for when the gateway does not do what the file
                // says: the problems above are why.
                let file = self.config.load().source.clone().unwrap_or_default();
                tracing::warn!(
                    file = %file.display(),
                    problems = problems.len(),
                    "the config file on disk is not what runs: its reload was refused, and the \
                     gateway keeps running the config it had"
                );
                ("refused", false, problems.clone(), Vec::new())
            }
            ReloadOutcome::Applied {
                added,
                removed,
                changed,
                needs_restart,
            } => {
                for key in needs_restart {
                    tracing::warn!(
                        key,
                        "this setting changes only with a restart; keeping the running value"
                    );
                }
                tracing::info!(added, removed, changed, "config reloaded");
                ("applied", true, Vec::new(), needs_restart.clone())
            }
        };
        self.metrics.config_reloads(result).increment(1);
        self.status.lock().expect("status lock").last_reload = Some(ReloadStatus {
            at: self.clock.now(),
            ok,
            errors,
            needs_restart,
        });
    }
}

/// How many endpoints a reload adds, removes and changes.
fn endpoint_changes(old: &Config, new: &Config) -> (usize, usize, usize) {
    let added = new
        .endpoints
        .keys()
        .filter(|k| !old.endpoints.contains_key(*k))
        .count();
    let removed = old
        .endpoints
        .keys()
        .filter(|k| !new.endpoints.contains_key(*k))
        .count();
    let changed = new
        .endpoints
        .iter()
        .filter(|(k, v)| old.endpoints.get(*k).is_some_and(|o| o.as_ref() != v.as_ref()))
        .count();
    (added, removed, changed)
}

/// Puts back into `new` the running value of every setting that is read only at start, and
/// names those that the new config wanted to change. This list is the one place that says
/// which settings need a restart (the README's "Live reload" repeats it for users).
fn keep_restart_only_settings(new: &mut Config, old: &Config) -> Vec<&'static str> {
    fn keep<T: PartialEq + Clone>(new: &mut T, old: &T) -> bool {
        let differs = new != old;
        if differs {
            *new = old.clone();
        }
        differs
    }
    [
        ("server.listen", keep(&mut new.server.listen, &old.server.listen)),
        (
            "server.header_timeout",
            keep(&mut new.server.header_timeout, &old.server.header_timeout),
        ),
        (
            "server.body_timeout",
            keep(&mut new.server.body_timeout, &old.server.body_timeout),
        ),
        (
            "server.shutdown_grace",
            keep(&mut new.server.shutdown_grace, &old.server.shutdown_grace),
        ),
        (
            "server.workers",
            keep(&mut new.server.workers, &old.server.workers),
        ),
        ("storage.path", keep(&mut new.storage.path, &old.storage.path)),
        ("storage.url", keep(&mut new.storage.url, &old.storage.url)),
        (
            "storage.max_connections",
            keep(&mut new.storage.max_connections, &old.storage.max_connections),
        ),
        ("cluster.lease", keep(&mut new.cluster.lease, &old.cluster.lease)),
        (
            "cluster.node_id",
            keep(&mut new.cluster.node_id, &old.cluster.node_id),
        ),
        (
            "delivery.ca_certs",
            keep(&mut new.delivery.extra_roots, &old.delivery.extra_roots),
        ),
        (
            "delivery.proxy",
            keep(&mut new.delivery.proxy, &old.delivery.proxy),
        ),
        ("telemetry", keep(&mut new.telemetry, &old.telemetry)),
        ("plugins.dir", keep(&mut new.plugins.dir, &old.plugins.dir)),
        (
            "plugins.cache_dir",
            keep(&mut new.plugins.cache_dir, &old.plugins.cache_dir),
        ),
        (
            "plugins.call_timeout",
            keep(&mut new.plugins.call_timeout, &old.plugins.call_timeout),
        ),
        (
            "plugins.call_wall_timeout",
            keep(&mut new.plugins.call_wall_timeout, &old.plugins.call_wall_timeout),
        ),
        (
            "plugins.max_file_size",
            keep(&mut new.plugins.max_file_bytes, &old.plugins.max_file_bytes),
        ),
        (
            "plugins.memory",
            keep(&mut new.plugins.memory_bytes, &old.plugins.memory_bytes),
        ),
        (
            "plugins.max_output",
            keep(&mut new.plugins.max_output_bytes, &old.plugins.max_output_bytes),
        ),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

/// Which binding problems [`Reloader::review_bindings`] logs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Announce {
    /// Every current problem: at start and after a config reload, where the operator looks.
    All,
    /// Only what changed: after the plugin folder changed.
    Changes,
}

impl Reloader {
    /// Finds the plugin bindings that cannot work now (plugin missing or of another kind),
    /// records them for `GET /v1/status`, the endpoints' `problems` and the
    /// `hookgate_plugin_binding_problems` gauge, and logs them.
    pub(crate) fn review_bindings(&self, announce: Announce) {
        let found = self
            .config
            .load()
            .plugin_binding_problems(|name| self.plugins.world_of(name).map(World::as_str));
        let mut status = self.status.lock().expect("status lock");
        let before = std::mem::replace(&mut status.binding_problems, found.clone());
        drop(status);
        for gone in before.iter().filter(|p| !found.contains(p)) {
            self.problem_gauge(gone).set(0.0);
            tracing::info!("resolved: {gone}");
        }
        for problem in &found {
            self.problem_gauge(problem).set(1.0);
            if announce == Announce::All || !before.contains(problem) {
                tracing::warn!("{problem}; its attempts fail with plugin_error until it is");
            }
        }
    }
}

impl Reloader {
    fn problem_gauge(&self, p: &config::BindingProblem) -> metrics::Gauge {
        self.metrics
            .binding_problem(&p.endpoint, p.role, &p.plugin, p.code())
    }
}

/// Reviews the plugin bindings whenever the plugin folder changes: a plugin that appears
/// resolves a problem, one that is deleted or replaced by another kind makes one.
pub(crate) async fn review_bindings_on_plugin_changes(reloader: Reloader, shutdown: CancellationToken) {
    let mut changes = reloader.plugins.changes();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            changed = changes.changed() => {
                if changed.is_err() {
                    return;
                }
                reloader.review_bindings(Announce::Changes);
            }
        }
    }
}
