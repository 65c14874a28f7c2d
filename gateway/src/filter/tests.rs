use bytes::Bytes;
use serde_json::{Value, json};

use super::*;
use crate::model::{EventLabels, Timestamp};

fn event(event_type: &str, tenant: Option<&str>, payload: &str) -> Event {
    Event {
        id: "evt_1".into(),
        topic: "orders".into(),
        event_type: event_type.into(),
        content_type: "application/json".into(),
        payload: Bytes::from(payload.to_owned()),
        ordering_key: Some("customer-7".into()),
        received_at: Timestamp::EPOCH,
        tenant: tenant.map(str::to_owned),
        trace: None,
        labels: EventLabels {
            channels: vec!["eu".into()],
            ..EventLabels::default()
        },
    }
}

/// The view of an `order.paid` event of tenant `acme` with this payload.
fn view(payload: Value) -> Value {
    input(&event("order.paid", Some("acme"), &payload.to_string()))
}

fn compiled(filter: Value) -> Filter {
    Filter::compile(&filter)
        .unwrap_or_else(|e| panic!("{filter} does not compile: {e:?}"))
        .expect("a non-empty filter")
}

fn passes(filter: Value, payload: Value) -> bool {
    let f = compiled(filter.clone());
    let input = view(payload);
    let verdict = f.explain(&input);
    assert_eq!(
        verdict.matched,
        f.matches(&input),
        "explain and matches agree for {filter}: {}",
        verdict.reason
    );
    verdict.matched
}

fn errors(filter: Value) -> Vec<(String, String)> {
    match Filter::compile(&filter) {
        Err(errors) => errors.into_iter().map(|e| (e.path, e.reason)).collect(),
        Ok(_) => panic!("{filter} compiled"),
    }
}

