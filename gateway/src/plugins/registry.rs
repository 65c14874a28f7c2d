//! Compiling, caching, validating and holding the loaded plugins.
//!
//! The registry is an `ArcSwap` of a name → `Arc<Loaded>` map: a reload builds the new
//! `Loaded` off to the side and swaps the whole map, so calls already running keep the
//! version they started with and never see a half-loaded plugin.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::{Component, ComponentExportIndex, InstancePre, Linker};

use super::World;
use super::bindings;
use super::host::CallState;
use crate::model::{PluginBinding, Timestamp};
use crate::telemetry::Metrics;

/// One compiled, validated plugin version, ready to be instantiated.
pub(crate) struct Loaded {
    /// Unique per load, even of the same file content twice: the instance pool keys idle
    /// instances by it, so a reload never hands out the previous load's instances.
    pub(crate) load_id: u64,
    pub(crate) name: String,
    pub(crate) world: World,
    /// The version of the contract the component was built against.
    pub(crate) contract: Contract,
    pub(crate) sha256: [u8; 32],
    /// The first 12 hex digits of the SHA-256: what logs and attempt records call the version.
    pub(crate) version: Arc<str>,
    pub(crate) size_bytes: u64,
    pub(crate) loaded_at: Timestamp,
    pub(crate) imports: Vec<String>,
    pub(crate) compile_time: Duration,
    pub(crate) from_cache: bool,
    pub(crate) pre: InstancePre<CallState>,
    /// The world's export, looked up once: instances type-check it by index, not by name.
    pub(crate) export: ComponentExportIndex,
    /// For a plugin made from a `.js` file: its JavaScript, which every call of the `js`
    /// component it runs on gets as config key `code` (over any `code` the binding sets).
    pub(crate) code: Option<Arc<str>>,
    /// `hookgate_plugin_calls_total{plugin, outcome="ok"}`, registered at the first call that
    /// succeeds (so a plugin never called has no series) and kept: the label lookup would
    /// otherwise be paid on every call.
    pub(crate) calls_ok: std::sync::OnceLock<metrics::Counter>,
}

/// The version of the contract (`wit/plugin.wit`) a component was built against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Contract {
    /// `hookgate:plugin@0.1.0` (`wit/v1/plugin.wit`): the message copied in whole, a whole
    /// message answered. Adapted by [`super::v1`].
    V1,
    /// `hookgate:plugin@0.2.0`: the message lent as a resource, edits answered.
    Current,
}

impl Contract {
    /// The WIT package the version is.
    pub(crate) fn package(self) -> &'static str {
        match self {
            Contract::V1 => "hookgate:plugin@0.1.0",
            Contract::Current => "hookgate:plugin@0.2.0",
        }
    }

    /// The version `component`'s export `name` for `world` was built against. A transform or
    /// signer says it with the type of its `message` parameter (a record in the first version,
    /// a borrowed resource now); a backoff function, whose export is the same in both, with
    /// the version of the interfaces it imports (none: the current one).
    fn of(component: &Component, engine: &Engine, world: World, name: &str) -> Contract {
        use wasmtime::component::types::{ComponentItem, Type};
        if world == World::Backoff {
            let v1 = component
                .component_type()
                .imports(engine)
                .any(|(import, _)| import.starts_with("hookgate:plugin/") && import.ends_with("@0.1.0"));
            return if v1 { Contract::V1 } else { Contract::Current };
        }
        let export = component.component_type().get_export(engine, name).map(|e| e.ty);
        let Some(ComponentItem::ComponentFunc(func)) = export else {
            return Contract::Current;
        };
        match func.params().find(|(param, _)| *param == "message") {
            Some((_, Type::Record(_))) => Contract::V1,
            _ => Contract::Current,
        }
    }
}

/// The plugin whose component runs the `.js` files of the plugin folder.
pub(crate) const JS_ENGINE: &str = "js";

