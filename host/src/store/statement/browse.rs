//! The console's statements: one status's rows newest first (a range of the partition index or
//! of the index of finished rows, per partition where that reads less), one row by primary key, `failed` rows grouped by error over the
//! newest ones, and deleting dead letters by primary key. Each reads one index range and stops
//! at its `LIMIT`; the filters no index holds are applied by the caller on the rows returned.

use std::ops::Range;

use super::rows::Statements;
use super::{Bound, SqlBuilder, StatusWindows};
use crate::record::Status;
use crate::store::{Backend, DEFAULT_PARTITIONS, EventCursor, MAX_PARTITIONS, TableName};

/// Every column but the envelope, in [`crate::store::EventSummary`]'s order.
pub(crate) const SUMMARY_COLUMNS: &str = "app_code, event_id, event_type, room_id, status, retry_count, last_error, created_at_ms, updated_at_ms, next_retry_at_ms, worker_id, lock_until_ms";

/// The index range one window reads.
#[derive(Debug, Clone, Default)]
pub(crate) struct WindowRange<'a> {
    /// Tenant.
    pub(crate) app_code: &'a str,
    /// One status.
    pub(crate) status: Option<Status>,
    /// `created_at_ms >= since`.
    pub(crate) since_ms: Option<i64>,
    /// `created_at_ms < until`.
    pub(crate) until_ms: Option<i64>,
    /// Strictly older than this position.
    pub(crate) before: Option<&'a EventCursor>,
    /// The table's partition count where known (else the lookup by status covers
    /// [`MAX_PARTITIONS`]).
    pub(crate) partitions: Option<u32>,
}

/// The newest `limit` rows of one status in `range`, newest first. Where the table's partition
/// count is known and the dialect reads that status from the partition index
/// ([`super::SqlDialect::status_windows`]): the newest `limit` of each partition, joined
/// `LATERAL` ([`select_window_lateral`]) or by `UNION ALL`, then the newest `limit` of those.
/// Otherwise one statement, or where the dialect splits the lookup by partition
/// ([`super::SqlDialect::status_partition_chunks`]) the newest `limit` of each chunk joined by
/// `UNION ALL`, then the newest `limit` of those.
pub(crate) fn select_window(statements: &Statements, range: &WindowRange<'_>, limit: u32) -> Bound {
    let (mut b, table) = (SqlBuilder::new(statements.backend()), statements.table());
    let (dialect, limit) = (b.dialect(), i64::from(limit.max(1)));
    let by_partition = match (range.status, range.partitions) {
        (Some(status), Some(count)) => dialect
            .partition_of_row(count)
            .map(|partition| (dialect.status_windows(status), count, partition)),
        _ => None,
    };
    match by_partition {
        Some((StatusWindows::LateralPerPartition, count, partition)) => {
            select_window_lateral(&mut b, table, range, (count, &partition), limit);
        }
        Some((StatusWindows::UnionPerPartition, count, partition)) => {
            b.union_of_chunks(
                (0..count.max(1)).map(|p| p..p + 1).collect(),
                |b, chunk| {
                    let one = format!("{partition} = {}", chunk.start);
                    write_window(b, table, range, chunk, Some(&one), limit);
                },
                |b| newest_first(b, limit),
            );
        }
        Some((StatusWindows::OverTheStatus, ..)) | None => {
            let partitions = range.partitions.unwrap_or(MAX_PARTITIONS);
            let chunks = match range.status {
                Some(status) => dialect.status_partition_chunks(status, partitions),
                None => std::iter::once(0..partitions).collect(),
            };
            b.union_of_chunks(
                chunks,
                |b, chunk| write_window(b, table, range, chunk, None, limit),
                |b| newest_first(b, limit),
            );
        }
    }
    b.finish()
}

/// `SELECT … FROM generate_series(0, count - 1) AS parts(p) CROSS JOIN LATERAL (<the window of
/// partition parts.p>) w ORDER BY … LIMIT limit`: each partition's newest `limit` rows, a
/// backwards range of the partition index (tenant, partition, status, write order) that stops at
/// its `LIMIT`, then the newest `limit` of those. A page reads at most `count × limit` entries
/// however long the backlog, where one statement over the status sorts all its live rows.
fn select_window_lateral(
    b: &mut SqlBuilder,
    table: &TableName,
    range: &WindowRange<'_>,
    (count, partition): (u32, &str),
    limit: i64,
) {
    b.push("SELECT ")
        .push(SUMMARY_COLUMNS)
        .push(" FROM generate_series(0, ")
        .push(&(count.max(1) - 1).to_string())
        .push(") AS parts(p) CROSS JOIN LATERAL (");
    let one = format!("{partition} = parts.p");
    write_window(b, table, range, 0..count, Some(&one), limit);
    b.push(") w");
    newest_first(b, limit);
}

