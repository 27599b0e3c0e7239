//! Per broker, a destination of the test's own (a JetStream stream, a RabbitMQ exchange and
//! queue, Redis stream keys, an MQTT subscription, a Kafka topic, all under a random prefix), its
//! messages read back in broker order, and its cleanup; and the docs' config of that broker
//! pointed at it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_nats::jetstream;
use lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ConnectionProperties, ExchangeKind};
use rskafka::client::partition::{OffsetAt, UnknownTopicHandling};
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::Packet;
use rumqttc::v5::{AsyncClient, Event, MqttOptions};

use super::support::in_ci;

/// The brokers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Nats,
    Rabbit,
    Redis,
    Mqtt,
    Kafka,
}

impl Kind {
    /// The index of its example among the broker examples of docs/plugins/broker-examples.md.
    fn example(self) -> usize {
        self as usize
    }

    /// The URL of the shared broker (`OUTBOXD_TEST_<KIND>_URL` overrides it).
    pub fn shared_url(self) -> String {
        let (var, default) = match self {
            Kind::Nats => ("OUTBOXD_TEST_NATS_URL", "nats://127.0.0.1:4222"),
            Kind::Rabbit => ("OUTBOXD_TEST_RABBITMQ_URL", "amqp://127.0.0.1:5672/%2f"),
            Kind::Redis => ("OUTBOXD_TEST_REDIS_URL", "redis://127.0.0.1:6379/0"),
            Kind::Mqtt => ("OUTBOXD_TEST_MQTT_URL", "mqtt://127.0.0.1:1883"),
            Kind::Kafka => ("OUTBOXD_TEST_KAFKA_URL", "kafka://127.0.0.1:9092"),
        };
        std::env::var(var).unwrap_or_else(|_| default.to_string())
    }
}

/// One message as a consumer saw it.
#[derive(Debug, Clone)]
pub struct Received {
    /// The message id (the event id).
    pub id: String,
    /// Header `room-id`.
    pub room: String,
    /// Header `room-version`.
    pub version: i64,
    /// Header `event-type`.
    pub event_type: String,
    /// Header `traceparent`; empty when the message has none.
    pub traceparent: String,
}

/// A destination of one test on one broker.
pub struct Destination {
    pub kind: Kind,
    /// The random prefix of every name.
    pub prefix: String,
    /// The broker's URL (the shared one, or a private server's).
    pub url: String,
    reader: Reader,
    seen: Arc<Mutex<Vec<Received>>>,
}

enum Reader {
    Nats(jetstream::Context),
    Rabbit(Channel),
    Redis(redis::Client),
    Mqtt(AsyncClient),
    Kafka(rskafka::client::Client, Vec<i64>),
}

/// Prints why the test cannot run; panics under CI.
fn skip(kind: Kind, why: String) -> Option<Destination> {
    assert!(!in_ci(), "{kind:?} broker unavailable under CI=true: {why}");
    eprintln!("SKIPPED (no {kind:?} broker): {why}");
    None
}

/// Partitions of the Kafka topics tests create.
pub const KAFKA_PARTITIONS: i32 = 3;

impl Destination {
    /// A destination on the shared broker of `kind`.
    pub async fn shared(kind: Kind) -> Option<Destination> {
        Destination::create(kind, kind.shared_url()).await
    }

