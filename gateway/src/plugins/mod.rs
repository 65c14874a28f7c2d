//! WebAssembly plugins: transforms, signers and backoff functions that users drop into a
//! folder (README "Plugins", docs/writing-a-plugin.md; the contract is `wit/plugin.wit`).
//!
//! A [`PluginHost`] owns one wasmtime `Engine` (epoch interruption driven by a ticker thread,
//! the pooling allocator where the address space allows), a compilation cache on disk, and a
//! registry of loaded plugins that [`PluginHost::watch`] keeps in step with the folder, and a
//! pool of idle instances. Every call runs in a `Store` that holds only its own binding's
//! config (and, during the call, that call's keys): a fresh one, or an idle instance that
//! served earlier calls of the very same binding (plugin version, endpoint, config), so a
//! plugin may see state it kept itself but never another endpoint's. Each call runs under a
//! CPU time limit and a wall-clock limit, a memory cap, an output cap and a hashing budget, in one of its
//! plugin's own call slots (so a stuck plugin queues only its own calls); any failure fails
//! only that call, as a [`PluginFailure`] whose [`FailureDetail`] the attempt log records under
//! `plugin_error`, and drops the instance that failed (only the plugin's own `plugin-error`
//! keeps it). [`headers`] holds the rules for which headers a plugin may touch.

mod bindings;
mod bundled;
mod call;
mod check;
pub mod headers;
mod host;
mod limits;
mod pool;
mod registry;
mod v1;
mod watch;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use arc_swap::ArcSwap;
use bytes::Bytes;
use serde::Serialize;

pub use check::{CheckReport, check_file, check_file_with_config};
pub use host::Crossings;
pub use host::crypto::{BadSecret, SigningKey};
pub use pool::InstanceStats;

use crate::model::{PluginBinding, Secret, Timestamp};
use crate::telemetry::Metrics;
use call::{CallError, CallInput, CallOutput, Finished};
use pool::{BindingKey, InstancePool};
use registry::{Compiler, Loaded, PluginMap};

/// The limits every plugin call runs under.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginLimits {
    /// CPU time one call may use (instantiation included, when the call needs a new
    /// instance), enforced with epoch ticks of 2 ms: a call is stopped within a tick of its
    /// deadline and fails with `timeout`. Ticks spent waiting for the runtime to poll the call
    /// again are not counted, so a busy gateway does not eat a plugin's budget.
    pub call_timeout: Duration,
    /// Wall-clock time one call may take, counted from when it got its call slot: guest code,
    /// host calls, and the guest sleeping or waiting on a WASI pollable all count; only the
    /// time the gateway's busy runtime keeps a call waiting after it yielded does not (as for
    /// `call_timeout`). Past it the call is ended at its next poll or by a timer, within a few
    /// milliseconds, and fails with `timeout`. Never less than `call_timeout`.
    pub call_wall_timeout: Duration,
    /// Linear memory one instance may grow to, all of the component's memories together. A
    /// reused instance counts what it grew to in its earlier calls.
    pub memory_bytes: usize,
    /// Bytes one call may answer: header names and values plus body (or a drop / give-up
    /// reason).
    pub output_bytes: usize,
    /// `log` lines one call may write; more are counted and dropped.
    pub log_lines_per_call: u32,
    /// Plugin calls that may run at once across the host. Also sizes the pooling allocator.
    /// The slots are shared out equally among the loaded plugins (at least one each), and a
    /// call waits only for a slot of its own plugin: a plugin whose calls all run to their
    /// time limit delays its own calls, never another plugin's (as long as the folder holds no
    /// more plugins than this).
    pub max_concurrent_calls: u32,
    /// Bytes the host hashes for one call, `crypto.hmac` and `crypto.digest` together; a call
    /// that asks for more fails with `crypto_budget`.
    pub hash_bytes_per_call: u64,
    /// The largest plugin file loaded; a larger file is refused before it is read in full or
    /// compiled (compile time and compiled-code size grow with it).
    pub max_file_bytes: u64,
    /// How long compiling one plugin file may take. Compilation cannot be interrupted: past
    /// this the plugin is refused and the compiler's result, when it comes, is dropped (the
    /// file size limit bounds how long that is). Cached artifacts load without compiling.
    pub max_compile_time: Duration,
    /// The largest compiled code of one plugin (its machine code image, checked after
    /// compiling or loading it from the cache); a larger plugin is refused and its code freed.
    pub max_compiled_bytes: usize,
    /// The shortest wait a backoff plugin may ask for; shorter answers are raised to it, so a
    /// plugin cannot turn retries into a tight loop against a failing receiver.
    pub min_backoff_delay: Duration,
    /// The longest wait a backoff plugin may ask for; longer answers are clamped to it. The
    /// retry policy's own limits (attempt count, deadline) still apply after this.
    pub max_backoff_delay: Duration,
    /// Plugin instances kept idle across the host for reuse by the next call of the same
    /// binding (plugin version, endpoint, plugin config); the least recently used goes first
    /// when more would be kept. Instantiating costs far more than a small call, so reuse is
    /// what makes plugin calls cheap. 0 turns reuse off: every call gets a fresh instance.
    /// Also sizes the pooling allocator, since idle instances keep their slots.
    pub idle_instances: u32,
    /// An instance whose linear memory grew more than this beyond its size when it was
    /// created is dropped after its call instead of being reused. Memory never shrinks, so
    /// this bounds what idle instances keep resident and how much of the memory cap a reused
    /// instance has already spent.
    pub reuse_max_growth_bytes: usize,
}

