//! `brokers`: deliveries/s end to end to each broker destination, beside HTTP, in the same run
//! and the same way: batch ingestion into a topic one endpoint subscribes to (with a signing
//! secret), from the first request until the last message is at its destination — the sink
//! for HTTP; for a broker, the stream, queue or subscriber counting it (JetStream's stream
//! state, RabbitMQ's queue depth, `XLEN`, an MQTT subscriber).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use hookgate_loadgen::{Shape, Stop, closed_loop, unix_us};

use crate::scenarios::{Bench, SECRET, Site, ensure_no_errors, target};

/// Where the brokers are: `nats://…`, `amqp://user:pass@…`, `redis://…`, `mqtt://…`.
#[derive(Clone, Debug)]
pub(crate) struct Brokers {
    pub(crate) nats: String,
    pub(crate) amqp: String,
    pub(crate) redis: String,
    pub(crate) mqtt: String,
}

const BATCH: u64 = 100;

/// Counts what reached one broker destination, on the broker.
enum Counter {
    Nats(async_nats::jetstream::Context, String),
    Amqp(
        amqprs::channel::Channel,
        amqprs::connection::Connection,
        String,
        String,
    ),
    Redis(redis::aio::MultiplexedConnection, String),
    Mqtt(
        Arc<AtomicU64>,
        rumqttc::v5::AsyncClient,
        tokio::task::JoinHandle<()>,
    ),
}

fn host_port(url: &str, default_port: u16) -> anyhow::Result<(String, u16)> {
    let (_, rest) = url.split_once("://").context("a broker URL")?;
    let authority = rest.split(['/', '?']).next().unwrap_or_default();
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    match hostport.rsplit_once(':') {
        Some((host, port)) => Ok((host.to_owned(), port.parse()?)),
        None => Ok((hostport.to_owned(), default_port)),
    }
}

