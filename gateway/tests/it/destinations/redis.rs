//! Redis Streams destinations: a stream key of the test's own, and a key that holds a string
//! (Redis answers an `XADD` to it with an error); the consumer reads the stream with `XRANGE`.

use std::net::SocketAddr;

use redis::streams::StreamRangeReply;

use super::{Fixture, Got, address_of, broker, common, unique};

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
        let mut conn = client
            .get_multiplexed_async_connection()
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
