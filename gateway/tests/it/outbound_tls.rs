//! How endpoints are reached: a receiver that requires a client certificate accepts the
//! configured one and refuses an endpoint without it; a loopback `CONNECT` proxy relays https
//! deliveries to the address the SSRF rules allowed (never a name), and a target the rules
//! refuse is never asked of the proxy.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use serde_json::json;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::{TcpListener, TcpStream};

use crate::support::{START, TestGateway, WAIT};
use crate::tls::{TestPki, mtls_server, test_pki, tls_server};

/// A gateway trusting `pki`'s CA, with `yaml` after the test's base config.
async fn gateway_trusting(pki: &TestPki, dir: Arc<tempfile::TempDir>, yaml: &str) -> TestGateway {
    let ca = pki.ca.clone();
    TestGateway::start_with(dir, yaml, hookgate::clock::ManualClock::new(START), move |o| {
        o.config.delivery.extra_roots.push(ca);
    })
    .await
}

async fn first_attempt(gw: &TestGateway, endpoint: &str) -> serde_json::Value {
    let list = gw
        .wait_until(&format!("/v1/deliveries?endpoint={endpoint}"), WAIT, |l| {
            l["deliveries"][0]["attempt_count"] == 1 && l["deliveries"][0]["status"] != "delivering"
        })
        .await;
    let id = list["deliveries"][0]["id"].as_str().unwrap().to_owned();
    let (_, detail) = gw.get(&format!("/v1/deliveries/{id}")).await;
    detail["attempts"][0].clone()
}

#[tokio::test]
async fn a_receiver_requiring_a_client_certificate_accepts_the_configured_one_only() {
    let pki = test_pki();
    let (port, served) = mtls_server(&pki).await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    let (cert, key) = (dir.path().join("client.pem"), dir.path().join("client.key"));
    std::fs::write(&cert, &pki.client_cert_pem).unwrap();
    std::fs::write(&key, &pki.client_key_pem).unwrap();
    let yaml = format!(
        "topics:\n  t: {{}}\nendpoints:\n  with-cert:\n    url: https://localhost:{port}/a\n    topics: [t]\n    tls: {{ client_cert: {}, client_key: {} }}\n  without:\n    url: https://localhost:{port}/b\n    topics: [t]\n",
        cert.display(),
        key.display()
    );
    let gw = gateway_trusting(&pki, dir, &yaml).await;
    gw.ingest("t", "x", json!({})).await;

    let with_cert = first_attempt(&gw, "with-cert").await;
    assert_eq!(with_cert["status_code"], 200, "{with_cert}");
    let without = first_attempt(&gw, "without").await;
    assert!(
        without["error_kind"] == "tls" || without["error_kind"] == "connect",
        "{without}"
    );
    assert_eq!(
        served.load(Ordering::SeqCst),
        1,
        "only the request with the certificate got through"
    );
    let ep = crate::support::endpoint(&gw, "with-cert").await;
    assert_eq!(ep["client_certificate"], true, "{ep}");
}

#[test]
fn a_key_that_does_not_fit_the_certificate_is_refused_at_load() {
    let (pki, other) = (test_pki(), test_pki());
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("client.pem"), dir.path().join("other.key"));
    std::fs::write(&cert, &pki.client_cert_pem).unwrap();
    std::fs::write(&key, &other.client_key_pem).unwrap();
    let yaml = format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: https://localhost:1/\n    topics: [t]\n    tls: {{ client_cert: {}, client_key: {} }}\n",
        cert.display(),
        key.display()
    );
    let err = hookgate::config::load_str(&yaml, "test.yaml", None, |_| None)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("test.yaml:7: endpoints.e.tls: client_key does not fit client_cert"),
        "{err}"
    );
    assert!(!err.contains("PRIVATE KEY"), "{err}");
}

/// A `CONNECT` proxy on loopback that records each tunnel's target and relays bytes.
async fn connect_proxy() -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let targets = Arc::new(Mutex::new(Vec::new()));
    let seen = targets.clone();
    tokio::spawn(async move {
        while let Ok((client, _)) = listener.accept().await {
            tokio::spawn(relay(client, seen.clone()));
        }
    });
    (port, targets)
}

async fn relay(mut client: TcpStream, seen: Arc<Mutex<Vec<String>>>) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        match client.read_u8().await {
            Ok(b) => head.push(b),
            Err(_) => return,
        }
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut words = head.split_whitespace();
    let (Some("CONNECT"), Some(target)) = (words.next(), words.next()) else {
        let _ = client.write_all(b"HTTP/1.1 405 Method Not Allowed\r\n\r\n").await;
        return;
    };
    seen.lock().unwrap().push(target.to_owned());
    let Ok(mut upstream) = TcpStream::connect(target).await else {
        let _ = client.write_all(b"HTTP/1.1 502 Bad Gateway\r\n\r\n").await;
        return;
    };
    if client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await
        .is_ok()
    {
        let _ = tokio::io::copy_bidirectional(&mut client, &mut upstream).await;
    }
}

#[tokio::test]
async fn a_connect_proxy_relays_https_deliveries_to_the_checked_address() {
    let pki = test_pki();
    let (port, served) = tls_server(&pki).await;
    let (proxy_port, targets) = connect_proxy().await;
    let dir = Arc::new(tempfile::tempdir().unwrap());
    // `127.0.0.2` passes the config's check (the harness allows 127.0.0.0/8) but not the
    // allow list the gateway then runs with (127.0.0.1 only): refused before the proxy.
    let yaml = format!(
        "topics:\n  t: {{}}\nendpoints:\n  proxied:\n    url: https://localhost:{port}/hook\n    topics: [t]\n    proxy: http://127.0.0.1:{proxy_port}\n  blocked:\n    url: https://127.0.0.2:{port}/hook\n    topics: [t]\n    proxy: http://127.0.0.1:{proxy_port}\n"
    );
    let ca = pki.ca.clone();
    let gw = TestGateway::start_with(dir, &yaml, hookgate::clock::ManualClock::new(START), move |o| {
        o.config.delivery.extra_roots.push(ca);
        o.config.delivery.allow_networks = vec!["127.0.0.1/32".parse().unwrap()];
    })
    .await;
    gw.ingest("t", "x", json!({})).await;

    let proxied = first_attempt(&gw, "proxied").await;
    assert_eq!(proxied["status_code"], 200, "{proxied}");
    let blocked = first_attempt(&gw, "blocked").await;
    assert_eq!(blocked["error_kind"], "blocked_address", "{blocked}");
    assert_eq!(served.load(Ordering::SeqCst), 1);
    assert_eq!(
        *targets.lock().unwrap(),
        vec![format!("127.0.0.1:{port}")],
        "one tunnel, to the address the SSRF guard judged, not to the name"
    );
    let ep = crate::support::endpoint(&gw, "proxied").await;
    assert_eq!(ep["proxy"], format!("127.0.0.1:{proxy_port}"), "{ep}");
}
