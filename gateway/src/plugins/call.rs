//! One plugin call: on an idle instance of the same binding when the pool has one, else on a
//! fresh `Store` instantiated from the cached `InstancePre`; run under the deadline and memory
//! cap, its answer checked against the output cap. An instance comes back for reuse only when
//! its call returned normally; a trapped or overrun instance is dropped with its store.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use wasmtime::Store;
use wasmtime::component::{Resource, TypedFunc};

use super::bindings::{
    Decision, DeliveryInfo, Edits, EndpointInfo, EventInfo, Outcome, PluginError, RetryContext,
};
use super::host::crypto::SigningKey;
use super::host::message::LentMessage;
use super::host::{CallState, Crossings};
use super::limits::{DeadlineExceeded, PluginEngine, WallClock, arm_deadline, classify};
use super::registry::{Contract, Loaded};
use super::{FailureDetail, PluginBackoffDecision, PluginFailure, PluginLimits, TransformResult, World, v1};

pub(super) type Headers = Vec<(String, Vec<u8>)>;

/// What a call sends: the arguments of one world's export, in the current contract's terms
/// (a plugin of the first version gets them adapted, see [`super::v1`]).
pub(crate) enum CallInput {
    Transform {
        endpoint: EndpointInfo,
        event: EventInfo,
        delivery: DeliveryInfo,
        message: LentMessage,
    },
    Sign {
        endpoint: EndpointInfo,
        delivery: DeliveryInfo,
        message: LentMessage,
    },
    Backoff(RetryContext),
}

impl CallInput {
    pub(crate) fn world(&self) -> World {
        match self {
            CallInput::Transform { .. } => World::Transformer,
            CallInput::Sign { .. } => World::Signer,
            CallInput::Backoff(_) => World::Backoff,
        }
    }

    /// The endpoint the call serves, when the world's arguments name one. A backoff call
    /// names none, so it never runs on a reused instance.
    pub(crate) fn endpoint(&self) -> Option<&EndpointInfo> {
        match self {
            CallInput::Transform { endpoint, .. } | CallInput::Sign { endpoint, .. } => Some(endpoint),
            CallInput::Backoff(_) => None,
        }
    }
}

/// What a call answered, already checked against the limits.
#[derive(Debug)]
pub(crate) enum CallOutput {
    Transform(TransformResult),
    Sign(Headers),
    Backoff(PluginBackoffDecision),
}

/// A failed call, and whether it failed before the export ran (instantiation or the export's
/// type check): such a plugin is not valid for its world at all.
pub(crate) struct CallError {
    pub(crate) failure: PluginFailure,
    pub(crate) before_export: bool,
}

type TransformFunc = TypedFunc<
    (EndpointInfo, EventInfo, DeliveryInfo, Resource<LentMessage>),
    (Result<Outcome, PluginError>,),
>;
type SignFunc = TypedFunc<
    (
        EndpointInfo,
        DeliveryInfo,
        Resource<LentMessage>,
        Resource<SigningKey>,
    ),
    (Result<Edits, PluginError>,),
>;
type BackoffFunc = TypedFunc<(RetryContext,), (Result<Decision, PluginError>,)>;

/// The world's export of one instance, type-checked once when the instance is created.
enum Export {
    Transform(TransformFunc),
    Sign(SignFunc),
    Backoff(BackoffFunc),
    /// A plugin built against the first version of the contract.
    V1(v1::Export),
}

/// An instantiated plugin: its store (holding the one binding config it serves), and its
/// export. Lives for one call, or for several calls of the same binding through the pool.
pub(crate) struct PluginInstance {
    store: Store<CallState>,
    export: Export,
    /// The instance's linear memory when it was created; growth beyond it is what
    /// [`PluginLimits::reuse_max_growth_bytes`] limits.
    initial_memory_bytes: usize,
    /// Calls this instance has run.
    calls: u32,
}

