//! Outgoing connections: keep-alive connections are reused across the endpoints that share a
//! host, however many attempts run at once; `https` endpoints are verified against Mozilla's
//! roots plus the CAs of `delivery.ca_certs`.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use hookgate::clock::ManualClock;
use serde_json::json;

use crate::support::{Reply, START, Sink, TestGateway, base_yaml};
use crate::tls::{test_pki, tls_server};

const ENDPOINTS: usize = 10;
/// `delivery.max_in_flight_per_endpoint`'s default.
const PER_ENDPOINT: usize = 16;
const EVENTS: usize = 100;

/// Ten endpoints on one host, each allowed 16 attempts at once (the default): up to 160
/// requests to that host are in flight together. The connections opened for the first wave
/// go back to the pool afterwards, so a second wave of the same size opens (almost) none. An
/// idle cap below the concurrency (say 64 per host) would close and reopen connections on
/// every wave, and a fan-out to one customer's API would cost a TCP handshake per delivery.
#[tokio::test]
async fn endpoints_sharing_a_host_reuse_their_connections() {
    let sink = Sink::start().await;
    // Slow answers make the attempts overlap, so each wave really holds 160 connections.
    sink.always(Reply::status(200).delayed(Duration::from_millis(50)));
    let mut yaml = String::from("topics:\n  t: {}\nendpoints:\n");
    for i in 0..ENDPOINTS {
        yaml.push_str(&format!(
            "  e{i}:\n    url: {}\n    topics: [t]\n",
            sink.url(&format!("/e{i}"))
        ));
    }
    let gw = TestGateway::start(&yaml).await;

    let mut after_wave = Vec::new();
    for wave in 1..=2 {
        let events: Vec<_> = (0..EVENTS)
            .map(|i| json!({"type": "order.created", "payload": {"wave": wave, "n": i}}))
            .collect();
        let (status, body) = gw
            .post("/v1/topics/t/events/batch", json!({"events": events}))
            .await;
        assert_eq!(status, 202, "{body}");
        sink.wait_for(wave * EVENTS * ENDPOINTS, Duration::from_secs(60))
            .await;
        // The sink counts a request when it arrives and answers 50 ms later: wait until the
        // gateway has read every answer (and so put its connection back in the pool).
        gw.wait_until(
            "/v1/deliveries?status=pending&limit=1",
            Duration::from_secs(60),
            |v| v["deliveries"].as_array().is_some_and(Vec::is_empty),
        )
        .await;
        after_wave.push(sink.connections());
    }
    let (first, second) = (after_wave[0], after_wave[1]);
    assert!(
        first >= PER_ENDPOINT,
        "the first wave used only {first} connections: the attempts did not overlap"
    );
    // Without an idle cap every connection is reused, so both waves together open about as
    // many as were ever in flight at once, whichever wave overlapped more. A connection goes
    // back to the pool a moment after its response is read, so an attempt starting right then
    // may open one more, in either wave: half the peak is allowed for that (28 of 111 seen in
    // one wave on a loaded machine). An idle cap of 64 would reopen about 100 of the 160 in
    // the second wave alone.
    let peak = sink.max_in_flight();
    let allowed = peak + peak / 2;
    assert!(
        second <= allowed,
        "two waves of {} deliveries opened {second} connections ({first} in the first) with at \
         most {peak} requests in flight at once (allowed {allowed}): connections were not reused",
        EVENTS * ENDPOINTS,
    );
}

/// An `https` endpoint whose certificate comes from a private CA gets its delivery once the
/// CA is listed in `delivery.ca_certs` — YAML to config to the HTTP client — and its attempt
/// fails with `tls` without it.
#[tokio::test]
async fn an_endpoint_under_a_ca_from_delivery_ca_certs_is_delivered_over_tls() {
    let pki = test_pki();
    let (port, served) = tls_server(&pki).await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let ca_file = dir.path().join("internal-ca.pem");
    std::fs::write(&ca_file, &pki.ca_pem).unwrap();
    let endpoints = format!(
        "topics:\n  t: {{}}\nendpoints:\n  internal:\n    url: https://localhost:{port}/hooks\n    topics: [t]\n"
    );

    // Untrusted, the first attempt fails and the delivery waits for its retry.
    for (trusted, expected) in [(true, "succeeded"), (false, "pending")] {
        let ca_line = if trusted {
            format!("  ca_certs: [{}]\n", ca_file.display())
        } else {
            String::new()
        };
        // The base config's `delivery:` block, with the CA added to it; a store of its own for
        // each gateway.
        let store_dir = Arc::new(tempfile::tempdir().unwrap());
        let yaml = format!("{}{ca_line}{endpoints}", base_yaml(store_dir.path()));
        let config =
            hookgate::config::load_str(&yaml, "test.yaml", None, |_| None).unwrap_or_else(|e| panic!("{e}"));
        let gw = TestGateway::start_with(dir.clone(), "", ManualClock::new(START), move |o| {
            o.config = config;
        })
        .await;
        gw.ingest("t", "order.created", json!({"n": 1})).await;
        let list = gw
            .wait_until("/v1/deliveries", Duration::from_secs(20), |v| {
                let d = &v["deliveries"][0];
                d["attempt_count"].as_u64().unwrap_or(0) >= 1 && d["status"] != "delivering"
            })
            .await;
        let delivery = &list["deliveries"][0];
        assert_eq!(delivery["status"], expected, "{delivery}");
        if !trusted {
            let id = delivery["id"].as_str().unwrap();
            let (_, detail) = gw.get(&format!("/v1/deliveries/{id}")).await;
            assert_eq!(detail["attempts"][0]["error_kind"], "tls", "{detail}");
        }
    }
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "only the trusted gateway got through"
    );
}