impl Loaded {
    /// The config a call of this plugin runs with: the binding's, and for a `.js` plugin its
    /// code as `code`.
    pub(crate) fn call_config<'a>(
        &self,
        binding: &'a BTreeMap<String, String>,
    ) -> Cow<'a, BTreeMap<String, String>> {
        match &self.code {
            None => Cow::Borrowed(binding),
            Some(code) => {
                let mut config = binding.clone();
                config.insert("code".to_owned(), code.to_string());
                Cow::Owned(config)
            }
        }
    }
}

/// The export each world's plugins must have, by name.
pub(crate) fn export_name(world: World) -> &'static str {
    match world {
        World::Transformer => "transform",
        World::Signer => "sign",
        World::Backoff => "next-delay",
    }
}

/// Compiles components for one engine, through the on-disk compilation cache.
pub(crate) struct Compiler {
    engine: Engine,
    linker: Linker<CallState>,
    /// `<cache_dir>/<engine compatibility hash>`: artifacts of other engine builds or
    /// settings never mix with this one's. `None` compiles without a cache.
    artifacts_dir: Option<PathBuf>,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    /// The next [`Loaded::load_id`].
    next_load_id: AtomicU64,
    cache_hit_counter: metrics::Counter,
    cache_miss_counter: metrics::Counter,
    max_compile_time: Duration,
    max_compiled_bytes: usize,
}

