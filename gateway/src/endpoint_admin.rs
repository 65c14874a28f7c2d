//! Endpoints created, changed and deleted through the API (`source: api`), kept in the store.
//!
//! Every change is validated like the config file's endpoints, written to the store as one
//! row, and then run: the running endpoints (`crate::endpoints`) take that one endpoint, and
//! the scheduler that one lane. Nothing else is read or rebuilt, so a change costs the same
//! with ten endpoints or a million. Changes of one endpoint run one after another, changes of
//! different endpoints at once; the other nodes of a cluster read the changed row from the
//! store's notice. The handlers in `api/endpoints.rs` are thin.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use base64::Engine;
use serde_json::{Map, Value};

use crate::clock::Clock;
use crate::config::{self, Config, EndpointConfig, EndpointSource, Problem};
use crate::delivery::signing;
use crate::endpoints::Endpoints;
use crate::model::{Secret, Timestamp};
use crate::reload::{Announce, BindingReview};
use crate::scheduler::SchedulerHandle;
use crate::store::{ApiEndpointRow, Store, StoreError};

/// How long a rotated-out secret keeps signing when the request does not say.
pub const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 3600);

/// Secrets rotated out that still sign at once, at most (Svix keeps five old keys).
pub const MAX_RETIRING: usize = 5;

