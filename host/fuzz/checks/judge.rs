//! The row judge of a claim (`outboxd::store::internals::judge`): any row is handed out
//! or rejected alone, never a panic, and the two answers are consistent.
//!
//! Input layout (so seeds can be written by hand, `seeds/judge/`):
//! - byte 0: the claim branch (`% 3`: pending, retryable, expired lease);
//! - byte 1: bits 0–3 copy the decoded envelope's `app_code`, `event_id`, `event_type`,
//!   `room_id` into the row (so matching rows are common); a clear bit leaves the row's fixed
//!   value (`live`, `e1`, `RoomGiftSent`, `room-1`);
//! - bytes 2–5 `max_attempts` (u32 LE), 6–9 `retry_count` (i32 LE), 10–17 `created_at_ms`
//!   (i64 LE); missing bytes are zero;
//! - the rest: the `envelope` column.

use outboxd::envelope::EventEnvelope;
use outboxd::store::internals::{CandidateRow, judge};
use prost::Message;

const HEADER: usize = 18;

/// Checks one input: panics when it breaks the property this module describes.
pub fn check(data: &[u8]) {
    let mut header = [0u8; HEADER];
    let split = data.len().min(HEADER);
    header[..split].copy_from_slice(&data[..split]);
    let envelope = data[split..].to_vec();
    let reclaimed = header[0] % 3 == 2;
    let mirror = header[1];
    let max_attempts = u32::from_le_bytes(header[2..6].try_into().unwrap());
    let retry_count = i32::from_le_bytes(header[6..10].try_into().unwrap());
    let created_at_ms = i64::from_le_bytes(header[10..18].try_into().unwrap());

    let decoded = EventEnvelope::decode(envelope.as_slice()).ok();
    let pick = |bit: u8, fixed: &str, of: fn(&EventEnvelope) -> &String| match &decoded {
        Some(env) if mirror & (1 << bit) != 0 => of(env).clone(),
        _ => fixed.to_string(),
    };
    let app_code = pick(0, "live", |e| &e.app_code);
    let row = CandidateRow {
        event_id: pick(1, "e1", |e| &e.event_id),
        event_type: pick(2, "RoomGiftSent", |e| &e.event_type),
        room_id: pick(3, "room-1", |e| &e.room_id),
        envelope,
        created_at_ms,
        retry_count,
    };

    let retries = u32::try_from(retry_count).unwrap_or(0) + u32::from(reclaimed);
    match judge(&app_code, row.clone(), reclaimed, max_attempts) {
        Ok(claimed) => {
            // Accepted: the envelope decodes, its identity fields are the row's (or empty) and the
            // event carries the row's identity, the envelope's payload and the attempt count.
            assert!(
                !(reclaimed && retries >= max_attempts),
                "a used-up lease was handed out"
            );
            let env = decoded.expect("an accepted row's envelope decodes");
            let event = &claimed.event;
            for (in_env, in_row, in_event) in [
                (&env.app_code, &app_code, &event.app_code),
                (&env.event_id, &row.event_id, &event.event_id),
                (&env.event_type, &row.event_type, &event.event_type),
                (&env.room_id, &row.room_id, &event.room_id),
            ] {
                assert!(
                    in_env.is_empty() || in_env == in_row,
                    "{in_env:?} vs {in_row:?}"
                );
                assert_eq!(in_event, in_row);
            }
            assert_eq!(event.room_version, env.room_version);
            assert_eq!(event.occurred_at_ms, env.occurred_at_ms);
            assert_eq!(event.body, env.body);
            assert_eq!(claimed.retry_count, retries);
            assert_eq!(event.attempt, retries + 1);
            assert_eq!(claimed.created_at_ms, created_at_ms);
            // The event re-encoded as a full envelope decodes to the same identity fields and is
            // judged to the same event.
            let full = EventEnvelope {
                app_code: event.app_code.clone(),
                event_id: event.event_id.clone(),
                room_id: event.room_id.clone(),
                event_type: event.event_type.clone(),
                room_version: event.room_version,
                occurred_at_ms: event.occurred_at_ms,
                body: event.body.clone(),
                ..EventEnvelope::default()
            };
            let bytes = full.encode_to_vec();
            assert_eq!(EventEnvelope::decode(bytes.as_slice()).unwrap(), full);
            if !bytes.is_empty() {
                let row = CandidateRow {
                    envelope: bytes,
                    ..row
                };
                let again = judge(&app_code, row, reclaimed, max_attempts)
                    .expect("the re-encoded envelope is accepted");
                assert_eq!(again, claimed);
            }
        }
        Err(rejected) => {
            // Rejected alone, naming the row and a reason that fits it.
            assert_eq!(rejected.event_id, row.event_id);
            assert_eq!(rejected.event_type, row.event_type);
            assert_eq!(rejected.room_id, row.room_id);
            let reason = &rejected.reason;
            if reclaimed && retries >= max_attempts {
                assert!(reason.starts_with("lease expired"), "{reason}");
            } else if row.envelope.is_empty() {
                assert!(reason.starts_with("envelope is empty"), "{reason}");
            } else if decoded.is_none() {
                assert!(reason.starts_with("envelope does not decode"), "{reason}");
            } else {
                assert!(reason.contains("does not match the row's"), "{reason}");
            }
        }
    }
}
