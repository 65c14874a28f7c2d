//! What the running gateway keeps in memory of every endpoint: what routing an event and
//! scheduling its deliveries need, and no more. An endpoint's whole config (its URL, secrets,
//! headers, plugins' settings) is compiled from its stored row when an attempt or a view needs
//! it; a million endpoints would not fit in memory compiled (2 to 4 KiB each), while a routing
//! is a few hundred bytes.

use std::net::IpAddr;
use std::sync::Arc;

use crate::config::{BindingProblem, EndpointConfig, EndpointSource, FinalFailure, TypeFilter};
use crate::delivery::OutboundAuth;
use crate::filter::Filter;
use crate::store::Target;

/// An endpoint as routing and scheduling see it. What most endpoints leave unset (limits, a
/// policy of their own, a content filter, channels, a uid, plugins) is kept apart, boxed, so
/// that a million endpoints without them cost a hundred-odd bytes each here.
#[derive(Debug)]
pub struct Routing {
    pub name: Arc<str>,
    pub tenant: Option<Arc<str>>,
    pub topics: Box<[Arc<str>]>,
    pub types: TypeFilter,
    /// The stored row's version (0 for the file's endpoints): a change is applied only over an
    /// older version, and a compiled config is used only for the version it was compiled from.
    pub version: u64,
    /// Switched off by its owner: no event fans out to it.
    pub disabled: bool,
    pub ordered: bool,
    /// What an ordered endpoint's key does when its head finally fails.
    pub on_final_failure: FinalFailure,
    pub dead_letter: bool,
    pub source: EndpointSource,
    /// Its URL, or its OAuth2 token URL, names an IP address: whether the SSRF rules let the
    /// gateway contact it depends on `delivery.allow_networks`, which a reload may change.
    pub literal_address: bool,
    extras: Option<Box<Extras>>,
}

