//! The running endpoints: the config file's, an overlay that a file reload replaces as a
//! whole, and those created through the API, rows of the store changed one at a time.
//!
//! The store's rows are the truth. In memory every endpoint has a [`Routing`] — what fan-out
//! and the scheduler need — in an index by name, by topic and tenant (and type), by uid; the
//! whole config of an API endpoint (URL, secrets, headers, plugin settings) is compiled from its
//! row when an attempt or a view asks for it, and the most recently used are cached. So a
//! change costs one row and one index entry, whatever the number of endpoints, and memory is a
//! few hundred bytes per endpoint plus the cache (ARCHITECTURE.md, "Endpoints at scale").
//!
//! Changes go through [`Endpoints::change`]: changes of different endpoints run at once,
//! changes of one endpoint one after another (so the index applies them in the store's
//! order), and a config reload waits for all of them and they for it.

mod index;
mod routing;

use std::collections::{BTreeMap, HashSet};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, RwLock};

use arc_swap::ArcSwap;

use crate::config::{self, BindingProblem, Config, ConfigError, EndpointConfig, EndpointSource, Problem};
use crate::store::{ApiEndpointRow, EndpointPage, Store, StoreError};

use self::index::Index;
pub use self::routing::Routing;

/// How many compiled endpoint configs are kept. A compiled config is 2 to 4 KiB; compiling
/// one again from its row takes a read and some microseconds. Endpoints being delivered hold
/// theirs while they are, cached or not.
const COMPILED_CACHED: usize = 16_384;

/// Rows read per page at start and when a cluster node reads every endpoint again.
const LOAD_PAGE: u32 = 10_000;
/// How many endpoints a refused reload names with their problems.
const MISFITS_NAMED: usize = 20;

/// How many locks changes of endpoints are spread over: two changes of different endpoints
/// rarely wait for each other.
const CHANGE_LOCKS: usize = 256;

/// The running endpoints (cheap to clone: one shared index).
#[derive(Clone)]
pub struct Endpoints(Arc<Inner>);

struct Inner {
    index: RwLock<Index>,
    compiled: quick_cache::sync::Cache<Arc<str>, Arc<EndpointConfig>>,
    store: Arc<dyn Store>,
    config: Arc<ArcSwap<Config>>,
    /// Held shared by each change of an API endpoint, exclusively by a config reload.
    gate: tokio::sync::RwLock<()>,
    changes: Box<[tokio::sync::Mutex<()>]>,
}

/// Why the endpoints could not be read at start.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the endpoints created through the API do not fit the config file:\n{0}")]
    Misfit(ConfigError),
}

/// A change of one endpoint in progress: while it is held, no other change of that endpoint
/// and no config reload runs.
pub struct Change<'a> {
    _reload: tokio::sync::RwLockReadGuard<'a, ()>,
    _endpoint: tokio::sync::MutexGuard<'a, ()>,
}

/// A config reload in progress: no endpoint changes meanwhile.
pub struct Reload<'a> {
    _gate: tokio::sync::RwLockWriteGuard<'a, ()>,
}

/// What reading one endpoint's row again did to the running set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Synced {
    Unchanged,
    Changed,
    Removed,
}

impl Endpoints {
    /// The file's endpoints of the running config, and every endpoint the store holds,
    /// compiled against that config (on every core: a million take seconds). Refused when a
    /// stored endpoint does not fit the file, as a reload would be.
    pub async fn open(store: Arc<dyn Store>, config: Arc<ArcSwap<Config>>) -> Result<Endpoints, LoadError> {
        let endpoints = Endpoints(Arc::new(Inner {
            index: RwLock::default(),
            compiled: quick_cache::sync::Cache::new(COMPILED_CACHED),
            store,
            config,
            gate: tokio::sync::RwLock::new(()),
            changes: (0..CHANGE_LOCKS).map(|_| tokio::sync::Mutex::new(())).collect(),
        }));
        let file = endpoints.0.config.load_full();
        {
            let mut index = endpoints.write();
            for ep in file.file_endpoints.values() {
                index.insert(Routing::of(ep));
            }
        }
        let problems = endpoints.load_stored(&file).await?;
        if !problems.is_empty() {
            return Err(LoadError::Misfit(ConfigError { problems }));
        }
        Ok(endpoints)
    }

