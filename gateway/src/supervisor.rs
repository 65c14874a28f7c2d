//! Starts the long-lived parts of a gateway, owns the shutdown token, and stops them in order.
//!
//! ```text
//! start:    store → sender → plugins → scheduler (rebuilt from the store) → API listener
//! shutdown: stop accepting → in-flight attempts finish (grace) → outcomes flushed → store closed
//! ```
//!
//! Every task is spawned here and awaited here: nothing outlives [`Gateway::shutdown`].

use std::net::SocketAddr;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::Context;
use arc_swap::ArcSwap;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::{self, ApiDeps, AppState, ReloadStatus, RuntimeStatus};
use crate::clock::Clock;
use crate::commit::Committer;
use crate::config::{self, Config};
use crate::delivery::{Sender, SenderOptions};
use crate::health::EndpointHealth;
use crate::ingest::Ingestor;
use crate::plugins::{PluginHost, PluginLimits, World};
use crate::recovery::Recovery;
use crate::scheduler::attempt::AttemptEnv;
use crate::scheduler::{Scheduler, SchedulerDeps, SchedulerHandle};
use crate::server::{self, ServerLimits};
use crate::store::{RetentionCutoffs, SqliteOptions, SqliteStore, Store};

/// How a gateway is started.
pub struct GatewayOptions {
    pub config: Config,
    pub clock: Arc<dyn Clock>,
    /// A listener bound already (tests bind 127.0.0.1:0); None: bind `server.listen`.
    pub listener: Option<std::net::TcpListener>,
    /// Watch the config file and reload it on change (and on SIGHUP).
    pub watch_config: bool,
    /// Overrides for the store (tests use a tiny write queue). `storage.max_size` applies
    /// unless the override sets its own cap.
    pub store_options: Option<SqliteOptions>,
}

impl GatewayOptions {
    pub fn new(config: Config, clock: Arc<dyn Clock>) -> Self {
        GatewayOptions {
            config,
            clock,
            listener: None,
            watch_config: false,
            store_options: None,
        }
    }
}

/// A running gateway.
pub struct Gateway {
    addr: SocketAddr,
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
    store: Arc<dyn Store>,
    ingest_tasks: TaskTracker,
    reloader: Reloader,
}

/// Applies config reloads (from the file watcher, SIGHUP or a test) and records how they went.
#[derive(Clone)]
pub struct Reloader {
    config: Arc<ArcSwap<Config>>,
    plugins: PluginHost,
    scheduler: SchedulerHandle,
    sender: Sender,
    status: Arc<Mutex<RuntimeStatus>>,
    clock: Arc<dyn Clock>,
    store: Arc<dyn Store>,
    /// Owns the store jobs a reload starts; shutdown waits for them before closing the store.
    tasks: TaskTracker,
}

impl Reloader {
    /// Reads the config file again: applies it if valid, else keeps the running config and
    /// reports every problem (log, metrics, `GET /v1/status`).
    pub fn reload_from_file(&self) {
        let Some(path) = self.config.load().source.clone() else {
            tracing::warn!("no config file to reload: the gateway runs on the embedded default");
            return;
        };
        match config::load_file(&path) {
            Ok(new) => self.apply(new),
            Err(e) => self.refuse(&e),
        }
    }

    fn refuse(&self, e: &config::ConfigError) {
        for line in &e.problems {
            tracing::error!("config reload refused: {line}");
        }
        metrics::counter!("hookgate_config_reloads_total", "result" => "refused").increment(1);
        self.status.lock().expect("status lock").last_reload = Some(ReloadStatus {
            at: self.clock.now(),
            ok: false,
            errors: e.problems.iter().map(ToString::to_string).collect(),
        });
    }

