//! Operator commands: talk to a running gateway's API and print readable tables.

use std::process::ExitCode;
use std::time::Duration;

use bytes::Bytes;
use clap::{Args, Subcommand};
use http::{Method, Request, StatusCode, header};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Value, json};

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
    /// List endpoints with their health.
    Endpoints {
        #[command(flatten)]
        target: Target,
    },
    /// One endpoint's health and state history.
    Endpoint {
        name: String,
        #[command(flatten)]
        target: Target,
    },
    /// The delivery log, newest first.
    Deliveries {
        #[arg(long)]
        endpoint: Option<String>,
        /// pending, delivering, succeeded, failed or dead.
        #[arg(long)]
        status: Option<String>,
        #[arg(long, default_value_t = 20)]
        limit: u32,
        #[command(flatten)]
        target: Target,
    },
    /// Attempt a delivery again now.
    Redeliver {
        id: String,
        #[command(flatten)]
        target: Target,
    },
    /// Make a paused or disabled endpoint active again.
    Reenable {
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

struct ApiClient {
    base: String,
    api_key: Option<String>,
    client:
        Client<hyper_rustls::HttpsConnector<hyper_util::client::legacy::connect::HttpConnector>, Full<Bytes>>,
}

impl ApiClient {
    fn new(target: &Target) -> Result<Self, String> {
        let https = hyper_rustls::HttpsConnectorBuilder::new()
            .with_webpki_roots()
            .https_or_http()
            .enable_http1()
            .build();
        Ok(ApiClient {
            base: target.url.trim_end_matches('/').to_owned(),
            api_key: target.api_key.clone(),
            client: Client::builder(TokioExecutor::new()).build(https),
        })
    }

    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        extra: &[(&str, &str)],
    ) -> Result<(StatusCode, Value), String> {
        let mut request = Request::builder()
            .method(method)
            .uri(format!("{}{path}", self.base));
        if let Some(key) = &self.api_key {
            request = request.header(header::AUTHORIZATION, format!("Bearer {key}"));
        }
        for (name, value) in extra {
            request = request.header(*name, *value);
        }
        let payload = match body {
            Some(v) => {
                request = request.header(header::CONTENT_TYPE, "application/json");
                Bytes::from(v.to_string())
            }
            None => Bytes::new(),
        };
        let request = request.body(Full::new(payload)).map_err(|e| e.to_string())?;
        let response = tokio::time::timeout(Duration::from_secs(30), self.client.request(request))
            .await
            .map_err(|_| format!("{} did not answer within 30 s", self.base))?
            .map_err(|e| format!("cannot reach {}: {e}", self.base))?;
        let status = response.status();
        let bytes = response
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        let value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if !status.is_success() {
            let message = value["error"]["message"].as_str().unwrap_or("no details");
            let code = value["error"]["code"].as_str().unwrap_or("error");
            return Err(format!("{status}: {code}: {message}"));
        }
        Ok((status, value))
    }
}

fn text(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
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
        println!("{}", parts.join("  ").trim_end());
    };
    line(headers.iter().map(|h| h.to_string()).collect());
    for row in rows {
        line(row);
    }
}

