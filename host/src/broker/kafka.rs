//! Kafka: each message a record with its key, headers and `message-id` header, in the partition
//! its key picks (the Java client's murmur2 partitioner; a message without a key by its id),
//! produced with `acks=all` (rskafka's only mode) and confirmed by the produce response. A
//! batch is one produce request per partition, in message order, the partitions side by side.
//! Kafka does not deduplicate across produce requests: a consumer does, on `message-id`.
//! rskafka's sockets get `TCP_NODELAY` from `nodelay.rs` (rskafka does not set it).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::future::join_all;
use rskafka::BackoffConfig;
use rskafka::chrono::DateTime;
use rskafka::client::error::{Error as KafkaError, ProtocolError, RequestContext};
use rskafka::client::partition::{Compression, PartitionClient, UnknownTopicHandling};
use rskafka::client::{Client, ClientBuilder, Credentials, SaslConfig};
use rskafka::record::Record;

use super::{
    BrokerRefusal, BrokerSession, Connector, Message, PublishOutcome, kafka_partition, nodelay, tls,
};
use crate::config::BrokerSpec;

/// The header carrying the message id.
const MESSAGE_ID: &str = "message-id";
/// How often a publishing session looks for sockets rskafka opened since (a connection it
/// reopened by itself after a failure) to set `TCP_NODELAY` on them.
const NODELAY_EVERY: Duration = Duration::from_secs(1);

/// Connects to Kafka as `[[broker]]` says.
pub(super) struct KafkaConnector {
    bootstrap: String,
    port: u16,
    username: Option<String>,
    password: Option<String>,
    tls: bool,
    ca_pem: Option<Vec<u8>>,
    connect_timeout: Duration,
    client_id: String,
}

impl KafkaConnector {
    pub(super) fn new(spec: &BrokerSpec) -> KafkaConnector {
        let url = spec.url();
        let port = url.port().unwrap_or(9092);
        KafkaConnector {
            bootstrap: format!("{}:{}", url.host_str().unwrap_or_default(), port),
            port,
            username: spec.username().map(str::to_string),
            password: spec.password().map(|p| p.expose().to_string()),
            tls: spec.tls(),
            ca_pem: spec.ca_pem().map(<[u8]>::to_vec),
            connect_timeout: spec.limits().connect_timeout,
            client_id: format!("outboxd-{}", spec.name()),
        }
    }
}

#[async_trait]
impl Connector for KafkaConnector {
    async fn connect(&self) -> Result<Arc<dyn BrokerSession>, String> {
        let mut builder = ClientBuilder::new(vec![self.bootstrap.clone()])
            .client_id(self.client_id.clone())
            .backoff_config(BackoffConfig {
                init_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_secs(1),
                base: 2.0,
                deadline: Some(self.connect_timeout),
            });
        if self.tls {
            builder = builder.tls_config(tls::client_config(self.ca_pem.as_deref())?);
        }
        if let Some(password) = &self.password {
            builder = builder.sasl_config(SaslConfig::Plain(Credentials::new(
                self.username.clone().unwrap_or_default(),
                password.clone(),
            )));
        }
        let client = builder.build().await.map_err(|e| e.to_string())?;
        let session = KafkaSession {
            client,
            partitions: tokio::sync::Mutex::new(HashMap::new()),
            writers: tokio::sync::Mutex::new(HashMap::new()),
            broker_port: self.port,
            nodelay_swept: Mutex::new(None),
            new_writer: AtomicBool::new(false),
        };
        session.keep_nodelay();
        Ok(Arc::new(session))
    }
}

/// A client, the partition counts of the topics seen, and one partition client per partition.
struct KafkaSession {
    client: Client,
    partitions: tokio::sync::Mutex<HashMap<String, i32>>,
    writers: tokio::sync::Mutex<HashMap<(String, i32), Arc<PartitionClient>>>,
    /// The port the brokers listen on (the bootstrap server's): rskafka's sockets are the
    /// process's sockets connected to it.
    broker_port: u16,
    /// When [`KafkaSession::keep_nodelay`] last looked.
    nodelay_swept: Mutex<Option<Instant>>,
    /// A partition client was made since it last looked: its leader's connection opens with its
    /// first request.
    new_writer: AtomicBool,
}

