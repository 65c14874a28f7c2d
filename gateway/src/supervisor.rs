//! Starts the long-lived parts of a gateway, owns the shutdown token, and stops them in order.
//!
//! ```text
//! start:    store → sender → plugins → scheduler (rebuilt from the store) → API listener
//!           (→ cluster task on PostgreSQL: leases, notices; it hands the scheduler its endpoints)
//! shutdown: stop accepting → in-flight attempts finish (grace) → outcomes flushed
//!           → leases given back (PostgreSQL) → store closed
//! ```
//!
//! Every task is spawned here and awaited here: nothing outlives [`Gateway::shutdown`].

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use arc_swap::ArcSwap;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::api::{self, ApiDeps, AppState};
use crate::attempt::AttemptEnv;
use crate::clock::Clock;
use crate::cluster::{ClusterTask, ClusterView, NodeList};
use crate::commit::Committer;
use crate::config::{self, Config};
use crate::delivery::{Sender, SenderOptions};
use crate::endpoint_admin::EndpointAdmin;
use crate::endpoints::Endpoints;
use crate::fence::{Fence, SystemLeaseClock};
use crate::health::EndpointHealth;
use crate::ingest::Ingestor;
use crate::model::{DeliveryId, Timestamp};
use crate::plugins::{PluginHost, PluginLimits};
use crate::recovery::Recovery;
use crate::reload::{Announce, BindingReview, ReloadLog, Reloader, RuntimeStatus};
use crate::scheduler::{Scheduler, SchedulerDeps, SchedulerHandle};
use crate::server::{self, ServerLimits};
use crate::store::{
    NodeInfo, PgStore, RetentionCutoffs, Sealer, SqliteOptions, SqliteStore, Store, StoreError,
};
use crate::telemetry::Metrics;
use crate::traces::Traces;

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

/// The runtime a gateway runs on: `server.workers` worker threads, or one per CPU this
/// process may use.
pub fn runtime(config: &Config) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = tokio::runtime::Builder::new_multi_thread();
    if let Some(workers) = config.server.workers {
        builder.worker_threads(workers as usize);
    }
    builder.enable_all().build()
}

/// A running gateway.
pub struct Gateway {
    addr: SocketAddr,
    shutdown: CancellationToken,
    tasks: JoinSet<()>,
    parts: Parts,
    /// The trace export task and its own stop: it stops last, so that the spans of the last
    /// attempts still go out.
    trace_export: TraceExport,
}

