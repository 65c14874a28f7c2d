//! Svix's official Rust SDK (the `svix` crate) against a running hookgate, with only the
//! server URL changed: a smoke like `../smoke.mjs`. Run by gateway/tests/it/svix_sdk.rs with
//! `HOOKGATE_URL` and `HOOKGATE_ADMIN_KEY` set. Prints one line per check, the SDK calls made,
//! and a closing line `N passed, N failed`; exits 1 unless every check passed.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use svix::api::{ApplicationListOptions, MessageListOptions, Svix, SvixOptions};
use svix::error::Error;
use svix::models::{
    ApplicationIn, EndpointIn, EndpointSecretRotateIn, EventTypeIn, MessageIn, MessageStatus,
};
use svix::webhooks::Webhook;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A delivery as the receiver got it: its headers and body.
type Received = Arc<Mutex<Vec<(http::HeaderMap, Vec<u8>)>>>;

#[derive(Default)]
struct Report {
    results: Vec<bool>,
    calls: BTreeSet<String>,
}

impl Report {
    fn check(&mut self, name: &str, ok: bool, detail: impl std::fmt::Debug) {
        self.results.push(ok);
        match ok {
            true => println!("PASS {name}"),
            false => println!("FAIL {name}: {detail:?}"),
        }
    }

    /// Records the answer of an SDK call (`ok`, or the HTTP status it raised).
    fn call<T>(&mut self, label: &str, result: Result<T, Error>) -> Result<T, Error> {
        let answer = match &result {
            Ok(_) => "ok".to_owned(),
            Err(e) => status(e).map_or_else(|| e.to_string(), |s| s.to_string()),
        };
        self.calls.insert(format!("{label}: {answer}"));
        result
    }
}

/// The HTTP status of an SDK error, when the server answered one.
fn status(error: &Error) -> Option<u16> {
    match error {
        Error::Http(e) => Some(e.status.as_u16()),
        Error::Validation(e) => Some(e.status.as_u16()),
        _ => None,
    }
}

/// A receiver on the loopback that answers 200 to every request and keeps what it got.
async fn receiver() -> (String, Received) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}/hook", listener.local_addr().expect("address"));
    let received: Received = Arc::default();
    let kept = received.clone();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            let kept = kept.clone();
            tokio::spawn(async move {
                if let Some(request) = read_request(&mut stream).await {
                    kept.lock().expect("lock").push(request);
                }
                let _ = stream
                    .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\nconnection: close\r\n\r\n")
                    .await;
            });
        }
    });
    (url, received)
}

/// One HTTP/1.1 request with a `content-length` body (what the gateway sends).
async fn read_request(stream: &mut tokio::net::TcpStream) -> Option<(http::HeaderMap, Vec<u8>)> {
    let mut buf = Vec::new();
    let head_end = loop {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).into_owned();
    let mut headers = http::HeaderMap::new();
    for line in head.lines().skip(1).filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        headers.append(
            http::HeaderName::from_bytes(name.trim().as_bytes()).ok()?,
            http::HeaderValue::from_str(value.trim()).ok()?,
        );
    }
    let length: usize = headers.get("content-length")?.to_str().ok()?.parse().ok()?;
    while buf.len() < head_end + length {
        let mut chunk = [0u8; 4096];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Some((headers, buf[head_end..head_end + length].to_vec()))
}