impl Compiler {
    pub(crate) fn new(engine: &Engine, cache_dir: Option<&Path>, metrics: &Metrics) -> anyhow::Result<Self> {
        let mut linker = Linker::<CallState>::new(engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)
            .map_err(|e| anyhow::anyhow!("cannot link WASI: {e:?}"))?;
        bindings::PluginHost::add_to_linker::<CallState, wasmtime::component::HasSelf<CallState>>(
            &mut linker,
            |state| state,
        )
        .map_err(|e| anyhow::anyhow!("cannot link the plugin imports: {e:?}"))?;
        // The first version's names, for components built against it.
        bindings::v1::PluginHost::add_to_linker::<CallState, wasmtime::component::HasSelf<CallState>>(
            &mut linker,
            |state| state,
        )
        .map_err(|e| anyhow::anyhow!("cannot link the first version's plugin imports: {e:?}"))?;
        let artifacts_dir = match cache_dir {
            Some(cache_dir) => {
                let mut hasher = std::collections::hash_map::DefaultHasher::new();
                engine.precompile_compatibility_hash().hash(&mut hasher);
                let dir = cache_dir.join(format!("{:016x}", hasher.finish()));
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("cannot create the plugin cache folder {}", dir.display()))?;
                Some(dir)
            }
            None => None,
        };
        Ok(Compiler {
            engine: engine.clone(),
            linker,
            artifacts_dir,
            cache_hits: AtomicU64::new(0),
            cache_misses: AtomicU64::new(0),
            next_load_id: AtomicU64::new(1),
            cache_hit_counter: metrics.plugin_cache(true),
            cache_miss_counter: metrics.plugin_cache(false),
            max_compile_time: Duration::MAX,
            max_compiled_bytes: usize::MAX,
        })
    }

    /// Refuses plugins whose compilation takes longer than `max_compile_time` or whose
    /// compiled code is larger than `max_compiled_bytes`.
    pub(crate) fn with_limits(mut self, max_compile_time: Duration, max_compiled_bytes: usize) -> Self {
        self.max_compile_time = max_compile_time;
        self.max_compiled_bytes = max_compiled_bytes;
        self
    }

    /// Compiles on a thread of its own and waits at most `max_compile_time` for it.
    fn compile_bounded(&self, bytes: &[u8]) -> anyhow::Result<Component> {
        let (engine, bytes) = (self.engine.clone(), bytes.to_vec());
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("hookgate-plugin-compile".into())
            .spawn(move || {
                let _ = tx.send(Component::new(&engine, &bytes));
            })
            .context("cannot start a compiler thread")?;
        match rx.recv_timeout(self.max_compile_time) {
            Ok(compiled) => {
                compiled.map_err(|e| anyhow::anyhow!("cannot be compiled for this gateway: {e:#}"))
            }
            Err(_) => anyhow::bail!(
                "compiling took longer than the limit of {:?}; refused (the compiler's result is dropped)",
                self.max_compile_time
            ),
        }
    }

    /// The compiled code's size, refused past `max_compiled_bytes`.
    fn check_compiled_size(&self, component: &Component) -> anyhow::Result<()> {
        let range = component.image_range();
        let size = (range.end as usize).saturating_sub(range.start as usize);
        if size > self.max_compiled_bytes {
            anyhow::bail!(
                "its compiled code takes {size} bytes, over the limit of {} bytes; refused",
                self.max_compiled_bytes
            );
        }
        Ok(())
    }

    /// The cached artifact's path for a file with this SHA-256.
    pub(crate) fn artifact_path(&self, sha256: &[u8; 32]) -> Option<PathBuf> {
        let dir = self.artifacts_dir.as_ref()?;
        Some(dir.join(format!("{}.cwasm", hex::encode(sha256))))
    }

    /// Compiles `bytes` (the content of plugin `name`'s file) or loads its cached artifact,
    /// then links it: imports that the gateway does not provide make this fail, as does a
    /// component that exports none (or more than one) of the three worlds' functions.
    /// Instantiating and type-checking the export is [`super::PluginHost`]'s next step.
    pub(crate) fn compile(&self, name: &str, bytes: &[u8]) -> anyhow::Result<Loaded> {
        let sha256: [u8; 32] = Sha256::digest(bytes).into();
        let started = Instant::now();
        let (component, from_cache) = self.component(&sha256, bytes)?;
        let compile_time = started.elapsed();
        self.check_compiled_size(&component)?;

        let worlds: Vec<World> = [World::Transformer, World::Signer, World::Backoff]
            .into_iter()
            .filter(|w| component.get_export_index(None, export_name(*w)).is_some())
            .collect();
        let world = match worlds.as_slice() {
            [world] => *world,
            [] => anyhow::bail!(
                "exports none of `transform` (transformer), `sign` (signer), `next-delay` (backoff): \
                 it does not implement a hookgate plugin world"
            ),
            _ => anyhow::bail!("exports the functions of more than one world: {worlds:?}"),
        };
        let export = component
            .get_export_index(None, export_name(world))
            .context("export disappeared")?;
        let contract = Contract::of(&component, &self.engine, world, export_name(world));
        let imports = component
            .component_type()
            .imports(&self.engine)
            .map(|(import, _)| import.to_owned())
            .collect();
        let pre = self.linker.instantiate_pre(&component).map_err(|e| {
            anyhow::anyhow!("cannot be linked (it imports something the gateway does not provide): {e:#}")
        })?;
        let hex = hex::encode(sha256);
        Ok(Loaded {
            load_id: self.next_load_id.fetch_add(1, Ordering::Relaxed),
            name: PluginBinding::normalize_name(name).into_owned(),
            world,
            contract,
            sha256,
            version: Arc::from(&hex[..12]),
            size_bytes: bytes.len() as u64,
            loaded_at: Timestamp::from_system_time(std::time::SystemTime::now()),
            imports,
            compile_time,
            from_cache,
            pre,
            export,
            code: None,
            calls_ok: std::sync::OnceLock::new(),
        })
    }

    /// Plugin `name` made from a `.js` file holding `code`: the `engine` component (the `js`
    /// plugin, which must be a transform) with that code. Nothing is compiled: the instances
    /// are the engine's, and the code is parsed in each instance on its first call. The
    /// version is the SHA-256 of the engine's and the code's, so a new engine or new code is a
    /// new version.
    pub(crate) fn script(&self, engine: &Loaded, name: &str, code: Vec<u8>) -> anyhow::Result<Loaded> {
        if engine.world != World::Transformer {
            anyhow::bail!(
                "the `{JS_ENGINE}` plugin that runs .js files is a {}, not a transformer",
                engine.world
            );
        }
        let size_bytes = code.len() as u64;
        let sha256 = script_sha256(engine, &code);
        let code = String::from_utf8(code).map_err(|_| anyhow::anyhow!("the JavaScript is not UTF-8"))?;
        Ok(Loaded {
            load_id: self.next_load_id.fetch_add(1, Ordering::Relaxed),
            name: name.to_owned(),
            world: engine.world,
            contract: engine.contract,
            sha256,
            version: Arc::from(&hex::encode(sha256)[..12]),
            size_bytes,
            loaded_at: Timestamp::from_system_time(std::time::SystemTime::now()),
            imports: engine.imports.clone(),
            compile_time: Duration::ZERO,
            from_cache: true,
            pre: engine.pre.clone(),
            export: engine.export,
            code: Some(Arc::from(code)),
            calls_ok: std::sync::OnceLock::new(),
        })
    }

    /// The compiled component, from the cache when an artifact for this content and engine is
    /// there, else compiled now and written to the cache (atomically: temp file + rename).
    fn component(&self, sha256: &[u8; 32], bytes: &[u8]) -> anyhow::Result<(Component, bool)> {
        let Some(artifact) = self.artifact_path(sha256) else {
            return Ok((self.compile_bounded(bytes)?, false));
        };
        if artifact.exists() {
            // SAFETY: `deserialize_file` trusts the artifact to be wasmtime's own output. The
            // cache folder is the gateway's: every file in it was written below by
            // `Component::serialize` for this content hash, in a folder keyed by this engine's
            // compatibility hash; wasmtime also checks the artifact's version and settings.
            #[allow(unsafe_code)]
            let loaded = unsafe { Component::deserialize_file(&self.engine, &artifact) };
            match loaded {
                Ok(component) => {
                    self.cache_hits.fetch_add(1, Ordering::Relaxed);
                    self.cache_hit_counter.increment(1);
                    return Ok((component, true));
                }
                Err(e) => {
                    tracing::warn!(artifact = %artifact.display(), error = %e, "discarding an unusable cached plugin artifact");
                    let _ = std::fs::remove_file(&artifact);
                }
            }
        }
        self.cache_misses.fetch_add(1, Ordering::Relaxed);
        self.cache_miss_counter.increment(1);
        let component = self.compile_bounded(bytes)?;
        match component.serialize() {
            Ok(serialized) => {
                if let Err(e) = write_atomically(&artifact, &serialized) {
                    tracing::warn!(artifact = %artifact.display(), error = %e, "cannot write the plugin compilation cache");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot serialize a compiled plugin"),
        }
        Ok((component, false))
    }
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

/// The identity of a `.js` plugin: the SHA-256 of its engine's SHA-256 and its code.
pub(crate) fn script_sha256(engine: &Loaded, code: &[u8]) -> [u8; 32] {
    let mut hasher = Sha256::new();
    hasher.update(engine.sha256);
    hasher.update(code);
    hasher.finalize().into()
}

/// The loaded plugins by (normalized) name.
pub(crate) type PluginMap = HashMap<String, Arc<Loaded>>;

/// A file of the plugin folder: a component, or JavaScript for the `js` plugin to run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum FileKind {
    Wasm,
    Js,
}

/// The `*.wasm` and `*.js` files of `dir` by normalized plugin name (`foo.js` is plugin
/// `foo`). Hidden files (editors' and copy tools' temporaries) are skipped.
pub(crate) fn plugin_files(dir: &Path) -> std::io::Result<Vec<(String, PathBuf, FileKind)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let path = entry.path();
        let Some(file_name) = path.file_name().and_then(|n| n.to_str()) else {
            continue;
        };
        let kind = match path.extension().and_then(|e| e.to_str()) {
            Some("wasm") => FileKind::Wasm,
            Some("js") => FileKind::Js,
            _ => continue,
        };
        if file_name.starts_with('.') || entry.file_type()?.is_dir() {
            continue;
        }
        let stem = file_name.trim_end_matches(".js");
        files.push((PluginBinding::normalize_name(stem).into_owned(), path, kind));
    }
    files.sort();
    Ok(files)
}
