//! [`Statements`], what one store's statements are built for; the columns a read returns, the
//! UPDATE failing the rows a read rejected, and the status counts.
//!
//! Every statement that changes a row's status keeps one rule, so that MySQL's / MariaDB's
//! indexes that do not hold the status are rewritten only when a row enters or leaves their
//! state: `next_retry_at_ms` is 0 outside `retryable` (above 0 in it), `lock_until_ms` NULL
//! outside `delivering`. Rejections here, marks (`statement/mark.rs`) and requeues
//! (`statement/failed.rs`) write both accordingly.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use super::fence::{live_rows, owned_partition};
use super::{Bound, SqlBuilder};

use crate::record::Status;
use crate::store::{Backend, DEFAULT_PARTITIONS, PartitionFence, RejectedRow, TableName};

/// What one store's statements are built for: its backend, its table and the table's partition
/// count. Every builder but the producer insert and the partition read takes it.
#[derive(Debug, Clone)]
pub struct Statements {
    backend: Backend,
    table: TableName,
    /// The table's partitions per tenant as the catalog had them when last read (`migrate`, a
    /// heartbeat); 0 until then. Shared by the store's clones.
    partitions: Arc<AtomicU32>,
}

impl Statements {
    /// The statements of `table` in `backend`.
    pub fn new(backend: Backend, table: &TableName) -> Statements {
        Statements {
            backend,
            table: table.clone(),
            partitions: Arc::new(AtomicU32::new(u32::from(
                backend.dialect().partition_count_query(table).is_none(),
            ))),
        }
    }

    /// The table's partitions per tenant, as the statements name them: the catalog's count as
    /// last read (by `migrate` or a heartbeat), else [`DEFAULT_PARTITIONS`]; SQLite: 1.
    pub fn partitions(&self) -> u32 {
        self.known_partitions().unwrap_or(DEFAULT_PARTITIONS)
    }

    /// The partition count last read from the catalog; `None` before the first read.
    pub(crate) fn known_partitions(&self) -> Option<u32> {
        match self.partitions.load(Ordering::Relaxed) {
            0 => None,
            known => Some(known),
        }
    }

    /// Records the partition count read from the catalog.
    pub(crate) fn set_partitions(&self, partitions: u32) {
        self.partitions.store(partitions, Ordering::Relaxed);
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The outbox table.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// `status, COUNT(*), MIN(created_at_ms)` per status, for every tenant or one: one `GROUP BY
    /// status` over the table, or where the dialect splits it ([`super::SqlDialect::counts_groups`])
    /// one per group of statuses, joined by `UNION ALL`.
    pub(crate) fn counts_query(&self, app_code: Option<&str>) -> Bound {
        let mut b = SqlBuilder::new(self.backend);
        let groups = b.dialect().counts_groups();
        let whole: &[&[Status]] = &[&[]];
        for (i, group) in (if groups.is_empty() { whole } else { groups })
            .iter()
            .enumerate()
        {
            if i > 0 {
                b.push(" UNION ALL ");
            }
            b.push("SELECT status, COUNT(*), MIN(created_at_ms) FROM ")
                .push(self.table.as_str());
            let mut and = " WHERE ";
            if let Some(app_code) = app_code {
                b.push(and).push("app_code = ").bind(app_code);
                and = " AND ";
            }
            if let Some((first, rest)) = group.split_first() {
                b.push(and).push("status IN (").status(*first);
                for status in rest {
                    b.push(", ").status(*status);
                }
                b.push(")");
                if first.is_live() {
                    b.push(b.dialect().partition_index_predicate());
                }
            }
            b.push(" GROUP BY status");
        }
        b.finish()
    }
}

/// `UPDATE <table> SET ` reached by primary key (MariaDB's `FORCE INDEX (PRIMARY)`), as every mark
/// and rejection is.
pub(crate) fn update_by_key(statements: &Statements) -> SqlBuilder {
    let mut b = SqlBuilder::new(statements.backend());
    let by_key = b.dialect().primary_key_access();
    b.push("UPDATE ")
        .push(statements.table().as_str())
        .push(by_key)
        .push(" SET ");
    b
}

/// Expression that adds the attempt of an expired lease (a row an earlier version's host left
/// `delivering`): rows still `delivering` when the UPDATE changes them. It must be the first
/// assignment of its UPDATE: MySQL evaluates SET left to right, with `status` already changed by
/// later assignments.
pub(crate) fn retry_count_after_reclaim(b: &mut SqlBuilder) {
    b.push("retry_count = CASE WHEN status = ")
        .status(Status::Delivering)
        .push(" THEN retry_count + 1 ELSE retry_count END");
}

/// The columns a read returns (of alias `c`).
pub(crate) const READ_COLUMNS: &str =
    "c.event_id, c.event_type, c.room_id, c.envelope, c.created_at_ms, c.retry_count";

/// Moves rows a read of one partition rejected to `failed` with their reason (one UPDATE by
/// primary key; at most [`super::MAX_ROWS_PER_STATEMENT`] rows), fenced as a mark is: only while
/// `host_id` still owns the partition at the fence's epoch (else it changes nothing: the new
/// owner rejects them), and only rows still live.
pub(crate) fn reject_rows(
    statements: &Statements,
    app_code: &str,
    fence: (&str, &PartitionFence),
    now_ms: i64,
    rejected: &[RejectedRow],
) -> Bound {
    let mut b = update_by_key(statements);
    retry_count_after_reclaim(&mut b);
    b.push(", status = ")
        .status(Status::Failed)
        .push(", next_retry_at_ms = 0, lock_until_ms = NULL, last_error = CASE event_id");
    for row in rejected {
        b.push(" WHEN ")
            .bind(row.event_id.as_str())
            .push(" THEN ")
            .bind_last_error(&row.reason);
    }
    b.push(" ELSE last_error END, updated_at_ms = ")
        .bind(now_ms)
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND event_id IN ")
        .bind_set(rejected.iter().map(|r| r.event_id.as_str()));
    let (host_id, fence) = fence;
    live_rows(&mut b);
    owned_partition(&mut b, statements.table(), app_code, host_id, fence);
    b.finish()
}
