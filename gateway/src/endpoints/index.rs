//! The index of the running endpoints: by name, by topic and tenant (and type) for fan-out,
//! by uid, and the few sets that operations walk (ordered endpoints, endpoints with plugins,
//! endpoints that name an IP address). Each change inserts or removes one endpoint's entries,
//! in time that does not grow with the number of endpoints, and so does a fan-out: its cost is
//! that of the endpoints the event's topic, tenant and type lead to.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::Arc;

use super::Routing;

/// The index's maps: foldhash rather than the standard SipHash, which was a sixth of a
/// million endpoints' start (the keys are names the API validated; foldhash is seeded per map).
type HashMap<K, V> = std::collections::HashMap<K, V, foldhash::quality::RandomState>;

/// Endpoints of one topic and tenant (or of none) that fan-out looks at together. Small
/// buckets (a tenant's few endpoints) are a sorted vector; a large one (thousands of endpoints
/// without a tenant on one topic) finds those that list the event's type by that type.
#[derive(Debug)]
enum Bucket {
    Few(Vec<Arc<Routing>>),
    /// Boxed: a bucket of each tenant is a `Few`, and stays as small as its vector.
    Many(Box<Many>),
}

#[derive(Debug, Default)]
struct Many {
    /// Endpoints that list only plain type names, under each of them.
    by_type: HashMap<Arc<str>, BTreeMap<Arc<str>, Arc<Routing>>>,
    /// The others: every type, or glob patterns to match.
    rest: BTreeMap<Arc<str>, Arc<Routing>>,
    len: usize,
}

/// A bucket grows into a `Many` past this many endpoints, and shrinks back below half of it.
const FEW: usize = 64;

impl Default for Bucket {
    fn default() -> Self {
        Bucket::Few(Vec::new())
    }
}

impl Bucket {
    fn len(&self) -> usize {
        match self {
            Bucket::Few(list) => list.len(),
            Bucket::Many(many) => many.len,
        }
    }

    fn insert(&mut self, routing: Arc<Routing>) {
        match self {
            Bucket::Few(list) => {
                match list.binary_search_by(|r| r.name.cmp(&routing.name)) {
                    Ok(at) => list[at] = routing,
                    Err(at) => list.insert(at, routing),
                }
                if list.len() > FEW {
                    let all = std::mem::take(list);
                    *self = Bucket::many(all);
                }
            }
            Bucket::Many(many) => {
                let Many { by_type, rest, len } = &mut **many;
                let added = match routing.types.names_only() {
                    Some(names) => {
                        let mut added = false;
                        for name in names {
                            added |= by_type
                                .entry(name.clone())
                                .or_default()
                                .insert(routing.name.clone(), routing.clone())
                                .is_none();
                        }
                        added
                    }
                    None => rest.insert(routing.name.clone(), routing).is_none(),
                };
                *len += usize::from(added);
            }
        }
    }

    fn many(all: Vec<Arc<Routing>>) -> Bucket {
        let mut bucket = Bucket::Many(Box::default());
        for routing in all {
            bucket.insert(routing);
        }
        bucket
    }

    fn remove(&mut self, routing: &Routing) {
        match self {
            Bucket::Few(list) => {
                if let Ok(at) = list.binary_search_by(|r| r.name.cmp(&routing.name)) {
                    list.remove(at);
                }
            }
            Bucket::Many(many) => {
                let Many { by_type, rest, len } = &mut **many;
                let removed = match routing.types.names_only() {
                    Some(names) => {
                        let mut removed = false;
                        for name in names {
                            if let Some(set) = by_type.get_mut(name) {
                                removed |= set.remove(&routing.name).is_some();
                                if set.is_empty() {
                                    by_type.remove(name);
                                }
                            }
                        }
                        removed
                    }
                    None => rest.remove(&routing.name).is_some(),
                };
                *len -= usize::from(removed);
                if *len < FEW / 2 {
                    let mut all: Vec<Arc<Routing>> = rest.values().cloned().collect();
                    all.extend(by_type.values().flat_map(|set| set.values().cloned()));
                    all.sort_by(|a, b| a.name.cmp(&b.name));
                    all.dedup_by(|a, b| a.name == b.name);
                    *self = Bucket::Few(all);
                }
            }
        }
    }