#[derive(Debug, thiserror::Error)]
pub enum AdminError {
    /// The keys' problems, with their paths inside the endpoint.
    #[error("the endpoint is not valid")]
    Invalid(Vec<Problem>),
    /// The URL is an address the SSRF rules block (and perhaps more is wrong): the problems.
    #[error("the endpoint's address may not be contacted")]
    Blocked(Vec<Problem>),
    #[error("endpoint `{0}` is declared in the config file; change it there")]
    DeclaredInConfig(String),
    #[error("no endpoint `{0}`")]
    NotFound(String),
    /// Its name, or its uid within its tenant, is another endpoint's.
    #[error("{0}")]
    Taken(String),
    /// Changed or deleted by someone else (another node) since it was read.
    #[error("{0}")]
    Changed(String),
    /// A tenant caller asked for another tenant.
    #[error("{0}")]
    OtherTenant(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// An endpoint as a change left it, and its new secret when the change made one (shown once).
pub struct Saved {
    pub endpoint: Arc<EndpointConfig>,
    pub secret: Option<String>,
}

/// What an endpoint change reaches: the store's row, the running endpoints, the scheduler's
/// lane and the review of plugin bindings. The config is read for the rules an endpoint is
/// validated by.
#[derive(Clone)]
pub struct EndpointAdmin {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: Arc<ArcSwap<Config>>,
    pub(crate) endpoints: Endpoints,
    pub(crate) scheduler: SchedulerHandle,
    pub(crate) bindings: BindingReview,
}

impl EndpointAdmin {
    fn config(&self) -> Arc<Config> {
        self.config.load_full()
    }

    /// Creates an endpoint from the file's endpoint keys plus `name`, for `tenant` when the
    /// caller is a tenant's. A missing name becomes `ep_<ulid>`, a missing secret a new one.
    /// It answers exactly when the endpoint exists, stored and running.
    pub async fn create(
        &self,
        mut body: Map<String, Value>,
        caller_tenant: Option<&str>,
    ) -> Result<Saved, AdminError> {
        let name = match body.remove("name") {
            None | Some(Value::Null) => format!("ep_{}", ulid::Ulid::new().to_string().to_lowercase()),
            Some(Value::String(name)) => name,
            Some(_) => return Err(invalid("name", "must be a string")),
        };
        match (caller_tenant, body.get("tenant")) {
            (Some(own), None | Some(Value::Null)) => {
                body.insert("tenant".into(), Value::String(own.to_owned()));
            }
            (Some(own), Some(asked)) if asked.as_str() != Some(own) => {
                return Err(AdminError::OtherTenant(format!(
                    "a key of tenant `{own}` creates endpoints of that tenant only"
                )));
            }
            _ => {}
        }
        admin_only_keys(&body, caller_tenant)?;
        let secret = match body.get("secret") {
            None | Some(Value::Null) => {
                let secret = new_secret(&body)?;
                body.insert("secret".into(), Value::String(secret.clone()));
                Some(secret)
            }
            Some(_) => None,
        };
        let _change = self.endpoints.change(&name).await;
        if self.endpoints.contains(&name) {
            return Err(AdminError::Taken(format!("an endpoint named `{name}` exists")));
        }
        let now = self.clock.now();
        let row = ApiEndpointRow {
            tenant: tenant_of(&body),
            uid: uid_of(&body),
            name,
            spec: Value::Object(body).to_string(),
            retiring: None,
            version: 1,
            created_at: now,
            updated_at: now,
        };
        if let Some(uid) = &row.uid
            && self.endpoints.by_uid(row.tenant.as_deref(), uid).is_some()
        {
            return Err(AdminError::Taken(format!("an endpoint with uid `{uid}` exists")));
        }
        let endpoint = Arc::new(self.check(&row, &self.config())?);
        self.store
            .save_api_endpoint(row, None)
            .await
            .map_err(|e| match e {
                StoreError::Conflict(message) => AdminError::Taken(message),
                other => other.into(),
            })?;
        self.run(endpoint.clone());
        Ok(Saved { endpoint, secret })
    }

    /// Applies a JSON merge patch (RFC 7396) to an endpoint's keys; `filter` is replaced
    /// whole.
    pub async fn update(
        &self,
        name: &str,
        patch: Value,
        caller_tenant: Option<&str>,
    ) -> Result<Saved, AdminError> {
        let Value::Object(patch) = patch else {
            return Err(invalid("", "a merge patch is a JSON object"));
        };
        if patch.get("name").is_some_and(|n| n.as_str() != Some(name)) {
            return Err(invalid("name", "an endpoint's name cannot change"));
        }
        let _change = self.endpoints.change(name).await;
        let mut row = self.row(name, caller_tenant).await?;
        let mut spec = Value::Object(spec_of(&row)?);
        let tenant_before = row.tenant.clone();
        // A content filter is one document: a new one replaces the old whole, since merging
        // two filters key by key would make a third that neither meant.
        if patch.get("filter").is_some_and(|f| !f.is_null())
            && let Value::Object(keys) = &mut spec
        {
            keys.remove("filter");
        }
        merge_patch(
            &mut spec,
            Value::Object(patch.into_iter().filter(|(k, _)| k != "name").collect()),
        );
        let Value::Object(body) = spec else {
            unreachable!("a merge patch of an object is an object")
        };
        if tenant_of(&body) != tenant_before {
            return Err(invalid(
                "tenant",
                "an endpoint's tenant cannot change; create a new endpoint",
            ));
        }
        admin_only_keys(&body, caller_tenant)?;
        row.uid = uid_of(&body);
        row.spec = Value::Object(body).to_string();
        self.replace(row, self.clock.now(), None).await
    }

    /// Deletes an endpoint: its waiting deliveries end `failed` with `endpoint_removed`, its
    /// deliveries and history stay readable until retention removes them.
    pub async fn delete(&self, name: &str, caller_tenant: Option<&str>) -> Result<(), AdminError> {
        let _change = self.endpoints.change(name).await;
        self.row(name, caller_tenant).await?;
        self.store
            .delete_api_endpoint(name)
            .await
            .map_err(|e| replace_failed(e, name))?;
        self.endpoints.forget(name);
        self.changed(Arc::from(name));
        Ok(())
    }

    /// Gives an endpoint a new secret (`secret`, or a generated one); the old one signs too
    /// until `overlap` has passed, so receivers can switch without losing a delivery.
    pub async fn rotate_secret(
        &self,
        name: &str,
        secret: Option<String>,
        overlap: Duration,
        caller_tenant: Option<&str>,
    ) -> Result<Saved, AdminError> {
        let _change = self.endpoints.change(name).await;
        let mut row = self.row(name, caller_tenant).await?;
        let mut spec = spec_of(&row)?;
        let new = match secret {
            Some(s) => s,
            None => new_secret(&spec)?,
        };
        let old = match spec.insert("secret".into(), Value::String(new.clone())) {
            Some(Value::String(s)) => Some(s),
            Some(Value::Array(list)) => list.into_iter().find_map(|v| v.as_str().map(str::to_owned)),
            _ => None,
        };
        let now = self.clock.now();
        // Every secret rotated out keeps its own overlap, as Svix keeps its old keys: the
        // newest first, those whose overlap has ended dropped, at most MAX_RETIRING.
        let mut retiring = config::retiring_secrets(row.retiring.as_ref());
        retiring.retain(|(_, until)| now < *until);
        if let Some(old) = old.filter(|_| !overlap.is_zero()) {
            retiring.insert(0, (Secret::new(old), now.plus(overlap)));
        }
        retiring.truncate(MAX_RETIRING);
        row.retiring = config::stored_retiring(&retiring);
        row.spec = Value::Object(spec).to_string();
        self.replace(row, now, Some(new)).await
    }

    /// Writes a changed row over the version it was read at, then runs it. Called under the
    /// endpoint's change.
    async fn replace(
        &self,
        mut row: ApiEndpointRow,
        now: Timestamp,
        secret: Option<String>,
    ) -> Result<Saved, AdminError> {
        let previous = row.version;
        row.version += 1;
        row.updated_at = now;
        let endpoint = Arc::new(self.check(&row, &self.config())?);
        let name = row.name.clone();
        self.store
            .save_api_endpoint(row, Some(previous))
            .await
            .map_err(|e| replace_failed(e, &name))?;
        self.run(endpoint.clone());
        Ok(Saved { endpoint, secret })
    }

    /// Runs an endpoint just stored: in the running set, then in the scheduler.
    fn run(&self, endpoint: Arc<EndpointConfig>) {
        let name = endpoint.name.clone();
        self.endpoints.put(endpoint);
        self.changed(name);
    }

    fn changed(&self, name: Arc<str>) {
        self.scheduler.endpoint_changed(name);
        self.bindings.review(Announce::Changes);
    }

    /// The stored row of an `api` endpoint the caller may change.
    async fn row(&self, name: &str, caller_tenant: Option<&str>) -> Result<ApiEndpointRow, AdminError> {
        let visible = self
            .endpoints
            .routing(name)
            .filter(|ep| caller_tenant.is_none() || ep.tenant.as_deref() == caller_tenant);
        match visible {
            None => Err(AdminError::NotFound(name.to_owned())),
            Some(ep) if ep.source == EndpointSource::Config => {
                Err(AdminError::DeclaredInConfig(name.to_owned()))
            }
            Some(_) => self
                .store
                .api_endpoint(name)
                .await?
                .ok_or_else(|| AdminError::NotFound(name.to_owned())),
        }
    }

    /// Validates a row as the running config would run it (which refuses a URL whose address
    /// the SSRF rules block). A plugin binding is not checked against the plugins loaded now:
    /// as in the file, a plugin missing or of another kind is reported (the endpoint's
    /// `problems`, `GET /v1/status`, the log, a gauge) rather than refused, since plugins
    /// hot-reload and may arrive after the endpoint, and each node of a cluster has its own
    /// plugin folder.
    fn check(&self, row: &ApiEndpointRow, config: &Config) -> Result<EndpointConfig, AdminError> {
        config::api_endpoint(row, config).map_err(|refused| {
            if refused.blocked_address {
                AdminError::Blocked(refused.problems)
            } else {
                AdminError::Invalid(refused.problems)
            }
        })
    }
}

/// Keys a tenant may not set: a proxy is a host and port the gateway connects to without the
/// SSRF rules (they judge the target behind it), so only an operator chooses one.
fn admin_only_keys(body: &Map<String, Value>, caller_tenant: Option<&str>) -> Result<(), AdminError> {
    if caller_tenant.is_some() && body.get("proxy").is_some_and(|p| !p.is_null()) {
        return Err(invalid(
            "proxy",
            "only an admin key may route an endpoint through a proxy",
        ));
    }
    Ok(())
}

/// The stored keys of an endpoint (written by this module, so always an object).
fn spec_of(row: &ApiEndpointRow) -> Result<Map<String, Value>, AdminError> {
    serde_json::from_str(&row.spec).map_err(|e| AdminError::Store(StoreError::Internal(e.to_string())))
}

fn tenant_of(body: &Map<String, Value>) -> Option<String> {
    body.get("tenant").and_then(Value::as_str).map(str::to_owned)
}

/// The Svix uid among the keys (`svix.uid`), which the store keeps unique within a tenant.
fn uid_of(body: &Map<String, Value>) -> Option<String> {
    body.get("svix")?.get("uid")?.as_str().map(str::to_owned)
}

fn invalid(path: &str, reason: &str) -> AdminError {
    AdminError::Invalid(vec![Problem {
        file: "api".into(),
        line: 0,
        path: path.into(),
        reason: reason.into(),
    }])
}

/// Why a change or delete of an endpoint wrote nothing: it is gone, or changed since it was read.
fn replace_failed(e: StoreError, name: &str) -> AdminError {
    match e {
        StoreError::NotFound(_) => AdminError::NotFound(name.to_owned()),
        StoreError::Conflict(message) => AdminError::Changed(message),
        other => other.into(),
    }
}

/// A new signing secret of the endpoint's kind: `whsk_` for `signature: ed25519`, else
/// `whsec_` with 24 random bytes.
fn new_secret(body: &Map<String, Value>) -> Result<String, AdminError> {
    if body.get("signature").and_then(Value::as_str) == Some("ed25519") {
        let (secret, _) = signing::generate_ed25519()
            .map_err(|e| AdminError::Store(StoreError::Internal(e.to_string())))?;
        return Ok(secret.expose().to_owned());
    }
    let bytes: [u8; 24] = rand::random();
    Ok(format!(
        "whsec_{}",
        base64::engine::general_purpose::STANDARD.encode(bytes)
    ))
}

/// RFC 7396: `null` removes a key, an object merges into an object, anything else replaces.
fn merge_patch(target: &mut Value, patch: Value) {
    let Value::Object(patch) = patch else {
        *target = patch;
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(target) = target else {
        unreachable!()
    };
    for (key, value) in patch {
        if value.is_null() {
            target.remove(&key);
        } else {
            merge_patch(target.entry(key).or_insert(Value::Null), value);
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::merge_patch;

    #[test]
    fn a_merge_patch_removes_with_null_merges_objects_and_replaces_the_rest() {
        let mut doc =
            json!({"url": "http://a", "headers": {"x": "1", "y": "2"}, "types": ["a"], "ordered": true});
        merge_patch(
            &mut doc,
            json!({"url": "http://b", "headers": {"x": null, "z": "3"}, "types": ["b", "c"], "ordered": null}),
        );
        assert_eq!(
            doc,
            json!({"url": "http://b", "headers": {"y": "2", "z": "3"}, "types": ["b", "c"]})
        );
    }
}
