//! RabbitMQ (AMQP 0-9-1): one channel in confirm mode; each message published persistent
//! (`delivery_mode` 2) and mandatory to the connection's exchange with the topic as routing key,
//! its id as `message_id` and its headers (and key, as header `key`) as AMQP headers; confirmed
//! by the broker's publisher confirm. A message no queue takes comes back unrouted: retryable
//! (bind a queue). The publishes of a batch are pipelined (all sent, then every confirm awaited).

use std::sync::Arc;

use async_trait::async_trait;
use futures::future::join_all;
use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::tcp::OwnedTLSConfig;
use lapin::types::{AMQPValue, FieldTable, LongString, ShortString};
use lapin::{BasicProperties, Channel, Confirmation, Connection, ConnectionProperties};

use super::{BrokerRefusal, BrokerSession, Connector, Message, PublishOutcome};
use crate::config::BrokerSpec;

/// Connects to RabbitMQ as `[[broker]]` says.
pub(super) struct RabbitConnector {
    /// The URL with the credentials put in (never logged).
    uri: String,
    ca_pem: Option<String>,
    exchange: String,
    name: String,
}

impl RabbitConnector {
    pub(super) fn new(spec: &BrokerSpec) -> RabbitConnector {
        let mut url = spec.url().clone();
        if let Some(user) = spec.username() {
            let _ = url.set_username(user);
        }
        if let Some(password) = spec.password() {
            if spec.username().is_none() {
                let _ = url.set_username("guest");
            }
            let _ = url.set_password(Some(password.expose()));
        }
        RabbitConnector {
            uri: url.to_string(),
            ca_pem: spec
                .ca_pem()
                .map(|pem| String::from_utf8_lossy(pem).into_owned()),
            exchange: spec.exchange().to_string(),
            name: format!("outboxd broker {}", spec.name()),
        }
    }
}

#[async_trait]
impl Connector for RabbitConnector {
    async fn connect(&self) -> Result<Arc<dyn BrokerSession>, String> {
        let properties =
            ConnectionProperties::default().with_connection_name(self.name.clone().into());
        let tls = OwnedTLSConfig {
            identity: None,
            cert_chain: self.ca_pem.clone(),
        };
        let runtime = lapin::runtime::default_runtime().map_err(|e| e.to_string())?;
        let connection = Connection::connect_with_config(&self.uri, properties, tls, runtime)
            .await
            .map_err(|e| e.to_string())?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| e.to_string())?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        let exchange = ShortString::try_new(self.exchange.clone()).map_err(|e| e.to_string())?;
        Ok(Arc::new(RabbitSession {
            connection,
            channel,
            exchange,
        }))
    }
}

/// A connection and its confirm-mode channel.
struct RabbitSession {
    connection: Connection,
    channel: Channel,
    exchange: ShortString,
}

#[async_trait]
impl BrokerSession for RabbitSession {
    async fn publish(&self, messages: &[Message]) -> Vec<PublishOutcome> {
        let mut confirms = Vec::with_capacity(messages.len());
        for message in messages {
            confirms.push(self.send(message).await);
        }
        join_all(confirms.into_iter().map(|confirm| async move {
            let confirm = confirm?;
            classify(confirm.await)
        }))
        .await
    }

    fn connected(&self) -> bool {
        self.connection.status().connected() && self.channel.status().connected()
    }

    fn broken(&self) -> bool {
        !self.connected()
    }
}

impl RabbitSession {
    /// Sends one message; its confirm is awaited later.
    async fn send(&self, message: &Message) -> Result<lapin::PublisherConfirm, BrokerRefusal> {
        let routing_key = ShortString::try_new(message.topic.clone()).map_err(|_| {
            BrokerRefusal::Permanent(format!(
                "routing key of {} bytes is over AMQP's 255",
                message.topic.len()
            ))
        })?;
        let message_id = ShortString::try_new(message.message_id.clone()).map_err(|_| {
            BrokerRefusal::Permanent(
                "message id of more than 255 bytes (an AMQP short string)".into(),
            )
        })?;
        let mut headers = FieldTable::default();
        for (name, value) in &message.headers {
            let name = ShortString::try_new(name.clone()).map_err(|_| {
                BrokerRefusal::Permanent("header name of more than 255 bytes".to_string())
            })?;
            headers.insert(
                name,
                AMQPValue::LongString(LongString::from(value.as_bytes())),
            );
        }
        if let Some(key) = &message.key {
            headers.insert(
                "key".into(),
                AMQPValue::LongString(LongString::from(key.as_slice())),
            );
        }
        let properties = BasicProperties::default()
            .with_delivery_mode(2)
            .with_message_id(message_id)
            .with_headers(headers);
        let options = BasicPublishOptions {
            mandatory: true,
            immediate: false,
        };
        self.channel
            .basic_publish(
                self.exchange.clone(),
                routing_key,
                options,
                &message.payload,
                properties,
            )
            .await
            .map_err(|e| BrokerRefusal::Retryable(format!("RabbitMQ: {e}")))
    }
}

/// A publisher confirm as a result: an ack without a returned message confirms it; a returned
/// (unrouted) message, a nack or no confirm at all is retryable.
fn classify(confirm: lapin::Result<Confirmation>) -> PublishOutcome {
    match confirm {
        Ok(Confirmation::Ack(None)) => Ok(()),
        Ok(Confirmation::Ack(Some(returned))) => Err(BrokerRefusal::Retryable(format!(
            "RabbitMQ returned the message unrouted ({} {}): no queue is bound for its \
             routing key",
            returned.reply_code, returned.reply_text
        ))),
        Ok(Confirmation::Nack(_)) => Err(BrokerRefusal::Retryable(
            "RabbitMQ refused the message (nack)".into(),
        )),
        Ok(Confirmation::NotRequested) => Err(BrokerRefusal::Retryable(
            "RabbitMQ did not confirm (the channel is not in confirm mode)".into(),
        )),
        Err(error) => Err(BrokerRefusal::Retryable(format!("RabbitMQ: {error}"))),
    }
}

/// RabbitMQ refusing a message, as a session reports it: the broker's nack (the stand-in
/// broker's `refused` answer).
pub(super) fn refused() -> PublishOutcome {
    classify(Ok(Confirmation::Nack(None)))
}