    /// Applies a validated config. Endpoints and policies added, changed or removed take effect
    /// at the next planning step of each delivery; the listener, database and plugin folder are
    /// bound at start and change only with a restart.
    pub fn apply(&self, mut new: Config) {
        let old = self.config.load_full();
        for key in keep_restart_only_settings(&mut new, &old) {
            tracing::warn!(
                key,
                "this setting changes only with a restart; keeping the running value"
            );
        }
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
        self.sender
            .set_allow_networks(new.delivery.allow_networks.clone());
        self.config.store(Arc::new(new));
        self.scheduler.reconfigured();
        tracing::info!(added, removed, changed, "config reloaded");
        self.review_bindings(Announce::All);
        metrics::counter!("hookgate_config_reloads_total", "result" => "applied").increment(1);
        self.status.lock().expect("status lock").last_reload = Some(ReloadStatus {
            at: self.clock.now(),
            ok: true,
            errors: Vec::new(),
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
        ("storage.path", keep(&mut new.storage.path, &old.storage.path)),
        (
            "delivery.ca_certs",
            keep(&mut new.delivery.extra_roots, &old.delivery.extra_roots),
        ),
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
enum Announce {
    /// Every current problem: at start and after a config reload, where the operator looks.
    All,
    /// Only what changed: after the plugin folder changed.
    Changes,
}

impl Reloader {
    /// Finds the plugin bindings that cannot work now (plugin missing or of another kind),
    /// records them for `GET /v1/status`, the endpoints' `problems` and the
    /// `hookgate_plugin_binding_problems` gauge, and logs them.
    fn review_bindings(&self, announce: Announce) {
        let found = self
            .config
            .load()
            .plugin_binding_problems(|name| self.plugins.world_of(name).map(World::as_str));
        let mut status = self.status.lock().expect("status lock");
        let before = std::mem::replace(&mut status.binding_problems, found.clone());
        drop(status);
        for gone in before.iter().filter(|p| !found.contains(p)) {
            binding_problem_gauge(gone).set(0.0);
            tracing::info!("resolved: {gone}");
        }
        for problem in &found {
            binding_problem_gauge(problem).set(1.0);
            if announce == Announce::All || !before.contains(problem) {
                tracing::warn!("{problem}; its attempts fail with plugin_error until it is");
            }
        }
    }
}

fn binding_problem_gauge(p: &config::BindingProblem) -> metrics::Gauge {
    metrics::gauge!(
        "hookgate_plugin_binding_problems",
        "endpoint" => p.endpoint.to_string(),
        "binding" => p.role,
        "plugin" => p.plugin.clone(),
        "problem" => p.code(),
    )
}

/// Reviews the plugin bindings whenever the plugin folder changes: a plugin that appears
/// resolves a problem, one that is deleted or replaced by another kind makes one.
async fn review_bindings_on_plugin_changes(reloader: Reloader, shutdown: CancellationToken) {
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

/// The process-wide Prometheus recorder (the `metrics` facade allows one per process).
fn metrics_handle() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let buckets = [
                0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
            ];
            PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Suffix("_seconds".into()), &buckets)
                .and_then(|b| {
                    // Lateness is measured on the millisecond clock: bucket edges half-way
                    // between whole milliseconds give every value up to 10 ms its own bucket.
                    b.set_buckets_for_metric(
                        Matcher::Full("hookgate_attempt_lateness_seconds".into()),
                        &[
                            0.0005, 0.0015, 0.0025, 0.0035, 0.0045, 0.0055, 0.0065, 0.0075, 0.0085, 0.0095,
                            0.0255, 0.0505, 0.1005, 0.2505, 0.5005, 1.0005, 5.0005, 60.0005,
                        ],
                    )
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(
                        Matcher::Full("hookgate_writer_batch_size".into()),
                        &[1.0, 2.0, 5.0, 10.0, 50.0, 100.0, 500.0, 1000.0, 2000.0],
                    )
                })
                .ok()?
                .install_recorder()
                .map_err(|e| tracing::warn!(error = %e, "metrics recorder not installed"))
                .ok()
        })
        .clone()
}

impl Gateway {
    pub async fn start(opts: GatewayOptions) -> anyhow::Result<Gateway> {
        let GatewayOptions {
            config,
            clock,
            listener,
            watch_config,
            store_options,
        } = opts;
        let shutdown = CancellationToken::new();
        let metrics = metrics_handle();

        let mut store_options =
            store_options.unwrap_or_else(|| SqliteOptions::new(config.storage.path.clone()));
        store_options.max_size_bytes = store_options.max_size_bytes.or(config.storage.max_size_bytes);
        let store: Arc<dyn Store> = Arc::new(
            SqliteStore::open(store_options)
                .with_context(|| format!("opening the database {}", config.storage.path.display()))?,
        );

        let sender = Sender::new(SenderOptions {
            allow_networks: config.delivery.allow_networks.clone(),
            // No cap of its own: idle connections are bounded by the attempts that were in
            // flight at once (`delivery.max_in_flight`, which a reload may raise) and expire
            // after the pool's idle timeout. A smaller cap closed and reopened connections
            // whenever many endpoints share a host, e.g. a fan-out to one customer's API.
            max_idle_per_host: usize::MAX,
            extra_roots: config.delivery.extra_roots.clone(),
            user_agent: format!("hookgate/{}", env!("CARGO_PKG_VERSION")),
            max_response_body_bytes: 64 * 1024,
        })
        .context("building the HTTP client")?;

        // Compiling the plugin folder can take a while: keep it off the async workers.
        let (dir, cache_dir) = (config.plugins.dir.clone(), config.plugins.cache_dir.clone());
        let limits = PluginLimits {
            call_timeout: config.plugins.call_timeout,
            call_wall_timeout: config.plugins.call_wall_timeout,
            max_file_bytes: config.plugins.max_file_bytes,
            memory_bytes: config.plugins.memory_bytes,
            output_bytes: config.plugins.max_output_bytes,
            ..PluginLimits::default()
        };
        let plugins = tokio::task::spawn_blocking(move || PluginHost::new(dir, cache_dir, limits))
            .await
            .context("starting the plugin host")?
            .context("starting the plugin host")?;

        let config = Arc::new(ArcSwap::from_pointee(config));
        let (mut scheduler, scheduler_handle) = Scheduler::load(SchedulerDeps {
            clock: clock.clone(),
            store: store.clone(),
            config: config.clone(),
            sender: sender.clone(),
            plugins: plugins.clone(),
        })
        .await
        .context("rebuilding the delivery queue")?;

        let ingest_tasks = TaskTracker::new();
        let committer = Committer::new(scheduler_handle.clone(), ingest_tasks.clone());
        let ingestor = Ingestor::new(
            clock.clone(),
            config.clone(),
            store.clone(),
            scheduler_handle.clone(),
            committer.clone(),
        );
        {
            let ingestor = ingestor.clone();
            scheduler.set_publisher(Arc::new(
                move |endpoint: Arc<str>, event_type: &'static str, h: EndpointHealth| {
                    ingestor.publish_operator_event(&endpoint, event_type, &h);
                },
            ));
        }
        let recovery = Recovery {
            clock: clock.clone(),
            config: config.clone(),
            store: store.clone(),
            scheduler: scheduler_handle.clone(),
            committer,
        };

