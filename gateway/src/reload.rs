//! Config reloads: from the file watcher, SIGHUP or a test, to a [`ReloadOutcome`] that is
//! logged, counted and shown in `GET /v1/status`; and the review of plugin bindings that follows
//! every reload and every change of the plugin folder.

use std::sync::{Arc, Mutex};

use arc_swap::ArcSwap;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::clock::Clock;
use crate::config::{self, Config};
use crate::delivery::Sender;
use crate::endpoints::Endpoints;
use crate::plugins::{PluginHost, World};
use crate::scheduler::SchedulerHandle;
use crate::store::Store;
use crate::telemetry::Metrics;

/// What `GET /v1/status` reports besides counters: when the gateway started and how the last
/// config reload went. The reloader writes it; the API reads it.
#[derive(Debug, Clone, Default)]
pub struct RuntimeStatus {
    pub started_at: Option<crate::model::Timestamp>,
    pub last_reload: Option<ReloadStatus>,
    /// Plugin bindings that cannot work now (plugin missing or of another kind).
    pub binding_problems: Vec<crate::config::BindingProblem>,
    /// The gateway has begun to shut down (`GET /readyz` says so).
    pub stopping: bool,
}

impl RuntimeStatus {
    /// The status of a gateway that started `now`, shared between the reloader and the API.
    pub fn started(now: crate::model::Timestamp) -> Arc<Mutex<RuntimeStatus>> {
        Arc::new(Mutex::new(RuntimeStatus {
            started_at: Some(now),
            ..RuntimeStatus::default()
        }))
    }
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
/// It holds what a reload changes; the gateway's other parts get narrower handles (the
/// endpoint admin a [`BindingReview`], the plugin watcher too).
#[derive(Clone)]
pub struct Reloader {
    pub(crate) config: Arc<ArcSwap<Config>>,
    /// The running endpoints: a reload replaces the file's, after checking that those created
    /// through the API still fit (and waits meanwhile for their changes in progress).
    pub(crate) endpoints: Endpoints,
    /// The transports, for `delivery.allow_networks`.
    pub(crate) sender: Sender,
    /// Told to plan again with the new config.
    pub(crate) scheduler: SchedulerHandle,
    /// For `storage.max_size`, applied by a store job that `tasks` owns: shutdown waits for
    /// it before closing the store.
    pub(crate) store: Arc<dyn Store>,
    pub(crate) tasks: TaskTracker,
    pub(crate) bindings: BindingReview,
    pub(crate) log: ReloadLog,
}

/// How one reload went. Every reload ends in exactly one of these, and [`ReloadLog::record`] is
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
    /// Reads the config file again, with the command line's overrides over it as at start:
    /// applies it if valid, else keeps the running config.
    pub async fn reload_from_file(&self) -> ReloadOutcome {
        let (source, overrides) = {
            let running = self.config.load();
            (running.source.clone(), running.overrides.clone())
        };
        let outcome = match source {
            None => ReloadOutcome::NoFile,
            Some(path) => match config::load_file_with(&path, &overrides) {
                Ok(new) => return self.apply(new).await,
                Err(e) => ReloadOutcome::Refused {
                    problems: e.problems.iter().map(ToString::to_string).collect(),
                },
            },
        };
        self.log.record(&outcome, &self.config);
        outcome
    }

    /// Applies a validated config. Endpoints and policies added, changed or removed take effect
    /// at the next planning step of each delivery; the settings read only at start keep their
    /// running value (see [`keep_restart_only_settings`]).
    pub async fn apply(&self, mut new: Config) -> ReloadOutcome {
        let reload = self.endpoints.reload().await;
        let old = self.config.load_full();
        // The endpoints created through the API stay, and must fit the new file.
        if let Err(e) = self.endpoints.check_file(&reload, &old, &new).await {
            drop(reload);
            let outcome = ReloadOutcome::Refused {
                problems: e.problems.iter().map(ToString::to_string).collect(),
            };
            self.log.record(&outcome, &self.config);
            return outcome;
        }
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
        self.sender
            .set_allow_networks(new.delivery.allow_networks.clone());
        let new = Arc::new(new);
        self.config.store(new.clone());
        let (added, removed, changed) = self.endpoints.replace_file(&reload, &old, &new);
        drop(reload);
        self.scheduler.reconfigured();
        let outcome = ReloadOutcome::Applied {
            added,
            removed,
            changed,
            needs_restart,
        };
        self.log.record(&outcome, &self.config);
        self.bindings.review(Announce::All);
        outcome
    }
}

