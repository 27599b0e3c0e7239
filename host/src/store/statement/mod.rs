//! Statement building shared by every backend: a `SqlBuilder` writes the text and its bound
//! `Arg`s together, asking the backend's `SqlDialect` for what differs (placeholders, row
//! locks, upserts, …).
//!
//! Every statement text is built from static fragments and the validated [`TableName`] only;
//! every value is a bound parameter. The statements themselves are grouped by operation:
//! [`claim`] (the claim SELECTs, lease and reject UPDATEs, counts), `insert` (the producer
//! insert), `mark` (the fenced mark), `failed` (list, count and requeue `failed` rows) and
//! [`purge`] (retention's batched deletes), [`browse`] (the console's reads and dead-letter
//! deletes).
//! Schema statements live in [`super::schema`]. Statements of fixed shape are built once per store
//! ([`claim::Statements`]); those carrying an IN list or a VALUES list are built per call.

pub mod browse;
pub mod claim;
pub(crate) mod failed;
pub(crate) mod held;
pub(crate) mod insert;
pub(crate) mod mark;
pub(crate) mod partitions;

pub(crate) use partitions::PartitionSql;
pub mod purge;

use std::sync::Arc;

use super::claim_position::ClaimPosition;
use super::migration::Migration;
use super::room_cursor::RoomWalk;
use super::{Backend, DeliveryOrder, EventCursor, Lease, Mark, RejectedRow, TableName};
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

