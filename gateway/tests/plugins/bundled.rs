//! The bundled plugins against known vectors: what each one produces for a given input.

use super::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn github_signature_matches_githubs_documented_example() {
    let f = host_with(&["github-signature"]);
    let headers = f
        .host
        .sign(
            &binding("github-signature", &[]),
            sign_input(b"Hello, World!", &["It's a Secret to Everybody"]),
        )
        .await
        .unwrap();
    assert_eq!(
        header(&headers, "X-Hub-Signature-256"),
        Some("sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stripe_signature_matches_an_independent_hmac_and_signs_with_every_rotating_key() {
    let f = host_with(&["stripe-signature"]);
    let body = br#"{"id":"evt_1","object":"event"}"#;
    let t = NOW_MS / 1000;
    let signed = [format!("{t}.").as_bytes(), &body[..]].concat();

    let headers = f
        .host
        .sign(
            &binding("stripe-signature", &[]),
            sign_input(body, &["whsec_c3RyaXBl"]),
        )
        .await
        .unwrap();
    assert_eq!(
        header(&headers, "Stripe-Signature").unwrap(),
        format!("t={t},v1={}", hmac_sha256_hex(b"whsec_c3RyaXBl", &signed))
    );

    let rotating = f
        .host
        .sign(
            &binding("stripe-signature", &[]),
            sign_input(body, &["new-secret", "old-secret"]),
        )
        .await
        .unwrap();
    assert_eq!(
        header(&rotating, "Stripe-Signature").unwrap(),
        format!(
            "t={t},v1={},v1={}",
            hmac_sha256_hex(b"new-secret", &signed),
            hmac_sha256_hex(b"old-secret", &signed)
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_signer_without_a_usable_secret_fails_with_bad_secret() {
    let f = host_with(&["github-signature"]);
    let none = f
        .host
        .sign(&binding("github-signature", &[]), sign_input(b"x", &[]))
        .await
        .unwrap_err();
    assert_eq!(none.detail, FailureDetail::BadSecret);
    let empty = f
        .host
        .sign(&binding("github-signature", &[]), sign_input(b"x", &[""]))
        .await
        .unwrap_err();
    assert_eq!(empty.detail, FailureDetail::BadSecret);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudevents_wraps_json_payloads_in_a_structured_event() {
    let f = host_with(&["cloudevents"]);
    let result = f
        .host
        .transform(
            &binding(
                "cloudevents",
                &[("source", "https://shop.example"), ("unknown_key", "ignored")],
            ),
            transform_input(br#"{"order":42}"#),
        )
        .await
        .unwrap();
    let (headers, doc) = forwarded(result);
    assert_eq!(
        doc,
        json!({
            "specversion": "1.0",
            "id": "evt_1",
            "type": "order.created",
            "source": "https://shop.example",
            "time": "2025-12-31T23:59:58.500Z",
            "datacontenttype": "application/json",
            "data": {"order": 42}
        })
    );
    assert_eq!(
        header(&headers, "content-type"),
        Some("application/cloudevents+json; charset=utf-8")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudevents_base64_encodes_payloads_that_are_not_json() {
    let f = host_with(&["cloudevents"]);
    let mut input = transform_input(b"plain \xff bytes");
    input.headers = vec![("Content-Type".into(), b"application/octet-stream".to_vec())];
    let (_, doc) = forwarded(
        f.host
            .transform(&binding("cloudevents", &[]), input)
            .await
            .unwrap(),
    );
    assert_eq!(doc["source"], "/hookgate/topics/orders");
    assert_eq!(doc["datacontenttype"], "application/octet-stream");
    assert_eq!(doc["data_base64"], "cGxhaW4g/yBieXRlcw==");
    assert!(doc.get("data").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cloudevents_copies_json_payloads_as_they_are_and_base64_encodes_broken_json() {
    let f = host_with(&["cloudevents"]);
    let ce = binding("cloudevents", &[("subject", "line \"1\"\n\u{e9}")]);
    let payload = br#" {"text":"caf\u00e9 \"quoted\"","n":[1.50,-2e3,null,true],"nested":{"a":{}}} "#;
    let result = f.host.transform(&ce, transform_input(payload)).await.unwrap();
    let TransformResult::Forward { body, .. } = result else {
        panic!("expected forward")
    };
    let text = std::str::from_utf8(&body).unwrap();
    // The payload is copied in unchanged (numbers keep their spelling), without the
    // surrounding whitespace.
    assert!(
        text.contains(
            r#""data":{"text":"caf\u00e9 \"quoted\"","n":[1.50,-2e3,null,true],"nested":{"a":{}}}"#
        ),
        "{text}"
    );
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(doc["subject"], "line \"1\"\n\u{e9}");
    assert_eq!(doc["data"]["text"], "caf\u{e9} \"quoted\"");

    // Declared JSON that does not parse is sent as bytes, not as broken JSON.
    let (_, doc) = forwarded(
        f.host
            .transform(&ce, transform_input(br#"{"order":"#))
            .await
            .unwrap(),
    );
    assert_eq!(doc["data_base64"], "eyJvcmRlciI6");
    assert!(doc.get("data").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sns_envelope_builds_the_notification_document_and_headers() {
    let f = host_with(&["sns-envelope"]);
    let result = f
        .host
        .transform(
            &binding(
                "sns-envelope",
                &[("topic_arn", "arn:aws:sns:eu-west-1:123456789012:orders")],
            ),
            transform_input(br#"{"order":42}"#),
        )
        .await
        .unwrap();
    let (headers, doc) = forwarded(result);
    assert_eq!(doc["Type"], "Notification");
    assert_eq!(doc["MessageId"], "evt_1");
    assert_eq!(doc["TopicArn"], "arn:aws:sns:eu-west-1:123456789012:orders");
    assert_eq!(doc["Message"], r#"{"order":42}"#);
    assert_eq!(doc["Timestamp"], "2025-12-31T23:59:58.500Z");
    assert_eq!(header(&headers, "x-amz-sns-message-type"), Some("Notification"));
    assert_eq!(header(&headers, "x-amz-sns-message-id"), Some("evt_1"));
    assert_eq!(
        header(&headers, "x-amz-sns-topic-arn"),
        Some("arn:aws:sns:eu-west-1:123456789012:orders")
    );
    assert_eq!(
        header(&headers, "x-amz-sns-subscription-arn"),
        Some("arn:aws:sns:eu-west-1:123456789012:orders:billing")
    );
    assert_eq!(
        header(&headers, "content-type"),
        Some("text/plain; charset=UTF-8")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redact_drops_fields_by_path_and_fails_closed() {
    let f = host_with(&["redact"]);
    let body = json!({
        "customer": {"email": "ada@example.com", "name": "Ada"},
        "items": [{"sku": "a", "price": 1}, {"sku": "b", "price": 2}],
        "card": {"number": "4242", "brand": "visa"}
    });
    let redact = binding(
        "redact",
        &[("paths", r#"["customer.email","items.*.price","card"]"#)],
    );
    let (_, doc) = forwarded(
        f.host
            .transform(&redact, transform_input(body.to_string().as_bytes()))
            .await
            .unwrap(),
    );
    assert_eq!(
        doc,
        json!({"customer": {"name": "Ada"}, "items": [{"sku": "a"}, {"sku": "b"}]})
    );

    let comma_separated = binding("redact", &[("paths", "customer, items")]);
    let (_, doc) = forwarded(
        f.host
            .transform(&comma_separated, transform_input(body.to_string().as_bytes()))
            .await
            .unwrap(),
    );
    assert_eq!(doc, json!({"card": {"number": "4242", "brand": "visa"}}));

    let not_json = f
        .host
        .transform(&redact, transform_input(b"not json"))
        .await
        .unwrap_err();
    assert_eq!(not_json.detail, FailureDetail::Plugin);
    assert!(
        not_json.message.starts_with("invalid_json:"),
        "{}",
        not_json.message
    );
    let unconfigured = f
        .host
        .transform(&binding("redact", &[]), transform_input(b"{}"))
        .await
        .unwrap_err();
    assert!(
        unconfigured.message.starts_with("bad_config:"),
        "{}",
        unconfigured.message
    );
}

pub(super) fn backoff_input(previous_delay_ms: Option<u64>, random: u64) -> BackoffInput {
    BackoffInput {
        attempt: 3,
        max_attempts: 9,
        last_status: Some(503),
        last_error_kind: Some("http_status".into()),
        retry_after_ms: None,
        elapsed_ms: 60_000,
        now_ms: NOW_MS,
        previous_delay_ms,
        random: Some(random),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decorrelated_jitter_draws_between_base_and_three_times_the_previous_wait() {
    let f = host_with(&["decorrelated-jitter"]);
    let b = binding("decorrelated-jitter", &[("base_ms", "500"), ("cap_ms", "10000")]);
    // previous 2000 ms: the wait is drawn from [500, 6000], i.e. 500 + random % 5501.
    let wait = f
        .host
        .backoff(&b, backoff_input(Some(2_000), 12_345))
        .await
        .unwrap();
    assert_eq!(
        wait,
        PluginBackoffDecision::RetryIn(Duration::from_millis(500 + 12_345 % 5_501))
    );
    // Capped: previous 9000 ms would allow 27000, the cap says 10000.
    for random in [0, 1, 9_499, 9_500, u64::MAX] {
        let PluginBackoffDecision::RetryIn(wait) = f
            .host
            .backoff(&b, backoff_input(Some(9_000), random))
            .await
            .unwrap()
        else {
            panic!("decorrelated jitter never gives up")
        };
        assert!((500..=10_000).contains(&(wait.as_millis() as u64)), "{wait:?}");
    }
    // Retry-After wins when it is longer.
    let mut input = backoff_input(None, 0);
    input.retry_after_ms = Some(7_000);
    assert_eq!(
        f.host.backoff(&b, input).await.unwrap(),
        PluginBackoffDecision::RetryIn(Duration::from_millis(7_000))
    );
    let bad = f
        .host
        .backoff(
            &binding("decorrelated-jitter", &[("base_ms", "soon")]),
            backoff_input(None, 0),
        )
        .await
        .unwrap_err();
    assert_eq!(bad.detail, FailureDetail::Plugin);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backoff_answers_are_clamped_to_the_hosts_maximum() {
    let limits = PluginLimits {
        max_backoff_delay: Duration::from_secs(2),
        ..PluginLimits::default()
    };
    let f = host_with_limits(&["decorrelated-jitter"], limits);
    let b = binding(
        "decorrelated-jitter",
        &[("base_ms", "60000"), ("cap_ms", "600000")],
    );
    assert_eq!(
        f.host.backoff(&b, backoff_input(None, 7)).await.unwrap(),
        PluginBackoffDecision::RetryIn(Duration::from_secs(2))
    );
}