/// The settings of [`Routing`] that most endpoints leave unset.
#[derive(Debug, Default, PartialEq)]
struct Extras {
    channels: Box<[String]>,
    max_in_flight: Option<u32>,
    max_per_second: Option<f64>,
    policy: Option<Box<str>>,
    filter: Option<Arc<Filter>>,
    uid: Option<Box<str>>,
    plugins: Box<[(&'static str, Box<str>)]>,
}

impl Routing {
    /// The routing of a compiled endpoint.
    pub fn of(ep: &EndpointConfig) -> Routing {
        let plugins = [
            ("transform", &ep.transform),
            ("signer", &ep.signer),
            ("backoff", &ep.backoff),
        ]
        .into_iter()
        .filter_map(|(role, b)| b.as_ref().map(|b| (role, Box::from(b.plugin.as_str()))))
        .collect();
        let extras = Extras {
            channels: ep.channels.clone().into_boxed_slice(),
            max_in_flight: ep.max_in_flight,
            max_per_second: ep.max_per_second,
            policy: ep.policy.as_deref().map(Box::from),
            filter: ep.filter.clone(),
            uid: ep.svix_uid.as_deref().map(Box::from),
            plugins,
        };
        Routing {
            name: ep.name.clone(),
            tenant: ep.tenant.clone(),
            topics: ep.topics.iter().map(|t| Arc::from(t.as_str())).collect(),
            types: ep.type_filter().clone(),
            version: ep.stored.map_or(0, |s| s.version),
            disabled: ep.disabled,
            ordered: ep.ordered,
            on_final_failure: ep.on_final_failure,
            dead_letter: ep.dead_letter,
            source: ep.source,
            literal_address: names_an_address(ep),
            extras: (extras != Extras::default()).then(|| Box::new(extras)),
        }
    }

    /// A routing of these names and filters and nothing else set, for the index's tests.
    #[cfg(test)]
    pub(super) fn bare(
        name: &str,
        tenant: Option<&str>,
        topics: &[&str],
        types: TypeFilter,
        channels: &[&str],
        uid: Option<&str>,
    ) -> Routing {
        let extras = Extras {
            channels: channels.iter().map(|c| (*c).to_owned()).collect(),
            uid: uid.map(Box::from),
            ..Extras::default()
        };
        Routing {
            name: Arc::from(name),
            tenant: tenant.map(Arc::from),
            topics: topics.iter().map(|t| Arc::from(*t)).collect(),
            types,
            version: 1,
            disabled: false,
            ordered: false,
            on_final_failure: FinalFailure::Skip,
            dead_letter: false,
            source: EndpointSource::Api,
            literal_address: false,
            extras: (extras != Extras::default()).then(|| Box::new(extras)),
        }
    }

    /// It receives only events naming one of these (none: every event).
    pub fn channels(&self) -> &[String] {
        self.extras.as_ref().map_or(&[], |e| &e.channels)
    }

    pub fn max_in_flight(&self) -> Option<u32> {
        self.extras.as_ref().and_then(|e| e.max_in_flight)
    }

    pub fn max_per_second(&self) -> Option<f64> {
        self.extras.as_ref().and_then(|e| e.max_per_second)
    }

    /// Its own retry policy's name.
    pub fn policy(&self) -> Option<&str> {
        self.extras.as_ref().and_then(|e| e.policy.as_deref())
    }

    /// Its content filter, compiled.
    pub fn filter(&self) -> Option<&Arc<Filter>> {
        self.extras.as_ref().and_then(|e| e.filter.as_ref())
    }

    /// The Svix API's uid.
    pub fn uid(&self) -> Option<&str> {
        self.extras.as_ref().and_then(|e| e.uid.as_deref())
    }

    /// The plugins it binds, by role (`transform`, `signer`, `backoff`).
    pub fn plugins(&self) -> &[(&'static str, Box<str>)] {
        self.extras.as_ref().map_or(&[], |e| &e.plugins)
    }

    /// Where a delivery to this endpoint goes, as the store records it.
    pub fn target(&self) -> Target {
        Target {
            endpoint: self.name.clone(),
            tenant: self.tenant.clone(),
            ordered: self.ordered,
        }
    }

    /// Whether an event fans out to this endpoint (health and content filter aside): of one of
    /// its topics, of a type it takes, of its tenant (or it has none), on its channels, and it
    /// is not switched off.
    pub fn receives(&self, topic: &str, event_type: &str, tenant: Option<&str>, channels: &[String]) -> bool {
        !self.disabled
            && self.topics.iter().any(|t| **t == *topic)
            && self.types.matches(event_type)
            && self.accepts_tenant(tenant)
            && crate::model::channels_match(self.channels(), channels)
    }

    /// A tenant's endpoint takes only its tenant's events; one without a tenant everyone's.
    pub fn accepts_tenant(&self, tenant: Option<&str>) -> bool {
        self.tenant.as_deref().is_none_or(|own| Some(own) == tenant)
    }

    /// Its plugin bindings that cannot work now: `world_of(name)` is the kind a loaded plugin
    /// is (`transformer`, `signer`, `backoff`), None for one not loaded.
    pub fn binding_problems(&self, world_of: impl Fn(&str) -> Option<&'static str>) -> Vec<BindingProblem> {
        self.plugins()
            .iter()
            .filter_map(|(role, plugin)| {
                let problem = BindingProblem {
                    endpoint: self.name.clone(),
                    role,
                    plugin: plugin.to_string(),
                    loaded_as: world_of(plugin),
                };
                (problem.loaded_as != Some(problem.expected_world())).then_some(problem)
            })
            .collect()
    }
}

/// Whether the endpoint's URL or its OAuth2 token URL names an IP address rather than a host.
fn names_an_address(ep: &EndpointConfig) -> bool {
    let literal = |host: &str| {
        host.trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
            .is_ok()
    };
    ep.destination.host().is_some_and(literal)
        || matches!(ep.auth(), Some(OutboundAuth::OAuth2(client))
                if client.token_url.host().is_some_and(literal))
}