impl Default for PluginLimits {
    fn default() -> Self {
        PluginLimits {
            call_timeout: Duration::from_millis(100),
            call_wall_timeout: Duration::from_secs(1),
            memory_bytes: 32 << 20,
            output_bytes: 1 << 20,
            log_lines_per_call: 20,
            max_concurrent_calls: 64,
            hash_bytes_per_call: 8 << 20,
            max_file_bytes: 32 << 20,
            // The bundled Python plugin (18 MB) compiles in about 25-35 s on two busy cores.
            max_compile_time: Duration::from_secs(120),
            max_compiled_bytes: 256 << 20,
            min_backoff_delay: Duration::from_secs(1),
            max_backoff_delay: Duration::from_secs(72 * 3600),
            idle_instances: 32,
            reuse_max_growth_bytes: 4 << 20,
        }
    }
}

impl PluginLimits {
    /// The wall-clock limit of a call: `call_wall_timeout`, at least `call_timeout`.
    pub fn wall_limit(&self) -> Duration {
        self.call_wall_timeout.max(self.call_timeout)
    }
}

/// The three kinds of plugin, one per WIT world.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum World {
    Transformer,
    Signer,
    Backoff,
}

impl World {
    /// The WIT world's name.
    pub fn as_str(self) -> &'static str {
        match self {
            World::Transformer => "transformer",
            World::Signer => "signer",
            World::Backoff => "backoff",
        }
    }
}

impl fmt::Display for World {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A plugin file that failed to load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub name: String,
    pub sha256: [u8; 32],
    /// Why, as logged.
    pub error: String,
    pub at: Timestamp,
}

/// A loaded plugin, as the API and CLI show it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LoadedInfo {
    pub name: String,
    pub world: World,
    /// SHA-256 of the `.wasm` file, hex.
    pub sha256: String,
    pub size_bytes: u64,
    pub loaded_at: Timestamp,
}

/// The event a transform sees.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventInfo {
    pub id: String,
    pub topic: String,
    pub event_type: String,
    pub received_at_ms: u64,
}

/// One attempt's request, before it is sent, for a transform.
#[derive(Clone, Debug, PartialEq)]
pub struct TransformInput {
    pub endpoint_name: String,
    pub endpoint_url: String,
    pub event: EventInfo,
    pub delivery_id: String,
    pub attempt: u32,
    pub now_ms: u64,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Bytes,
}

/// What a transform decided.
#[derive(Clone, Debug, PartialEq)]
pub enum TransformResult {
    /// Send these headers and body instead.
    Forward {
        headers: Vec<(String, Vec<u8>)>,
        body: Bytes,
    },
    /// Send nothing: the delivery succeeds with reason `dropped_by_plugin`.
    Drop { reason: String },
}

