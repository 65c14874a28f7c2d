//! `hookgate plugin check FILE`: what a component is, and whether it runs.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::bindings::{DeliveryInfo, EndpointInfo, EventInfo, RetryContext};
use super::call::{self, CallInput, CallOutput};
use super::host::crypto::SigningKey;
use super::host::message::LentMessage;
use super::limits::PluginEngine;
use super::registry::{Compiler, JS_ENGINE, Loaded};
use super::{FailureDetail, PluginFailure, PluginLimits, World, empty_config};
use crate::model::{PluginBinding, Secret};

/// The sample request check and load-time validation run a plugin on: a small JSON event.
pub(crate) const SAMPLE_BODY: &[u8] =
    br#"{"order_id":"ord_123","amount":4200,"customer":{"email":"ada@example.com"}}"#;

/// The secret a signer signs the sample with during check and validation.
const SAMPLE_SECRET: &str = "hookgate-sample-secret";

/// The sample call for a plugin of `world`, and the keys it needs.
pub(crate) fn sample_input(world: World) -> (CallInput, Vec<SigningKey>) {
    let now_ms = 1_767_225_600_000; // 2026-01-01T00:00:00Z
    let endpoint = EndpointInfo {
        name: "sample".into(),
        url: "https://receiver.example/hooks".into(),
    };
    let delivery = DeliveryInfo {
        id: "dlv_sample".into(),
        attempt: 1,
        now_ms,
    };
    let message = LentMessage {
        headers: vec![("content-type".into(), b"application/json".to_vec())],
        body: bytes::Bytes::from_static(SAMPLE_BODY),
    };
    match world {
        World::Transformer => (
            CallInput::Transform {
                endpoint,
                event: EventInfo {
                    id: "evt_sample".into(),
                    topic: "orders".into(),
                    event_type: "order.created".into(),
                    received_at_ms: now_ms - 1_000,
                },
                delivery,
                message,
            },
            Vec::new(),
        ),
        World::Signer => (
            CallInput::Sign {
                endpoint,
                delivery,
                message,
            },
            vec![
                SigningKey::from_secret(&Secret::new(SAMPLE_SECRET))
                    .expect("the sample secret is plain text"),
            ],
        ),
        World::Backoff => (
            CallInput::Backoff(RetryContext {
                attempt: 3,
                max_attempts: 9,
                last_status: Some(503),
                last_error_kind: Some("http_status".into()),
                retry_after_ms: None,
                elapsed_ms: 150_000,
                now_ms,
                previous_delay_ms: Some(120_000),
                random: 0x9e37_79b9_7f4a_7c15,
            }),
            Vec::new(),
        ),
    }
}

/// Runs `future` to completion on a current-thread runtime of a scoped thread of its own, so
/// that synchronous code (startup, the CLI) can drive async plugin calls whether or not it is
/// itself inside a tokio runtime.
pub(crate) fn block_on_side<F>(future: F) -> anyhow::Result<F::Output>
where
    F: std::future::Future + Send,
    F::Output: Send,
{
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()?;
                Ok(runtime.block_on(future))
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the plugin loader thread panicked"))?
    })
}

/// What `hookgate plugin check FILE` found out about a component.
#[derive(Debug)]
pub struct CheckReport {
    pub path: PathBuf,
    /// The plugin name the file would load as.
    pub name: String,
    pub world: World,
    /// The version of the contract it was built against, e.g. `hookgate:plugin@0.2.0`; one
    /// built against `hookgate:plugin@0.1.0` is adapted by the gateway and still runs.
    pub contract: &'static str,
    /// The component's imports (WIT interface names), e.g. `hookgate:plugin/crypto@0.1.0`.
    pub imports: Vec<String>,
    pub size_bytes: u64,
    pub sha256: String,
    pub compile_time: Duration,
    /// What the plugin answered on the sample input (a sample `order.created` event), or how it failed.
    pub sample: Result<String, PluginFailure>,
    /// How long the sample call took, fresh store and instantiation included.
    pub sample_time: Duration,
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "file:         {}", self.path.display())?;
        writeln!(f, "plugin name:  {}", self.name)?;
        writeln!(f, "world:        {}", self.world)?;
        writeln!(f, "contract:     {}", self.contract)?;
        writeln!(f, "size:         {} bytes", self.size_bytes)?;
        writeln!(f, "sha256:       {}", self.sha256)?;
        writeln!(f, "compile time: {:.1} ms", self.compile_time.as_secs_f64() * 1e3)?;
        writeln!(f, "imports:")?;
        for import in &self.imports {
            writeln!(f, "  {import}")?;
        }
        match &self.sample {
            Ok(answer) => writeln!(
                f,
                "sample call:  ok in {:.3} ms: {answer}",
                self.sample_time.as_secs_f64() * 1e3
            ),
            Err(failure) => writeln!(
                f,
                "sample call:  FAILED in {:.3} ms: {failure}",
                self.sample_time.as_secs_f64() * 1e3
            ),
        }
    }
}