/// The trace export task and the token that stops it; None when no traces are exported.
type TraceExport = Option<(CancellationToken, tokio::task::JoinHandle<()>)>;

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
        let metrics = Metrics::new();
        let node_id = config
            .cluster
            .node_id
            .clone()
            .unwrap_or_else(crate::cluster::generated_node_id);
        let store = open_store(&config, store_options, &metrics, &node_id).await?;
        let sender = build_sender(&config)?;
        let plugins = start_plugins(&config, &metrics).await?;
        let (traces, trace_export) = start_traces(&config, &metrics)?;
        let listener = bind(listener, config.server.listen)?;
        let addr = listener.local_addr()?;
        let node = this_node(node_id, addr);
        let (lease, grace) = (config.cluster.lease, config.server.shutdown_grace);
        let server_limits =
            ServerLimits::new(config.server.header_timeout, config.server.body_timeout, grace);
        let config = Arc::new(ArcSwap::from_pointee(config));
        // Before the queue is rebuilt: the deliveries of these endpoints are not orphans.
        let endpoints = read_endpoints(&store, &config).await?;
        // In a cluster, the leases this node holds by its own monotonic clock: the scheduler
        // sends only for endpoints it holds (see `crate::fence`).
        let fence =
            (store.clone().cluster()).map(|_| Arc::new(Fence::new(lease, Arc::new(SystemLeaseClock))));
        let (mut scheduler, scheduler_handle) = Scheduler::load(SchedulerDeps {
            clock: clock.clone(),
            store: store.clone(),
            config: config.clone(),
            endpoints: endpoints.clone(),
            sender: sender.clone(),
            plugins: plugins.clone(),
            metrics: metrics.clone(),
            traces: traces.clone(),
            fence: fence.clone(),
        })
        .await
        .context("rebuilding the delivery queue")?;

        let parts = Parts {
            config,
            status: RuntimeStatus::started(clock.now()),
            clock,
            store,
            endpoints,
            scheduler: scheduler_handle,
            sender,
            plugins,
            metrics,
            ingest_tasks: TaskTracker::new(),
        };
        let mut tasks = JoinSet::new();
        let view = join_cluster(&parts, fence, node, lease, &mut tasks, &shutdown).await;
        let (router, ingestor) = api_router(&parts, &mut scheduler, view, traces);
        tasks.spawn(crate::ordering_watch::run(ingestor, shutdown.child_token()));
        tasks.spawn(scheduler.run(shutdown.child_token(), grace));
        let serving = shutdown.child_token();
        tasks.spawn(server::serve(listener, router, server_limits, serving));
        spawn_background(&mut tasks, &parts, watch_config, &shutdown);
        tracing::info!(%addr, "hookgate is listening");
        Ok(Gateway {
            addr,
            shutdown,
            tasks,
            parts,
            trace_export,
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// True when the scheduler has nothing to do until its clock moves (see
    /// [`SchedulerHandle::is_idle`]).
    pub fn scheduler_idle(&self) -> bool {
        self.parts.scheduler.is_idle(self.parts.clock.now())
    }

    /// The config the gateway runs on now.
    pub fn config(&self) -> Arc<Config> {
        self.parts.config.load_full()
    }

    /// What applies config reloads; `main` hands it SIGHUP, tests call it directly.
    pub fn reloader(&self) -> Reloader {
        self.parts.reloader()
    }

    /// Stops accepting, lets in-flight attempts finish within the grace period, flushes every
    /// write and closes the database.
    pub async fn shutdown(mut self) {
        tracing::info!("shutting down");
        self.parts.status.lock().expect("status lock").stopping = true;
        self.shutdown.cancel();
        while let Some(result) = self.tasks.join_next().await {
            if let Err(e) = result {
                tracing::error!(error = %e, "a gateway task failed");
            }
        }
        self.parts.ingest_tasks.close();
        self.parts.ingest_tasks.wait().await;
        // Every attempt has ended and been recorded: the other nodes may take over at once.
        if let Some(cluster) = self.parts.store.clone().cluster() {
            cluster.leave().await;
        }
        self.parts.store.close().await;
        if let Some((stop, task)) = self.trace_export.take() {
            stop.cancel();
            if let Err(e) = task.await {
                tracing::error!(error = %e, "the trace export task failed");
            }
        }
        tracing::info!("stopped");
    }
}

/// The shared handles a gateway is wired from. Only the supervisor holds them all: each part
/// of the gateway is handed the few it uses (see [`Parts::reloader`],
/// [`Parts::endpoint_admin`]).
#[derive(Clone)]
struct Parts {
    config: Arc<ArcSwap<Config>>,
    status: Arc<Mutex<RuntimeStatus>>,
    clock: Arc<dyn Clock>,
    store: Arc<dyn Store>,
    endpoints: Endpoints,
    scheduler: SchedulerHandle,
    sender: Sender,
    plugins: PluginHost,
    metrics: Metrics,
    /// Owns the store jobs that requests and reloads start; shutdown waits for them before
    /// closing the store.
    ingest_tasks: TaskTracker,
}

impl Parts {
    fn bindings(&self) -> BindingReview {
        BindingReview {
            endpoints: self.endpoints.clone(),
            plugins: self.plugins.clone(),
            status: self.status.clone(),
            metrics: self.metrics.clone(),
        }
    }

    fn reloader(&self) -> Reloader {
        Reloader {
            config: self.config.clone(),
            endpoints: self.endpoints.clone(),
            sender: self.sender.clone(),
            scheduler: self.scheduler.clone(),
            store: self.store.clone(),
            tasks: self.ingest_tasks.clone(),
            bindings: self.bindings(),
            log: ReloadLog {
                status: self.status.clone(),
                clock: self.clock.clone(),
                metrics: self.metrics.clone(),
            },
        }
    }

    fn endpoint_admin(&self) -> EndpointAdmin {
        EndpointAdmin {
            store: self.store.clone(),
            clock: self.clock.clone(),
            config: self.config.clone(),
            endpoints: self.endpoints.clone(),
            scheduler: self.scheduler.clone(),
            bindings: self.bindings(),
        }
    }
}

/// This node as the cluster lists it: its id, where it listens, since now.
fn this_node(id: String, addr: SocketAddr) -> NodeInfo {
    NodeInfo {
        id,
        address: addr.to_string(),
        started_at: Timestamp::from_system_time(std::time::SystemTime::now()),
    }
}

/// The trace exporter, and its export task with a stop of its own (see [`Gateway`]).
fn start_traces(config: &Config, metrics: &Metrics) -> anyhow::Result<(Traces, TraceExport)> {
    let (traces, export_task) =
        Traces::start(config.telemetry.as_ref(), &config.delivery.extra_roots, metrics)
            .context("starting the trace exporter")?;
    let export = export_task.map(|task| {
        let stop = CancellationToken::new();
        (stop.clone(), tokio::spawn(task.run(stop)))
    });
    Ok((traces, export))
}

/// The endpoints created through the API, read into the running index.
async fn read_endpoints(store: &Arc<dyn Store>, config: &Arc<ArcSwap<Config>>) -> anyhow::Result<Endpoints> {
    let started = Instant::now();
    let endpoints = Endpoints::open(store.clone(), config.clone())
        .await
        .context("reading the endpoints created through the API")?;
    tracing::info!(
        endpoints = endpoints.len(),
        seconds = started.elapsed().as_secs_f64(),
        "endpoints read"
    );
    Ok(endpoints)
}

/// On a store several nodes share (PostgreSQL), joins the cluster: the task that takes and
/// renews leases and applies the other nodes' changes. Alone otherwise.
async fn join_cluster(
    parts: &Parts,
    fence: Option<Arc<Fence>>,
    node: NodeInfo,
    lease: Duration,
    tasks: &mut JoinSet<()>,
    shutdown: &CancellationToken,
) -> ClusterView {
    let (Some(cluster_store), Some(fence)) = (parts.store.clone().cluster(), fence) else {
        return ClusterView::Solo(node);
    };
    let nodes = Arc::new(ArcSwap::from_pointee(NodeList::default()));
    let mut task = ClusterTask::new(
        cluster_store,
        node,
        lease,
        parts.scheduler.clone(),
        parts.config.clone(),
        nodes.clone(),
        parts.endpoints.clone(),
        fence,
        &parts.metrics,
    );
    let notices = task.start().await;
    tasks.spawn(task.run(notices, shutdown.child_token()));
    ClusterView::Shared { nodes, lease }
}

/// The embedded SQLite file, or the PostgreSQL database of `storage.url`.
pub(crate) async fn open_store(
    config: &Config,
    options: Option<SqliteOptions>,
    metrics: &Metrics,
    node_id: &str,
) -> anyhow::Result<Arc<dyn Store>> {
    let storage = &config.storage;
    if let Some(url) = &storage.url {
        let key = storage
            .encryption_key
            .clone()
            .context("storage.url needs storage.encryption_key")?;
        let sealer = Sealer::new(key, storage.previous_encryption_keys.clone());
        let store = open_postgres(url.expose(), storage.max_connections, metrics, node_id, &sealer)
            .await
            .context("opening the PostgreSQL database of storage.url")?;
        return Ok(Arc::new(store));
    }
    let mut options = options.unwrap_or_else(|| SqliteOptions::new(storage.path.clone()));
    options.max_size_bytes = options.max_size_bytes.or(storage.max_size_bytes);
    options.encryption_key = options.encryption_key.or_else(|| storage.encryption_key.clone());
    options
        .previous_encryption_keys
        .extend(storage.previous_encryption_keys.iter().cloned());
    options.metrics = metrics.clone();
    let store = SqliteStore::open(options)
        .with_context(|| format!("opening the database {}", config.storage.path.display()))?;
    Ok(Arc::new(store))
}

/// How long a node that starts while its database cannot be reached keeps trying before it
/// gives up: a database starting beside it (a compose file, a host's boot) or a short network
/// cut is waited out instead of ending the process.
const DATABASE_WAIT_AT_START: Duration = Duration::from_secs(30);

/// [`PgStore::open_with`], tried again with a growing pause while the database is unreachable,
/// for at most [`DATABASE_WAIT_AT_START`]; any other error (a bad URL, a refused password, a
/// failed migration) ends the start at once.
async fn open_postgres(
    url: &str,
    pool_size: usize,
    metrics: &Metrics,
    node_id: &str,
    sealer: &Sealer,
) -> Result<PgStore, StoreError> {
    let started = Instant::now();
    let mut pause = Duration::from_millis(250);
    loop {
        match PgStore::open_with(url, metrics, node_id, pool_size, sealer.clone()).await {
            Err(StoreError::Unavailable(e)) if started.elapsed() + pause < DATABASE_WAIT_AT_START => {
                tracing::warn!(error = %e, retry_in_ms = pause.as_millis() as u64, "the database cannot be reached yet; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(4));
            }
            other => return other,
        }
    }
}

fn build_sender(config: &Config) -> anyhow::Result<Sender> {
    Sender::new(SenderOptions {
        allow_networks: config.delivery.allow_networks.clone(),
        // No cap of its own: idle connections are bounded by the attempts that were in
        // flight at once (`delivery.max_in_flight`, which a reload may raise) and expire
        // after the pool's idle timeout. A smaller cap closes and reopens connections
        // whenever many endpoints share a host, e.g. a fan-out to one customer's API.
        max_idle_per_host: usize::MAX,
        extra_roots: config.delivery.extra_roots.clone(),
        user_agent: format!("hookgate/{}", env!("CARGO_PKG_VERSION")),
        max_response_body_bytes: 64 * 1024,
        proxy: config.delivery.proxy.clone(),
    })
    .context("building the transports (HTTP client, broker connections)")
}

/// Loads the plugin folder. Compiling can take a while: it stays off the async workers.
async fn start_plugins(config: &Config, metrics: &Metrics) -> anyhow::Result<PluginHost> {
    let (dir, cache_dir) = (config.plugins.dir.clone(), config.plugins.cache_dir.clone());
    let bundled = config.plugins.bundled;
    let limits = PluginLimits {
        call_timeout: config.plugins.call_timeout,
        call_wall_timeout: config.plugins.call_wall_timeout,
        max_file_bytes: config.plugins.max_file_bytes,
        memory_bytes: config.plugins.memory_bytes,
        output_bytes: config.plugins.max_output_bytes,
        ..PluginLimits::default()
    };
    let metrics = metrics.clone();
    tokio::task::spawn_blocking(move || match bundled {
        true => PluginHost::new(dir, cache_dir, limits, metrics),
        false => PluginHost::with_bundled(dir, cache_dir, limits, metrics, Vec::new()),
    })
    .await
    .context("starting the plugin host")?
    .context("starting the plugin host")
}

/// The listener a test bound already, else `server.listen`.
fn bind(
    listener: Option<std::net::TcpListener>,
    addr: SocketAddr,
) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = match listener {
        Some(l) => l,
        None => std::net::TcpListener::bind(addr).with_context(|| format!("listening on {addr}"))?,
    };
    listener.set_nonblocking(true)?;
    Ok(tokio::net::TcpListener::from_std(listener)?)
}

/// The API and what it drives: ingestion (which also publishes the scheduler's operator
/// events) and recovery, both writing through one [`Committer`]; and the ingestor, for the
/// watches that publish operator events of their own.
fn api_router(
    parts: &Parts,
    scheduler_actor: &mut Scheduler,
    cluster: ClusterView,
    traces: Traces,
) -> (axum::Router, Ingestor) {
    let endpoint_admin = parts.endpoint_admin();
    let Parts {
        config,
        status,
        clock,
        store,
        endpoints,
        scheduler,
        sender,
        plugins,
        metrics,
        ingest_tasks,
    } = parts.clone();
    let committer = Committer::new(scheduler.clone(), ingest_tasks);
    let ingestor = Ingestor {
        clock: clock.clone(),
        config: config.clone(),
        endpoints: endpoints.clone(),
        store: store.clone(),
        scheduler: scheduler.clone(),
        committer: committer.clone(),
        metrics: metrics.clone(),
    };
    {
        let (ingestor, held) = (ingestor.clone(), ingestor.clone());
        scheduler_actor.set_publisher(
            Arc::new(
                move |endpoint: Arc<str>, event_type: &'static str, h: EndpointHealth| {
                    ingestor.publish_operator_event(&endpoint, event_type, &h);
                },
            ),
            Arc::new(move |endpoint: Arc<str>, key: Arc<str>, head: DeliveryId| {
                held.publish_key_held(&endpoint, &key, head);
            }),
        );
    }
    let recovery = Recovery {
        clock: clock.clone(),
        endpoints: endpoints.clone(),
        store: store.clone(),
        scheduler: scheduler.clone(),
        committer,
    };
    let attempts = Arc::new(AttemptEnv {
        clock: clock.clone(),
        sender,
        plugins,
        traces: traces.clone(),
    });
    let event_types = crate::event_types::EventTypes::new(store.clone(), clock.clone());
    let state = AppState::new(ApiDeps {
        config,
        endpoints,
        store,
        scheduler,
        ingestor: ingestor.clone(),
        recovery,
        clock,
        attempts,
        metrics,
        status,
        cluster,
        endpoint_admin,
        traces,
        event_types,
    });
    (api::router(state).0, ingestor)
}

