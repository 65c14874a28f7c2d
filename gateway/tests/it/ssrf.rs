//! SSRF end to end, on loopback spellings only. An IP literal the rules block is refused when
//! the endpoint is read — by the config file and the API alike, with the same reason. A name
//! (`localhost`) is judged when it resolves: with no `allow_networks`, its attempts fail
//! `blocked_address` and the sink (listening on 127.0.0.1) sees nothing; so do literals that
//! reach the connector past the validator (the connector judges every address, whatever
//! passed before). Allowing `127.0.0.0/8` afterwards shows the sink was reachable all along,
//! so it was the guard that stopped the requests. No test sends traffic to a non-loopback
//! address.

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
        // The harness allows 127.0.0.0/8 so that other tests can reach their sinks; without
        // it, the literals would be refused when read (see below), and only the connector
        // stands between them and the sink.
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
    assert_eq!(accepted["deliveries"], 3);
    let list = gw
        .wait_until("/v1/deliveries", WAIT, |l| {
            let all = l["deliveries"].as_array().unwrap();
            all.len() == 3 && all.iter().all(|d| d["attempt_count"] == 1)
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

    // Control: allowing 127.0.0.0/8 lets every spelling through at the next attempt.
    let mut config = (*gw.gateway.as_ref().unwrap().config()).clone();
    config.delivery.allow_networks = vec!["127.0.0.0/8".parse().unwrap()];
    gw.reloader().apply(config).await;
    gw.advance(Duration::from_secs(11)).await;
    let received = sink.wait_for(3, WAIT).await;
    let mut paths: Vec<&str> = received.iter().map(|r| r.path.as_str()).collect();
    paths.sort_unstable();
    assert_eq!(paths, ["/mapped", "/name", "/v4"]);
    assert_eq!(sink.count(), 3);
}

/// One validator judges an endpoint, from the file or the API: an IP literal in a blocked
/// range is refused by `config check` (with `file:line`), by a reload, and by
/// `POST /v1/endpoints` (`blocked_address`), each with the same reason; `allow_networks` lifts
/// it for all three. `127.0.0.0/8` does not allow `::1`.
#[tokio::test]
async fn the_file_and_the_api_refuse_a_blocked_ip_literal_alike() {
    let topics = "topics:\n  t: {}\n";
    let gw = TestGateway::start(topics).await;
    let reason = "`http://[::1]:9/hook`: ::1 is loopback; webhooks may not target it unless \
                  delivery.allow_networks lists it";

    let file = format!("{topics}endpoints:\n  v6:\n    url: http://[::1]:9/hook\n    topics: [t]\n");
    gw.write_config(&file);
    let text = std::fs::read_to_string(gw.config_path()).unwrap();
    let line = 1 + text
        .lines()
        .position(|l| l.contains("url: http://[::1]"))
        .unwrap();
    let refused = hookgate::config::load_file(&gw.config_path())
        .unwrap_err()
        .to_string();
    assert_eq!(
        refused,
        format!(
            "{}:{line}: endpoints.v6.url: {reason}",
            gw.config_path().display()
        )
    );
    match gw.reloader().reload_from_file().await {
        hookgate::ReloadOutcome::Refused { problems } => {
            assert_eq!(problems, std::slice::from_ref(&refused));
        }
        other => panic!("a reload must refuse it: {other:?}"),
    }

    let (status, answer) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "v6", "url": "http://[::1]:9/hook", "topics": ["t"]}),
        )
        .await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["code"], "blocked_address", "{answer}");
    assert_eq!(
        answer["error"]["problems"],
        json!([{"path": "url", "reason": reason}])
    );

    // Allowed, both take it.
    let allowed = text.replacen("[127.0.0.0/8]", "[127.0.0.0/8, \"::1\"]", 1);
    assert_ne!(allowed, text);
    std::fs::write(gw.config_path(), &allowed).unwrap();
    assert!(
        matches!(
            gw.reloader().reload_from_file().await,
            hookgate::ReloadOutcome::Applied { .. }
        ),
        "{allowed}"
    );
    let (status, answer) = gw
        .post(
            "/v1/endpoints",
            json!({"name": "v6-api", "url": "http://[::1]:9/hook", "topics": ["t"]}),
        )
        .await;
    assert_eq!(status, 201, "{answer}");
}
