//! The raw broker clients of `outboxd-bench --broker-raw`: each broker's own client crate, no
//! outboxd code, publishing batches of messages with the confirmation outboxd waits for
//! (JetStream PubAck, RabbitMQ publisher confirms of persistent messages, Redis `XADD` replies,
//! MQTT QoS 1 PUBACKs, Kafka `acks=all`), pipelined within a batch, one batch in flight. They
//! connect without credentials (the benchmark's brokers have none). Also the benchmark's
//! destinations, named with [`PREFIX`] (see `broker.rs`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, bail};
use futures::future::join_all;

use outboxd::broker::{Message, kafka_partition};
use outboxd::config::{BrokerKind, BrokerSpec};

/// The benchmark's names' prefix (its destinations, and the plugin's topics in `bench/brokers.sh`).
pub const PREFIX: &str = "outboxd-bench";
/// Partitions of the benchmark's Kafka topic.
pub const KAFKA_PARTITIONS: i32 = 3;

fn host_port(spec: &BrokerSpec, default: u16) -> (String, u16) {
    let url = spec.url();
    (
        url.host_str().unwrap_or("127.0.0.1").to_string(),
        url.port().unwrap_or(default),
    )
}

/// Makes the destination: the NATS stream, the RabbitMQ exchange and queue, the Kafka topic.
pub async fn prepare(spec: &BrokerSpec) -> anyhow::Result<()> {
    match spec.kind() {
        BrokerKind::Nats => {
            let js = async_nats::jetstream::new(async_nats::connect(spec.url().as_str()).await?);
            js.create_stream(async_nats::jetstream::stream::Config {
                name: "OUTBOXD_BENCH".into(),
                subjects: vec![format!("{PREFIX}.>")],
                storage: async_nats::jetstream::stream::StorageType::File,
                ..Default::default()
            })
            .await
            .context("create the NATS stream OUTBOXD_BENCH")?;
        }
        BrokerKind::Rabbitmq => {
            if spec.exchange().is_empty() {
                bail!("the RabbitMQ benchmark needs the connection's `exchange` set");
            }
            let channel = rabbit_channel(spec).await?;
            channel
                .exchange_declare(
                    spec.exchange().into(),
                    lapin::ExchangeKind::Topic,
                    lapin::options::ExchangeDeclareOptions::default(),
                    Default::default(),
                )
                .await?;
            channel
                .queue_declare(
                    PREFIX.into(),
                    lapin::options::QueueDeclareOptions {
                        durable: true,
                        ..Default::default()
                    },
                    Default::default(),
                )
                .await?;
            channel
                .queue_bind(
                    PREFIX.into(),
                    spec.exchange().into(),
                    "#".into(),
                    Default::default(),
                    Default::default(),
                )
                .await?;
        }
        BrokerKind::Kafka => {
            kafka_client(spec)
                .await?
                .controller_client()?
                .create_topic(PREFIX, KAFKA_PARTITIONS, 1, 5_000)
                .await
                .context("create the Kafka topic")?;
        }
        BrokerKind::Redis | BrokerKind::Mqtt => {}
    }
    Ok(())
}

/// Removes what [`prepare`] made and what the runs wrote.
pub async fn cleanup(spec: &BrokerSpec) -> anyhow::Result<()> {
    match spec.kind() {
        BrokerKind::Nats => {
            let js = async_nats::jetstream::new(async_nats::connect(spec.url().as_str()).await?);
            let _ = js.delete_stream("OUTBOXD_BENCH").await;
        }
        BrokerKind::Rabbitmq => {
            let channel = rabbit_channel(spec).await?;
            let _ = channel
                .queue_delete(PREFIX.into(), Default::default())
                .await;
        }
        BrokerKind::Redis => {
            let mut redis = redis::Client::open(spec.url().as_str())?
                .get_multiplexed_async_connection()
                .await?;
            let keys: Vec<String> = redis::cmd("KEYS")
                .arg(format!("{PREFIX}:*"))
                .query_async(&mut redis)
                .await?;
            for key in keys {
                redis::cmd("DEL")
                    .arg(key)
                    .query_async::<()>(&mut redis)
                    .await?;
            }
        }
        BrokerKind::Kafka => {
            let client = kafka_client(spec).await?;
            let _ = client
                .controller_client()?
                .delete_topic(PREFIX, 5_000)
                .await;
        }
        BrokerKind::Mqtt => {}
    }
    Ok(())
}

