//! The sink end to end over loopback: counting, `/stats`, flaky answers, fixed-status paths
//! and signature verification.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{Hmac, Mac};
use hookgate_sink::{Sink, SinkOptions, Stats};
use sha2::Sha256;

const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

fn sign(id: &str, ts: i64, body: &str) -> String {
    let key = STANDARD.decode(&SECRET["whsec_".len()..]).unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{ts}.{body}").as_bytes());
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

fn now_s() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

async fn post(client: &reqwest::Client, url: &str, id: &str, signature: Option<&str>) -> u16 {
    let ts = now_s();
    let body = r#"{"n":1}"#;
    let mut req = client
        .post(url)
        .header("webhook-id", id)
        .header("webhook-timestamp", ts.to_string())
        .body(body);
    let good = sign(id, ts, body);
    req = req.header("webhook-signature", signature.unwrap_or(&good));
    req.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn counts_requests_and_distinct_ids_and_serves_stats() {
    let sink = Sink::start(SinkOptions::loopback()).await.unwrap();
    let client = reqwest::Client::new();
    for id in ["a", "b", "a", "c"] {
        assert_eq!(post(&client, &sink.url("/hook"), id, None).await, 200);
    }
    let over_http: Stats = serde_json::from_slice(
        &client
            .get(sink.url("/stats"))
            .send()
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(over_http, sink.stats());
    assert_eq!(over_http.requests, 4);
    assert_eq!(over_http.answered_ok, 4);
    assert_eq!(over_http.distinct_ids, 3);
    assert_eq!(over_http.body_bytes, 4 * 7);
    assert!(over_http.first_request_unix_us <= over_http.last_request_unix_us);

    let reset = client.post(sink.url("/stats/reset")).send().await.unwrap();
    assert_eq!(reset.status().as_u16(), 204);
    assert_eq!(sink.stats(), Stats::default());
    sink.shutdown().await;
}

#[tokio::test]
async fn flaky_mode_fails_the_chosen_share_and_status_paths_always_answer_their_status() {
    let sink = Sink::start(SinkOptions {
        fail_fraction: 0.25,
        fail_status: 502,
        ..SinkOptions::loopback()
    })
    .await
    .unwrap();
    let client = reqwest::Client::new();
    let mut statuses = Vec::new();
    for i in 0..8 {
        statuses.push(post(&client, &sink.url("/hook"), &format!("e{i}"), None).await);
    }
    assert_eq!(statuses.iter().filter(|s| **s == 502).count(), 2, "{statuses:?}");
    assert_eq!(post(&client, &sink.url("/status/410"), "gone", None).await, 410);
    let s = sink.stats();
    assert_eq!((s.answered_ok, s.answered_error), (6, 3));
}

#[tokio::test]
async fn with_a_secret_bad_signatures_are_refused_and_counted() {
    let sink = Sink::start(SinkOptions {
        secret: Some(SECRET.into()),
        ..SinkOptions::loopback()
    })
    .await
    .unwrap();
    let client = reqwest::Client::new();
    assert_eq!(post(&client, &sink.url("/hook"), "ok", None).await, 200);
    assert_eq!(
        post(&client, &sink.url("/hook"), "bad", Some("v1,AAAA")).await,
        400
    );
    let s = sink.stats();
    assert_eq!((s.signatures_valid, s.signatures_invalid), (1, 1));
    assert_eq!((s.answered_ok, s.answered_error), (1, 1));
}

#[tokio::test]
async fn ids_lists_the_webhook_ids_answered_with_a_2xx() {
    let sink = Sink::start(SinkOptions {
        fail_fraction: 0.5,
        ..SinkOptions::loopback()
    })
    .await
    .unwrap();
    let client = reqwest::Client::new();
    // Every other request fails: "b" succeeds then fails, "a" fails then succeeds, "c" fails.
    let statuses = [
        post(&client, &sink.url("/hook"), "b", None).await,
        post(&client, &sink.url("/hook"), "a", None).await,
        post(&client, &sink.url("/hook"), "a", None).await,
        post(&client, &sink.url("/hook"), "b", None).await,
    ];
    assert_eq!(statuses, [200, 503, 200, 503]);
    assert_eq!(post(&client, &sink.url("/status/500"), "c", None).await, 500);
    let ids = client.get(sink.url("/ids")).send().await.unwrap();
    assert_eq!(ids.status().as_u16(), 200);
    assert_eq!(ids.text().await.unwrap(), "a\nb\n");
    assert_eq!(sink.ok_ids(), ["a", "b"]);
    let s = sink.stats();
    assert_eq!((s.distinct_ids, s.distinct_ids_ok), (3, 2));
}

/// Runs the `hookgate-sink` binary with `--print` on a free port; returns it and its address.
fn print_mode_sink() -> (std::process::Child, String) {
    use std::io::BufRead as _;
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_hookgate-sink"))
        .args(["--listen", "127.0.0.1:0", "--quiet", "--print"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stderr.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    (child, addr)
}

#[tokio::test]
async fn with_print_every_request_is_written_to_stdout() {
    use std::io::BufRead as _;
    let (mut child, addr) = print_mode_sink();
    let answer = reqwest::Client::new()
        .post(format!("http://{addr}/hooks/billing?x=1"))
        .header("webhook-id", "evt_print")
        .header("x-team", "payments")
        .body(r#"{"order":42}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status().as_u16(), 200);
    let mut printed = Vec::new();
    for line in std::io::BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line == "---" {
            break;
        }
        printed.push(line);
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(printed[0], "POST /hooks/billing?x=1", "{printed:?}");
    assert!(
        printed.contains(&"webhook-id: evt_print".to_owned()),
        "{printed:?}"
    );
    assert!(printed.contains(&"x-team: payments".to_owned()), "{printed:?}");
    // Headers, a blank line, then the body.
    assert_eq!(printed[printed.len() - 2], "", "{printed:?}");
    assert_eq!(printed[printed.len() - 1], r#"{"order":42}"#, "{printed:?}");
}
