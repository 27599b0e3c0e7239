//! MySQL's / MariaDB's form of the partition statements that differ: a row's partition (an indexed
//! virtual column, migration 0004), which partitions hold live rows (three index dives per
//! partition), and the column rebuilt for another partition count (`outboxd migrate
//! --partitions`).

use std::borrow::Cow;

use super::dialect::MySqlDialect;
use crate::record::Status;
use crate::store::TableName;
use crate::store::statement::{Arg, Bound, PartitionSql, SqlBuilder};

/// A script running `ddl` only when `information_schema.<view>` lists `name` in its `column`
/// for table `t` of the current database (as migration 0004 checks before each step).
fn if_in_catalog(t: &str, (view, column, name): (&str, &str, &str), ddl: &str) -> String {
    format!(
        "SET @outboxd_repartition = (SELECT IF(COUNT(*) = 0, 'DO 0', '{ddl}') FROM \
         information_schema.{view} WHERE table_schema = DATABASE() AND table_name = '{t}' AND \
         {column} = '{name}'); PREPARE outboxd_repartition FROM @outboxd_repartition; EXECUTE \
         outboxd_repartition; DEALLOCATE PREPARE outboxd_repartition;"
    )
}

impl PartitionSql for MySqlDialect {
    fn now_ms_expression(&self) -> Option<&'static str> {
        Some("CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)")
    }

    /// For each partition row of the tenant, `LIMIT 1` probes of `idx_<table>_part` at (tenant,
    /// partition, status) for each live status: a few index entries per partition, never the
    /// backlog or the `delivered` history the index also holds. (Neither a `GROUP BY` loose scan
    /// nor an `EXISTS` is planned that way: both read every entry of the tenant.)
    fn write_live_partitions(
        &self,
        b: &mut SqlBuilder,
        table: &TableName,
        app_code: &str,
        _partitions: u32,
    ) -> bool {
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
        true
    }

    fn partition_of_row(&self, _partitions: u32) -> Option<Cow<'static, str>> {
        // The indexed virtual column of migration 0004, `CRC32(room_id) & <partitions - 1>`.
        Some(Cow::Borrowed("outbox_partition"))
    }

    fn partition_count_query(&self, table: &TableName) -> Option<Bound> {
        Some(Bound {
            sql: "SELECT GENERATION_EXPRESSION FROM information_schema.columns WHERE \
                  table_schema = DATABASE() AND table_name = ? AND column_name = 'outbox_partition'"
                .into(),
            args: vec![Arg::from(table.as_str())],
        })
    }

    fn repartition_statements(&self, table: &TableName, partitions: u32) -> Vec<String> {
        // A new virtual column and its index beside the old ones (added without copying the
        // table, the index built in place), then the old dropped and the new renamed: producers
        // keep writing throughout. Each drop checks the catalog first (MySQL has no `DROP …
        // IF EXISTS` in ALTER TABLE), so a run cut short is run again from the first step.
        let t = table.as_str();
        let online = "ALGORITHM=INPLACE, LOCK=NONE";
        vec![
            if_in_catalog(
                t,
                ("statistics", "index_name", &format!("idx_{t}_part_next")),
                &format!("ALTER TABLE {t} DROP INDEX idx_{t}_part_next, {online}"),
            ),
            if_in_catalog(
                t,
                ("columns", "column_name", "outbox_partition_next"),
                &format!("ALTER TABLE {t} DROP COLUMN outbox_partition_next, {online}"),
            ),
            format!(
                "ALTER TABLE {t} ADD COLUMN outbox_partition_next SMALLINT AS (CRC32(room_id) & \
                 {}) VIRTUAL",
                partitions.saturating_sub(1)
            ),
            format!(
                "CREATE INDEX idx_{t}_part_next ON {t} (app_code, outbox_partition_next, status, \
                 created_at_ms, event_id) ALGORITHM=INPLACE LOCK=NONE"
            ),
            if_in_catalog(
                t,
                ("statistics", "index_name", &format!("idx_{t}_part")),
                &format!("ALTER TABLE {t} DROP INDEX idx_{t}_part, {online}"),
            ),
            if_in_catalog(
                t,
                ("columns", "column_name", "outbox_partition"),
                &format!("ALTER TABLE {t} DROP COLUMN outbox_partition, {online}"),
            ),
            format!(
                "ALTER TABLE {t} RENAME COLUMN outbox_partition_next TO outbox_partition, RENAME \
                 INDEX idx_{t}_part_next TO idx_{t}_part, {online}"
            ),
        ]
    }

    fn partition_index_hint(&self, table: &TableName) -> String {
        format!(" FORCE INDEX (idx_{}_part)", table.as_str())
    }

    fn parenthesized_read_branches(&self) -> bool {
        true
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
