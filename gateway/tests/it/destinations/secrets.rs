//! Credentials in a broker URL are secrets: the logs, the API's answers (endpoint, deliveries,
//! attempts, the test call, config errors) and the attempt records show `***@host`.

use serde_json::json;

use super::{address_of, broker};
use crate::support::{TestGateway, WAIT, captured_logs, deliveries_of};

const PASSWORD: &str = "pw-0f3c9e1d7b5a";

#[tokio::test]
async fn credentials_in_broker_urls_reach_no_log_and_no_answer() {
    let (Some(redis), Some(nats)) = (broker("HOOKGATE_TEST_REDIS"), broker("HOOKGATE_TEST_NATS")) else {
        return;
    };
    let (redis, nats) = (address_of(&redis), address_of(&nats));
    // Redis without a password refuses AUTH: the attempts fail and say why, without it.
    let gw = TestGateway::start(&format!(
        "server:\n  api_keys: [admin-key-0123456789]\ntopics:\n  t: {{}}\nendpoints:\n  r:\n    url: 'redis://hookgate:{PASSWORD}@{redis}/0?stream=hgtest_secret'\n    topics: [t]\n  n:\n    url: 'nats://hookgate:{PASSWORD}@{nats}/hgtest_secret.nostream'\n    topics: [t]\n"
    ))
    .await;
    gw.ingest("t", "x", json!({})).await;
    let mut answers = Vec::new();
    for name in ["r", "n"] {
        let delivery = deliveries_of(&gw, name).await[0]["id"]
            .as_str()
            .unwrap()
            .to_owned();
        let detail = gw
            .wait_until(&format!("/v1/deliveries/{delivery}"), WAIT, |d| {
                d["attempt_count"] == 1 && d["status"] != "delivering"
            })
            .await;
        assert!(detail["attempts"][0]["error"].is_string(), "{detail}");
        answers.push(detail);
        answers.push(gw.get(&format!("/v1/endpoints/{name}")).await.1);
        answers.push(gw.post(&format!("/v1/endpoints/{name}/test"), json!({})).await.1);
    }
    answers.push(gw.get("/v1/endpoints").await.1);
    // A config error about such a URL does not repeat it either.
    let (status, refused) = gw
        .post(
            "/v1/endpoints",
            json!({"url": format!("amqp://u:{PASSWORD}@127.0.0.1/%2f?queue=x"), "topics": ["t"]}),
        )
        .await;
    assert_eq!(status, 400, "{refused}");
    answers.push(refused);
    let endpoint = &answers[1];
    assert!(endpoint["url"].as_str().unwrap().contains("***@"), "{endpoint}");
    for answer in &answers {
        assert!(!answer.to_string().contains(PASSWORD), "{answer}");
    }
    assert!(
        !captured_logs().contains(PASSWORD),
        "a log line holds the password"
    );
}
