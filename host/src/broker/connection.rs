//! One `[[broker]]` connection: the publish path every kind shares (size check, in-flight limit,
//! session, deadline, metrics) and the session's life: connected in the background at start,
//! reconnected with backoff while it is down (and on demand by a publish), replaced once it is
//! broken.

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

use super::{BrokerRefusal, BrokerSession, Connector, Message, PublishOutcome};
use crate::config::{BrokerKind, BrokerSpec};
use crate::metrics::Metrics;
use crate::outage::Outage;

/// First wait after a failed connection attempt; doubled per failure up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait between connection attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(5);
/// How often the background task looks at the session.
const WATCH_INTERVAL: Duration = Duration::from_millis(250);

/// Where a connection stands, for `/readyz` and the logs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectionState {
    /// What it speaks to.
    pub kind: BrokerKind,
    /// Whether it is connected now.
    pub connected: bool,
    /// The last connection error, while not connected.
    pub last_error: Option<String>,
}

/// One connection, shared by every sink that may use it.
pub struct Connection {
    name: Arc<str>,
    kind: BrokerKind,
    connector: Arc<dyn Connector>,
    session: Mutex<Option<Arc<dyn BrokerSession>>>,
    /// Held while connecting, so attempts never overlap; holds the backoff.
    attempts: tokio::sync::Mutex<Backoff>,
    last_error: Mutex<Option<String>>,
    /// Logged once when the connection goes (it cannot connect, or it was lost) and once when it
    /// is back.
    outage: Outage,
    in_flight: Semaphore,
    max_in_flight: usize,
    max_message_size: u64,
    connect_timeout: Duration,
    /// The password, kept out of the errors a client reports.
    secret: Option<String>,
    metrics: Metrics,
    /// The runtime the clients' tasks run on (the host's, not a plugin runtime).
    runtime: tokio::runtime::Handle,
    closed: CancellationToken,
}

/// When the next connection attempt may start.
struct Backoff {
    next: Instant,
    wait: Duration,
}

impl Connection {
    /// The connection of `spec`, connecting in the background on the current runtime.
    pub(super) fn start(
        spec: &BrokerSpec,
        connector: Arc<dyn Connector>,
        metrics: Metrics,
    ) -> Arc<Connection> {
        let limits = spec.limits();
        let connection = Arc::new(Connection {
            name: Arc::from(spec.name()),
            kind: spec.kind(),
            connector,
            session: Mutex::new(None),
            attempts: tokio::sync::Mutex::new(Backoff {
                next: Instant::now(),
                wait: FIRST_BACKOFF,
            }),
            last_error: Mutex::new(Some("not connected yet".into())),
            outage: Outage::new(),
            in_flight: Semaphore::new(limits.max_in_flight as usize),
            max_in_flight: limits.max_in_flight as usize,
            max_message_size: limits.max_message_size.0,
            connect_timeout: limits.connect_timeout,
            secret: spec.password().map(|p| p.expose().to_string()),
            metrics,
            runtime: tokio::runtime::Handle::current(),
            closed: CancellationToken::new(),
        });
        connection
            .metrics
            .brokers()
            .set_connected(spec.name(), false);
        tokio::spawn(watch(
            Arc::downgrade(&connection),
            connection.closed.clone(),
        ));
        connection
    }

    /// The connection's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// What it speaks to.
    pub fn kind(&self) -> BrokerKind {
        self.kind
    }

    /// Where it stands now.
    pub fn state(&self) -> ConnectionState {
        let connected = self.current().is_some_and(|session| session.connected());
        ConnectionState {
            kind: self.kind,
            connected,
            last_error: if connected {
                None
            } else {
                lock(&self.last_error).clone()
            },
        }
    }

    /// Stops the background task and drops the session.
    pub(super) fn close(&self) {
        self.closed.cancel();
        *lock(&self.session) = None;
    }

