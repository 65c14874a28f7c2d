//! One long-lived connection per broker, shared by every attempt that needs it, made again
//! with backoff when it breaks.
//!
//! A link is made on first use, inside the attempt that needs it and within that attempt's
//! time. When it is found broken, the next attempt makes a new one; when making one fails,
//! attempts in the following backoff window (100 ms doubling to 10 s) fail at once with
//! `connect` and the last error instead of hammering a broker that is down. No attempt waits
//! past its own deadline: neither for the link's lock nor for a connect.

use std::collections::HashMap;
use std::future::Future;
use std::hash::Hash;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;

use crate::model::ErrorKind;

/// The first wait after a failed connect; it doubles with every further failure.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// The longest wait between two connects to a broker that is down.
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Why an attempt failed on the transport: its error kind and a short text for people
/// (never a secret).
#[derive(Clone, Debug, PartialEq)]
pub(in crate::delivery) struct Failure {
    pub(in crate::delivery) kind: ErrorKind,
    pub(in crate::delivery) detail: String,
}

impl Failure {
    pub(in crate::delivery) fn connect(detail: impl Into<String>) -> Failure {
        Failure {
            kind: ErrorKind::Connect,
            detail: detail.into(),
        }
    }

    pub(in crate::delivery) fn rejected(detail: impl Into<String>) -> Failure {
        Failure {
            kind: ErrorKind::Rejected,
            detail: detail.into(),
        }
    }

    pub(in crate::delivery) fn timeout(detail: impl Into<String>) -> Failure {
        Failure {
            kind: ErrorKind::Timeout,
            detail: detail.into(),
        }
    }
}

/// A connection a link holds: cheap to clone (a handle), and able to say whether it still
/// works.
pub(in crate::delivery) trait Live: Clone + Send + 'static {
    fn is_open(&self) -> bool;
}

/// The links of one transport, by broker.
pub(in crate::delivery) struct Links<K, C> {
    links: Mutex<HashMap<K, Arc<tokio::sync::Mutex<Link<C>>>>>,
}

struct Link<C> {
    conn: Option<C>,
    failures: u32,
    retry_at: Option<Instant>,
    last_error: String,
}

impl<K: Eq + Hash + Clone, C: Live> Links<K, C> {
    pub(in crate::delivery) fn new() -> Self {
        Links {
            links: Mutex::new(HashMap::new()),
        }
    }

    /// The open connection to `key`, made now with `connect` if there is none and the
    /// backoff allows, all by `deadline`.
    pub(in crate::delivery) async fn get<F, Fut>(
        &self,
        key: &K,
        deadline: Instant,
        connect: F,
    ) -> Result<C, Failure>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = Result<C, Failure>>,
    {
        let link = self.link(key);
        let Ok(mut link) = tokio::time::timeout_at(deadline, link.lock()).await else {
            return Err(Failure::timeout(
                "no connection to the broker within the attempt's timeout",
            ));
        };
        if let Some(conn) = &link.conn {
            if conn.is_open() {
                return Ok(conn.clone());
            }
            link.conn = None;
        }
        let now = Instant::now();
        if let Some(at) = link.retry_at
            && now < at
        {
            return Err(Failure::connect(format!(
                "{} (next connection try in {} ms)",
                link.last_error,
                at.duration_since(now).as_millis()
            )));
        }
        let outcome = match tokio::time::timeout_at(deadline, connect()).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Failure::timeout(
                "no connection to the broker within the attempt's timeout",
            )),
        };
        match outcome {
            Ok(conn) => {
                link.conn = Some(conn.clone());
                link.failures = 0;
                link.retry_at = None;
                Ok(conn)
            }
            Err(failure) => {
                link.failures = link.failures.saturating_add(1);
                link.retry_at = Some(Instant::now() + backoff(link.failures));
                link.last_error = failure.detail.clone();
                Err(failure)
            }
        }
    }

    /// Forgets every connection (the allow list lost a network: a link made under the old
    /// list may reach an address that is now refused).
    pub(in crate::delivery) fn clear(&self) {
        self.lock().clear();
    }

    fn link(&self, key: &K) -> Arc<tokio::sync::Mutex<Link<C>>> {
        self.lock()
            .entry(key.clone())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Mutex::new(Link {
                    conn: None,
                    failures: 0,
                    retry_at: None,
                    last_error: String::new(),
                }))
            })
            .clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Arc<tokio::sync::Mutex<Link<C>>>>> {
        self.links.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The wait after the `failures`-th failed connect in a row.
fn backoff(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST_BACKOFF.saturating_mul(1 << doublings).min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    #[derive(Clone)]
    struct Conn(Arc<AtomicBool>);

    impl Live for Conn {
        fn is_open(&self) -> bool {
            self.0.load(Ordering::SeqCst)
        }
    }

    fn soon() -> Instant {
        Instant::now() + Duration::from_secs(5)
    }

    #[test]
    fn backoff_doubles_to_its_cap() {
        assert_eq!(backoff(1), Duration::from_millis(100));
        assert_eq!(backoff(2), Duration::from_millis(200));
        assert_eq!(backoff(5), Duration::from_millis(1600));
        assert_eq!(backoff(40), MAX_BACKOFF);
    }

    #[tokio::test]
    async fn one_connection_serves_every_attempt_until_it_breaks() {
        let links = Links::<&str, Conn>::new();
        let made = AtomicUsize::new(0);
        let open = Arc::new(AtomicBool::new(true));
        let connect = || async {
            made.fetch_add(1, Ordering::SeqCst);
            Ok(Conn(open.clone()))
        };
        links.get(&"a", soon(), connect).await.unwrap();
        links.get(&"a", soon(), connect).await.unwrap();
        assert_eq!(made.load(Ordering::SeqCst), 1);
        open.store(false, Ordering::SeqCst);
        let again = links
            .get(&"a", soon(), || async {
                made.fetch_add(1, Ordering::SeqCst);
                Ok(Conn(Arc::new(AtomicBool::new(true))))
            })
            .await
            .unwrap();
        assert!(again.is_open());
        assert_eq!(made.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_failed_connect_fails_the_next_attempts_at_once_until_the_backoff_ends() {
        let links = Links::<&str, Conn>::new();
        let tries = AtomicUsize::new(0);
        let refuse = || async {
            tries.fetch_add(1, Ordering::SeqCst);
            Err(Failure::connect("connect to 127.0.0.1:1: connection refused"))
        };
        let first = links.get(&"a", soon(), refuse).await.err().unwrap();
        assert_eq!(first.kind, ErrorKind::Connect);
        let second = links.get(&"a", soon(), refuse).await.err().unwrap();
        assert_eq!(second.kind, ErrorKind::Connect);
        assert!(second.detail.contains("connection refused"), "{}", second.detail);
        assert!(second.detail.contains("next connection try"), "{}", second.detail);
        assert_eq!(
            tries.load(Ordering::SeqCst),
            1,
            "no second connect within the backoff"
        );
    }

    #[tokio::test]
    async fn a_connect_that_hangs_ends_at_the_attempts_deadline() {
        let links = Links::<&str, Conn>::new();
        let deadline = Instant::now() + Duration::from_millis(20);
        let failure = links
            .get(&"a", deadline, std::future::pending::<Result<Conn, Failure>>)
            .await
            .err()
            .unwrap();
        assert_eq!(failure.kind, ErrorKind::Timeout);
    }
}