pub(super) fn run(command: OpsCommand) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(execute(command)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn execute(command: OpsCommand) -> Result<(), String> {
    match command {
        OpsCommand::Endpoints { target } => {
            let api = ApiClient::new(&target)?;
            let (_, body) = api.call(Method::GET, "/v1/endpoints", None, &[]).await?;
            let rows = body["endpoints"]
                .as_array()
                .map(|list| {
                    list.iter()
                        .map(|e| {
                            vec![
                                text(&e["name"]),
                                text(&e["state"]),
                                text(&e["consecutive_failures"]),
                                text(&e["failing_since"]),
                                text(&e["last_success_at"]),
                                text(&e["url"]),
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
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
        OpsCommand::Endpoint { name, target } => {
            let api = ApiClient::new(&target)?;
            let (_, e) = api
                .call(Method::GET, &format!("/v1/endpoints/{name}"), None, &[])
                .await?;
            for key in [
                "name",
                "url",
                "state",
                "consecutive_failures",
                "failing_since",
                "last_success_at",
                "policy",
            ] {
                println!("{key:<22}{}", text(&e[key]));
            }
            println!("{:<22}{}", "topics", text(&e["topics"]));
            println!("\nhistory:");
            let rows = e["history"]
                .as_array()
                .map(|h| {
                    h.iter()
                        .map(|x| vec![text(&x["at"]), text(&x["state"]), text(&x["reason"])])
                        .collect()
                })
                .unwrap_or_default();
            table(&["AT", "STATE", "REASON"], rows);
        }
        OpsCommand::Deliveries {
            endpoint,
            status,
            limit,
            target,
        } => {
            let api = ApiClient::new(&target)?;
            let mut query = format!("/v1/deliveries?limit={limit}");
            if let Some(e) = endpoint {
                query.push_str(&format!("&endpoint={e}"));
            }
            if let Some(s) = status {
                query.push_str(&format!("&status={s}"));
            }
            let (_, body) = api.call(Method::GET, &query, None, &[]).await?;
            let rows = body["deliveries"]
                .as_array()
                .map(|list| {
                    list.iter()
                        .map(|d| {
                            vec![
                                text(&d["id"]),
                                text(&d["endpoint"]),
                                text(&d["status"]),
                                text(&d["attempt_count"]),
                                text(&d["next_attempt_at"]),
                                text(&d["event_id"]),
                                text(&d["last_error"]),
                            ]
                        })
                        .collect()
                })
                .unwrap_or_default();
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
        OpsCommand::Redeliver { id, target } => {
            let api = ApiClient::new(&target)?;
            let (_, d) = api
                .call(Method::POST, &format!("/v1/deliveries/{id}/redeliver"), None, &[])
                .await?;
            println!(
                "{} queued again for {} ({})",
                text(&d["id"]),
                text(&d["endpoint"]),
                text(&d["status"])
            );
        }
        OpsCommand::Reenable {
            name,
            replay_since,
            wait,
            target,
        } => {
            let api = ApiClient::new(&target)?;
            let body = json!({ "replay_since": replay_since });
            let (_, r) = api
                .call(
                    Method::POST,
                    &format!("/v1/endpoints/{name}/reenable"),
                    Some(body),
                    &[],
                )
                .await?;
            println!(
                "{name} is {}; {} events queued again",
                text(&r["endpoint"]["state"]),
                text(&r["replayed"])
            );
            if r["replay"]["truncated"].as_bool() == Some(true) {
                println!(
                    "truncated at 10 000 events: replay again from {}",
                    text(&r["replay"]["continue_from"])
                );
            }
            if wait && let Some(replay) = r.get("replay").filter(|v| !v.is_null()) {
                wait_for(&api, &name, replay).await?;
            }
        }
        OpsCommand::Replay {
            name,
            since,
            until,
            idempotency_key,
            wait,
            target,
        } => {
            let api = ApiClient::new(&target)?;
            let key = idempotency_key.unwrap_or_else(|| {
                format!("cli-replay-{name}-{since}-{}", until.as_deref().unwrap_or("now"))
            });
            let body = json!({ "since": since, "until": until });
            let (_, r) = api
                .call(
                    Method::POST,
                    &format!("/v1/endpoints/{name}/replay"),
                    Some(body),
                    &[("idempotency-key", &key)],
                )
                .await?;
            println!("{} events queued again for {name}", text(&r["queued"]));
            if r["truncated"].as_bool() == Some(true) {
                println!(
                    "truncated at 10 000 events: replay again with --since {}",
                    text(&r["continue_from"])
                );
            }
            if wait {
                wait_for(&api, &name, &r).await?;
            }
        }
    }
    Ok(())
}

/// Polls until none of the replay's deliveries is pending, with a progress bar.
async fn wait_for(api: &ApiClient, endpoint: &str, replay: &Value) -> Result<(), String> {
    let total = replay["queued"].as_u64().unwrap_or(0);
    let (Some(first), Some(last)) = (
        replay["first_delivery"].as_str(),
        replay["last_delivery"].as_str(),
    ) else {
        return Ok(());
    };
    let bar = ProgressBar::new(total);
    bar.set_style(
        ProgressStyle::with_template("{spinner} [{bar:40}] {pos}/{len} delivered or finished ({elapsed})")
            .map_err(|e| e.to_string())?
            .progress_chars("=> "),
    );
    loop {
        let (_, body) = api
            .call(
                Method::GET,
                &format!("/v1/deliveries/summary?endpoint={endpoint}&from={first}&to={last}"),
                None,
                &[],
            )
            .await?;
        let pending = body["pending"].as_u64().unwrap_or(0);
        bar.set_position(total.saturating_sub(pending));
        if pending == 0 {
            bar.finish();
            println!(
                "done: {} succeeded, {} failed, {} dead",
                text(&body["succeeded"]),
                text(&body["failed"]),
                text(&body["dead"])
            );
            return Ok(());
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