    /// Reads every stored endpoint into the index, a page at a time; the problems of those that
    /// do not fit `config`. The next page is read while this one compiles, so that the start
    /// of a million endpoints keeps both cores busy.
    async fn load_stored(&self, config: &Arc<Config>) -> Result<Vec<Problem>, StoreError> {
        let mut problems = Vec::new();
        let mut after = None;
        let mut page = self.next_stored_page(&mut after).await?;
        while let Some(rows) = page {
            let shared = config.clone();
            let compiling = tokio::task::spawn_blocking(move || compile_all(&rows, &shared));
            let (compiled, next) = tokio::join!(compiling, self.next_stored_page(&mut after));
            let compiled =
                compiled.map_err(|e| StoreError::Internal(format!("compiling the stored endpoints: {e}")))?;
            let mut index = self.write();
            for result in compiled {
                match result {
                    Ok(routing) if index.get(&routing.name).is_some() => {
                        problems.push(name_taken_by_file(config_label(config), &routing.name));
                    }
                    Ok(routing) => {
                        index.insert(routing);
                    }
                    Err(misfit) => problems.extend(misfit),
                }
            }
            drop(index);
            page = next?;
        }
        Ok(problems)
    }

    /// The stored endpoints after `after` (by name), [`LOAD_PAGE`] of them, moving `after` to
    /// the last; None when there are no more.
    async fn next_stored_page(
        &self,
        after: &mut Option<String>,
    ) -> Result<Option<Vec<ApiEndpointRow>>, StoreError> {
        let page = || EndpointPage {
            after: after.clone(),
            limit: LOAD_PAGE,
            ..EndpointPage::default()
        };
        // A start does not fail because the database was cut off or busy for a moment (a
        // cluster's database under load, a restart): the read is tried again, for a while.
        let rows = crate::store::patiently("the endpoints", crate::store::START_READ_PATIENCE, || {
            self.0.store.api_endpoint_page(page())
        })
        .await?;
        *after = rows.last().map(|r| r.name.clone());
        Ok((!rows.is_empty()).then_some(rows))
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Index> {
        self.0.index.read().expect("endpoint index lock")
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Index> {
        self.0.index.write().expect("endpoint index lock")
    }

    /// The endpoint's routing, if it runs here.
    pub fn routing(&self, name: &str) -> Option<Arc<Routing>> {
        self.read().get(name).cloned()
    }

    pub fn contains(&self, name: &str) -> bool {
        self.read().get(name).is_some()
    }

    /// How many endpoints run.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The endpoints an event of `topic`, `event_type`, `tenant` and `channels` fans out to,
    /// by name, before health and content filters are considered.
    pub fn subscribers(
        &self,
        topic: &str,
        event_type: &str,
        tenant: Option<&str>,
        channels: &[String],
    ) -> Vec<Arc<Routing>> {
        self.read().subscribers(topic, event_type, tenant, channels)
    }

    /// The endpoint of `tenant` whose Svix uid is `uid`.
    pub fn by_uid(&self, tenant: Option<&str>, uid: &str) -> Option<Arc<Routing>> {
        self.read().by_uid(tenant, uid).cloned()
    }

    /// The endpoints of `tenant`, by name.
    pub fn of_tenant(&self, tenant: &str) -> Vec<Arc<Routing>> {
        self.read().of_tenant(tenant).cloned().collect()
    }

    /// How many endpoints `tenant` has.
    pub fn tenant_len(&self, tenant: &str) -> usize {
        self.read().tenant_len(tenant)
    }

    /// How many endpoints (switched off or not) subscribe to `topic`: all, or those of
    /// `tenant`.
    pub fn topic_len(&self, topic: &str, tenant: Option<&str>) -> usize {
        self.read().topic_len(topic, tenant)
    }

    /// A page of the endpoints that subscribe to `topic`, by name after `after` (see
    /// [`Endpoints::topic_len`] for `tenant`).
    pub fn topic_page(
        &self,
        topic: &str,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Vec<Arc<Routing>> {
        self.read().topic_page(topic, tenant, after, limit)
    }

    /// The ordered endpoints, by name.
    pub fn ordered(&self) -> Vec<Arc<Routing>> {
        self.read().ordered().cloned().collect()
    }

    /// Every endpoint's name. It walks them all: for a cluster node's turn (which endpoints it
    /// should deliver), never for a request.
    pub fn names(&self) -> Vec<Arc<str>> {
        self.read().all().map(|r| r.name.clone()).collect()
    }

    /// The plugin bindings that cannot work now (see [`Routing::binding_problems`]), by
    /// endpoint name: only endpoints that bind a plugin are looked at.
    pub fn binding_problems(&self, world_of: impl Fn(&str) -> Option<&'static str>) -> Vec<BindingProblem> {
        self.read()
            .with_plugins()
            .flat_map(|r| r.binding_problems(&world_of))
            .collect()
    }

    /// The endpoint's whole config, if it runs here: the file's, or an API endpoint's compiled
    /// from its stored row (cached).
    pub async fn get(&self, name: &str) -> Result<Option<Arc<EndpointConfig>>, StoreError> {
        let Some(routing) = self.routing(name) else {
            return Ok(None);
        };
        if let Some(ep) = self.cached_for(&routing) {
            return Ok(Some(ep));
        }
        let Some(row) = self.0.store.api_endpoint(name).await? else {
            return Ok(None);
        };
        let ep = Arc::new(self.compile(&row)?);
        if self.routing(name).is_some_and(|r| r.version == row.version) {
            self.0.compiled.insert(routing.name.clone(), ep.clone());
        }
        Ok(Some(ep))
    }

    /// A stored row as the running config runs it: from the cache when it holds that version.
    /// None, with a warning, for a row that does not fit the running config (a reload refuses
    /// a file that would make one, so only a row another node wrote under another file).
    pub fn compiled(&self, row: &ApiEndpointRow) -> Option<Arc<EndpointConfig>> {
        if let Some(ep) = self.0.compiled.get(row.name.as_str())
            && ep.stored.is_some_and(|s| s.version == row.version)
        {
            return Some(ep);
        }
        match self.compile(row) {
            Ok(ep) => Some(Arc::new(ep)),
            Err(e) => {
                tracing::warn!(error = %e, "an endpoint left out");
                None
            }
        }
    }

    /// The endpoint's whole config when it needs no read: a file endpoint's, or a cached one.
    pub fn cached(&self, name: &str) -> Option<Arc<EndpointConfig>> {
        self.cached_for(&*self.routing(name)?)
    }

    fn cached_for(&self, routing: &Routing) -> Option<Arc<EndpointConfig>> {
        match routing.source {
            EndpointSource::Config => self.0.config.load().file_endpoints.get(&routing.name).cloned(),
            EndpointSource::Api => self
                .0
                .compiled
                .get(&routing.name)
                .filter(|ep| ep.stored.is_some_and(|s| s.version == routing.version)),
        }
    }

    /// A stored row as the running config runs it.
    fn compile(&self, row: &ApiEndpointRow) -> Result<EndpointConfig, StoreError> {
        config::api_endpoint(row, &self.0.config.load()).map_err(|refused| {
            let problems: Vec<String> = refused.problems.iter().map(ToString::to_string).collect();
            StoreError::Internal(format!(
                "the stored endpoint `{}` does not fit the running config: {}",
                row.name,
                problems.join("; ")
            ))
        })
    }

    /// Starts a change of one endpoint (see the module's doc).
    pub async fn change(&self, name: &str) -> Change<'_> {
        let reload = self.0.gate.read().await;
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        name.hash(&mut hasher);
        let lock = &self.0.changes[hasher.finish() as usize % self.0.changes.len()];
        Change {
            _reload: reload,
            _endpoint: lock.lock().await,
        }
    }

    /// Runs `ep` (an API endpoint just stored) in place of the version running, unless a newer
    /// version runs already. Call it under the endpoint's [`Change`].
    pub fn put(&self, ep: Arc<EndpointConfig>) -> bool {
        let version = ep.stored.map_or(0, |s| s.version);
        let mut index = self.write();
        match index.get(&ep.name) {
            Some(r) if r.source == EndpointSource::Config => {
                // Another node's file may lack an endpoint this one declares: the file wins here.
                tracing::warn!(endpoint = %ep.name, "an endpoint created through the API has the name of one of this node's config file; running the file's");
                return false;
            }
            Some(r) if r.version >= version => return false,
            _ => {}
        }
        index.insert(Routing::of(&ep));
        drop(index);
        self.0.compiled.insert(ep.name.clone(), ep);
        true
    }

    /// Stops running an API endpoint (deleted). Call it under the endpoint's [`Change`].
    pub fn forget(&self, name: &str) -> bool {
        let mut index = self.write();
        if index.get(name).is_none_or(|r| r.source != EndpointSource::Api) {
            return false;
        }
        index.remove(name);
        drop(index);
        self.0.compiled.remove(name);
        true
    }

    /// Runs the endpoint as the store now holds it: for another node's change (its notice).
    pub async fn sync(&self, name: &str) -> Result<Synced, StoreError> {
        let _change = self.change(name).await;
        self.sync_row(name, self.0.store.api_endpoint(name).await?)
    }

    fn sync_row(&self, name: &str, row: Option<ApiEndpointRow>) -> Result<Synced, StoreError> {
        let Some(row) = row else {
            return Ok(if self.forget(name) {
                Synced::Removed
            } else {
                Synced::Unchanged
            });
        };
        if self.routing(name).is_some_and(|r| r.version >= row.version) {
            return Ok(Synced::Unchanged);
        }
        let ep = self.compile(&row)?;
        Ok(if self.put(Arc::new(ep)) {
            Synced::Changed
        } else {
            Synced::Unchanged
        })
    }

    /// Runs every endpoint as the store now holds it, a page at a time, and stops those it no
    /// longer holds: for a cluster node whose notices may have been missed. It walks every
    /// endpoint, so it runs only then. Answers the names of the endpoints that changed.
    pub async fn sync_all(&self) -> Result<Vec<Arc<str>>, StoreError> {
        let _reload = self.0.gate.write().await;
        let mut seen: HashSet<Arc<str>> = HashSet::new();
        let mut changed = Vec::new();
        let mut after = None;
        while let Some(rows) = self.next_stored_page(&mut after).await? {
            for row in rows {
                let name: Arc<str> = Arc::from(row.name.as_str());
                match self.sync_row(&name, Some(row)) {
                    Ok(Synced::Unchanged) => {}
                    Ok(_) => changed.push(name.clone()),
                    Err(e) => tracing::warn!(error = %e, "keeping the running version of an endpoint"),
                }
                seen.insert(name);
            }
        }
        let gone: Vec<Arc<str>> = self
            .read()
            .all()
            .filter(|r| r.source == EndpointSource::Api && !seen.contains(&r.name))
            .map(|r| r.name.clone())
            .collect();
        for name in gone {
            if self.forget(&name) {
                changed.push(name);
            }
        }
        Ok(changed)
    }

    /// Starts a config reload: it waits for the changes of endpoints in progress.
    pub async fn reload(&self) -> Reload<'_> {
        Reload {
            _gate: self.0.gate.write().await,
        }
    }

    /// Whether the endpoints created through the API fit a new config file: no name the file
    /// takes too, no topic or policy the file no longer has, and, when `allow_networks`
    /// changed, no IP address the new rules block. Only the endpoints such a change can touch
    /// are looked at (read from the store and compiled against `new`).
    pub async fn check_file(
        &self,
        _reload: &Reload<'_>,
        old: &Config,
        new: &Config,
    ) -> Result<(), ConfigError> {
        let label = config_label(new);
        let mut problems = Vec::new();
        let mut suspects: BTreeMap<Arc<str>, ()> = BTreeMap::new();
        {
            let index = self.read();
            for name in new.file_endpoints.keys() {
                if index.get(name).is_some_and(|r| r.source == EndpointSource::Api) {
                    problems.push(name_taken_by_file(label, name));
                }
            }
            let topic_gone = new_lacks(old.topics.keys(), |t| new.topics.contains_key(t));
            let policy_gone = new_lacks(old.policies.keys(), |p| new.policies.contains_key(p));
            if topic_gone.iter().any(|t| index.names_topic(t))
                || policy_gone.iter().any(|p| index.names_policy(p))
            {
                for r in index.all().filter(|r| r.source == EndpointSource::Api) {
                    let topic = r.topics.iter().any(|t| topic_gone.contains(&**t));
                    let policy = r.policy().is_some_and(|p| policy_gone.contains(p));
                    if topic || policy {
                        suspects.insert(r.name.clone(), ());
                    }
                }
            }
            if new.delivery.allow_networks != old.delivery.allow_networks {
                for r in index
                    .literal_addresses()
                    .filter(|r| r.source == EndpointSource::Api)
                {
                    suspects.insert(r.name.clone(), ());
                }
            }
        }
        let mut misfits = 0;
        for name in suspects.keys() {
            let row = match self.0.store.api_endpoint(name).await {
                Ok(Some(row)) => row,
                Ok(None) => continue,
                Err(e) => {
                    problems.push(file_problem(label, format!("cannot read endpoint `{name}`: {e}")));
                    continue;
                }
            };
            if let Err(refused) = config::api_endpoint(&row, new) {
                misfits += 1;
                if misfits <= MISFITS_NAMED {
                    problems.extend(misfit_problems(label, name, refused.problems));
                }
            }
        }
        if misfits > MISFITS_NAMED {
            problems.push(file_problem(
                label,
                format!(
                    "and {} more endpoints created through the API would not work with this file",
                    misfits - MISFITS_NAMED
                ),
            ));
        }
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError { problems })
        }
    }

    /// Runs the file endpoints of `new` in place of those of `old` (a reload already checked by
    /// [`Endpoints::check_file`]). Answers how many were added, removed and changed.
    pub fn replace_file(&self, _reload: &Reload<'_>, old: &Config, new: &Config) -> (usize, usize, usize) {
        let (before, after) = (&old.file_endpoints, &new.file_endpoints);
        let added = after.keys().filter(|k| !before.contains_key(*k)).count();
        let removed = before.keys().filter(|k| !after.contains_key(*k)).count();
        let changed = after
            .iter()
            .filter(|(k, v)| before.get(*k).is_some_and(|o| o.as_ref() != v.as_ref()))
            .count();
        let mut index = self.write();
        for name in before.keys() {
            index.remove(name);
        }
        for ep in after.values() {
            index.insert(Routing::of(ep));
        }
        (added, removed, changed)
    }
}