    /// A destination under a fresh prefix on the broker at `url`; `None` (or a panic under CI)
    /// when it does not answer.
    pub async fn create(kind: Kind, url: String) -> Option<Destination> {
        let prefix = format!("t{:08x}", rand::random::<u32>());
        let host_port = || {
            let parsed = url::Url::parse(&url).unwrap();
            (
                parsed.host_str().unwrap().to_string(),
                parsed.port().unwrap(),
            )
        };
        let reader = match kind {
            Kind::Nats => {
                let client = match async_nats::connect(url.as_str()).await {
                    Ok(client) => client,
                    Err(e) => return skip(kind, e.to_string()),
                };
                let js = jetstream::new(client);
                js.create_stream(jetstream::stream::Config {
                    name: prefix.to_uppercase(),
                    subjects: vec![format!("{prefix}.>")],
                    storage: jetstream::stream::StorageType::File,
                    ..Default::default()
                })
                .await
                .expect("create the stream");
                Reader::Nats(js)
            }
            Kind::Rabbit => {
                let connection =
                    match lapin::Connection::connect(&url, ConnectionProperties::default()).await {
                        Ok(c) => c,
                        Err(e) => return skip(kind, e.to_string()),
                    };
                let channel = connection.create_channel().await.unwrap();
                channel
                    .exchange_declare(
                        prefix.as_str().into(),
                        ExchangeKind::Topic,
                        ExchangeDeclareOptions {
                            durable: true,
                            ..Default::default()
                        },
                        FieldTable::default(),
                    )
                    .await
                    .unwrap();
                channel
                    .queue_declare(
                        prefix.as_str().into(),
                        QueueDeclareOptions {
                            durable: true,
                            ..Default::default()
                        },
                        FieldTable::default(),
                    )
                    .await
                    .unwrap();
                channel
                    .queue_bind(
                        prefix.as_str().into(),
                        prefix.as_str().into(),
                        "#".into(),
                        QueueBindOptions::default(),
                        FieldTable::default(),
                    )
                    .await
                    .unwrap();
                Reader::Rabbit(channel)
            }
            Kind::Redis => {
                let client = redis::Client::open(url.as_str()).unwrap();
                if let Err(e) = client.get_multiplexed_async_connection().await {
                    return skip(kind, e.to_string());
                }
                Reader::Redis(client)
            }
            Kind::Mqtt => {
                let (host, port) = host_port();
                let mut options = MqttOptions::new(format!("{prefix}-reader"), host, port);
                options.set_clean_start(false);
                options.set_session_expiry_interval(Some(3600));
                let (client, mut events) = AsyncClient::new(options, 100_000);
                let connected = tokio::time::timeout(Duration::from_secs(5), async {
                    loop {
                        match events.poll().await {
                            Ok(Event::Incoming(Packet::ConnAck(_))) => return Ok(()),
                            Ok(_) => {}
                            Err(e) => return Err(e.to_string()),
                        }
                    }
                })
                .await;
                match connected {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => return skip(kind, e),
                    Err(_) => return skip(kind, "no CONNACK within 5s".into()),
                }
                client
                    .subscribe(format!("{prefix}/#"), QoS::AtLeastOnce)
                    .await
                    .unwrap();
                let seen: Arc<Mutex<Vec<Received>>> = Arc::default();
                let sink = seen.clone();
                // The reader's event loop: reconnects (its session persists) after a broker
                // restart, acknowledges every message.
                tokio::spawn(async move {
                    loop {
                        match events.poll().await {
                            Ok(Event::Incoming(Packet::Publish(publish))) => {
                                let props = publish
                                    .properties
                                    .map(|p| p.user_properties)
                                    .unwrap_or_default();
                                let get = |name: &str| {
                                    props
                                        .iter()
                                        .find(|(n, _)| n == name)
                                        .map(|(_, v)| v.clone())
                                        .unwrap_or_default()
                                };
                                let id = get("message-id");
                                let mut seen = sink.lock().unwrap();
                                // A broker's own retransmission to this reader (DUP set) of a
                                // message it already has is not a publish.
                                if publish.dup && seen.iter().any(|r| r.id == id) {
                                    continue;
                                }
                                seen.push(Received {
                                    id,
                                    room: get("room-id"),
                                    version: get("room-version").parse().unwrap_or(-1),
                                    event_type: get("event-type"),
                                    traceparent: get("traceparent"),
                                });
                            }
                            Ok(_) => {}
                            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
                        }
                    }
                });
                // The subscription is in place once the SUBACK came: publish a probe? The
                // client queues the SUBSCRIBE before anything the test publishes; wait for it.
                tokio::time::sleep(Duration::from_millis(200)).await;
                return Some(Destination {
                    kind,
                    prefix,
                    url,
                    reader: Reader::Mqtt(client),
                    seen,
                });
            }
            Kind::Kafka => {
                let (host, port) = host_port();
                let client = tokio::time::timeout(
                    Duration::from_secs(5),
                    rskafka::client::ClientBuilder::new(vec![format!("{host}:{port}")]).build(),
                )
                .await;
                let client = match client {
                    Ok(Ok(client)) => client,
                    Ok(Err(e)) => return skip(kind, e.to_string()),
                    Err(_) => return skip(kind, "no connection within 5s".into()),
                };
                client
                    .controller_client()
                    .unwrap()
                    .create_topic(format!("{prefix}-events"), KAFKA_PARTITIONS, 1, 5_000)
                    .await
                    .expect("create the topic");
                Reader::Kafka(client, vec![0; KAFKA_PARTITIONS as usize])
            }
        };
        Some(Destination {
            kind,
            prefix,
            url,
            reader,
            seen: Arc::default(),
        })
    }

