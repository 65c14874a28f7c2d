//! One attempt, start to finish: build the message (content type, the endpoint's headers,
//! transform plugin, the event's type and ordering key, Standard Webhooks headers or a signer
//! plugin), send it to the endpoint's destination whatever its transport, and — when it
//! failed and the endpoint has a backoff plugin — ask the plugin for the next delay.
//!
//! The same pipeline serves real deliveries and the endpoint test call, so what the test call
//! shows is exactly what a delivery would do.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method, header};

use crate::clock::{Clock, SystemClock};
use crate::config::EndpointConfig;
use crate::delivery::{OutgoingMessage, Sender, signing};
use crate::model::{Attempt, ErrorKind, Event, Exchange, Outcome, PluginBinding, SpanId, Timestamp, TraceId};
use crate::plugins::headers as plugin_headers;
use crate::plugins::{
    BackoffInput, EventInfo, FailureDetail, PluginBackoffDecision, PluginFailure, PluginHost, SignInput,
    TransformInput, TransformResult,
};
use crate::policy::{BackoffDecision, Policy};
use crate::traces::{self, AttemptSpan, Traces};
use tracing::Instrument;

/// What an attempt needs from the gateway around it.
pub(crate) struct AttemptEnv {
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) sender: Sender,
    pub(crate) plugins: PluginHost,
    pub(crate) traces: Traces,
}

pub(crate) struct AttemptInput<'a> {
    pub(crate) endpoint: &'a EndpointConfig,
    pub(crate) policy: &'a Policy,
    pub(crate) event: &'a Event,
    /// `dlv_<n>`, or `test` for the test call.
    pub(crate) delivery_id: String,
    /// 1-based attempt number of the current round.
    pub(crate) attempt: u32,
    /// When the current round began: a backoff plugin's `elapsed` counts from here, like the
    /// policy's deadline.
    pub(crate) round_started_at: Timestamp,
    pub(crate) max_attempts: u32,
    pub(crate) timeout: Duration,
    /// The wait that preceded this attempt, for backoff plugins that grow from it.
    pub(crate) previous_delay: Option<Duration>,
}

/// What became of an attempt.
#[derive(Debug, Clone)]
pub(crate) enum AttemptResult {
    /// The message was sent (or failed before an answer).
    Sent(Outcome),
    /// The transform plugin dropped the event: nothing was sent, the delivery is done.
    Dropped { reason: String },
}

#[derive(Debug, Clone)]
pub(crate) struct AttemptReport {
    pub(crate) result: AttemptResult,
    pub(crate) started_at: Timestamp,
    pub(crate) duration: Duration,
    /// Which plugins ran, their versions and time spent, for the attempt log.
    pub(crate) plugin_note: Option<String>,
    /// The time spent in plugins, when any ran.
    pub(crate) plugin_time: Option<Duration>,
    /// A backoff plugin's answer for a failed attempt.
    pub(crate) backoff: Option<BackoffDecision>,
    /// The headers sent (masked) and the response's head and start, for the attempt record.
    pub(crate) exchange: Exchange,
    /// The trace of the attempt's span, named in its `traceparent`.
    pub(crate) trace_id: TraceId,
}

impl AttemptReport {
    /// The attempt's record for the delivery log: attempt `n` of its round. A drop by the
    /// transform sent nothing, so it has neither a status code nor an error. The headers and
    /// body sent and received move into the record (copying them was a fifth of a delivery's
    /// allocations); the report keeps an empty exchange.
    pub(crate) fn take_record(&mut self, n: u32) -> Attempt {
        let duration_ms = self.duration.as_millis() as u64;
        match &self.result {
            AttemptResult::Sent(outcome) => Attempt::from_outcome(
                n,
                self.started_at,
                duration_ms,
                outcome,
                std::mem::take(&mut self.exchange),
                self.trace_id,
            ),
            AttemptResult::Dropped { .. } => Attempt {
                n,
                started_at: self.started_at,
                duration_ms,
                status_code: None,
                error_kind: None,
                error: None,
                exchange: Exchange::default(),
                trace_id: Some(self.trace_id),
            },
        }
    }
}

