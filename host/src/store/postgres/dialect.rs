//! PostgreSQL's SQL: what its statements differ in, and its embedded migrations.

use std::ops::Range;

use crate::record::Status;
use crate::store::migration::{Migration, migration};
use crate::store::statement::{
    Bound, HISTORY_INDEX, PartitionSql, RequiredIndex, SqlBuilder, SqlDialect, StatusWindows,
};
use crate::store::{Backend, CommitFeed, TableName};

/// PostgreSQL's SQL: `$n` placeholders, key lists bound as one array, `ON CONFLICT … DO
/// NOTHING`; the live rows counted through the partition index and the finished ones through the
/// history index; the console's pages read `LATERAL` per partition; `migrate` serialized with an
/// advisory lock; unquoted names folded to lower case in the catalog.
#[derive(Debug)]
pub(crate) struct PostgresDialect;

/// The embedded migrations (`migrations/postgres/`).
const MIGRATIONS: &[Migration] = &[
    migration!("postgres", 1, "0001_room_outbox"),
    migration!("postgres", 2, "0002_commit_notify"),
    migration!("postgres", 3, "0003_requeue_notify"),
    migration!("postgres", 4, "0004_room_index_on_demand"),
    migration!("postgres", 5, "0005_notify_while_hosts_wait"),
    migration!("postgres", 6, "0006_live_retry_lease_indexes").outside_transaction(),
    migration!("postgres", 7, "0007_partitions").outside_transaction(),
    migration!("postgres", 8, "0008_retire_claim_indexes").outside_transaction(),
    migration!("postgres", 9, "0009_crash_guard").outside_transaction(),
    migration!("postgres", 10, "0010_history_index").outside_transaction(),
];

impl SqlDialect for PostgresDialect {
    /// `LISTEN` on the channel of migration 0002's and 0003's triggers (`crate::wake::postgres`).
    fn commit_feed(&self) -> CommitFeed {
        CommitFeed::Listen
    }

    /// The history index of migration 0010 (finished rows only) in place of the status index.
    fn required_indexes(&self) -> &'static [RequiredIndex] {
        &HISTORY_INDEX
    }

    /// A finished status (`delivered`, `failed`): ` AND status = …`, a range of the history
    /// index. A live one: ` AND status = … AND updated_at_ms IS NOT NULL`, which implies the
    /// partition index's predicate, so the planner reads the live rows from it (the console's
    /// windows one partition at a time: [`SqlDialect::status_windows`]).
    fn write_status_condition(&self, b: &mut SqlBuilder, status: Status, _partitions: Range<u32>) {
        b.push(" AND status = ").status(status);
        if status.is_live() {
            b.push(self.partition_index_predicate());
        }
    }

    /// A live status's newest rows, partition by partition, each a backwards range of the
    /// partition index that stops at the page's `LIMIT` (no sort of the whole backlog); a
    /// finished one's, a range of the history index.
    fn status_windows(&self, status: Status) -> StatusWindows {
        if status.is_live() {
            StatusWindows::LateralPerPartition
        } else {
            StatusWindows::OverTheStatus
        }
    }

    /// The live statuses from the partition index, the finished ones from the history index.
    fn counts_groups(&self) -> &'static [&'static [Status]] {
        &[
            &[Status::Pending, Status::Retryable, Status::Delivering],
            &[Status::Delivered, Status::Failed],
        ]
    }

    fn placeholder(&self, sql: &mut String, n: usize) {
        sql.push('$');
        sql.push_str(&n.to_string());
    }

    /// Key lists go as one `text[]` parameter (`event_id = ANY($n)`): a mark's
    /// `event_id IN ($5 … $504)` under the cached generic plan rebuilt the 500-element array for
    /// every row the UPDATE read; measured 21–24 ms against 14–16 ms per mark of 500 rows
    /// (the git history of docs/PERFORMANCE.md, "Leased throughput").
    fn binds_lists_as_arrays(&self) -> bool {
        true
    }

    fn clock_ms(&self) -> Option<&'static str> {
        // clock_timestamp(): the time now, not the transaction's start.
        Some("SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint")
    }

    fn migrations(&self) -> &'static [Migration] {
        MIGRATIONS
    }

    /// `CREATE TABLE IF NOT EXISTS` races between concurrent transactions: a transaction-scoped
    /// advisory lock (any constant: "outboxd" in ASCII) serializes `migrate` runs.
    fn migration_lock(&self) -> Option<&'static str> {
        Some(
            "SELECT CASE WHEN pg_try_advisory_xact_lock(31366054425523556) \
             THEN 1::bigint ELSE 0::bigint END",
        )
    }

    /// The same key as [`Self::migration_lock`], held by the session: a `migrate` building an
    /// index concurrently and one in its transaction wait for each other.
    fn migration_session_lock(&self) -> Option<[&'static str; 2]> {
        Some([
            "SELECT CASE WHEN pg_try_advisory_lock(31366054425523556) \
             THEN 1::bigint ELSE 0::bigint END",
            "SELECT pg_advisory_unlock(31366054425523556)",
        ])
    }

    fn table_columns(&self, table: &TableName) -> Bound {
        let mut b = SqlBuilder::new(Backend::Postgres);
        b.push(
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = ",
        )
        .bind(catalog_name(table));
        b.finish()
    }

    fn table_index_columns(&self, table: &TableName) -> Bound {
        let mut b = SqlBuilder::new(Backend::Postgres);
        b.push(
            "SELECT i.relname::text, a.attname::text, \
             CAST(CASE WHEN x.indpred IS NULL THEN 0 ELSE 1 END AS BIGINT) FROM pg_index x \
             JOIN pg_class t ON t.oid = x.indrelid \
             JOIN pg_namespace n ON n.oid = t.relnamespace \
             JOIN pg_class i ON i.oid = x.indexrelid \
             CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
             LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
             WHERE n.nspname = current_schema() AND t.relname::text = ",
        )
        .bind(catalog_name(table))
        .push(" AND k.ord <= x.indnkeyatts ORDER BY i.relname, k.ord");
        b.finish()
    }
}

/// The table name as the catalog stores it: PostgreSQL folds unquoted identifiers to lower case.
fn catalog_name(table: &TableName) -> String {
    table.as_str().to_ascii_lowercase()
}