/// One attempt's final request, for a signer.
#[derive(Clone, Debug, PartialEq)]
pub struct SignInput {
    pub endpoint_name: String,
    pub endpoint_url: String,
    pub delivery_id: String,
    pub attempt: u32,
    pub now_ms: u64,
    pub headers: Vec<(String, Vec<u8>)>,
    pub body: Bytes,
    /// The endpoint's secrets, newest first. Host-side only: the plugin gets handles and asks
    /// the host for HMACs, keyed with the secret as written or its Standard Webhooks form.
    pub secrets: Vec<Secret>,
}

/// What a backoff plugin is told about a failed attempt.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BackoffInput {
    pub attempt: u32,
    pub max_attempts: u32,
    pub last_status: Option<u16>,
    pub last_error_kind: Option<String>,
    pub retry_after_ms: Option<u64>,
    pub elapsed_ms: u64,
    pub now_ms: u64,
    /// The wait chosen before the failed attempt, if any (decorrelated jitter grows from it).
    pub previous_delay_ms: Option<u64>,
    /// The random number handed to the plugin for jitter; `None` draws one. Tests pass a fixed
    /// value to make a plugin's answer reproducible.
    pub random: Option<u64>,
}

/// A backoff plugin's answer, after the host's clamp. Maps one to one onto
/// `policy::BackoffDecision`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PluginBackoffDecision {
    RetryIn(Duration),
    GiveUp(String),
}

/// Why a plugin call failed. The attempt fails with error kind `plugin_error` and this detail.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureDetail {
    /// No plugin of that name is loaded (not dropped in yet, or deleted).
    Missing,
    /// The plugin implements another world than the binding needs.
    WrongWorld,
    /// The call ran past its CPU time limit or its wall-clock limit.
    Timeout,
    /// The call tried to grow memory past its cap.
    Memory,
    /// The plugin's stack overflowed (deep or endless recursion).
    StackOverflow,
    /// The plugin asked the host to hash more bytes than one call may.
    CryptoBudget,
    /// The plugin trapped (panic, `unreachable`, a denied host call that aborted it, ...).
    Trap,
    /// The answer was larger than the output cap.
    OutputTooLarge,
    /// The answer had a header name or value that is not valid HTTP.
    InvalidOutput,
    /// A signer was bound to an endpoint without a usable secret.
    BadSecret,
    /// The plugin returned its own `plugin-error`.
    Plugin,
}

impl FailureDetail {
    pub fn as_str(&self) -> &'static str {
        match self {
            FailureDetail::Missing => "missing",
            FailureDetail::WrongWorld => "wrong_world",
            FailureDetail::Timeout => "timeout",
            FailureDetail::Memory => "memory",
            FailureDetail::StackOverflow => "stack_overflow",
            FailureDetail::CryptoBudget => "crypto_budget",
            FailureDetail::Trap => "trap",
            FailureDetail::OutputTooLarge => "output_too_large",
            FailureDetail::InvalidOutput => "invalid_output",
            FailureDetail::BadSecret => "bad_secret",
            FailureDetail::Plugin => "plugin",
        }
    }
}

impl fmt::Display for FailureDetail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A failed plugin call: which plugin (and version), what kind of failure, and the details.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("plugin `{plugin}`{}: {detail}: {message}", version.as_ref().map(|v| format!(" ({v})")).unwrap_or_default())]
pub struct PluginFailure {
    pub plugin: String,
    /// The first 12 hex digits of the plugin file's SHA-256, when a version was loaded.
    pub version: Option<String>,
    pub detail: FailureDetail,
    pub message: String,
}

/// One plugin's share of the host's call slots.
struct PluginSlots {
    share: usize,
    semaphore: tokio::sync::Semaphore,
}

impl PluginSlots {
    fn new(share: usize) -> Self {
        PluginSlots {
            share,
            semaphore: tokio::sync::Semaphore::new(share),
        }
    }
}

/// How often a [`PluginHost`] found a compiled artifact in its cache.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheStats {
    pub hits: u64,
    pub misses: u64,
}

/// The gateway's plugin runtime. Cheap to clone: clones share one engine and registry.
#[derive(Clone)]
pub struct PluginHost {
    inner: Arc<Inner>,
}