/// Performs one attempt in its span: a child of the event's ingestion span (in the event's
/// trace), named in the request's `traceparent`, and exported when telemetry is on. The log
/// lines of the attempt carry its trace id.
pub(crate) async fn perform(env: &AttemptEnv, input: AttemptInput<'_>) -> AttemptReport {
    let Ok(report) = perform_gated(env, input, || Ok::<(), Infallible>(())).await;
    report
}

/// [`perform`], asking `gate` right before the request is sent (after the plugins ran, as
/// late as the pipeline allows): when it says no, nothing is sent and nothing is reported. A
/// cluster node's gate is its lease fence (`crate::fence`).
pub(crate) async fn perform_gated<E>(
    env: &AttemptEnv,
    input: AttemptInput<'_>,
    gate: impl FnOnce() -> Result<(), E>,
) -> Result<AttemptReport, E> {
    let trace_id = input
        .event
        .trace
        .map_or_else(traces::new_trace_id, |t| t.trace_id);
    let span_id = traces::new_span_id();
    let log_span = tracing::info_span!("attempt", delivery = %input.delivery_id, %trace_id);
    let wall_start = env.traces.is_exporting().then(SystemTime::now);
    let report = perform_in_span(env, &input, trace_id, span_id, gate)
        .instrument(log_span)
        .await?;
    if let Some(started) = wall_start {
        let (status_code, error_kind, error) = match &report.result {
            AttemptResult::Sent(outcome) => (
                outcome.status_code(),
                outcome.error_kind().map(ErrorKind::as_str),
                match outcome {
                    Outcome::Failed { detail, .. } => Some(detail.as_str()),
                    Outcome::Delivered { .. } => None,
                },
            ),
            AttemptResult::Dropped { .. } => (None, None, None),
        };
        env.traces.attempt(AttemptSpan {
            trace_id,
            span_id,
            parent: input.event.trace.and_then(|t| t.span_id),
            started,
            ended: SystemTime::now(),
            event_id: &input.event.id,
            delivery_id: &input.delivery_id,
            endpoint: &input.endpoint.name,
            attempt: input.attempt,
            status_code,
            messaging: input.endpoint.destination.messaging(),
            error_kind,
            error,
            plugin_time: report.plugin_time,
        });
    }
    Ok(report)
}

async fn perform_in_span<E>(
    env: &AttemptEnv,
    input: &AttemptInput<'_>,
    trace_id: TraceId,
    span_id: SpanId,
    gate: impl FnOnce() -> Result<(), E>,
) -> Result<AttemptReport, E> {
    let started_at = env.clock.now();
    let real_start = Instant::now();
    let mut notes = Notes::default();
    let traceparent = traces::traceparent(trace_id, span_id);
    let (result, exchange) = match prepare(env, input, traceparent, &mut notes).await {
        Ok(request) => {
            gate()?;
            let sent = env.sender.send(request, env.clock.now()).await;
            (AttemptResult::Sent(sent.outcome), sent.exchange)
        }
        Err(result) => (result, Exchange::default()),
    };
    let backoff = match &result {
        AttemptResult::Sent(outcome @ Outcome::Failed { .. }) => match &input.endpoint.backoff {
            Some(binding) => {
                let elapsed_ms = started_at.since(input.round_started_at).as_millis() as u64;
                let answer = noted(
                    env,
                    binding,
                    &mut notes,
                    env.plugins.backoff(
                        binding,
                        BackoffInput {
                            attempt: input.attempt,
                            max_attempts: input.max_attempts,
                            last_status: outcome.status_code(),
                            last_error_kind: outcome.error_kind().map(|k| k.as_str().to_owned()),
                            retry_after_ms: retry_after_ms(outcome, started_at),
                            elapsed_ms,
                            now_ms: env.clock.now().as_millis().max(0) as u64,
                            previous_delay_ms: input.previous_delay.map(|d| d.as_millis() as u64),
                            random: None,
                        },
                    ),
                )
                .await;
                match answer {
                    Ok(PluginBackoffDecision::RetryIn(wait)) => Some(BackoffDecision::RetryIn(wait)),
                    Ok(PluginBackoffDecision::GiveUp(reason)) => Some(BackoffDecision::GiveUp(reason)),
                    // A broken backoff plugin must not stop retries: the policy's own wait applies.
                    Err(failure) => {
                        tracing::info!(plugin = %failure.plugin, error = %failure.message, "backoff plugin failed; using the policy's wait");
                        None
                    }
                }
            }
            None => None,
        },
        _ => None,
    };
    Ok(AttemptReport {
        result,
        started_at,
        duration: real_start.elapsed(),
        plugin_note: if notes.lines.is_empty() {
            None
        } else {
            Some(notes.lines.join("; "))
        },
        plugin_time: (!notes.lines.is_empty()).then_some(notes.took),
        backoff,
        exchange,
        trace_id,
    })
}