/// Calls one instance may serve before it is dropped. A guard against whatever a store may
/// accumulate per call that the host cannot see or reset (wasmtime's own per-store tables);
/// one instantiation per this many calls costs nothing measurable.
pub(crate) const INSTANCE_CALLS_MAX: u32 = 10_000;

impl PluginInstance {
    /// The binding config this instance was created for.
    pub(crate) fn config(&self) -> &BTreeMap<String, String> {
        &self.store.data().config
    }

    /// Whether this instance, after a call that returned normally, may serve another: it has
    /// not grown much beyond its starting memory, nor served too many calls.
    fn worth_keeping(&self, limits: &PluginLimits) -> bool {
        let grown_bytes = self
            .store
            .data()
            .limiter
            .used_bytes()
            .saturating_sub(self.initial_memory_bytes);
        grown_bytes <= limits.reuse_max_growth_bytes && self.calls < INSTANCE_CALLS_MAX
    }
}

/// How a call ended: its result, and its instance when that may serve another call of the
/// same binding.
pub(crate) struct Finished {
    pub(crate) result: Result<CallOutput, CallError>,
    pub(crate) reusable: Option<PluginInstance>,
    /// The call's crossings, when its instance counted them and the call returned.
    pub(crate) crossings: Crossings,
}

/// Runs one call of `loaded` with `input`, on `idle` (an instance of this same version and
/// binding, taken from the pool) or else on a fresh instance created with the binding's
/// `config`. For a signer, `keys` are the endpoint's keys, newest first (the first is passed
/// to `sign`).
pub(crate) async fn run(
    engine: &PluginEngine,
    loaded: &Arc<Loaded>,
    limits: &PluginLimits,
    config: &BTreeMap<String, String>,
    keys: Vec<SigningKey>,
    input: CallInput,
    idle: Option<PluginInstance>,
) -> Finished {
    let fail = |detail: FailureDetail, message: String, before_export: bool| CallError {
        failure: PluginFailure {
            plugin: loaded.name.clone(),
            version: Some(loaded.version.to_string()),
            detail,
            message,
        },
        before_export,
    };
    if input.world() != loaded.world {
        let failure = fail(
            FailureDetail::WrongWorld,
            format!(
                "plugin `{}` implements {}, not {}",
                loaded.name,
                loaded.world.as_str(),
                input.world().as_str()
            ),
            false,
        );
        return Finished {
            result: Err(failure),
            reusable: idle,
            crossings: Crossings::default(),
        };
    }

    // A CPU budget in epoch ticks for guest code, and a wall-clock limit around the whole
    // call: past it the call's future is dropped, which unwinds the guest's stack and drops
    // its instance with it.
    let call = run_on_instance(engine, loaded, limits, config, keys, input, idle);
    match WallClock::new(call, limits.wall_limit()).await {
        Ok(Ok(finished)) => finished,
        Ok(Err((detail, message, before_export))) => Finished {
            result: Err(fail(detail, message, before_export)),
            reusable: None,
            crossings: Crossings::default(),
        },
        Err(_) => Finished {
            result: Err(fail(
                FailureDetail::Timeout,
                DeadlineExceeded::wall(limits).to_string(),
                false,
            )),
            reusable: None,
            crossings: Crossings::default(),
        },
    }
}

/// A failed call before [`PluginFailure`] names its plugin: what, why, and whether it failed
/// before the export ran.
type Failed = (FailureDetail, String, bool);

