//! The store's own SQL and row judge, exposed for `outboxd-bench` (`bench/`) and the plan tests
//! (`tests/explain.rs`, `tests/*_plans.rs`, `tests/retention.rs`, `tests/conformance/`), which
//! run, time or `EXPLAIN` the statements the store runs, by hand, and for the judge's fuzz check
//! (`host/fuzz/checks/judge.rs`).
//!
//! This is not the API of a host, a plugin author or a producer (that is [`super::OutboxStore`],
//! the per-database stores and their `save`): it follows the store's SQL and changes with it.

pub use super::claim_position::{ClaimPosition, HEAD_SCAN_EVERY_MS};
pub use super::judge::{RowColumns, judge_columns};
pub use super::room_cursor::RoomWalk;
pub use super::schema::{Migration, claim_index_columns, index_columns_query, migrations};
pub use super::statement::browse::explain_statements as console_explain_statements;
pub use super::statement::claim::{ClaimBranch, PositionSide, Statements as ClaimStatements};
pub use super::statement::purge::statement_texts as purge_statement_texts;
pub use super::statement::{Arg, Bound};

use sqlx::sqlite::SqliteConnectOptions;

use super::StoreError;

/// How outboxd opens a SQLite database URL (created if missing, WAL, busy timeout, the URL's
/// `synchronous`), for the benchmark's plain clients on the same file.
pub fn sqlite_connect_options(url: &str) -> Result<SqliteConnectOptions, StoreError> {
    super::sqlite::connect_options(url)
}
