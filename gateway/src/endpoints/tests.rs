use std::sync::Arc;

use arc_swap::ArcSwap;
use proptest::prelude::*;

use super::index::Index;
use super::*;
use crate::config::{EndpointSource, TypeFilter};
use crate::model::Timestamp;
use crate::store::{SqliteOptions, SqliteStore};

/// A routing as the index sees it, without compiling a config.
fn routing(name: &str, tenant: Option<&str>, topics: &[&str], types: &[&str], channels: &[&str]) -> Routing {
    let (patterns, names): (Vec<&str>, Vec<&str>) = types.iter().partition(|t| TypeFilter::is_pattern(t));
    let globs = (!patterns.is_empty()).then(|| {
        let mut set = globset::GlobSetBuilder::new();
        for p in &patterns {
            set.add(globset::Glob::new(p).unwrap());
        }
        Arc::new(set.build().unwrap())
    });
    Routing::bare(
        name,
        tenant,
        topics,
        TypeFilter::new(names.into_iter().map(Arc::from).collect(), globs),
        channels,
        None,
    )
}

/// What fan-out found before the index: every endpoint looked at, one by one.
fn by_walking(
    all: &[Arc<Routing>],
    topic: &str,
    event_type: &str,
    tenant: Option<&str>,
    channels: &[String],
) -> Vec<String> {
    let mut found: Vec<String> = all
        .iter()
        .filter(|r| r.receives(topic, event_type, tenant, channels))
        .map(|r| r.name.to_string())
        .collect();
    found.sort();
    found
}

fn names(found: Vec<Arc<Routing>>) -> Vec<String> {
    found.into_iter().map(|r| r.name.to_string()).collect()
}

const TENANTS: [Option<&str>; 4] = [None, Some("acme"), Some("globex"), Some("initech")];
const TYPES: [&str; 5] = [
    "invoice.paid",
    "invoice.failed",
    "user.created",
    "invoice.*",
    "*.created",
];

prop_compose! {
    fn endpoint_spec()(
        tenant in 0..TENANTS.len(),
        topics in prop::sample::subsequence(vec!["orders", "users"], 1..=2),
        types in prop::sample::subsequence(TYPES.to_vec(), 0..=2),
        channels in prop::sample::subsequence(vec!["eu", "us"], 0..=1),
        disabled in prop::bool::weighted(0.1),
    ) -> (Option<&'static str>, Vec<&'static str>, Vec<&'static str>, Vec<&'static str>, bool) {
        (TENANTS[tenant], topics, types, channels, disabled)
    }
}

proptest! {
    /// The index finds exactly the endpoints that walking every endpoint finds, for every
    /// topic, type, tenant and channel, in name order — with buckets small and large (past 64
    /// endpoints a bucket finds its endpoints by type), and after endpoints are removed again.
    #[test]
    fn the_index_routes_as_walking_every_endpoint_does(
        specs in prop::collection::vec(endpoint_spec(), 1..300),
        removed in prop::collection::vec(any::<prop::sample::Index>(), 0..150),
    ) {
        let mut index = Index::default();
        let mut all: Vec<Arc<Routing>> = Vec::new();
        for (i, (tenant, topics, types, channels, disabled)) in specs.iter().enumerate() {
            let mut r = routing(&format!("ep-{i:03}"), *tenant, topics, types, channels);
            r.disabled = *disabled;
            all.push(index.insert(r));
        }
        let check = |index: &Index, all: &[Arc<Routing>]| -> Result<(), TestCaseError> {
            for topic in ["orders", "users", "nothing"] {
                for event_type in ["invoice.paid", "invoice.failed", "user.created", "other"] {
                    for tenant in TENANTS {
                        for channels in [vec![], vec!["eu".to_owned()], vec!["us".to_owned(), "eu".to_owned()]] {
                            prop_assert_eq!(
                                names(index.subscribers(topic, event_type, tenant, &channels)),
                                by_walking(all, topic, event_type, tenant, &channels),
                                "{} {} {:?} {:?}", topic, event_type, tenant, channels
                            );
                        }
                    }
                }
            }
            Ok(())
        };
        check(&index, &all)?;
        for pick in removed {
            if all.is_empty() {
                break;
            }
            let gone = all.remove(pick.index(all.len()));
            prop_assert!(index.remove(&gone.name).is_some());
        }
        check(&index, &all)?;
        prop_assert_eq!(index.len(), all.len());
    }
}

