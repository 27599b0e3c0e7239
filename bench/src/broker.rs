//! `outboxd-bench --plugin plugins/out/broker.wasm --broker-raw`: beside outboxd's end-to-end
//! run (table → plugin → broker, confirmed), the broker's own client publishing the same number
//! of messages of the same shape with the same confirmation, in batches of the same size, one
//! batch in flight (`broker_raw.rs`), so the ratio is measured in one run. Also the
//! benchmark's destinations: made before the run, removed after it.
//!
//! Names: the plugin's topic starts with `outboxd-bench` (`outboxd-bench.{app_code}` on NATS
//! and RabbitMQ, `outboxd-bench:{app_code}` on Redis, `outboxd-bench/{app_code}` on MQTT, the
//! topic `outboxd-bench` on Kafka); a NATS stream `OUTBOXD_BENCH`, a RabbitMQ topic exchange (the
//! connection's `exchange`) with a queue `outboxd-bench` bound to it, a Kafka topic of
//! [`KAFKA_PARTITIONS`](crate::broker_raw::KAFKA_PARTITIONS) partitions.

use std::fmt;
use std::time::{Duration, Instant};

use anyhow::Context as _;

use crate::args::BenchArgs;
use crate::broker_raw::PREFIX;
use outboxd::broker::Message;
use outboxd::config::{BrokerKind, BrokerSpec, Config};

/// The raw client's run, and outboxd's beside it.
#[derive(Debug, Clone)]
pub struct RawBrokerReport {
    /// The connection's name and kind.
    pub broker: String,
    /// Messages published.
    pub messages: u32,
    /// Messages per publish round (one round in flight).
    pub batch: u32,
    /// Wall time.
    pub elapsed: Duration,
    /// outboxd's end-to-end events/s in the same run.
    pub outboxd: f64,
}

impl RawBrokerReport {
    /// The same report with outboxd's rate beside it.
    pub fn with_outboxd(mut self, rate: f64) -> RawBrokerReport {
        self.outboxd = rate;
        self
    }

    /// The raw client's confirmed messages per second.
    pub fn rate(&self) -> f64 {
        f64::from(self.messages) / self.elapsed.as_secs_f64().max(1e-9)
    }
}

impl fmt::Display for RawBrokerReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "broker: {}  raw client: {} messages in batches of {}, {:.2} s, {:.0} msg/s confirmed; \
             outboxd end to end {:.0} ev/s = {:.2}x the raw client",
            self.broker,
            self.messages,
            self.batch,
            self.elapsed.as_secs_f64(),
            self.rate(),
            self.outboxd,
            self.outboxd / self.rate().max(1e-9)
        )
    }
}

/// The connection the plugin publishes on (`--plugin-config connection=NAME`).
pub fn spec<'a>(config: &'a Config, args: &BenchArgs) -> anyhow::Result<&'a BrokerSpec> {
    let name = args
        .plugin_config
        .iter()
        .find_map(|pair| pair.strip_prefix("connection="))
        .context("--broker-raw needs --plugin-config connection=NAME")?;
    config
        .brokers
        .iter()
        .find(|b| b.name() == name)
        .with_context(|| format!("no [[broker]] named `{name}` in the config"))
}

/// Makes the benchmark's destination on the broker (removing a leftover one first).
pub async fn prepare(spec: &BrokerSpec) -> anyhow::Result<()> {
    cleanup(spec).await;
    crate::broker_raw::prepare(spec).await
}

/// Removes the benchmark's destination (best effort).
pub async fn cleanup(spec: &BrokerSpec) {
    if let Err(error) = crate::broker_raw::cleanup(spec).await {
        tracing::debug!(error = %error, "benchmark cleanup");
    }
}

/// `events` messages like the plugin's over `rooms` rooms, through the broker's own client, in
/// rounds of `batch`.
pub async fn raw(
    config: &Config,
    args: &BenchArgs,
    events: u32,
    batch: u32,
    rooms: u32,
) -> anyhow::Result<RawBrokerReport> {
    let spec = spec(config, args)?;
    let topic = match spec.kind() {
        BrokerKind::Nats | BrokerKind::Rabbitmq => format!("{PREFIX}.raw"),
        BrokerKind::Redis => format!("{PREFIX}:raw"),
        BrokerKind::Mqtt => format!("{PREFIX}/raw"),
        BrokerKind::Kafka => PREFIX.to_string(),
    };
    let messages: Vec<Message> = (0..events)
        .map(|i| message(&topic, i, rooms.max(1)))
        .collect();
    let batch = batch.max(1);
    let started = Instant::now();
    crate::broker_raw::publish(spec, &messages, batch as usize).await?;
    let elapsed = started.elapsed();
    cleanup(spec).await;
    Ok(RawBrokerReport {
        broker: format!("{} ({})", spec.name(), spec.kind()),
        messages: events,
        batch,
        elapsed,
        outboxd: 0.0,
    })
}

/// A message of the plugin's shape (the default headers, a protobuf envelope of a 64-byte body:
/// about 140 bytes).
fn message(topic: &str, i: u32, rooms: u32) -> Message {
    let id = format!("evt_raw_{i:010}");
    let room = format!("room-{}", i % rooms);
    let headers = [
        ("event-id", id.clone()),
        ("event-type", "BenchEvent".to_string()),
        ("app-code", "bench-raw".to_string()),
        ("room-id", room.clone()),
        ("room-version", i.to_string()),
        ("occurred-at-ms", "1700000000000".to_string()),
        (
            "content-type",
            "application/x-protobuf; messageType=outbox.v1.EventEnvelope".to_string(),
        ),
    ]
    .into_iter()
    .map(|(n, v)| (n.to_string(), v))
    .collect();
    Message {
        topic: topic.to_string(),
        key: Some(room.into_bytes()),
        headers,
        payload: vec![7u8; 140],
        message_id: id,
    }
}
