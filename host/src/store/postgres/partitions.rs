//! PostgreSQL's form of the partition statements that differ: which partitions hold live rows,
//! by a skip scan of the partition index (migration 0007).

use super::dialect::PostgresDialect;
use crate::store::TableName;
use crate::store::statement::{PartitionSql, SqlBuilder};

/// A recursive skip scan of `idx_<table>_part` (live rows only): each step reads the first index
/// entry above the last partition found (`ORDER BY <partition> LIMIT 1` on the index prefix), so
/// the query reads one index entry per partition with live rows, whatever the backlog. (A
/// `min()` first step was planned as an aggregate over every live row.)
pub(super) fn write_live_partitions(
    b: &mut SqlBuilder,
    table: &TableName,
    app_code: &str,
    partition: &str,
) {
    let first_above = |b: &mut SqlBuilder, above: &str| {
        b.push("SELECT ")
            .push(partition)
            .push(" FROM ")
            .push(table.as_str())
            .push(" WHERE app_code = ")
            .bind(app_code)
            .push(" AND status IN ('pending', 'retryable', 'delivering') AND updated_at_ms IS NOT NULL AND ")
            .push(partition)
            .push(" > ")
            .push(above)
            .push(" ORDER BY ")
            .push(partition)
            .push(" LIMIT 1");
    };
    b.push("WITH RECURSIVE parts(p) AS ((");
    first_above(b, "-1");
    b.push(") UNION ALL SELECT (");
    first_above(b, "parts.p");
    b.push(") FROM parts WHERE parts.p IS NOT NULL) SELECT p FROM parts WHERE p IS NOT NULL");
}

impl PartitionSql for PostgresDialect {
    fn now_ms_expression(&self) -> Option<&'static str> {
        Some("(extract(epoch FROM clock_timestamp()) * 1000)::bigint")
    }

    fn write_live_partitions(&self, b: &mut SqlBuilder, table: &TableName, app_code: &str) -> bool {
        write_live_partitions(b, table, app_code, "(hashtextextended(room_id, 0) & 63)");
        true
    }

    fn partition_of_row(&self) -> Option<&'static str> {
        // The expression of migration 0007's index, written exactly so (the planner matches an
        // expression index by its text): 64 partitions.
        Some("(hashtextextended(room_id, 0) & 63)")
    }

    fn partition_index_predicate(&self) -> &'static str {
        " AND updated_at_ms IS NOT NULL"
    }

    fn fence_lock(&self) -> &'static str {
        " FOR SHARE"
    }
}
