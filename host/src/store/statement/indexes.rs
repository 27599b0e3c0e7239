//! The secondary indexes outboxd needs on every outbox table besides the partition index, whoever
//! created the table: `migrate` creates one where no index has its key columns. Which they are
//! is the dialect's ([`super::SqlDialect::required_indexes`]).

use crate::store::TableName;

/// One index outboxd needs on every outbox table.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RequiredIndex {
    /// The name is `idx_<table>_<suffix>`.
    pub(crate) suffix: &'static str,
    /// Key columns, in order.
    pub(crate) columns: &'static [&'static str],
    /// The rows it holds, where not all (a partial index's `WHERE`).
    pub(crate) predicate: Option<&'static str>,
}

impl RequiredIndex {
    /// The index name for `table` (at most 60 bytes: table names have at most 48).
    pub(crate) fn name(&self, table: &TableName) -> String {
        format!("idx_{}_{}", table.as_str(), self.suffix)
    }
}

/// The status index of migration 0001 (named `pending` for its first use): a tenant's rows of
/// one status in write order. Counts, retention, the failed listings, requeue and the console
/// read it (SQLite).
pub(crate) static STATUS_INDEX: [RequiredIndex; 1] = [RequiredIndex {
    suffix: "pending",
    columns: &["app_code", "status", "created_at_ms", "event_id"],
    predicate: None,
}];

/// PostgreSQL's index in place of the status index (migration 0010): the finished rows only
/// (`delivered` and `failed`), by tenant, status and write order, for retention, the failed
/// listings and the console. The live rows are in the partition index, so a producer's insert
/// and a mark to `retryable` add no entry here.
pub(crate) static HISTORY_INDEX: [RequiredIndex; 1] = [RequiredIndex {
    suffix: "history",
    columns: &["app_code", "status", "created_at_ms", "event_id"],
    predicate: Some("status IN ('delivered', 'failed')"),
}];

/// MariaDB's index in place of the status index (migration 0007): a tenant's failed rows apart
/// from the rest (`outbox_failed`, the virtual column `status = 'failed'`), each in write order.
/// A mark that delivers a row leaves its entry alone.
pub(crate) static FAILED_APART_INDEX: [RequiredIndex; 1] = [RequiredIndex {
    suffix: "failed",
    columns: &["app_code", "outbox_failed", "created_at_ms", "event_id"],
    predicate: None,
}];
