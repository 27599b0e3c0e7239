//! MySQL's / MariaDB's SQL: what its statements differ in, and its embedded migrations.

use std::ops::Range;

use crate::record::Status;
use crate::store::migration::{Migration, migration};
use crate::store::statement::{
    Bound, FAILED_APART_INDEX, RequiredIndex, SqlBuilder, SqlDialect, StatusWindows,
};
use crate::store::{Backend, CommitFeed, EventCursor, TableName};

/// MySQL's / MariaDB's SQL: `?` placeholders, no `UPDATE … RETURNING` (a mark that did not
/// match every row lists the rows it changed), `ON DUPLICATE KEY UPDATE` upserts whose
/// affected-row count includes duplicates, statements by primary key forced onto it, InnoDB
/// tables in `utf8mb4_bin`; no migration lock (DDL commits implicitly, every step of `migrate`
/// is idempotent instead).
#[derive(Debug)]
pub(crate) struct MySqlDialect;

/// The embedded migrations (`migrations/mysql/`).
const MIGRATIONS: &[Migration] = &[
    migration!("mysql", 1, "0001_room_outbox"),
    migration!("mysql", 2, "0002_room_index_on_demand"),
    migration!("mysql", 3, "0003_retry_lease_without_status"),
    migration!("mysql", 4, "0004_partitions"),
    migration!("mysql", 5, "0005_retire_claim_indexes"),
    migration!("mysql", 6, "0006_crash_guard"),
    migration!("mysql", 7, "0007_failed_apart"),
];

impl SqlDialect for MySqlDialect {
    /// The binary log, where the server writes one and the user may read it (`crate::wake::binlog`).
    fn commit_feed(&self) -> CommitFeed {
        CommitFeed::Binlog
    }

    /// `FORCE INDEX (PRIMARY)`: MySQL/MariaDB otherwise may walk a secondary index on the
    /// `app_code` prefix (small tables) and lock the entries of other hosts' rows on the way. By
    /// primary key a statement locks only its own rows.
    fn primary_key_access(&self) -> &'static str {
        " FORCE INDEX (PRIMARY)"
    }

    /// ` AND (created_at_ms < ? OR (created_at_ms = ? AND event_id < ?))`: two ranges on the
    /// index key, where MariaDB reads a row comparison as a range on `created_at_ms` alone
    /// (measured with `EXPLAIN`'s `key_len`).
    fn write_before_bound(&self, b: &mut SqlBuilder, before: &EventCursor) {
        b.push(" AND (created_at_ms < ")
            .bind(before.created_at_ms)
            .push(" OR (created_at_ms = ")
            .bind(before.created_at_ms)
            .push(" AND event_id < ")
            .bind(before.event_id.as_str())
            .push("))");
    }

    /// The failed-apart index of migration 0007 in place of the status index (`status.rs`).
    fn required_indexes(&self) -> &'static [RequiredIndex] {
        &FAILED_APART_INDEX
    }

    fn write_status_condition(&self, b: &mut SqlBuilder, status: Status, partitions: Range<u32>) {
        super::status::write_status_condition(b, status, partitions);
    }

    fn status_partition_chunks(&self, status: Status, partitions: u32) -> Vec<Range<u32>> {
        super::status::status_partition_chunks(status, partitions)
    }

    /// A live status's newest rows, one statement per partition (`outbox_partition = p`: a
    /// backwards range of the partition index that stops at the page's `LIMIT`) joined by
    /// `UNION ALL` (no `LATERAL` in MariaDB 10.11): over the whole status, MariaDB reads every
    /// live row of it and sorts them. A finished status: one range of the failed-apart index
    /// (per partition, a page of history would read a page from each).
    fn status_windows(&self, status: Status) -> StatusWindows {
        if status.is_live() {
            StatusWindows::UnionPerPartition
        } else {
            StatusWindows::OverTheStatus
        }
    }

    fn ignore_duplicate_key(&self) -> &'static str {
        " ON DUPLICATE KEY UPDATE event_id = event_id"
    }

    fn clock_ms(&self) -> Option<&'static str> {
        // UNIX_TIMESTAMP of a session-time DATETIME is UTC whatever the session's time zone.
        Some("SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)")
    }

    fn migrations(&self) -> &'static [Migration] {
        MIGRATIONS
    }

    fn bookkeeping_table_options(&self) -> &'static str {
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    }

    fn ignore_duplicate_version(&self) -> &'static str {
        " ON DUPLICATE KEY UPDATE version = version"
    }

    fn table_columns(&self, table: &TableName) -> Bound {
        let mut b = SqlBuilder::new(Backend::MySql);
        b.push(
            "SELECT column_name FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = ",
        )
        .bind(table.as_str());
        b.finish()
    }

    fn table_index_columns(&self, table: &TableName) -> Bound {
        let mut b = SqlBuilder::new(Backend::MySql);
        b.push(
            "SELECT index_name, column_name, CAST(0 AS SIGNED) FROM information_schema.statistics \
             WHERE table_schema = DATABASE() AND table_name = ",
        )
        .bind(table.as_str())
        .push(" ORDER BY index_name, seq_in_index");
        b.finish()
    }

    fn drop_index_hint(&self, table: &TableName, name: &str) -> String {
        format!("DROP INDEX {name} ON {}", table.as_str())
    }
}
