//! Endpoints created, changed and deleted through the API (`source: api`), kept in the store.
//!
//! Every change is validated like the config file's endpoints, written to the store, and then
//! the running config takes the store's endpoints again ([`EndpointAdmin::refresh`]), so that
//! what runs is always what the store holds — on this node, and on the others of a cluster,
//! which refresh when the store tells them. The handlers in `api/endpoints.rs` are thin.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{Map, Value};

use crate::clock::Clock;
use crate::config::{self, Config, ConfigError, EndpointConfig, EndpointSource, Problem};
use crate::delivery::signing;
use crate::model::Timestamp;
use crate::reload::Reloader;
use crate::store::{ApiEndpointRow, Store, StoreError};

/// How long a rotated-out secret keeps signing when the request does not say.
pub const DEFAULT_OVERLAP: Duration = Duration::from_secs(24 * 3600);

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
    #[error("an endpoint named `{0}` exists")]
    NameTaken(String),
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

#[derive(Clone)]
pub struct EndpointAdmin {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) reloader: Reloader,
    pub(crate) clock: Arc<dyn Clock>,
}

impl EndpointAdmin {
    fn config(&self) -> Arc<Config> {
        self.reloader.config.load_full()
    }

    /// Creates an endpoint from the file's endpoint keys plus `name`, for `tenant` when the
    /// caller is a tenant's. A missing name becomes `ep_<ulid>`, a missing secret a new one.
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
        let config = self.config();
        if config.endpoints.contains_key(name.as_str()) {
            return Err(AdminError::NameTaken(name));
        }
        let now = self.clock.now();
        let row = ApiEndpointRow {
            tenant: tenant_of(&body),
            name,
            spec: Value::Object(body).to_string(),
            retiring: None,
            created_at: now,
            updated_at: now,
        };
        self.check(&row, &config)?;
        let name = row.name.clone();
        self.store
            .save_api_endpoint(row, None)
            .await
            .map_err(|e| match e {
                StoreError::Conflict(_) => AdminError::NameTaken(name.clone()),
                other => other.into(),
            })?;
        Ok(Saved {
            endpoint: self.refreshed(&name).await?,
            secret,
        })
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
        let mut row = self.row(name, caller_tenant)?;
        if patch.get("name").is_some_and(|n| n.as_str() != Some(name)) {
            return Err(invalid("name", "an endpoint's name cannot change"));
        }
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
        row.spec = Value::Object(body).to_string();
        self.replace(row, self.clock.now(), None).await
    }

    /// Deletes an endpoint: its waiting deliveries end `failed` with `endpoint_removed`, its
    /// deliveries and history stay readable until retention removes them.
    pub async fn delete(&self, name: &str, caller_tenant: Option<&str>) -> Result<(), AdminError> {
        self.row(name, caller_tenant)?;
        self.store
            .delete_api_endpoint(name)
            .await
            .map_err(|e| replace_failed(e, name))?;
        self.refresh().await?;
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
        let mut row = self.row(name, caller_tenant)?;
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
        row.retiring = old
            .filter(|_| !overlap.is_zero())
            .map(|old| (old, now.plus(overlap)));
        row.spec = Value::Object(spec).to_string();
        self.replace(row, now, Some(new)).await
    }

    /// Writes a changed row over the version it was read at (`row.updated_at`), then runs it.
    async fn replace(
        &self,
        mut row: ApiEndpointRow,
        now: Timestamp,
        secret: Option<String>,
    ) -> Result<Saved, AdminError> {
        let previous = std::mem::replace(&mut row.updated_at, now);
        self.check(&row, &self.config())?;
        let name = row.name.clone();
        self.store
            .save_api_endpoint(row, Some(previous))
            .await
            .map_err(|e| replace_failed(e, &name))?;
        Ok(Saved {
            endpoint: self.refreshed(&name).await?,
            secret,
        })
    }

    /// Makes the running config take the store's endpoints: after a change here, when another
    /// node announces one, and at start.
    pub async fn refresh(&self) -> Result<(), AdminError> {
        let rows = self.store.api_endpoints().await?;
        self.reloader.apply_api_endpoints(rows).map_err(|e: ConfigError| {
            AdminError::Store(StoreError::Internal(format!(
                "the stored endpoints do not fit the running config: {e}"
            )))
        })
    }

    async fn refreshed(&self, name: &str) -> Result<Arc<EndpointConfig>, AdminError> {
        self.refresh().await?;
        self.config()
            .endpoints
            .get(name)
            .cloned()
            .ok_or_else(|| AdminError::NotFound(name.to_owned()))
    }

    /// The stored row of an `api` endpoint the caller may change.
    fn row(&self, name: &str, caller_tenant: Option<&str>) -> Result<ApiEndpointRow, AdminError> {
        let config = self.config();
        let visible = config
            .endpoints
            .get(name)
            .filter(|ep| caller_tenant.is_none() || ep.tenant.as_deref() == caller_tenant);
        match visible {
            None => Err(AdminError::NotFound(name.to_owned())),
            Some(ep) if ep.source == EndpointSource::Config => {
                Err(AdminError::DeclaredInConfig(name.to_owned()))
            }
            Some(_) => config
                .api_endpoints
                .iter()
                .find(|r| r.name == name)
                .cloned()
                .ok_or_else(|| AdminError::NotFound(name.to_owned())),
        }
    }

    /// Validates a row as the running config would run it (which refuses a URL whose address
    /// the SSRF rules block); its plugins must be loaded, as their role's kind.
    fn check(&self, row: &ApiEndpointRow, config: &Config) -> Result<(), AdminError> {
        let endpoint = config::api_endpoint(row, config).map_err(|refused| {
            if refused.blocked_address {
                AdminError::Blocked(refused.problems)
            } else {
                AdminError::Invalid(refused.problems)
            }
        })?;
        let plugins = &self.reloader.plugins;
        let missing: Vec<Problem> = endpoint
            .binding_problems(|name| plugins.world_of(name).map(|w| w.as_str()))
            .into_iter()
            .map(|p| Problem {
                file: "api".into(),
                line: 0,
                path: p.role.into(),
                reason: match p.loaded_as {
                    None => format!("no plugin `{}` is loaded (GET /v1/plugins lists them)", p.plugin),
                    Some(kind) => format!("plugin `{}` is a {kind}, not a {}", p.plugin, p.expected_world()),
                },
            })
            .collect();
        if !missing.is_empty() {
            return Err(AdminError::Invalid(missing));
        }
        Ok(())
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
