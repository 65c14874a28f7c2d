//! Operator commands: talk to a running gateway's API and print readable tables.

use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, Subcommand};
use http::Method;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::client::{CallError, JsonClient, segment};
use crate::api::views::{
    ClusterNodesView, DeliveryList, DeliveryView, EndpointList, EndpointView, Reenabled, ReplayOutcome,
    SavedEndpoint, Summary, TestOutcome,
};

#[derive(Debug, Args)]
pub(super) struct Target {
    /// The gateway's API.
    #[arg(
        long,
        global = true,
        env = "HOOKGATE_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    url: String,
    /// An API key, if the gateway requires one.
    #[arg(long, global = true, env = "HOOKGATE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
}

#[derive(Debug, Subcommand)]
pub(super) enum OpsCommand {
    /// Exit 0 when the gateway answers `GET /healthz`, 1 otherwise: a container's
    /// `HEALTHCHECK` (an image from scratch has no curl). With --ready, `GET /readyz`: exit 0
    /// only while the gateway can take events.
    Healthcheck {
        #[command(flatten)]
        target: Target,
        /// Ask whether the gateway is ready (can take events), not only alive.
        #[arg(long)]
        ready: bool,
    },
    /// The nodes sharing the gateway's database: each one's state (alive, lapsed: not seen
    /// for longer than a lease, left: stopped cleanly), when it was last seen, and the
    /// endpoint leases it holds.
    Cluster {
        #[command(flatten)]
        target: Target,
    },
    /// List endpoints with their health, by name, a page at a time.
    Endpoints {
        /// Only this tenant's.
        #[arg(long)]
        tenant: Option<String>,
        /// Only those in this state: active, degraded, paused or disabled.
        #[arg(long)]
        state: Option<String>,
        /// At most this many (1-500).
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Where the page starts: the cursor the previous page printed.
        #[arg(long)]
        cursor: Option<String>,
        #[command(flatten)]
        target: Target,
    },
    /// One endpoint's health and state history; or create, change or delete one, or rotate
    /// its secret.
    Endpoint {
        /// The endpoint to show.
        name: Option<String>,
        #[command(subcommand)]
        action: Option<EndpointAction>,
        #[command(flatten)]
        target: Target,
    },
    /// The delivery log, newest first.
    Deliveries {
        /// Only this endpoint's.
        #[arg(long)]
        endpoint: Option<String>,
        /// pending, delivering, succeeded, failed or dead.
        #[arg(long)]
        status: Option<String>,
        /// At most this many, newest first.
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[command(flatten)]
        target: Target,
    },
    /// Attempt a delivery again now.
    Redeliver {
        /// The delivery (`dlv_…`).
        id: String,
        #[command(flatten)]
        target: Target,
    },
    /// Make a paused or disabled endpoint active again.
    Reenable {
        /// The endpoint.
        name: String,
        /// Also re-send the endpoint's events since this RFC 3339 time (≤ 7 days back).
        #[arg(long)]
        replay_since: Option<String>,
        /// Wait, with a progress bar, until the replayed deliveries have finished.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        target: Target,
    },
    /// Re-send an endpoint's events of a time window.
    Replay {
        /// The endpoint.
        name: String,
        /// RFC 3339, at most 7 days back.
        #[arg(long)]
        since: String,
        /// RFC 3339; default now.
        #[arg(long)]
        until: Option<String>,
        /// Makes a retried command safe; default: derived from the name and window.
        #[arg(long)]
        idempotency_key: Option<String>,
        /// Wait, with a progress bar, until the replayed deliveries have finished.
        #[arg(long)]
        wait: bool,
        #[command(flatten)]
        target: Target,
    },
}