/// One statement of [`select_window`], over the partition numbers `partitions` (a range of the
/// index the dialect's status condition names); with `one_partition` (`<partition of the row> =
/// <number>`), of that one partition: a range of the partition index (its hint, the partition,
/// the status, the index's predicate).
fn write_window(
    b: &mut SqlBuilder,
    table: &TableName,
    range: &WindowRange<'_>,
    partitions: Range<u32>,
    one_partition: Option<&str>,
    limit: i64,
) {
    b.push("SELECT ")
        .push(SUMMARY_COLUMNS)
        .push(" FROM ")
        .push(table.as_str());
    if one_partition.is_some() {
        b.push(&b.dialect().partition_index_hint(table));
    }
    b.push(" WHERE app_code = ").bind(range.app_code);
    match (one_partition, range.status) {
        (Some(partition), Some(status)) => {
            let predicate = b.dialect().partition_index_predicate();
            b.push(" AND ")
                .push(partition)
                .push(" AND status = ")
                .status(status)
                .push(predicate);
        }
        (_, Some(status)) => {
            b.status_condition(status, partitions);
        }
        (_, None) => {}
    }
    if let Some(since) = range.since_ms {
        b.push(" AND created_at_ms >= ").bind(since);
    }
    if let Some(until) = range.until_ms {
        b.push(" AND created_at_ms < ").bind(until);
    }
    if let Some(before) = range.before {
        b.dialect().write_before_bound(b, before);
    }
    newest_first(b, limit);
}

/// ` ORDER BY created_at_ms DESC, event_id DESC LIMIT <limit>`: a window's order, and that of the
/// windows joined around it.
fn newest_first(b: &mut SqlBuilder, limit: i64) {
    b.push(" ORDER BY created_at_ms DESC, event_id DESC LIMIT ")
        .bind(limit);
}

/// The default form of [`super::SqlDialect::write_before_bound`]: one row comparison
/// `(created_at_ms, event_id) < (?, ?)`, which PostgreSQL and SQLite seek on the index key.
pub(crate) fn write_row_comparison_before(b: &mut SqlBuilder, before: &EventCursor) {
    b.push(" AND (created_at_ms, event_id) < (")
        .bind(before.created_at_ms)
        .push(", ")
        .bind(before.event_id.as_str())
        .push(")");
}

/// One row with its envelope, by primary key.
pub(crate) fn select_event(statements: &Statements, app_code: &str, event_id: &str) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("SELECT ")
        .push(SUMMARY_COLUMNS)
        .push(", envelope FROM ")
        .push(statements.table().as_str())
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND event_id = ")
        .bind(event_id);
    b.finish()
}

/// The newest `window` `failed` rows of a tenant (a range of the index of finished or failed
/// rows, read backwards), grouped by `last_error`: the error, the count, the first and last
/// `updated_at_ms`.
pub(crate) fn select_error_groups(statements: &Statements, app_code: &str, window: u32) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("SELECT last_error, COUNT(*), MIN(updated_at_ms), MAX(updated_at_ms) FROM (SELECT last_error, updated_at_ms FROM ")
        .push(statements.table().as_str())
        .push(" WHERE app_code = ")
        .bind(app_code)
        .status_condition(Status::Failed, 0..MAX_PARTITIONS)
        .push(" ORDER BY created_at_ms DESC, event_id DESC LIMIT ")
        .bind(i64::from(window.max(1)))
        .push(") newest GROUP BY last_error");
    b.finish()
}

/// Deletes the tenant's `event_ids` by primary key, while still `failed` (a row requeued by
/// someone else in between is left alone).
pub(crate) fn delete_failed_keys(
    statements: &Statements,
    app_code: &str,
    event_ids: &[String],
) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("DELETE FROM ")
        .push(statements.table().as_str())
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND event_id IN ")
        .bind_set(event_ids.iter().map(String::as_str))
        .push(" AND status = ")
        .status(Status::Failed);
    b.finish()
}

/// The console's statement texts as the store runs them, for EXPLAIN in benchmarks and tests:
/// `(name, statement)` with example values bound — the `delivered` window, the same below a
/// position, in a time range, the window of each other status, the row by id, the error groups.
pub fn explain_statements(
    backend: Backend,
    table: &TableName,
    app_code: &str,
) -> Vec<(&'static str, Bound)> {
    let statements = Statements::new(backend, table);
    let cursor = EventCursor {
        created_at_ms: i64::MAX / 2,
        event_id: "evt_~".into(),
    };
    // As a host runs them: the table's partition count known (the default).
    let status = |status| WindowRange {
        app_code,
        status: Some(status),
        partitions: Some(DEFAULT_PARTITIONS),
        ..WindowRange::default()
    };
    let below = |at| WindowRange {
        before: Some(&cursor),
        ..status(at)
    };
    let time_range = WindowRange {
        since_ms: Some(0),
        until_ms: Some(i64::MAX / 2),
        ..status(Status::Delivered)
    };
    let windows = [
        (
            "window of one status (newest first)",
            status(Status::Delivered),
        ),
        (
            "window below a position (next page)",
            below(Status::Delivered),
        ),
        ("window in a time range", time_range),
        ("window of failed rows", status(Status::Failed)),
        ("window of pending rows", status(Status::Pending)),
        (
            "window of pending rows below a position",
            below(Status::Pending),
        ),
        ("window of retryable rows", status(Status::Retryable)),
        ("window of delivering rows", status(Status::Delivering)),
    ];
    let by_id = select_event(&statements, app_code, "evt_x");
    let groups = select_error_groups(&statements, app_code, 10_000);
    windows
        .iter()
        .map(|(name, range)| (*name, select_window(&statements, range, 50)))
        .chain([
            ("one event by id", by_id),
            ("failed rows grouped by error", groups),
        ])
        .collect()
}