/// The call on `idle` or a fresh instance, up to its answer; [`run`] holds the wall-clock
/// limit.
async fn run_on_instance(
    engine: &PluginEngine,
    loaded: &Arc<Loaded>,
    limits: &PluginLimits,
    config: &BTreeMap<String, String>,
    keys: Vec<SigningKey>,
    input: CallInput,
    idle: Option<PluginInstance>,
) -> Result<Finished, Failed> {
    let mut instance = match idle {
        Some(mut instance) => {
            arm_deadline(&mut instance.store, limits);
            instance
        }
        // A fresh instance's deadline is armed before instantiating: start-up code counts.
        None => instantiate(engine, loaded, limits, config)
            .await
            .map_err(|(detail, message)| (detail, message, true))?,
    };
    instance.calls += 1;
    instance.store.data_mut().begin_call(keys);
    match call_export(&mut instance, limits, input).await {
        Ok(output) => {
            instance.store.data_mut().end_call();
            let crossings = instance.store.data().crossings();
            let reusable = instance.worth_keeping(limits).then_some(instance);
            Ok(Finished {
                result: Ok(output),
                reusable,
                crossings,
            })
        }
        // The plugin's own error is an ordinary answer: the instance is as sound as after a
        // success. `run` names the plugin in the failure.
        Err(Ended::Answered(FailureDetail::Plugin, message)) => {
            instance.store.data_mut().end_call();
            let crossings = instance.store.data().crossings();
            let reusable = instance.worth_keeping(limits).then_some(instance);
            Ok(Finished {
                crossings,
                result: Err(CallError {
                    failure: PluginFailure {
                        plugin: loaded.name.clone(),
                        version: Some(loaded.version.to_string()),
                        detail: FailureDetail::Plugin,
                        message,
                    },
                    before_export: false,
                }),
                reusable,
            })
        }
        // Anything else (a trap, the deadline, the memory cap, an answer over the output cap
        // or not valid HTTP, a missing key) drops the instance with this call.
        Err(Ended::Answered(detail, message)) => Err((detail, message, false)),
        Err(Ended::Trapped(e)) => {
            let detail = classify(&e);
            Err((detail, trap_message(detail, &e), false))
        }
    }
}

/// What the attempt log says about a trap: wasmtime's own words, led by what they mean when
/// they would mislead (a stack overflow in linear memory reads "out of bounds memory access").
fn trap_message(detail: FailureDetail, error: &wasmtime::Error) -> String {
    match detail {
        FailureDetail::StackOverflow => {
            format!("the plugin's stack overflowed (recursion too deep): {error:#}")
        }
        _ => format!("{error:#}"),
    }
}

/// Creates an instance for `config`'s binding: a fresh store with the call deadline armed,
/// instantiated from the cached `InstancePre`, its export looked up by the cached index and
/// type-checked against the world.
async fn instantiate(
    engine: &PluginEngine,
    loaded: &Arc<Loaded>,
    limits: &PluginLimits,
    config: &BTreeMap<String, String>,
) -> Result<PluginInstance, (FailureDetail, String)> {
    let state = CallState::new(
        Arc::from(loaded.name.as_str()),
        Arc::clone(&loaded.version),
        Arc::new(config.clone()),
        limits,
        Arc::clone(&engine.hashing),
    );
    let mut store = Store::new(&engine.engine, state);
    store.limiter(|state| &mut state.limiter);
    if engine.count_crossings.load(std::sync::atomic::Ordering::Relaxed) {
        super::host::count_crossings(&mut store);
    }
    arm_deadline(&mut store, limits);
    let instance = loaded
        .pre
        .instantiate_async(&mut store)
        .await
        .map_err(|e| (classify(&e), format!("{e:#}")))?;
    let wrong_type = |e: wasmtime::Error| {
        (
            FailureDetail::WrongWorld,
            format!(
                "export `{}` does not have the {} world's type: {e:#}",
                super::registry::export_name(loaded.world),
                loaded.world.as_str()
            ),
        )
    };
    let export = match (loaded.contract, loaded.world) {
        (Contract::V1, world) => {
            Export::V1(v1::Export::lookup(&instance, &mut store, world, loaded.export).map_err(wrong_type)?)
        }
        (Contract::Current, World::Transformer) => Export::Transform(
            instance
                .get_typed_func(&mut store, loaded.export)
                .map_err(wrong_type)?,
        ),
        (Contract::Current, World::Signer) => Export::Sign(
            instance
                .get_typed_func(&mut store, loaded.export)
                .map_err(wrong_type)?,
        ),
        (Contract::Current, World::Backoff) => Export::Backoff(
            instance
                .get_typed_func(&mut store, loaded.export)
                .map_err(wrong_type)?,
        ),
    };
    let initial_memory_bytes = store.data().limiter.used_bytes();
    Ok(PluginInstance {
        store,
        export,
        initial_memory_bytes,
        calls: 0,
    })
}

