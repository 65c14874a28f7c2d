//! Endpoints as many customers make them: concurrent creates each answered for what happened,
//! lists that page, topics that count their subscribers (README "HTTP API").

use std::collections::{BTreeMap, BTreeSet};

use futures_util::future::join_all;
use serde_json::{Value, json};

use crate::support::{TestGateway, deliveries_of};

const TOPICS: &str = "topics:\n  orders: {}\n  users: {}\n";

/// Every page of `GET /v1/endpoints?{query}`, from the first to the last, with what happens
/// between two pages (`between`, given the page's number).
async fn every_page(gw: &TestGateway, query: &str, mut between: impl AsyncFnMut(usize)) -> Vec<Vec<String>> {
    let mut pages = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let path = match &cursor {
            Some(c) => format!("/v1/endpoints?{query}&cursor={c}"),
            None => format!("/v1/endpoints?{query}"),
        };
        let (status, page) = gw.get(&path).await;
        assert_eq!(status, 200, "{page}");
        let names: Vec<String> = page["endpoints"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                assert!(e.get("history").is_none(), "a page leaves history out: {e}");
                e["name"].as_str().unwrap().to_owned()
            })
            .collect();
        pages.push(names);
        match page["next_cursor"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => return pages,
        }
        between(pages.len()).await;
    }
}

/// Many creates at once, some of them of the same name: each one that answers 201 (with its
/// secret) made an endpoint that exists, runs and receives events; each one that does not made
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_creates_answer_201_exactly_when_the_endpoint_exists() {
    let gw = TestGateway::start(TOPICS).await;
    let names: Vec<String> = (0..160)
        .map(|i| format!("c-{:03}", if i % 4 == 3 { i - 1 } else { i }))
        .collect();
    let answers = join_all(names.iter().map(|name| {
        gw.post(
            "/v1/endpoints",
            json!({"name": name, "url": "http://127.0.0.1:9/x", "topics": ["orders"]}),
        )
    }))
    .await;
    let mut created: BTreeMap<&str, usize> = BTreeMap::new();
    for (name, (status, body)) in names.iter().zip(&answers) {
        match status {
            201 => {
                assert!(
                    body["secret"].as_str().is_some_and(|s| s.starts_with("whsec_")),
                    "{body}"
                );
                *created.entry(name).or_default() += 1;
            }
            409 => assert_eq!(body["error"]["code"], "name_taken", "{body}"),
            other => panic!("{name}: {other} {body}"),
        }
    }
    let distinct: BTreeSet<&str> = names.iter().map(String::as_str).collect();
    assert_eq!(created.len(), distinct.len(), "every name was created once");
    assert!(created.values().all(|n| *n == 1), "{created:?}");
    for name in &distinct {
        let (status, view) = gw.get(&format!("/v1/endpoints/{name}")).await;
        assert_eq!(status, 200, "{name}: {view}");
    }
    // And each runs: one event reaches every one of them.
    let answer = gw.ingest("orders", "order.created", json!({"n": 1})).await;
    assert_eq!(answer["deliveries"], distinct.len(), "{answer}");
    let listed: Vec<String> = every_page(&gw, "limit=500", async |_| {}).await.concat();
    assert_eq!(
        listed.iter().map(String::as_str).collect::<BTreeSet<_>>(),
        distinct
    );
}

/// Pages by name: every endpoint that exists from the first page to the last is on exactly one
/// page, while others are created before and after the cursor and deleted between pages.
#[tokio::test]
async fn each_endpoint_is_on_exactly_one_page_while_others_come_and_go() {
    let gw = TestGateway::start(TOPICS).await;
    let create = async |name: String| {
        let (status, body) = gw
            .post(
                "/v1/endpoints",
                json!({"name": name, "url": "http://127.0.0.1:9/x", "topics": ["orders"]}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    };
    for i in 0..90 {
        create(format!("keep-{i:03}")).await;
        if i % 3 == 0 {
            create(format!("gone-{i:03}")).await;
        }
    }
    let mut added = 0;
    let pages = every_page(&gw, "limit=7", async |page| {
        // Names sort before and after any cursor ("a-", "keep-…x", "z-").
        for name in [
            format!("a-{page}"),
            format!("keep-{:03}x", page * 6),
            format!("z-{page}"),
        ] {
            create(name).await;
            added += 1;
        }
        let (status, _) = gw
            .delete(&format!("/v1/endpoints/gone-{:03}", (page % 30) * 3))
            .await;
        assert!(status == 204 || status == 404);
    })
    .await;
    assert!(pages.len() > 12, "{} pages", pages.len());
    assert!(pages.iter().all(|p| p.len() <= 7));
    let all: Vec<String> = pages.concat();
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(all, sorted, "pages follow each other in name order");
    let distinct: BTreeSet<&String> = all.iter().collect();
    assert_eq!(distinct.len(), all.len(), "no endpoint on two pages");
    for i in 0..90 {
        let name = format!("keep-{i:03}");
        assert!(distinct.contains(&name), "{name} missing");
    }
    assert!(added > 0);
}

/// A tenant's list, one topic's subscribers and the topic's count page the same way, and a bad
/// cursor or limit is a clear 400.
#[tokio::test]
async fn a_tenants_list_and_a_topics_subscribers_page_and_topics_count_them() {
    let gw = TestGateway::start(TOPICS).await;
    for (i, tenant) in ["acme", "globex", "acme", "acme", "globex", "acme"]
        .iter()
        .enumerate()
    {
        let topic = if i % 2 == 0 { "orders" } else { "users" };
        let (status, body) = gw
            .post(
                "/v1/endpoints",
                json!({"name": format!("e{i}"), "tenant": tenant, "url": "http://127.0.0.1:9/x", "topics": [topic]}),
            )
            .await;
        assert_eq!(status, 201, "{body}");
    }
    let acme = every_page(&gw, "tenant=acme&limit=2", async |_| {}).await;
    assert_eq!(acme, [vec!["e0", "e2"], vec!["e3", "e5"]]);
    let orders = every_page(&gw, "topic=orders&limit=2", async |_| {}).await;
    assert_eq!(orders, [vec!["e0", "e2"], vec!["e4"]]);
    let acme_orders = every_page(&gw, "topic=orders&tenant=acme&limit=5", async |_| {}).await;
    assert_eq!(acme_orders, [vec!["e0", "e2"]]);

    let (_, topics) = gw.get("/v1/topics").await;
    let count = |name: &str| -> Value {
        topics["topics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["name"] == name)
            .map(|t| t["subscribers"].clone())
            .unwrap()
    };
    assert_eq!(count("orders"), 3, "{topics}");
    assert_eq!(count("users"), 3, "{topics}");

    for bad in ["cursor=e3", "cursor=ep:", "limit=0", "limit=501", "source=file"] {
        let (status, body) = gw.get(&format!("/v1/endpoints?{bad}")).await;
        assert_eq!(status, 400, "{bad}: {body}");
    }
    assert!(deliveries_of(&gw, "e0").await.is_empty());
}