    /// The endpoints here that take `event_type`, into `out`.
    fn taking(&self, event_type: &str, out: &mut Vec<Arc<Routing>>) {
        match self {
            Bucket::Few(list) => {
                out.extend(list.iter().filter(|r| r.types.matches(event_type)).cloned());
            }
            Bucket::Many(many) => {
                let Many { by_type, rest, .. } = &**many;
                if let Some(set) = by_type.get(event_type) {
                    out.extend(set.values().cloned());
                }
                out.extend(rest.values().filter(|r| r.types.matches(event_type)).cloned());
            }
        }
    }
}

/// The buckets of one topic: its endpoints without a tenant, and each tenant's.
#[derive(Debug, Default)]
struct TopicBuckets {
    untenanted: Bucket,
    by_tenant: HashMap<Arc<str>, Bucket>,
}

/// An endpoint's Svix uid within its tenant (or among the endpoints without one).
type UidKey = (Option<Arc<str>>, Box<str>);

/// Every running endpoint's [`Routing`], indexed.
#[derive(Debug, Default)]
pub(super) struct Index {
    by_name: HashMap<Arc<str>, Arc<Routing>>,
    topics: HashMap<Arc<str>, TopicBuckets>,
    /// The names of the endpoints (switched off or not) of each topic; the map's keys are
    /// each topic name's one shared copy.
    by_topic: HashMap<Arc<str>, BTreeSet<Arc<str>>>,
    uids: HashMap<UidKey, Arc<str>>,
    /// Each tenant's endpoints, sorted by name (a sorted vector: most tenants have one or
    /// two, and a B-tree's node costs 200 bytes); the keys are each tenant name's one shared
    /// copy.
    tenants: HashMap<Arc<str>, Vec<Arc<str>>>,
    /// One shared copy of each event type name endpoints list.
    type_names: HashMap<Arc<str>, usize>,
    /// How many endpoints created through the API name each policy.
    policies: HashMap<Box<str>, usize>,
    ordered: BTreeSet<Arc<str>>,
    with_plugins: BTreeSet<Arc<str>>,
    literal_addresses: BTreeSet<Arc<str>>,
}

impl Index {
    pub(super) fn get(&self, name: &str) -> Option<&Arc<Routing>> {
        self.by_name.get(name)
    }

    pub(super) fn len(&self) -> usize {
        self.by_name.len()
    }

    /// Adds an endpoint, or replaces the one of its name.
    pub(super) fn insert(&mut self, mut routing: Routing) -> Arc<Routing> {
        if let Some(old) = self.by_name.get(&routing.name).cloned() {
            self.remove(&old.name);
        }
        // One copy of each tenant's and topic's name, however many endpoints name it.
        if let Some(tenant) = routing.tenant.take() {
            let shared = match self.tenants.get_key_value(&*tenant) {
                Some((shared, _)) => shared.clone(),
                None => tenant,
            };
            let names = self.tenants.entry(shared.clone()).or_default();
            if let Err(at) = names.binary_search(&routing.name) {
                names.insert(at, routing.name.clone());
            }
            routing.tenant = Some(shared);
        }
        let type_names = &mut self.type_names;
        routing.types.share_names(|name| {
            let shared = match type_names.get_key_value(&**name) {
                Some((shared, _)) => shared.clone(),
                None => name.clone(),
            };
            *type_names.entry(shared.clone()).or_insert(0) += 1;
            shared
        });
        for topic in routing.topics.iter_mut() {
            if let Some((shared, _)) = self.by_topic.get_key_value(&**topic) {
                *topic = shared.clone();
            }
            self.by_topic
                .entry(topic.clone())
                .or_default()
                .insert(routing.name.clone());
        }
        let routing = Arc::new(routing);
        let name = routing.name.clone();
        if !routing.disabled {
            for topic in routing.topics.iter() {
                let buckets = self.topics.entry(topic.clone()).or_default();
                match &routing.tenant {
                    None => buckets.untenanted.insert(routing.clone()),
                    Some(t) => buckets
                        .by_tenant
                        .entry(t.clone())
                        .or_default()
                        .insert(routing.clone()),
                }
            }
        }
        if let Some(uid) = routing.uid() {
            self.uids
                .insert((routing.tenant.clone(), Box::from(uid)), name.clone());
        }
        if let Some(policy) = routing.policy() {
            *self.policies.entry(Box::from(policy)).or_default() += 1;
        }
        for (set, member) in [
            (&mut self.ordered, routing.ordered),
            (&mut self.with_plugins, !routing.plugins().is_empty()),
            (&mut self.literal_addresses, routing.literal_address),
        ] {
            if member {
                set.insert(name.clone());
            }
        }
        self.by_name.insert(name, routing.clone());
        routing
    }

