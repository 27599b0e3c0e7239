//! The params and results of the operator's operations on the outbox table: status counts
//! ([`CountsParams`], [`StatusCounts`]), `failed` rows and requeue ([`FailedFilter`],
//! [`ListFailedParams`], [`FailedRow`], [`RequeueParams`]), retention ([`PurgeParams`],
//! [`PurgeStatus`]).

use serde::Serialize;

/// Row counts by status, as `outboxd status --json` prints them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct StatusCounts {
    /// `pending` rows.
    pub pending: u64,
    /// `delivering` rows.
    pub delivering: u64,
    /// `retryable` rows.
    pub retryable: u64,
    /// `failed` rows.
    pub failed: u64,
    /// `delivered` rows.
    pub delivered: u64,
    /// Age of the oldest `pending` row (now − created_at_ms), if any.
    pub oldest_pending_age_ms: Option<i64>,
}

/// Arguments of [`OutboxStore::counts`](super::OutboxStore::counts).
#[derive(Debug, Clone, Default)]
pub struct CountsParams {
    /// Only this tenant; all tenants when `None`.
    pub app_code: Option<String>,
    /// The current time (for the oldest pending age).
    pub now_ms: i64,
}

/// A `failed` row, as `outboxd failed list` shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FailedRow {
    /// Tenant.
    pub app_code: String,
    /// Event id.
    pub event_id: String,
    /// Event type.
    pub event_type: String,
    /// Room.
    pub room_id: String,
    /// Failed attempts.
    pub retry_count: u32,
    /// Why it failed.
    pub last_error: Option<String>,
    /// Creation time, UTC ms.
    pub created_at_ms: i64,
    /// Last change, UTC ms.
    pub updated_at_ms: i64,
}

/// Which `failed` rows [`OutboxStore::list_failed`](super::OutboxStore::list_failed) and [`OutboxStore::requeue`](super::OutboxStore::requeue) act on. Every filter given
/// must match (AND); a filter left empty matches everything.
#[derive(Debug, Clone, Default)]
pub struct FailedFilter {
    /// Only this tenant.
    pub app_code: Option<String>,
    /// Only these event ids (empty: any).
    pub event_ids: Vec<String>,
    /// Only this event type.
    pub event_type: Option<String>,
    /// Only this room.
    pub room_id: Option<String>,
    /// Only rows created at or after this time (UTC ms).
    pub since_ms: Option<i64>,
    /// Only rows created before this time (UTC ms).
    pub until_ms: Option<i64>,
    /// Only rows whose `last_error` is exactly this text (one group of the console's dead
    /// letters). No index holds it: the rows of the other filters are read and this one is
    /// applied on top.
    pub last_error: Option<String>,
}

impl FailedFilter {
    /// True when no filter is set (the filter matches every failed row).
    pub fn is_empty(&self) -> bool {
        self.app_code.is_none()
            && self.event_ids.is_empty()
            && self.event_type.is_none()
            && self.room_id.is_none()
            && self.since_ms.is_none()
            && self.until_ms.is_none()
            && self.last_error.is_none()
    }
}

/// Arguments of [`OutboxStore::list_failed`](super::OutboxStore::list_failed).
#[derive(Debug, Clone, Default)]
pub struct ListFailedParams {
    /// Which rows.
    pub filter: FailedFilter,
    /// Most rows returned (oldest first).
    pub limit: u32,
}

/// Arguments of [`OutboxStore::requeue`](super::OutboxStore::requeue).
#[derive(Debug, Clone, Default)]
pub struct RequeueParams {
    /// Which `failed` rows go back to `pending` (retry_count 0, lease cleared).
    pub filter: FailedFilter,
    /// Count the rows without changing them.
    pub dry_run: bool,
    /// The current time (`updated_at_ms`).
    pub now_ms: i64,
    /// Most rows moved by this call: the oldest matches (`created_at_ms`, `event_id`), in one
    /// short transaction, so a large requeue can run in chunks beside live traffic. `None` moves
    /// every match in one statement. Ignored by a dry run.
    pub limit: Option<u32>,
}

/// The finished statuses retention deletes; live rows (`pending`, `delivering`, `retryable`)
/// are never purged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PurgeStatus {
    /// `delivered` rows.
    Delivered,
    /// `failed` rows (dead letters).
    Failed,
}

impl PurgeStatus {
    /// The status column value.
    pub fn as_str(self) -> &'static str {
        match self {
            PurgeStatus::Delivered => "delivered",
            PurgeStatus::Failed => "failed",
        }
    }
}

/// Arguments of [`OutboxStore::purge`](super::OutboxStore::purge).
#[derive(Debug, Clone)]
pub struct PurgeParams {
    /// Tenant (the purge walks the tenant's `(app_code, status, created_at_ms)` index range).
    pub app_code: String,
    /// Which finished rows.
    pub status: PurgeStatus,
    /// Only rows created **and** last changed before this time (UTC ms).
    pub before_ms: i64,
    /// Most rows deleted by one call (oldest first); ignored by a dry run.
    pub limit: u32,
    /// Count every matching row instead of deleting.
    pub dry_run: bool,
}
