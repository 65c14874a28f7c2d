//! Slow and hostile HTTP clients: headers trickled (slowloris) or never finished, a body that
//! stalls, too many or too large headers, and shutdown with a request in progress. These are
//! network timeouts, which run on real time, so the gateway here has short ones (300 ms).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::support::{Sink, TestGateway};

const WAIT: Duration = Duration::from_secs(20);

async fn gateway(server: &str) -> (TestGateway, Sink) {
    let sink = Sink::start().await;
    let gw = TestGateway::start(&format!(
        "server:\n{server}topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
        sink.url("/")
    ))
    .await;
    (gw, sink)
}

fn addr(gw: &TestGateway) -> SocketAddr {
    gw.gateway.as_ref().unwrap().addr()
}

/// Reads until the server closes the connection (or resets it); what it sent before.
async fn read_until_closed(stream: &mut TcpStream, within: Duration) -> String {
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => panic!(
                "the connection is still open after {within:?}; got {:?}",
                String::from_utf8_lossy(&seen)
            ),
            Ok(Ok(0)) | Ok(Err(_)) => return String::from_utf8_lossy(&seen).into_owned(),
            Ok(Ok(n)) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

const SHORT: &str = "  header_timeout: 300ms\n  body_timeout: 300ms\n";

#[tokio::test]
async fn a_client_trickling_its_headers_is_cut_off_while_others_are_served() {
    let (gw, _sink) = gateway(SHORT).await;
    let mut slow = TcpStream::connect(addr(&gw)).await.unwrap();
    let started = Instant::now();
    slow.write_all(b"POST /v1/topics/t/events HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // One header byte every 50 ms: data keeps coming, but the head is never complete.
    let mut cut_off = false;
    for _ in 0..60 {
        if slow.write_all(b"X").await.is_err() {
            cut_off = true;
            break;
        }
        // A well-behaved client meanwhile is served normally.
        gw.ingest("t", "x", json!({})).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
        let mut probe = [0u8; 1];
        if let Ok(Ok(0) | Err(_)) =
            tokio::time::timeout(Duration::from_millis(1), slow.read(&mut probe)).await
        {
            cut_off = true;
            break;
        }
    }
    let elapsed = started.elapsed();
    assert!(cut_off, "a trickling client kept its connection for 3 s");
    assert!(
        elapsed >= Duration::from_millis(300),
        "cut off after {elapsed:?}, before the timeout"
    );
}

#[tokio::test]
async fn an_idle_or_unfinished_connection_is_closed_after_the_header_timeout() {
    let (gw, _sink) = gateway(SHORT).await;
    // Connected, nothing sent.
    let mut idle = TcpStream::connect(addr(&gw)).await.unwrap();
    assert_eq!(read_until_closed(&mut idle, Duration::from_secs(5)).await, "");
    // Half a request head, then silence.
    let mut half = TcpStream::connect(addr(&gw)).await.unwrap();
    half.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    assert_eq!(read_until_closed(&mut half, Duration::from_secs(5)).await, "");
    // The first bytes of the HTTP/2 preface, then silence: still undecided, still cut off.
    let mut preface = TcpStream::connect(addr(&gw)).await.unwrap();
    preface.write_all(b"PRI * HTTP/2").await.unwrap();
    assert_eq!(read_until_closed(&mut preface, Duration::from_secs(5)).await, "");
    // Keep-alive after a complete request: the idle connection is closed too.
    let mut kept = TcpStream::connect(addr(&gw)).await.unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut kept, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
}

#[tokio::test]
async fn http2_clients_are_served_by_the_same_listener() {
    let (gw, sink) = gateway(SHORT).await;
    let h2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let response = h2
        .post(format!("{}/v1/topics/t/events", gw.base))
        .json(&json!({"type": "x", "payload": {"over": "h2"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.version(), reqwest::Version::HTTP_2);
    assert_eq!(response.status().as_u16(), 202);
    sink.wait_for(1, WAIT).await;
}

#[tokio::test]
async fn a_body_that_stalls_gets_408_and_nothing_is_ingested() {
    let (gw, sink) = gateway(SHORT).await;
    let mut client = TcpStream::connect(addr(&gw)).await.unwrap();
    client
        .write_all(
            b"POST /v1/topics/t/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\n\r\n{\"type\": \"x\", ",
        )
        .await
        .unwrap();
    let started = Instant::now();
    let answer = read_until_closed(&mut client, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("\"code\":\"body_timeout\""), "{answer}");
    assert!(started.elapsed() >= Duration::from_millis(250));

    let (_, list) = gw.get("/v1/deliveries").await;
    assert!(list["deliveries"].as_array().unwrap().is_empty(), "{list}");
    assert_eq!(sink.count(), 0);
}

#[tokio::test]
async fn too_many_or_too_large_headers_get_431_before_any_handler() {
    let (gw, sink) = gateway(SHORT).await;

    // 150 small headers: hyper's limit is 100.
    let mut client = TcpStream::connect(addr(&gw)).await.unwrap();
    let mut head =
        String::from("POST /v1/topics/t/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n");
    for i in 0..150 {
        head.push_str(&format!("X-Filler-{i}: v\r\n"));
    }
    head.push_str("Content-Length: 27\r\n\r\n{\"type\": \"x\", \"payload\": 1}");
    client.write_all(head.as_bytes()).await.unwrap();
    let answer = read_until_closed(&mut client, Duration::from_secs(5)).await;
    assert!(answer.starts_with("HTTP/1.1 431"), "{answer}");

    // One 100 KB header: over the 64 KiB head limit. The server answers 431 and closes, or
    // resets the connection while the client is still sending; either way, no handler runs.
    let response = gw
        .post_builder("/v1/topics/t/events")
        .header("x-big", "b".repeat(100 * 1024))
        .json(&json!({"type": "x", "payload": 1}))
        .send()
        .await;
    if let Ok(response) = response {
        assert_eq!(response.status().as_u16(), 431);
    }

    // A normal request still works, and none of the above reached the store.
    gw.ingest("t", "x", json!({"ok": true})).await;
    let (_, list) = gw.get("/v1/deliveries").await;
    assert_eq!(list["deliveries"].as_array().unwrap().len(), 1, "{list}");
    sink.wait_for(1, WAIT).await;
}

#[tokio::test]
async fn shutdown_stops_accepting_and_lets_a_request_in_progress_finish() {
    let (mut gw, sink) = gateway("  shutdown_grace: 10s\n").await;
    let address = addr(&gw);
    let body = br#"{"type": "x", "id": "in-flight", "payload": {"n": 1}}"#;
    let mut client = TcpStream::connect(address).await.unwrap();
    // `Expect: 100-continue`: the server's "100 Continue" says the handler is reading the body,
    // so the request is in progress (not a connection that merely has bytes waiting).
    client
        .write_all(
            format!(
                "POST /v1/topics/t/events HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
                 Expect: 100-continue\r\nContent-Length: {}\r\n\r\n",
                body.len()
            )
            .as_bytes(),
        )
        .await
        .unwrap();
    let mut interim = Vec::new();
    while !interim.ends_with(b"\r\n\r\n") {
        let mut byte = [0u8; 1];
        let n = tokio::time::timeout(WAIT, client.read(&mut byte))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(n, 1, "closed before 100 Continue");
        interim.push(byte[0]);
    }
    assert!(
        interim.starts_with(b"HTTP/1.1 100"),
        "{}",
        String::from_utf8_lossy(&interim)
    );
    client.write_all(&body[..10]).await.unwrap();
    // A client that connected and never said anything must not hold shutdown up (the header
    // timeout here is the default 10 s).
    let _silent = TcpStream::connect(address).await.unwrap();

    let gateway = gw.gateway.take().unwrap();
    let shutdown = tokio::spawn(gateway.shutdown());

    // New connections are refused once the listener is closed.
    let deadline = tokio::time::Instant::now() + WAIT;
    while TcpStream::connect(address).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "still accepting after shutdown began"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        !shutdown.is_finished(),
        "shutdown did not wait for the request in progress"
    );

    // The request in progress completes, durably.
    client.write_all(&body[10..]).await.unwrap();
    let answer = read_until_closed(&mut client, WAIT).await;
    assert!(answer.starts_with("HTTP/1.1 202"), "{answer}");
    tokio::time::timeout(Duration::from_secs(5), shutdown)
        .await
        .expect("shutdown finishes once the request is done")
        .unwrap();

    // It was committed: a restart delivers it.
    let gw = TestGateway::start_in(
        gw.dir.clone(),
        &format!(
            "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: {}\n    topics: [t]\n",
            sink.url("/")
        ),
        gw.clock.clone(),
    )
    .await;
    let received = sink.wait_for(1, WAIT).await;
    assert_eq!(received[0].header("webhook-id"), "in-flight");
    drop(gw);
}