    /// Publishes `messages` in order; one result per message, each once the broker confirmed
    /// it, every message still unconfirmed at `deadline` retryable. A message over
    /// `limits.max_message_size` or with an empty topic fails permanently, alone.
    pub async fn publish(&self, messages: &[Message], deadline: Instant) -> Vec<PublishOutcome> {
        let started = Instant::now();
        let mut results: Vec<Option<PublishOutcome>> = vec![None; messages.len()];
        let mut valid = Vec::with_capacity(messages.len());
        for (position, message) in messages.iter().enumerate() {
            let size = message.size();
            if size > self.max_message_size {
                results[position] = Some(Err(BrokerRefusal::Permanent(format!(
                    "message of {size} bytes exceeds broker `{}`'s limits.max_message_size ({} bytes)",
                    self.name, self.max_message_size
                ))));
            } else if message.topic.is_empty() {
                results[position] = Some(Err(BrokerRefusal::Permanent(format!(
                    "message for broker `{}` has an empty topic",
                    self.name
                ))));
            } else {
                valid.push(position);
            }
        }
        for chunk in valid.chunks(self.max_in_flight) {
            let sent = self.publish_chunk(messages, chunk, deadline).await;
            for (&position, result) in chunk.iter().zip(sent) {
                results[position] = Some(result);
            }
        }
        self.metrics
            .brokers()
            .observe_publish(&self.name, started.elapsed());
        let results: Vec<PublishOutcome> = results
            .into_iter()
            .map(|result| {
                result.unwrap_or_else(|| Err(BrokerRefusal::Retryable("not published".into())))
            })
            .collect();
        for result in &results {
            let kind = result
                .as_ref()
                .err()
                .map_or("confirmed", BrokerRefusal::metric_kind);
            self.metrics.brokers().count_message(&self.name, kind);
        }
        results
    }

    /// One chunk of at most `max_in_flight` messages: its permits, the session, the publish.
    async fn publish_chunk(
        &self,
        messages: &[Message],
        chunk: &[usize],
        deadline: Instant,
    ) -> Vec<PublishOutcome> {
        let all = |refusal: BrokerRefusal| vec![Err(refusal); chunk.len()];
        let deadline_at = tokio::time::Instant::from_std(deadline);
        let permits =
            tokio::time::timeout_at(deadline_at, self.in_flight.acquire_many(chunk.len() as u32))
                .await;
        let Ok(Ok(_permits)) = permits else {
            return all(BrokerRefusal::Retryable(format!(
                "waited for broker `{}`'s limits.max_in_flight until the publish deadline",
                self.name
            )));
        };
        let session = match self.session(deadline).await {
            Ok(session) => session,
            Err(reason) => {
                return all(BrokerRefusal::Retryable(format!(
                    "broker `{}` ({}) is unreachable: {reason}",
                    self.name, self.kind
                )));
            }
        };
        let batch: Vec<Message> = chunk.iter().map(|&p| messages[p].clone()).collect();
        let sent = tokio::time::timeout_at(deadline_at, session.publish(&batch)).await;
        if session.broken() {
            self.discard(&session);
        }
        match sent {
            Ok(mut sent) if sent.len() == chunk.len() => {
                for result in &mut sent {
                    if let Err(BrokerRefusal::Retryable(reason)) = result {
                        *reason = format!("broker `{}`: {reason}", self.name);
                    }
                }
                sent
            }
            Ok(sent) => all(BrokerRefusal::Retryable(format!(
                "broker `{}` answered {} results for {} messages",
                self.name,
                sent.len(),
                chunk.len()
            ))),
            Err(_elapsed) => {
                self.metrics.brokers().count_error(&self.name, "timeout");
                all(BrokerRefusal::Retryable(format!(
                    "broker `{}` did not confirm before the sink's publish deadline",
                    self.name
                )))
            }
        }
    }

    /// The live session, connecting when there is none (not before the backoff allows, and not
    /// past `deadline`).
    async fn session(&self, deadline: Instant) -> Result<Arc<dyn BrokerSession>, String> {
        if let Some(session) = self.current() {
            return Ok(session);
        }
        let deadline_at = tokio::time::Instant::from_std(deadline);
        let Ok(mut backoff) = tokio::time::timeout_at(deadline_at, self.attempts.lock()).await
        else {
            return Err(self.last_error());
        };
        if let Some(session) = self.current() {
            return Ok(session);
        }
        if Instant::now() < backoff.next {
            return Err(self.last_error());
        }
        self.connect(&mut backoff, deadline).await
    }

