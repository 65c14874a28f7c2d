//! The file's shape: what serde reads (`deny_unknown_fields`) and what `hookgate config schema`
//! describes. Nothing here is validated yet; [`super::build`] turns it into a [`super::Config`].

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

use crate::model::text_or_number::Quantity;
use crate::policy::PolicySpec;

/// The hookgate configuration file.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawConfig {
    #[serde(default)]
    pub server: RawServer,
    #[serde(default)]
    pub storage: RawStorage,
    /// How nodes sharing one PostgreSQL database split the work (ignored on SQLite).
    #[serde(default)]
    pub cluster: RawCluster,
    #[serde(default)]
    pub plugins: RawPlugins,
    #[serde(default)]
    pub delivery: RawDelivery,
    #[serde(default)]
    pub health: RawHealth,
    #[serde(default)]
    pub retention: RawRetention,
    /// OpenTelemetry traces. Without this section nothing is exported (webhooks still carry a
    /// `traceparent` and attempts a `trace_id`).
    pub telemetry: Option<RawTelemetry>,
    /// Retry policies by name. The presets `standard`, `sns-http-default`, `sns-aws-managed` and
    /// `sns-customer-managed` always exist and cannot be redefined.
    #[serde(default)]
    pub policies: BTreeMap<String, PolicySpec>,
    /// The topics apps may post to.
    #[serde(default)]
    pub topics: BTreeMap<String, RawTopic>,
    /// The subscribers.
    #[serde(default)]
    pub endpoints: BTreeMap<String, RawEndpoint>,
}