#[test]
fn a_replaced_endpoint_leaves_nothing_of_its_old_version_behind() {
    let mut index = Index::default();
    let first = Routing::bare(
        "e",
        Some("acme"),
        &["orders"],
        TypeFilter::new(vec![Arc::from("invoice.paid")], None),
        &[],
        Some("main"),
    );
    index.insert(first);
    assert!(index.by_uid(Some("acme"), "main").is_some());
    index.insert(routing("e", Some("globex"), &["users"], &[], &[]));
    assert!(
        index
            .subscribers("orders", "invoice.paid", Some("acme"), &[])
            .is_empty()
    );
    assert_eq!(names(index.subscribers("users", "x", Some("globex"), &[])), ["e"]);
    assert!(index.by_uid(Some("acme"), "main").is_none());
    assert_eq!(index.tenant_len("acme"), 0);
    assert_eq!(index.topic_len("orders", None), 0);
    assert_eq!(index.topic_len("users", None), 1);
}

#[test]
fn a_topic_pages_by_name_for_everyone_or_one_tenant() {
    let mut index = Index::default();
    for (name, tenant) in [
        ("a", None),
        ("b", Some("acme")),
        ("c", Some("globex")),
        ("d", Some("acme")),
    ] {
        index.insert(routing(name, tenant, &["orders"], &[], &[]));
    }
    let mut off = routing("e", Some("acme"), &["orders"], &[], &[]);
    off.disabled = true;
    index.insert(off);
    assert_eq!(names(index.topic_page("orders", None, None, 2)), ["a", "b"]);
    assert_eq!(
        names(index.topic_page("orders", None, Some("b"), 10)),
        ["c", "d", "e"]
    );
    assert_eq!(
        names(index.topic_page("orders", Some("acme"), Some("b"), 10)),
        ["d", "e"]
    );
    assert_eq!(
        index.topic_len("orders", Some("acme")),
        3,
        "switched off, it still subscribes"
    );
    assert_eq!(index.topic_len("orders", None), 5);
}

// --- the running endpoints, on a store

const FILE: &str = "topics:\n  orders: {}\n  users: {}\ndelivery:\n  allow_networks: [127.0.0.0/8]\nendpoints:\n  billing:\n    url: http://127.0.0.1:9/b\n    topics: [orders]\n";

fn config(yaml: &str) -> Config {
    config::load_str(yaml, "hookgate.yaml", None, |_| None).unwrap()
}

fn row(name: &str, spec: serde_json::Value, version: u64) -> ApiEndpointRow {
    ApiEndpointRow {
        name: name.into(),
        tenant: spec["tenant"].as_str().map(str::to_owned),
        spec: spec.to_string(),
        uid: None,
        retiring: None,
        version,
        created_at: Timestamp::from_millis(1),
        updated_at: Timestamp::from_millis(version as i64),
    }
}

struct Running {
    endpoints: Endpoints,
    store: Arc<dyn Store>,
    config: Arc<ArcSwap<Config>>,
    _dir: tempfile::TempDir,
}

async fn running(rows: Vec<ApiEndpointRow>) -> Result<Running, LoadError> {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn Store> =
        Arc::new(SqliteStore::open(SqliteOptions::new(dir.path().join("db"))).unwrap());
    for r in rows {
        store.save_api_endpoint(r, None).await.unwrap();
    }
    let config = Arc::new(ArcSwap::from_pointee(config(FILE)));
    let endpoints = Endpoints::open(store.clone(), config.clone()).await?;
    Ok(Running {
        endpoints,
        store,
        config,
        _dir: dir,
    })
}

fn spec(url: &str, topics: &[&str]) -> serde_json::Value {
    serde_json::json!({"url": url, "topics": topics, "tenant": "acme"})
}

#[tokio::test]
async fn at_start_every_stored_endpoint_runs_beside_the_files() {
    let rows = (0..25)
        .map(|i| row(&format!("e{i:02}"), spec("http://127.0.0.1:9/x", &["orders"]), 1))
        .collect();
    let r = running(rows).await.unwrap();
    assert_eq!(r.endpoints.len(), 26);
    assert_eq!(r.endpoints.tenant_len("acme"), 25);
    let found = r.endpoints.subscribers("orders", "t", Some("acme"), &[]);
    assert_eq!(
        found.len(),
        26,
        "25 of the tenant's and the file's, which takes every tenant"
    );
    let ep = r
        .endpoints
        .get("e07")
        .await
        .unwrap()
        .expect("compiled from its row");
    assert_eq!(ep.stored.map(|s| s.version), Some(1));
    assert!(r.endpoints.get("nope").await.unwrap().is_none());
    assert_eq!(
        r.endpoints.get("billing").await.unwrap().unwrap().source,
        EndpointSource::Config
    );
}

#[tokio::test]
async fn a_stored_endpoint_that_does_not_fit_the_file_refuses_the_start() {
    let clash = row("billing", spec("http://127.0.0.1:9/x", &["orders"]), 1);
    let gone = row("old", spec("http://127.0.0.1:9/x", &["invoices"]), 1);
    let Err(LoadError::Misfit(e)) = running(vec![clash, gone]).await else {
        panic!("the start must be refused");
    };
    let text = e.to_string();
    assert!(text.contains("endpoints.billing: the name is taken"), "{text}");
    assert!(
        text.contains("`old` created through the API would not work with this file: topics[0]"),
        "{text}"
    );
}

