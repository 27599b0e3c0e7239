//! A stand-in broker for `outboxd plugin test`: one `[[broker]]` connection of a chosen kind
//! whose session keeps every message it is handed and answers each the same way: confirmed,
//! refused (the kind's own refusal, worded as its real session words it) or down (the
//! connection cannot be opened). It sits behind the real [`Connection`], so a plugin meets the
//! same size check, deadline and reasons as on a real broker of that kind.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};

use async_trait::async_trait;

use super::{
    BrokerSession, Brokers, Connection, Connector, Message, PublishOutcome, kafka, mqtt, nats,
    rabbitmq, redis,
};
use crate::config::{BrokerConfig, BrokerKind, BrokerSpec, ConfigError};
use crate::metrics::Metrics;

/// How a stand-in broker answers every message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StandInAnswer {
    /// The broker confirms each message.
    Confirmed,
    /// The broker refuses each message as its kind does: NATS finds no stream for the subject
    /// and RabbitMQ nacks (both retryable); Redis answers `WRONGTYPE`, the MQTT broker and Kafka
    /// say the client may not publish on the topic (all three permanent).
    Refused,
    /// The connection cannot be opened: no message reaches the broker, each is retryable.
    Down,
}

impl StandInAnswer {
    /// The answer as `--broker-answer` writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            StandInAnswer::Confirmed => "confirmed",
            StandInAnswer::Refused => "refused",
            StandInAnswer::Down => "down",
        }
    }
}

impl fmt::Display for StandInAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The messages a stand-in's sessions were handed, in order; shared with them.
type Received = Arc<Mutex<Vec<Message>>>;

/// A running stand-in broker: its one connection, and the messages that reached it.
pub struct StandInBroker {
    name: String,
    kind: BrokerKind,
    answer: StandInAnswer,
    brokers: Brokers,
    received: Received,
}

impl StandInBroker {
    /// Starts a stand-in connection named `name` (a `[[broker]]` name, checked as one) of `kind`
    /// with the default `[[broker]]` limits, answering `answer`, on the current tokio runtime.
    pub fn start(
        name: &str,
        kind: BrokerKind,
        answer: StandInAnswer,
    ) -> Result<StandInBroker, ConfigError> {
        let (scheme, _tls) = kind.schemes();
        let spec = BrokerSpec::new(BrokerConfig {
            name: name.to_string(),
            kind,
            url: format!("{scheme}://stand-in"),
            username: None,
            password_env: None,
            password_file: None,
            tls: Default::default(),
            exchange: None,
            client_id: None,
            limits: Default::default(),
        })?;
        let received = Received::default();
        let connector = StandInConnector {
            kind,
            answer,
            received: received.clone(),
        };
        let connection = Connection::start(&spec, Arc::new(connector), Metrics::default());
        let connections = [(spec.name().to_string(), connection)]
            .into_iter()
            .collect();
        Ok(StandInBroker {
            name: spec.name().to_string(),
            kind,
            answer,
            brokers: Brokers {
                connections: Arc::new(connections),
            },
            received,
        })
    }

    /// The connection, as a sink's broker connections.
    pub fn brokers(&self) -> &Brokers {
        &self.brokers
    }

    /// The connection's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The kind it answers as.
    pub fn kind(&self) -> BrokerKind {
        self.kind
    }

    /// How it answers.
    pub fn answer(&self) -> StandInAnswer {
        self.answer
    }

    /// Every message that reached it so far, in order (none while it is down).
    pub fn received(&self) -> Vec<Message> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Drop for StandInBroker {
    fn drop(&mut self) {
        self.brokers.close();
    }
}

/// Opens stand-in sessions, or fails as a broker that is down.
struct StandInConnector {
    kind: BrokerKind,
    answer: StandInAnswer,
    received: Received,
}

#[async_trait]
impl Connector for StandInConnector {
    async fn connect(&self) -> Result<Arc<dyn BrokerSession>, String> {
        let refuse = match self.answer {
            StandInAnswer::Confirmed => false,
            StandInAnswer::Refused => true,
            StandInAnswer::Down => {
                return Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused).to_string());
            }
        };
        Ok(Arc::new(StandInSession {
            kind: self.kind,
            refuse,
            received: self.received.clone(),
        }))
    }
}

/// A live stand-in session: keeps each message, confirms or refuses it.
struct StandInSession {
    kind: BrokerKind,
    refuse: bool,
    received: Received,
}

#[async_trait]
impl BrokerSession for StandInSession {
    async fn publish(&self, messages: &[Message]) -> Vec<PublishOutcome> {
        self.received
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .extend_from_slice(messages);
        messages
            .iter()
            .map(|message| match (self.refuse, self.kind) {
                (false, _) => Ok(()),
                (true, BrokerKind::Nats) => nats::refused(),
                (true, BrokerKind::Rabbitmq) => rabbitmq::refused(),
                (true, BrokerKind::Redis) => redis::refused(),
                (true, BrokerKind::Mqtt) => mqtt::refused(),
                (true, BrokerKind::Kafka) => kafka::refused(&message.topic),
            })
            .collect()
    }

    fn connected(&self) -> bool {
        true
    }

    fn broken(&self) -> bool {
        false
    }
}
