//! One plugin call: a fresh `Store` with only this call's data, instantiated from the cached
//! `InstancePre`, run under the deadline and memory cap, its answer checked against the
//! output cap. The store (and so any trapped instance) is dropped when the call ends.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use wasmtime::Store;
use wasmtime::component::Resource;

use super::bindings::{
    Decision, DeliveryInfo, EndpointInfo, EventInfo, Message, Outcome, PluginError, RetryContext,
};
use super::host::CallState;
use super::host::crypto::SigningKey;
use super::limits::{arm_deadline, classify};
use super::registry::Loaded;
use super::{FailureDetail, PluginBackoffDecision, PluginFailure, PluginLimits, TransformResult, World};

type Headers = Vec<(String, Vec<u8>)>;

/// What a call sends: the arguments of one world's export.
pub(crate) enum CallInput {
    Transform {
        endpoint: EndpointInfo,
        event: EventInfo,
        delivery: DeliveryInfo,
        message: Message,
    },
    Sign {
        endpoint: EndpointInfo,
        delivery: DeliveryInfo,
        message: Message,
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

/// Runs one call of `loaded` with `input`, the binding's `config` and, for a signer, `keys`
/// (newest first; the first is passed to `sign`).
pub(crate) async fn run(
    engine: &wasmtime::Engine,
    loaded: &Arc<Loaded>,
    limits: &PluginLimits,
    config: Arc<BTreeMap<String, String>>,
    keys: Vec<SigningKey>,
    input: CallInput,
) -> Result<CallOutput, CallError> {
    let fail = |detail: FailureDetail, message: String, before_export: bool| CallError {
        failure: PluginFailure {
            plugin: loaded.name.clone(),
            version: Some(loaded.version.to_string()),
            detail,
            message,
        },
        before_export,
    };
    let trapped = |e: wasmtime::Error, before_export: bool| {
        let detail = classify(&e);
        fail(detail, format!("{e:#}"), before_export)
    };
    if input.world() != loaded.world {
        return Err(fail(
            FailureDetail::WrongWorld,
            format!(
                "plugin `{}` implements {}, not {}",
                loaded.name,
                loaded.world.as_str(),
                input.world().as_str()
            ),
            false,
        ));
    }

    let state = CallState::new(
        Arc::from(loaded.name.as_str()),
        Arc::clone(&loaded.version),
        config,
        keys,
        limits,
    );
    let mut store = Store::new(engine, state);
    store.limiter(|state| &mut state.limiter);
    arm_deadline(&mut store, limits.call_timeout);
    let instance = loaded
        .pre
        .instantiate_async(&mut store)
        .await
        .map_err(|e| trapped(e, true))?;
    let wrong_type = |e: wasmtime::Error| {
        fail(
            FailureDetail::WrongWorld,
            format!(
                "export `{}` does not have the {} world's type: {e:#}",
                super::registry::export_name(loaded.world),
                loaded.world.as_str()
            ),
            true,
        )
    };

    let output = match input {
        CallInput::Transform {
            endpoint,
            event,
            delivery,
            message,
        } => {
            let func = instance
                .get_typed_func::<(EndpointInfo, EventInfo, DeliveryInfo, Message), (Result<Outcome, PluginError>,)>(
                    &mut store,
                    &loaded.export,
                )
                .map_err(wrong_type)?;
            let (answer,) = func
                .call_async(&mut store, (endpoint, event, delivery, message))
                .await
                .map_err(|e| trapped(e, false))?;
            match answer {
                Err(e) => return Err(fail(FailureDetail::Plugin, plugin_error_text(&e), false)),
                Ok(Outcome::Forward(message)) => {
                    check_output(limits, &message.headers, message.body.len())
                        .map_err(|(d, m)| fail(d, m, false))?;
                    CallOutput::Transform(TransformResult::Forward {
                        headers: message.headers,
                        body: Bytes::from(message.body),
                    })
                }
                Ok(Outcome::Drop(reason)) => {
                    check_output(limits, &[], reason.len()).map_err(|(d, m)| fail(d, m, false))?;
                    CallOutput::Transform(TransformResult::Drop { reason })
                }
            }
        }
        CallInput::Sign {
            endpoint,
            delivery,
            message,
        } => {
            let func = instance
                .get_typed_func::<(EndpointInfo, DeliveryInfo, Message, Resource<SigningKey>), (Result<Headers, PluginError>,)>(
                    &mut store,
                    &loaded.export,
                )
                .map_err(wrong_type)?;
            let Some(primary) = store.data().keys.primary().cloned() else {
                return Err(fail(
                    FailureDetail::BadSecret,
                    "the endpoint has no secret for its signer".to_owned(),
                    false,
                ));
            };
            let key = store.data_mut().table().push(primary).map_err(|e| {
                fail(
                    FailureDetail::Trap,
                    format!("cannot hand the key over: {e}"),
                    false,
                )
            })?;
            let (answer,) = func
                .call_async(&mut store, (endpoint, delivery, message, key))
                .await
                .map_err(|e| trapped(e, false))?;
            match answer {
                Err(e) => return Err(fail(FailureDetail::Plugin, plugin_error_text(&e), false)),
                Ok(headers) => {
                    check_output(limits, &headers, 0).map_err(|(d, m)| fail(d, m, false))?;
                    CallOutput::Sign(headers)
                }
            }
        }
        CallInput::Backoff(context) => {
            let func = instance
                .get_typed_func::<(RetryContext,), (Result<Decision, PluginError>,)>(
                    &mut store,
                    &loaded.export,
                )
                .map_err(wrong_type)?;
            let (answer,) = func
                .call_async(&mut store, (context,))
                .await
                .map_err(|e| trapped(e, false))?;
            match answer {
                Err(e) => return Err(fail(FailureDetail::Plugin, plugin_error_text(&e), false)),
                Ok(Decision::RetryInMs(ms)) => {
                    let wait = Duration::from_millis(ms).min(limits.max_backoff_delay);
                    CallOutput::Backoff(PluginBackoffDecision::RetryIn(wait))
                }
                Ok(Decision::GiveUp(reason)) => {
                    check_output(limits, &[], reason.len()).map_err(|(d, m)| fail(d, m, false))?;
                    CallOutput::Backoff(PluginBackoffDecision::GiveUp(reason))
                }
            }
        }
    };
    Ok(output)
}

fn plugin_error_text(e: &PluginError) -> String {
    format!("{}: {}", e.code, super::host::log::truncate_line(&e.message))
}

/// Checks an answer against the output cap and that its headers are valid HTTP headers.
fn check_output(
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

    #[test]
    fn invalid_header_names_and_values_are_refused() {
        let limits = PluginLimits::default();
        let bad_name = check_output(&limits, &[("bad name".into(), b"v".to_vec())], 0).unwrap_err();
        assert_eq!(bad_name.0, FailureDetail::InvalidOutput);
        let bad_value = check_output(&limits, &[("x".into(), b"a\nb".to_vec())], 0).unwrap_err();
        assert_eq!(bad_value.0, FailureDetail::InvalidOutput);
    }
}