/// How a call that did not succeed ended: the export returned an answer the host refuses
/// (or the plugin's own error), or it never returned.
pub(super) enum Ended {
    Answered(FailureDetail, String),
    Trapped(wasmtime::Error),
}

async fn call_export(
    instance: &mut PluginInstance,
    limits: &PluginLimits,
    input: CallInput,
) -> Result<CallOutput, Ended> {
    let store = &mut instance.store;
    let output = match (&instance.export, input) {
        (
            Export::Transform(func),
            CallInput::Transform {
                endpoint,
                event,
                delivery,
                message,
            },
        ) => {
            let lent = store.data_mut().lend_message(message).map_err(Ended::Trapped)?;
            let borrowed = Resource::new_borrow(lent.rep());
            let (answer,) = func
                .call_async(&mut *store, (endpoint, event, delivery, borrowed))
                .await
                .map_err(Ended::Trapped)?;
            let message = store.data_mut().take_back_message(lent).map_err(Ended::Trapped)?;
            transform_answer(limits, message, answer)?
        }
        (
            Export::Sign(func),
            CallInput::Sign {
                endpoint,
                delivery,
                message,
            },
        ) => {
            let key = lend_primary_key(store)?;
            let lent = store.data_mut().lend_message(message).map_err(Ended::Trapped)?;
            let borrowed = Resource::new_borrow(lent.rep());
            let (answer,) = func
                .call_async(&mut *store, (endpoint, delivery, borrowed, key))
                .await
                .map_err(Ended::Trapped)?;
            store.data_mut().take_back_message(lent).map_err(Ended::Trapped)?;
            sign_answer(limits, answer)?
        }
        (Export::Backoff(func), CallInput::Backoff(context)) => {
            let (answer,) = func
                .call_async(&mut *store, (context,))
                .await
                .map_err(Ended::Trapped)?;
            backoff_answer(limits, answer)?
        }
        (Export::V1(export), input) => export.call(store, limits, input).await?,
        // `run` checked the world against the plugin's, and an instance's export is its
        // plugin's world's.
        _ => return Err(other_world()),
    };
    Ok(output)
}

/// The end of a call whose arguments are not for its instance's world.
pub(super) fn other_world() -> Ended {
    Ended::Answered(
        FailureDetail::WrongWorld,
        "the call's arguments are for another world than the instance's export".to_owned(),
    )
}

/// A transform's answer: its edits, checked against the output limit, applied to the message
/// it was lent.
fn transform_answer(
    limits: &PluginLimits,
    message: LentMessage,
    answer: Result<Outcome, PluginError>,
) -> Result<CallOutput, Ended> {
    match answer {
        Err(e) => Err(Ended::Answered(FailureDetail::Plugin, plugin_error_text(&e))),
        Ok(Outcome::Forward(edits)) => {
            check_edits(limits, &edits).map_err(|(d, m)| Ended::Answered(d, m))?;
            let LentMessage { headers, body } = message.apply(edits);
            Ok(CallOutput::Transform(TransformResult::Forward { headers, body }))
        }
        Ok(Outcome::Drop(reason)) => {
            check_output(limits, &[], reason.len()).map_err(|(d, m)| Ended::Answered(d, m))?;
            Ok(CallOutput::Transform(TransformResult::Drop { reason }))
        }
    }
}

/// A signer's answer: headers to add and nothing else, checked against the output limit.
fn sign_answer(limits: &PluginLimits, answer: Result<Edits, PluginError>) -> Result<CallOutput, Ended> {
    let edits = answer.map_err(|e| Ended::Answered(FailureDetail::Plugin, plugin_error_text(&e)))?;
    if let Some(name) = edits.remove_headers.first() {
        return Err(Ended::Answered(
            FailureDetail::InvalidOutput,
            format!("the signer answered to remove header `{name}`; a signer may only add headers"),
        ));
    }
    if edits.body.is_some() {
        return Err(Ended::Answered(
            FailureDetail::InvalidOutput,
            "the signer answered a new body; a signer may only add headers".to_owned(),
        ));
    }
    check_output(limits, &edits.set_headers, 0).map_err(|(d, m)| Ended::Answered(d, m))?;
    Ok(CallOutput::Sign(edits.set_headers))
}