#[derive(Debug, Subcommand)]
pub(super) enum EndpointAction {
    /// Create an endpoint, kept in the gateway's database; prints its secret, this once.
    Create {
        /// Default: a generated `ep_…` name.
        #[arg(long)]
        name: Option<String>,
        #[command(flatten)]
        keys: EndpointKeys,
    },
    /// Change an endpoint created through the API: only the keys given change.
    Update {
        /// The endpoint (created through the API).
        name: String,
        #[command(flatten)]
        keys: EndpointKeys,
    },
    /// Delete an endpoint created through the API; its waiting deliveries end
    /// `endpoint_removed`.
    Delete {
        /// The endpoint (created through the API).
        name: String,
    },
    /// Send a test event to an endpoint now and print what became of it (the endpoint's
    /// state and counters do not change). Exit status: 0 delivered, 3 not delivered (refused,
    /// failed or dropped by a plugin), 1 no answer from the gateway (or an error such as an
    /// unknown endpoint).
    Test {
        /// The endpoint.
        name: String,
        /// The test event's type; default `hookgate.test`.
        #[arg(long = "type")]
        event_type: Option<String>,
    },
    /// Give an endpoint a new signing secret, printed this once; the old one signs too until
    /// the overlap ends.
    RotateSecret {
        /// The endpoint (created through the API).
        name: String,
        /// The new secret; default: a generated one.
        #[arg(long)]
        secret: Option<String>,
        /// How long the old secret keeps signing, e.g. `24h` (the default) or `0s`.
        #[arg(long)]
        overlap: Option<String>,
    },
}

/// The keys of an endpoint, as flags; any other key of the config file's endpoints in `--json`.
#[derive(Debug, Args)]
pub(super) struct EndpointKeys {
    /// Where the endpoint's webhooks go (`--url` is the gateway's).
    #[arg(long)]
    endpoint_url: Option<String>,
    /// A topic it receives (repeat for more).
    #[arg(long = "topic")]
    topics: Vec<String>,
    /// An event-type glob it takes (repeat for more).
    #[arg(long = "type")]
    types: Vec<String>,
    /// The tenant whose events (only) it receives; none: every tenant's.
    #[arg(long)]
    tenant: Option<String>,
    /// Its retry policy; default: each topic's.
    #[arg(long)]
    policy: Option<String>,
    /// Free text for people.
    #[arg(long)]
    description: Option<String>,
    /// Other keys as a JSON object, e.g. `{"max_per_second": 10, "headers": {"x-team": "a"}}`.
    #[arg(long)]
    json: Option<String>,
}

impl EndpointKeys {
    /// The request body: `--json`, with the flags given set over it.
    fn body(self) -> anyhow::Result<Value> {
        let mut body = match self.json.as_deref() {
            None => serde_json::Map::new(),
            Some(text) => match serde_json::from_str(text) {
                Ok(Value::Object(map)) => map,
                _ => anyhow::bail!("--json must be a JSON object"),
            },
        };
        let mut set = |key: &str, value: Option<Value>| {
            if let Some(value) = value {
                body.insert(key.to_owned(), value);
            }
        };
        set("url", self.endpoint_url.map(Value::from));
        set("topics", (!self.topics.is_empty()).then(|| json!(self.topics)));
        set("types", (!self.types.is_empty()).then(|| json!(self.types)));
        set("tenant", self.tenant.map(Value::from));
        set("policy", self.policy.map(Value::from));
        set("description", self.description.map(Value::from));
        Ok(Value::Object(body))
    }
}

/// `path?query`, the query encoded from `(key, value)` pairs (`None` values left out).
fn with_query(path: &str, pairs: &[(&str, Option<String>)]) -> String {
    let present: Vec<(&str, &str)> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_deref().map(|v| (*k, v)))
        .collect();
    match serde_urlencoded::to_string(present) {
        Ok(query) if !query.is_empty() => format!("{path}?{query}"),
        _ => path.to_owned(),
    }
}

/// The gateway's API, with the key of `--api-key`.
struct ApiClient(JsonClient);

