//! The event type catalog: the types of events apps send, each with a description and,
//! optionally, JSON Schemas of its payload by version (`{"1": {...}}`, Svix's form). A payload
//! of a type with a schema is checked against its latest version when it is ingested, through
//! hookgate's API and the Svix API alike; a type without a schema (or not in the catalog)
//! takes any payload.
//!
//! Ingestion reads the compiled schemas from memory. Changes made on this node apply at once;
//! a change made on another node of a cluster applies here within [`CACHE_FOR`], when the
//! cache is read again from the store.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use serde_json::Value;

use crate::clock::Clock;
use crate::model::Timestamp;
use crate::store::{EventTypeRow, Store, StoreError};

/// How long the compiled schemas are used before they are read again.
pub const CACHE_FOR: Duration = Duration::from_secs(1);

/// Types listed per read when the cache is filled.
const PAGE: u32 = 500;

#[derive(Debug, thiserror::Error)]
pub enum CatalogError {
    /// A field of the request; `field` names it.
    #[error("{field}: {reason}")]
    Invalid { field: &'static str, reason: String },
    #[error("no event type `{0}`")]
    NotFound(String),
    #[error("an event type named `{0}` exists")]
    Exists(String),
    /// The payload breaks its type's schema: each place and what is wrong there.
    #[error("the payload does not match the schema of event type `{event_type}`: {}", .problems.join("; "))]
    PayloadInvalid {
        event_type: String,
        problems: Vec<String>,
    },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// What a request may set on an event type; None leaves a field as it is (or empty, for a
/// new type).
#[derive(Debug, Clone, Default)]
pub struct EventTypeChange {
    pub description: Option<String>,
    pub archived: Option<bool>,
    pub deprecated: Option<bool>,
    /// Some(None) removes the schemas.
    pub schemas: Option<Option<Value>>,
    pub feature_flags: Option<Vec<String>>,
    pub group_name: Option<Option<String>>,
}

#[derive(Clone)]
pub struct EventTypes {
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    /// Read on every ingestion without a lock.
    cache: Arc<ArcSwapOption<Compiled>>,
    /// One reader fills the cache at a time; the others wait for its result.
    filling: Arc<tokio::sync::Mutex<()>>,
}

/// The catalog's schemas, compiled, and when they were read.
struct Compiled {
    read_at: Instant,
    schemas: boon::Schemas,
    /// The latest schema of each type that has one.
    index: HashMap<String, boon::SchemaIndex>,
}

impl EventTypes {
    pub fn new(store: Arc<dyn Store>, clock: Arc<dyn Clock>) -> EventTypes {
        EventTypes {
            store,
            clock,
            cache: Arc::default(),
            filling: Arc::default(),
        }
    }

    pub async fn get(&self, name: &str) -> Result<EventTypeRow, CatalogError> {
        self.store
            .event_type(name)
            .await?
            .ok_or_else(|| CatalogError::NotFound(name.to_owned()))
    }

    /// Creates a type ([`CatalogError::Exists`] when the name is taken).
    pub async fn create(&self, name: &str, change: EventTypeChange) -> Result<EventTypeRow, CatalogError> {
        valid_name(name)?;
        let now = self.clock.now();
        let row = apply(empty(name, now), change, now)?;
        self.store
            .save_event_type(row.clone(), None)
            .await
            .map_err(|e| match e {
                StoreError::Conflict(_) => CatalogError::Exists(name.to_owned()),
                other => other.into(),
            })?;
        self.forget();
        Ok(row)
    }

    /// Changes a type's fields (`create_missing`: makes it when there is none, as Svix's
    /// upsert does).
    pub async fn update(
        &self,
        name: &str,
        change: EventTypeChange,
        create_missing: bool,
    ) -> Result<EventTypeRow, CatalogError> {
        let Some(current) = self.store.event_type(name).await? else {
            return if create_missing {
                self.create(name, change).await
            } else {
                Err(CatalogError::NotFound(name.to_owned()))
            };
        };
        let previous = current.updated_at;
        let now = self.clock.now().max(previous.plus(Duration::from_millis(1)));
        let row = apply(current, change, now)?;
        self.store.save_event_type(row.clone(), Some(previous)).await?;
        self.forget();
        Ok(row)
    }

    /// Archives a type (it stays in the catalog, hidden from lists by default), or with
    /// `expunge` removes it.
    pub async fn delete(&self, name: &str, expunge: bool) -> Result<(), CatalogError> {
        if expunge {
            self.store.delete_event_type(name).await.map_err(|e| match e {
                StoreError::NotFound(_) => CatalogError::NotFound(name.to_owned()),
                other => other.into(),
            })?;
            self.forget();
            return Ok(());
        }
        let change = EventTypeChange {
            archived: Some(true),
            ..EventTypeChange::default()
        };
        self.update(name, change, false).await.map(|_| ())
    }

    /// Checks a JSON payload of `event_type` against the type's latest schema, if it has one.
    pub async fn check(&self, event_type: &str, payload: &[u8]) -> Result<(), CatalogError> {
        self.fill_cache().await?;
        let guard = self.cache.load();
        let Some(compiled) = guard.as_ref() else {
            return Ok(());
        };
        let Some(index) = compiled.index.get(event_type) else {
            return Ok(());
        };
        let Ok(instance) = serde_json::from_slice::<Value>(payload) else {
            return Err(CatalogError::PayloadInvalid {
                event_type: event_type.to_owned(),
                problems: vec!["the payload is not JSON".into()],
            });
        };
        match compiled.schemas.validate(&instance, *index) {
            Ok(()) => Ok(()),
            Err(e) => Err(CatalogError::PayloadInvalid {
                event_type: event_type.to_owned(),
                problems: leaf_problems(&e),
            }),
        }
    }

    /// Makes the next check read the catalog again.
    fn forget(&self) {
        self.cache.store(None);
    }

    async fn fill_cache(&self) -> Result<(), CatalogError> {
        let fresh = || {
            self.cache
                .load()
                .as_ref()
                .is_some_and(|c| c.read_at.elapsed() < CACHE_FOR)
        };
        if fresh() {
            return Ok(());
        }
        let _filling = self.filling.lock().await;
        if fresh() {
            return Ok(());
        }
        let mut rows = Vec::new();
        let mut after = None;
        loop {
            let page = self.store.event_types(after.clone(), PAGE, true, false).await?;
            let done = page.len() < PAGE as usize;
            after = page.last().map(|r| r.name.clone());
            rows.extend(page.into_iter().filter(|r| r.schemas.is_some()));
            if done {
                break;
            }
        }
        let mut compiled = Compiled {
            read_at: Instant::now(),
            schemas: boon::Schemas::new(),
            index: HashMap::new(),
        };
        for row in rows {
            let latest = row
                .schemas
                .as_deref()
                .and_then(|text| serde_json::from_str::<Value>(text).ok())
                .and_then(|schemas| latest_schema(&schemas).cloned());
            // Every stored schema compiled when it was saved; one that no longer would (never
            // written by this gateway) checks nothing rather than refusing every event.
            if let Some(schema) = latest
                && let Ok(index) = compile(&row.name, schema, &mut compiled.schemas)
            {
                compiled.index.insert(row.name, index);
            }
        }
        self.cache.store(Some(Arc::new(compiled)));
        Ok(())
    }
}

/// A new type: no description, nothing set.
fn empty(name: &str, now: Timestamp) -> EventTypeRow {
    EventTypeRow {
        name: name.to_owned(),
        description: String::new(),
        archived: false,
        deprecated: false,
        schemas: None,
        feature_flags: None,
        group_name: None,
        created_at: now,
        updated_at: now,
    }
}

/// `row` with `change` applied, its schemas checked.
fn apply(
    mut row: EventTypeRow,
    change: EventTypeChange,
    now: Timestamp,
) -> Result<EventTypeRow, CatalogError> {
    if let Some(description) = change.description {
        row.description = description;
    }
    if let Some(archived) = change.archived {
        row.archived = archived;
    }
    if let Some(deprecated) = change.deprecated {
        row.deprecated = deprecated;
    }
    if let Some(schemas) = change.schemas {
        row.schemas = match schemas {
            None | Some(Value::Null) => None,
            Some(schemas) => Some(valid_schemas(&row.name, schemas)?),
        };
    }
    if let Some(flags) = change.feature_flags {
        for flag in &flags {
            valid_label("featureFlags", flag)?;
        }
        row.feature_flags = (!flags.is_empty()).then(|| Value::from(flags).to_string());
    }
    if let Some(group) = change.group_name {
        if let Some(group) = &group {
            valid_label("groupName", group)?;
        }
        row.group_name = group;
    }
    row.updated_at = now;
    Ok(row)
}

/// Svix's rule for event type names: 1-256 characters of a-z, A-Z, 0-9, `.`, `_`, `-`.
pub fn valid_name(name: &str) -> Result<(), CatalogError> {
    valid_label("name", name)
}

/// What [`is_svix_name`] asks, said to a caller whose name it refused.
pub const SVIX_NAME_RULE: &str = "1-256 characters of a-z, A-Z, 0-9, `.`, `_`, `-`";

/// Svix's rule for its names (event types, `uid`s, channels, tags, `eventId`s).
pub fn is_svix_name(text: &str) -> bool {
    !text.is_empty()
        && text.len() <= 256
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

fn valid_label(field: &'static str, text: &str) -> Result<(), CatalogError> {
    if is_svix_name(text) {
        Ok(())
    } else {
        Err(CatalogError::Invalid {
            field,
            reason: format!("`{text}` must be {SVIX_NAME_RULE}"),
        })
    }
}

/// The schemas as stored: an object of versions, each a JSON Schema that compiles.
fn valid_schemas(name: &str, schemas: Value) -> Result<String, CatalogError> {
    let invalid = |reason: String| CatalogError::Invalid {
        field: "schemas",
        reason,
    };
    let Value::Object(versions) = &schemas else {
        return Err(invalid(
            "must be an object of versions, e.g. {\"1\": {\"type\": \"object\"}}".into(),
        ));
    };
    for (version, schema) in versions {
        compile(name, schema.clone(), &mut boon::Schemas::new()).map_err(|reason| {
            invalid(format!(
                "version `{version}` is not a usable JSON Schema: {reason:#}"
            ))
        })?;
    }
    Ok(schemas.to_string())
}

/// The schema of the highest version: versions are numbers (`"1"`, `"2"`), else compared as
/// text.
fn latest_schema(schemas: &Value) -> Option<&Value> {
    let versions = schemas.as_object()?;
    versions
        .iter()
        .max_by(|(a, _), (b, _)| match (a.parse::<u64>(), b.parse::<u64>()) {
            (Ok(a), Ok(b)) => a.cmp(&b),
            _ => a.cmp(b),
        })
        .map(|(_, schema)| schema)
}

/// Refuses every `$ref` outside the schema itself: a schema must not make the gateway read a
/// file or fetch a URL.
struct NoExternalRefs;

impl boon::UrlLoader for NoExternalRefs {
    fn load(&self, url: &str) -> Result<Value, Box<dyn std::error::Error>> {
        Err(format!("`$ref` to `{url}`: only references inside the schema are allowed").into())
    }
}

fn compile(
    name: &str,
    schema: Value,
    into: &mut boon::Schemas,
) -> Result<boon::SchemaIndex, Box<boon::CompileError>> {
    let url = format!("urn:hookgate:event-type:{name}");
    let mut compiler = boon::Compiler::new();
    compiler.set_default_draft(boon::Draft::V2020_12);
    compiler.use_loader(Box::new(NoExternalRefs));
    compiler.add_resource(&url, schema).map_err(Box::new)?;
    compiler.compile(&url, into).map_err(Box::new)
}

/// Each innermost failure of a validation: where in the payload, and what is wrong there.
fn leaf_problems(error: &boon::ValidationError) -> Vec<String> {
    if error.causes.is_empty() {
        let at = error.instance_location.to_string();
        let at = if at.is_empty() { "/".to_owned() } else { at };
        return vec![format!("at `{at}`: {}", error.kind)];
    }
    error.causes.iter().flat_map(leaf_problems).collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn compiled(schema: Value) -> (boon::Schemas, boon::SchemaIndex) {
        let mut schemas = boon::Schemas::new();
        let index = compile("t", schema, &mut schemas).unwrap();
        (schemas, index)
    }

    #[test]
    fn a_failure_names_each_place_in_the_payload_and_what_is_wrong() {
        let (schemas, index) = compiled(json!({
            "type": "object",
            "required": ["email"],
            "properties": {"email": {"type": "string"}, "age": {"type": "integer", "minimum": 0}}
        }));
        let bad = json!({"age": -1});
        let problems = leaf_problems(&schemas.validate(&bad, index).unwrap_err());
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems
                .iter()
                .any(|p| p.starts_with("at `/`:") && p.contains("email")),
            "{problems:?}"
        );
        assert!(
            problems.iter().any(|p| p.starts_with("at `/age`:")),
            "{problems:?}"
        );
        assert!(schemas.validate(&json!({"email": "a@b.c"}), index).is_ok());
    }

    #[test]
    fn the_latest_version_is_the_highest_number() {
        let schemas = json!({"2": {"type": "string"}, "10": {"type": "object"}, "1": {}});
        assert_eq!(latest_schema(&schemas), Some(&json!({"type": "object"})));
    }

    #[test]
    fn a_schema_may_not_reach_outside_itself_and_must_be_a_schema() {
        let outside = json!({"1": {"$ref": "file:///etc/passwd"}});
        let err = valid_schemas("t", outside).unwrap_err().to_string();
        assert!(err.contains("only references inside the schema"), "{err}");
        let inside = json!({"1": {"$defs": {"n": {"type": "integer"}}, "$ref": "#/$defs/n"}});
        assert!(valid_schemas("t", inside).is_ok());
        let not_a_schema = json!({"1": {"type": "colour"}});
        assert!(valid_schemas("t", not_a_schema).is_err());
        assert!(valid_schemas("t", json!([1])).is_err());
    }
}
