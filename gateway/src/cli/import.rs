//! `hookgate import svix --url URL --token TOKEN`: copies a running Svix server's event types,
//! applications, endpoints (with their secrets, so receivers keep verifying) and endpoint
//! headers into a running hookgate, through both sides' Svix API.
//!
//! Every write is an upsert keyed by what the Svix side calls the object: an application or
//! endpoint keeps its `uid`, or gets its Svix `id` as its uid when it has none, so that the
//! ids an app stored work unchanged in paths against hookgate, and a second run changes
//! nothing new. Messages and attempts stay behind (hookgate starts the history afresh), and
//! so do header values Svix keeps secret (it never shows them): the summary names those.

use std::process::ExitCode;

use clap::Args;
use http::Method;
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::{Map, Value, json};

use super::client::{CallError, JsonClient, segment};

#[derive(Debug, Args)]
pub(super) struct ImportSvix {
    /// The Svix server to copy from (its API's base URL, e.g. https://api.eu.svix.com).
    #[arg(long, env = "SVIX_SERVER_URL")]
    url: String,
    /// An API token of that Svix server; from the environment if not given, so that it does
    /// not land in the shell history.
    #[arg(long, env = "SVIX_AUTH_TOKEN", hide_env_values = true)]
    token: String,
    /// The hookgate to copy into.
    #[arg(long, env = "HOOKGATE_URL", default_value = "http://127.0.0.1:8080")]
    gateway: String,
    /// An admin API key of that hookgate, if it requires keys.
    #[arg(long, env = "HOOKGATE_API_KEY", hide_env_values = true)]
    api_key: Option<String>,
    /// Read everything and say what would be copied, without writing anything.
    #[arg(long)]
    dry_run: bool,
}

/// One side's Svix API.
struct Side(JsonClient);

/// Rows asked for per page of a list.
const PAGE: u32 = 250;

impl Side {
    fn new(base: &str, token: Option<String>) -> Side {
        Side(JsonClient::new(base, token))
    }

    /// Sends a request; a 2xx answer's JSON (null for none), or what the error answer says.
    async fn call(&self, method: Method, path: &str, body: Option<&Value>) -> Result<Value, CallError> {
        let (status, bytes) = self.0.send(method.clone(), path, body, &[]).await?;
        let value: Value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes)
                .unwrap_or_else(|_| Value::from(String::from_utf8_lossy(&bytes).into_owned()))
        };
        if status.is_success() {
            return Ok(value);
        }
        let detail = value
            .get("detail")
            .map(|d| d.as_str().map_or_else(|| d.to_string(), str::to_owned))
            .unwrap_or_else(|| value.to_string());
        Err(CallError::Refused {
            status,
            code: format!("{method} {}{path}", self.0.base()),
            message: detail,
        })
    }

    /// Every item of a Svix list, page after page.
    async fn all(&self, path: &str) -> Result<Vec<Value>, CallError> {
        let mut items = Vec::new();
        let mut iterator: Option<String> = None;
        loop {
            let mut query = format!("limit={PAGE}");
            if let Some(it) = &iterator {
                query.push_str(&format!("&iterator={}", segment(it)));
            }
            let sep = if path.contains('?') { '&' } else { '?' };
            let page = self
                .call(Method::GET, &format!("{path}{sep}{query}"), None)
                .await?;
            let data = page["data"].as_array().cloned().unwrap_or_default();
            items.extend(data);
            match (page["done"].as_bool(), page["iterator"].as_str()) {
                (Some(false), Some(next)) if Some(next) != iterator.as_deref() => {
                    iterator = Some(next.to_owned())
                }
                _ => return Ok(items),
            }
        }
    }
}

/// What was (or, with `--dry-run`, would be) copied.
#[derive(Debug, Default)]
struct Summary {
    event_types: usize,
    applications: usize,
    endpoints: usize,
    secrets: usize,
    headers: usize,
    /// Header values Svix does not show, by endpoint: set them again by hand.
    sensitive: Vec<String>,
}

/// Everything read from the Svix server, before anything is written.
struct Source {
    event_types: Vec<Value>,
    applications: Vec<(Value, Vec<Endpoint>)>,
}

struct Endpoint {
    fields: Value,
    secret: Option<String>,
    headers: Map<String, Value>,
    sensitive: Vec<String>,
}

