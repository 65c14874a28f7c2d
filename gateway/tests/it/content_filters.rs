//! Content filters (README "Content filters"): an event a filter refuses creates no delivery,
//! so the delivery log and the receiver agree on exactly the events that matched; filters are
//! set through the file and the API, refused with their path when wrong, and tried through
//! `POST /v1/endpoints/{name}/filter/test`.

use std::collections::BTreeSet;

use serde_json::{Value, json};

use crate::support::{Sink, TestGateway, WAIT, deliveries_of, endpoint};

/// The event ids an endpoint's delivery log holds.
async fn logged(gw: &TestGateway, name: &str) -> BTreeSet<String> {
    deliveries_of(gw, name)
        .await
        .iter()
        .map(|d| d["event_id"].as_str().unwrap().to_owned())
        .collect()
}

/// The event ids a receiver got (`webhook-id`).
fn received(sink: &Sink) -> BTreeSet<String> {
    sink.received()
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect()
}

fn id(answer: &Value) -> String {
    answer["id"].as_str().unwrap().to_owned()
}

#[tokio::test]
async fn only_matching_events_create_deliveries_and_the_log_and_the_receiver_agree() {
    let big = Sink::start().await;
    let paid = Sink::start().await;
    let all = Sink::start().await;
    let gw = TestGateway::start(&format!(
        r#"topics:
  shop: {{}}
endpoints:
  big:
    url: {}
    topics: [shop]
    filter:
      payload.amount: {{ $gte: 100 }}
  paid:
    url: {}
    topics: [shop]
    filter:
      $or:
        - type: order.paid
        - data: {{ items.$.sku: {{ $regex: "^gift-" }} }}
      headers.content-type: application/json
  all:
    url: {}
    topics: [shop]
"#,
        big.url("/big"),
        paid.url("/paid"),
        all.url("/all")
    ))
    .await;

    let events = [
        ("order.created", json!({"amount": 50, "items": [{"sku": "a"}]})),
        ("order.created", json!({"amount": 150, "items": [{"sku": "a"}]})),
        ("order.paid", json!({"amount": 20, "items": []})),
        (
            "order.created",
            json!({"amount": "500", "items": [{"sku": "b"}, {"sku": "gift-card"}]}),
        ),
        ("order.paid", json!({"amount": 1000})),
    ];
    let mut ids = Vec::new();
    let mut answered = Vec::new();
    for (event_type, payload) in events {
        let answer = gw.ingest("shop", event_type, payload).await;
        answered.push(answer["deliveries"].as_u64().unwrap());
        ids.push(id(&answer));
    }
    // `all` takes every event; `big` events 1 and 4 (a string "500" is no number); `paid`
    // events 2, 3 and 4.
    assert_eq!(answered, vec![1, 2, 2, 2, 3]);
    let expect = |picks: &[usize]| -> BTreeSet<String> { picks.iter().map(|&i| ids[i].clone()).collect() };

    all.wait_for(5, WAIT).await;
    big.wait_for(2, WAIT).await;
    paid.wait_for(3, WAIT).await;
    gw.settle().await;
    for (name, sink, picks) in [
        ("big", &big, &[1, 4][..]),
        ("paid", &paid, &[2, 3, 4][..]),
        ("all", &all, &[0, 1, 2, 3, 4][..]),
    ] {
        assert_eq!(
            logged(&gw, name).await,
            expect(picks),
            "the delivery log of {name}"
        );
        assert_eq!(received(sink), expect(picks), "what {name} received");
        assert_eq!(sink.count(), picks.len(), "{name} got each once");
    }
    // A refused event costs no attempt: the two deliveries took one each, and that is all.
    let attempts: Vec<u64> = deliveries_of(&gw, "big")
        .await
        .iter()
        .map(|d| d["attempt_count"].as_u64().unwrap())
        .collect();
    assert_eq!(attempts, vec![1, 1]);
    assert_eq!(
        endpoint(&gw, "big").await["filter"],
        json!({"payload.amount": {"$gte": 100}}),
        "the filter reads back as written"
    );

    // A replay of the whole window sends `big` again only what its filter lets through.
    let since = hookgate::model::Timestamp::from_millis(gw.now().as_millis() - 60_000);
    let response = gw
        .post_builder("/v1/endpoints/big/replay")
        .header("idempotency-key", "filters")
        .json(&json!({"since": since.to_rfc3339()}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status().as_u16(), 202);
    let replayed: Value = response.json().await.unwrap();
    assert_eq!(replayed["queued"], 2, "{replayed}");
    let again = big.wait_for(4, WAIT).await;
    let resent: BTreeSet<String> = again[2..]
        .iter()
        .map(|r| r.header("webhook-id").to_owned())
        .collect();
    assert_eq!(resent, expect(&[1, 4]));
}

#[tokio::test]
async fn an_api_endpoint_takes_a_filter_refuses_a_bad_one_with_its_path_and_replaces_it_whole() {
    let sink = Sink::start().await;
    let gw = TestGateway::start("topics:\n  orders: {}\n").await;
    let (status, refused) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "shop", "url": sink.url("/s"), "topics": ["orders"],
                   "filter": {"payload": {"amount": {"$gte": [1]}}, "paylod": 1}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(refused["error"]["code"], "invalid_endpoint", "{refused}");
    let paths: Vec<&str> = refused["error"]["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["path"].as_str().unwrap())
        .collect();
    assert!(paths.contains(&"filter.payload.amount.$gte"), "{refused}");
    assert!(paths.contains(&"filter.paylod"), "{refused}");

    let (status, created) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "shop", "url": sink.url("/s"), "topics": ["orders"],
                   "filter": {"payload.region": "eu", "type": {"$startsWith": "order."}}}),
        )
        .await;
    assert_eq!(status, 201, "{created}");
    assert_eq!(created["filter"]["payload.region"], "eu");
    assert_eq!(
        gw.ingest("orders", "order.created", json!({"region": "us"}))
            .await["deliveries"],
        0
    );
    let eu = gw
        .ingest("orders", "order.created", json!({"region": "eu"}))
        .await;
    assert_eq!(eu["deliveries"], 1);

    // A new filter replaces the old one whole (no merge of the two documents).
    let (status, patched) = gw
        .patch("/v1/endpoints/shop", json!({"filter": {"payload.region": "us"}}))
        .await;
    assert_eq!(status, 200, "{patched}");
    assert_eq!(patched["filter"], json!({"payload.region": "us"}));
    let us = gw.ingest("orders", "user.created", json!({"region": "us"})).await;
    assert_eq!(us["deliveries"], 1, "the old `type` condition is gone");
    let (status, bad) = gw
        .patch("/v1/endpoints/shop", json!({"filter": {"$or": "x"}}))
        .await;
    assert_eq!(status, 400, "{bad}");
    assert_eq!(bad["error"]["problems"][0]["path"], "filter.$or", "{bad}");
    // `null` removes it: every event again.
    let (status, removed) = gw.patch("/v1/endpoints/shop", json!({"filter": null})).await;
    assert_eq!(status, 200, "{removed}");
    assert!(removed["filter"].is_null(), "{removed}");
    assert_eq!(gw.ingest("orders", "x", json!({})).await["deliveries"], 1);

    let got = sink.wait_for(3, WAIT).await;
    let ids: BTreeSet<&str> = got.iter().map(|r| r.header("webhook-id")).collect();
    assert!(ids.contains(eu["id"].as_str().unwrap()));
    assert!(ids.contains(us["id"].as_str().unwrap()));
}

