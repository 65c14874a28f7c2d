//! SSRF end to end, on loopback spellings only: with no `allow_networks`, an endpoint at
//! `127.0.0.1`, `localhost`, `[::ffff:127.0.0.1]` or `[::1]` is never connected to — the attempt
//! fails `blocked_address` and the sink (listening on 127.0.0.1) sees nothing. Allowing
//! `127.0.0.0/8` afterwards shows the sink was reachable all along, so it was the guard that
//! stopped the requests. No test sends traffic to a non-loopback address.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use crate::support::{START, Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(20);

/// Endpoint name → URL spelling of the sink's loopback address.
fn spellings(sink: &Sink) -> Vec<(&'static str, String)> {
    let port = sink.addr.port();
    vec![
        ("v4", format!("http://127.0.0.1:{port}/v4")),
        ("name", format!("http://localhost:{port}/name")),
        ("mapped", format!("http://[::ffff:127.0.0.1]:{port}/mapped")),
        ("v6", format!("http://[::1]:{port}/v6")),
    ]
}

async fn start_without_allow_list(sink: &Sink) -> TestGateway {
    let mut yaml = String::from(
        "policies:\n  quick:\n    schedule: [0s, 10s]\n    deadline: 1h\n    jitter: 0\n\
         topics:\n  t: {}\nendpoints:\n",
    );
    for (name, url) in spellings(sink) {
        yaml.push_str(&format!(
            "  {name}:\n    url: {url}\n    topics: [t]\n    policy: quick\n"
        ));
    }
    let dir = Arc::new(tempfile::tempdir().unwrap());
    TestGateway::start_with(dir, &yaml, hookgate::clock::ManualClock::new(START), |o| {
        // The harness allows 127.0.0.0/8 so that other tests can reach their sinks.
        o.config.delivery.allow_networks.clear();
    })
    .await
}

#[tokio::test]
async fn loopback_endpoints_are_blocked_without_an_allow_list_and_never_reached() {
    let sink = Sink::start().await;
    let gw = start_without_allow_list(&sink).await;
    assert!(
        gw.gateway
            .as_ref()
            .unwrap()
            .config()
            .delivery
            .allow_networks
            .is_empty()
    );

    let accepted = gw.ingest("t", "x", json!({"n": 1})).await;
    assert_eq!(accepted["deliveries"], 4);
    let list = gw
        .wait_until("/v1/deliveries", WAIT, |l| {
            let all = l["deliveries"].as_array().unwrap();
            all.len() == 4 && all.iter().all(|d| d["attempt_count"] == 1)
        })
        .await;
    for d in list["deliveries"].as_array().unwrap() {
        let (_, detail) = gw
            .get(&format!("/v1/deliveries/{}", d["id"].as_str().unwrap()))
            .await;
        assert_eq!(detail["attempts"][0]["error_kind"], "blocked_address", "{detail}");
        assert_eq!(
            detail["status"], "pending",
            "retried by policy like any failure: {detail}"
        );
    }

    // The endpoint test call goes through the same guard.
    for (name, _) in spellings(&sink) {
        let (status, outcome) = gw.post(&format!("/v1/endpoints/{name}/test"), json!({})).await;
        assert_eq!(status, 200, "{outcome}");
        assert_eq!(outcome["delivered"], false, "{name}: {outcome}");
        assert_eq!(outcome["error_kind"], "blocked_address", "{name}: {outcome}");
    }
    assert_eq!(sink.count(), 0, "a blocked address was connected to");

    // Control: allowing 127.0.0.0/8 lets the IPv4 spellings through at the next attempt;
    // `::1` is not in that network and stays blocked.
    let mut config = (*gw.gateway.as_ref().unwrap().config()).clone();
    config.delivery.allow_networks = vec!["127.0.0.0/8".parse().unwrap()];
    gw.reloader().apply(config);
    gw.advance(Duration::from_secs(11)).await;
    let received = sink.wait_for(3, WAIT).await;
    let list = gw
        .wait_until("/v1/deliveries", WAIT, |l| {
            l["deliveries"]
                .as_array()
                .unwrap()
                .iter()
                .all(|d| d["attempt_count"] == 2)
        })
        .await;
    let mut paths: Vec<&str> = received.iter().map(|r| r.path.as_str()).collect();
    paths.sort_unstable();
    assert_eq!(paths, ["/mapped", "/name", "/v4"]);
    let v6 = list["deliveries"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["endpoint"] == "v6")
        .unwrap();
    assert_eq!(v6["status"], "failed", "{v6}");
    let (_, detail) = gw
        .get(&format!("/v1/deliveries/{}", v6["id"].as_str().unwrap()))
        .await;
    assert_eq!(detail["attempts"][1]["error_kind"], "blocked_address", "{detail}");
    assert_eq!(sink.count(), 3);
}