/// What the plugins of one attempt did: a note per call, and their time together.
#[derive(Default)]
struct Notes {
    lines: Vec<String>,
    took: Duration,
}

fn retry_after_ms(outcome: &Outcome, now: Timestamp) -> Option<u64> {
    match outcome {
        Outcome::Failed {
            retry_after: Some(at),
            ..
        } => Some(at.since(now).as_millis() as u64),
        _ => None,
    }
}

/// Runs one plugin call and adds its note (name, version, time, failure) to the attempt log.
async fn noted<T>(
    env: &AttemptEnv,
    binding: &PluginBinding,
    notes: &mut Notes,
    call: impl std::future::Future<Output = Result<T, PluginFailure>>,
) -> Result<T, PluginFailure> {
    let started = Instant::now();
    let answer = call.await;
    let took = started.elapsed();
    notes.took += took;
    notes
        .lines
        .push(note(&env.plugins, &binding.plugin, took, answer.as_ref().err()));
    answer
}

/// What the attempt log says about one plugin call: name, version (file hash) and time.
fn note(plugins: &PluginHost, plugin: &str, took: Duration, failure: Option<&PluginFailure>) -> String {
    let version = plugins.version_of(plugin);
    let (at, version) = match &version {
        Some(v) => ("@", v.as_str()),
        None => ("", ""),
    };
    let ms = took.as_secs_f64() * 1000.0;
    match failure {
        Some(f) => format!("{plugin}{at}{version}: {} after {ms:.2} ms", f.detail.as_str()),
        None => format!("{plugin}{at}{version} ({ms:.2} ms)"),
    }
}

fn plugin_failed(failure: PluginFailure) -> AttemptResult {
    AttemptResult::Sent(Outcome::Failed {
        kind: ErrorKind::PluginError,
        status: None,
        retry_after: None,
        detail: format!(
            "plugin `{}` {}: {}",
            failure.plugin,
            failure.detail.as_str(),
            failure.message
        ),
    })
}

/// The event's type and ordering key, on every message: receivers on a broker route and
/// order by them without parsing the body.
const EVENT_TYPE: HeaderName = HeaderName::from_static("hookgate-event-type");
const ORDERING_KEY: HeaderName = HeaderName::from_static("hookgate-ordering-key");

