//! SQLite's SQL: what its statements differ in, and its embedded migrations.

use crate::store::migration::{Migration, migration};
use crate::store::statement::{Bound, PartitionSql, SqlBuilder, SqlDialect};
use crate::store::{Backend, CommitFeed, TableName};

/// SQLite's SQL (≥ 3.35): `?` placeholders; no row locks (a write runs in `BEGIN IMMEDIATE`, which
/// serializes it with every other writer); `UPDATE … RETURNING`; the catalog read through the
/// `pragma_table_info` / `pragma_index_list` table-valued functions.
#[derive(Debug)]
pub(crate) struct SqliteDialect;

/// The embedded migrations (`migrations/sqlite/`).
const MIGRATIONS: &[Migration] = &[
    migration!("sqlite", 1, "0001_room_outbox"),
    migration!("sqlite", 2, "0002_partial_indexes"),
    migration!("sqlite", 3, "0003_room_index_on_demand"),
    migration!("sqlite", 4, "0004_partitions"),
    migration!("sqlite", 5, "0005_retire_claim_indexes"),
    migration!("sqlite", 6, "0006_crash_guard"),
];

/// One partition, the host's clock: every default.
impl PartitionSql for SqliteDialect {}

impl SqlDialect for SqliteDialect {
    /// `PRAGMA data_version`, watched on a connection of its own (`crate::wake::sqlite`).
    fn commit_feed(&self) -> CommitFeed {
        CommitFeed::DataVersion
    }

    fn begin_write(&self) -> Option<&'static str> {
        Some("BEGIN IMMEDIATE")
    }

    /// No: one writer at a time holds the file's write lock; a second `BEGIN IMMEDIATE` waits in
    /// the busy handler (sleeping 1, 2, 5, 10 … ms between tries).
    fn concurrent_writers(&self) -> bool {
        false
    }

    fn migrations(&self) -> &'static [Migration] {
        MIGRATIONS
    }

    fn table_columns(&self, table: &TableName) -> Bound {
        let mut b = SqlBuilder::new(Backend::Sqlite);
        b.push("SELECT name FROM pragma_table_info(")
            .bind(table.as_str())
            .push(")");
        b.finish()
    }

    fn table_index_columns(&self, table: &TableName) -> Bound {
        let mut b = SqlBuilder::new(Backend::Sqlite);
        b.push("SELECT il.name, ii.name, il.partial FROM pragma_index_list(")
            .bind(table.as_str())
            .push(") il JOIN pragma_index_info(il.name) ii ORDER BY il.name, ii.seqno");
        b.finish()
    }
}
