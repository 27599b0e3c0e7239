//! The `room_outbox` record: statuses, the producer-side [`Record`], and small helpers shared by
//! every backend (event ids, `last_error` truncation, the clock).

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

use prost::Message;
use rand::Rng;

use crate::envelope::EventEnvelope;
use crate::trace_context::TraceContext;

/// The tenant used when a producer does not name one.
pub const DEFAULT_APP_CODE: &str = "default";

/// Longest `last_error` kept, in bytes (cut at a UTF-8 boundary).
pub const LAST_ERROR_MAX_BYTES: usize = 512;

/// Delivery state of one row. Stored as the lowercase name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Status {
    /// Committed by a producer, never claimed.
    Pending,
    /// Claimed by a worker whose lease (`worker_id`, `lock_until_ms`) is on the row.
    Delivering,
    /// A delivery failed; claimable again from `next_retry_at_ms`.
    Retryable,
    /// Gave up (permanent error, too many attempts, corrupt envelope, no route). Requeue to retry.
    Failed,
    /// The sink accepted it.
    Delivered,
}

impl Status {
    /// Every status, in the order `status` reports them.
    pub const ALL: [Status; 5] = [
        Status::Pending,
        Status::Delivering,
        Status::Retryable,
        Status::Failed,
        Status::Delivered,
    ];

    /// The value stored in the `status` column.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Pending => "pending",
            Status::Delivering => "delivering",
            Status::Retryable => "retryable",
            Status::Failed => "failed",
            Status::Delivered => "delivered",
        }
    }

    /// Whether a row of this status is still to be delivered (`pending`, `retryable`,
    /// `delivering`): the rows the partition index holds.
    pub fn is_live(self) -> bool {
        matches!(
            self,
            Status::Pending | Status::Retryable | Status::Delivering
        )
    }

    /// Parses a `status` column value.
    pub fn parse(value: &str) -> Option<Status> {
        Status::ALL.into_iter().find(|s| s.as_str() == value)
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One event as a producer writes it: the row's key columns plus the envelope.
///
/// Build it with [`Record::build`], then save a command's records with the `save` function of your
/// backend (`outboxd::store::sqlite::save`, `…::mysql::save`, `…::postgres::save`) inside the same
/// transaction as the business change.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Tenant; the envelope's `app_code` is set to the same value on save.
    pub app_code: String,
    /// Idempotency key, unique per tenant. Saving the same id twice keeps the first row.
    pub event_id: String,
    /// Event type (routing key), e.g. `RoomGiftSent`.
    pub event_type: String,
    /// Room the event belongs to.
    pub room_id: String,
    /// Claim order: UTC milliseconds.
    pub created_at_ms: i64,
    /// The envelope stored (protobuf-encoded) in the `envelope` column.
    pub envelope: EventEnvelope,
}

impl Record {
    /// Wraps a protobuf event body into a new record of the default tenant, with a fresh,
    /// time-ordered event id and `created_at_ms = occurred_at`.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use outboxd::record::Record;
    ///
    /// // Any prost message works as a body; here a bare string for brevity.
    /// let record = Record::build("room-42", "RoomGiftSent", 7, SystemTime::now(), &"rose".to_string())
    ///     .with_app_code("live");
    /// assert_eq!(record.envelope.app_code, "live");
    /// assert_eq!(record.envelope.room_version, 7);
    /// assert!(record.event_id.starts_with("evt_"));
    /// ```
    pub fn build(
        room_id: impl Into<String>,
        event_type: impl Into<String>,
        room_version: i64,
        occurred_at: SystemTime,
        body: &impl Message,
    ) -> Record {
        let occurred_at_ms = system_time_ms(occurred_at);
        let event_id = new_event_id(occurred_at_ms);
        let room_id = room_id.into();
        let event_type = event_type.into();
        Record {
            app_code: DEFAULT_APP_CODE.to_string(),
            event_id: event_id.clone(),
            event_type: event_type.clone(),
            room_id: room_id.clone(),
            created_at_ms: occurred_at_ms,
            envelope: EventEnvelope {
                app_code: DEFAULT_APP_CODE.to_string(),
                event_id,
                room_id,
                event_type,
                room_version,
                occurred_at_ms,
                body: body.encode_to_vec(),
                traceparent: String::new(),
                tracestate: String::new(),
            },
        }
    }

    /// Sets the tenant (row and envelope).
    pub fn with_app_code(mut self, app_code: impl Into<String>) -> Record {
        self.app_code = app_code.into();
        self.envelope.app_code = self.app_code.clone();
        self
    }

    /// Replaces the generated event id (row and envelope), e.g. with one derived from the command,
    /// so that retrying the command does not enqueue the event twice.
    pub fn with_event_id(mut self, event_id: impl Into<String>) -> Record {
        self.event_id = event_id.into();
        self.envelope.event_id = self.event_id.clone();
        self
    }