/// Builds the message, or says how the attempt ends without one. Plugins never see the
/// endpoint's configured headers or credentials: a transform gets the content type and answers
/// the base of the request, the endpoint's headers and the standard headers are set over it,
/// and a signer sees that request without the configured headers and may only add new names
/// (see [`crate::plugins::headers`]); the sender adds `Authorization` last. The attempt record
/// masks the configured headers' and the signer's values.
async fn prepare(
    env: &AttemptEnv,
    input: &AttemptInput<'_>,
    traceparent: HeaderValue,
    notes: &mut Notes,
) -> Result<OutgoingMessage, AttemptResult> {
    let endpoint = input.endpoint;
    let event = input.event;
    let now = env.clock.now();
    // An expunged payload is never sent, not even as the empty body it has become.
    if event.labels.expunged {
        return Err(AttemptResult::Sent(Outcome::Failed {
            kind: ErrorKind::PayloadExpunged,
            status: None,
            retry_after: None,
            detail: format!("the payload of event `{}` was expunged", event.id),
        }));
    }

    let content_type = input.policy.content_type().unwrap_or(&event.content_type);
    let mut headers = HeaderMap::with_capacity(endpoint.headers.len() + 6);
    if let Ok(value) = HeaderValue::from_str(content_type) {
        headers.insert(header::CONTENT_TYPE, value);
    }
    let mut body: Bytes = event.payload.clone();

    let mut method = Method::POST;
    if let Some(binding) = &endpoint.transform
        && let Some((new_method, new_headers, new_body)) =
            transform(env, input, binding, &headers, &body, now, notes).await?
    {
        (method, headers, body) = (new_method, new_headers, new_body);
    }
    let mut masked = Vec::with_capacity(endpoint.headers.len());
    for (name, value) in &endpoint.headers {
        headers.insert(name.clone(), value.clone());
        masked.push(name.clone());
    }

    // The signature timestamp is real wall time even under --time-scale: receivers check it
    // against their own clock to refuse replays.
    let timestamp_s = SystemClock.now().as_unix_seconds();
    let sign_standard = endpoint.signer.is_none().then_some(endpoint.signature);
    let standard = signing::standard_headers(
        &event.id,
        timestamp_s,
        input.attempt,
        &endpoint.signing_secrets(now),
        &body,
        sign_standard,
    );
    for (name, value) in &standard {
        headers.insert(name.clone(), value.clone());
    }
    if let Ok(value) = HeaderValue::from_str(&event.event_type) {
        headers.insert(EVENT_TYPE, value);
    }
    if let Some(key) = &event.ordering_key
        && let Ok(value) = HeaderValue::from_str(key)
    {
        headers.insert(ORDERING_KEY, value);
    }
    if endpoint.svix_headers {
        add_svix_headers(&mut headers, &mut masked);
    }
    headers.insert(traces::TRACEPARENT, traceparent);

    if let Some(binding) = &endpoint.signer {
        let signed = sign(env, input, binding, &headers, &body, notes).await?;
        for (name, value) in &signed {
            headers.append(name.clone(), value.clone());
            masked.push(name.clone());
        }
    }
    Ok(OutgoingMessage {
        destination: endpoint.destination.with_method(method),
        message_id: event.id.clone(),
        headers,
        body,
        timeout: input.timeout,
        masked,
    })
}

/// Receivers written for Svix read `svix-id`, `svix-timestamp` and `svix-signature`: an
/// endpoint that asks for them (those made through the Svix API do) gets them beside the
/// `webhook-*` headers, with the same values. The signature is masked in the attempt record
/// like the standard one.
fn add_svix_headers(headers: &mut HeaderMap, masked: &mut Vec<HeaderName>) {
    const ALIASES: [(&str, &str); 3] = [
        ("webhook-id", "svix-id"),
        ("webhook-timestamp", "svix-timestamp"),
        ("webhook-signature", "svix-signature"),
    ];
    for (standard, svix) in ALIASES {
        if let Some(value) = headers.get(standard).cloned() {
            headers.insert(HeaderName::from_static(svix), value);
        }
    }
    masked.push(HeaderName::from_static("svix-signature"));
}