#[test]
fn every_operator_on_present_missing_mismatched_and_array_values() {
    let payload = json!({
        "amount": 150, "price": 9.5, "status": "paid", "email": "ann@example.com",
        "tags": ["urgent", "vip"], "items": [{"sku": "a", "qty": 1}, {"sku": "b", "qty": 3}],
        "nothing": null, "flag": true, "count": "7", "when": "2025-01-15T10:00:00Z",
        "nested": {"deep": {"er": 1}}
    });
    // (filter on the payload, whether the event passes)
    let cases: &[(Value, bool)] = &[
        // $eq, implicit and explicit; numbers by value; arrays contain; type mismatch
        (json!({"status": "paid"}), true),
        (json!({"status": {"$eq": "paid"}}), true),
        (json!({"status": "refunded"}), false),
        (json!({"amount": 150.0}), true),
        (json!({"count": 7}), false),
        (json!({"tags": "vip"}), true),
        (json!({"tags": ["urgent", "vip"]}), true),
        (json!({"tags": "gold"}), false),
        (json!({"nothing": null}), true),
        (json!({"flag": true}), true),
        (json!({"missing": "x"}), false),
        (json!({"nested": {"deep": {"er": 1}}}), true),
        (json!({"nested.deep.er": 1}), true),
        (json!({"nested": {"deep": {"er": 1, "x": 2}}}), false),
        // $neq: the negation of $eq, so a missing field passes
        (json!({"status": {"$neq": "refunded"}}), true),
        (json!({"status": {"$neq": "paid"}}), false),
        (json!({"tags": {"$neq": "vip"}}), false),
        (json!({"missing": {"$neq": "x"}}), true),
        // $gt $gte $lt $lte: numbers, strings (RFC 3339 times), mismatches, missing, arrays
        (json!({"amount": {"$gt": 100}}), true),
        (json!({"amount": {"$gt": 150}}), false),
        (json!({"amount": {"$gte": 150}}), true),
        (json!({"amount": {"$lt": 150}}), false),
        (json!({"amount": {"$lte": 150}}), true),
        (json!({"amount": {"$gte": 100, "$lt": 500}}), true),
        (json!({"price": {"$gt": 9}}), true),
        (json!({"count": {"$gt": 5}}), false),
        (json!({"amount": {"$gt": "100"}}), false),
        (json!({"missing": {"$lt": 1}}), false),
        (json!({"items.$.qty": {"$gte": 3}}), true),
        (json!({"items.$.qty": {"$gt": 3}}), false),
        (
            json!({"when": {"$gte": "2025-01-01T00:00:00Z", "$lt": "2025-02-01T00:00:00Z"}}),
            true,
        ),
        (json!({"when": {"$lt": "2025-01-01T00:00:00Z"}}), false),
        // $in / $nin: lists, an array field, Outpost's substring form, missing
        (json!({"status": {"$in": ["pending", "paid"]}}), true),
        (json!({"status": {"$in": ["pending"]}}), false),
        (json!({"amount": {"$in": [150.0, 1]}}), true),
        (json!({"tags": {"$in": ["gold", "vip"]}}), true),
        (json!({"items": {"$in": [{"sku": "a", "qty": 1}]}}), true),
        (json!({"email": {"$in": "@example."}}), true),
        (json!({"email": {"$in": "@other."}}), false),
        (json!({"missing": {"$in": ["x"]}}), false),
        (json!({"status": {"$nin": ["cancelled", "refunded"]}}), true),
        (json!({"status": {"$nin": ["paid"]}}), false),
        (json!({"tags": {"$nin": ["vip"]}}), false),
        (json!({"missing": {"$nin": ["x"]}}), true),
        // $exist: null counts as present
        (json!({"status": {"$exist": true}}), true),
        (json!({"nothing": {"$exist": true}}), true),
        (json!({"missing": {"$exist": true}}), false),
        (json!({"missing": {"$exist": false}}), true),
        (json!({"status": {"$exist": false}}), false),
        (json!({"items.$.sku": {"$exist": true}}), true),
        (json!({"items.$.colour": {"$exist": true}}), false),
        // $regex, $startsWith, $endsWith: strings only
        (json!({"email": {"$regex": "^[a-z]+@example\\.com$"}}), true),
        (json!({"email": {"$regex": "^bob"}}), false),
        (json!({"amount": {"$regex": "150"}}), false),
        (json!({"tags": {"$regex": "^v"}}), true),
        (json!({"missing": {"$regex": "."}}), false),
        (json!({"email": {"$startsWith": "ann@"}}), true),
        (json!({"email": {"$startsWith": "bob@"}}), false),
        (json!({"email": {"$endsWith": "@example.com"}}), true),
        (json!({"amount": {"$endsWith": "50"}}), false),
        // the `$` wildcard and indexes
        (json!({"items.$.sku": "b"}), true),
        (json!({"items.$.sku": "c"}), false),
        (json!({"items.1.sku": "b"}), true),
        (json!({"items.0.sku": "b"}), false),
        (json!({"status.$": "paid"}), false),
        (json!({"items": {"$.sku": "a"}}), true),
        // $and, $or, $not: at the top and under a field
        (
            json!({"$and": [{"status": "paid"}, {"amount": {"$gte": 100}}]}),
            true,
        ),
        (
            json!({"$and": [{"status": "paid"}, {"amount": {"$gte": 1000}}]}),
            false,
        ),
        (
            json!({"$or": [{"status": "refunded"}, {"amount": {"$gte": 100}}]}),
            true,
        ),
        (
            json!({"$or": [{"status": "refunded"}, {"amount": {"$gte": 1000}}]}),
            false,
        ),
        (json!({"$not": {"status": "refunded"}}), true),
        (
            json!({"status": {"$not": {"$in": ["cancelled", "refunded"]}}}),
            true,
        ),
        (json!({"status": {"$not": "paid"}}), false),
        (json!({"amount": {"$or": [{"$lt": 10}, {"$gt": 100}]}}), true),
        (json!({"amount": {"$or": [10, 150]}}), true),
    ];
    for (filter, expected) in cases {
        let filter_on_payload = json!({ "payload": filter });
        assert_eq!(
            passes(filter_on_payload.clone(), payload.clone()),
            *expected,
            "{filter_on_payload}: {}",
            compiled(filter_on_payload.clone())
                .explain(&view(payload.clone()))
                .reason
        );
    }
}