    /// Removes an endpoint; None when there was none of that name.
    pub(super) fn remove(&mut self, name: &str) -> Option<Arc<Routing>> {
        let routing = self.by_name.remove(name)?;
        for topic in routing.topics.iter().filter(|_| !routing.disabled) {
            let Some(buckets) = self.topics.get_mut(topic) else {
                continue;
            };
            match &routing.tenant {
                None => buckets.untenanted.remove(&routing),
                Some(t) => {
                    if let Some(bucket) = buckets.by_tenant.get_mut(t) {
                        bucket.remove(&routing);
                        if bucket.len() == 0 {
                            buckets.by_tenant.remove(t);
                        }
                    }
                }
            }
            if buckets.untenanted.len() == 0 && buckets.by_tenant.is_empty() {
                self.topics.remove(topic);
            }
        }
        for topic in routing.topics.iter() {
            if let Some(names) = self.by_topic.get_mut(topic) {
                names.remove(&routing.name);
                if names.is_empty() {
                    self.by_topic.remove(topic);
                }
            }
        }
        for name in routing.types.names() {
            if let Some(count) = self.type_names.get_mut(&**name) {
                *count -= 1;
                if *count == 0 {
                    self.type_names.remove(&**name);
                }
            }
        }
        if let Some(uid) = routing.uid() {
            let key = (routing.tenant.clone(), Box::from(uid));
            if self.uids.get(&key).is_some_and(|n| *n == routing.name) {
                self.uids.remove(&key);
            }
        }
        if let Some(tenant) = &routing.tenant
            && let Some(names) = self.tenants.get_mut(tenant)
        {
            if let Ok(at) = names.binary_search(&routing.name) {
                names.remove(at);
            }
            if names.is_empty() {
                self.tenants.remove(tenant);
            }
        }
        if let Some(policy) = routing.policy()
            && let Some(count) = self.policies.get_mut(policy)
        {
            *count -= 1;
            if *count == 0 {
                self.policies.remove(policy);
            }
        }
        self.ordered.remove(name);
        self.with_plugins.remove(name);
        self.literal_addresses.remove(name);
        Some(routing)
    }

    /// The endpoints an event fans out to (health and content filters aside), by name.
    pub(super) fn subscribers(
        &self,
        topic: &str,
        event_type: &str,
        tenant: Option<&str>,
        channels: &[String],
    ) -> Vec<Arc<Routing>> {
        let Some(buckets) = self.topics.get(topic) else {
            return Vec::new();
        };
        let mut found = Vec::new();
        buckets.untenanted.taking(event_type, &mut found);
        if let Some(bucket) = tenant.and_then(|t| buckets.by_tenant.get(t)) {
            bucket.taking(event_type, &mut found);
        }
        found.retain(|r| crate::model::channels_match(r.channels(), channels));
        found.sort_unstable_by(|a, b| a.name.cmp(&b.name));
        found
    }