#[tokio::test]
async fn the_filter_test_explains_a_sample_and_counts_what_a_candidate_lets_through() {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  orders: {{}}\nendpoints:\n  big:\n    url: {}\n    topics: [orders]\n    types: ['order.*']\n    filter:\n      payload.amount: {{ $gte: 100 }}\n",
        sink.url("/big")
    ))
    .await;
    for amount in [10, 50, 150, 500] {
        gw.ingest("orders", "order.created", json!({"amount": amount}))
            .await;
    }
    // Not of a type it takes: not among its recent events.
    gw.ingest("orders", "user.created", json!({"amount": 999})).await;

    let (status, sample) = gw
        .post(
            "/v1/endpoints/big/filter/test",
            json!({"event": {"type": "order.created", "payload": {"amount": 50}}}),
        )
        .await;
    assert_eq!(status, 200, "{sample}");
    assert_eq!(sample["matched"], false);
    assert_eq!(sample["reason"], "`payload.amount` is 50: $gte 100 does not hold");
    assert_eq!(sample["filter"], json!({"payload.amount": {"$gte": 100}}));
    assert!(sample["recent"].is_null());

    let (status, own) = gw
        .post("/v1/endpoints/big/filter/test", json!({"recent": 100}))
        .await;
    assert_eq!(status, 200, "{own}");
    assert_eq!(own["recent"], json!({"events": 4, "matched": 2}), "{own}");

    let (status, candidate) = gw
        .post(
            "/v1/endpoints/big/filter/test",
            json!({"filter": {"payload.amount": {"$gte": 40}}, "recent": 100,
                   "event": {"type": "order.created", "payload": {"amount": 50}}}),
        )
        .await;
    assert_eq!(status, 200, "{candidate}");
    assert_eq!(candidate["matched"], true);
    assert_eq!(
        candidate["recent"],
        json!({"events": 4, "matched": 3}),
        "{candidate}"
    );
    let (_, limited) = gw
        .post(
            "/v1/endpoints/big/filter/test",
            json!({"filter": {}, "recent": 2}),
        )
        .await;
    assert_eq!(limited["recent"], json!({"events": 2, "matched": 2}), "{limited}");
    assert!(limited["filter"].is_null(), "{limited}");

    let (status, bad) = gw
        .post(
            "/v1/endpoints/big/filter/test",
            json!({"filter": {"payload.amount": {"$gte": {}}}}),
        )
        .await;
    assert_eq!(status, 400, "{bad}");
    assert_eq!(bad["error"]["code"], "invalid_filter");
    assert_eq!(bad["error"]["problems"][0]["path"], "filter.payload.amount.$gte");
    // Trying changed nothing: the endpoint keeps its own filter.
    assert_eq!(
        endpoint(&gw, "big").await["filter"],
        json!({"payload.amount": {"$gte": 100}})
    );
}

