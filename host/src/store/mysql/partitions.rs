//! MySQL's / MariaDB's form of the partition statements that differ: which partitions hold live
//! rows, by loose index scans of the partition index (migration 0004).

use crate::record::Status;
use crate::store::TableName;
use crate::store::statement::SqlBuilder;

/// One loose index scan per live status (`GROUP BY outbox_partition` over `idx_<table>_part`,
/// whose next key part is the status, compared with a constant): InnoDB reads one entry per
/// partition and status, never the backlog or the history the index also holds.
pub(super) fn write_live_partitions(b: &mut SqlBuilder, table: &TableName, app_code: &str) {
    for (i, status) in [Status::Pending, Status::Retryable, Status::Delivering]
        .into_iter()
        .enumerate()
    {
        if i > 0 {
            b.push(" UNION ");
        }
        b.push("SELECT CAST(outbox_partition AS SIGNED) FROM ")
            .push(table.as_str())
            .push(&format!(" FORCE INDEX (idx_{}_part)", table.as_str()))
            .push(" WHERE app_code = ")
            .bind(app_code)
            .push(" AND status = ")
            .status(status)
            .push(" GROUP BY outbox_partition");
    }
}
