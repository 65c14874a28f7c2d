//! Redis Streams destinations: a stream key of the test's own, and a key that holds a string
//! (Redis answers an `XADD` to it with an error); the consumer reads the stream with `XRANGE`.

use std::net::SocketAddr;

use redis::streams::StreamRangeReply;

use serde_json::json;

use super::{Fixture, Got, address_of, broker, common, unique};
use crate::support::{TestGateway, WAIT, deliveries_of};

pub struct RedisFixture {
    broker: SocketAddr,
    conn: redis::aio::MultiplexedConnection,
    stream: String,
    string_key: String,
}

impl RedisFixture {
    pub async fn new() -> Option<RedisFixture> {
        let url = broker("HOOKGATE_TEST_REDIS")?;
        let broker = address_of(&url);
        let client = redis::Client::open(url.as_str()).unwrap();
        // No response timeout: the crate's default (500 ms) fails reads on a busy machine.
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let mut conn = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .expect("Redis is reachable");
        let name = unique();
        let string_key = format!("{name}:string");
        let _: () = redis::cmd("SET")
            .arg(&string_key)
            .arg("not a stream")
            .query_async(&mut conn)
            .await
            .unwrap();
        Some(RedisFixture {
            broker,
            conn,
            stream: format!("{name}:stream"),
            string_key,
        })
    }
}

impl RedisFixture {
    /// Makes Redis hold every write command (an `XADD`) for `ms` milliseconds, from now.
    async fn pause_writes(&self, ms: u64) {
        let mut conn = self.conn.clone();
        let _: () = redis::cmd("CLIENT")
            .arg("PAUSE")
            .arg(ms)
            .arg("WRITE")
            .query_async(&mut conn)
            .await
            .unwrap();
    }
}

impl Fixture for RedisFixture {
    const KIND: &'static str = "redis";

    fn broker_addr(&self) -> SocketAddr {
        self.broker
    }

    fn url(&self, addr: SocketAddr) -> String {
        format!("redis://{addr}/0?stream={}&maxlen=1000", self.stream)
    }

    /// The key holds a string: `XADD` answers WRONGTYPE.
    fn refused_url(&self, addr: SocketAddr) -> String {
        format!("redis://{addr}/0?stream={}", self.string_key)
    }

    async fn received(&self) -> Vec<Got> {
        let mut conn = self.conn.clone();
        let reply: StreamRangeReply = redis::cmd("XRANGE")
            .arg(&self.stream)
            .arg("-")
            .arg("+")
            .query_async(&mut conn)
            .await
            .unwrap();
        reply
            .ids
            .into_iter()
            .map(|entry| {
                let mut body = Vec::new();
                let mut headers = Vec::new();
                for (field, value) in entry.map {
                    let bytes: Vec<u8> = redis::from_redis_value(value).unwrap();
                    if field == "body" {
                        body = bytes;
                    } else {
                        headers.push((field, String::from_utf8(bytes).unwrap()));
                    }
                }
                Got { headers, body }
            })
            .collect()
    }

    async fn cleanup(self) {
        let mut conn = self.conn.clone();
        let _: Result<(), _> = redis::cmd("DEL")
            .arg(&self.stream)
            .arg(&self.string_key)
            .query_async(&mut conn)
            .await;
    }
}

#[tokio::test]
async fn events_arrive_signed_with_their_headers() {
    let Some(f) = RedisFixture::new().await else {
        return;
    };
    common::arrives_signed(f).await;
}

#[tokio::test]
async fn an_error_reply_is_retried_then_dead_lettered() {
    let Some(f) = RedisFixture::new().await else {
        return;
    };
    common::refused_is_retried_then_dead_lettered(f).await;
}

#[tokio::test]
async fn a_server_that_is_down_degrades_the_endpoint() {
    let Some(f) = RedisFixture::new().await else {
        return;
    };
    common::down_degrades_the_endpoint(f).await;
}

#[tokio::test]
async fn per_key_order_holds_under_retries() {
    let Some(f) = RedisFixture::new().await else {
        return;
    };
    common::per_key_order_holds_under_retries(f).await;
}

/// An `XADD` answered after 1.2 s, within the attempt's timeout, is delivered at its first
/// attempt: the attempt's timeout decides, not the Redis client's own default of 500 ms
/// (which failed it as a broken connection and sent the message again).
#[tokio::test]
async fn a_slow_answer_within_the_attempt_timeout_is_delivered() {
    let Some(f) = RedisFixture::new().await else {
        return;
    };
    let url = f.url(f.broker_addr());
    let gw = TestGateway::start(&format!(
        "topics:\n  t: {{}}\nendpoints:\n  e:\n    url: '{url}'\n    topics: [t]\n"
    ))
    .await;
    // The first message opens the gateway's connection before Redis holds writes.
    gw.ingest("t", "order.created", json!({"n": 1})).await;
    common::wait_received(&f, 1).await;
    f.pause_writes(1200).await;
    let slow = gw.ingest("t", "order.created", json!({"n": 2})).await;
    let slow = slow["id"].as_str().unwrap().to_owned();
    common::wait_received(&f, 2).await;
    let delivery = deliveries_of(&gw, "e")
        .await
        .into_iter()
        .find(|d| d["event_id"] == slow.as_str())
        .expect("the second event's delivery");
    let detail = gw
        .wait_until(
            &format!("/v1/deliveries/{}", delivery["id"].as_str().unwrap()),
            WAIT,
            |d| d["status"] == "succeeded" || d["attempts"][0]["error_kind"].is_string(),
        )
        .await;
    assert_eq!(detail["status"], "succeeded", "{detail}");
    assert_eq!(detail["attempts"].as_array().unwrap().len(), 1, "{detail}");
    assert_eq!(f.received().await.len(), 2);
    f.cleanup().await;
}
