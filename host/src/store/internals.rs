//! The store's own SQL and row judge, exposed for `outboxd-bench` and the plan tests
//! (`tests/*_plans.rs`, `tests/conformance/`), which run, time or `EXPLAIN` the statements the
//! store runs, and for the judge's fuzz check. Not the API of a host, a plugin author or a
//! producer ([`super::OutboxStore`], the stores and their `save`): it changes with the store's SQL.

pub use super::judge::judge;
pub use super::row::CandidateRow;
pub use super::schema::{Migration, index_columns_query, migrations, required_indexes};
pub use super::statement::browse::explain_statements as console_explain_statements;
pub use super::statement::mark::MarkAt;
pub use super::statement::purge::statement_texts as purge_statement_texts;
pub use super::statement::{Arg, Bound};

use sqlx::mysql::{MySql, MySqlArguments};
use sqlx::postgres::{PgArguments, Postgres};
use sqlx::query::Query;
use sqlx::sqlite::{Sqlite, SqliteArguments, SqliteConnectOptions};

/// What every pooled PostgreSQL session runs when it opens (plans cached, no sequential scan),
/// for the plan tests' own sessions.
pub const POSTGRES_SESSION_SETUP: &str = super::postgres::SESSION_SETUP;

use super::statement::mark::{mark_rows, mark_rows_counted, marked_rows};
use super::statement::rows::Statements;
use super::{Backend, Lease, Mark, PartitionRead, StoreError, TableName};

/// The statement a partition read runs ([`super::OutboxStore::read_partitions`]) on a table of
/// `partitions` per tenant, for `EXPLAIN`.
pub fn partition_read_statement(
    backend: Backend,
    table: &TableName,
    partitions: u32,
    read: &PartitionRead,
) -> Bound {
    let statements = Statements::new(backend, table);
    statements.set_partitions(partitions);
    super::statement::partitions::read_partitions(&statements, read)
}

/// The statements a fenced mark of `marks` runs when some row is stale, named for `EXPLAIN`:
/// `mark`, and on MySQL and PostgreSQL (autocommit, no `RETURNING`) `marked`, the rows it changed.
pub fn mark_statements(
    backend: Backend,
    table: &TableName,
    lease: &Lease,
    marks: &[Mark],
    at: MarkAt,
) -> Vec<(&'static str, Bound)> {
    let statements = Statements::new(backend, table);
    // One writer (SQLite) marks in a write transaction, `RETURNING` the rows; others autocommit.
    if !backend.concurrent_writers() {
        return vec![("mark", mark_rows(&statements, lease, marks, at))];
    }
    vec![
        ("mark", mark_rows_counted(&statements, lease, marks, at)),
        ("marked", marked_rows(&statements, lease, marks, at.now_ms)),
    ]
}

/// How outboxd opens a SQLite database URL (created if missing, WAL, busy timeout, the URL's
/// `synchronous`), for the benchmark's plain clients on the same file.
pub fn sqlite_connect_options(url: &str) -> Result<SqliteConnectOptions, StoreError> {
    super::sqlite::connect_options(url)
}

/// `statement` as a PostgreSQL query, its arguments bound as the store binds them (a key list as
/// one array), for a tool that runs or `EXPLAIN`s it on a connection of its own.
pub fn postgres_query(statement: Bound) -> Query<'static, Postgres, PgArguments> {
    super::session::bind_args::<Postgres>(statement)
}

/// `statement` as a MariaDB/MySQL query, its arguments bound as the store binds them.
pub fn mysql_query(statement: Bound) -> Query<'static, MySql, MySqlArguments> {
    super::session::bind_args::<MySql>(statement)
}

/// `statement` as a SQLite query, its arguments bound as the store binds them.
pub fn sqlite_query(statement: Bound) -> Query<'static, Sqlite, SqliteArguments> {
    super::session::bind_args::<Sqlite>(statement)
}