    /// The endpoint of `tenant` with that Svix uid.
    pub(super) fn by_uid(&self, tenant: Option<&str>, uid: &str) -> Option<&Arc<Routing>> {
        let tenant = match tenant {
            Some(t) => Some(self.tenants.get_key_value(t)?.0.clone()),
            None => None,
        };
        let name = self.uids.get(&(tenant, Box::from(uid)))?;
        self.by_name.get(name)
    }

    /// The tenant's endpoints, by name.
    pub(super) fn of_tenant(&self, tenant: &str) -> impl Iterator<Item = &Arc<Routing>> {
        self.tenants
            .get(tenant)
            .into_iter()
            .flatten()
            .filter_map(|name| self.by_name.get(name))
    }

    /// How many endpoints the tenant has.
    pub(super) fn tenant_len(&self, tenant: &str) -> usize {
        self.tenants.get(tenant).map_or(0, Vec::len)
    }

    /// How many endpoints name the topic: all, or those of `tenant`.
    pub(super) fn topic_len(&self, topic: &str, tenant: Option<&str>) -> usize {
        match tenant {
            None => self.by_topic.get(topic).map_or(0, BTreeSet::len),
            Some(t) => self.of_tenant_on(t, topic).count(),
        }
    }

    /// The endpoints of `tenant` that name `topic`, by name.
    fn of_tenant_on<'a>(
        &'a self,
        tenant: &str,
        topic: &'a str,
    ) -> impl Iterator<Item = &'a Arc<Routing>> + 'a {
        self.tenants
            .get(tenant)
            .into_iter()
            .flatten()
            .filter_map(|name| self.by_name.get(name))
            .filter(move |r| r.topics.iter().any(|t| **t == *topic))
    }

    /// A page of the endpoints that name `topic`, by name after `after`: all, or those of
    /// `tenant`. Its cost is the page's, and for a tenant that of the tenant's endpoints.
    pub(super) fn topic_page(
        &self,
        topic: &str,
        tenant: Option<&str>,
        after: Option<&str>,
        limit: usize,
    ) -> Vec<Arc<Routing>> {
        let after_cursor = |name: &str| after.is_none_or(|a| name > a);
        match tenant {
            Some(t) => self
                .of_tenant_on(t, topic)
                .filter(|r| after_cursor(&r.name))
                .take(limit)
                .cloned()
                .collect(),
            None => {
                let Some(names) = self.by_topic.get(topic) else {
                    return Vec::new();
                };
                let range = match after {
                    Some(a) => names.range::<str, _>((Bound::Excluded(a), Bound::Unbounded)),
                    None => names.range::<str, _>(..),
                };
                range
                    .take(limit)
                    .filter_map(|n| self.by_name.get(n).cloned())
                    .collect()
            }
        }
    }

    /// Whether an endpoint names the policy.
    pub(super) fn names_policy(&self, policy: &str) -> bool {
        self.policies.contains_key(policy)
    }

    /// Whether an endpoint (switched off or not) names the topic.
    pub(super) fn names_topic(&self, topic: &str) -> bool {
        self.by_topic.contains_key(topic)
    }

    pub(super) fn ordered(&self) -> impl Iterator<Item = &Arc<Routing>> {
        self.ordered.iter().filter_map(|n| self.by_name.get(n))
    }

    pub(super) fn with_plugins(&self) -> impl Iterator<Item = &Arc<Routing>> {
        self.with_plugins.iter().filter_map(|n| self.by_name.get(n))
    }

    pub(super) fn literal_addresses(&self) -> impl Iterator<Item = &Arc<Routing>> {
        self.literal_addresses.iter().filter_map(|n| self.by_name.get(n))
    }

    pub(super) fn all(&self) -> impl Iterator<Item = &Arc<Routing>> {
        self.by_name.values()
    }
}