/// Waits (up to 20 s) until the receiver got `n` requests.
async fn wait_for(received: &Received, n: usize) {
    for _ in 0..1000 {
        if received.lock().expect("lock").len() >= n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let url = std::env::var("HOOKGATE_URL").expect("HOOKGATE_URL");
    let admin = std::env::var("HOOKGATE_ADMIN_KEY").expect("HOOKGATE_ADMIN_KEY");
    let mut report = Report::default();
    if let Err(e) = smoke(&url, &admin, &mut report).await {
        report.check("the smoke ran to its end", false, e.to_string());
    }
    println!("SDK calls made (call: answer):");
    for call in &report.calls {
        println!("  {call}");
    }
    let passed = report.results.iter().filter(|ok| **ok).count();
    println!("{passed} passed, {} failed", report.results.len() - passed);
    std::process::exit(i32::from(passed != report.results.len()));
}

async fn smoke(url: &str, admin: &str, report: &mut Report) -> Result<(), Error> {
    let options = SvixOptions {
        server_url: Some(url.to_owned()),
        ..SvixOptions::default()
    };
    let svix = Svix::new(admin.to_owned(), Some(options));
    let (hook, received) = receiver().await;

    report.call("health.get", svix.health().get().await)?;
    let created = svix
        .event_type()
        .create(EventTypeIn::new("order.created".into(), "An order".into()), None)
        .await;
    report.call("event_type.create", created)?;
    let app = ApplicationIn {
        uid: Some("rust-shop".into()),
        ..ApplicationIn::new("Rust shop".into())
    };
    let app = report.call("application.create", svix.application().create(app, None).await)?;
    report.check(
        "an application is created",
        app.id.starts_with("app_") && app.uid.as_deref() == Some("rust-shop"),
        &app,
    );
    let endpoint = EndpointIn {
        event_types: Some(BTreeSet::from(["order.created".to_owned()])),
        ..EndpointIn::new(hook)
    };
    let ep = svix.endpoint().create("rust-shop".into(), endpoint, None).await;
    let ep = report.call("endpoint.create", ep)?;
    let secret = svix
        .endpoint()
        .get_secret("rust-shop".into(), ep.id.clone())
        .await;
    let secret = report.call("endpoint.get_secret", secret)?;

    let message = MessageIn {
        event_id: Some("order-1".into()),
        ..MessageIn::new("order.created".into(), serde_json::json!({"id": 1}))
    };
    let msg = svix
        .message()
        .create("rust-shop".into(), message.clone(), None)
        .await;
    let msg = report.call("message.create", msg)?;
    report.check("a message is accepted", msg.id.starts_with("msg_"), &msg);
    wait_for(&received, 1).await;
    let verified = match received.lock().expect("lock").first() {
        Some((headers, body)) => Webhook::new(&secret.key)
            .and_then(|w| w.verify(body, headers))
            .is_ok(),
        None => false,
    };
    report.check(
        "svix's Webhook verifies the delivery",
        verified,
        "no verified delivery",
    );
    let again = svix.message().create("rust-shop".into(), message, None).await;
    let again = report.call("message.create (same eventId)", again);
    report.check(
        "a repeated eventId is a 409",
        again.as_ref().err().and_then(status) == Some(409),
        again.err(),
    );

    let mut attempts = Vec::new();
    for _ in 0..200 {
        let listed = svix
            .message_attempt()
            .list_by_msg("rust-shop".into(), msg.id.clone(), None)
            .await;
        attempts = report.call("message_attempt.list_by_msg", listed)?.data;
        if !attempts.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    report.check(
        "the attempt is listed as a success",
        attempts
            .first()
            .is_some_and(|a| a.status == MessageStatus::Success),
        &attempts,
    );
    let messages = MessageListOptions {
        limit: Some(10),
        ..MessageListOptions::default()
    };
    let listed = svix.message().list("rust-shop".into(), Some(messages)).await;
    let listed = report.call("message.list", listed)?;
    report.check(
        "the message is listed",
        listed.data.iter().any(|m| m.id == msg.id),
        &listed,
    );
    let apps = ApplicationListOptions {
        limit: Some(250),
        ..ApplicationListOptions::default()
    };
    let apps = report.call("application.list", svix.application().list(Some(apps)).await)?;
    report.check(
        "the application is listed",
        apps.data.iter().any(|a| a.id == app.id),
        &apps,
    );

    let rotated = svix
        .endpoint()
        .rotate_secret(
            "rust-shop".into(),
            ep.id.clone(),
            EndpointSecretRotateIn::new(),
            None,
        )
        .await;
    let rotated = report.call("endpoint.rotate_secret", rotated)?;
    let current = svix
        .endpoint()
        .get_secret("rust-shop".into(), ep.id.clone())
        .await;
    let current = report.call("endpoint.get_secret", current)?;
    report.check(
        "rotation gives a new secret",
        rotated.key == current.key && current.key != secret.key,
        (&rotated.key, &current.key),
    );

    let missing = svix.application().get("no-such-app".into()).await;
    let missing = report.call("application.get (missing)", missing);
    report.check(
        "a missing application is a 404",
        missing.as_ref().err().and_then(status) == Some(404),
        missing.err(),
    );
    Ok(())
}
