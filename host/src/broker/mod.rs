//! Broker connections (`[[broker]]`): the message brokers sinks deliver into through the WIT
//! `broker` import. Opened once per process, shared by every sink whose `limits.allow_brokers`
//! names them, reconnected after a failure; a plugin never sees an address or a credential.
//!
//! - [`Brokers`]: every configured connection by name, opened by [`Brokers::open`];
//! - [`Connection`] (`connection.rs`): one connection's publish path, the same for every kind:
//!   size check, in-flight limit, the session (connected on demand, reconnected with backoff),
//!   the deadline, metrics; its [`ConnectionState`] for readiness;
//! - one file per kind, each a `Connector` making a `BrokerSession` that publishes a batch and
//!   reports each message once the broker confirmed it: `nats.rs` (JetStream PubAck),
//!   `rabbitmq.rs` (publisher confirms of persistent messages), `redis.rs` (`XADD` replies),
//!   `mqtt.rs` (QoS 1 PUBACKs matched to packet ids), `kafka.rs` (`acks=all`, keyed partitions
//!   by `partition.rs`'s murmur2, `TCP_NODELAY` on its sockets by `nodelay.rs`); `tls.rs`: the
//!   rustls client settings they share;
//! - [`StandInBroker`] (`stand_in.rs`): a connection whose session keeps each message and
//!   answers as a chosen kind would (confirmed, refused, down), for `outboxd plugin test`.

mod connection;
mod kafka;
mod mqtt;
mod nats;
mod nodelay;
mod partition;
mod rabbitmq;
mod redis;
mod stand_in;
mod tls;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

pub use connection::{Connection, ConnectionState};
pub use partition::kafka_partition;
pub use stand_in::{StandInAnswer, StandInBroker};

use crate::config::{BrokerKind, BrokerSpec};
use crate::metrics::Metrics;

/// One message for a broker (the WIT `broker.message`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Message {
    /// Subject, routing key, stream key, MQTT topic or Kafka topic.
    pub topic: String,
    /// Ordering key (Kafka partition), if any.
    pub key: Option<Vec<u8>>,
    /// Headers, in order.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub payload: Vec<u8>,
    /// Unique id the broker deduplicates on where it can.
    pub message_id: String,
}

impl Message {
    /// Bytes counted against `limits.max_message_size`: payload, key, headers and id.
    pub fn size(&self) -> u64 {
        let headers: usize = self.headers.iter().map(|(n, v)| n.len() + v.len()).sum();
        (self.payload.len()
            + self.key.as_ref().map_or(0, Vec::len)
            + headers
            + self.message_id.len()
            + self.topic.len()) as u64
    }
}

/// Why a broker did not take a message, classed like a plugin's publish result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BrokerRefusal {
    /// Retry later (unreachable, unconfirmed in time, refused for a passing reason).
    Retryable(String),
    /// Never deliverable as it is (too large, a topic the broker refuses).
    Permanent(String),
    /// The broker asked to slow down: retry after this long.
    RateLimited {
        /// Why.
        message: String,
        /// How long to wait.
        retry_after: Duration,
    },
}

impl BrokerRefusal {
    /// The refusal's `kind` label in `outboxd_broker_messages`: `retryable`, `permanent` or
    /// `rate_limited`.
    pub fn metric_kind(&self) -> &'static str {
        match self {
            BrokerRefusal::Retryable(_) => "retryable",
            BrokerRefusal::Permanent(_) => "permanent",
            BrokerRefusal::RateLimited { .. } => "rate_limited",
        }
    }
}

/// One message's result: confirmed, or refused.
pub type PublishOutcome = Result<(), BrokerRefusal>;

/// A live connection of one kind.
#[async_trait]
pub(crate) trait BrokerSession: Send + Sync {
    /// Publishes `messages` in order; one result per message, each once the broker confirmed
    /// it (or refused it). Must not return early for a message still unconfirmed: the caller
    /// bounds the whole call with the deadline.
    async fn publish(&self, messages: &[Message]) -> Vec<PublishOutcome>;

    /// Whether the connection is up right now (readiness, `outboxd_broker_connected`).
    fn connected(&self) -> bool;

    /// Whether the connection is gone for good: the next publish opens a new one. A client that
    /// reconnects by itself (NATS) is never broken.
    fn broken(&self) -> bool;
}

/// Opens sessions of one kind for one `[[broker]]`.
#[async_trait]
pub(crate) trait Connector: Send + Sync {
    /// Connects (TCP, TLS, the broker's handshake, authentication) and returns the session.
    async fn connect(&self) -> Result<Arc<dyn BrokerSession>, String>;
}

/// The connector of `spec`'s kind.
fn connector(spec: &BrokerSpec) -> Arc<dyn Connector> {
    match spec.kind() {
        BrokerKind::Nats => Arc::new(nats::NatsConnector::new(spec)),
        BrokerKind::Rabbitmq => Arc::new(rabbitmq::RabbitConnector::new(spec)),
        BrokerKind::Redis => Arc::new(redis::RedisConnector::new(spec)),
        BrokerKind::Mqtt => Arc::new(mqtt::MqttConnector::new(spec)),
        BrokerKind::Kafka => Arc::new(kafka::KafkaConnector::new(spec)),
    }
}

/// Every `[[broker]]` connection of a process, by name. Cheap to clone (the clones share the
/// connections).
#[derive(Clone, Default)]
pub struct Brokers {
    connections: Arc<BTreeMap<String, Arc<Connection>>>,
}

impl std::fmt::Debug for Brokers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.connections.keys()).finish()
    }
}

impl Brokers {
    /// No connections (a host without `[[broker]]`).
    pub fn none() -> Brokers {
        Brokers::default()
    }

    /// Starts a connection per spec on the current tokio runtime, which must outlive them (their
    /// clients' tasks run there): each connects in the background and keeps reconnecting while
    /// down, so a broker that is down at start delays nothing (its messages are retryable, and
    /// readiness says so).
    pub fn open(specs: &[BrokerSpec], metrics: &Metrics) -> Brokers {
        let connections = specs
            .iter()
            .map(|spec| {
                let connection = Connection::start(spec, connector(spec), metrics.clone());
                (spec.name().to_string(), connection)
            })
            .collect();
        Brokers {
            connections: Arc::new(connections),
        }
    }

    /// The connection named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<Connection>> {
        self.connections.get(name)
    }

    /// The connections named in `names` (a sink's `limits.allow_brokers`), which the config
    /// checked exist.
    pub fn only(&self, names: &[String]) -> Brokers {
        let connections = self
            .connections
            .iter()
            .filter(|(name, _)| names.contains(name))
            .map(|(name, connection)| (name.clone(), connection.clone()))
            .collect();
        Brokers {
            connections: Arc::new(connections),
        }
    }

    /// Whether there is no connection.
    pub fn is_empty(&self) -> bool {
        self.connections.is_empty()
    }

    /// The names, sorted.
    pub fn names(&self) -> Vec<String> {
        self.connections.keys().cloned().collect()
    }

    /// Every connection's state, by name.
    pub fn states(&self) -> Vec<(String, ConnectionState)> {
        self.connections
            .iter()
            .map(|(name, connection)| (name.clone(), connection.state()))
            .collect()
    }

    /// Stops the background reconnection of every connection and closes their sessions.
    pub fn close(&self) {
        for connection in self.connections.values() {
            connection.close();
        }
    }
}