/// What one database's SQL differs in. The provided methods are the standard SQL that at least
/// two backends share; each backend folder (`sqlite/`, `mysql/`, `postgres/`, in `dialect.rs`) implements the
/// trait next to its store, overriding only what its database does differently — so what
/// PostgreSQL does differently is read in `postgres/`. The shared builders ask this trait
/// instead of matching on the backend.
pub(crate) trait SqlDialect: PartitionSql + Send + Sync + 'static {
    /// The database this dialect is.
    fn backend(&self) -> Backend;

    /// Writes placeholder number `n` (1-based) of a statement: `?`.
    fn placeholder(&self, sql: &mut String, _n: usize) {
        sql.push('?');
    }

    /// Appended to a claim SELECT so concurrent claimers skip each other's rows.
    fn row_lock(&self) -> &'static str {
        " FOR UPDATE SKIP LOCKED"
    }

    /// Whether two write transactions on the table proceed side by side (row locks), so a claim
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
    /// instead of `column IN (?, ?, …)`, one placeholder per value. PostgreSQL: with a cached
    /// (generic) plan, an `IN` list of 500 placeholders is rebuilt as an array for every row the
    /// statement reads; one array parameter is not.
    fn binds_lists_as_arrays(&self) -> bool {
        false
    }

    /// Written after the per-room probe's table alias to make the database read the room index
    /// `name` (`idx_<table>_room`) whatever its statistics say; `None`: the planner picks. Where
    /// it names the index, the index must exist under exactly that name: `migrate` with the room
    /// index creates it so, and a per-room worker's start check requires it
    /// ([`crate::store::OutboxStore::check_ordering`]).
    fn room_probe_index_hint(&self, _name: &str) -> Option<String> {
        None
    }

    /// Writes the pending branch of a per-room claim, returning `columns` (of alias `c`): the heads
    /// of the rooms `walk` covers (`None`: every room; else that side of the room cursor), those
    /// whose room has no earlier retryable or delivering event, locked, up to a row limit.
    /// Default: a recursive walk of the room index ([`claim::room_heads::write_walk`]); MariaDB
    /// reads the heads with a loose index scan (`store/mysql/claim.rs`).
    fn write_room_heads(
        &self,
        b: &mut SqlBuilder,
        table: &TableName,
        columns: &str,
        walk: Option<claim::PositionSide>,
    ) {
        claim::room_heads::write_walk(b, self.backend(), table, columns, walk);
    }

    /// The values [`SqlDialect::write_room_heads`]'s statement binds before its row limit.
    fn room_heads_args(&self, app_code: &str, walk: &RoomWalk) -> Vec<Arg> {
        claim::room_heads::walk_args(app_code, walk)
    }

    /// Writes the claim-position condition of the pending branch: the rows on `side` of the
    /// position in claim order, in the form the database seeks on the pending index's full key.
    /// Default: one row comparison `(c.created_at_ms, c.event_id) > (?, ?)` (PostgreSQL, SQLite);
    /// MariaDB writes two ranges (`store/mysql/claim.rs`).
    fn write_position_bound(&self, b: &mut SqlBuilder, side: claim::PositionSide) {
        claim::write_row_comparison_bound(b, side);
    }

    /// The values [`SqlDialect::write_position_bound`]'s condition binds, in order.
    fn position_args(&self, position: &ClaimPosition) -> Vec<Arg> {
        vec![
            Arg::Int(position.created_at_ms),
            Arg::from(position.event_id.as_str()),
        ]
    }

    /// Writes the console's condition "strictly older than `before` in `(created_at_ms,
    /// event_id)` order", in the form the database seeks on an index key ending in those columns.
    /// Default: one row comparison (PostgreSQL, SQLite); MariaDB writes two ranges
    /// (`store/mysql/browse.rs`).
    fn write_before_bound(&self, b: &mut SqlBuilder, before: &EventCursor) {
        browse::write_row_comparison_before(b, before);
    }

    /// Closes a per-room `NOT EXISTS` probe of a claim SELECT.
    fn probe_end(&self) -> &'static str {
        ")"
    }

    /// One claim branch claimed and leased in one statement, where the database can (PostgreSQL:
    /// `UPDATE … FROM unnest(ARRAY(SELECT ctid … FOR UPDATE SKIP LOCKED)) WITH ORDINALITY …
    /// RETURNING`, `store/postgres/claim/`), reading `position`'s side of a claim position when
    /// given. `None` (the default): the claim SELECTs, then leases by primary key in a second
    /// statement. A dialect that has it has it for every branch and ordering.
    fn claim_lease_text(
        &self,
        _table: &TableName,
        _branch: claim::ClaimBranch,
        _ordering: DeliveryOrder,
        _position: Option<claim::PositionSide>,
    ) -> Option<Arc<str>> {
        None
    }

    /// The statements a claim runs after its reads, handing out `event_ids` under `lease` and
    /// rejecting `rejected`, named (`lease`, `reject`): for `EXPLAIN` in tests
    /// ([`claim::Statements::follow_up_statements`]). Default: the lease UPDATE by primary key and
    /// the reject UPDATE.
    fn claim_follow_ups(
        &self,
        table: &TableName,
        lease: &Lease,
        now_ms: i64,
        event_ids: &[&str],
        rejected: &[RejectedRow],
    ) -> Vec<(&'static str, Bound)> {
        let backend = self.backend();
        vec![
            (
                "lease",
                claim::lease_rows(backend, table, lease, now_ms, event_ids),
            ),
            (
                "reject",
                claim::reject_rows(backend, table, &lease.app_code, now_ms, rejected),
            ),
        ]
    }

    /// The statements a mark of `marks` runs when some row is stale, named (`mark`, and MySQL's
    /// `marked`): for `EXPLAIN` in tests. Default: the fenced UPDATE with `RETURNING event_id`.
    fn mark_statements(
        &self,
        table: &TableName,
        lease: &Lease,
        marks: &[Mark],
        now_ms: i64,
    ) -> Vec<(&'static str, Bound)> {
        let mark = mark::mark_rows(self.backend(), table, lease, marks, now_ms);
        vec![("mark", mark)]
    }

    /// How a held mark reaches the rows its claim locked by their address instead of the primary
    /// key, when a primary-key `event_id IN (…)` plan depends on statistics (PostgreSQL: `ctid`,
    /// a TID scan). `None`: by primary key.
    fn held_row_address(&self) -> Option<held::HeldRowAddress> {
        None
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

    /// The indexes of `table`: one row per key column (`index name, column name`; the column is
    /// NULL for an expression), ordered by index name and position.
    fn table_index_columns(&self, table: &TableName) -> Bound;

    /// The claim indexes this database's claims read (pending, retry, lease), which `migrate`
    /// checks and completes. Default: migration 0001's, each led by `(app_code, status)`
    /// ([`crate::store::claim_index::CLAIM_INDEXES`]).
    fn claim_indexes(&self) -> &'static [crate::store::claim_index::ClaimIndex; 3] {
        &crate::store::claim_index::CLAIM_INDEXES
    }

    /// Writes the retryable branch's bound on `c.next_retry_at_ms`: the rows due at the bound
    /// time. Default ` AND c.next_retry_at_ms <= ?`.
    fn write_due_retry_bound(&self, b: &mut SqlBuilder) {
        b.push(" AND c.next_retry_at_ms <= ").placeholder();
    }

    /// The condition of a partial index over the live rows (`pending`, `retryable`,
    /// `delivering`) that the claims' statements imply, for the indexes `migrate` creates that
    /// way ([`super::claim_index::ClaimIndex`]); `None`: the database indexes every row.
    fn live_rows_predicate(&self) -> Option<&'static str> {
        None
    }

    /// The statement that drops index `name` of `table`: `migrate` runs it to rebuild an index
    /// of an earlier shape, and names it where it refuses an index an operator must drop.
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