    /// The docs' example config of this broker, pointed at this destination, `database_url`
    /// and the built plugin, with `cache_dir` for the plugin cache and the admin listener off.
    pub fn config(&self, database_url: &str, cache_dir: &std::path::Path) -> toml::Table {
        let block = super::docs_examples()[self.kind.example()].clone();
        let text = match self.kind {
            Kind::Nats => block
                .replace(
                    "outbox.{app_code}",
                    &format!("{}.{{app_code}}", self.prefix),
                )
                .replace("nats://127.0.0.1:4222", &self.url),
            Kind::Rabbit => block
                .replace(
                    "outbox.{app_code}",
                    &format!("{}.{{app_code}}", self.prefix),
                )
                .replace(
                    "exchange = \"outbox\"",
                    &format!("exchange = \"{}\"", self.prefix),
                )
                .replace("amqp://127.0.0.1:5672/%2f", &self.url),
            Kind::Redis => block
                .replace(
                    "outbox:{app_code}",
                    &format!("{}:{{app_code}}", self.prefix),
                )
                .replace("redis://127.0.0.1:6379/0", &self.url),
            Kind::Mqtt => block
                .replace(
                    "outbox/{app_code}",
                    &format!("{}/{{app_code}}", self.prefix),
                )
                .replace("mqtt://127.0.0.1:1883", &self.url),
            Kind::Kafka => block
                .replace("outbox-events", &format!("{}-events", self.prefix))
                .replace("kafka://127.0.0.1:9092", &self.url),
        };
        assert!(
            text.contains(&self.prefix),
            "the docs' {:?} example no longer has the names this test replaces",
            self.kind
        );
        let mut table: toml::Table = toml::from_str(&text).expect("the docs' example parses");
        table["database"]["url"] = toml::Value::String(database_url.into());
        let plugin = super::fixtures::plugin("broker");
        let sinks = table["sink"].as_array_mut().unwrap();
        sinks[0]["plugin"] = toml::Value::String(plugin.display().to_string());
        let mut plugins = toml::Table::new();
        plugins.insert("cache_dir".into(), cache_dir.display().to_string().into());
        table.insert("plugins".into(), plugins.into());
        let mut admin = toml::Table::new();
        admin.insert("listen".into(), "".into());
        table.insert("admin".into(), admin.into());
        table
    }

    /// Every message the destination holds (or its reader received) so far, in broker order.
    pub async fn received(&mut self) -> Vec<Received> {
        match &mut self.reader {
            Reader::Nats(js) => {
                let mut stream = js.get_stream(self.prefix.to_uppercase()).await.unwrap();
                let last = stream.info().await.unwrap().state.last_sequence;
                let mut seen = self.seen.lock().unwrap().len() as u64;
                let mut fresh = Vec::new();
                while seen < last {
                    seen += 1;
                    let message = stream.get_raw_message(seen).await.unwrap();
                    let header = |name: &str| {
                        message
                            .headers
                            .get(name)
                            .map(|v| v.as_str().to_string())
                            .unwrap_or_default()
                    };
                    fresh.push(Received {
                        id: header("Nats-Msg-Id"),
                        room: header("room-id"),
                        version: header("room-version").parse().unwrap_or(-1),
                        event_type: header("event-type"),
                        traceparent: header("traceparent"),
                    });
                }
                self.seen.lock().unwrap().extend(fresh);
            }
            Reader::Rabbit(channel) => loop {
                let got = channel
                    .basic_get(
                        self.prefix.as_str().into(),
                        BasicGetOptions { no_ack: true },
                    )
                    .await
                    .unwrap();
                let Some(message) = got else { break };
                let properties = &message.delivery.properties;
                let headers = properties.headers().clone().unwrap_or_default();
                let header = |name: &str| match headers.inner().get(name) {
                    Some(AMQPValue::LongString(v)) => {
                        String::from_utf8_lossy(v.as_bytes()).into_owned()
                    }
                    _ => String::new(),
                };
                let received = Received {
                    id: properties
                        .message_id()
                        .as_ref()
                        .map(|id| id.to_string())
                        .unwrap_or_default(),
                    room: header("room-id"),
                    version: header("room-version").parse().unwrap_or(-1),
                    event_type: header("event-type"),
                    traceparent: header("traceparent"),
                };
                assert_eq!(properties.delivery_mode(), &Some(2), "persistent");
                self.seen.lock().unwrap().push(received);
            },
            Reader::Redis(client) => {
                // A connection per read (the broker may have restarted since); one stream per
                // room, each read from its start every time.
                let connection = &mut client.get_multiplexed_async_connection().await.unwrap();
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{}:*", self.prefix))
                    .query_async(connection)
                    .await
                    .unwrap();
                let mut all = Vec::new();
                for key in keys {
                    let entries: Vec<StreamEntry> = redis::cmd("XRANGE")
                        .arg(&key)
                        .arg("-")
                        .arg("+")
                        .query_async(connection)
                        .await
                        .unwrap();
                    for (_id, fields) in entries {
                        let field = |name: &str| {
                            fields
                                .iter()
                                .find(|(n, _)| n == name)
                                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                                .unwrap_or_default()
                        };
                        all.push(Received {
                            id: field("message-id"),
                            room: field("h:room-id"),
                            version: field("h:room-version").parse().unwrap_or(-1),
                            event_type: field("h:event-type"),
                            traceparent: field("h:traceparent"),
                        });
                    }
                }
                *self.seen.lock().unwrap() = all;
            }
            Reader::Mqtt(_) => {}
            Reader::Kafka(client, offsets) => {
                let topic = format!("{}-events", self.prefix);
                for partition in 0..KAFKA_PARTITIONS {
                    let reader = client
                        .partition_client(topic.clone(), partition, UnknownTopicHandling::Retry)
                        .await
                        .unwrap();
                    let end = reader.get_offset(OffsetAt::Latest).await.unwrap();
                    let next = &mut offsets[partition as usize];
                    while *next < end {
                        let (records, _) = reader
                            .fetch_records(*next, 1..10_000_000, 1_000)
                            .await
                            .unwrap();
                        for record in records {
                            *next = record.offset + 1;
                            let header = |name: &str| {
                                record
                                    .record
                                    .headers
                                    .get(name)
                                    .map(|v| String::from_utf8_lossy(v).into_owned())
                                    .unwrap_or_default()
                            };
                            let key = record.record.key.clone().unwrap_or_default();
                            let room = header("room-id");
                            assert_eq!(String::from_utf8_lossy(&key), room, "keyed by room");
                            assert_eq!(
                                rskafka_partition(&key),
                                partition,
                                "the key's murmur2 partition"
                            );
                            self.seen.lock().unwrap().push(Received {
                                id: header("message-id"),
                                room,
                                version: header("room-version").parse().unwrap_or(-1),
                                event_type: header("event-type"),
                                traceparent: header("traceparent"),
                            });
                        }
                    }
                }
            }
        }
        self.seen.lock().unwrap().clone()
    }