#[tokio::test]
async fn a_change_applies_only_over_an_older_version_and_the_cache_follows_it() {
    let r = running(vec![row("e", spec("http://127.0.0.1:9/one", &["orders"]), 1)])
        .await
        .unwrap();
    let first = r.endpoints.get("e").await.unwrap().unwrap();
    let v2 = row("e", spec("http://127.0.0.1:9/two", &["users"]), 2);
    r.store.save_api_endpoint(v2.clone(), Some(1)).await.unwrap();
    let two = Arc::new(config::api_endpoint(&v2, &r.config.load()).unwrap());
    assert!(r.endpoints.put(two));
    assert!(!r.endpoints.put(first), "version 1 does not replace version 2");
    let now = r.endpoints.get("e").await.unwrap().unwrap();
    assert_eq!(now.destination.masked(), "http://127.0.0.1:9/two");
    assert!(
        r.endpoints
            .subscribers("orders", "t", Some("acme"), &[])
            .iter()
            .all(|x| &*x.name != "e")
    );
    assert!(r.endpoints.forget("e"));
    assert!(
        !r.endpoints.forget("billing"),
        "the file's endpoints change with the file only"
    );
    assert!(r.endpoints.get("e").await.unwrap().is_none());
}

#[tokio::test]
async fn another_nodes_change_is_read_from_the_store_by_name() {
    let r = running(vec![row("e", spec("http://127.0.0.1:9/one", &["orders"]), 1)])
        .await
        .unwrap();
    r.store
        .save_api_endpoint(row("new", spec("http://127.0.0.1:9/n", &["users"]), 1), None)
        .await
        .unwrap();
    r.store
        .save_api_endpoint(row("e", spec("http://127.0.0.1:9/two", &["orders"]), 2), Some(1))
        .await
        .unwrap();
    assert_eq!(r.endpoints.sync("new").await.unwrap(), Synced::Changed);
    assert_eq!(r.endpoints.sync("e").await.unwrap(), Synced::Changed);
    assert_eq!(r.endpoints.sync("e").await.unwrap(), Synced::Unchanged);
    assert_eq!(r.endpoints.routing("e").unwrap().version, 2);
    r.store.delete_api_endpoint("new").await.unwrap();
    assert_eq!(r.endpoints.sync("new").await.unwrap(), Synced::Removed);
    r.store.delete_api_endpoint("e").await.unwrap();
    r.store
        .save_api_endpoint(row("late", spec("http://127.0.0.1:9/l", &["orders"]), 1), None)
        .await
        .unwrap();
    let mut changed = r.endpoints.sync_all().await.unwrap();
    changed.sort();
    assert_eq!(changed, [Arc::<str>::from("e"), Arc::from("late")]);
    assert_eq!(r.endpoints.len(), 2, "billing and late");
}

#[tokio::test]
async fn a_reload_is_refused_only_for_what_it_would_break() {
    let blocked_later = row("ip", spec("http://127.0.0.1:9/x", &["users"]), 1);
    let r = running(vec![
        row("shop", spec("http://shop.example/x", &["orders"]), 1),
        blocked_later,
    ])
    .await
    .unwrap();
    let old = r.config.load_full();
    let check = async |yaml: &str| {
        let reload = r.endpoints.reload().await;
        r.endpoints.check_file(&reload, &old, &config(yaml)).await
    };
    check(FILE).await.unwrap();
    let clash = FILE.replace("billing:", "shop:");
    let e = check(&clash).await.unwrap_err().to_string();
    assert!(e.contains("endpoints.shop: the name is taken"), "{e}");
    let no_orders = "topics:\n  users: {}\ndelivery:\n  allow_networks: [127.0.0.0/8]\n";
    let e = check(no_orders).await.unwrap_err().to_string();
    assert!(e.contains("`shop` created through the API would not work"), "{e}");
    assert!(!e.contains("`ip`"), "{e}");
    let no_loopback = "topics:\n  orders: {}\n  users: {}\n";
    let e = check(no_loopback).await.unwrap_err().to_string();
    assert!(
        e.contains("`ip` created through the API would not work with this file: url"),
        "{e}"
    );
    assert!(!e.contains("`shop`"), "{e}");

    let new = config(
        "topics:\n  orders: {}\n  users: {}\ndelivery:\n  allow_networks: [127.0.0.0/8]\nendpoints:\n  audit:\n    url: http://127.0.0.1:9/a\n    topics: [users]\n",
    );
    let reload = r.endpoints.reload().await;
    assert_eq!(r.endpoints.replace_file(&reload, &old, &new), (1, 1, 0));
    assert!(r.endpoints.routing("billing").is_none());
    assert!(r.endpoints.routing("audit").is_some());
    assert!(r.endpoints.routing("shop").is_some(), "the API's endpoints stay");
}
