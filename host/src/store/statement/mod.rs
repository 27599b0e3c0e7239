//! Statement building shared by every backend: a `SqlBuilder` writes the text and its bound
//! `Arg`s together, asking the backend's `SqlDialect` for what differs (placeholders, row
//! locks, upserts, …); then the statements, one file per operation. Every text is built from
//! static fragments and the validated [`TableName`] only; every value is a bound parameter.
//! Statements of fixed shape are built once per store ([`rows::Statements`]).

pub mod browse;
pub(crate) mod failed;
pub(crate) mod fence;
mod indexes;
pub(crate) mod insert;
pub(crate) mod mark;
pub(crate) mod partitions;
pub(crate) mod repartition;
pub mod rows;

pub(crate) use indexes::{FAILED_APART_INDEX, HISTORY_INDEX, RequiredIndex, STATUS_INDEX};
pub(crate) use partitions::PartitionSql;
pub mod purge;

use std::ops::Range;
use std::sync::Arc;

use super::migration::Migration;
use super::{Backend, EventCursor, TableName};
use crate::record::Status;

/// The length an `IN` list of `n` members is padded to ([`SqlBuilder::bind_set`]): the next
/// power of two up to 512, then 999 (MariaDB turns an `IN` list of
/// `in_predicate_conversion_threshold`, 1000, or more members into a derived table), and a
/// longer list as it is.
pub(crate) fn padded_set_len(n: usize) -> usize {
    match n {
        0 => 0,
        1..=512 => n.next_power_of_two(),
        513..=999 => 999,
        _ => n,
    }
}

/// Most rows (or ids) one INSERT, UPDATE or IN list carries, so that bound parameters stay well
/// below every database's limit (SQLite 32766, MySQL and PostgreSQL 65535): a mark binds at most
/// 7 values per row, an insert 7.
pub const MAX_ROWS_PER_STATEMENT: usize = 1000;

/// How the console reads a page of one status (`browse::select_window`) where the table's
/// partition count is known.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum StatusWindows {
    /// One statement over the status (per [`SqlDialect::status_partition_chunks`] chunk), a
    /// range of the index [`SqlDialect::write_status_condition`] names.
    OverTheStatus,
    /// Each partition's newest rows, a backwards range of the partition index that stops at
    /// the page's `LIMIT`, joined `LATERAL` over the partition numbers (PostgreSQL).
    LateralPerPartition,
    /// Each partition's newest rows as above, a statement per partition joined by `UNION ALL`
    /// (MariaDB 10.11 has no `LATERAL`).
    UnionPerPartition,
}

