//! MySQL's / MariaDB's form of the partition statements that differ: which partitions hold live
//! rows, by three index dives per partition (migration 0004's index).

use super::dialect::MySqlDialect;
use crate::record::Status;
use crate::store::TableName;
use crate::store::statement::{PartitionSql, SqlBuilder};

/// For each partition row of the tenant, `LIMIT 1` probes of `idx_<table>_part` at (tenant,
/// partition, status) for each live status: a few index entries per partition, never the backlog
/// or the `delivered` history the index also holds. (Neither a `GROUP BY` loose scan nor an
/// `EXISTS` is planned that way: both read every entry of the tenant.)
pub(super) fn write_live_partitions(b: &mut SqlBuilder, table: &TableName, app_code: &str) {
    b.push("SELECT CAST(p.partition_id AS SIGNED) FROM ")
        .push(&table.partitions_table())
        .push(" p WHERE p.app_code = ")
        .bind(app_code)
        .push(" AND COALESCE(");
    for (i, status) in [Status::Pending, Status::Retryable, Status::Delivering]
        .into_iter()
        .enumerate()
    {
        if i > 0 {
            b.push(", ");
        }
        b.push("(SELECT 1 FROM ")
            .push(table.as_str())
            .push(&format!(" c FORCE INDEX (idx_{}_part)", table.as_str()))
            .push(" WHERE c.app_code = ")
            .bind(app_code)
            .push(" AND c.outbox_partition = p.partition_id AND c.status = ")
            .status(status)
            .push(" LIMIT 1)");
    }
    b.push(") IS NOT NULL ORDER BY p.partition_id");
}

impl PartitionSql for MySqlDialect {
    fn now_ms_expression(&self) -> Option<&'static str> {
        Some("CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)")
    }

    fn write_live_partitions(&self, b: &mut SqlBuilder, table: &TableName, app_code: &str) -> bool {
        write_live_partitions(b, table, app_code);
        true
    }

    fn partition_of_row(&self) -> Option<&'static str> {
        // The indexed virtual column of migration 0004: `CRC32(room_id) & 63`.
        Some("outbox_partition")
    }

    fn partition_index_hint(&self, table: &TableName) -> String {
        format!(" FORCE INDEX (idx_{}_part)", table.as_str())
    }

    fn fence_lock(&self) -> &'static str {
        // At READ COMMITTED (the store's sessions) InnoDB reads another table's rows in an
        // UPDATE without locking them: ask for the shared lock.
        " LOCK IN SHARE MODE"
    }

    fn ignore_duplicate_partition(&self) -> &'static str {
        " ON DUPLICATE KEY UPDATE epoch = epoch"
    }

    fn bigint_type(&self) -> &'static str {
        "SIGNED"
    }
}