async fn rabbit_channel(spec: &BrokerSpec) -> anyhow::Result<lapin::Channel> {
    let connection =
        lapin::Connection::connect(spec.url().as_str(), lapin::ConnectionProperties::default())
            .await?;
    Ok(connection.create_channel().await?)
}

async fn kafka_client(spec: &BrokerSpec) -> anyhow::Result<rskafka::client::Client> {
    let (host, port) = host_port(spec, 9092);
    Ok(
        rskafka::client::ClientBuilder::new(vec![format!("{host}:{port}")])
            .build()
            .await?,
    )
}

/// Publishes `messages` in batches of `batch`, each batch pipelined and every message confirmed
/// before the next batch; fails on the first refused message.
pub async fn publish(spec: &BrokerSpec, messages: &[Message], batch: usize) -> anyhow::Result<()> {
    match spec.kind() {
        BrokerKind::Nats => {
            let js = async_nats::jetstream::new(async_nats::connect(spec.url().as_str()).await?);
            for chunk in messages.chunks(batch) {
                let mut acks = Vec::with_capacity(chunk.len());
                for m in chunk {
                    let mut headers = async_nats::HeaderMap::new();
                    for (name, value) in &m.headers {
                        headers.insert(name.as_str(), value.as_str());
                    }
                    headers.insert("Nats-Msg-Id", m.message_id.as_str());
                    acks.push(
                        js.publish_with_headers(m.topic.clone(), headers, m.payload.clone().into())
                            .await?,
                    );
                }
                for ack in
                    join_all(acks.into_iter().map(std::future::IntoFuture::into_future)).await
                {
                    ack?;
                }
            }
        }
        BrokerKind::Rabbitmq => {
            let channel = rabbit_channel(spec).await?;
            channel.confirm_select(Default::default()).await?;
            for chunk in messages.chunks(batch) {
                let mut confirms = Vec::with_capacity(chunk.len());
                for m in chunk {
                    let mut headers = lapin::types::FieldTable::default();
                    for (name, value) in &m.headers {
                        headers.insert(
                            name.as_str().into(),
                            lapin::types::AMQPValue::LongString(value.as_bytes().into()),
                        );
                    }
                    let properties = lapin::BasicProperties::default()
                        .with_delivery_mode(2)
                        .with_message_id(m.message_id.as_str().into())
                        .with_headers(headers);
                    let options = lapin::options::BasicPublishOptions {
                        mandatory: true,
                        immediate: false,
                    };
                    confirms.push(
                        channel
                            .basic_publish(
                                spec.exchange().into(),
                                m.topic.as_str().into(),
                                options,
                                &m.payload,
                                properties,
                            )
                            .await?,
                    );
                }
                for confirm in join_all(confirms).await {
                    if !matches!(confirm?, lapin::Confirmation::Ack(None)) {
                        bail!("RabbitMQ did not confirm a message");
                    }
                }
            }
        }
        BrokerKind::Redis => {
            let mut redis = redis::Client::open(spec.url().as_str())?
                .get_multiplexed_async_connection()
                .await?;
            for chunk in messages.chunks(batch) {
                let mut pipe = redis::pipe();
                for m in chunk {
                    let command = pipe.cmd("XADD").arg(&m.topic).arg("*");
                    command.arg("message-id").arg(&m.message_id);
                    if let Some(key) = &m.key {
                        command.arg("key").arg(key.as_slice());
                    }
                    for (name, value) in &m.headers {
                        command.arg(format!("h:{name}")).arg(value);
                    }
                    command.arg("payload").arg(m.payload.as_slice());
                }
                let _: Vec<String> = pipe.query_async(&mut redis).await?;
            }
        }
        BrokerKind::Mqtt => mqtt(spec, messages, batch).await?,
        BrokerKind::Kafka => {
            let client = kafka_client(spec).await?;
            let mut writers = Vec::new();
            for partition in 0..KAFKA_PARTITIONS {
                writers.push(
                    client
                        .partition_client(
                            PREFIX,
                            partition,
                            rskafka::client::partition::UnknownTopicHandling::Retry,
                        )
                        .await?,
                );
            }
            for chunk in messages.chunks(batch) {
                let mut groups: BTreeMap<i32, Vec<rskafka::record::Record>> = BTreeMap::new();
                for m in chunk {
                    let key = m.key.clone().unwrap_or_default();
                    let mut headers: BTreeMap<String, Vec<u8>> = m
                        .headers
                        .iter()
                        .map(|(n, v)| (n.clone(), v.as_bytes().to_vec()))
                        .collect();
                    headers.insert("message-id".into(), m.message_id.as_bytes().to_vec());
                    groups
                        .entry(kafka_partition(&key, KAFKA_PARTITIONS))
                        .or_default()
                        .push(rskafka::record::Record {
                            key: Some(key),
                            value: Some(m.payload.clone()),
                            headers,
                            timestamp: Default::default(),
                        });
                }
                let produced = join_all(groups.into_iter().map(|(partition, records)| {
                    writers[partition as usize].produce(
                        records,
                        rskafka::client::partition::Compression::NoCompression,
                    )
                }))
                .await;
                for result in produced {
                    result?;
                }
            }
        }
    }
    Ok(())
}