        let status = Arc::new(Mutex::new(RuntimeStatus {
            started_at: Some(clock.now()),
            ..RuntimeStatus::default()
        }));
        let attempts = Arc::new(AttemptEnv {
            clock: clock.clone(),
            sender: sender.clone(),
            plugins: plugins.clone(),
        });
        let state = AppState::new(ApiDeps {
            config: config.clone(),
            store: store.clone(),
            scheduler: scheduler_handle.clone(),
            ingestor,
            recovery,
            clock: clock.clone(),
            attempts,
            metrics,
            status: status.clone(),
        });
        let (router, _) = api::router(state);

        let listener = match listener {
            Some(l) => l,
            None => {
                let addr = config.load().server.listen;
                std::net::TcpListener::bind(addr).with_context(|| format!("listening on {addr}"))?
            }
        };
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        let addr = listener.local_addr()?;

        let mut tasks = JoinSet::new();
        let grace = config.load().server.shutdown_grace;
        tasks.spawn(scheduler.run(shutdown.child_token(), grace));
        {
            let server_config = &config.load().server;
            let limits = ServerLimits::new(server_config.header_timeout, server_config.body_timeout, grace);
            tasks.spawn(server::serve(listener, router, limits, shutdown.child_token()));
        }
        {
            let plugins = plugins.clone();
            let token = shutdown.child_token();
            tasks.spawn(async move { plugins.watch(token).await });
        }
        tasks.spawn(retention(
            store.clone(),
            config.clone(),
            clock.clone(),
            shutdown.child_token(),
        ));

