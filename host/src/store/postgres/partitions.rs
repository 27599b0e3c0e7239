//! PostgreSQL's form of the partition statements that differ: a row's partition (an expression
//! index, migration 0007), which partitions hold live rows (a skip scan of that index), and the
//! index rebuilt for another partition count (`outboxd migrate --partitions`).

use std::borrow::Cow;

use super::dialect::PostgresDialect;
use crate::store::TableName;
use crate::store::statement::{Arg, Bound, PartitionSql, SqlBuilder};

/// The partition of a row with `partitions` per tenant, written exactly as the partition index
/// has it (the planner matches an expression index by its text): the low bits of `room_id`'s
/// hash.
fn partition_of_row(partitions: u32) -> String {
    format!(
        "(hashtextextended(room_id, 0) & {})",
        partitions.saturating_sub(1)
    )
}

/// `CREATE INDEX CONCURRENTLY <name> ON <table> (…)`: the partition index of migration 0007,
/// with `partitions` per tenant.
fn create_partition_index(table: &TableName, name: &str, partitions: u32) -> String {
    format!(
        "CREATE INDEX CONCURRENTLY {name} ON {table} (app_code, {}, status, created_at_ms, \
         event_id) WHERE status IN ('pending', 'retryable', 'delivering') AND updated_at_ms IS \
         NOT NULL",
        partition_of_row(partitions),
        table = table.as_str(),
    )
}

impl PartitionSql for PostgresDialect {
    fn now_ms_expression(&self) -> Option<&'static str> {
        Some("(extract(epoch FROM clock_timestamp()) * 1000)::bigint")
    }

    /// A recursive skip scan of `idx_<table>_part` (live rows only): each step reads the first
    /// index entry above the last partition found (`ORDER BY <partition> LIMIT 1` on the index
    /// prefix), so the query reads one index entry per partition with live rows, whatever the
    /// backlog. (A `min()` first step was planned as an aggregate over every live row.)
    fn write_live_partitions(
        &self,
        b: &mut SqlBuilder,
        table: &TableName,
        app_code: &str,
        partitions: u32,
    ) -> bool {
        let partition = &partition_of_row(partitions);
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
        true
    }

    fn partition_of_row(&self, partitions: u32) -> Option<Cow<'static, str>> {
        Some(Cow::Owned(partition_of_row(partitions)))
    }

    fn partition_count_query(&self, table: &TableName) -> Option<Bound> {
        Some(Bound {
            sql: "SELECT pg_get_indexdef(to_regclass($1))".into(),
            args: vec![Arg::from(format!("idx_{}_part", table.as_str()))],
        })
    }

    fn repartition_statements(&self, table: &TableName, partitions: u32) -> Vec<String> {
        // As migration 0007 builds it: the new index beside the old, then swapped.
        let (index, next) = (
            format!("idx_{}_part", table.as_str()),
            format!("idx_{}_part_next", table.as_str()),
        );
        vec![
            format!("DROP INDEX CONCURRENTLY IF EXISTS {next}"),
            create_partition_index(table, &next, partitions),
            format!("DROP INDEX CONCURRENTLY IF EXISTS {index}"),
            format!("ALTER INDEX {next} RENAME TO {index}"),
        ]
    }

    fn partition_index_predicate(&self) -> &'static str {
        " AND updated_at_ms IS NOT NULL"
    }

    fn fence_lock(&self) -> &'static str {
        // The weakest lock a takeover's `FOR UPDATE` waits for: a heartbeat renewing its
        // leases (an UPDATE of no key column) goes on beside the marks. With `FOR SHARE`, a
        // renewal and a mark of several partitions locked the same rows in different orders and
        // deadlocked: PostgreSQL breaks a deadlock after `deadlock_timeout` (1 s), so a mark or
        // a heartbeat stalled a whole second.
        " FOR KEY SHARE"
    }

    fn takeover_lock(&self, partitions_table: &str) -> Option<String> {
        Some(format!(
            " AND EXISTS (SELECT 1 FROM {partitions_table} q WHERE q.app_code = \
             {partitions_table}.app_code AND q.partition_id = {partitions_table}.partition_id \
             FOR UPDATE)"
        ))
    }
}