    /// One connection attempt (the caller holds `attempts`), within `connect_timeout` and
    /// `deadline`, run on the host's runtime.
    async fn connect(
        &self,
        backoff: &mut Backoff,
        deadline: Instant,
    ) -> Result<Arc<dyn BrokerSession>, String> {
        let limit = self
            .connect_timeout
            .min(deadline.saturating_duration_since(Instant::now()));
        let connector = self.connector.clone();
        let task = self.runtime.spawn(async move { connector.connect().await });
        let outcome = match tokio::time::timeout(limit, task).await {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(join)) => Err(format!("connecting failed: {join}")),
            Err(_elapsed) => Err(format!(
                "no connection within {}",
                humantime::format_duration(limit)
            )),
        };
        let outcome = outcome.map_err(|reason| match &self.secret {
            Some(secret) => reason.replace(secret.as_str(), "***"),
            None => reason,
        });
        match outcome {
            Ok(session) => {
                *lock(&self.session) = Some(session.clone());
                *lock(&self.last_error) = None;
                backoff.wait = FIRST_BACKOFF;
                self.metrics.brokers().set_connected(&self.name, true);
                self.outage.recovered(|ended| {
                    tracing::info!(broker = %self.name, kind = %self.kind, outage = %ended.lasted_text(),
                        failures = ended.failures, "broker back after an outage");
                });
                tracing::info!(broker = %self.name, kind = %self.kind, "broker connected");
                Ok(session)
            }
            Err(reason) => {
                *lock(&self.last_error) = Some(reason.clone());
                self.outage.failed(|| {
                    tracing::warn!(broker = %self.name, kind = %self.kind, error = %reason,
                        "cannot connect to the broker; retrying with backoff (its messages are retryable meanwhile)");
                });
                self.metrics.brokers().count_error(&self.name, "connect");
                backoff.next = Instant::now() + backoff.wait;
                backoff.wait = (backoff.wait * 2).min(MAX_BACKOFF);
                Err(reason)
            }
        }
    }

    /// The session, unless there is none or it is broken.
    fn current(&self) -> Option<Arc<dyn BrokerSession>> {
        lock(&self.session)
            .as_ref()
            .filter(|session| !session.broken())
            .cloned()
    }

    /// Drops `session` if it is still the current one: the next publish reconnects.
    fn discard(&self, session: &Arc<dyn BrokerSession>) {
        let mut slot = lock(&self.session);
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, session)) {
            *slot = None;
            *lock(&self.last_error) = Some("the connection was lost".into());
            self.metrics.brokers().set_connected(&self.name, false);
            self.metrics.brokers().count_error(&self.name, "disconnect");
            self.outage.failed(|| {
                tracing::warn!(broker = %self.name, kind = %self.kind, "broker connection lost; reconnecting");
            });
        }
    }

    fn last_error(&self) -> String {
        lock(&self.last_error)
            .clone()
            .unwrap_or_else(|| "not connected".into())
    }
}

/// The background task of a connection: connects it, reports its state, reconnects it when it
/// breaks; ends when the connection is closed or dropped.
async fn watch(connection: Weak<Connection>, closed: CancellationToken) {
    loop {
        let Some(connection) = connection.upgrade() else {
            return;
        };
        let session = lock(&connection.session).clone();
        match session {
            Some(session) if session.broken() => connection.discard(&session),
            Some(session) => connection
                .metrics
                .brokers()
                .set_connected(&connection.name, session.connected()),
            None => {
                let deadline = Instant::now() + connection.connect_timeout;
                let _ = connection.session(deadline).await;
            }
        }
        drop(connection);
        tokio::select! {
            _ = closed.cancelled() => return,
            _ = tokio::time::sleep(WATCH_INTERVAL) => {}
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
