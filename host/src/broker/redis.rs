//! Redis Streams: each message one `XADD <topic> * message-id <id> [key <key>] [h:<name>
//! <value>]… payload <bytes>`, confirmed by its reply (the entry id); a batch is one pipeline on
//! a multiplexed connection, each command answered on its own. Redis does not deduplicate: a
//! consumer does, on `message-id`. A connection error breaks the session (reconnected next
//! time); a command error (a key holding another type) is permanent for its message.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError, TlsCertificates};

use super::{BrokerRefusal, BrokerSession, Connector, Message, PublishOutcome};
use crate::config::BrokerSpec;

/// Connects to Redis as `[[broker]]` says.
pub(super) struct RedisConnector {
    /// The URL with the credentials put in (never logged).
    url: String,
    ca_pem: Option<Vec<u8>>,
    connect_timeout: Duration,
}

impl RedisConnector {
    pub(super) fn new(spec: &BrokerSpec) -> RedisConnector {
        let mut url = spec.url().clone();
        if let Some(user) = spec.username() {
            let _ = url.set_username(user);
        }
        if let Some(password) = spec.password() {
            let _ = url.set_password(Some(password.expose()));
        }
        RedisConnector {
            url: url.to_string(),
            ca_pem: spec.ca_pem().map(<[u8]>::to_vec),
            connect_timeout: spec.limits().connect_timeout,
        }
    }
}

#[async_trait]
impl Connector for RedisConnector {
    async fn connect(&self) -> Result<Arc<dyn BrokerSession>, String> {
        let client = match &self.ca_pem {
            Some(pem) => Client::build_with_tls(
                self.url.as_str(),
                TlsCertificates {
                    client_tls: None,
                    root_cert: Some(pem.clone()),
                },
            ),
            None => Client::open(self.url.as_str()),
        }
        .map_err(|e| e.to_string())?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.connect_timeout))
            .set_response_timeout(None);
        let connection = client
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Arc::new(RedisSession {
            connection,
            broken: AtomicBool::new(false),
        }))
    }
}

/// A multiplexed connection, broken once an I/O error was seen on it.
struct RedisSession {
    connection: MultiplexedConnection,
    broken: AtomicBool,
}

#[async_trait]
impl BrokerSession for RedisSession {
    async fn publish(&self, messages: &[Message]) -> Vec<PublishOutcome> {
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for message in messages {
            let command = pipe
                .cmd("XADD")
                .arg(&message.topic)
                .arg("*")
                .arg("message-id")
                .arg(&message.message_id);
            if let Some(key) = &message.key {
                command.arg("key").arg(key.as_slice());
            }
            for (name, value) in &message.headers {
                command.arg(format!("h:{name}")).arg(value);
            }
            command.arg("payload").arg(message.payload.as_slice());
        }
        let mut connection = self.connection.clone();
        let replies: Result<Vec<redis::RedisResult<String>>, RedisError> =
            pipe.query_async(&mut connection).await;
        match replies {
            Ok(replies) if replies.len() == messages.len() => {
                replies.into_iter().map(classify).collect()
            }
            Ok(replies) => vec![
                Err(BrokerRefusal::Retryable(format!(
                    "Redis answered {} replies for {} commands",
                    replies.len(),
                    messages.len()
                )));
                messages.len()
            ],
            Err(error) => {
                if error.is_io_error()
                    || error.is_connection_dropped()
                    || error.is_unrecoverable_error()
                {
                    self.broken.store(true, Ordering::Relaxed);
                }
                vec![Err(BrokerRefusal::Retryable(format!("Redis: {error}"))); messages.len()]
            }
        }
    }

    fn connected(&self) -> bool {
        !self.broken.load(Ordering::Relaxed)
    }

    fn broken(&self) -> bool {
        self.broken.load(Ordering::Relaxed)
    }
}

/// One `XADD`'s reply as a result: an entry id confirms the message; a connection error is
/// retryable, a command error (a key holding another type) permanent.
fn classify(reply: redis::RedisResult<String>) -> PublishOutcome {
    reply.map(|_id| ()).map_err(|e| {
        if e.is_io_error() || e.is_connection_dropped() {
            BrokerRefusal::Retryable(format!("Redis: {e}"))
        } else {
            BrokerRefusal::Permanent(format!("Redis refused XADD: {e}"))
        }
    })
}

/// Redis refusing a message, as a session reports it: the error reply of an `XADD` to a key that
/// holds another type (the stand-in broker's `refused` answer).
pub(super) fn refused() -> PublishOutcome {
    let reply = b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
    classify(
        redis::parse_redis_value(reply)
            .and_then(redis::Value::extract_error)
            .map(|value| format!("{value:?}")),
    )
}