/// The tasks that run beside the scheduler and the listener: the plugin folder watcher,
/// retention, metric upkeep, the binding review and (if asked) the config file watcher.
fn spawn_background(
    tasks: &mut JoinSet<()>,
    parts: &Parts,
    watch_config: bool,
    shutdown: &CancellationToken,
) {
    let plugins = parts.plugins.clone();
    let token = shutdown.child_token();
    tasks.spawn(async move { plugins.watch(token).await });
    tasks.spawn(retention(
        parts.store.clone(),
        parts.config.clone(),
        parts.clock.clone(),
        parts.metrics.purged_rows(),
        shutdown.child_token(),
    ));
    tasks.spawn(parts.metrics.clone().upkeep(shutdown.child_token()));
    let bindings = parts.bindings();
    bindings.review(Announce::All);
    tasks.spawn(bindings.on_plugin_changes(shutdown.child_token()));
    if watch_config && let Some(path) = parts.config.load().source.clone() {
        let watcher = config::watch::ConfigWatcher::start(path);
        let reloader = parts.reloader();
        tasks.spawn(watcher.run(shutdown.child_token(), move || {
            let reloader = reloader.clone();
            async move {
                reloader.reload_from_file().await;
            }
        }));
    }
}

/// Purges data past its retention window, a small batch at a time through the writer, so that
/// delivery never waits behind a large delete.
async fn retention(
    store: Arc<dyn Store>,
    config: Arc<ArcSwap<Config>>,
    clock: Arc<dyn Clock>,
    purged_rows: metrics::Counter,
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
                        purged_rows.increment(purged.rows());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_runtime_has_the_worker_threads_the_config_names() {
        let mut config = Config::embedded_default();
        for workers in [1, 3] {
            config.server.workers = Some(workers);
            let runtime = runtime(&config).unwrap();
            assert_eq!(runtime.metrics().num_workers(), workers as usize);
        }
    }
}