impl ApiClient {
    fn new(target: &Target) -> Self {
        ApiClient(JsonClient::new(&target.url, target.api_key.clone()))
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, CallError> {
        self.call(Method::GET, path, None, &[]).await
    }

    async fn post<T: DeserializeOwned>(
        &self,
        path: &str,
        body: Option<Value>,
        extra: &[(&str, &str)],
    ) -> Result<T, CallError> {
        self.call(Method::POST, path, body, extra).await
    }

    /// Sends a request; a 2xx answer is read as `T`, any other as the API's error shape.
    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        extra: &[(&str, &str)],
    ) -> Result<T, CallError> {
        let (status, bytes) = self.0.send(method, path, body.as_ref(), extra).await?;
        // A 204 has no body: read it as `null`.
        let bytes = if bytes.is_empty() {
            Bytes::from_static(b"null")
        } else {
            bytes
        };
        if !status.is_success() {
            let error: ErrorAnswer = serde_json::from_slice(&bytes).unwrap_or_default();
            let code = error.error.code.or(error.readiness.code);
            let message = error.error.message.or(error.readiness.message);
            let (code, message) = (
                code.as_deref().unwrap_or("error"),
                message.as_deref().unwrap_or("no details"),
            );
            return Err(CallError::Refused {
                status,
                code: code.to_owned(),
                message: key_hint(status, code, message),
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| CallError::Unreadable {
            status,
            detail: e.to_string(),
        })
    }
}

/// The API's words for a missing or refused key speak of the header; a command user passes the
/// key as a flag or in the environment, so say that.
fn key_hint(status: http::StatusCode, code: &str, message: &str) -> String {
    match (status.as_u16(), code) {
        (401, "unauthorized") => {
            "the gateway needs an API key: pass it with --api-key KEY or in HOOKGATE_API_KEY".to_owned()
        }
        (403, "forbidden") => format!("{message} (the key of --api-key or HOOKGATE_API_KEY)"),
        _ => message.to_owned(),
    }
}

/// The API's error shape, read leniently: a proxy in between may answer something else. A
/// `/readyz` that is not ready says why at the top level (`reason`, `message`).
#[derive(Debug, Default, Deserialize)]
struct ErrorAnswer {
    #[serde(default)]
    error: ErrorFields,
    #[serde(flatten)]
    readiness: ErrorFields,
}

#[derive(Debug, Default, Deserialize)]
struct ErrorFields {
    #[serde(alias = "reason")]
    code: Option<String>,
    message: Option<String>,
}

/// A value for a table cell: `-` for none.
fn cell(value: Option<impl std::fmt::Display>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

/// Prints rows as aligned columns.
fn table(headers: &[&str], rows: Vec<Vec<String>>) {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.len()).collect();
    for row in &rows {
        for (i, cell) in row.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let line = |cells: Vec<String>| {
        let parts: Vec<String> = cells
            .iter()
            .enumerate()
            .map(|(i, c)| format!("{c:<w$}", w = widths[i]))
            .collect();
        say!("{}", parts.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

pub(super) fn run(command: OpsCommand) -> ExitCode {
    let Some(result) = super::block_on(execute(command)) else {
        return ExitCode::FAILURE;
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// `hookgate endpoint test`'s exit status when the gateway made the test call but the endpoint
/// did not take the event, so that a script can tell it from a failure of the command itself
/// (1, as every command) and from a usage error (2, clap's).
const NOT_DELIVERED: u8 = 3;

async fn execute(command: OpsCommand) -> anyhow::Result<ExitCode> {
    match command {
        OpsCommand::Healthcheck { target, ready } => {
            let path = if ready { "/readyz" } else { "/healthz" };
            let _: Value = ApiClient::new(&target).get(path).await?;
            println!("ok");
        }
        OpsCommand::Cluster { target } => {
            let view: ClusterNodesView = ApiClient::new(&target).get("/v1/cluster").await?;
            print_nodes(&view);
        }
        OpsCommand::Endpoints {
            tenant,
            state,
            limit,
            cursor,
            target,
        } => {
            let query = [
                ("limit", Some(limit.to_string())),
                ("tenant", tenant),
                ("state", state),
                ("cursor", cursor),
            ];
            list_endpoints(&ApiClient::new(&target), &query).await?;
        }
        OpsCommand::Endpoint { name, action, target } => {
            return endpoint_command(&ApiClient::new(&target), name, action).await;
        }
        OpsCommand::Deliveries {
            endpoint,
            status,
            limit,
            target,
        } => {
            let query = [
                ("limit", Some(limit.to_string())),
                ("endpoint", endpoint),
                ("status", status),
            ];
            let path = with_query("/v1/deliveries", &query);
            let list: DeliveryList = ApiClient::new(&target).get(&path).await?;
            print_deliveries(&list);
        }
        OpsCommand::Redeliver { id, target } => redeliver(&ApiClient::new(&target), &id).await?,
        OpsCommand::Reenable {
            name,
            replay_since,
            wait,
            target,
        } => reenable(&ApiClient::new(&target), &name, replay_since, wait).await?,
        OpsCommand::Replay {
            name,
            since,
            until,
            idempotency_key,
            wait,
            target,
        } => {
            replay(
                &ApiClient::new(&target),
                &name,
                &since,
                until,
                idempotency_key,
                wait,
            )
            .await?
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `hookgate endpoints`: one page, and the command for the next one.
async fn list_endpoints(api: &ApiClient, query: &[(&str, Option<String>)]) -> anyhow::Result<()> {
    let list: EndpointList = api.get(&with_query("/v1/endpoints", query)).await?;
    print_endpoints(&list);
    if let Some(next) = &list.next_cursor {
        say!("\nmore: hookgate endpoints --cursor {next}");
    }
    Ok(())
}

/// `hookgate redeliver ID`: the delivery queued again.
async fn redeliver(api: &ApiClient, id: &str) -> anyhow::Result<()> {
    let path = format!("/v1/deliveries/{}/redeliver", segment(id));
    let d: DeliveryView = api.post(&path, None, &[]).await?;
    say!("{} queued again for {} ({})", d.id, d.endpoint, d.status.as_str());
    Ok(())
}

/// `hookgate endpoint NAME` shows one endpoint; with an action, changes one.
async fn endpoint_command(
    api: &ApiClient,
    name: Option<String>,
    action: Option<EndpointAction>,
) -> anyhow::Result<ExitCode> {
    match (name, action) {
        (Some(name), None) => {
            let e: EndpointView = api.get(&format!("/v1/endpoints/{}", segment(&name))).await?;
            print_endpoint(&e);
            Ok(ExitCode::SUCCESS)
        }
        (_, Some(action)) => endpoint_action(api, action).await,
        (None, None) => Err(anyhow::anyhow!(
            "name an endpoint, or create|update|delete|rotate-secret"
        )),
    }
}

async fn endpoint_action(api: &ApiClient, action: EndpointAction) -> anyhow::Result<ExitCode> {
    let path = |name: &str| format!("/v1/endpoints/{}", segment(name));
    let saved: SavedEndpoint = match action {
        EndpointAction::Create { name, keys } => {
            let mut body = keys.body()?;
            if let Some(name) = name {
                body["name"] = Value::from(name);
            }
            api.post("/v1/endpoints", Some(body), &[]).await?
        }
        EndpointAction::Update { name, keys } => {
            api.call(Method::PATCH, &path(&name), Some(keys.body()?), &[])
                .await?
        }
        EndpointAction::Delete { name } => {
            let _: Value = api.call(Method::DELETE, &path(&name), None, &[]).await?;
            say!("deleted {name}");
            return Ok(ExitCode::SUCCESS);
        }
        EndpointAction::Test { name, event_type } => {
            let body = event_type.map(|t| json!({"type": t}));
            let outcome: TestOutcome = api.post(&format!("{}/test", path(&name)), body, &[]).await?;
            print_test(&name, &outcome);
            return Ok(match outcome.delivered {
                true => ExitCode::SUCCESS,
                false => ExitCode::from(NOT_DELIVERED),
            });
        }
        EndpointAction::RotateSecret {
            name,
            secret,
            overlap,
        } => {
            let body = json!({"secret": secret, "overlap": overlap});
            let body = Value::Object(
                body.as_object()
                    .into_iter()
                    .flatten()
                    .filter(|(_, v)| !v.is_null())
                    .map(|(k, v)| (k.clone(), v.clone()))
                    .collect(),
            );
            api.post(&format!("{}/secret/rotate", path(&name)), Some(body), &[])
                .await?
        }
    };
    print_endpoint(&saved.endpoint);
    if let Some(secret) = saved.secret {
        say!("\nsecret (shown once): {secret}");
    }
    Ok(ExitCode::SUCCESS)
}

async fn reenable(
    api: &ApiClient,
    name: &str,
    replay_since: Option<String>,
    wait: bool,
) -> anyhow::Result<()> {
    let body = json!({ "replay_since": replay_since });
    let r: Reenabled = api
        .post(
            &format!("/v1/endpoints/{}/reenable", segment(name)),
            Some(body),
            &[],
        )
        .await?;
    say!(
        "{name} is {}; {} events queued again",
        r.endpoint.state,
        r.replayed
    );
    if let Some(replay) = &r.replay {
        if replay.truncated {
            say!(
                "truncated at 10 000 events: replay again from {}",
                cell(replay.continue_from)
            );
        }
        if wait {
            wait_for(api, name, replay).await?;
        }
    }
    Ok(())
}

async fn replay(
    api: &ApiClient,
    name: &str,
    since: &str,
    until: Option<String>,
    key: Option<String>,
    wait: bool,
) -> anyhow::Result<()> {
    // The same replay asked again (a script run twice) is the same request to the gateway.
    let key =
        key.unwrap_or_else(|| format!("cli-replay-{name}-{since}-{}", until.as_deref().unwrap_or("now")));
    let body = json!({ "since": since, "until": until });
    let r: ReplayOutcome = api
        .post(
            &format!("/v1/endpoints/{}/replay", segment(name)),
            Some(body),
            &[("idempotency-key", &key)],
        )
        .await?;
    say!("{} events queued again for {name}", r.queued);
    if r.truncated {
        say!(
            "truncated at 10 000 events: replay again with --since {}",
            cell(r.continue_from)
        );
    }
    if wait {
        wait_for(api, name, &r).await?;
    }
    Ok(())
}

fn print_nodes(view: &ClusterNodesView) {
    let rows = view
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.id.clone(),
                n.address.clone(),
                n.state.clone(),
                n.started_at.to_string(),
                n.last_seen_at.to_string(),
                n.leases.to_string(),
            ]
        })
        .collect();
    table(
        &["NODE", "ADDRESS", "STATE", "STARTED", "LAST SEEN", "LEASES"],
        rows,
    );
}

fn print_endpoints(list: &EndpointList) {
    let rows = list
        .endpoints
        .iter()
        .map(|e| {
            vec![
                e.name.clone(),
                e.state.to_string(),
                e.consecutive_failures.to_string(),
                cell(e.failing_since),
                cell(e.last_success_at),
                e.url.clone(),
            ]
        })
        .collect();
    table(
        &[
            "NAME",
            "STATE",
            "FAILURES",
            "FAILING SINCE",
            "LAST SUCCESS",
            "URL",
        ],
        rows,
    );
}

/// The endpoint's own policy, or each topic's (`orders: fast, users: standard`).
fn policy_of(e: &EndpointView) -> String {
    match &e.policy {
        Some(own) => own.clone(),
        None if e.topic_policies.is_empty() => "-".to_owned(),
        None => {
            let each: Vec<String> = e
                .topic_policies
                .iter()
                .map(|(t, p)| format!("{t}: {p}"))
                .collect();
            format!("{} (the topics')", each.join(", "))
        }
    }
}

fn print_endpoint(e: &EndpointView) {
    let fields = [
        ("name", e.name.clone()),
        ("source", e.source.clone()),
        ("tenant", cell(e.tenant.as_ref())),
        ("url", e.url.clone()),
        ("kind", e.kind.clone()),
        ("target", cell(e.target.as_ref())),
        ("state", e.state.to_string()),
        ("consecutive_failures", e.consecutive_failures.to_string()),
        ("failing_since", cell(e.failing_since)),
        ("last_success_at", cell(e.last_success_at)),
        ("policy", policy_of(e)),
        ("topics", serde_json::to_string(&e.topics).unwrap_or_default()),
    ];
    for (key, value) in fields {
        say!("{key:<22}{value}");
    }
    for problem in &e.problems {
        say!("{:<22}{problem}", "problem");
    }
    say!("\nhistory:");
    let rows = e
        .history
        .iter()
        .flatten()
        .map(|h| vec![h.at.to_string(), h.state.to_string(), h.reason.clone()])
        .collect();
    table(&["AT", "STATE", "REASON"], rows);
}

/// The test call's outcome: a status code for HTTP, where the message went and what the
/// broker answered for a broker.
fn print_test(name: &str, t: &TestOutcome) {
    let verdict = if t.delivered { "delivered" } else { "not delivered" };
    println!("{name}: {verdict} in {} ms (event {})", t.duration_ms, t.event_id);
    let mut fields = vec![("kind", t.kind.clone())];
    if let Some(target) = &t.target {
        fields.push(("target", target.clone()));
    }
    if let Some(answer) = &t.answer {
        fields.push(("answer", answer.clone()));
    }
    if let Some(code) = t.status_code {
        fields.push(("status", code.to_string()));
    }
    if let Some(kind) = &t.error_kind {
        fields.push(("error_kind", kind.clone()));
    }
    if let Some(error) = &t.error {
        fields.push(("error", error.clone()));
    }
    if let Some(reason) = &t.dropped {
        fields.push(("dropped", reason.clone()));
    }
    if let Some(plugins) = &t.plugins {
        fields.push(("plugins", plugins.clone()));
    }
    for (key, value) in fields {
        println!("{key:<22}{value}");
    }
}

fn print_deliveries(list: &DeliveryList) {
    let rows = list
        .deliveries
        .iter()
        .map(|d| {
            vec![
                d.id.clone(),
                d.endpoint.clone(),
                d.status.as_str().to_owned(),
                d.attempt_count.to_string(),
                cell(d.next_attempt_at),
                d.event_id.clone(),
                cell(d.last_error.as_ref()),
            ]
        })
        .collect();
    table(
        &[
            "ID",
            "ENDPOINT",
            "STATUS",
            "ATTEMPTS",
            "NEXT ATTEMPT",
            "EVENT",
            "LAST ERROR",
        ],
        rows,
    );
}

/// Polls until none of the replay's deliveries is pending, with a progress bar.
async fn wait_for(api: &ApiClient, endpoint: &str, replay: &ReplayOutcome) -> anyhow::Result<()> {
    let total = replay.queued as u64;
    let (Some(first), Some(last)) = (&replay.first_delivery, &replay.last_delivery) else {
        return Ok(());
    };
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{bar:40}] {pos}/{len} delivered or finished ({elapsed})")
            .expect("a valid template")
            .progress_chars("=> "),
    );
    let path = with_query(
        "/v1/deliveries/summary",
        &[
            ("endpoint", Some(endpoint.to_owned())),
            ("from", Some(first.clone())),
            ("to", Some(last.clone())),
        ],
    );
    loop {
        let summary: Summary = api.get(&path).await?;
        bar.set_position(total.saturating_sub(summary.pending));
        if summary.pending == 0 {
            bar.finish();
            say!(
                "done: {} succeeded, {} failed, {} dead",
                summary.succeeded,
                summary.failed,
                summary.dead
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_and_path_segments_are_encoded() {
        assert_eq!(
            with_query(
                "/v1/deliveries",
                &[
                    ("limit", Some("20".into())),
                    ("endpoint", Some("a&b=c d".into())),
                    ("status", None),
                ],
            ),
            "/v1/deliveries?limit=20&endpoint=a%26b%3Dc+d"
        );
        assert_eq!(with_query("/v1/x", &[("status", None)]), "/v1/x");
        assert_eq!(segment("../x y"), "%2E%2E%2Fx%20y");
    }
}
