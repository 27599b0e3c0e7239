//! NATS JetStream: each message published with its headers and `Nats-Msg-Id` (the stream drops
//! a duplicate id within its duplicate window), confirmed by the stream's PubAck. The publishes
//! of a batch are pipelined (all sent, then every ack awaited). The client reconnects by itself;
//! a publish while it is disconnected is retryable.

use std::sync::Arc;
use std::time::Duration;

use async_nats::connection::State;
use async_nats::jetstream::context::{Context, PublishError, PublishErrorKind};
use async_nats::{Client, ConnectOptions, HeaderMap};
use async_trait::async_trait;
use futures::future::join_all;

use super::{BrokerRefusal, BrokerSession, Connector, Message, PublishOutcome, tls};
use crate::config::BrokerSpec;

/// The header JetStream deduplicates on.
const MSG_ID: &str = "Nats-Msg-Id";

/// Longest JetStream ack wait the client itself applies (the sink's deadline is usually shorter).
const ACK_TIMEOUT: Duration = Duration::from_secs(30);

/// Connects to NATS as `[[broker]]` says.
pub(super) struct NatsConnector {
    url: String,
    username: Option<String>,
    password: Option<String>,
    tls: bool,
    ca_pem: Option<Vec<u8>>,
    connect_timeout: Duration,
    name: String,
}

impl NatsConnector {
    pub(super) fn new(spec: &BrokerSpec) -> NatsConnector {
        NatsConnector {
            url: spec.url().to_string(),
            username: spec.username().map(str::to_string),
            password: spec.password().map(|p| p.expose().to_string()),
            tls: spec.tls(),
            ca_pem: spec.ca_pem().map(<[u8]>::to_vec),
            connect_timeout: spec.limits().connect_timeout,
            name: format!("outboxd broker {}", spec.name()),
        }
    }
}

#[async_trait]
impl Connector for NatsConnector {
    async fn connect(&self) -> Result<Arc<dyn BrokerSession>, String> {
        let mut options = ConnectOptions::new()
            .name(&self.name)
            .connection_timeout(self.connect_timeout);
        options = match (&self.username, &self.password) {
            (Some(user), Some(password)) => {
                options.user_and_password(user.clone(), password.clone())
            }
            (None, Some(token)) => options.token(token.clone()),
            (Some(user), None) => options.user_and_password(user.clone(), String::new()),
            (None, None) => options,
        };
        if self.tls {
            let config = tls::client_config(self.ca_pem.as_deref())?;
            options = options
                .require_tls(true)
                .tls_client_config((*config).clone());
        }
        let client = options
            .connect(self.url.as_str())
            .await
            .map_err(|e| e.to_string())?;
        let jetstream = async_nats::jetstream::context::ContextBuilder::new()
            .timeout(ACK_TIMEOUT)
            .build(client.clone());
        Ok(Arc::new(NatsSession { client, jetstream }))
    }
}

/// A NATS client and its JetStream context.
struct NatsSession {
    client: Client,
    jetstream: Context,
}

#[async_trait]
impl BrokerSession for NatsSession {
    async fn publish(&self, messages: &[Message]) -> Vec<PublishOutcome> {
        let max_payload = self.client.server_info().max_payload;
        let mut acks = Vec::with_capacity(messages.len());
        for message in messages {
            let headers = match headers(message) {
                Ok(headers) => headers,
                Err(refusal) => {
                    acks.push(Err(refusal));
                    continue;
                }
            };
            if max_payload > 0 && message.payload.len() > max_payload {
                acks.push(Err(BrokerRefusal::Permanent(format!(
                    "message of {} bytes exceeds the NATS server's max_payload ({max_payload} bytes)",
                    message.payload.len()
                ))));
                continue;
            }
            let sent = self
                .jetstream
                .publish_with_headers(
                    message.topic.clone(),
                    headers,
                    message.payload.clone().into(),
                )
                .await;
            acks.push(sent.map_err(|e| classify(e.kind(), &e.to_string())));
        }
        join_all(acks.into_iter().map(|ack| async move {
            match ack {
                Ok(future) => future
                    .await
                    .map(|_ack| ())
                    .map_err(|e| classify(e.kind(), &e.to_string())),
                Err(refusal) => Err(refusal),
            }
        }))
        .await
    }

    fn connected(&self) -> bool {
        self.client.connection_state() == State::Connected
    }

    fn broken(&self) -> bool {
        false
    }
}

/// The message's headers and its `Nats-Msg-Id`; a name or value NATS cannot carry is permanent.
fn headers(message: &Message) -> Result<HeaderMap, BrokerRefusal> {
    let mut map = HeaderMap::new();
    for (name, value) in &message.headers {
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_graphic() && c != ':') {
            return Err(BrokerRefusal::Permanent(format!(
                "header name {name:?} is not a NATS header name (visible ASCII without `:`)"
            )));
        }
        if value.contains(['\r', '\n']) {
            return Err(BrokerRefusal::Permanent(format!(
                "header `{name}` has a line break in its value"
            )));
        }
        map.append(name.as_str(), value.as_str());
    }
    if message.message_id.contains(['\r', '\n']) {
        return Err(BrokerRefusal::Permanent(
            "message id has a line break".into(),
        ));
    }
    map.insert(MSG_ID, message.message_id.as_str());
    Ok(map)
}

/// A JetStream publish error as a result: payload over the server's limit permanent, the rest
/// (no stream yet, timeouts, a broken pipe while reconnecting) retryable.
fn classify(kind: PublishErrorKind, text: &str) -> BrokerRefusal {
    match kind {
        PublishErrorKind::MaxPayloadExceeded => BrokerRefusal::Permanent(format!("NATS: {text}")),
        PublishErrorKind::StreamNotFound => BrokerRefusal::Retryable(format!(
            "NATS: {text} (create a JetStream stream that takes the subject)"
        )),
        _ => BrokerRefusal::Retryable(format!("NATS: {text}")),
    }
}

/// NATS refusing a message, as a session reports it: no JetStream stream takes its subject (the
/// server's "no responders"; the stand-in broker's `refused` answer).
pub(super) fn refused() -> PublishOutcome {
    let error = PublishError::new(PublishErrorKind::StreamNotFound);
    Err(classify(error.kind(), &error.to_string()))
}