impl Counter {
    /// A fresh destination named `name` on the broker of `kind`, and the endpoint URL that
    /// delivers to it.
    async fn make(kind: &str, brokers: &Brokers, name: &str) -> anyhow::Result<(Counter, String)> {
        match kind {
            "nats" => {
                let client = async_nats::connect(brokers.nats.trim_start_matches("nats://")).await?;
                let js = async_nats::jetstream::new(client);
                js.create_stream(async_nats::jetstream::stream::Config {
                    name: name.to_owned(),
                    subjects: vec![format!("{name}.>")],
                    ..Default::default()
                })
                .await?;
                let url = format!("{}/{name}.orders", brokers.nats.trim_end_matches('/'));
                Ok((Counter::Nats(js, name.to_owned()), url))
            }
            "amqp" => {
                use amqprs::channel::{ExchangeDeclareArguments, QueueBindArguments, QueueDeclareArguments};
                let parsed = brokers.amqp.split_once("://").map_or("", |(_, r)| r);
                let (credentials, _) = parsed.split_once('@').unwrap_or(("guest:guest", parsed));
                let (user, pass) = credentials.split_once(':').unwrap_or((credentials, ""));
                let (host, port) = host_port(&brokers.amqp, 5672)?;
                let args = amqprs::connection::OpenConnectionArguments::new(&host, port, user, pass);
                let connection = amqprs::connection::Connection::open(&args).await?;
                let channel = connection.open_channel(None).await?;
                channel
                    .exchange_declare(ExchangeDeclareArguments::new(name, "direct"))
                    .await?;
                channel.queue_declare(QueueDeclareArguments::new(name)).await?;
                channel
                    .queue_bind(QueueBindArguments::new(name, name, "orders"))
                    .await?;
                let base = brokers.amqp.split(['?']).next().unwrap_or_default();
                let base = base.trim_end_matches('/');
                let url = format!("{base}/%2f?exchange={name}&routing_key=orders");
                Ok((
                    Counter::Amqp(channel, connection, name.to_owned(), name.to_owned()),
                    url,
                ))
            }
            "redis" => {
                let client = redis::Client::open(brokers.redis.as_str())?;
                // No response timeout: the crate's default (500 ms) is shorter than a busy
                // machine's pauses, and the counter only reads.
                let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
                let conn = client
                    .get_multiplexed_async_connection_with_config(&config)
                    .await?;
                let url = format!("{}/0?stream={name}", brokers.redis.trim_end_matches('/'));
                Ok((Counter::Redis(conn, name.to_owned()), url))
            }
            "mqtt" => {
                use rumqttc::v5::mqttbytes::QoS;
                use rumqttc::v5::mqttbytes::v5::Packet;
                let (host, port) = host_port(&brokers.mqtt, 1883)?;
                let mut options = rumqttc::v5::MqttOptions::new(format!("{name}-counter"), host, port);
                options.set_keep_alive(Duration::from_secs(30));
                let (client, mut eventloop) = rumqttc::v5::AsyncClient::new(options, 1024);
                let topic = format!("{name}/orders");
                client.subscribe(&topic, QoS::AtLeastOnce).await?;
                loop {
                    if let rumqttc::v5::Event::Incoming(Packet::SubAck(_)) = eventloop.poll().await? {
                        break;
                    }
                }
                let count = Arc::new(AtomicU64::new(0));
                let counted = count.clone();
                let task = tokio::spawn(async move {
                    while let Ok(event) = eventloop.poll().await {
                        if let rumqttc::v5::Event::Incoming(Packet::Publish(_)) = event {
                            counted.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                });
                let url = format!("{}/{topic}", brokers.mqtt.trim_end_matches('/'));
                Ok((Counter::Mqtt(count, client, task), url))
            }
            other => bail!("no broker kind `{other}`"),
        }
    }

    async fn count(&mut self) -> anyhow::Result<u64> {
        Ok(match self {
            Counter::Nats(js, stream) => js.get_stream(stream.as_str()).await?.info().await?.state.messages,
            Counter::Amqp(channel, _, queue, _) => {
                let mut args = amqprs::channel::QueueDeclareArguments::new(queue);
                args.passive(true);
                let (_, messages, _) = channel
                    .queue_declare(args)
                    .await?
                    .context("RabbitMQ's answer to a passive declare")?;
                u64::from(messages)
            }
            Counter::Redis(conn, key) => redis::cmd("XLEN").arg(key.as_str()).query_async(conn).await?,
            Counter::Mqtt(count, _, _) => count.load(Ordering::Relaxed),
        })
    }

    async fn remove(self) {
        match self {
            Counter::Nats(js, stream) => {
                let _ = js.delete_stream(&stream).await;
            }
            Counter::Amqp(channel, connection, queue, exchange) => {
                let _ = channel
                    .queue_delete(amqprs::channel::QueueDeleteArguments::new(&queue))
                    .await;
                let _ = channel
                    .exchange_delete(amqprs::channel::ExchangeDeleteArguments::new(&exchange))
                    .await;
                let _ = connection.close().await;
            }
            Counter::Redis(mut conn, key) => {
                let _: Result<(), _> = redis::cmd("DEL").arg(key).query_async(&mut conn).await;
            }
            Counter::Mqtt(_, client, task) => {
                let _ = client.disconnect().await;
                task.abort();
            }
        }
    }

    /// Waits until the destination holds `n` messages; the moment it saw them (µs since the
    /// epoch).
    async fn wait_for(&mut self, n: u64, within: Duration) -> anyhow::Result<u64> {
        let deadline = Instant::now() + within;
        loop {
            if self.count().await? >= n {
                return Ok(unix_us());
            }
            if Instant::now() > deadline {
                bail!(
                    "timed out after {within:?}: {} of {n} messages arrived",
                    self.count().await?
                );
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

impl Bench {
    /// HTTP, then each broker: deliveries/s end to end, one endpoint each, batch ingestion.
    pub(crate) async fn destinations(&mut self, brokers: &Brokers) -> anyhow::Result<()> {
        let events = self.scale.fanout_events;
        let http = self
            .through_sink(1, (Shape::Batch(BATCH as usize), 4), 1, events.div_ceil(BATCH))
            .await?;
        self.results.record(
            "dest_http",
            "end to end to a destination: HTTP (the sink)",
            "deliveries/s",
            http.rate,
            None,
        );
        for kind in ["nats", "amqp", "redis", "mqtt"] {
            let rate = self.through_broker(kind, brokers, events).await?;
            let label = match kind {
                "nats" => "end to end to a destination: NATS JetStream (PubAck)",
                "amqp" => "end to end to a destination: RabbitMQ (publisher confirms)",
                "redis" => "end to end to a destination: Redis Streams (XADD)",
                _ => "end to end to a destination: MQTT 5 (QoS 1 PUBACK)",
            };
            self.results
                .record(&format!("dest_{kind}"), label, "deliveries/s", rate, None);
        }
        Ok(())
    }

    async fn through_broker(&mut self, kind: &str, brokers: &Brokers, events: u64) -> anyhow::Result<f64> {
        let name = format!("hgbench_{kind}_{}", unix_us());
        let (mut counter, url) = Counter::make(kind, brokers, &name)
            .await
            .with_context(|| format!("preparing the {kind} destination"))?;
        let outcome = self.measure_broker(kind, &url, &mut counter, events).await;
        counter.remove().await;
        outcome
    }

    async fn measure_broker(
        &mut self,
        kind: &str,
        url: &str,
        counter: &mut Counter,
        events: u64,
    ) -> anyhow::Result<f64> {
        let yaml = format!(
            "topics:\n  orders: {{}}\nendpoints:\n  e0: {{url: '{url}', topics: [orders], secret: {SECRET}}}\n"
        );
        let site = Site::new(&self.work_root, &yaml)?;
        let gw = self.start(&site, &format!("dest-{kind}")).await?;
        let t = target(&gw, "orders", 200);
        // Warm-up: one batch through, connection made.
        let warm = closed_loop(
            &self.client,
            &t,
            Shape::Batch(BATCH as usize),
            4,
            Stop::Requests(1),
        )
        .await?;
        ensure_no_errors(&warm, "warm-up")?;
        counter.wait_for(warm.deliveries, Duration::from_secs(60)).await?;
        let before = counter.count().await?;
        let started = unix_us();
        let report = closed_loop(
            &self.client,
            &t,
            Shape::Batch(BATCH as usize),
            4,
            Stop::Requests(events.div_ceil(BATCH)),
        )
        .await?;
        ensure_no_errors(&report, "end-to-end ingest")?;
        let done = counter
            .wait_for(before + report.deliveries, Duration::from_secs(600))
            .await?;
        gw.stop().await?;
        let rate = report.deliveries as f64 / ((done.saturating_sub(started)) as f64 / 1e6);
        self.say(&format!("{kind}: {} deliveries = {rate:.0}/s", report.deliveries));
        Ok(rate)
    }
}