/// Writes a statement and its arguments together, so placeholders and values cannot drift apart.
pub(crate) struct SqlBuilder {
    dialect: &'static dyn SqlDialect,
    sql: String,
    args: Vec<Arg>,
    placeholders: usize,
}

impl SqlBuilder {
    /// An empty statement in `backend`'s dialect.
    pub(crate) fn new(backend: Backend) -> SqlBuilder {
        SqlBuilder {
            dialect: backend.dialect(),
            sql: String::with_capacity(256),
            args: Vec::new(),
            placeholders: 0,
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

    /// A placeholder whose value is supplied at execution time (fixed statements).
    pub(crate) fn placeholder(&mut self) -> &mut SqlBuilder {
        self.placeholders += 1;
        self.dialect.placeholder(&mut self.sql, self.placeholders);
        self
    }

    /// A placeholder and its value.
    pub(crate) fn bind(&mut self, value: impl Into<Arg>) -> &mut SqlBuilder {
        self.placeholder();
        self.args.push(value.into());
        self
    }

    /// A placeholder and the value written to `last_error`: `text` cut to
    /// [`LAST_ERROR_MAX_BYTES`](crate::record::LAST_ERROR_MAX_BYTES) at a character boundary. The
    /// one place a `last_error` is cut (marks and claim rejects both bind it here).
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
    /// SQLite's compile), so claims and marks of every batch size share a dozen texts instead of
    /// one per size. A repeated member changes no `IN`.
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
            self.sql.push_str(" = ANY(");
            self.bind(Arg::TextList(list));
            self.sql.push(')');
            self
        } else {
            self.sql.push_str(" IN ");
            self.bind_set(values)
        }
    }

    /// The dialect's lock on the partition row a partition mark reads
    /// ([`SqlDialect::fence_lock`]).
    pub(crate) fn fence_lock(&self) -> &'static str {
        self.dialect.fence_lock()
    }

    /// The dialect's partition index predicate ([`SqlDialect::partition_index_predicate`]).
    pub(crate) fn partition_index_predicate(&self) -> &'static str {
        self.dialect.partition_index_predicate()
    }

    /// The dialect's partition of a row ([`SqlDialect::partition_of_row`]).
    pub(crate) fn partition_of_row(&self) -> Option<&'static str> {
        self.dialect.partition_of_row()
    }

    /// The text of a fixed statement (no values bound yet).
    pub(crate) fn text(self) -> Arc<str> {
        debug_assert!(self.args.is_empty());
        self.sql.into()
    }

    /// The statement with its arguments.
    pub(crate) fn finish(self) -> Bound {
        debug_assert_eq!(self.args.len(), self.placeholders);
        Bound {
            sql: self.sql.into(),
            args: self.args,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
