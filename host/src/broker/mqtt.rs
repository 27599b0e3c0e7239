//! MQTT 5: each message a QoS 1 PUBLISH with its headers, `message-id` and `key` as user
//! properties, confirmed by the broker's PUBACK. rumqttc's event loop runs in a task of its own
//! that matches each PUBACK to its publish: publishes enter the client's request queue in the
//! order their waiters are queued (one lock around both), the loop sends them in that order and
//! reports each packet id as it goes (`Outgoing::Publish`), and the PUBACK of that id answers
//! the waiter. A lost connection answers every waiter retryable and breaks the session (a new
//! one, clean, is opened for the next publish).

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use rumqttc::Outgoing;
use rumqttc::v5::mqttbytes::QoS;
use rumqttc::v5::mqttbytes::v5::{Packet, PubAckReason, PublishProperties};
use rumqttc::v5::{AsyncClient, Event, EventLoop, MqttOptions};
use rumqttc::{TlsConfiguration, Transport};
use tokio::sync::oneshot;

use super::{BrokerRefusal, BrokerSession, Connector, Message, PublishOutcome, tls};
use crate::config::BrokerSpec;

/// Requests the client may queue before `publish` waits.
const REQUEST_QUEUE: usize = 4096;
/// How long a broker's "quota exceeded" PUBACK makes the message wait.
const QUOTA_WAIT: Duration = Duration::from_secs(1);

/// Connects to an MQTT broker as `[[broker]]` says.
pub(super) struct MqttConnector {
    host: String,
    port: u16,
    client_id: String,
    username: Option<String>,
    password: Option<String>,
    tls: bool,
    ca_pem: Option<Vec<u8>>,
}

impl MqttConnector {
    pub(super) fn new(spec: &BrokerSpec) -> MqttConnector {
        let url = spec.url();
        let client_id = spec.client_id().map_or_else(
            || format!("outboxd-{}-{:08x}", spec.name(), rand::random::<u32>()),
            str::to_string,
        );
        MqttConnector {
            host: url.host_str().unwrap_or_default().to_string(),
            port: url.port().unwrap_or(if spec.tls() { 8883 } else { 1883 }),
            client_id,
            username: spec.username().map(str::to_string),
            password: spec.password().map(|p| p.expose().to_string()),
            tls: spec.tls(),
            ca_pem: spec.ca_pem().map(<[u8]>::to_vec),
        }
    }
}

#[async_trait]
impl Connector for MqttConnector {
    async fn connect(&self) -> Result<Arc<dyn BrokerSession>, String> {
        let mut options = MqttOptions::new(&self.client_id, &self.host, self.port);
        options.set_keep_alive(Duration::from_secs(30));
        options.set_clean_start(true);
        if self.username.is_some() || self.password.is_some() {
            options.set_credentials(
                self.username.clone().unwrap_or_default(),
                self.password.clone().unwrap_or_default(),
            );
        }
        if self.tls {
            let config = tls::client_config(self.ca_pem.as_deref())?;
            options.set_transport(Transport::Tls(TlsConfiguration::Rustls(config)));
        }
        let (client, mut events) = AsyncClient::new(options, REQUEST_QUEUE);
        loop {
            match events.poll().await {
                Ok(Event::Incoming(Packet::ConnAck(_))) => break,
                Ok(_) => {}
                Err(error) => return Err(error.to_string()),
            }
        }
        let waiters = Arc::new(Waiters::default());
        tokio::spawn(drive(events, waiters.clone()));
        Ok(Arc::new(MqttSession {
            client,
            waiters,
            send: tokio::sync::Mutex::new(()),
        }))
    }
}

/// The waiters of one connection's publishes: queued until the event loop sends them, then by
/// packet id until their PUBACK.
#[derive(Default)]
struct Waiters {
    queued: Mutex<VecDeque<oneshot::Sender<PublishOutcome>>>,
    sent: Mutex<HashMap<u16, oneshot::Sender<PublishOutcome>>>,
    broken: AtomicBool,
}

impl Waiters {
    /// Answers every waiter retryable with `reason`; the session is broken.
    fn fail_all(&self, reason: &str) {
        self.broken.store(true, Ordering::SeqCst);
        let queued: Vec<_> = lock(&self.queued).drain(..).collect();
        let sent: Vec<_> = lock(&self.sent).drain().map(|(_, w)| w).collect();
        for waiter in queued.into_iter().chain(sent) {
            let _ = waiter.send(Err(BrokerRefusal::Retryable(format!("MQTT: {reason}"))));
        }
    }
}