/// MQTT 5: a batch of QoS 1 publishes, then its PUBACKs counted off the event loop.
async fn mqtt(spec: &BrokerSpec, messages: &[Message], batch: usize) -> anyhow::Result<()> {
    use rumqttc::v5::mqttbytes::QoS;
    use rumqttc::v5::mqttbytes::v5::{Packet, PublishProperties};
    use rumqttc::v5::{AsyncClient, Event, MqttOptions};
    let (host, port) = host_port(spec, 1883);
    let options = MqttOptions::new(
        format!("outboxd-bench-raw-{}", std::process::id()),
        host,
        port,
    );
    let (client, mut events) = AsyncClient::new(options, batch.max(16) * 2);
    let acked = Arc::new(AtomicUsize::new(0));
    let notify = Arc::new(tokio::sync::Notify::new());
    let driver: tokio::task::JoinHandle<Result<(), rumqttc::v5::ConnectionError>> = tokio::spawn({
        let (acked, notify) = (acked.clone(), notify.clone());
        async move {
            loop {
                match events.poll().await {
                    Ok(Event::Incoming(Packet::PubAck(_))) => {
                        acked.fetch_add(1, Ordering::SeqCst);
                        notify.notify_one();
                    }
                    Ok(_) => {}
                    Err(error) => return Err(error),
                }
            }
        }
    });
    let mut sent = 0;
    for chunk in messages.chunks(batch) {
        for m in chunk {
            let mut user_properties = m.headers.clone();
            user_properties.push(("message-id".into(), m.message_id.clone()));
            let properties = PublishProperties {
                user_properties,
                ..Default::default()
            };
            client
                .publish_with_properties(
                    m.topic.clone(),
                    QoS::AtLeastOnce,
                    false,
                    m.payload.clone(),
                    properties,
                )
                .await?;
        }
        sent += chunk.len();
        while acked.load(Ordering::SeqCst) < sent {
            if driver.is_finished() {
                bail!("the MQTT connection failed");
            }
            let _ = tokio::time::timeout(Duration::from_secs(1), notify.notified()).await;
        }
    }
    driver.abort();
    Ok(())
}
