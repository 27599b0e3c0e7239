//! The params and results of the console's reads and dead-letter deletes. Every search reads a
//! range of an index the table already has, newest first, and never more rows than it says; the
//! filters no index holds (a room, an event type glob, error text) are applied on top of a window
//! of at most [`EventQuery::scan_limit`] rows, and the page says where that window ended, so the
//! next page goes on from there.

use serde::Serialize;

use super::FailedFilter;
use crate::record::Status;

/// A position in the newest-first order of one tenant's rows: `(created_at_ms, event_id)`. A page
/// after it holds only rows strictly older (smaller) than it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventCursor {
    /// `created_at_ms` of the position.
    pub created_at_ms: i64,
    /// `event_id` of the position (ties of `created_at_ms` are ordered by it).
    pub event_id: String,
}

/// What [`OutboxStore::search_events`](super::OutboxStore::search_events) looks for. Every filter
/// given must match (AND).
#[derive(Debug, Clone, Default)]
pub struct EventQuery {
    /// The tenant (every read is within one tenant's index ranges).
    pub app_code: String,
    /// Only these statuses; empty: all five.
    pub statuses: Vec<Status>,
    /// Only this event id (a primary-key lookup; the other filters still apply).
    pub event_id: Option<String>,
    /// Only this room, applied on top.
    pub room_id: Option<String>,
    /// Only event types matching this glob (`*` any run, `?` one character, as `[[route]]`),
    /// applied on top.
    pub event_type: Option<String>,
    /// Only rows whose `last_error` contains this text (case-insensitive), applied on top.
    pub error_contains: Option<String>,
    /// Only rows whose `last_error` is exactly this text (one group of dead letters), applied on
    /// top.
    pub last_error: Option<String>,
    /// Only rows created at or after this time (UTC ms): part of the index range.
    pub since_ms: Option<i64>,
    /// Only rows created before this time (UTC ms): part of the index range.
    pub until_ms: Option<i64>,
    /// Only rows older than this position (the previous page's [`EventPage::next`]).
    pub before: Option<EventCursor>,
    /// Most rows returned.
    pub limit: u32,
    /// Most rows read per status when a filter is applied on top (the window).
    pub scan_limit: u32,
}

impl EventQuery {
    /// Whether some filter is applied on top of the window instead of by an index.
    pub fn filters_on_top(&self) -> bool {
        self.event_type.is_some()
            || self.error_contains.is_some()
            || self.last_error.is_some()
            || self.room_id.is_some()
    }

    /// Whether `row` passes the filters applied on top (and the status, room, time and position
    /// filters, which the index ranges already applied: checked again for the id lookup).
    pub fn matches(&self, row: &EventSummary) -> bool {
        let status_ok =
            self.statuses.is_empty() || self.statuses.iter().any(|s| s.as_str() == row.status);
        let room_ok = self
            .room_id
            .as_ref()
            .is_none_or(|room| *room == row.room_id);
        let type_ok = self
            .event_type
            .as_ref()
            .is_none_or(|glob| crate::glob::glob_match(glob, &row.event_type));
        let error_ok = self.error_contains.as_ref().is_none_or(|text| {
            row.last_error
                .as_ref()
                .is_some_and(|e| e.to_lowercase().contains(&text.to_lowercase()))
        });
        let exact_ok = self
            .last_error
            .as_ref()
            .is_none_or(|text| row.last_error.as_deref() == Some(text.as_str()));
        let since_ok = self.since_ms.is_none_or(|since| row.created_at_ms >= since);
        let until_ok = self.until_ms.is_none_or(|until| row.created_at_ms < until);
        let before_ok = self.before.as_ref().is_none_or(|c| {
            (row.created_at_ms, row.event_id.as_str()) < (c.created_at_ms, c.event_id.as_str())
        });
        status_ok && room_ok && type_ok && error_ok && exact_ok && since_ok && until_ok && before_ok
    }
}

/// One row as the console lists it: every column but the envelope.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventSummary {
    /// Tenant.
    pub app_code: String,
    /// Event id.
    pub event_id: String,
    /// Event type.
    pub event_type: String,
    /// Room.
    pub room_id: String,
    /// Status column value.
    pub status: String,
    /// Failed attempts so far.
    pub retry_count: u32,
    /// Why the last attempt failed.
    pub last_error: Option<String>,
    /// Creation time, UTC ms.
    pub created_at_ms: i64,
    /// Last change, UTC ms.
    pub updated_at_ms: i64,
    /// When a `retryable` row is due again, UTC ms (0 for others).
    pub next_retry_at_ms: i64,
    /// The host whose last attempt did not deliver it (`""` for a row never tried, and once
    /// delivered).
    pub worker_id: String,
    /// End of the lease while `delivering` (a host of the earlier, leased design).
    pub lock_until_ms: Option<i64>,
}

impl EventSummary {
    /// The row's position in the newest-first order.
    pub fn cursor(&self) -> EventCursor {
        EventCursor {
            created_at_ms: self.created_at_ms,
            event_id: self.event_id.clone(),
        }
    }
}

/// One page of [`OutboxStore::search_events`](super::OutboxStore::search_events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct EventPage {
    /// Matching rows, newest first.
    pub events: Vec<EventSummary>,
    /// Where the next page starts; `None`: nothing older matches.
    pub next: Option<EventCursor>,
    /// Rows read from the database for this page.
    pub scanned: u64,
    /// Some filter was applied on top of a window of rows: a short page may be followed by more
    /// matches further back ([`EventPage::next`] says where the window ended).
    pub filtered_on_top: bool,
}

/// One row with its envelope ([`OutboxStore::event`](super::OutboxStore::event)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventDetail {
    /// The columns.
    pub summary: EventSummary,
    /// The envelope column as stored.
    pub envelope: Vec<u8>,
}

/// Arguments of [`OutboxStore::error_groups`](super::OutboxStore::error_groups).
#[derive(Debug, Clone)]
pub struct ErrorGroupsParams {
    /// The tenant.
    pub app_code: String,
    /// Most `failed` rows read, newest first (the groups are of these).
    pub window: u32,
}

/// `failed` rows sharing one `last_error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ErrorGroup {
    /// The error text (`None`: rows without one).
    pub last_error: Option<String>,
    /// Rows in the group.
    pub count: u64,
    /// The earliest `updated_at_ms` (when the first of them failed).
    pub first_seen_ms: i64,
    /// The latest `updated_at_ms`.
    pub last_seen_ms: i64,
}

/// Arguments of [`OutboxStore::delete_failed`](super::OutboxStore::delete_failed).
#[derive(Debug, Clone, Default)]
pub struct DeleteFailedParams {
    /// Which `failed` rows.
    pub filter: FailedFilter,
    /// Count the rows without deleting them.
    pub dry_run: bool,
    /// Most rows deleted by this call (the oldest matches), in one short transaction.
    pub limit: u32,
}