/// Runs the event loop until the connection fails, matching PUBACKs to their publishes.
async fn drive(mut events: EventLoop, waiters: Arc<Waiters>) {
    loop {
        match events.poll().await {
            Ok(Event::Outgoing(Outgoing::Publish(pkid))) if pkid != 0 => {
                if let Some(waiter) = lock(&waiters.queued).pop_front() {
                    lock(&waiters.sent).insert(pkid, waiter);
                }
            }
            Ok(Event::Incoming(Packet::PubAck(ack))) => {
                if let Some(waiter) = lock(&waiters.sent).remove(&ack.pkid) {
                    let _ = waiter.send(classify(ack.reason));
                }
            }
            Ok(Event::Incoming(Packet::Disconnect(disconnect))) => {
                waiters.fail_all(&format!(
                    "the broker disconnected ({:?})",
                    disconnect.reason_code
                ));
                return;
            }
            Ok(_) => {}
            Err(error) => {
                waiters.fail_all(&error.to_string());
                return;
            }
        }
        if waiters.broken.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// A PUBACK's reason as a result.
fn classify(reason: PubAckReason) -> PublishOutcome {
    match reason {
        PubAckReason::Success | PubAckReason::NoMatchingSubscribers => Ok(()),
        PubAckReason::QuotaExceeded => Err(BrokerRefusal::RateLimited {
            message: "MQTT broker: quota exceeded".into(),
            retry_after: QUOTA_WAIT,
        }),
        PubAckReason::NotAuthorized
        | PubAckReason::TopicNameInvalid
        | PubAckReason::PayloadFormatInvalid => Err(BrokerRefusal::Permanent(format!(
            "MQTT broker refused: {reason:?}"
        ))),
        other => Err(BrokerRefusal::Retryable(format!("MQTT broker: {other:?}"))),
    }
}

/// An MQTT broker refusing a message, as a session reports it: a PUBACK saying the client may
/// not publish on the topic (the stand-in broker's `refused` answer).
pub(super) fn refused() -> PublishOutcome {
    classify(PubAckReason::NotAuthorized)
}

/// A connected client and its waiters.
struct MqttSession {
    client: AsyncClient,
    waiters: Arc<Waiters>,
    /// Held while a waiter is queued and its publish handed to the client, so both queues keep
    /// one order.
    send: tokio::sync::Mutex<()>,
}

#[async_trait]
impl BrokerSession for MqttSession {
    async fn publish(&self, messages: &[Message]) -> Vec<PublishOutcome> {
        let mut answers = Vec::with_capacity(messages.len());
        for message in messages {
            answers.push(self.send(message).await);
        }
        join_all(answers.into_iter().map(|answer| async move {
            match answer {
                Ok(receiver) => receiver.await.unwrap_or_else(|_| {
                    Err(BrokerRefusal::Retryable(
                        "MQTT: the connection closed".into(),
                    ))
                }),
                Err(refusal) => Err(refusal),
            }
        }))
        .await
    }

    fn connected(&self) -> bool {
        !self.waiters.broken.load(Ordering::SeqCst)
    }

    fn broken(&self) -> bool {
        self.waiters.broken.load(Ordering::SeqCst)
    }
}

impl MqttSession {
    /// Queues one message's waiter and hands the message to the client.
    async fn send(
        &self,
        message: &Message,
    ) -> Result<oneshot::Receiver<PublishOutcome>, BrokerRefusal> {
        if message.topic.contains(['+', '#']) {
            return Err(BrokerRefusal::Permanent(format!(
                "MQTT topic {:?} has a wildcard (`+` or `#`)",
                message.topic
            )));
        }
        let mut user_properties = message.headers.clone();
        user_properties.push(("message-id".into(), message.message_id.clone()));
        if let Some(key) = &message.key {
            user_properties.push(("key".into(), String::from_utf8_lossy(key).into_owned()));
        }
        let properties = PublishProperties {
            user_properties,
            ..PublishProperties::default()
        };
        let _order = self.send.lock().await;
        if self.broken() {
            return Err(BrokerRefusal::Retryable(
                "MQTT: the connection is lost".into(),
            ));
        }
        let (waiter, answer) = oneshot::channel();
        lock(&self.waiters.queued).push_back(waiter);
        let sent = self
            .client
            .publish_with_properties(
                message.topic.clone(),
                QoS::AtLeastOnce,
                false,
                message.payload.clone(),
                properties,
            )
            .await;
        if let Err(error) = sent {
            // Ours is the last waiter queued (the lock is held): it never reaches the loop.
            lock(&self.waiters.queued).pop_back();
            return Err(BrokerRefusal::Retryable(format!("MQTT: {error}")));
        }
        Ok(answer)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
