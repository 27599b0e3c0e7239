//! Records for tests: valid [`Record`]s with fixed ids and times.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use outboxd::record::now_ms;
use outboxd::store::{CountsParams, OutboxStore, StatusCounts};

use super::Record;

/// A valid record of tenant `app` in `room`, with a fixed `event_id` and `created_at_ms`; event
/// type `T.<room>`, room version = `created_at_ms`, body = the event id.
pub fn record(app: &str, event_id: &str, room: &str, created_at_ms: i64) -> Record {
    let mut r = Record::build(
        room,
        format!("T.{room}"),
        created_at_ms,
        SystemTime::UNIX_EPOCH + Duration::from_millis(created_at_ms.max(0) as u64),
        &event_id.to_string(),
    )
    .with_app_code(app)
    .with_event_id(event_id);
    r.created_at_ms = created_at_ms;
    r
}

/// A record like [`record`] with an explicit event type.
pub fn typed_record(
    app: &str,
    event_id: &str,
    room: &str,
    event_type: &str,
    created_at_ms: i64,
) -> Record {
    let mut r = record(app, event_id, room, created_at_ms);
    r.event_type = event_type.to_string();
    r.envelope.event_type = event_type.to_string();
    r
}

/// The rows of every tenant by status, now.
#[allow(dead_code)] // not every test binary counts rows
pub async fn status_counts(store: &Arc<dyn OutboxStore>) -> StatusCounts {
    store
        .counts(&CountsParams {
            app_code: None,
            now_ms: now_ms(),
        })
        .await
        .expect("counts")
}