impl fmt::Debug for PluginHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PluginHost")
            .field("dir", &self.inner.dir)
            .field("loaded", &self.loaded())
            .finish_non_exhaustive()
    }
}

struct Inner {
    dir: PathBuf,
    /// Plugins built into the binary (`bundled-plugins`), served under their names unless a
    /// file in `dir` has the same name; with each one's SHA-256, taken once (they are
    /// megabytes, and never change).
    bundled: Vec<(String, Bytes, [u8; 32])>,
    limits: PluginLimits,
    compiler: Compiler,
    registry: ArcSwap<PluginMap>,
    /// Files that failed to load, by name, with the SHA-256 that failed and why: the same
    /// content is not retried (nor logged again) until it changes.
    rejected: std::sync::Mutex<HashMap<String, Rejected>>,
    calls: tokio::sync::Semaphore,
    /// Each loaded plugin's share of the call slots, by name; replaced with the registry.
    plugin_slots: ArcSwap<HashMap<String, Arc<PluginSlots>>>,
    validations: tokio::sync::Semaphore,
    /// Idle instances of the loaded versions, for the next call of their binding.
    pool: InstancePool,
    /// Bumped after every rescan that changed the registry or rejected a file.
    changes: tokio::sync::watch::Sender<u64>,
    metrics: Metrics,
    /// `hookgate_plugin_call_duration_seconds`, registered once.
    call_duration: metrics::Histogram,
    /// The crossings of the calls that returned since counting was turned on.
    crossings: std::sync::Mutex<Crossings>,
    // Declared last: dropping it stops the ticker after everything compiled for it is gone.
    engine: limits::PluginEngine,
}

impl PluginHost {
    /// Creates the engine (epoch interruption with a ticker thread; the pooling allocator
    /// where the address space allows, else on-demand), opens the compilation cache in
    /// `cache_dir` (artifacts keyed by the file's SHA-256 and the engine's compatibility hash)
    /// and loads every `*.wasm` in `dir` now. A file that fails to load is logged and skipped;
    /// a missing `dir` is created. Blocks while it compiles (milliseconds per Rust plugin,
    /// seconds for a Python one on a cold cache): call it at startup or on a blocking task.
    pub fn new(
        dir: PathBuf,
        cache_dir: PathBuf,
        limits: PluginLimits,
        metrics: Metrics,
    ) -> anyhow::Result<PluginHost> {
        let bundled = bundled::BUNDLED
            .iter()
            .map(|(name, bytes)| ((*name).to_owned(), Bytes::from_static(bytes)))
            .collect();
        PluginHost::with_bundled(dir, cache_dir, limits, metrics, bundled)
    }