#[tokio::test]
async fn a_hostile_regex_neither_hangs_nor_blocks_ingestion_and_a_huge_one_is_refused() {
    let guarded = Sink::start().await;
    let plain = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  guarded:\n    url: {}\n    topics: [t]\n    filter:\n      payload.name: {{ $regex: '(a+)+$' }}\n  plain:\n    url: {}\n    topics: [t]\n",
        guarded.url("/g"),
        plain.url("/p")
    ))
    .await;
    // The input that makes a backtracking engine take exponential time: answered, refused
    // by the filter, delivered to the endpoint without one.
    let hostile = format!("{}!", "a".repeat(100_000));
    let answer = gw.ingest("t", "x", json!({"name": hostile})).await;
    assert_eq!(answer["deliveries"], 1);
    let answer = gw.ingest("t", "x", json!({"name": "aaaa"})).await;
    assert_eq!(answer["deliveries"], 2);
    plain.wait_for(2, WAIT).await;
    guarded.wait_for(1, WAIT).await;

    let (status, refused) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "huge", "url": plain.url("/h"), "topics": ["t"],
                   "filter": {"payload.name": {"$regex": "(?:a{1000}){1000}"}}}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    assert_eq!(
        refused["error"]["problems"][0]["path"], "filter.payload.name.$regex",
        "{refused}"
    );
}