    /// Removes what the test made on the broker.
    pub async fn cleanup(self) {
        match self.reader {
            Reader::Nats(js) => {
                let _ = js.delete_stream(self.prefix.to_uppercase()).await;
            }
            Reader::Rabbit(channel) => {
                let _ = channel
                    .queue_delete(self.prefix.as_str().into(), QueueDeleteOptions::default())
                    .await;
                let _ = channel
                    .exchange_delete(
                        self.prefix.as_str().into(),
                        ExchangeDeleteOptions::default(),
                    )
                    .await;
            }
            Reader::Redis(client) => {
                let Ok(mut connection) = client.get_multiplexed_async_connection().await else {
                    return;
                };
                let keys: Vec<String> = redis::cmd("KEYS")
                    .arg(format!("{}:*", self.prefix))
                    .query_async(&mut connection)
                    .await
                    .unwrap_or_default();
                for key in keys {
                    let _: Result<(), _> = redis::cmd("DEL")
                        .arg(key)
                        .query_async(&mut connection)
                        .await;
                }
            }
            Reader::Mqtt(client) => {
                let _ = client.disconnect().await;
            }
            Reader::Kafka(client, _) => {
                let _ = client
                    .controller_client()
                    .unwrap()
                    .delete_topic(format!("{}-events", self.prefix), 5_000)
                    .await;
            }
        }
    }
}

/// One Redis stream entry as `XRANGE` answers it: its id and its fields.
type StreamEntry = (String, Vec<(String, Vec<u8>)>);

/// The partition outboxd puts a key in (the same murmur2 as the Java client).
fn rskafka_partition(key: &[u8]) -> i32 {
    outboxd::broker::kafka_partition(key, KAFKA_PARTITIONS)
}

/// How often each id was received.
pub fn counts(received: &[Received]) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for message in received {
        *counts.entry(message.id.clone()).or_default() += 1;
    }
    counts
}

/// Per room, the room versions in the order first received; panics naming the room whose
/// versions ever go back (a later version received before an earlier one's first arrival).
pub fn assert_room_order(received: &[Received]) {
    let mut last: BTreeMap<&str, i64> = BTreeMap::new();
    let mut first_seen = std::collections::BTreeSet::new();
    for message in received {
        if !first_seen.insert(message.id.as_str()) {
            continue; // a repeat of an earlier message
        }
        let previous = last.insert(message.room.as_str(), message.version);
        if let Some(previous) = previous {
            assert!(
                message.version > previous,
                "room {} out of order: version {} after {previous}",
                message.room,
                message.version
            );
        }
    }
}