/// Checks a transform's edits: the names it removes and the headers it sets are valid HTTP,
/// and all it answered (names, values, body) is within the output cap.
fn check_edits(limits: &PluginLimits, edits: &Edits) -> Result<(), (FailureDetail, String)> {
    let removed_bytes: usize = edits.remove_headers.iter().map(String::len).sum();
    let body_bytes = edits.body.as_ref().map_or(0, Vec::len);
    check_output(
        limits,
        &edits.set_headers,
        removed_bytes.saturating_add(body_bytes),
    )?;
    match edits
        .remove_headers
        .iter()
        .find(|name| http::HeaderName::from_bytes(name.as_bytes()).is_err())
    {
        Some(name) => Err((
            FailureDetail::InvalidOutput,
            format!("`{name}` is not a valid header name"),
        )),
        None => Ok(()),
    }
}

/// A backoff plugin's answer: a wait raised to the floor and clamped to the maximum, or a
/// give-up reason checked against the output limit.
pub(super) fn backoff_answer(
    limits: &PluginLimits,
    answer: Result<Decision, PluginError>,
) -> Result<CallOutput, Ended> {
    match answer {
        Err(e) => Err(Ended::Answered(FailureDetail::Plugin, plugin_error_text(&e))),
        Ok(Decision::RetryInMs(ms)) => {
            let floor = limits.min_backoff_delay.min(limits.max_backoff_delay);
            let wait = Duration::from_millis(ms).clamp(floor, limits.max_backoff_delay);
            Ok(CallOutput::Backoff(PluginBackoffDecision::RetryIn(wait)))
        }
        Ok(Decision::GiveUp(reason)) => {
            check_output(limits, &[], reason.len()).map_err(|(d, m)| Ended::Answered(d, m))?;
            Ok(CallOutput::Backoff(PluginBackoffDecision::GiveUp(reason)))
        }
    }
}

/// The signing key handle lent to a signer for one call.
///
/// Lent as a borrow: lowering an owned `Resource` into a `borrow` parameter would register it
/// in the store's handle table for good, and a reused store would run out of handles after
/// 100 000 calls. The key stays in the resource table until `end_call` deletes it.
pub(super) fn lend_primary_key(store: &mut Store<CallState>) -> Result<Resource<SigningKey>, Ended> {
    match store.data_mut().hand_over_primary_key() {
        None => Err(Ended::Answered(
            FailureDetail::BadSecret,
            "the endpoint has no secret for its signer".to_owned(),
        )),
        Some(Err(e)) => Err(Ended::Answered(
            FailureDetail::Trap,
            format!("cannot hand the key over: {e:#}"),
        )),
        Some(Ok(key)) => Ok(Resource::new_borrow(key.rep())),
    }
}

pub(super) fn plugin_error_text(e: &PluginError) -> String {
    format!("{}: {}", e.code, super::host::log::truncate_line(&e.message))
}