/// Compiles the component at `path` (no cache), checks that it links against the gateway's
/// imports and implements one world, and runs it once on a sample input under `limits`.
/// An error means the file would be rejected by the gateway; a failed sample call is reported
/// in the [`CheckReport`] instead.
pub fn check_file(path: &Path, limits: &PluginLimits) -> anyhow::Result<CheckReport> {
    check_file_with_config(path, limits, &empty_config())
}

/// Like [`check_file`], with the sample call served `config` as a binding's config (what
/// `config.get` answers the plugin).
pub fn check_file_with_config(
    path: &Path,
    limits: &PluginLimits,
    config: &BTreeMap<String, String>,
) -> anyhow::Result<CheckReport> {
    let size_bytes = std::fs::metadata(path)
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?
        .len();
    if size_bytes > limits.max_file_bytes {
        anyhow::bail!(
            "{}: {size_bytes} bytes is over the plugin file limit of {} bytes; not compiled",
            path.display(),
            limits.max_file_bytes
        );
    }
    let bytes = std::fs::read(path).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let engine = PluginEngine::new(limits)?;
    // A check's figures are not the gateway's: they go to a recorder nobody reads.
    let compiler = Compiler::new(&engine.engine, None, &crate::telemetry::Metrics::new())?
        .with_limits(limits.max_compile_time, limits.max_compiled_bytes);
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow::anyhow!("{} has no file name", path.display()))?;
    let started = Instant::now();
    let loaded = match file_name.strip_suffix(".js") {
        Some(name) => {
            let js = compiler
                .compile(JS_ENGINE, &js_engine(path)?)
                .map_err(|e| anyhow::anyhow!("the js plugin: {e:#}"))?;
            compiler.script(&js, &PluginBinding::normalize_name(name), bytes)
        }
        None => compiler.compile(file_name, &bytes),
    };
    let loaded = Arc::new(loaded.map_err(|e| anyhow::anyhow!("{}: {e:#}", path.display()))?);
    let compile_time = started.elapsed();
    let (input, keys) = sample_input(loaded.world);
    let started = Instant::now();
    let config = loaded.call_config(config);
    let result = block_on_side(call::run(&engine, &loaded, limits, &config, keys, input, None))?.result;
    let sample_time = started.elapsed();
    let sample = match result {
        Ok(output) => Ok(describe(&output)),
        Err(e) if e.before_export || broken_script(&loaded, &e.failure) => {
            anyhow::bail!("{}: {}", path.display(), e.failure)
        }
        Err(e) => Err(e.failure),
    };
    Ok(CheckReport {
        path: path.to_owned(),
        name: loaded.name.clone(),
        world: loaded.world,
        contract: loaded.contract.package(),
        imports: loaded.imports.clone(),
        size_bytes: loaded.size_bytes,
        sha256: hex::encode(loaded.sha256),
        compile_time,
        sample,
        sample_time,
    })
}

/// Whether a `.js` plugin's call failed because its code is broken (does not parse, defines
/// no handler): the `js` plugin answers `bad_config` for that whatever the input, so such a
/// file is refused at load, not merely failing a sample.
pub(crate) fn broken_script(loaded: &Loaded, failure: &PluginFailure) -> bool {
    loaded.code.is_some()
        && failure.detail == FailureDetail::Plugin
        && failure.message.starts_with("bad_config:")
}

/// The `js` component that runs a `.js` file under check: the bundled one, else `js.wasm`
/// beside the file (as in a plugin folder, where it also wins over the bundled one).
fn js_engine(script: &Path) -> anyhow::Result<Vec<u8>> {
    let beside = script.with_file_name(format!("{JS_ENGINE}.wasm"));
    if beside.exists() {
        return std::fs::read(&beside).map_err(|e| anyhow::anyhow!("cannot read {}: {e}", beside.display()));
    }
    match super::bundled::BUNDLED
        .iter()
        .find(|(name, _)| *name == JS_ENGINE)
    {
        Some((_, bytes)) => Ok(bytes.to_vec()),
        None => anyhow::bail!(
            "a .js plugin runs on the `{JS_ENGINE}` plugin: this binary has no bundled plugins, and there is no {} beside the file",
            beside.display()
        ),
    }
}

/// A one-line summary of an answer, with header values shown as text where they are.
fn describe(output: &CallOutput) -> String {
    let headers = |headers: &[(String, Vec<u8>)]| {
        headers
            .iter()
            .map(|(n, v)| format!("{n}: {}", String::from_utf8_lossy(v)))
            .collect::<Vec<_>>()
            .join("; ")
    };
    match output {
        CallOutput::Transform(super::TransformResult::Forward { headers: h, body }) => {
            format!(
                "forward [{}] {}",
                headers(h),
                String::from_utf8_lossy(&body[..body.len().min(512)])
            )
        }
        CallOutput::Transform(super::TransformResult::Drop { reason }) => format!("drop: {reason}"),
        CallOutput::Sign(h) => format!("headers [{}]", headers(h)),
        CallOutput::Backoff(super::PluginBackoffDecision::RetryIn(wait)) => {
            format!("retry in {} ms", wait.as_millis())
        }
        CallOutput::Backoff(super::PluginBackoffDecision::GiveUp(reason)) => format!("give up: {reason}"),
    }
}
