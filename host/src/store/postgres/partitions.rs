//! PostgreSQL's form of the partition statements that differ: which partitions hold live rows,
//! by a skip scan of the partition index (migration 0007).

use crate::store::TableName;
use crate::store::statement::SqlBuilder;

/// A recursive skip scan of `idx_<table>_part` (live rows only): each step finds the smallest
/// partition above the last one (`min()` over an index prefix reads one entry), so the query
/// reads one index entry per partition with live rows, whatever the backlog.
pub(super) fn write_live_partitions(
    b: &mut SqlBuilder,
    table: &TableName,
    app_code: &str,
    partition: &str,
) {
    let live = " AND status IN ('pending', 'retryable', 'delivering')";
    b.push("WITH RECURSIVE parts(p) AS (SELECT min(")
        .push(partition)
        .push(") FROM ")
        .push(table.as_str())
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(live)
        .push(" UNION ALL SELECT (SELECT min(")
        .push(partition)
        .push(") FROM ")
        .push(table.as_str())
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(live)
        .push(" AND ")
        .push(partition)
        .push(" > parts.p) FROM parts WHERE parts.p IS NOT NULL) SELECT p FROM parts WHERE p IS NOT NULL");
}