/// What one database's SQL differs in: the provided methods are the SQL at least two backends
/// share, and each backend's `dialect.rs` overrides what its database does differently. The
/// shared builders ask it instead of matching on the backend.
pub(crate) trait SqlDialect: PartitionSql + Send + Sync + 'static {
    /// Writes placeholder number `n` (1-based) of a statement: `?`.
    fn placeholder(&self, sql: &mut String, _n: usize) {
        sql.push('?');
    }

    /// The statement beginning a write transaction where `BEGIN` is not enough (SQLite's `BEGIN
    /// IMMEDIATE`: the write lock taken up front, waiting on the busy timeout instead of failing
    /// to upgrade).
    fn begin_write(&self) -> Option<&'static str> {
        None
    }

    /// Whether two write transactions on the table proceed side by side (row locks), so a read
    /// gains from running while a mark of the same host is open.
    fn concurrent_writers(&self) -> bool {
        true
    }

    /// What wakes idle loops when rows are committed ([`crate::store::Backend::commit_feed`]).
    fn commit_feed(&self) -> crate::store::CommitFeed;

    /// Written after the table name of a statement that addresses rows by primary key
    /// (`app_code = ? AND event_id IN (…)`): nothing.
    fn primary_key_access(&self) -> &'static str {
        ""
    }

    /// Appended to the outbox INSERT: ignore a duplicate (app_code, event_id) and nothing else
    /// (`INSERT IGNORE` / `INSERT OR IGNORE` would also swallow other errors).
    fn ignore_duplicate_key(&self) -> &'static str {
        " ON CONFLICT (app_code, event_id) DO NOTHING"
    }

    /// Whether a key list is bound as one array parameter (`column = ANY($n)`, one `text[]`)
    /// instead of `column IN (?, ?, …)`, one placeholder per value (PostgreSQL's tells why).
    fn binds_lists_as_arrays(&self) -> bool {
        false
    }

    /// Writes the console's condition "strictly older than `before` in `(created_at_ms,
    /// event_id)` order", in the form the database seeks on an index key ending in those columns.
    /// Default: one row comparison (PostgreSQL, SQLite); MariaDB writes two ranges.
    fn write_before_bound(&self, b: &mut SqlBuilder, before: &EventCursor) {
        browse::write_row_comparison_before(b, before);
    }

    /// The secondary indexes outboxd needs on every table besides the partition index, which
    /// `migrate` creates where a table lacks them. Default: the status index.
    fn required_indexes(&self) -> &'static [RequiredIndex] {
        &STATUS_INDEX
    }

    /// How the console's window of `status` is read where the table's partition count is known
    /// (`browse::select_window`). Default: one statement over the status
    /// ([`StatusWindows::OverTheStatus`]).
    fn status_windows(&self, _status: Status) -> StatusWindows {
        StatusWindows::OverTheStatus
    }

    /// Groups of statuses that split the counts statement (`status, COUNT(*),
    /// MIN(created_at_ms)` per status) into one statement per group, joined by `UNION ALL`, so
    /// that each reads the index holding those rows (a group of live statuses states the
    /// partition index's predicate). Default: none, one statement over the table.
    fn counts_groups(&self) -> &'static [&'static [Status]] {
        &[]
    }

    /// Writes ` AND status = '<status>'` for a statement that looks up a tenant's rows of one
    /// status (its `app_code = ?` written before), in the form the database reads from an index
    /// range of [`Self::required_indexes`] or the partition index. Default: the condition alone,
    /// a range of the status index. `partitions`: the partition numbers to cover, one of
    /// [`Self::status_partition_chunks`].
    fn write_status_condition(&self, b: &mut SqlBuilder, status: Status, _partitions: Range<u32>) {
        b.push(" AND status = ").status(status);
    }

    /// How a lookup of `status` over a table of `partitions` partitions is split into statements
    /// joined by `UNION ALL`, each covering one range of partition numbers. Default: one,
    /// `0..partitions`.
    fn status_partition_chunks(&self, _status: Status, partitions: u32) -> Vec<Range<u32>> {
        std::iter::once(0..partitions.max(1)).collect()
    }

    /// A query of one BIGINT: the database's clock, UTC milliseconds since the epoch. `None`
    /// where the database has no clock apart from the host's (SQLite, in the host's process).
    fn clock_ms(&self) -> Option<&'static str> {
        None
    }

    /// The embedded migrations (`migrations/<backend>/`), oldest first.
    fn migrations(&self) -> &'static [Migration];

    /// Table options written after the bookkeeping table's `CREATE TABLE` (engine, charset).
    fn bookkeeping_table_options(&self) -> &'static str {
        ""
    }

    /// Appended to the INSERT recording a migration: ignore one already recorded.
    fn ignore_duplicate_version(&self) -> &'static str {
        " ON CONFLICT (table_name, version) DO NOTHING"
    }

    /// Taken inside the migration transaction when the transaction alone does not serialize
    /// concurrent `migrate` runs: a statement returning 1 when it took the lock, 0 when another
    /// session holds it (`migrate` tries again every 50 ms); none.
    fn migration_lock(&self) -> Option<&'static str> {
        None
    }

    /// The statements that take (returning 1, or 0 when another session holds it) and release, on
    /// one connection outside any transaction, the lock that serializes `migrate` runs while they
    /// apply migrations run outside a transaction ([`Migration::outside_transaction`]): none where
    /// no such migration exists.
    fn migration_session_lock(&self) -> Option<[&'static str; 2]> {
        None
    }

    /// The column names of `table` (no rows when it does not exist).
    fn table_columns(&self, table: &TableName) -> Bound;

    /// The indexes of `table`: one row per key column (`index name, column name, partial`; the
    /// column is NULL for an expression; `partial` 1 for an index with a `WHERE`, else 0), ordered
    /// by index name and position.
    fn table_index_columns(&self, table: &TableName) -> Bound;

    /// The statement that drops index `name` of `table`: `migrate` names it where it refuses an
    /// index an operator must drop.
    fn drop_index_hint(&self, _table: &TableName, name: &str) -> String {
        format!("DROP INDEX {name}")
    }
}