pub(super) fn run(args: ImportSvix) -> ExitCode {
    let Some(result) = super::block_on(import(&args)) else {
        return ExitCode::FAILURE;
    };
    match result {
        Ok(summary) => {
            let verb = if args.dry_run { "would copy" } else { "copied" };
            println!(
                "{verb} {} event types, {} applications, {} endpoints ({} secrets, {} headers)",
                summary.event_types,
                summary.applications,
                summary.endpoints,
                summary.secrets,
                summary.headers
            );
            for note in &summary.sensitive {
                println!("not copied (Svix does not show its value): {note}");
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn import(args: &ImportSvix) -> Result<Summary, CallError> {
    let svix = Side::new(&args.url, Some(args.token.clone()));
    let gateway = Side::new(&args.gateway, args.api_key.clone());
    let bar = ProgressBar::new_spinner();
    if let Ok(style) = ProgressStyle::with_template("{spinner} {msg} [{bar:30}] {pos}/{len}") {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message("reading from Svix");
    let source = read(&svix, &bar).await?;
    let mut summary = Summary {
        event_types: source.event_types.len(),
        applications: source.applications.len(),
        ..Summary::default()
    };
    for (_, endpoints) in &source.applications {
        summary.endpoints += endpoints.len();
        for ep in endpoints {
            summary.secrets += usize::from(ep.secret.is_some());
            summary.headers += ep.headers.len();
            summary.sensitive.extend(ep.sensitive.iter().cloned());
        }
    }
    if args.dry_run {
        bar.finish_and_clear();
        return Ok(summary);
    }
    bar.set_message("writing to hookgate");
    bar.set_length((summary.event_types + summary.applications + summary.endpoints) as u64);
    bar.set_position(0);
    write(&gateway, &source, &bar).await?;
    bar.finish_and_clear();
    Ok(summary)
}

async fn read(svix: &Side, bar: &ProgressBar) -> Result<Source, CallError> {
    let event_types = svix
        .all("/api/v1/event-type?include_archived=true&with_content=true")
        .await?;
    let apps = svix.all("/api/v1/app").await?;
    bar.set_length(apps.len() as u64);
    let mut applications = Vec::with_capacity(apps.len());
    for app in apps {
        let app_id = app["id"].as_str().unwrap_or_default().to_owned();
        let mut endpoints = Vec::new();
        for fields in svix
            .all(&format!("/api/v1/app/{}/endpoint", segment(&app_id)))
            .await?
        {
            let ep_id = fields["id"].as_str().unwrap_or_default();
            let base = format!("/api/v1/app/{}/endpoint/{}", segment(&app_id), segment(ep_id));
            let secret = svix.call(Method::GET, &format!("{base}/secret"), None).await?;
            let headers = svix.call(Method::GET, &format!("{base}/headers"), None).await?;
            endpoints.push(Endpoint {
                secret: secret["key"].as_str().map(str::to_owned),
                headers: headers["headers"].as_object().cloned().unwrap_or_default(),
                sensitive: headers["sensitive"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .map(|name| format!("header `{name}` of endpoint `{ep_id}` of application `{app_id}`"))
                    .collect(),
                fields,
            });
        }
        applications.push((app, endpoints));
        bar.inc(1);
    }
    Ok(Source {
        event_types,
        applications,
    })
}

/// The key an object is written under on hookgate: its uid, else its Svix id.
fn key_of(object: &Value) -> String {
    object["uid"]
        .as_str()
        .or_else(|| object["id"].as_str())
        .unwrap_or_default()
        .to_owned()
}

async fn write(gateway: &Side, source: &Source, bar: &ProgressBar) -> Result<(), CallError> {
    for event_type in &source.event_types {
        let name = event_type["name"].as_str().unwrap_or_default();
        let body = pick(
            event_type,
            &[
                "description",
                "archived",
                "deprecated",
                "schemas",
                "featureFlags",
                "groupName",
            ],
        );
        gateway
            .call(
                Method::PUT,
                &format!("/api/v1/event-type/{}", segment(name)),
                Some(&body),
            )
            .await?;
        bar.inc(1);
    }
    for (app, endpoints) in &source.applications {
        let app_key = key_of(app);
        let mut body = pick(app, &["name", "metadata", "rateLimit"]);
        body["uid"] = Value::from(app_key.clone());
        gateway
            .call(
                Method::PUT,
                &format!("/api/v1/app/{}", segment(&app_key)),
                Some(&body),
            )
            .await?;
        bar.inc(1);
        for ep in endpoints {
            write_endpoint(gateway, &app_key, ep).await?;
            bar.inc(1);
        }
    }
    Ok(())
}

async fn write_endpoint(gateway: &Side, app_key: &str, ep: &Endpoint) -> Result<(), CallError> {
    let ep_key = key_of(&ep.fields);
    let mut body = pick(
        &ep.fields,
        &[
            "url",
            "description",
            "channels",
            "disabled",
            "metadata",
            "rateLimit",
            "throttleRate",
        ],
    );
    let types = ep
        .fields
        .get("filterTypes")
        .or_else(|| ep.fields.get("eventTypes"));
    body["filterTypes"] = types.cloned().unwrap_or(Value::Null);
    body["uid"] = Value::from(ep_key.clone());
    if let Some(secret) = &ep.secret {
        body["secret"] = Value::from(secret.clone());
    }
    let base = format!("/api/v1/app/{}/endpoint/{}", segment(app_key), segment(&ep_key));
    gateway.call(Method::PUT, &base, Some(&body)).await?;
    gateway
        .call(
            Method::PUT,
            &format!("{base}/headers"),
            Some(&json!({"headers": ep.headers})),
        )
        .await?;
    Ok(())
}

/// The named fields of `object` that it has (null ones left out).
fn pick(object: &Value, fields: &[&str]) -> Value {
    let mut picked = Map::new();
    for field in fields {
        if let Some(value) = object.get(*field).filter(|v| !v.is_null()) {
            picked.insert((*field).to_owned(), value.clone());
        }
    }
    Value::Object(picked)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_keeps_its_uid_else_its_svix_id() {
        assert_eq!(key_of(&json!({"id": "app_1", "uid": "acme"})), "acme");
        assert_eq!(key_of(&json!({"id": "app_1", "uid": null})), "app_1");
    }

    #[test]
    fn only_present_fields_are_copied() {
        let picked = pick(
            &json!({"name": "a", "metadata": null, "x": 1}),
            &["name", "metadata"],
        );
        assert_eq!(picked, json!({"name": "a"}));
    }
}