#[test]
fn the_view_has_the_events_fields_under_their_names_and_aliases() {
    let input = input(&event("order.paid", Some("acme"), r#"{"amount": 5}"#));
    for (filter, expected) in [
        (json!({"type": "order.paid"}), true),
        (json!({"type": {"$startsWith": "order."}}), true),
        (json!({"tenant": "acme"}), true),
        (json!({"topic": "orders"}), true),
        (json!({"id": "evt_1"}), true),
        (json!({"channels": "eu"}), true),
        (json!({"payload.amount": 5}), true),
        (json!({"data": {"amount": 5}}), true),
        (json!({"body.amount": 5}), true),
        (json!({"headers": {"hookgate-ordering-key": "customer-7"}}), true),
        (json!({"metadata.content-type": "application/json"}), true),
        (json!({"headers.webhook-id": "evt_1"}), true),
        (json!({"tenant": "globex"}), false),
    ] {
        assert_eq!(compiled(filter.clone()).matches(&input), expected, "{filter}");
    }
    // An event without a tenant has none; a payload that is not JSON is missing.
    let untenanted = super::input(&event("order.paid", None, "not json"));
    assert!(compiled(json!({"tenant": {"$exist": false}})).matches(&untenanted));
    assert!(compiled(json!({"payload": {"$exist": false}})).matches(&untenanted));
    assert!(
        !compiled(json!({"payload.amount": {"$neq": 1}, "payload": {"$exist": true}})).matches(&untenanted)
    );
}

/// Convoy's documented examples (its filters manual and its compare tests), as a body filter
/// goes under `payload`.
#[test]
fn convoys_documented_examples() {
    let meetup = json!([
        {"event": "meetup"},
        {"venues": [{"lagos": ["ikeja", "lekki"]}, {"ibadan": ["bodija", "dugbe"]}]},
        {"speakers": [{"name": "raymond"}, {"name": "subomi"}]}
    ]);
    let cities = json!({
        "cities": ["lagos", "ibadan", "agodi"], "type": "weekly",
        "temperatures": [30, 12, 39.9, 10], "person": {"age": 12}
    });
    let nested_data = json!({
        "data": [{"event": "meetup"}, {"venue": "test"},
                 {"speakers": [{"name": "raymond"}, {"name": "subomi"}]}],
        "swag": "hoodies"
    });
    let cases: &[(Value, Value, bool)] = &[
        (
            json!({"event_type": "created"}),
            json!({"event_type": "created"}),
            true,
        ),
        (
            json!({"event": {"type": "created"}}),
            json!({"event": {"type": "created"}}),
            true,
        ),
        (
            json!({"dish": {"ingredients": "rice"}}),
            json!({"dish": {"ingredients": ["rice", "beans"]}}),
            true,
        ),
        (
            json!({"event": {"$neq": "created"}}),
            json!({"event": "created"}),
            false,
        ),
        (
            json!({"event": {"$neq": "created"}}),
            json!({"event": "updated"}),
            true,
        ),
        (
            json!({"event": {"$regex": "^[a-zA-Z]+$"}}),
            json!({"event": "qwerty"}),
            true,
        ),
        (
            json!({"event": {"$regex": "^cs_[a-zA-Z]+$"}}),
            json!({"event": "cs_qwerty"}),
            true,
        ),
        (
            json!({"person": {"age": {"$lt": 5}}}),
            json!({"person": {"age": 11}}),
            false,
        ),
        (
            json!({"person": {"name": {"$in": ["subomi", "daniel"]}}}),
            json!({"person": {"name": "subomi"}}),
            true,
        ),
        (
            json!({"person": {"name": {"$nin": ["subomi", "daniel"]}}}),
            json!({"person": {"name": "raymond"}}),
            true,
        ),
        (
            json!({"person": {"name": "raymond"}}),
            json!({"person": {"name": ["subomi", "daniel"]}}),
            false,
        ),
        (
            json!({"$and": [{"person.age": {"$gte": 10}}, {"type": "weekly"}, {"cities": "lagos"}]}),
            cities.clone(),
            true,
        ),
        (
            json!({"$or": [{"type": "monthly"}, {"cities": "lagos"}]}),
            cities.clone(),
            true,
        ),
        (
            json!({"$or": [{"cities": "london"}, {"cities": "paris"}]}),
            cities.clone(),
            false,
        ),
        (
            json!({"$and": [{"person.age": {"$gte": 10}}, {"$or": [{"type": "weekly"}, {"cities": "lagos"}]}]}),
            cities.clone(),
            true,
        ),
        (json!({"person": {"age": {"$exist": true}}}), cities.clone(), true),
        (json!({"$.venues.$.lagos": "ikeja"}), meetup.clone(), true),
        (json!({"$.venues.$.lagos": "bariga"}), meetup, false),
        (
            json!({"data.$.event": "meetup", "data.$.venue": "test"}),
            nested_data.clone(),
            true,
        ),
        (
            json!({"data.$.speakers.$.name": "raymond", "swag": "hoodies"}),
            nested_data.clone(),
            true,
        ),
        (json!({"data.$.speakers.$.name": "ade"}), nested_data, false),
    ];
    for (filter, payload, expected) in cases {
        let filter_on_payload = json!({ "payload": filter });
        assert_eq!(
            passes(filter_on_payload, payload.clone()),
            *expected,
            "{filter} on {payload}"
        );
    }
}

/// Outpost's documented examples (its "Destination Filters" page), unchanged: `data` is the
/// payload, `metadata` the headers.
#[test]
fn outposts_documented_examples() {
    let order = json!({
        "status": "paid", "currency": "usd", "customer": {"tier": "premium"},
        "tags": ["urgent", "support"], "amount": 1200, "email": "a@example.com"
    });
    let cases: &[(Value, bool)] = &[
        (json!({"data": {"status": "paid"}}), true),
        (json!({"data": {"status": "paid", "currency": "usd"}}), true),
        (json!({"data": {"status": "paid", "currency": "eur"}}), false),
        (json!({"data": {"customer": {"tier": "premium"}}}), true),
        (json!({"data": {"tags": "urgent"}}), true),
        (json!({"data": {"amount": {"$gte": 100, "$lt": 500}}}), false),
        (
            json!({"data": {"status": {"$in": ["pending", "processing"]}}}),
            false,
        ),
        (json!({"data": {"email": {"$endsWith": "@example.com"}}}), true),
        (json!({"data": {"deleted_at": {"$exist": false}}}), true),
        (
            json!({"$or": [{"data": {"status": "paid"}}, {"data": {"status": "shipped"}}]}),
            true,
        ),
        (
            json!({"$and": [{"data": {"status": "active"}}, {"data": {"amount": {"$gte": 100}}}]}),
            false,
        ),
        (
            json!({"data": {"status": {"$not": {"$in": ["cancelled", "refunded"]}}}}),
            true,
        ),
        (json!({"data": {"amount": {"$gte": 1000}}}), true),
        (json!({"data": {"status": {"$in": ["paid", "shipped"]}}}), true),
    ];
    for (filter, expected) in cases {
        assert_eq!(passes(filter.clone(), order.clone()), *expected, "{filter}");
    }
    // "Filter by metadata": hookgate's metadata is the event's headers.
    assert!(compiled(json!({"metadata": {"content-type": "application/json"}})).matches(&view(order)));
    // "To remove a filter, set it to an empty object".
    assert!(Filter::compile(&json!({})).unwrap().is_none());
}

#[test]
fn mistakes_are_refused_with_their_path() {
    let found = errors(json!({
        "paylod": {"a": 1},
        "payload": {
            "amount": {"$gte": "x", "$lt": [1]},
            "status": {"$in": 5, "$regex": "(", "$exist": "yes"},
            "a..b": 1,
            "c.$gt": 1,
            "d": {"$between": [1, 2]},
            "e": {}
        },
        "$or": [{"type": "x"}, 5],
        "$and": [],
        "$gt": 1
    }));
    let paths: Vec<&str> = found.iter().map(|(p, _)| p.as_str()).collect();
    for expected in [
        "paylod",
        "payload.amount.$lt",
        "payload.status.$in",
        "payload.status.$regex",
        "payload.status.$exist",
        "payload.a..b",
        "payload.c.$gt",
        "payload.d.$between",
        "payload.e",
        "$or[1]",
        "$and",
        "$gt",
    ] {
        assert!(paths.contains(&expected), "{expected} in {found:#?}");
    }
    assert!(
        !paths.contains(&"payload.amount.$gte"),
        "strings compare with strings: {found:#?}"
    );
    let reason = |path: &str| &found.iter().find(|(p, _)| p == path).unwrap().1;
    assert!(reason("paylod").contains("unknown field `paylod`"), "{found:#?}");
    assert!(
        reason("payload.status.$regex").starts_with("not a valid regex"),
        "{found:#?}"
    );
    assert!(
        reason("payload.d.$between").contains("unknown operator"),
        "{found:#?}"
    );
    assert!(reason("$gt").contains("needs a field"), "{found:#?}");
    assert_eq!(
        errors(json!("status")),
        vec![(
            "".to_owned(),
            "a filter is an object of field paths and operators, not a string".to_owned()
        )]
    );
}

#[test]
fn a_hostile_regex_is_refused_or_bounded() {
    // Catastrophic backtracking elsewhere; here a linear-time engine answers at once.
    let f = compiled(json!({"payload.name": {"$regex": "(a+)+$"}}));
    let long = format!("{}!", "a".repeat(200_000));
    assert!(!f.matches(&view(json!({"name": long}))));
    assert!(f.matches(&view(json!({"name": "aaaa"}))));
    // A short pattern that expands beyond the size limit, and a huge one, are refused.
    let expands = errors(json!({"payload.name": {"$regex": "(?:a{1000}){1000}"}}));
    assert_eq!(expands[0].0, "payload.name.$regex");
    assert!(expands[0].1.contains("compiles to more than"), "{expands:?}");
    let huge = errors(json!({"payload.name": {"$regex": "a".repeat(MAX_PATTERN_BYTES + 1)}}));
    assert!(huge[0].1.contains("at most 1024"), "{huge:?}");
    // Too many conditions.
    let many: Vec<Value> = (0..MAX_NODES + 1).map(Value::from).collect();
    let too_many = errors(json!({"payload.n": {"$in": many}}));
    assert!(too_many[0].1.contains("at most 1000 conditions"), "{too_many:?}");
}

#[test]
fn an_explanation_names_the_condition_that_decided() {
    let f = compiled(json!({"payload": {"status": "paid", "amount": {"$gte": 100}}}));
    let refused = f.explain(&view(json!({"status": "paid", "amount": 50})));
    assert!(!refused.matched);
    assert_eq!(refused.reason, "`payload.amount` is 50: $gte 100 does not hold");
    let passed = f.explain(&view(json!({"status": "paid", "amount": 500})));
    assert!(passed.matched);
    assert!(
        passed
            .reason
            .contains("`payload.status` is \"paid\": $eq \"paid\" holds"),
        "{passed:?}"
    );
    let missing = f.explain(&view(json!({"amount": 500})));
    assert_eq!(
        missing.reason,
        "`payload.status` is missing: $eq \"paid\" does not hold"
    );
    let or = compiled(json!({"$or": [{"type": "a"}, {"type": "b"}]})).explain(&view(json!({})));
    assert!(or.reason.starts_with("no condition of $or holds"), "{or:?}");
    let many = compiled(json!({"payload.items.$.sku": "z"})).explain(&view(
        json!({"items": [{"sku": "a"}, {"sku": "b"}, {"sku": "c"}, {"sku": "d"}]}),
    ));
    assert!(
        many.reason.contains("has 4 values (\"a\", \"b\", \"c\", …)"),
        "{many:?}"
    );
}
