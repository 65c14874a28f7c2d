//! Plugins built against the first version of the contract (`wit/v1/plugin.wit`,
//! `hookgate:plugin@0.1.0`), adapted to the current one: the lent message is copied into the
//! plugin as a whole `message` record, as that version expects, and the whole message it
//! answers becomes the request (a transform) or the headers to add (a signer). The imports
//! they use are served under that version's names (`host::v1`).

use bytes::Bytes;
use wasmtime::Store;
use wasmtime::component::{ComponentExportIndex, Instance, Resource, TypedFunc};

use super::bindings::{self, v1};
use super::call::{
    CallInput, CallOutput, Ended, Headers, backoff_answer, check_output, lend_primary_key, other_world,
};
use super::host::CallState;
use super::host::crypto::SigningKey;
use super::host::message::LentMessage;
use super::{FailureDetail, PluginLimits, TransformResult, World};

type TransformFunc = TypedFunc<
    (v1::EndpointInfo, v1::EventInfo, v1::DeliveryInfo, v1::Message),
    (Result<v1::Outcome, v1::PluginError>,),
>;
type SignFunc = TypedFunc<
    (
        v1::EndpointInfo,
        v1::DeliveryInfo,
        v1::Message,
        Resource<SigningKey>,
    ),
    (Result<Headers, v1::PluginError>,),
>;
type BackoffFunc = TypedFunc<(v1::RetryContext,), (Result<v1::Decision, v1::PluginError>,)>;

/// The world's export of an instance of a first-version plugin.
pub(crate) enum Export {
    Transform(TransformFunc),
    Sign(SignFunc),
    Backoff(BackoffFunc),
}

impl Export {
    /// The export at `index` of `instance`, type-checked against `world` of the first version.
    pub(crate) fn lookup(
        instance: &Instance,
        store: &mut Store<CallState>,
        world: World,
        index: ComponentExportIndex,
    ) -> wasmtime::Result<Self> {
        Ok(match world {
            World::Transformer => Export::Transform(instance.get_typed_func(store, index)?),
            World::Signer => Export::Sign(instance.get_typed_func(store, index)?),
            World::Backoff => Export::Backoff(instance.get_typed_func(store, index)?),
        })
    }

    /// Runs the call with `input` adapted to this version, and adapts the answer back.
    pub(crate) async fn call(
        &self,
        store: &mut Store<CallState>,
        limits: &PluginLimits,
        input: CallInput,
    ) -> Result<CallOutput, Ended> {
        match (self, input) {
            (
                Export::Transform(func),
                CallInput::Transform {
                    endpoint,
                    event,
                    delivery,
                    message,
                },
            ) => {
                let args = (
                    endpoint_info(endpoint),
                    event_info(event),
                    delivery_info(delivery),
                );
                let (answer,) = func
                    .call_async(&mut *store, (args.0, args.1, args.2, whole(message)))
                    .await
                    .map_err(Ended::Trapped)?;
                transform_answer(limits, answer)
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
                let args = (endpoint_info(endpoint), delivery_info(delivery), whole(message));
                let (answer,) = func
                    .call_async(&mut *store, (args.0, args.1, args.2, key))
                    .await
                    .map_err(Ended::Trapped)?;
                let headers = answer.map_err(plugin_error)?;
                check_output(limits, &headers, 0).map_err(|(d, m)| Ended::Answered(d, m))?;
                Ok(CallOutput::Sign(headers))
            }
            (Export::Backoff(func), CallInput::Backoff(context)) => {
                let (answer,) = func
                    .call_async(&mut *store, (retry_context(context),))
                    .await
                    .map_err(Ended::Trapped)?;
                backoff_answer(limits, answer.map(decision).map_err(error))
            }
            _ => Err(other_world()),
        }
    }
}

/// A transform's answer: the whole message it answered, checked against the output limit.
fn transform_answer(
    limits: &PluginLimits,
    answer: Result<v1::Outcome, v1::PluginError>,
) -> Result<CallOutput, Ended> {
    match answer.map_err(plugin_error)? {
        v1::Outcome::Forward(message) => {
            check_output(limits, &message.headers, message.body.len())
                .map_err(|(d, m)| Ended::Answered(d, m))?;
            Ok(CallOutput::Transform(TransformResult::Forward {
                headers: message.headers,
                body: Bytes::from(message.body),
            }))
        }
        v1::Outcome::Drop(reason) => {
            check_output(limits, &[], reason.len()).map_err(|(d, m)| Ended::Answered(d, m))?;
            Ok(CallOutput::Transform(TransformResult::Drop { reason }))
        }
    }
}

/// The lent message as the first version's record: headers and body copied whole.
fn whole(message: LentMessage) -> v1::Message {
    v1::Message {
        headers: message.headers,
        body: message.body.to_vec(),
    }
}

fn endpoint_info(endpoint: bindings::EndpointInfo) -> v1::EndpointInfo {
    v1::EndpointInfo {
        name: endpoint.name,
        url: endpoint.url,
    }
}

fn event_info(event: bindings::EventInfo) -> v1::EventInfo {
    v1::EventInfo {
        id: event.id,
        topic: event.topic,
        event_type: event.event_type,
        received_at_ms: event.received_at_ms,
    }
}

fn delivery_info(delivery: bindings::DeliveryInfo) -> v1::DeliveryInfo {
    v1::DeliveryInfo {
        id: delivery.id,
        attempt: delivery.attempt,
        now_ms: delivery.now_ms,
    }
}

fn retry_context(context: bindings::RetryContext) -> v1::RetryContext {
    v1::RetryContext {
        attempt: context.attempt,
        max_attempts: context.max_attempts,
        last_status: context.last_status,
        last_error_kind: context.last_error_kind,
        retry_after_ms: context.retry_after_ms,
        elapsed_ms: context.elapsed_ms,
        now_ms: context.now_ms,
        previous_delay_ms: context.previous_delay_ms,
        random: context.random,
    }
}

fn decision(decision: v1::Decision) -> bindings::Decision {
    match decision {
        v1::Decision::RetryInMs(ms) => bindings::Decision::RetryInMs(ms),
        v1::Decision::GiveUp(reason) => bindings::Decision::GiveUp(reason),
    }
}

fn error(e: v1::PluginError) -> bindings::PluginError {
    bindings::PluginError {
        code: e.code,
        message: e.message,
    }
}

fn plugin_error(e: v1::PluginError) -> Ended {
    Ended::Answered(FailureDetail::Plugin, super::call::plugin_error_text(&error(e)))
}
