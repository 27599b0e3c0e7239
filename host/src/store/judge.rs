//! The envelope judge: what a read does with one candidate row — hand it out as a decoded
//! [`ClaimedEvent`] or reject it to `failed` with the reason. No SQL; the same for every backend.

use prost::Message;

use super::row::CandidateRow;
use crate::envelope::EventEnvelope;
use crate::publish::Event;
use crate::store::{ClaimedEvent, RejectedRow};
use crate::trace_context::TraceContext;

/// Decides what a read does with one candidate row (`reclaimed`: a `delivering` row whose lease
/// expired, read as an attempt): hand it out (envelope decoded, empty envelope fields filled from
/// the row, `attempt = retry_count + 1`) or reject it to `failed` (envelope empty or not
/// decoding, an identity field — app_code, event_id, event_type, room_id — other than the row's,
/// or a reclaimed lease used the last attempt).
pub fn judge(
    app_code: &str,
    row: CandidateRow,
    reclaimed: bool,
    max_attempts: u32,
) -> Result<ClaimedEvent, RejectedRow> {
    let retry_count = u32::try_from(row.retry_count).unwrap_or(0) + u32::from(reclaimed);
    let reject = |row: CandidateRow, reason: String| RejectedRow {
        event_id: row.event_id,
        event_type: row.event_type,
        room_id: row.room_id,
        reason,
    };
    if reclaimed && retry_count >= max_attempts {
        return Err(reject(
            row,
            format!(
                "lease expired without a result (worker died?); \
                 gave up after {retry_count} of {max_attempts} attempts"
            ),
        ));
    }
    if row.envelope.is_empty() {
        return Err(reject(row, "envelope is empty (0 bytes)".to_string()));
    }
    let mut envelope = match EventEnvelope::decode(row.envelope.as_slice()) {
        Ok(envelope) => envelope,
        Err(err) => return Err(reject(row, format!("envelope does not decode: {err}"))),
    };
    // Every identity field the row also holds must agree: routing, CLI filters and logs all use
    // one value. An envelope field left empty takes the row's value.
    let mismatch = [
        ("app_code", &mut envelope.app_code, app_code),
        ("event_id", &mut envelope.event_id, row.event_id.as_str()),
        (
            "event_type",
            &mut envelope.event_type,
            row.event_type.as_str(),
        ),
        ("room_id", &mut envelope.room_id, row.room_id.as_str()),
    ]
    .into_iter()
    .find_map(|(field, in_envelope, in_row)| {
        if in_envelope.is_empty() {
            *in_envelope = in_row.to_string();
            None
        } else if in_envelope != in_row {
            Some(format!(
                "envelope {field} {in_envelope:?} does not match the row's {field} {in_row:?}"
            ))
        } else {
            None
        }
    });
    if let Some(reason) = mismatch {
        return Err(reject(row, reason));
    }
    let trace = trace_context(&row.event_id, envelope.traceparent, envelope.tracestate);
    Ok(ClaimedEvent {
        event: Event {
            app_code: app_code.to_string(),
            event_id: row.event_id,
            event_type: envelope.event_type,
            room_id: envelope.room_id,
            room_version: envelope.room_version,
            occurred_at_ms: envelope.occurred_at_ms,
            body: envelope.body,
            attempt: retry_count + 1,
            trace,
        },
        retry_count,
        created_at_ms: row.created_at_ms,
    })
}

/// The producer's trace context of event `event_id`: `None` when it wrote none, or an invalid
/// one (logged: the event is delivered all the same, without it).
fn trace_context(event_id: &str, traceparent: String, tracestate: String) -> Option<TraceContext> {
    if traceparent.is_empty() {
        return None;
    }
    TraceContext::new(traceparent, tracestate)
        .inspect_err(|error| {
            tracing::warn!(event_id = %event_id, error = %error,
                "the event's trace context is invalid; delivering it without one");
        })
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn candidate(envelope: Vec<u8>, retry_count: i32) -> CandidateRow {
        CandidateRow {
            event_id: "e1".into(),
            event_type: "RowType".into(),
            room_id: "row-room".into(),
            envelope,
            created_at_ms: 10,
            retry_count,
        }
    }

    #[test]
    fn judge_fills_empty_envelope_fields() {
        let envelope = EventEnvelope {
            room_version: 3,
            occurred_at_ms: 4,
            body: b"x".to_vec(),
            ..Default::default()
        };
        let claimed = judge("live", candidate(envelope.encode_to_vec(), 1), false, 5).unwrap();
        assert_eq!(claimed.retry_count, 1);
        assert_eq!(claimed.created_at_ms, 10);
        assert_eq!(
            claimed.event,
            Event {
                app_code: "live".into(),
                event_id: "e1".into(),
                event_type: "RowType".into(),
                room_id: "row-room".into(),
                room_version: 3,
                occurred_at_ms: 4,
                body: b"x".to_vec(),
                attempt: 2,
                trace: None,
            }
        );
    }

    #[test]
    fn judge_rejects_corrupt_and_foreign_envelopes() {
        let corrupt = judge("live", candidate(vec![0xff, 0xff, 0xff], 0), false, 5).unwrap_err();
        assert!(
            corrupt.reason.starts_with("envelope does not decode"),
            "{}",
            corrupt.reason
        );
        assert_eq!(corrupt.room_id, "row-room");

        let foreign = EventEnvelope {
            app_code: "other".into(),
            ..Default::default()
        };
        let err = judge("live", candidate(foreign.encode_to_vec(), 0), false, 5).unwrap_err();
        assert!(err.reason.contains("app_code \"other\""), "{}", err.reason);

        let other_event = EventEnvelope {
            app_code: "live".into(),
            event_id: "e2".into(),
            ..Default::default()
        };
        let err = judge("live", candidate(other_event.encode_to_vec(), 0), false, 5).unwrap_err();
        assert!(err.reason.contains("event_id \"e2\""), "{}", err.reason);
    }

    #[test]
    fn judge_counts_reclaimed_leases_as_attempts() {
        let ok = EventEnvelope {
            body: b"x".to_vec(),
            ..EventEnvelope::default()
        }
        .encode_to_vec();
        let claimed = judge("live", candidate(ok.clone(), 1), true, 3).unwrap();
        assert_eq!(claimed.retry_count, 2);
        assert_eq!(claimed.event.attempt, 3);
        let dead = judge("live", candidate(ok, 2), true, 3).unwrap_err();
        assert!(dead.reason.contains("lease expired"), "{}", dead.reason);
        assert!(dead.reason.contains("(worker died?)"));
    }
}