/// Checks an answer against the output cap and that its headers are valid HTTP headers.
pub(super) fn check_output(
    limits: &PluginLimits,
    headers: &[(String, Vec<u8>)],
    body_bytes: usize,
) -> Result<(), (FailureDetail, String)> {
    let header_bytes: usize = headers.iter().map(|(n, v)| n.len() + v.len()).sum();
    let total = header_bytes.saturating_add(body_bytes);
    if total > limits.output_bytes {
        return Err((
            FailureDetail::OutputTooLarge,
            format!(
                "the plugin answered {total} bytes, over the cap of {} bytes",
                limits.output_bytes
            ),
        ));
    }
    for (name, value) in headers {
        if http::HeaderName::from_bytes(name.as_bytes()).is_err() {
            return Err((
                FailureDetail::InvalidOutput,
                format!("`{name}` is not a valid header name"),
            ));
        }
        if http::HeaderValue::from_bytes(value).is_err() {
            return Err((
                FailureDetail::InvalidOutput,
                format!("the value of header `{name}` is not a valid header value"),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    #[test]
    fn output_over_the_cap_is_refused() {
        let limits = PluginLimits {
            output_bytes: 10,
            ..PluginLimits::default()
        };
        let err = check_output(&limits, &[("a".into(), b"12345".to_vec())], 5).unwrap_err();
        assert_eq!(err.0, FailureDetail::OutputTooLarge);
        assert!(check_output(&limits, &[("a".into(), b"1234".to_vec())], 5).is_ok());
    }

    fn edits(remove: &[&str], set: &[(&str, &str)], body: Option<&str>) -> Edits {
        Edits {
            remove_headers: remove.iter().map(|n| (*n).to_owned()).collect(),
            set_headers: set
                .iter()
                .map(|(n, v)| ((*n).to_owned(), v.as_bytes().to_vec()))
                .collect(),
            body: body.map(|b| b.as_bytes().to_vec()),
        }
    }

    fn refused(ended: Result<CallOutput, Ended>) -> FailureDetail {
        match ended {
            Err(Ended::Answered(detail, _)) => detail,
            Err(Ended::Trapped(e)) => panic!("trapped: {e}"),
            Ok(output) => panic!("accepted: {output:?}"),
        }
    }

    #[test]
    fn a_signer_answers_headers_to_add_and_nothing_else() {
        let limits = PluginLimits::default();
        let added = sign_answer(&limits, Ok(edits(&[], &[("x-sig", "v1=ab")], None)));
        assert!(matches!(added, Ok(CallOutput::Sign(h)) if h == [("x-sig".to_owned(), b"v1=ab".to_vec())]));
        let removes = sign_answer(&limits, Ok(edits(&["x-team"], &[("x-sig", "1")], None)));
        assert_eq!(refused(removes), FailureDetail::InvalidOutput);
        let rewrites = sign_answer(&limits, Ok(edits(&[], &[("x-sig", "1")], Some("{}"))));
        assert_eq!(refused(rewrites), FailureDetail::InvalidOutput);
    }

    #[test]
    fn a_transforms_edits_are_valid_http_within_the_output_cap() {
        let limits = PluginLimits {
            output_bytes: 16,
            ..PluginLimits::default()
        };
        let lent = || LentMessage {
            headers: vec![("content-type".into(), b"application/json".to_vec())],
            body: Bytes::from_static(b"a body longer than the output cap"),
        };
        // What is lent does not count against the cap, only what the plugin answers.
        let forward = |e: Edits| transform_answer(&limits, lent(), Ok(Outcome::Forward(e)));
        assert!(forward(edits(&["content-type"], &[("x-a", "1")], None)).is_ok());
        let too_large = forward(edits(&[], &[], Some("seventeen bytes!!")));
        assert_eq!(refused(too_large), FailureDetail::OutputTooLarge);
        let bad_name = forward(edits(&["bad name"], &[], None));
        assert_eq!(refused(bad_name), FailureDetail::InvalidOutput);
        let bad_value = forward(edits(&[], &[("x-a", "a\nb")], None));
        assert_eq!(refused(bad_value), FailureDetail::InvalidOutput);
    }

    #[test]
    fn invalid_header_names_and_values_are_refused() {
        let limits = PluginLimits::default();
        let bad_name = check_output(&limits, &[("bad name".into(), b"v".to_vec())], 0).unwrap_err();
        assert_eq!(bad_name.0, FailureDetail::InvalidOutput);
        let bad_value = check_output(&limits, &[("x".into(), b"a\nb".to_vec())], 0).unwrap_err();
        assert_eq!(bad_value.0, FailureDetail::InvalidOutput);
    }
}