/// Runs the transform on the request so far: `Ok(Some(..))` is the new base (the method it
/// chose, the headers it may set, and body), `Err` how the attempt ends instead (a drop or a
/// failure).
async fn transform(
    env: &AttemptEnv,
    input: &AttemptInput<'_>,
    binding: &PluginBinding,
    headers: &HeaderMap,
    body: &Bytes,
    now: Timestamp,
    notes: &mut Notes,
) -> Result<Option<(Method, HeaderMap, Bytes)>, AttemptResult> {
    let endpoint = input.endpoint;
    let answer = noted(
        env,
        binding,
        notes,
        env.plugins.transform(
            binding,
            TransformInput {
                endpoint_name: endpoint.name.to_string(),
                endpoint_url: endpoint.destination.masked(),
                event: event_info(input.event),
                delivery_id: input.delivery_id.clone(),
                attempt: input.attempt,
                now_ms: now.as_millis().max(0) as u64,
                headers: plugin_headers::to_plugin(headers),
                body: body.clone(),
            },
        ),
    )
    .await;
    match answer {
        Ok(TransformResult::Forward {
            headers: new_headers,
            body: new_body,
        }) => {
            let map = plugin_headers::from_plugin(&new_headers)
                .map_err(|detail| invalid_output(binding, detail))?;
            let method =
                plugin_headers::transform_method(&map).map_err(|detail| invalid_output(binding, detail))?;
            Ok(Some((method, plugin_headers::transform_answer(map), new_body)))
        }
        Ok(TransformResult::Drop { reason }) => Err(AttemptResult::Dropped { reason }),
        Err(failure) => Err(plugin_failed(failure)),
    }
}

/// Runs the signer on the final request: the headers it adds, or how the attempt ends.
async fn sign(
    env: &AttemptEnv,
    input: &AttemptInput<'_>,
    binding: &PluginBinding,
    headers: &HeaderMap,
    body: &Bytes,
    notes: &mut Notes,
) -> Result<HeaderMap, AttemptResult> {
    let endpoint = input.endpoint;
    // The endpoint's configured headers may carry credentials: the signer never sees them.
    let visible = match endpoint.headers.is_empty() {
        true => std::borrow::Cow::Borrowed(headers),
        false => {
            let mut visible = headers.clone();
            for (name, _) in &endpoint.headers {
                visible.remove(name);
            }
            std::borrow::Cow::Owned(visible)
        }
    };
    let answer = noted(
        env,
        binding,
        notes,
        env.plugins.sign(
            binding,
            SignInput {
                endpoint_name: endpoint.name.to_string(),
                endpoint_url: endpoint.destination.masked(),
                delivery_id: input.delivery_id.clone(),
                attempt: input.attempt,
                now_ms: SystemClock.now().as_millis().max(0) as u64,
                headers: plugin_headers::to_plugin(&visible),
                body: body.clone(),
                secrets: endpoint.signing_secrets(env.clock.now()).into_owned(),
            },
        ),
    )
    .await;
    let signed = answer.map_err(plugin_failed)?;
    let signed = plugin_headers::from_plugin(&signed).map_err(|detail| invalid_output(binding, detail))?;
    plugin_headers::signer_answer(headers, signed).map_err(|forged| invalid_output(binding, forged))
}

/// The attempt's end when a plugin answered headers the gateway refuses.
fn invalid_output(binding: &PluginBinding, detail: impl std::fmt::Display) -> AttemptResult {
    AttemptResult::Sent(Outcome::Failed {
        kind: ErrorKind::PluginError,
        status: None,
        retry_after: None,
        detail: format!(
            "plugin `{}` {}: {detail}",
            binding.plugin,
            FailureDetail::InvalidOutput.as_str()
        ),
    })
}

fn event_info(event: &Event) -> EventInfo {
    EventInfo {
        id: event.id.clone(),
        topic: event.topic.clone(),
        event_type: event.event_type.clone(),
        received_at_ms: event.received_at.as_millis().max(0) as u64,
    }
}
