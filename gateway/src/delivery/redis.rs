//! Redis Streams: `redis://[user:pass@]host:port/DB?stream=KEY[&maxlen=N]` (`rediss://` for
//! TLS). A message is an `XADD` whose fields are the headers and a `body` field (with
//! `MAXLEN ~ N` when the URL asks for a cap), delivered when Redis answered the entry's id; an
//! error reply (a key of another type, out of memory, a refused command) is `rejected`.
//!
//! On the `redis` crate's multiplexed connection, over a stream this module opens: TCP to the
//! judged address, and TLS with tokio-rustls checking the URL's host name. One connection per
//! server, credentials and database.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::time::Instant;

use super::broker::{
    About, Answer, Broker, BrokerAddress, BrokerTarget, Dialer, Failure, Live, decoded_path, header_pairs,
    opened,
};
use super::{OutgoingMessage, UrlError};

/// A stream on a Redis server.
#[derive(Clone, Debug, PartialEq)]
pub struct RedisTarget {
    pub server: BrokerAddress,
    pub db: i64,
    pub stream: String,
    /// `MAXLEN ~ N`: Redis trims the stream to about this many entries.
    pub max_len: Option<u64>,
    pub(super) shown: String,
}

impl BrokerTarget for RedisTarget {
    fn parse(url: &url::Url) -> Result<RedisTarget, UrlError> {
        let (server, shown) = opened(url, "rediss", [6379, 6379], &["stream", "maxlen"])?;
        let path = decoded_path(url)?;
        let db = match path.trim_end_matches('/') {
            "" => 0,
            n => n.parse::<i64>().ok().filter(|n| *n >= 0).ok_or_else(|| {
                UrlError::Target(format!("`{shown}`: the path is the database number, not `{n}`"))
            })?,
        };
        let mut stream = None;
        let mut max_len = None;
        for (key, value) in url.query_pairs() {
            match key.as_ref() {
                "stream" => stream = Some(value.into_owned()),
                _ => {
                    max_len = Some(value.parse::<u64>().ok().filter(|n| *n > 0).ok_or_else(|| {
                        UrlError::Target(format!("`{shown}`: maxlen `{value}` is not a positive number"))
                    })?);
                }
            }
        }
        let stream = stream
            .filter(|s| !s.is_empty())
            .ok_or_else(|| UrlError::Target(format!("`{shown}` names no stream (?stream=KEY)")))?;
        Ok(RedisTarget {
            server,
            db,
            stream,
            max_len,
            shown,
        })
    }

    fn about(&self) -> About<'_> {
        About::new("redis", &self.server, &self.shown).goes_to("stream", &self.stream)
    }
}

/// Which connection a stream needs: the server, credentials and database.
#[derive(Clone, PartialEq, Eq, Hash)]
pub(super) struct LinkKey {
    server: BrokerAddress,
    db: i64,
}

#[derive(Clone)]
pub(super) struct RedisLink {
    conn: redis::aio::MultiplexedConnection,
    /// False once the connection's driver ended or a command found the connection broken.
    open: Arc<AtomicBool>,
}

impl Live for RedisLink {
    fn is_open(&self) -> bool {
        self.open.load(Ordering::SeqCst)
    }
}

/// Appends to streams over one multiplexed connection per server and database.
pub(super) struct Redis;

impl Broker for Redis {
    type Target = RedisTarget;
    type Key = LinkKey;
    type Link = RedisLink;

    fn key(target: &RedisTarget) -> LinkKey {
        LinkKey {
            server: target.server.clone(),
            db: target.db,
        }
    }

    async fn dial(dialer: &Dialer, target: &RedisTarget, _deadline: Instant) -> Result<RedisLink, Failure> {
        connect(dialer, target).await
    }

