//! The `Publisher` seam: what the worker hands a claimed batch to, and what it gets back.
//!
//! The WASM plugin host (`crate::plugin`) is the production implementation; tests and benchmarks
//! add native ones.

use std::time::Duration;

use async_trait::async_trait;
use futures::stream::{self, BoxStream, StreamExt};

pub mod waves;

/// One event as a sink sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    /// Tenant.
    pub app_code: String,
    /// Idempotency key; sinks use it to dedupe redeliveries.
    pub event_id: String,
    /// Event type (routing key).
    pub event_type: String,
    /// Room the event belongs to.
    pub room_id: String,
    /// Room state version after the event.
    pub room_version: i64,
    /// When it happened, UTC milliseconds.
    pub occurred_at_ms: i64,
    /// The serialized event body.
    pub body: Vec<u8>,
    /// Delivery attempt, 1 on first delivery.
    pub attempt: u32,
    /// The producer's W3C trace context, when it wrote a valid one with the event.
    pub trace: Option<crate::trace_context::TraceContext>,
}

/// A publisher's answer for one event of a batch: the first of the fates along the path. The
/// worker turns it into the row's new state, [`crate::store::Disposition`] (a retryable answer
/// through the retry policy, [`crate::retry::RetryPolicy::after_failure`]), marks that, and
/// counts what the mark did as a [`crate::metrics::RowOutcome`]. A sink's circuit breaker reads
/// a batch's answers as one [`crate::plugin::breaker::Verdict`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The sink accepted the event.
    Delivered,
    /// Try again later; `retry_after`, when given, overrides the retry policy's delay.
    Retryable {
        /// Why it failed (stored in `last_error`).
        message: String,
        /// When the sink asked to be retried (e.g. HTTP `Retry-After`, a rate limit).
        retry_after: Option<Duration>,
    },
    /// Never retry: the event goes to `failed`.
    Permanent {
        /// Why (stored in `last_error`).
        message: String,
    },
    /// Not attempted (the sink's circuit breaker is open): back to `retryable` after `wait`
    /// **without spending an attempt**.
    Deferred {
        /// Why (stored in `last_error`).
        message: String,
        /// When to try again.
        wait: Duration,
    },
}

impl Outcome {
    /// A retryable outcome without a retry-after hint.
    pub fn retryable(message: impl Into<String>) -> Outcome {
        Outcome::Retryable {
            message: message.into(),
            retry_after: None,
        }
    }

    /// A deferred outcome (no attempt spent).
    pub fn deferred(message: impl Into<String>, wait: Duration) -> Outcome {
        Outcome::Deferred {
            message: message.into(),
            wait,
        }
    }

    /// A permanent outcome.
    pub fn permanent(message: impl Into<String>) -> Outcome {
        Outcome::Permanent {
            message: message.into(),
        }
    }
}

/// Outcomes of part of a batch: `(position in the batch, outcome)` pairs, as one sink answered.
pub type Answered = Vec<(usize, Outcome)>;

/// Delivers batches of events to a sink.
///
/// `publish` returns exactly one [`Outcome`] per event, in order. A publisher that cannot deliver
/// the batch at all reports every event as retryable with the reason; it never panics to signal
/// failure.
///
/// The worker calls [`Publisher::publish_parts`], which hands results back in parts as they come
/// (the router: one part per sink, as soon as that sink answers), and marks each part at once.
/// The worker's publish deadline bounds the whole stream: events no part answered by then are
/// retryable, and parts already answered are kept. With per-room order on, the worker calls
/// [`Publisher::publish_in_waves`] instead.
#[async_trait]
pub trait Publisher: Send + Sync {
    /// Delivers `batch`, returning one outcome per event in the same order.
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome>;

    /// Delivers `batch`, yielding outcomes in parts as they are known; every position of the
    /// batch appears in exactly one part. The default is one part from [`Publisher::publish`]; a
    /// result list of the wrong length becomes a retryable failure of the whole batch.
    fn publish_parts<'a>(&'a self, batch: &'a [Event]) -> BoxStream<'a, Answered> {
        stream::once(async move {
            let outcomes = self.publish(batch).await;
            whole_batch(batch.len(), outcomes, "publisher")
        })
        .boxed()
    }

    /// Delivers `batch` keeping each room's order, in per-room waves within `timeout`
    /// ([`waves`]): one outcome per event, in order. The default publishes each wave through
    /// [`Publisher::publish`]; a publisher that can run the waves cheaper (a plugin sink, on its
    /// runtime) overrides it.
    async fn publish_in_waves(&self, batch: &[Event], timeout: Duration) -> Vec<Outcome> {
        waves::publish_each_wave(self, batch, timeout).await
    }

    /// The name of the sink events of `event_type` go to, when this publisher routes them (the
    /// delivery span's `messaging.destination.name`); `None` by default.
    fn sink_for(&self, event_type: &str) -> Option<String> {
        let _ = event_type;
        None
    }
}

/// `outcomes` of a batch of `len` events as one part; a list of the wrong length from `who`
/// becomes a retryable outcome for every event.
pub fn whole_batch(len: usize, outcomes: Vec<Outcome>, who: &str) -> Answered {
    if outcomes.len() == len {
        return outcomes.into_iter().enumerate().collect();
    }
    let message = format!("{who} returned {} results for {len} events", outcomes.len());
    (0..len)
        .map(|position| (position, Outcome::retryable(message.clone())))
        .collect()
}

/// An event of tenant `app` for unit tests: `event_id` of `event_type` in `room_id`, first attempt.
#[cfg(test)]
pub(crate) fn test_event(event_id: &str, event_type: &str, room_id: &str) -> Event {
    Event {
        app_code: "app".into(),
        event_id: event_id.into(),
        event_type: event_type.into(),
        room_id: room_id.into(),
        room_version: 0,
        occurred_at_ms: 0,
        body: Vec::new(),
        attempt: 1,
        trace: None,
    }
}