/// A value bound to a placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arg {
    /// A string (ids, types, error text).
    Text(String),
    /// A 64-bit integer (times, limits, versions).
    Int(i64),
    /// Bytes (the envelope).
    Bytes(Vec<u8>),
    /// A list of strings bound as one array parameter (`text[]`): only written for a dialect
    /// whose `SqlDialect::binds_lists_as_arrays` says so (`SqlBuilder::bind_in`).
    TextList(Vec<String>),
}

impl From<&str> for Arg {
    fn from(value: &str) -> Arg {
        Arg::Text(value.to_string())
    }
}

impl From<String> for Arg {
    fn from(value: String) -> Arg {
        Arg::Text(value)
    }
}

impl From<i64> for Arg {
    fn from(value: i64) -> Arg {
        Arg::Int(value)
    }
}

impl From<Vec<u8>> for Arg {
    fn from(value: Vec<u8>) -> Arg {
        Arg::Bytes(value)
    }
}

/// A statement text with its arguments, in placeholder order.
#[derive(Debug, Clone)]
pub struct Bound {
    /// The SQL text.
    pub sql: Arc<str>,
    /// One value per placeholder.
    pub args: Vec<Arg>,
}

impl Bound {
    /// A statement without arguments.
    pub(crate) fn text(sql: impl Into<Arc<str>>) -> Bound {
        Bound {
            sql: sql.into(),
            args: Vec::new(),
        }
    }
}

/// Writes a statement and its arguments together, so placeholders and values cannot drift apart.
pub(crate) struct SqlBuilder {
    dialect: &'static dyn SqlDialect,
    sql: String,
    args: Vec<Arg>,
}

impl SqlBuilder {
    /// An empty statement in `backend`'s dialect.
    pub(crate) fn new(backend: Backend) -> SqlBuilder {
        SqlBuilder {
            dialect: backend.dialect(),
            sql: String::with_capacity(256),
            args: Vec::new(),
        }
    }

    /// Static SQL text.
    pub(crate) fn push(&mut self, fragment: &str) -> &mut SqlBuilder {
        self.sql.push_str(fragment);
        self
    }

    /// A string literal from a static status name (never a caller's value).
    pub(crate) fn status(&mut self, status: Status) -> &mut SqlBuilder {
        self.sql.push('\'');
        self.sql.push_str(status.as_str());
        self.sql.push('\'');
        self
    }

    /// A placeholder and its value.
    pub(crate) fn bind(&mut self, value: impl Into<Arg>) -> &mut SqlBuilder {
        self.args.push(value.into());
        self.dialect.placeholder(&mut self.sql, self.args.len());
        self
    }

    /// A placeholder and the value written to `last_error`: `text` cut to
    /// [`LAST_ERROR_MAX_BYTES`](crate::record::LAST_ERROR_MAX_BYTES) at a character boundary. The
    /// one place a `last_error` is cut (marks and read rejects both bind it here).
    pub(crate) fn bind_last_error(&mut self, text: &str) -> &mut SqlBuilder {
        self.bind(crate::record::truncate_error(text))
    }

    /// `(?, ?, …)` binding every value.
    pub(crate) fn bind_list<V: Into<Arg>>(
        &mut self,
        values: impl IntoIterator<Item = V>,
    ) -> &mut SqlBuilder {
        self.sql.push('(');
        for (i, value) in values.into_iter().enumerate() {
            if i > 0 {
                self.sql.push_str(", ");
            }
            self.bind(value);
        }
        self.sql.push(')');
        self
    }

