//! Statements over `failed` rows: list them, count them (a dry-run requeue), requeue them; every
//! filter given is ANDed.

use super::rows::Statements;
use super::{Bound, SqlBuilder};
use crate::record::Status;
use crate::store::{FailedFilter, MAX_PARTITIONS, TableName};

/// ` WHERE app_code = ? AND status = 'failed' AND …` for every filter given (the status as the
/// dialect finds it by index); ` WHERE status = 'failed' …` for every tenant.
fn failed_where(b: &mut SqlBuilder, filter: &FailedFilter) {
    match &filter.app_code {
        Some(app_code) => {
            b.push(" WHERE app_code = ")
                .bind(app_code.as_str())
                .status_condition(Status::Failed, 0..MAX_PARTITIONS);
        }
        None => {
            b.push(" WHERE status = ").status(Status::Failed);
        }
    }
    if !filter.event_ids.is_empty() {
        b.push(" AND event_id IN ")
            .bind_set(filter.event_ids.iter().map(String::as_str));
    }
    if let Some(event_type) = &filter.event_type {
        b.push(" AND event_type = ").bind(event_type.as_str());
    }
    if let Some(room_id) = &filter.room_id {
        b.push(" AND room_id = ").bind(room_id.as_str());
    }
    if let Some(since) = filter.since_ms {
        b.push(" AND created_at_ms >= ").bind(since);
    }
    if let Some(until) = filter.until_ms {
        b.push(" AND created_at_ms < ").bind(until);
    }
    if let Some(last_error) = &filter.last_error {
        b.push(" AND last_error = ").bind(last_error.as_str());
    }
}

/// `SELECT columns` of the oldest `limit` `failed` rows matching `filter`.
fn oldest_failed(
    statements: &Statements,
    columns: &str,
    filter: &FailedFilter,
    limit: u32,
) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("SELECT ")
        .push(columns)
        .push(" FROM ")
        .push(statements.table().as_str());
    failed_where(&mut b, filter);
    b.push(" ORDER BY created_at_ms, event_id LIMIT ")
        .bind(i64::from(limit.max(1)));
    b.finish()
}

/// `failed` rows matching `filter`, oldest first.
pub(crate) fn select_failed(statements: &Statements, filter: &FailedFilter, limit: u32) -> Bound {
    oldest_failed(
        statements,
        "app_code, event_id, event_type, room_id, retry_count, last_error, created_at_ms, updated_at_ms",
        filter,
        limit,
    )
}

/// How many `failed` rows match `filter` (a dry-run requeue).
pub(crate) fn count_failed(statements: &Statements, filter: &FailedFilter) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("SELECT COUNT(*) FROM ")
        .push(statements.table().as_str());
    failed_where(&mut b, filter);
    b.finish()
}

/// ` SET status = 'pending', …` of a requeue: the row starts over as if new, keeping `last_error`.
fn requeue_set(b: &mut SqlBuilder, table: &TableName, now_ms: i64) {
    b.push("UPDATE ")
        .push(table.as_str())
        .push(" SET status = ")
        .status(Status::Pending)
        .push(", retry_count = 0, next_retry_at_ms = 0, worker_id = '', lock_until_ms = NULL, updated_at_ms = ")
        .bind(now_ms);
}

/// Moves every `failed` row matching `filter` back to `pending` in one statement.
pub(crate) fn requeue_failed(statements: &Statements, filter: &FailedFilter, now_ms: i64) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    requeue_set(&mut b, statements.table(), now_ms);
    failed_where(&mut b, filter);
    b.finish()
}

/// The keys `(app_code, event_id)` of the oldest `limit` `failed` rows matching `filter`: one
/// chunk of a bounded requeue. With a tenant in the filter this is a range of the status index
/// (MariaDB: of the failed-apart index), read in order.
pub(crate) fn select_requeue_chunk(
    statements: &Statements,
    filter: &FailedFilter,
    limit: u32,
) -> Bound {
    oldest_failed(statements, "app_code, event_id", filter, limit)
}

/// Moves the tenant's `event_ids` back to `pending` by primary key, while still `failed` (a row
/// requeued or purged by someone else in between is left alone).
pub(crate) fn requeue_keys(
    statements: &Statements,
    app_code: &str,
    event_ids: &[String],
    now_ms: i64,
) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    requeue_set(&mut b, statements.table(), now_ms);
    b.push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND event_id IN ")
        .bind_set(event_ids.iter().map(String::as_str))
        .push(" AND status = ")
        .status(Status::Failed);
    b.finish()
}