    /// Carries the producer's span context to the sinks (envelope fields `traceparent`,
    /// `tracestate`): take it from your tracing setup, e.g. an OpenTelemetry propagator's
    /// `traceparent` and `tracestate` headers.
    ///
    /// ```
    /// use std::time::SystemTime;
    /// use outboxd::{record::Record, trace_context::TraceContext};
    ///
    /// let context = TraceContext::new("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")?;
    /// let record = Record::build("room-42", "RoomGiftSent", 7, SystemTime::now(), &"rose".to_string())
    ///     .with_trace_context(&context);
    /// assert_eq!(record.envelope.traceparent, context.traceparent());
    /// # Ok::<(), outboxd::trace_context::InvalidTraceContext>(())
    /// ```
    pub fn with_trace_context(mut self, context: &TraceContext) -> Record {
        self.envelope.traceparent = context.traceparent().to_string();
        self.envelope.tracestate = context.tracestate().to_string();
        self
    }

    /// Carries the context of OpenTelemetry's current span, when there is a valid one
    /// ([`TraceContext::current`]); the record unchanged otherwise. A context already set with
    /// [`Record::with_trace_context`] is kept.
    pub fn with_current_trace_context(self) -> Record {
        if !self.envelope.traceparent.is_empty() {
            return self;
        }
        match TraceContext::current() {
            Some(context) => self.with_trace_context(&context),
            None => self,
        }
    }

    /// The bytes stored in the `envelope` column (the envelope's tenant forced to the row's).
    pub fn encoded_envelope(&self) -> Vec<u8> {
        if self.envelope.app_code == self.app_code {
            return self.envelope.encode_to_vec();
        }
        let mut envelope = self.envelope.clone();
        envelope.app_code = self.app_code.clone();
        envelope.encode_to_vec()
    }
}

/// A new time-ordered event id: `evt_` + 13 hex digits of milliseconds + 16 hex digits, random
/// for the first id of a millisecond and one more than the last for the next ids of the same
/// millisecond made by the same thread (as a monotonic ULID), so ids one thread makes in one
/// millisecond sort in the order they were made.
///
/// The claim order is `(created_at_ms, event_id)`: with increasing ids, rows saved in a burst
/// (many records of one timestamp, e.g. one `Record::build` time for a whole batch) are claimed in
/// the order they were inserted, so a claimed batch sits on neighbouring pages of the table (a
/// SQLite rowid table, a PostgreSQL heap) instead of one page per row (docs/PERFORMANCE.md,
/// "SQLite: a backlog of one timestamp").
pub fn new_event_id(now_ms: i64) -> String {
    let now_ms = now_ms.max(0);
    let tail = LAST_EVENT_ID.with(|last| {
        let tail = match last.get() {
            (ms, tail) if ms == now_ms && tail < u64::MAX => tail + 1,
            _ => rand::rng().random(),
        };
        last.set((now_ms, tail));
        tail
    });
    format!("evt_{now_ms:013x}{tail:016x}")
}

thread_local! {
    /// The millisecond and tail of the last id [`new_event_id`] made on this thread.
    static LAST_EVENT_ID: Cell<(i64, u64)> = const { Cell::new((-1, 0)) };
}

/// Milliseconds since the Unix epoch of a `SystemTime` (0 before the epoch).
pub fn system_time_ms(time: SystemTime) -> i64 {
    time.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Now, in UTC milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    system_time_ms(SystemTime::now())
}

/// Cuts an error message to [`LAST_ERROR_MAX_BYTES`] at a UTF-8 character boundary.
pub fn truncate_error(message: &str) -> String {
    let message = message.trim();
    if message.len() <= LAST_ERROR_MAX_BYTES {
        return message.to_string();
    }
    let mut end = LAST_ERROR_MAX_BYTES;
    while !message.is_char_boundary(end) {
        end -= 1;
    }
    message[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn truncate_error_cuts_at_char_boundary() {
        let long = "é".repeat(400); // 800 bytes
        let cut = truncate_error(&long);
        assert!(cut.len() <= LAST_ERROR_MAX_BYTES);
        assert_eq!(cut.len(), 512);
        let odd = format!("x{}", "é".repeat(400));
        let cut = truncate_error(&odd);
        assert_eq!(cut.len(), 511);
        assert!(cut.chars().all(|c| c == 'x' || c == 'é'));
    }

    #[test]
    fn status_round_trips() {
        for status in Status::ALL {
            assert_eq!(Status::parse(status.as_str()), Some(status));
        }
        assert_eq!(Status::parse("published"), None);
    }

    #[test]
    fn event_ids_sort_by_time() {
        let a = new_event_id(1_000);
        let b = new_event_id(2_000);
        assert!(a < b);
        assert_eq!(a.len(), 4 + 13 + 16);
    }

    #[test]
    fn event_ids_of_one_millisecond_sort_in_the_order_they_were_made() {
        let ids: Vec<String> = (0..1000).map(|_| new_event_id(5_000)).collect();
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
        assert!(ids.iter().all(|id| id.len() == 4 + 13 + 16));
        // Another millisecond starts from a fresh random tail.
        assert!(new_event_id(6_000).starts_with("evt_0000000001770"));
    }
}