    /// `(?, ?, …)` binding `values` as the members of a set (an `IN` list), padded to one of a
    /// few lengths by repeating the last value ([`padded_set_len`]): a database prepares each
    /// statement text once per connection (MySQL's `COM_STMT_PREPARE`, a round trip of its own;
    /// SQLite's compile), so marks and rejections of every batch size share a dozen texts instead
    /// of one per size. A repeated member changes no `IN`.
    pub(crate) fn bind_set<'a>(
        &mut self,
        values: impl IntoIterator<Item = &'a str>,
    ) -> &mut SqlBuilder {
        let values: Vec<&str> = values.into_iter().collect();
        let last = values.last().copied();
        let padding = padded_set_len(values.len()) - values.len();
        self.bind_list(
            values
                .into_iter()
                .chain(last.into_iter().cycle().take(padding)),
        )
    }

    /// ` = ANY(?)` binding `values` as one array where the dialect binds lists as arrays
    /// ([`SqlDialect::binds_lists_as_arrays`]), else ` IN (?, ?, …)` ([`SqlBuilder::bind_set`]):
    /// the membership test of a key column, written after the column.
    pub(crate) fn bind_in<'a>(
        &mut self,
        values: impl IntoIterator<Item = &'a str>,
    ) -> &mut SqlBuilder {
        if self.dialect.binds_lists_as_arrays() {
            let list: Vec<String> = values.into_iter().map(str::to_string).collect();
            self.push(" = ANY(").bind(Arg::TextList(list)).push(")")
        } else {
            self.push(" IN ").bind_set(values)
        }
    }

    /// The rows of `app_code` with these `event_ids`, as one primary-key probe per id: where the
    /// dialect binds lists as arrays, `(app_code, event_id) IN (SELECT ?, unnest(?))`, which
    /// PostgreSQL plans as probes whatever the table's statistics (with `app_code = ?` apart,
    /// a never-analyzed table's tenant looks a few rows long, and `event_id = ANY(?)` or a
    /// join on `event_id` alone became a filter on a scan of the whole tenant); else
    /// `app_code = ? AND event_id IN (?, ?, …)`.
    pub(crate) fn bind_keys_joined<'a>(
        &mut self,
        app_code: &str,
        event_ids: impl IntoIterator<Item = &'a str>,
    ) -> &mut SqlBuilder {
        if self.dialect.binds_lists_as_arrays() {
            self.push("(app_code, event_id) IN (SELECT ")
                .bind(app_code)
                .push(", unnest(");
            let list: Vec<String> = event_ids.into_iter().map(str::to_string).collect();
            self.bind(Arg::TextList(list)).push("))")
        } else {
            self.push("app_code = ")
                .bind(app_code)
                .push(" AND event_id IN ")
                .bind_set(event_ids)
        }
    }

    /// What the statement's database differs in.
    pub(crate) fn dialect(&self) -> &'static dyn SqlDialect {
        self.dialect
    }

    /// ` AND status = '<status>'` of a lookup by status, as the dialect writes it
    /// ([`SqlDialect::write_status_condition`]).
    pub(crate) fn status_condition(
        &mut self,
        status: Status,
        partitions: Range<u32>,
    ) -> &mut SqlBuilder {
        let dialect = self.dialect;
        dialect.write_status_condition(self, status, partitions);
        self
    }

    /// One statement per range of `chunks`, written by `part`: the statement alone where there is
    /// one, else each in parentheses joined by `UNION ALL` and followed by `tail` (the ordering
    /// and limit of the union).
    pub(crate) fn union_of_chunks(
        &mut self,
        chunks: Vec<Range<u32>>,
        mut part: impl FnMut(&mut SqlBuilder, Range<u32>),
        tail: impl FnOnce(&mut SqlBuilder),
    ) -> &mut SqlBuilder {
        if chunks.len() == 1 {
            part(self, chunks[0].clone());
            return self;
        }
        for (i, chunk) in chunks.into_iter().enumerate() {
            self.push(if i == 0 { "(" } else { " UNION ALL (" });
            part(self, chunk);
            self.push(")");
        }
        tail(self);
        self
    }

    /// The statement with its arguments.
    pub(crate) fn finish(self) -> Bound {
        Bound {
            sql: self.sql.into(),
            args: self.args,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