    /// Like [`PluginHost::new`], with `bundled` as the plugins built into the binary: each is
    /// served under its name unless a file in `dir` has that name (a file overrides it; when
    /// the file goes, the bundled plugin serves again).
    pub fn with_bundled(
        dir: PathBuf,
        cache_dir: PathBuf,
        limits: PluginLimits,
        metrics: Metrics,
        bundled: Vec<(String, Bytes)>,
    ) -> anyhow::Result<PluginHost> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| anyhow::anyhow!("cannot create the plugin folder {}: {e}", dir.display()))?;
        let engine = limits::PluginEngine::new(&limits)?;
        let compiler = Compiler::new(&engine.engine, Some(&cache_dir), &metrics)?
            .with_limits(limits.max_compile_time, limits.max_compiled_bytes);
        let calls = tokio::sync::Semaphore::new(limits.max_concurrent_calls.max(1) as usize);
        let validations = tokio::sync::Semaphore::new(limits::VALIDATION_SLOTS as usize);
        let pool = InstancePool::new(limits.idle_instances);
        let host = PluginHost {
            inner: Arc::new(Inner {
                dir,
                bundled: bundled
                    .into_iter()
                    .map(|(name, bytes)| {
                        let sha256 = <sha2::Sha256 as sha2::Digest>::digest(&bytes).into();
                        (name, bytes, sha256)
                    })
                    .collect(),
                limits,
                compiler,
                registry: ArcSwap::from_pointee(PluginMap::new()),
                rejected: std::sync::Mutex::new(HashMap::new()),
                calls,
                plugin_slots: ArcSwap::from_pointee(HashMap::new()),
                validations,
                pool,
                changes: tokio::sync::watch::channel(0).0,
                call_duration: metrics.plugin_call_duration(),
                crossings: std::sync::Mutex::new(Crossings::default()),
                metrics,
                engine,
            }),
        };
        let scanning = host.clone();
        check::block_on_side(async move { scanning.rescan().await })??;
        Ok(host)
    }

    /// Whether the engine got the pooling allocator (else it allocates on demand).
    pub fn uses_pooling_allocator(&self) -> bool {
        self.inner.engine.pooling
    }

    /// The folder being served.
    pub fn dir(&self) -> &std::path::Path {
        &self.inner.dir
    }

    /// Every loaded plugin, sorted by name.
    pub fn loaded(&self) -> Vec<LoadedInfo> {
        let map = self.inner.registry.load();
        let mut infos: Vec<LoadedInfo> = map
            .values()
            .map(|l| LoadedInfo {
                name: l.name.clone(),
                world: l.world,
                sha256: hex::encode(l.sha256),
                size_bytes: l.size_bytes,
                loaded_at: l.loaded_at,
            })
            .collect();
        infos.sort_by(|a, b| a.name.cmp(&b.name));
        infos
    }

    /// The plugin files that failed to load and have not loaded since, sorted by name: the
    /// previous version (if any) keeps serving.
    pub fn rejected(&self) -> Vec<Rejected> {
        let rejected = self.inner.rejected.lock().expect("rejected-files lock poisoned");
        let mut list: Vec<Rejected> = rejected.values().cloned().collect();
        list.sort_by(|a, b| a.name.cmp(&b.name));
        list
    }

    /// The world of plugin `name`, if loaded. Config validation uses it: binding a signer as a
    /// transform is an error once the plugin exists (a missing one is not: it is reported as a
    /// binding problem).
    pub fn world_of(&self, name: &str) -> Option<World> {
        self.lookup(name).map(|l| l.world)
    }

    /// The version (first 12 hex digits of the SHA-256) of plugin `name`, if loaded; attempt
    /// records carry it.
    pub fn version_of(&self, name: &str) -> Option<String> {
        self.lookup(name).map(|l| l.version.to_string())
    }

    /// How often loading found its compiled artifact in the cache since this host started.
    pub fn cache_stats(&self) -> CacheStats {
        CacheStats {
            hits: self.inner.compiler.cache_hits.load(Ordering::Relaxed),
            misses: self.inner.compiler.cache_misses.load(Ordering::Relaxed),
        }
    }

    /// How many instances calls created, how many calls an idle instance served instead, and
    /// how many instances wait for reuse now.
    pub fn instance_stats(&self) -> InstanceStats {
        self.inner.pool.stats()
    }

    /// Counts, from now on, the crossings between the host and the plugins in the calls that
    /// return (see [`Crossings`]), on the instances created from now on: a measurement, not
    /// for a running gateway, since it costs a hook call per crossing.
    pub fn count_crossings(&self) {
        self.inner.engine.count_crossings.store(true, Ordering::Relaxed);
    }

    /// The crossings counted since the last time this was asked, and zero again.
    pub fn take_crossings(&self) -> Crossings {
        std::mem::take(&mut *self.inner.crossings.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A receiver that changes whenever a rescan of the folder loaded, replaced, removed or
    /// rejected a plugin (the supervisor re-validates bindings; tests wait on it).
    pub fn changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Runs the transform bound by `binding` on an attempt's request.
    pub async fn transform(
        &self,
        binding: &PluginBinding,
        input: TransformInput,
    ) -> Result<TransformResult, PluginFailure> {
        let call_input = CallInput::Transform {
            endpoint: bindings::EndpointInfo {
                name: input.endpoint_name,
                url: input.endpoint_url,
            },
            event: bindings::EventInfo {
                id: input.event.id,
                topic: input.event.topic,
                event_type: input.event.event_type,
                received_at_ms: input.event.received_at_ms,
            },
            delivery: bindings::DeliveryInfo {
                id: input.delivery_id,
                attempt: input.attempt,
                now_ms: input.now_ms,
            },
            message: host::message::LentMessage {
                headers: input.headers,
                body: input.body,
            },
        };
        match self.invoke(binding, Vec::new(), call_input).await? {
            CallOutput::Transform(result) => Ok(result),
            other => unreachable_output(binding, other),
        }
    }

    /// Runs the signer bound by `binding`: returns the headers to add to the request. The
    /// secrets stay in the host; the plugin computes with key handles.
    pub async fn sign(
        &self,
        binding: &PluginBinding,
        input: SignInput,
    ) -> Result<Vec<(String, Vec<u8>)>, PluginFailure> {
        let mut keys = Vec::with_capacity(input.secrets.len());
        for secret in &input.secrets {
            keys.push(SigningKey::from_secret(secret).map_err(|e| PluginFailure {
                plugin: PluginBinding::normalize_name(&binding.plugin).into_owned(),
                version: self.version_of(&binding.plugin),
                detail: FailureDetail::BadSecret,
                message: e.to_string(),
            })?);
        }
        let call_input = CallInput::Sign {
            endpoint: bindings::EndpointInfo {
                name: input.endpoint_name,
                url: input.endpoint_url,
            },
            delivery: bindings::DeliveryInfo {
                id: input.delivery_id,
                attempt: input.attempt,
                now_ms: input.now_ms,
            },
            message: host::message::LentMessage {
                headers: input.headers,
                body: input.body,
            },
        };
        match self.invoke(binding, keys, call_input).await? {
            CallOutput::Sign(headers) => Ok(headers),
            other => unreachable_output(binding, other),
        }
    }

    /// Asks the backoff plugin bound by `binding` for the wait before the next attempt. The
    /// answer is clamped between [`PluginLimits::min_backoff_delay`] and
    /// [`PluginLimits::max_backoff_delay`]; the policy applies its own limits after this.
    pub async fn backoff(
        &self,
        binding: &PluginBinding,
        input: BackoffInput,
    ) -> Result<PluginBackoffDecision, PluginFailure> {
        let call_input = CallInput::Backoff(bindings::RetryContext {
            attempt: input.attempt,
            max_attempts: input.max_attempts,
            last_status: input.last_status,
            last_error_kind: input.last_error_kind,
            retry_after_ms: input.retry_after_ms,
            elapsed_ms: input.elapsed_ms,
            now_ms: input.now_ms,
            previous_delay_ms: input.previous_delay_ms,
            random: input.random.unwrap_or_else(rand::random),
        });
        match self.invoke(binding, Vec::new(), call_input).await? {
            CallOutput::Backoff(decision) => Ok(decision),
            other => unreachable_output(binding, other),
        }
    }

    /// Plugin `name`'s share of the call slots. A plugin unloaded since its call looked it up
    /// gets a single slot of its own.
    fn slots_of(&self, name: &str) -> Arc<PluginSlots> {
        self.inner
            .plugin_slots
            .load()
            .get(name)
            .cloned()
            .unwrap_or_else(|| Arc::new(PluginSlots::new(1)))
    }

    /// Shares the call slots out among the plugins of `loaded`, before it becomes the
    /// registry: `max_concurrent_calls / plugins` each, at least one. A plugin whose share did
    /// not change keeps its slots; calls holding slots of a replaced share finish on them.
    fn share_slots(&self, loaded: &PluginMap) {
        let total = self.inner.limits.max_concurrent_calls.max(1) as usize;
        let share = (total / loaded.len().max(1)).max(1);
        let current = self.inner.plugin_slots.load();
        let slots = loaded
            .keys()
            .map(|name| {
                let kept = current.get(name).filter(|slots| slots.share == share).cloned();
                let slots = kept.unwrap_or_else(|| Arc::new(PluginSlots::new(share)));
                (name.clone(), slots)
            })
            .collect();
        self.inner.plugin_slots.store(Arc::new(slots));
    }

    fn lookup(&self, name: &str) -> Option<Arc<Loaded>> {
        self.lookup_normal(&PluginBinding::normalize_name(name))
    }

    /// [`Self::lookup`] of a name already normalised.
    fn lookup_normal(&self, name: &str) -> Option<Arc<Loaded>> {
        self.inner.registry.load().get(name).cloned()
    }

    async fn invoke(
        &self,
        binding: &PluginBinding,
        keys: Vec<SigningKey>,
        input: CallInput,
    ) -> Result<CallOutput, PluginFailure> {
        let name = PluginBinding::normalize_name(&binding.plugin);
        let Some(loaded) = self.lookup_normal(&name) else {
            let outcome = FailureDetail::Missing.as_str();
            self.inner.metrics.plugin_calls(&name, outcome).increment(1);
            return Err(PluginFailure {
                plugin: name.into_owned(),
                version: None,
                detail: FailureDetail::Missing,
                message: format!(
                    "no plugin `{}` is loaded from {}",
                    binding.plugin,
                    self.inner.dir.display()
                ),
            });
        };
        // Its own slot first: a plugin whose calls all run to the limit queues only itself.
        let shutting_down = |_: tokio::sync::AcquireError| PluginFailure {
            plugin: name.to_string(),
            version: Some(loaded.version.to_string()),
            detail: FailureDetail::Trap,
            message: "the plugin host is shutting down".to_owned(),
        };
        let own_slots = self.slots_of(&name);
        let _own_permit = own_slots.semaphore.acquire().await.map_err(shutting_down)?;
        let _permit = self.inner.calls.acquire().await.map_err(shutting_down)?;
        let started = std::time::Instant::now();
        let config = loaded.call_config(&binding.config);
        let key = input.endpoint().map(|endpoint| BindingKey {
            load_id: loaded.load_id,
            endpoint_name: &endpoint.name,
            endpoint_url: &endpoint.url,
            config: &config,
        });
        let idle = key.as_ref().and_then(|key| self.inner.pool.take(key));
        if idle.is_none() {
            self.inner.pool.count_instantiated();
        }
        // The key borrows from `input`, which the call consumes: keep what the pool needs.
        let owned_key = key.map(|key| (key.endpoint_name.to_owned(), key.endpoint_url.to_owned()));
        let Finished {
            result,
            reusable,
            crossings,
        } = call::run(
            &self.inner.engine,
            &loaded,
            &self.inner.limits,
            &config,
            keys,
            input,
            idle,
        )
        .await;
        if crossings != Crossings::default() {
            *self.inner.crossings.lock().unwrap_or_else(|p| p.into_inner()) += crossings;
        }
        if let (Some(instance), Some(endpoint)) = (reusable, owned_key) {
            self.give_back(&name, &loaded, endpoint, instance);
        }
        match &result {
            Ok(_) => loaded
                .calls_ok
                .get_or_init(|| self.inner.metrics.plugin_calls(&name, "ok"))
                .increment(1),
            Err(e) => {
                let outcome = e.failure.detail.as_str();
                self.inner.metrics.plugin_calls(&name, outcome).increment(1);
            }
        }
        self.inner.call_duration.record(started.elapsed().as_secs_f64());
        result.map_err(|CallError { failure, .. }| failure)
    }
}

impl PluginHost {
    /// Returns an instance to the pool for the next call of its binding. Only the version
    /// that is loaded now gets instances back: a call that started before a reload finishes on
    /// the old version, and its instance goes with it. (A reload between this check and the put
    /// leaves one instance no call will match, until the least-recently-used rule drops it.)
    fn give_back(
        &self,
        name: &str,
        loaded: &Loaded,
        endpoint: (String, String),
        instance: call::PluginInstance,
    ) {
        if self
            .lookup_normal(name)
            .is_some_and(|current| current.load_id == loaded.load_id)
        {
            self.inner.pool.put(loaded.load_id, endpoint, instance);
        }
    }
}

fn unreachable_output<T>(binding: &PluginBinding, output: CallOutput) -> Result<T, PluginFailure> {
    Err(PluginFailure {
        plugin: binding.plugin.clone(),
        version: None,
        detail: FailureDetail::WrongWorld,
        message: format!("the call answered for another world: {output:?}"),
    })
}

/// The binding config a validation or check call runs with: empty, as a binding without
/// config would have.
fn empty_config() -> BTreeMap<String, String> {
    BTreeMap::new()
}
