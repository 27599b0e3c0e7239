//! The `Publisher` seam: what the worker hands a claimed batch to, and what it gets back.
//!
//! The WASM plugin host (`crate::plugin`) is the production implementation; tests and benchmarks
//! add native ones.

use std::time::Duration;

use async_trait::async_trait;

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
}

/// What became of one event of a batch.
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

/// Delivers batches of events to a sink.
///
/// `publish` returns exactly one [`Outcome`] per event, in order. A publisher that cannot deliver
/// the batch at all reports every event as retryable with the reason; it never panics to signal
/// failure. The worker applies the publish timeout around the call and treats a result list of the
/// wrong length as a retryable failure of the whole batch.
#[async_trait]
pub trait Publisher: Send + Sync {
    /// Delivers `batch`, returning one outcome per event in the same order.
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome>;
}