#[async_trait]
impl BrokerSession for KafkaSession {
    async fn publish(&self, messages: &[Message]) -> Vec<PublishOutcome> {
        let mut results: Vec<Option<PublishOutcome>> = vec![None; messages.len()];
        let mut groups: BTreeMap<(String, i32), Vec<usize>> = BTreeMap::new();
        for (position, message) in messages.iter().enumerate() {
            match self.partition_count(&message.topic).await {
                Ok(count) => {
                    let key = message
                        .key
                        .as_deref()
                        .unwrap_or(message.message_id.as_bytes());
                    let partition = kafka_partition(key, count);
                    groups
                        .entry((message.topic.clone(), partition))
                        .or_default()
                        .push(position);
                }
                Err(refusal) => results[position] = Some(Err(refusal)),
            }
        }
        let produced = join_all(groups.into_iter().map(|((topic, partition), positions)| {
            let records = positions.iter().map(|&p| record(&messages[p])).collect();
            async move {
                let outcome = match self.writer(&topic, partition).await {
                    Ok(writer) => writer
                        .produce(records, Compression::NoCompression)
                        .await
                        .map(|_offsets| ())
                        .map_err(|e| classify(&e)),
                    Err(refusal) => Err(refusal),
                };
                if outcome.is_err() {
                    self.forget(&topic, partition).await;
                }
                (positions, outcome)
            }
        }))
        .await;
        for (positions, outcome) in produced {
            for position in positions {
                results[position] = Some(outcome.clone());
            }
        }
        let swept = *self
            .nodelay_swept
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if self.new_writer.swap(false, Ordering::Relaxed)
            || swept.is_none_or(|at| at.elapsed() >= NODELAY_EVERY)
        {
            self.keep_nodelay();
        }
        results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| Err(BrokerRefusal::Retryable("Kafka: not produced".into())))
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

impl KafkaSession {
    /// Sets `TCP_NODELAY` on the connections rskafka opened to the brokers (`nodelay.rs`): after
    /// connecting, after the first publish through a new partition client, and then at most once
    /// per [`NODELAY_EVERY`] while publishing.
    fn keep_nodelay(&self) {
        let changed = nodelay::set_on_sockets_to(self.broker_port);
        *self
            .nodelay_swept
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(Instant::now());
        if changed > 0 {
            tracing::debug!(
                sockets = changed,
                "Kafka: TCP_NODELAY set on the brokers' connections"
            );
        }
    }

    /// How many partitions `topic` has (asked once, then remembered).
    async fn partition_count(&self, topic: &str) -> Result<i32, BrokerRefusal> {
        if let Some(&count) = self.partitions.lock().await.get(topic) {
            return Ok(count);
        }
        let topics = self
            .client
            .list_topics()
            .await
            .map_err(|e| BrokerRefusal::Retryable(format!("Kafka metadata: {e}")))?;
        let mut known = self.partitions.lock().await;
        for listed in topics {
            known.insert(listed.name, listed.partitions.len() as i32);
        }
        known
            .get(topic)
            .copied()
            .filter(|&count| count > 0)
            .ok_or_else(|| {
                BrokerRefusal::Retryable(format!(
                    "Kafka has no topic `{topic}` (create it, or turn on the broker's topic \
                     auto-creation)"
                ))
            })
    }

    /// The partition client of `(topic, partition)`.
    async fn writer(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Arc<PartitionClient>, BrokerRefusal> {
        let key = (topic.to_string(), partition);
        if let Some(writer) = self.writers.lock().await.get(&key) {
            return Ok(writer.clone());
        }
        let writer = self
            .client
            .partition_client(topic, partition, UnknownTopicHandling::Error)
            .await
            .map_err(|e| classify(&e))?;
        let writer = Arc::new(writer);
        self.writers.lock().await.insert(key, writer.clone());
        self.new_writer.store(true, Ordering::Relaxed);
        Ok(writer)
    }

    /// Drops what is remembered of `(topic, partition)` after a failure (its leader may have
    /// moved, the topic may have been recreated).
    async fn forget(&self, topic: &str, partition: i32) {
        self.writers
            .lock()
            .await
            .remove(&(topic.to_string(), partition));
        self.partitions.lock().await.remove(topic);
    }
}

/// The record of `message`.
fn record(message: &Message) -> Record {
    let mut headers: BTreeMap<String, Vec<u8>> = message
        .headers
        .iter()
        .map(|(name, value)| (name.clone(), value.as_bytes().to_vec()))
        .collect();
    headers.insert(MESSAGE_ID.into(), message.message_id.as_bytes().to_vec());
    Record {
        key: message.key.clone(),
        value: Some(message.payload.clone()),
        headers,
        timestamp: DateTime::from_timestamp_millis(crate::record::now_ms()).unwrap_or_default(),
    }
}

/// A produce error as a result: a record or topic Kafka can never take permanent, the rest
/// retryable.
fn classify(error: &KafkaError) -> BrokerRefusal {
    if let KafkaError::ServerError { protocol_error, .. } = error {
        match protocol_error {
            ProtocolError::MessageTooLarge
            | ProtocolError::RecordListTooLarge
            | ProtocolError::InvalidTopicException
            | ProtocolError::InvalidRecord
            | ProtocolError::TopicAuthorizationFailed => {
                return BrokerRefusal::Permanent(format!(
                    "Kafka refused the record: {protocol_error}"
                ));
            }
            _ => {}
        }
    }
    BrokerRefusal::Retryable(format!("Kafka: {error}"))
}

/// Kafka refusing a message, as a session reports it: a produce response saying the client may
/// not write to the topic (the stand-in broker's `refused` answer).
pub(super) fn refused(topic: &str) -> PublishOutcome {
    Err(classify(&KafkaError::ServerError {
        protocol_error: ProtocolError::TopicAuthorizationFailed,
        error_message: None,
        request: RequestContext::Topic(topic.to_string()),
        response: None,
        is_virtual: false,
    }))
}