/// Compiles rows against `config`: each one's routing, or its problems as a file reload would
/// name them. Spread over the cores, for the thousands of rows of a start.
fn compile_all(rows: &[ApiEndpointRow], config: &Config) -> Vec<Result<Routing, Vec<Problem>>> {
    let compile = |row: &ApiEndpointRow| match config::api_endpoint(row, config) {
        Ok(ep) => Ok(Routing::of(&ep)),
        Err(refused) => Err(misfit_problems(config_label(config), &row.name, refused.problems)),
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let chunk = rows.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let parts: Vec<_> = rows
            .chunks(chunk)
            .map(|part| scope.spawn(move || part.iter().map(compile).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|p| p.join().expect("compiling endpoints does not panic"))
            .collect()
    })
}

/// The names of `old` that `has` says the new config lacks.
fn new_lacks<'a>(old: impl Iterator<Item = &'a String>, has: impl Fn(&str) -> bool) -> HashSet<&'a str> {
    old.map(String::as_str).filter(|name| !has(name)).collect()
}

fn config_label(config: &Config) -> &str {
    config
        .source
        .as_deref()
        .and_then(|p| p.to_str())
        .unwrap_or("<embedded default>")
}

fn file_problem(label: &str, reason: String) -> Problem {
    Problem {
        file: label.to_owned(),
        line: 0,
        path: String::new(),
        reason,
    }
}

fn name_taken_by_file(label: &str, name: &str) -> Problem {
    Problem {
        file: label.to_owned(),
        line: 0,
        path: format!("endpoints.{name}"),
        reason: format!(
            "the name is taken by an endpoint created through the API (GET /v1/endpoints/{name}); \
             rename this one or delete that one"
        ),
    }
}

fn misfit_problems(label: &str, name: &str, problems: Vec<Problem>) -> Vec<Problem> {
    problems
        .into_iter()
        .map(|p| {
            file_problem(
                label,
                format!(
                    "the endpoint `{name}` created through the API would not work with this file: {}: {}",
                    p.path, p.reason
                ),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests;