/// An API key: a string (an admin key) or a tenant's key.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawApiKey {
    Admin(String),
    Tenant(RawTenantKey),
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTenantKey {
    pub key: String,
    pub tenant: String,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawServer {
    /// `ip:port` to listen on. Default `127.0.0.1:8080`.
    pub listen: Option<String>,
    /// Bearer keys accepted by the API: a string is an admin key (everything), `{key, tenant}`
    /// a tenant's key (only that tenant's endpoints, deliveries and events). None: no
    /// authentication, allowed only on loopback.
    #[serde(default)]
    pub api_keys: Vec<RawApiKey>,
    /// Keys that sign console tokens, newest first: the first signs, every one verifies (add a
    /// new one in front to rotate, drop the old one once its tokens expired). Default: keys
    /// derived from the admin API keys.
    #[serde(default)]
    pub console_keys: Vec<String>,
    /// The address the console links of console tokens start with, e.g.
    /// `https://hooks.example.com`. Default: `http://` and the listen address.
    pub public_url: Option<String>,
    /// Largest accepted request body, e.g. `256KiB` (the default) or `1MiB`.
    pub max_body: Option<Quantity>,
    /// How long in-flight attempts may finish after SIGTERM/SIGINT, `0s` to `1h`. Default `10s`.
    pub shutdown_grace: Option<Quantity>,
    /// Ingestion requests per second allowed per API key (average, with a burst of the same
    /// size). None: unlimited.
    pub rate_limit_per_key: Option<u32>,
    /// How long a client may take to send a request's headers (and how long an idle
    /// keep-alive connection stays open); slower connections are closed, so that slow clients
    /// cannot hold connections open (slowloris). `100ms` to `1h`; default `10s`.
    pub header_timeout: Option<Quantity>,
    /// How long a client may take to send a request body once its headers are in; a slower
    /// body is refused with 408. `100ms` to `1h`; default `30s`.
    pub body_timeout: Option<Quantity>,
    /// Threads that run requests, attempts and the store's work (the scheduler has one more
    /// of its own), at most 256. Default: one per CPU this process may use. Several nodes on
    /// one machine: give each its share. Read at start only.
    pub workers: Option<u32>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawStorage {
    /// The SQLite database file. Default `./data/hookgate.db`.
    pub path: Option<String>,
    /// The largest the database may grow, e.g. `8GiB` (at least `64KiB`). Reaching it is
    /// handled like a full disk: ingestion answers 503 `storage_unavailable` and nothing is
    /// written until there is room. Reloadable: raising it makes room without a restart.
    /// Default: no cap.
    pub max_size: Option<Quantity>,
    /// A PostgreSQL database instead of the SQLite file, e.g.
    /// `postgres://hookgate:${PGPASSWORD}@db.internal/hookgate`. Read at start only.
    pub url: Option<String>,
    /// PostgreSQL: the most connections this node opens for its work (one more listens for
    /// the other nodes). Default 16. Read at start only.
    pub max_connections: Option<usize>,
    /// The key the secrets the database keeps (endpoint secrets, credentials, header values)
    /// are encrypted under: base64 of 32 random bytes (`hookgate keygen storage`), usually
    /// `${HOOKGATE_ENCRYPTION_KEY}`. Required with `url`; on SQLite it overrides the key file
    /// beside the database (`hookgate.db` → `hookgate.key`), which is made on the first start.
    /// Read at start only.
    pub encryption_key: Option<String>,
    /// Earlier keys, which still decrypt what they encrypted, while a rotation is under way:
    /// `hookgate storage rekey` encrypts everything under `encryption_key`, after which they can
    /// go. Read at start only.
    #[serde(default)]
    pub previous_encryption_keys: Vec<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawCluster {
    /// How long a node's claim on an endpoint's deliveries lasts without renewal: after a node
    /// dies, the others take its endpoints over within about this long plus a third of it.
    /// Renewed every third of it while the node runs. `1s` to `10m`; default `15s`. Read at
    /// start only.
    pub lease: Option<Quantity>,
    /// This node's id in `GET /v1/cluster` and the lease table (letters, digits, `.`, `_`,
    /// `-`; at most 64). Default: the host name and a random suffix, new at every start.
    pub node_id: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawPlugins {
    /// Folder watched for `*.wasm` plugins. Default `./plugins`.
    pub dir: Option<String>,
    /// Folder for compiled plugin artifacts. Default: `plugin-cache` next to the database.
    pub cache_dir: Option<String>,
    /// Serve the plugins built into the binary (`js`, `cloudevents`, …; a file of the same
    /// name in `dir` overrides one). Default `true`; `false`: only the folder's files.
    pub bundled: Option<bool>,
    /// CPU time a plugin call may take, `10ms` to `1m`. Default `100ms`.
    pub call_timeout: Option<Quantity>,
    /// Wall-clock time a plugin call may take, sleeping, waiting and host calls included
    /// (never less than `call_timeout`), `10ms` to `10m`. Default `1s`.
    pub call_wall_timeout: Option<Quantity>,
    /// Linear memory a plugin instance may grow to. Default `32MiB`.
    pub memory: Option<Quantity>,
    /// Largest body + headers a plugin may return. Default `1MiB`.
    pub max_output: Option<Quantity>,
    /// Largest plugin file loaded; larger files are refused before they are compiled. Default
    /// `32MiB`.
    pub max_file_size: Option<Quantity>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawDelivery {
    /// Whole-request timeout of an attempt, `100ms` to `15m`. Default `10s`.
    pub timeout: Option<Quantity>,
    /// CIDRs exempt from the private-address block, e.g. `127.0.0.0/8`.
    #[serde(default)]
    pub allow_networks: Vec<String>,
    /// Attempts in flight at once, over all endpoints. Default 512.
    pub max_in_flight: Option<u32>,
    /// Attempts in flight at once per endpoint, unless the endpoint says otherwise. Default 16.
    pub max_in_flight_per_endpoint: Option<u32>,
    /// PEM files of certificate authorities trusted for `https` endpoints besides Mozilla's
    /// roots, e.g. a company's internal CA. Read at start; a change needs a restart.
    #[serde(default)]
    pub ca_certs: Vec<String>,
    /// An HTTP proxy for every endpoint without a `proxy` of its own, `http://host:port`: each
    /// connection is tunnelled with `CONNECT` to the address the SSRF rules allowed. Read at
    /// start; a change needs a restart.
    pub proxy: Option<String>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawHealth {
    /// Failed attempts in a row that make an active endpoint degraded. Default 5.
    pub degrade_after_failures: Option<u32>,
    /// Time without success before a degraded endpoint is paused, `1m` to `365d`. Default `3d`.
    pub pause_after: Option<Quantity>,
    /// Failed attempts in a row also needed for the pause. Default 20.
    pub pause_min_failures: Option<u32>,
    /// Time without success before a paused endpoint is disabled, `1m` to `365d`. Default `7d`.
    pub disable_after: Option<Quantity>,
    /// A topic on which every endpoint state change is published as an event
    /// (`hookgate.endpoint.degraded`, `.paused`, `.disabled`, `.reenabled`, `.recovered`).
    /// The topic exists implicitly; subscribe an endpoint to it to route alerts.
    pub operator_topic: Option<String>,
    /// An ordered endpoint's key whose oldest waiting event has waited this long behind a
    /// failing head is reported once per head (`hookgate.ordering.key_blocked` on the operator
    /// topic, and a warning in the log), `1m` to `30d`. Default `15m`.
    pub key_blocked_after: Option<Quantity>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawRetention {
    /// How long finished deliveries and their attempts are kept, `1h` to `3650d`. Default `30d`.
    pub deliveries: Option<Quantity>,
    /// How long events are kept, `7d` (the window replay needs) to `3650d`. Default `30d`.
    pub events: Option<Quantity>,
    /// How long ingestion idempotency keys are kept, `1m` to `30d`. Default `24h`.
    pub idempotency: Option<Quantity>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTelemetry {
    /// The OTLP/HTTP collector, e.g. `http://collector:4318`; spans go to `/v1/traces` under
    /// it (a URL with a path of its own is used as it is). Required in this section.
    pub otlp_endpoint: Option<String>,
    /// The `service.name` of the spans. Default `hookgate`.
    pub service_name: Option<String>,
    /// Finished spans waiting for export at most; more are dropped and counted. Default 2048.
    pub max_queue_spans: Option<u32>,
}

#[derive(Debug, Default, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawTopic {
    /// The retry policy of deliveries of this topic, unless the endpoint names its own.
    pub policy: Option<String>,
    /// Free text for humans.
    pub description: Option<String>,
}

/// One secret, or a list while rotating (every listed secret signs).
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum RawSecrets {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBinding {
    /// The plugin's name: its file name without `.wasm`.
    pub plugin: String,
    /// Plugin-specific settings; a plugin ignores keys it does not know.
    #[serde(default)]
    pub config: BTreeMap<String, serde_json::Value>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEndpoint {
    /// Where events go; the scheme chooses the transport: `http(s)://` (a POST),
    /// `nats://` or `tls://` (JetStream), `amqp(s)://` (RabbitMQ), `redis(s)://` (a stream),
    /// `mqtt(s)://` (MQTT 5). README "Destinations" has the forms.
    pub url: String,
    /// The topics this endpoint receives.
    pub topics: Vec<String>,
    /// Event-type globs (`order.*`); none: every type.
    #[serde(default)]
    pub types: Vec<String>,
    /// Retry policy; wins over the topic's. Default: the topic's, else `standard`.
    pub policy: Option<String>,
    /// Signing secret(s): `whsec_<base64>` (Standard Webhooks) or any string.
    pub secret: Option<RawSecrets>,
    /// Extra headers sent with every attempt.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    pub transform: Option<RawBinding>,
    pub signer: Option<RawBinding>,
    pub backoff: Option<RawBinding>,
    /// Average deliveries per second to this endpoint (not a strict cap).
    pub max_per_second: Option<f64>,
    /// Attempts in flight at once to this endpoint.
    pub max_in_flight: Option<u32>,
    /// Per-endpoint attempt timeout, overriding `delivery.timeout`; `100ms` to `15m`.
    pub timeout: Option<Quantity>,
    /// Deliver events with the same `ordering_key` strictly one after another.
    #[serde(default)]
    pub ordered: bool,
    /// Keep exhausted or permanently failed deliveries as `dead` for redrive.
    #[serde(default)]
    pub dead_letter: bool,
    /// On an ordered endpoint, what a key does when its head finally fails: `skip` (the
    /// default: the key moves on) or `hold` (the key stops behind it until an operator
    /// releases it; for events that must never overtake each other, like a ledger's).
    pub on_final_failure: Option<RawFinalFailure>,
    /// How the gateway's requests authenticate to the endpoint; the credentials are secrets
    /// (never logged, never shown, never given to plugins).
    pub auth: Option<RawAuth>,
    /// A client certificate for mutual TLS (`https` endpoints).
    pub tls: Option<RawEndpointTls>,
    /// An HTTP proxy for this endpoint, `http://host:port`, instead of `delivery.proxy`.
    pub proxy: Option<String>,
    /// `hmac` (the default: Standard Webhooks `v1`, HMAC-SHA256 with `secret`) or `ed25519`
    /// (`v1a`: `secret` is then a `whsk_` private key; `hookgate keygen ed25519` makes one).
    pub signature: Option<RawSignature>,
    /// Free text for humans.
    pub description: Option<String>,
    /// The tenant (a customer of the product) this endpoint belongs to: it receives only that
    /// tenant's events, and a tenant's API key or console token sees only its own endpoints.
    /// None: an internal endpoint that receives the events of every tenant.
    pub tenant: Option<String>,
    /// Channels this endpoint listens to: it then receives only events that name at least one
    /// of them (Svix's rule). None: every event of its topics, with channels or without.
    #[serde(default)]
    pub channels: Vec<String>,
    /// Switched off by its owner: it receives no events until this is false again (unlike
    /// `paused` or `disabled` health, which the gateway decides).
    #[serde(default)]
    pub disabled: bool,
    /// The owner's own labels (string values), shown by the API.
    #[serde(default)]
    pub metadata: BTreeMap<String, String>,
    /// Svix compatibility (set on endpoints created through the Svix API).
    pub svix: Option<RawSvix>,
    /// A content filter: which of its topics' events the endpoint receives, by their content
    /// (README "Content filters"), in the operator grammar of Convoy and Outpost, e.g.
    /// `{payload.amount: {$gte: 100}}`. An event it refuses creates no delivery. None or `{}`:
    /// every event.
    pub filter: Option<serde_json::Value>,
}

/// What the Svix API keeps of an endpoint beside the file's keys.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawSvix {
    /// The endpoint's Svix `uid` (unique within its application).
    pub uid: Option<String>,
    /// Also send `svix-id`, `svix-timestamp` and `svix-signature` (the same values as the
    /// `webhook-*` headers), for receivers written for Svix. Default true.
    pub headers: Option<bool>,
    /// The endpoint's Svix `version` (deprecated by Svix, kept and shown). Default 1.
    pub version: Option<u16>,
}

/// Outbound credentials: exactly one of `bearer`, `basic` or `oauth2`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum RawAuth {
    /// `Authorization: Bearer TOKEN`.
    Bearer(String),
    /// HTTP basic authentication.
    Basic(RawBasicAuth),
    /// OAuth2 client credentials: a token from `token_url`, cached until shortly before it
    /// expires, fetched again once when the endpoint answers 401.
    Oauth2(RawOAuth2),
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawBasicAuth {
    pub username: String,
    pub password: String,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawOAuth2 {
    /// The token endpoint (checked against the SSRF rules like a delivery).
    pub token_url: String,
    pub client_id: String,
    pub client_secret: String,
    /// Space-separated scopes to ask for.
    pub scope: Option<String>,
    /// The API the token is for (some providers, e.g. Auth0, require it).
    pub audience: Option<String>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RawEndpointTls {
    /// PEM file of the client certificate (leaf first, then any intermediates).
    pub client_cert: String,
    /// PEM file of its private key (PKCS#8, RSA or EC).
    pub client_key: String,
}

/// What an ordered endpoint's key does when its head finally fails.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RawFinalFailure {
    Skip,
    Hold,
}

/// How an endpoint's requests are signed.
#[derive(Debug, Clone, Copy, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RawSignature {
    Hmac,
    Ed25519,
}