        let reloader = Reloader {
            config: config.clone(),
            plugins: plugins.clone(),
            scheduler: scheduler_handle,
            sender,
            status,
            clock,
            store: store.clone(),
            tasks: ingest_tasks.clone(),
        };
        reloader.review_bindings(Announce::All);
        tasks.spawn(review_bindings_on_plugin_changes(
            reloader.clone(),
            shutdown.child_token(),
        ));
        if watch_config && let Some(path) = config.load().source.clone() {
            match config::watch::ConfigWatcher::start(path) {
                Ok(watcher) => {
                    let reloader = reloader.clone();
                    let token = shutdown.child_token();
                    tasks.spawn(watcher.run(token, move || reloader.reload_from_file()));
                }
                Err(e) => tracing::warn!(error = %e, "cannot watch the config file; reload with SIGHUP"),
            }
        }
        tracing::info!(%addr, "hookgate is listening");
        Ok(Gateway {
            addr,
            shutdown,
            tasks,
            store,
            ingest_tasks,
            reloader,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// True when the scheduler has nothing to do until its clock moves (see
    /// [`SchedulerHandle::is_idle`]).
    pub fn scheduler_idle(&self) -> bool {
        self.reloader.scheduler.is_idle(self.reloader.clock.now())
    }

    /// The config the gateway runs on now.
    pub fn config(&self) -> Arc<Config> {
        self.reloader.config.load_full()
    }

    /// What applies config reloads; `main` hands it SIGHUP, tests call it directly.
    pub fn reloader(&self) -> Reloader {
        self.reloader.clone()
    }

    /// Stops accepting, lets in-flight attempts finish within the grace period, flushes every
    /// write and closes the database.
    pub async fn shutdown(mut self) {
        tracing::info!("shutting down");
        self.shutdown.cancel();
        while let Some(result) = self.tasks.join_next().await {
            if let Err(e) = result {
                tracing::error!(error = %e, "a gateway task failed");
            }
        }
        self.ingest_tasks.close();
        self.ingest_tasks.wait().await;
        self.store.close().await;
        tracing::info!("stopped");
    }
}

/// Purges data past its retention window, a small batch at a time through the writer, so that
/// delivery never waits behind a large delete.
async fn retention(
    store: Arc<dyn Store>,
    config: Arc<ArcSwap<Config>>,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) {
    const EVERY: Duration = Duration::from_secs(60);
    const BATCH: u32 = 500;
    loop {
        let now = clock.now();
        let retention = config.load().retention.clone();
        let cutoffs = RetentionCutoffs {
            deliveries_before: now.minus(retention.deliveries),
            events_before: now.minus(retention.events),
            idempotency_before: now.minus(retention.idempotency),
            history_before: now.minus(retention.deliveries),
            batch: BATCH,
        };
        loop {
            match store.purge(cutoffs).await {
                Ok(purged) => {
                    if purged.rows() > 0 {
                        tracing::debug!(?purged, "retention purge");
                        metrics::counter!("hookgate_purged_rows_total").increment(purged.rows());
                    }
                    if !purged.may_have_more(BATCH) {
                        break;
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "retention purge failed; will try again");
                    break;
                }
            }
            if shutdown.is_cancelled() {
                return;
            }
            tokio::task::yield_now().await;
        }
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = clock.sleep_until(now.plus(EVERY)) => {}
        }
    }
}