/// Where a reload's outcome goes: the log, `hookgate_config_reloads_total` and
/// `GET /v1/status`.
#[derive(Clone)]
pub(crate) struct ReloadLog {
    pub(crate) status: Arc<Mutex<RuntimeStatus>>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) metrics: Metrics,
}

impl ReloadLog {
    /// Tells the operator how a reload went; `config` is the one that runs now.
    fn record(&self, outcome: &ReloadOutcome, config: &ArcSwap<Config>) {
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
                let file = config.load().source.clone().unwrap_or_default();
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
    // The setting's name as the file writes it, and the field that holds it.
    macro_rules! kept {
        ($key:literal, $($field:ident).+) => {
            ($key, keep(&mut new.$($field).+, &old.$($field).+))
        };
    }
    [
        kept!("server.listen", server.listen),
        kept!("server.header_timeout", server.header_timeout),
        kept!("server.body_timeout", server.body_timeout),
        kept!("server.shutdown_grace", server.shutdown_grace),
        kept!("server.workers", server.workers),
        kept!("storage.path", storage.path),
        kept!("storage.url", storage.url),
        kept!("storage.max_connections", storage.max_connections),
        kept!("storage.encryption_key", storage.encryption_key),
        kept!(
            "storage.previous_encryption_keys",
            storage.previous_encryption_keys
        ),
        kept!("cluster.lease", cluster.lease),
        kept!("cluster.node_id", cluster.node_id),
        kept!("delivery.ca_certs", delivery.extra_roots),
        kept!("delivery.proxy", delivery.proxy),
        kept!("telemetry", telemetry),
        kept!("plugins.dir", plugins.dir),
        kept!("plugins.cache_dir", plugins.cache_dir),
        kept!("plugins.bundled", plugins.bundled),
        kept!("plugins.call_timeout", plugins.call_timeout),
        kept!("plugins.call_wall_timeout", plugins.call_wall_timeout),
        kept!("plugins.max_file_size", plugins.max_file_bytes),
        kept!("plugins.memory", plugins.memory_bytes),
        kept!("plugins.max_output", plugins.max_output_bytes),
    ]
    .into_iter()
    .filter_map(|(key, changed)| changed.then_some(key))
    .collect()
}

/// Which binding problems [`BindingReview::review`] logs.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Announce {
    /// Every current problem: at start and after a config reload, where the operator looks.
    All,
    /// Only what changed: after the plugin folder changed, or one endpoint did.
    Changes,
}

/// The review of plugin bindings: what the running endpoints bind against what the plugin
/// host has loaded. A config reload, an endpoint change through the API and a change of the
/// plugin folder each ask for one.
#[derive(Clone)]
pub(crate) struct BindingReview {
    pub(crate) endpoints: Endpoints,
    pub(crate) plugins: PluginHost,
    pub(crate) status: Arc<Mutex<RuntimeStatus>>,
    pub(crate) metrics: Metrics,
}

impl BindingReview {
    /// Finds the plugin bindings that cannot work now (plugin missing or of another kind),
    /// records them for `GET /v1/status`, the endpoints' `problems` and the
    /// `hookgate_plugin_binding_problems` gauge, and logs them.
    pub(crate) fn review(&self, announce: Announce) {
        let found = self
            .endpoints
            .binding_problems(|name| self.plugins.world_of(name).map(World::as_str));
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

    fn problem_gauge(&self, p: &config::BindingProblem) -> metrics::Gauge {
        self.metrics
            .binding_problem(&p.endpoint, p.role, &p.plugin, p.code())
    }

    /// Reviews the bindings whenever the plugin folder changes: a plugin that appears
    /// resolves a problem, one that is deleted or replaced by another kind makes one.
    pub(crate) async fn on_plugin_changes(self, shutdown: CancellationToken) {
        let mut changes = self.plugins.changes();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                changed = changes.changed() => {
                    if changed.is_err() {
                        return;
                    }
                    self.review(Announce::Changes);
                }
            }
        }
    }
}
