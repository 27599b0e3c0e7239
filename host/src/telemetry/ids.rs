//! Span and trace ids derived from an event and its attempt: the same on every host and in every
//! run, so a retry names its first attempt's span, and the context a sink forwards is known
//! before the attempt's span is recorded. An attempt whose outcome no row kept (its mark found
//! the partition taken over) gets random ids instead: the attempt that counts records the
//! derived ones.

use opentelemetry::trace::{SpanId, TraceId};
use sha2::{Digest, Sha256};

/// The ids of attempt `attempt` of event `event_id` of tenant `app_code`: the trace id it
/// starts when it is a root (a retry, or an event the producer did not trace), and its span id.
/// Never zero (zero ids are invalid).
pub(super) fn attempt_ids(app_code: &str, event_id: &str, attempt: u32) -> (TraceId, SpanId) {
    let mut hash = Sha256::new();
    hash.update(b"outboxd delivery\0");
    hash.update(app_code.as_bytes());
    hash.update([0]);
    hash.update(event_id.as_bytes());
    hash.update([0]);
    hash.update(attempt.to_be_bytes());
    let digest = hash.finalize();
    let mut trace = [0u8; 16];
    trace.copy_from_slice(&digest[..16]);
    let mut span = [0u8; 8];
    span.copy_from_slice(&digest[16..24]);
    (
        TraceId::from_bytes(nonzero(trace)),
        SpanId::from_bytes(nonzero(span)),
    )
}

/// A random trace id (batch spans, stale attempts).
pub(super) fn random_trace_id() -> TraceId {
    TraceId::from_bytes(nonzero(rand::random()))
}

/// A random span id.
pub(super) fn random_span_id() -> SpanId {
    SpanId::from_bytes(nonzero(rand::random()))
}

/// `bytes`, with the last byte 1 when all were zero.
fn nonzero<const N: usize>(mut bytes: [u8; N]) -> [u8; N] {
    if bytes.iter().all(|b| *b == 0) {
        bytes[N - 1] = 1;
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_stable_per_attempt_and_differ_between_attempts_and_events() {
        let first = attempt_ids("live", "e-1", 1);
        assert_eq!(first, attempt_ids("live", "e-1", 1));
        assert_ne!(first.1, attempt_ids("live", "e-1", 2).1);
        assert_ne!(first.0, attempt_ids("live", "e-1", 2).0);
        assert_ne!(first.1, attempt_ids("live", "e-2", 1).1);
        assert_ne!(first.1, attempt_ids("ktv", "e-1", 1).1);
        // The separator keeps ("a", "b1") and ("ab", "1") apart.
        assert_ne!(attempt_ids("a", "b1", 1), attempt_ids("ab", "1", 1));
        assert_ne!(first.0, TraceId::INVALID);
        assert_ne!(first.1, SpanId::INVALID);
        assert_eq!(nonzero([0u8; 8]), [0, 0, 0, 0, 0, 0, 0, 1]);
    }
}
