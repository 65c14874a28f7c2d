//! Every default of the config file in one place: what a key is when the file leaves it out.
//! The README's "Configuration" section shows the same values as a commented example.

use std::time::Duration;

pub const LISTEN: &str = "127.0.0.1:8080";
pub const DB_PATH: &str = "./data/hookgate.db";
pub const PLUGIN_DIR: &str = "./plugins";
/// The embedded default's plugin folder: beside its database under `./data`, so that a gateway
/// started in a clone of the repository (README "Quick start") does not watch `plugins/`, the
/// bundled plugins' sources, and git ignores what is dropped in.
pub const EMBEDDED_PLUGIN_DIR: &str = "./data/plugins";
/// Under the database's folder unless the file says otherwise.
pub const PLUGIN_CACHE_DIR_NAME: &str = "plugin-cache";
/// The one topic of the embedded default, so that a newcomer's first event is accepted.
pub const TOPIC: &str = "default";
/// The topic of the messages sent through the Svix API (docs/svix.md): always there.
pub const SVIX_TOPIC: &str = "svix";

pub const MAX_BODY_BYTES: usize = 256 * 1024;
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(10);
pub const BODY_TIMEOUT: Duration = Duration::from_secs(30);

pub const PLUGIN_CALL_TIMEOUT: Duration = Duration::from_millis(100);
pub const PLUGIN_CALL_WALL_TIMEOUT: Duration = Duration::from_secs(1);
pub const PLUGIN_MAX_FILE_BYTES: usize = 32 << 20;
pub const PLUGIN_MEMORY_BYTES: usize = 32 << 20;
pub const PLUGIN_MAX_OUTPUT_BYTES: usize = 1 << 20;

pub const DELIVERY_TIMEOUT: Duration = Duration::from_secs(10);
pub const MAX_IN_FLIGHT: u32 = 512;
pub const MAX_IN_FLIGHT_PER_ENDPOINT: u32 = 16;
/// `health.key_blocked_after`: long enough that a retry or two of a head is not an alert.
pub const KEY_BLOCKED_AFTER: Duration = Duration::from_secs(15 * 60);

/// PostgreSQL connections a node opens at most for its work.
pub const PG_MAX_CONNECTIONS: usize = crate::store::PG_MAX_CONNECTIONS;

/// How long a node's claim on an endpoint lasts without renewal (PostgreSQL clusters).
pub const CLUSTER_LEASE: Duration = Duration::from_secs(15);

pub const TRACE_SERVICE_NAME: &str = "hookgate";
pub const TRACE_MAX_QUEUE_SPANS: u32 = 2048;

pub const RETAIN_DELIVERIES: Duration = Duration::from_secs(30 * 86_400);
pub const RETAIN_EVENTS: Duration = Duration::from_secs(30 * 86_400);
pub const RETAIN_IDEMPOTENCY_KEYS: Duration = Duration::from_secs(86_400);

/// Limits, not defaults: values the file may not go below or above.
pub mod limits {
    use std::time::Duration;

    /// The values a duration key may take; the shortest may come with the reason for it.
    #[derive(Debug, Clone, Copy)]
    pub struct Span {
        pub min: Duration,
        pub max: Duration,
        /// Why nothing shorter will do, when it is not plain sense.
        pub min_because: Option<&'static str>,
    }

    const fn span(min: Duration, max: Duration) -> Span {
        Span {
            min,
            max,
            min_because: None,
        }
    }

    const MS: Duration = Duration::from_millis(1);
    const S: Duration = Duration::from_secs(1);
    const MIN: Duration = Duration::from_secs(60);
    const H: Duration = Duration::from_secs(3600);
    const D: Duration = Duration::from_secs(86_400);

    // Every duration key's span. The bounds are wide; they refuse what cannot be meant (a
    // timeout of 0s refuses everything, 99999d is a typo) rather than tune anything.
    pub const SHUTDOWN_GRACE: Span = span(Duration::ZERO, H);
    pub const HEADER_TIMEOUT: Span = span(MS.saturating_mul(100), H);
    pub const BODY_TIMEOUT: Span = span(MS.saturating_mul(100), H);
    /// Renewals go every third of it; a node gone for an hour is forgotten, so that a lapsed
    /// node is listed as such for most of that hour.
    pub const CLUSTER_LEASE: Span = span(S, MIN.saturating_mul(10));
    /// Guest code is interrupted in 2 ms ticks.
    pub const PLUGIN_CALL_TIMEOUT: Span = span(MS.saturating_mul(10), MIN);
    pub const PLUGIN_CALL_WALL_TIMEOUT: Span = span(MS.saturating_mul(10), MIN.saturating_mul(10));
    /// `delivery.timeout` and an endpoint's `timeout`.
    pub const DELIVERY_TIMEOUT: Span = span(MS.saturating_mul(100), MIN.saturating_mul(15));
    pub const PAUSE_AFTER: Span = span(MIN, D.saturating_mul(365));
    pub const DISABLE_AFTER: Span = span(MIN, D.saturating_mul(365));
    pub const KEY_BLOCKED_AFTER: Span = span(MIN, D.saturating_mul(30));
    pub const RETAIN_DELIVERIES: Span = span(H, D.saturating_mul(3650));
    pub const RETAIN_EVENTS: Span = Span {
        min: D.saturating_mul(7),
        max: D.saturating_mul(3650),
        min_because: Some("the window replay needs"),
    };
    pub const RETAIN_IDEMPOTENCY_KEYS: Span = span(MIN, D.saturating_mul(30));

    /// The smallest `storage.max_size`: an empty database alone takes tens of KiB.
    pub const MIN_STORAGE_SIZE: usize = 64 * 1024;
    /// The most `server.workers`: far more threads than cores only adds switching.
    pub const MAX_WORKERS: u32 = 256;
    /// The largest CA file read: a bundle of a few hundred certificates.
    pub const MAX_CA_FILE_BYTES: u64 = 1 << 20;
    /// The largest `telemetry.max_queue_spans`: a span is about a kilobyte.
    pub const MAX_TRACE_QUEUE_SPANS: u32 = 1_000_000;
    /// Topic and endpoint names appear in URLs and metrics labels.
    pub const MAX_NAME_LEN: usize = 128;
}