    async fn send(
        link: &RedisLink,
        target: &RedisTarget,
        msg: &OutgoingMessage,
        deadline: Instant,
    ) -> Result<Answer, Failure> {
        let mut cmd = redis::cmd("XADD");
        cmd.arg(&target.stream);
        if let Some(n) = target.max_len {
            cmd.arg("MAXLEN").arg("~").arg(n);
        }
        cmd.arg("*");
        for (name, value) in header_pairs(&msg.headers) {
            cmd.arg(name).arg(value);
        }
        cmd.arg("body").arg(msg.body.as_ref());
        let mut conn = link.conn.clone();
        let id: String = match tokio::time::timeout_at(deadline, cmd.query_async(&mut conn)).await {
            Err(_) => return Err(Failure::timeout("no answer to XADD within the attempt's timeout")),
            Ok(Ok(id)) => id,
            Ok(Err(e)) if e.is_io_error() || e.is_connection_dropped() || e.is_unrecoverable_error() => {
                link.open.store(false, Ordering::SeqCst);
                return Err(Failure::connect(format!(
                    "the connection to {} broke: {e}",
                    target.server
                )));
            }
            Ok(Err(e)) => return Err(Failure::rejected(format!("XADD refused: {e}"))),
        };
        Ok(Answer {
            fields: vec![
                ("stream".to_owned(), target.stream.clone()),
                ("entry_id".to_owned(), id.clone()),
            ],
            summary: format!("XADD: entry {id} in stream {}", target.stream),
        })
    }
}

/// The connection's settings: no timeouts of the `redis` crate's own (by default it fails a
/// command unanswered after 500 ms, and a handshake after 1 s). The attempt's deadline decides,
/// as for every destination: a Redis that answers an `XADD` in 800 ms under load has
/// accepted the message, and failing it would send it twice.
fn link_config() -> redis::AsyncConnectionConfig {
    redis::AsyncConnectionConfig::new()
        .set_response_timeout(None)
        .set_connection_timeout(None)
}

/// A multiplexed connection over TCP (and TLS) to the judged address, authenticated and on
/// the URL's database.
async fn connect(dialer: &Dialer, target: &RedisTarget) -> Result<RedisLink, Failure> {
    let server = &target.server;
    let tcp = dialer.tcp(server).await?;
    let mut info = redis::RedisConnectionInfo::default().set_db(target.db);
    if let Some(user) = &server.username {
        info = info.set_username(user);
    }
    if let Some(pass) = &server.password {
        info = info.set_password(pass.expose());
    }
    let refused = |e: redis::RedisError| Failure::connect(format!("connect to {server}: {e}"));
    let open = Arc::new(AtomicBool::new(true));
    let (conn, driver) = if server.tls {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(dialer.tls_config(server)?));
        let name = rustls::pki_types::ServerName::try_from(server.bare_host().to_owned())
            .map_err(|_| Failure::connect(format!("`{}` is not a TLS server name", server.host)))?;
        let tls = connector.connect(name, tcp).await.map_err(|e| Failure {
            kind: crate::model::ErrorKind::Tls,
            detail: format!("TLS with {server}: {}", super::describe_io(&e)),
        })?;
        let (conn, driver) = redis::aio::MultiplexedConnection::new_with_config(&info, tls, link_config())
            .await
            .map_err(refused)?;
        (conn, boxed(driver))
    } else {
        let (conn, driver) = redis::aio::MultiplexedConnection::new_with_config(&info, tcp, link_config())
            .await
            .map_err(refused)?;
        (conn, boxed(driver))
    };
    // The driver reads and writes the socket; it ends when the connection breaks or the last
    // handle to it is dropped (the link was replaced).
    let ended = open.clone();
    tokio::spawn(async move {
        driver.await;
        ended.store(false, Ordering::SeqCst);
    });
    Ok(RedisLink { conn, open })
}

fn boxed(
    driver: impl std::future::Future<Output = ()> + Send + 'static,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>> {
    Box::pin(driver)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<RedisTarget, UrlError> {
        RedisTarget::parse(&url::Url::parse(text).unwrap())
    }

    #[test]
    fn the_stream_is_required_and_the_cap_and_database_are_optional() {
        let t = parse("redis://h/?stream=orders").unwrap();
        assert_eq!((t.db, t.stream.as_str(), t.max_len), (0, "orders", None));
        let t = parse("rediss://:pw@h:6380/3?stream=orders&maxlen=1000").unwrap();
        assert_eq!(
            (t.db, t.max_len, t.server.port, t.server.tls),
            (3, Some(1000), 6380, true)
        );
        for bad in [
            "redis://h/0",
            "redis://h/x?stream=s",
            "redis://h/?stream=s&maxlen=0",
            "redis://h/?stream=s&maxlen=lots",
            "redis://h/?stream=s&count=1",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
    }
}
