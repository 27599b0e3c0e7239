//! The SQL every backend shares: statement texts per [`Dialect`], the embedded migrations, row
//! decoding (envelope → [`ClaimedEvent`] or [`RejectedRow`]) and the disposition → column values
//! of a mark.
//!
//! Every statement text is built here from static fragments and the validated [`TableName`] only;
//! every value is a bound parameter ([`Arg`]). The backends (`sqlite.rs`, `mysql.rs`,
//! `postgres.rs`) hold no SQL of their own; the transaction flows they share live in [`exec`].
//!
//! Statements of fixed shape are built once per store ([`Statements`]); those carrying an IN list
//! or a VALUES list are built per call.

pub(crate) mod exec;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::sync::Arc;

use prost::Message;

use super::{
    Backend, ClaimParams, ClaimedEvent, Disposition, FailedFilter, FailedRow, Lease, Mark,
    Ordering, RejectedRow, StatusCounts, TableName,
};
use crate::envelope::EventEnvelope;
use crate::publish::Event;
use crate::record::{self, Record, Status};

/// Most rows (or ids) one INSERT, UPDATE or IN list carries, so that bound parameters stay well
/// below every database's limit (SQLite 32766, MySQL and PostgreSQL 65535): a mark binds at most
/// 7 values per row, an insert 7.
pub const MAX_ROWS_PER_STATEMENT: usize = 1000;

/// The SQL flavour of a backend.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dialect {
    /// SQLite ≥ 3.35: `?` placeholders, no row locks (claims run in `BEGIN IMMEDIATE`),
    /// `UPDATE … RETURNING`.
    Sqlite,
    /// MariaDB ≥ 10.6 / MySQL ≥ 8.0: `?` placeholders, `FOR UPDATE SKIP LOCKED`, no
    /// `UPDATE … RETURNING`.
    MySql,
    /// PostgreSQL: `$n` placeholders, `FOR UPDATE SKIP LOCKED`, `UPDATE … RETURNING`.
    Postgres,
}

impl From<Backend> for Dialect {
    fn from(backend: Backend) -> Dialect {
        match backend {
            Backend::Sqlite => Dialect::Sqlite,
            Backend::MySql => Dialect::MySql,
            Backend::Postgres => Dialect::Postgres,
        }
    }
}

impl Dialect {
    /// Appended to a claim SELECT so concurrent claimers skip each other's rows.
    fn row_lock(self) -> &'static str {
        match self {
            Dialect::Sqlite => "",
            Dialect::MySql | Dialect::Postgres => " FOR UPDATE SKIP LOCKED",
        }
    }

    /// Written after the table name of a statement that addresses rows by primary key
    /// (`app_code = ? AND event_id IN (…)`). MySQL/MariaDB otherwise may walk a secondary index
    /// on the `app_code` prefix (small tables) or on the lease (`status`, `lock_until_ms`) and lock
    /// the entries of other workers' rows on the way: two claims' lease UPDATEs then deadlock
    /// (seen in tests/conformance.rs). By primary key a statement locks only its own rows.
    fn primary_key_access(self) -> &'static str {
        match self {
            Dialect::MySql => " FORCE INDEX (PRIMARY)",
            Dialect::Sqlite | Dialect::Postgres => "",
        }
    }

    /// Appended to the outbox INSERT: ignore a duplicate (app_code, event_id) and nothing else
    /// (`INSERT IGNORE` / `INSERT OR IGNORE` would also swallow other errors).
    fn ignore_duplicate_key(self) -> &'static str {
        match self {
            Dialect::Sqlite | Dialect::Postgres => " ON CONFLICT (app_code, event_id) DO NOTHING",
            Dialect::MySql => " ON DUPLICATE KEY UPDATE event_id = event_id",
        }
    }

    /// Whether `UPDATE … RETURNING` exists (MySQL/MariaDB lack it; marks there lock the fenced
    /// rows with `SELECT … FOR UPDATE` first).
    pub fn has_update_returning(self) -> bool {
        !matches!(self, Dialect::MySql)
    }

    /// Whether an INSERT's affected-row count includes ignored duplicates. sqlx connects to MySQL
    /// with `CLIENT_FOUND_ROWS`, so `ON DUPLICATE KEY UPDATE event_id = event_id` counts a
    /// duplicate as 1; `save` then subtracts the ids that already existed.
    pub(crate) fn insert_counts_duplicates(self) -> bool {
        matches!(self, Dialect::MySql)
    }
}

/// A value bound to a placeholder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Arg {
    /// A string (ids, types, error text).
    Text(String),
    /// A 64-bit integer (times, limits, versions).
    Int(i64),
    /// Bytes (the envelope).
    Bytes(Vec<u8>),
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
pub(crate) struct Bound {
    /// The SQL text.
    pub(crate) sql: Arc<str>,
    /// One value per placeholder.
    pub(crate) args: Vec<Arg>,
}

/// Writes a statement and its arguments together, so placeholders and values cannot drift apart.
struct SqlBuilder {
    dialect: Dialect,
    sql: String,
    args: Vec<Arg>,
    placeholders: usize,
}

impl SqlBuilder {
    fn new(dialect: Dialect) -> SqlBuilder {
        SqlBuilder {
            dialect,
            sql: String::with_capacity(256),
            args: Vec::new(),
            placeholders: 0,
        }
    }

    fn push(&mut self, fragment: &str) -> &mut SqlBuilder {
        self.sql.push_str(fragment);
        self
    }

    /// A string literal from a static status name (never a caller's value).
    fn status(&mut self, status: Status) -> &mut SqlBuilder {
        self.sql.push('\'');
        self.sql.push_str(status.as_str());
        self.sql.push('\'');
        self
    }

    /// A placeholder whose value is supplied at execution time (fixed statements).
    fn placeholder(&mut self) -> &mut SqlBuilder {
        self.placeholders += 1;
        match self.dialect {
            Dialect::Postgres => {
                let _ = write!(self.sql, "${}", self.placeholders);
            }
            Dialect::Sqlite | Dialect::MySql => self.sql.push('?'),
        }
        self
    }

    /// A placeholder and its value.
    fn bind(&mut self, value: impl Into<Arg>) -> &mut SqlBuilder {
        self.placeholder();
        self.args.push(value.into());
        self
    }

    /// `(?, ?, …)` binding every value.
    fn bind_list<V: Into<Arg>>(&mut self, values: impl IntoIterator<Item = V>) -> &mut SqlBuilder {
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

    /// The text of a fixed statement (no values bound yet).
    fn text(self) -> Arc<str> {
        debug_assert!(self.args.is_empty());
        self.sql.into()
    }

    fn finish(self) -> Bound {
        debug_assert_eq!(self.args.len(), self.placeholders);
        Bound {
            sql: self.sql.into(),
            args: self.args,
        }
    }
}

/// The three sources of a claim, read in this order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClaimBranch {
    /// `pending` rows by (created_at_ms, event_id).
    Pending,
    /// `retryable` rows with `next_retry_at_ms <= now`, by (next_retry_at_ms, created_at_ms, event_id).
    Retryable,
    /// `delivering` rows with `lock_until_ms <= now` (a dead worker's), by (lock_until_ms,
    /// created_at_ms, event_id). Reclaiming one counts as an attempt.
    ExpiredLease,
}

impl ClaimBranch {
    /// Every branch, in claim order.
    pub const ALL: [ClaimBranch; 3] = [
        ClaimBranch::Pending,
        ClaimBranch::Retryable,
        ClaimBranch::ExpiredLease,
    ];

    fn index(self) -> usize {
        match self {
            ClaimBranch::Pending => 0,
            ClaimBranch::Retryable => 1,
            ClaimBranch::ExpiredLease => 2,
        }
    }
}

fn ordering_index(ordering: Ordering) -> usize {
    match ordering {
        Ordering::None => 0,
        Ordering::PerRoom => 1,
    }
}

/// The fixed statements of one store, built once at connect from the dialect and table name.
#[derive(Debug, Clone)]
pub struct Statements {
    dialect: Dialect,
    table: TableName,
    /// `[branch][ordering]`.
    claim: [[Arc<str>; 2]; 3],
    /// `[all tenants, one tenant]`.
    counts: [Arc<str>; 2],
}

impl Statements {
    /// Builds the statements for `table` in `dialect`.
    pub fn new(dialect: Dialect, table: &TableName) -> Statements {
        let claim = ClaimBranch::ALL.map(|branch| {
            [Ordering::None, Ordering::PerRoom]
                .map(|ordering| claim_select_text(dialect, table, branch, ordering))
        });
        let counts = [false, true].map(|by_app| counts_text(dialect, table, by_app));
        Statements {
            dialect,
            table: table.clone(),
            claim,
            counts,
        }
    }

    /// The dialect.
    pub fn dialect(&self) -> Dialect {
        self.dialect
    }

    /// The outbox table.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// The SELECT of one claim branch, e.g. for `EXPLAIN` in tests. It returns `event_id,
    /// event_type, room_id, envelope, created_at_ms, retry_count` and binds, in order:
    /// `app_code` (text), then `now_ms` (bigint) for [`ClaimBranch::Retryable`] and
    /// [`ClaimBranch::ExpiredLease`] only, then the row limit (bigint).
    pub fn claim_select(&self, branch: ClaimBranch, ordering: Ordering) -> &str {
        &self.claim[branch.index()][ordering_index(ordering)]
    }

    /// One claim branch with its arguments.
    pub(crate) fn claim_query(
        &self,
        branch: ClaimBranch,
        params: &ClaimParams,
        limit: usize,
    ) -> Bound {
        let mut args = vec![Arg::from(params.app_code.as_str())];
        if branch != ClaimBranch::Pending {
            args.push(Arg::Int(params.now_ms));
        }
        args.push(Arg::Int(limit as i64));
        Bound {
            sql: self.claim[branch.index()][ordering_index(params.ordering)].clone(),
            args,
        }
    }

    /// `status, COUNT(*), MIN(created_at_ms)` per status, for every tenant or one.
    pub(crate) fn counts_query(&self, app_code: Option<&str>) -> Bound {
        match app_code {
            None => Bound {
                sql: self.counts[0].clone(),
                args: Vec::new(),
            },
            Some(app_code) => Bound {
                sql: self.counts[1].clone(),
                args: vec![Arg::from(app_code)],
            },
        }
    }
}

/// Statuses that block a later event of the same room under [`Ordering::PerRoom`].
const ACTIVE_STATUSES: [Status; 3] = [Status::Pending, Status::Retryable, Status::Delivering];

/// Expression that adds the reclaimed-lease attempt: rows still `delivering` when the claim
/// updates them came from the expired-lease branch. It must be the first assignment of its UPDATE:
/// MySQL evaluates SET left to right, with `status` already changed by later assignments.
fn retry_count_after_reclaim(b: &mut SqlBuilder) {
    b.push("retry_count = CASE WHEN status = ")
        .status(Status::Delivering)
        .push(" THEN retry_count + 1 ELSE retry_count END");
}

fn claim_select_text(
    dialect: Dialect,
    table: &TableName,
    branch: ClaimBranch,
    ordering: Ordering,
) -> Arc<str> {
    let mut b = SqlBuilder::new(dialect);
    b.push("SELECT c.event_id, c.event_type, c.room_id, c.envelope, c.created_at_ms, c.retry_count FROM ")
        .push(table.as_str())
        .push(" c WHERE c.app_code = ")
        .placeholder()
        .push(" AND c.status = ");
    let order_by = match branch {
        ClaimBranch::Pending => {
            b.status(Status::Pending);
            "c.created_at_ms, c.event_id"
        }
        ClaimBranch::Retryable => {
            b.status(Status::Retryable)
                .push(" AND c.next_retry_at_ms <= ")
                .placeholder();
            "c.next_retry_at_ms, c.created_at_ms, c.event_id"
        }
        ClaimBranch::ExpiredLease => {
            b.status(Status::Delivering)
                .push(" AND c.lock_until_ms <= ")
                .placeholder();
            "c.lock_until_ms, c.created_at_ms, c.event_id"
        }
    };
    if ordering == Ordering::PerRoom {
        // One probe of the (app_code, room_id, status, created_at_ms, event_id) index per active
        // status: is there an earlier event of this room still to deliver? Delivered history sits
        // under other status keys and is never read. One NOT EXISTS per status, each with
        // `status = const`: with `status IN (…)` MariaDB probes only (app_code, room_id) and reads
        // the room's whole history (tests/explain.rs).
        for status in ACTIVE_STATUSES {
            b.push(" AND NOT EXISTS (SELECT 1 FROM ")
                .push(table.as_str())
                .push(" p WHERE p.app_code = c.app_code AND p.room_id = c.room_id AND p.status = ")
                .status(status)
                .push(" AND p.created_at_ms <= c.created_at_ms")
                .push(" AND (p.created_at_ms < c.created_at_ms OR p.event_id < c.event_id)")
                .push(probe_end(dialect));
        }
    }
    b.push(" ORDER BY ")
        .push(order_by)
        .push(" LIMIT ")
        .placeholder()
        .push(dialect.row_lock());
    b.text()
}

fn counts_text(dialect: Dialect, table: &TableName, by_app: bool) -> Arc<str> {
    let mut b = SqlBuilder::new(dialect);
    b.push("SELECT status, COUNT(*), MIN(created_at_ms) FROM ")
        .push(table.as_str());
    if by_app {
        b.push(" WHERE app_code = ").placeholder();
    }
    b.push(" GROUP BY status");
    b.text()
}

/// The multi-row INSERT of new `pending` rows (`records` at most [`MAX_ROWS_PER_STATEMENT`]),
/// ignoring ids already present.
pub(crate) fn insert_records(dialect: Dialect, table: &TableName, records: &[&Record]) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("INSERT INTO ")
        .push(table.as_str())
        .push(" (")
        .push(&OUTBOX_COLUMNS.join(", "))
        .push(") VALUES ");
    for (i, record) in records.iter().enumerate() {
        if i > 0 {
            b.push(", ");
        }
        b.push("(")
            .bind(record.app_code.as_str())
            .push(", ")
            .bind(record.event_id.as_str())
            .push(", ")
            .bind(record.event_type.as_str())
            .push(", ")
            .bind(record.room_id.as_str())
            .push(", ")
            .status(Status::Pending)
            .push(", ")
            .bind(record.encoded_envelope())
            .push(", ")
            .bind(record.created_at_ms)
            .push(", 0, NULL, '', NULL, 0, ")
            .bind(record.created_at_ms)
            .push(")");
    }
    b.push(dialect.ignore_duplicate_key());
    b.finish()
}

/// How many of `event_ids` of tenant `app_code` already exist (MySQL only: see
/// [`Dialect::insert_counts_duplicates`]). A plain consistent read: locking reads here would make
/// concurrent producers deadlock on the index gap their new ids share. `app_code = ? AND
/// event_id IN (…)` is a primary-key range; MariaDB plans a row-constructor
/// `(app_code, event_id) IN ((?, ?), …)` of hundreds of pairs as a scan (1.2 s for 1000 pairs on
/// a 5k-row table), and turns IN lists of [`COUNT_EXISTING_MAX_IDS`] or more into a derived table.
pub(crate) fn count_existing(
    dialect: Dialect,
    table: &TableName,
    app_code: &str,
    event_ids: &[&str],
) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("SELECT COUNT(*) FROM ")
        .push(table.as_str())
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND event_id IN (");
    for (i, event_id) in event_ids.iter().enumerate() {
        if i > 0 {
            b.push(", ");
        }
        b.bind(*event_id);
    }
    b.push(")");
    b.finish()
}

/// Most ids in one [`count_existing`] statement (below MariaDB's `in_predicate_conversion_threshold`).
pub(crate) const COUNT_EXISTING_MAX_IDS: usize = 500;

/// The records to insert: the first of each (app_code, event_id), like the database would keep.
pub(crate) fn distinct_records(records: &[Record]) -> Vec<&Record> {
    let mut seen = HashSet::with_capacity(records.len());
    records
        .iter()
        .filter(|r| seen.insert((r.app_code.as_str(), r.event_id.as_str())))
        .collect()
}

/// Leases claimed rows to the worker (one UPDATE; `event_ids` at most [`MAX_ROWS_PER_STATEMENT`]).
pub(crate) fn lease_rows(
    dialect: Dialect,
    table: &TableName,
    lease: &Lease,
    now_ms: i64,
    event_ids: &[&str],
) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("UPDATE ")
        .push(table.as_str())
        .push(dialect.primary_key_access())
        .push(" SET ");
    retry_count_after_reclaim(&mut b);
    b.push(", status = ")
        .status(Status::Delivering)
        .push(", worker_id = ")
        .bind(lease.worker_id.as_str())
        .push(", lock_until_ms = ")
        .bind(lease.lock_until_ms)
        .push(", updated_at_ms = ")
        .bind(now_ms)
        .push(" WHERE app_code = ")
        .bind(lease.app_code.as_str())
        .push(" AND event_id IN ")
        .bind_list(event_ids.iter().copied());
    b.finish()
}

/// Moves rows the claim rejected to `failed` with their reason. `worker_id` keeps the last
/// worker that held the row.
pub(crate) fn reject_rows(
    dialect: Dialect,
    table: &TableName,
    app_code: &str,
    now_ms: i64,
    rejected: &[RejectedRow],
) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("UPDATE ")
        .push(table.as_str())
        .push(dialect.primary_key_access())
        .push(" SET ");
    retry_count_after_reclaim(&mut b);
    b.push(", status = ")
        .status(Status::Failed)
        .push(", lock_until_ms = NULL, last_error = CASE event_id");
    for row in rejected {
        b.push(" WHEN ")
            .bind(row.event_id.as_str())
            .push(" THEN ")
            .bind(row.reason.as_str());
    }
    b.push(" ELSE last_error END, updated_at_ms = ")
        .bind(now_ms)
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND event_id IN ")
        .bind_list(rejected.iter().map(|r| r.event_id.as_str()));
    b.finish()
}

/// The column values one [`Disposition`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MarkColumns {
    /// New status.
    pub(crate) status: Status,
    /// Whether `retry_count` goes up by one (a failed attempt).
    pub(crate) failed_attempt: bool,
    /// New `next_retry_at_ms`, when it changes.
    pub(crate) next_retry_at_ms: Option<i64>,
    /// New `last_error` (cut to 512 bytes); `None` clears it.
    pub(crate) last_error: Option<String>,
}

impl MarkColumns {
    /// The columns `disposition` writes. Every disposition also clears `lock_until_ms` and sets
    /// `updated_at_ms`; `worker_id` keeps the worker that handled the row last.
    pub(crate) fn of(disposition: &Disposition) -> MarkColumns {
        match disposition {
            Disposition::Delivered => MarkColumns {
                status: Status::Delivered,
                failed_attempt: false,
                next_retry_at_ms: None,
                last_error: None,
            },
            Disposition::Retryable {
                next_retry_at_ms,
                error,
            } => MarkColumns {
                status: Status::Retryable,
                failed_attempt: true,
                next_retry_at_ms: Some(*next_retry_at_ms),
                last_error: Some(record::truncate_error(error)),
            },
            Disposition::Failed { error } => MarkColumns {
                status: Status::Failed,
                failed_attempt: true,
                next_retry_at_ms: None,
                last_error: Some(record::truncate_error(error)),
            },
        }
    }
}

/// `app_code = ? AND status = 'delivering' AND worker_id = ? AND lock_until_ms = ? AND event_id IN (…)`:
/// a row changes only while the claim's lease is still on it.
fn lease_fence(b: &mut SqlBuilder, lease: &Lease, marks: &[Mark]) {
    b.push(" WHERE app_code = ")
        .bind(lease.app_code.as_str())
        .push(" AND status = ")
        .status(Status::Delivering)
        .push(" AND worker_id = ")
        .bind(lease.worker_id.as_str())
        .push(" AND lock_until_ms = ")
        .bind(lease.lock_until_ms)
        .push(" AND event_id IN ")
        .bind_list(marks.iter().map(|m| m.event_id.as_str()));
}

/// The one fenced UPDATE applying `marks` (at most [`MAX_ROWS_PER_STATEMENT`], distinct ids),
/// with `RETURNING event_id` where the dialect has it.
pub(crate) fn mark_rows(
    dialect: Dialect,
    table: &TableName,
    lease: &Lease,
    marks: &[Mark],
    now_ms: i64,
) -> Bound {
    let columns: Vec<(&str, MarkColumns)> = marks
        .iter()
        .map(|m| (m.event_id.as_str(), MarkColumns::of(&m.disposition)))
        .collect();
    let mut b = SqlBuilder::new(dialect);
    b.push("UPDATE ")
        .push(table.as_str())
        .push(dialect.primary_key_access())
        .push(" SET status = CASE event_id");
    for (event_id, cols) in &columns {
        b.push(" WHEN ")
            .bind(*event_id)
            .push(" THEN ")
            .status(cols.status);
    }
    b.push(" ELSE status END");
    if columns.iter().any(|(_, c)| c.failed_attempt) {
        b.push(", retry_count = CASE event_id");
        for (event_id, _) in columns.iter().filter(|(_, c)| c.failed_attempt) {
            b.push(" WHEN ")
                .bind(*event_id)
                .push(" THEN retry_count + 1");
        }
        b.push(" ELSE retry_count END");
    }
    if columns.iter().any(|(_, c)| c.next_retry_at_ms.is_some()) {
        b.push(", next_retry_at_ms = CASE event_id");
        for (event_id, cols) in &columns {
            if let Some(at) = cols.next_retry_at_ms {
                b.push(" WHEN ").bind(*event_id).push(" THEN ").bind(at);
            }
        }
        b.push(" ELSE next_retry_at_ms END");
    }
    if columns.iter().any(|(_, c)| c.last_error.is_some()) {
        b.push(", last_error = CASE event_id");
        for (event_id, cols) in &columns {
            if let Some(error) = &cols.last_error {
                b.push(" WHEN ")
                    .bind(*event_id)
                    .push(" THEN ")
                    .bind(error.as_str());
            }
        }
        b.push(" ELSE NULL END");
    } else {
        b.push(", last_error = NULL");
    }
    b.push(", lock_until_ms = NULL, updated_at_ms = ")
        .bind(now_ms);
    lease_fence(&mut b, lease, marks);
    if dialect.has_update_returning() {
        b.push(" RETURNING event_id");
    }
    b.finish()
}

/// MySQL: locks and lists the rows of `marks` still under the lease, before [`mark_rows`].
pub(crate) fn lock_fenced_rows(
    dialect: Dialect,
    table: &TableName,
    lease: &Lease,
    marks: &[Mark],
) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("SELECT event_id FROM ")
        .push(table.as_str())
        .push(dialect.primary_key_access());
    lease_fence(&mut b, lease, marks);
    b.push(" FOR UPDATE");
    b.finish()
}

/// ` WHERE status = 'failed' AND …` for every filter given.
fn failed_where(b: &mut SqlBuilder, filter: &FailedFilter) {
    b.push(" WHERE status = ").status(Status::Failed);
    if let Some(app_code) = &filter.app_code {
        b.push(" AND app_code = ").bind(app_code.as_str());
    }
    if !filter.event_ids.is_empty() {
        b.push(" AND event_id IN ")
            .bind_list(filter.event_ids.iter().map(String::as_str));
    }
    if let Some(event_type) = &filter.event_type {
        b.push(" AND event_type = ").bind(event_type.as_str());
    }
    if let Some(room_id) = &filter.room_id {
        b.push(" AND room_id = ").bind(room_id.as_str());
    }
    if let Some(since) = filter.since_ms {
        b.push(" AND created_at_ms >= ").bind(since);
    }
    if let Some(until) = filter.until_ms {
        b.push(" AND created_at_ms < ").bind(until);
    }
}

/// `failed` rows matching `filter`, oldest first.
pub(crate) fn select_failed(
    dialect: Dialect,
    table: &TableName,
    filter: &FailedFilter,
    limit: u32,
) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push(
        "SELECT app_code, event_id, event_type, room_id, retry_count, last_error, created_at_ms, updated_at_ms FROM ",
    )
    .push(table.as_str());
    failed_where(&mut b, filter);
    b.push(" ORDER BY created_at_ms, event_id LIMIT ")
        .bind(i64::from(limit));
    b.finish()
}

/// How many `failed` rows match `filter` (a dry-run requeue).
pub(crate) fn count_failed(dialect: Dialect, table: &TableName, filter: &FailedFilter) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("SELECT COUNT(*) FROM ").push(table.as_str());
    failed_where(&mut b, filter);
    b.finish()
}

/// Moves `failed` rows matching `filter` back to `pending` as if new, keeping `last_error`.
pub(crate) fn requeue_failed(
    dialect: Dialect,
    table: &TableName,
    filter: &FailedFilter,
    now_ms: i64,
) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("UPDATE ")
        .push(table.as_str())
        .push(" SET status = ")
        .status(Status::Pending)
        .push(", retry_count = 0, next_retry_at_ms = 0, worker_id = '', lock_until_ms = NULL, updated_at_ms = ")
        .bind(now_ms);
    failed_where(&mut b, filter);
    b.finish()
}

/// Typed access to the columns of a result row, by position.
pub(crate) trait Columns {
    /// A non-null text column.
    fn text(&self, index: usize) -> Result<String, sqlx::Error>;
    /// A nullable text column.
    fn opt_text(&self, index: usize) -> Result<Option<String>, sqlx::Error>;
    /// A BIGINT column or COUNT/MIN aggregate.
    fn int(&self, index: usize) -> Result<i64, sqlx::Error>;
    /// An INT column (`retry_count`).
    fn int32(&self, index: usize) -> Result<i32, sqlx::Error>;
    /// A BLOB/BYTEA column.
    fn bytes(&self, index: usize) -> Result<Vec<u8>, sqlx::Error>;
}

impl<R> Columns for R
where
    R: sqlx::Row,
    usize: sqlx::ColumnIndex<R>,
    String: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Option<String>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i64: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    i32: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
    Vec<u8>: for<'r> sqlx::Decode<'r, R::Database> + sqlx::Type<R::Database>,
{
    fn text(&self, index: usize) -> Result<String, sqlx::Error> {
        self.try_get(index)
    }
    fn opt_text(&self, index: usize) -> Result<Option<String>, sqlx::Error> {
        self.try_get(index)
    }
    fn int(&self, index: usize) -> Result<i64, sqlx::Error> {
        self.try_get(index)
    }
    fn int32(&self, index: usize) -> Result<i32, sqlx::Error> {
        self.try_get(index)
    }
    fn bytes(&self, index: usize) -> Result<Vec<u8>, sqlx::Error> {
        self.try_get(index)
    }
}

/// A value decoded from one result row.
pub(crate) trait FromColumns: Sized {
    /// Decodes the row.
    fn from_columns(row: &dyn Columns) -> Result<Self, sqlx::Error>;
}

/// A single BIGINT column (COUNT(*), a migration version).
pub(crate) struct Int(pub(crate) i64);

impl FromColumns for Int {
    fn from_columns(row: &dyn Columns) -> Result<Int, sqlx::Error> {
        Ok(Int(row.int(0)?))
    }
}

/// A single `event_id` column.
pub(crate) struct EventId(pub(crate) String);

impl FromColumns for EventId {
    fn from_columns(row: &dyn Columns) -> Result<EventId, sqlx::Error> {
        Ok(EventId(row.text(0)?))
    }
}

/// One row of a claim branch ([`Statements::claim_select`]).
#[derive(Debug, Clone)]
pub(crate) struct CandidateRow {
    pub(crate) event_id: String,
    pub(crate) event_type: String,
    pub(crate) room_id: String,
    pub(crate) envelope: Vec<u8>,
    pub(crate) created_at_ms: i64,
    pub(crate) retry_count: i32,
}

impl FromColumns for CandidateRow {
    fn from_columns(row: &dyn Columns) -> Result<CandidateRow, sqlx::Error> {
        Ok(CandidateRow {
            event_id: row.text(0)?,
            event_type: row.text(1)?,
            room_id: row.text(2)?,
            envelope: row.bytes(3)?,
            created_at_ms: row.int(4)?,
            retry_count: row.int32(5)?,
        })
    }
}

/// One row of the counts query: status, rows, oldest `created_at_ms`.
pub(crate) struct StatusCountRow {
    status: String,
    rows: i64,
    oldest_created_at_ms: i64,
}

impl FromColumns for StatusCountRow {
    fn from_columns(row: &dyn Columns) -> Result<StatusCountRow, sqlx::Error> {
        Ok(StatusCountRow {
            status: row.text(0)?,
            rows: row.int(1)?,
            oldest_created_at_ms: row.int(2)?,
        })
    }
}

/// Folds the counts query's rows into [`StatusCounts`]; unknown status values are ignored.
pub(crate) fn status_counts(rows: &[StatusCountRow], now_ms: i64) -> StatusCounts {
    let mut counts = StatusCounts::default();
    for row in rows {
        let n = u64::try_from(row.rows).unwrap_or(0);
        match Status::parse(&row.status) {
            Some(Status::Pending) => {
                counts.pending = n;
                counts.oldest_pending_age_ms = Some((now_ms - row.oldest_created_at_ms).max(0));
            }
            Some(Status::Delivering) => counts.delivering = n,
            Some(Status::Retryable) => counts.retryable = n,
            Some(Status::Failed) => counts.failed = n,
            Some(Status::Delivered) => counts.delivered = n,
            None => {}
        }
    }
    counts
}

impl FromColumns for FailedRow {
    fn from_columns(row: &dyn Columns) -> Result<FailedRow, sqlx::Error> {
        Ok(FailedRow {
            app_code: row.text(0)?,
            event_id: row.text(1)?,
            event_type: row.text(2)?,
            room_id: row.text(3)?,
            retry_count: u32::try_from(row.int32(4)?).unwrap_or(0),
            last_error: row.opt_text(5)?,
            created_at_ms: row.int(6)?,
            updated_at_ms: row.int(7)?,
        })
    }
}

/// Decides what a claim does with one candidate row of `branch`: hand it out (envelope decoded,
/// empty envelope fields filled from the row, `attempt = retry_count + 1`) or reject it to
/// `failed` (envelope does not decode, names another tenant or event, or a reclaimed lease used
/// the last attempt).
pub(crate) fn judge(
    app_code: &str,
    row: CandidateRow,
    branch: ClaimBranch,
    max_attempts: u32,
) -> Result<ClaimedEvent, RejectedRow> {
    let reclaimed = branch == ClaimBranch::ExpiredLease;
    let retry_count = u32::try_from(row.retry_count).unwrap_or(0) + u32::from(reclaimed);
    let reject = |row: CandidateRow, reason: String| RejectedRow {
        event_id: row.event_id,
        event_type: row.event_type,
        room_id: row.room_id,
        reason: record::truncate_error(&reason),
    };
    if reclaimed && retry_count >= max_attempts {
        return Err(reject(
            row,
            format!(
                "lease expired without a result (worker died?); \
                 gave up after {retry_count} of {max_attempts} attempts"
            ),
        ));
    }
    let mut envelope = match EventEnvelope::decode(row.envelope.as_slice()) {
        Ok(envelope) => envelope,
        Err(err) => return Err(reject(row, format!("envelope does not decode: {err}"))),
    };
    if !envelope.app_code.is_empty() && envelope.app_code != app_code {
        let reason = format!(
            "envelope app_code {:?} does not match the row's {:?}",
            envelope.app_code, app_code
        );
        return Err(reject(row, reason));
    }
    if !envelope.event_id.is_empty() && envelope.event_id != row.event_id {
        let reason = format!(
            "envelope event_id {:?} does not match the row's {:?}",
            envelope.event_id, row.event_id
        );
        return Err(reject(row, reason));
    }
    if envelope.room_id.is_empty() {
        envelope.room_id = row.room_id;
    }
    if envelope.event_type.is_empty() {
        envelope.event_type = row.event_type;
    }
    Ok(ClaimedEvent {
        event: Event {
            app_code: app_code.to_string(),
            event_id: row.event_id,
            event_type: envelope.event_type,
            room_id: envelope.room_id,
            room_version: envelope.room_version,
            occurred_at_ms: envelope.occurred_at_ms,
            body: envelope.body,
            attempt: retry_count + 1,
        },
        retry_count,
        created_at_ms: row.created_at_ms,
    })
}

/// One embedded schema migration (`migrations/<backend>/NNNN_name.sql`), written with the
/// placeholder `{{table}}` for the outbox table.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// Version recorded in `outboxd_migrations`.
    pub version: i64,
    /// File name without `.sql`.
    pub name: &'static str,
    template: &'static str,
}

impl Migration {
    /// The migration's SQL for `table`.
    pub fn sql(&self, table: &TableName) -> String {
        self.template.replace("{{table}}", table.as_str())
    }
}

const SQLITE_MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_room_outbox",
    template: include_str!("../../../migrations/sqlite/0001_room_outbox.sql"),
}];

const MYSQL_MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_room_outbox",
    template: include_str!("../../../migrations/mysql/0001_room_outbox.sql"),
}];

const POSTGRES_MIGRATIONS: &[Migration] = &[Migration {
    version: 1,
    name: "0001_room_outbox",
    template: include_str!("../../../migrations/postgres/0001_room_outbox.sql"),
}];

/// The embedded migrations of `dialect`, oldest first.
pub fn migrations(dialect: Dialect) -> &'static [Migration] {
    match dialect {
        Dialect::Sqlite => SQLITE_MIGRATIONS,
        Dialect::MySql => MYSQL_MIGRATIONS,
        Dialect::Postgres => POSTGRES_MIGRATIONS,
    }
}

/// Creates the bookkeeping table `outboxd_migrations(table_name, version, applied_at_ms)`: one
/// row per outbox table and migration applied.
pub(crate) fn create_bookkeeping(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Sqlite | Dialect::Postgres => {
            "CREATE TABLE IF NOT EXISTS outboxd_migrations (\
             table_name VARCHAR(64) NOT NULL, version BIGINT NOT NULL, applied_at_ms BIGINT NOT NULL, \
             PRIMARY KEY (table_name, version))"
        }
        Dialect::MySql => {
            "CREATE TABLE IF NOT EXISTS outboxd_migrations (\
             table_name VARCHAR(64) NOT NULL, version BIGINT NOT NULL, applied_at_ms BIGINT NOT NULL, \
             PRIMARY KEY (table_name, version)) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
        }
    }
}

/// Closes a per-room probe. On PostgreSQL `OFFSET 0` keeps the `NOT EXISTS` a correlated subplan
/// (the planner never pulls a sublink with an OFFSET up into an anti-join), so each candidate
/// probes the room index with its own (app_code, room_id) instead of the planner joining against
/// every active row of the tenant when its statistics are stale (a freshly filled table):
/// measured 9.4 s → milliseconds per claim of 500 with 20k fresh rows.
fn probe_end(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::Postgres => " OFFSET 0)",
        Dialect::Sqlite | Dialect::MySql => ")",
    }
}

/// Run once on every connection of a MySQL/MariaDB store's own pool, before any transaction.
///
/// Under the default `REPEATABLE READ`, a claim's `FOR UPDATE SKIP LOCKED` scan keeps next-key
/// (gap) locks on every index record it read, including candidates the per-room probe filtered
/// out, and a concurrent mark's UPDATE, inserting into those index gaps, deadlocks with it.
/// `READ COMMITTED` locks only the rows returned. (With binary logging it needs `binlog_format`
/// ROW or MIXED, the defaults.) The producers' `save` runs in the caller's transaction, at the
/// caller's isolation level.
pub(crate) const MYSQL_SESSION_SETUP: &str =
    "SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED";

/// Serializes concurrent `migrate` runs where the transaction alone does not (PostgreSQL's
/// `CREATE TABLE IF NOT EXISTS` races; SQLite runs in `BEGIN IMMEDIATE`; MySQL's DDL commits
/// implicitly and is idempotent).
pub(crate) fn migration_lock(dialect: Dialect) -> Option<&'static str> {
    match dialect {
        // Any constant: "outboxd" in ASCII.
        Dialect::Postgres => Some("SELECT pg_advisory_xact_lock(31366054425523556)"),
        Dialect::Sqlite | Dialect::MySql => None,
    }
}

/// Versions already applied to `table`.
pub(crate) fn applied_versions(dialect: Dialect, table: &TableName) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("SELECT version FROM outboxd_migrations WHERE table_name = ")
        .bind(table.as_str());
    b.finish()
}

/// Records a migration as applied to `table`.
pub(crate) fn record_version(
    dialect: Dialect,
    table: &TableName,
    version: i64,
    now_ms: i64,
) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("INSERT INTO outboxd_migrations (table_name, version, applied_at_ms) VALUES ")
        .bind_list([
            Arg::from(table.as_str()),
            Arg::Int(version),
            Arg::Int(now_ms),
        ])
        .push(match dialect {
            Dialect::Sqlite | Dialect::Postgres => " ON CONFLICT (table_name, version) DO NOTHING",
            Dialect::MySql => " ON DUPLICATE KEY UPDATE version = version",
        });
    b.finish()
}

/// Every column of the outbox table (migration 0001), in table order: the outbox INSERT lists them
/// in this order and `migrate` checks that the table has them all.
pub(crate) const OUTBOX_COLUMNS: [&str; 13] = [
    "app_code",
    "event_id",
    "event_type",
    "room_id",
    "status",
    "envelope",
    "created_at_ms",
    "retry_count",
    "last_error",
    "worker_id",
    "lock_until_ms",
    "next_retry_at_ms",
    "updated_at_ms",
];

/// One index the claims need (migration 0001's `idx_<table>_<suffix>`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ClaimIndex {
    /// The name is `idx_<table>_<suffix>`.
    suffix: &'static str,
    /// Key columns, in order.
    pub(crate) columns: &'static [&'static str],
}

impl ClaimIndex {
    /// The index name for `table` (at most 60 bytes: table names have at most 48).
    pub(crate) fn name(&self, table: &TableName) -> String {
        format!("idx_{}_{}", table.as_str(), self.suffix)
    }
}

/// The claim indexes of migration 0001; `migrate` checks (and creates) them on every run, so an
/// adopted table gets them too.
pub(crate) static CLAIM_INDEXES: [ClaimIndex; 4] = [
    ClaimIndex {
        suffix: "pending",
        columns: &["app_code", "status", "created_at_ms", "event_id"],
    },
    ClaimIndex {
        suffix: "retry",
        columns: &[
            "app_code",
            "status",
            "next_retry_at_ms",
            "created_at_ms",
            "event_id",
        ],
    },
    ClaimIndex {
        suffix: "lease",
        columns: &[
            "app_code",
            "status",
            "lock_until_ms",
            "created_at_ms",
            "event_id",
        ],
    },
    ClaimIndex {
        suffix: "room",
        columns: &["app_code", "room_id", "status", "created_at_ms", "event_id"],
    },
];

/// The table name as the catalog stores it: PostgreSQL folds unquoted identifiers to lower case.
fn catalog_name(dialect: Dialect, table: &TableName) -> String {
    match dialect {
        Dialect::Postgres => table.as_str().to_ascii_lowercase(),
        Dialect::Sqlite | Dialect::MySql => table.as_str().to_string(),
    }
}

/// The column names of `table` (none when it does not exist).
pub(crate) fn table_columns(dialect: Dialect, table: &TableName) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push(match dialect {
        Dialect::Sqlite => "SELECT name FROM pragma_table_info(",
        Dialect::MySql => {
            "SELECT column_name FROM information_schema.columns \
             WHERE table_schema = DATABASE() AND table_name = "
        }
        Dialect::Postgres => {
            "SELECT column_name::text FROM information_schema.columns \
             WHERE table_schema = current_schema() AND table_name = "
        }
    })
    .bind(catalog_name(dialect, table));
    if dialect == Dialect::Sqlite {
        b.push(")");
    }
    b.finish()
}

/// The indexes of `table`: one row per key column (`index name, column name`; the column is NULL
/// for an expression), ordered by index name and position.
pub(crate) fn table_index_columns(dialect: Dialect, table: &TableName) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    match dialect {
        Dialect::Sqlite => {
            b.push("SELECT il.name, ii.name FROM pragma_index_list(")
                .bind(catalog_name(dialect, table))
                .push(") il JOIN pragma_index_info(il.name) ii ORDER BY il.name, ii.seqno");
        }
        Dialect::MySql => {
            b.push(
                "SELECT index_name, column_name FROM information_schema.statistics \
                 WHERE table_schema = DATABASE() AND table_name = ",
            )
            .bind(catalog_name(dialect, table))
            .push(" ORDER BY index_name, seq_in_index");
        }
        Dialect::Postgres => {
            b.push(
                "SELECT i.relname::text, a.attname::text FROM pg_index x \
                 JOIN pg_class t ON t.oid = x.indrelid \
                 JOIN pg_namespace n ON n.oid = t.relnamespace \
                 JOIN pg_class i ON i.oid = x.indexrelid \
                 CROSS JOIN LATERAL unnest(x.indkey::int2[]) WITH ORDINALITY AS k(attnum, ord) \
                 LEFT JOIN pg_attribute a ON a.attrelid = t.oid AND a.attnum = k.attnum \
                 WHERE n.nspname = current_schema() AND t.relname::text = ",
            )
            .bind(catalog_name(dialect, table))
            .push(" AND k.ord <= x.indnkeyatts ORDER BY i.relname, k.ord");
        }
    }
    b.finish()
}

/// The catalog query behind migrate's claim-index check, for tools and tests that read a
/// table's indexes on their own connection: the statement (one row per key column, `index name,
/// column name`, the column NULL for an expression, ordered by index and position) and the one
/// value to bind to its placeholder, `table` as the catalog stores it.
pub fn index_columns_query(dialect: Dialect, table: &TableName) -> (String, String) {
    (
        table_index_columns(dialect, table).sql.to_string(),
        catalog_name(dialect, table),
    )
}

/// `CREATE INDEX` of a claim index on `table` (static columns, name from the validated table).
pub(crate) fn create_claim_index(table: &TableName, index: &ClaimIndex) -> String {
    format!(
        "CREATE INDEX {} ON {} ({})",
        index.name(table),
        table.as_str(),
        index.columns.join(", ")
    )
}

/// The statement that drops index `name` of `table`, for an operator to run.
pub(crate) fn drop_index_hint(dialect: Dialect, table: &TableName, name: &str) -> String {
    match dialect {
        Dialect::MySql => format!("DROP INDEX {name} ON {}", table.as_str()),
        Dialect::Sqlite | Dialect::Postgres => format!("DROP INDEX {name}"),
    }
}

/// One row of [`table_index_columns`]: index name and key column (`None` for an expression).
pub(crate) struct IndexColumn {
    pub(crate) index: String,
    pub(crate) column: Option<String>,
}

impl FromColumns for IndexColumn {
    fn from_columns(row: &dyn Columns) -> Result<IndexColumn, sqlx::Error> {
        Ok(IndexColumn {
            index: row.text(0)?,
            column: row.opt_text(1)?,
        })
    }
}

/// A single text column (a column name).
pub(crate) struct Name(pub(crate) String);

impl FromColumns for Name {
    fn from_columns(row: &dyn Columns) -> Result<Name, sqlx::Error> {
        Ok(Name(row.text(0)?))
    }
}

/// What `migrate` must do about the claim indexes of a table, given its indexes (name and key
/// columns, `None` for an expression): the claim indexes to create, or why it cannot.
pub(crate) fn plan_claim_indexes(
    dialect: Dialect,
    table: &TableName,
    existing: &[(String, Vec<Option<String>>)],
) -> Result<Vec<&'static ClaimIndex>, String> {
    let same_columns = |columns: &[Option<String>], wanted: &[&str]| {
        columns.len() == wanted.len()
            && columns.iter().zip(wanted).all(|(column, wanted)| {
                column
                    .as_deref()
                    .is_some_and(|c| c.eq_ignore_ascii_case(wanted))
            })
    };
    let mut create = Vec::new();
    let mut conflicts = Vec::new();
    for index in &CLAIM_INDEXES {
        if existing
            .iter()
            .any(|(_, columns)| same_columns(columns, index.columns))
        {
            continue;
        }
        let name = index.name(table);
        match existing
            .iter()
            .find(|(existing, _)| existing.eq_ignore_ascii_case(&name))
        {
            Some((existing, columns)) => {
                let columns: Vec<&str> = columns
                    .iter()
                    .map(|c| c.as_deref().unwrap_or("<expression>"))
                    .collect();
                conflicts.push(format!(
                    "index {existing} on {table} has columns ({}) but outboxd needs ({}): \
                     drop it ({})",
                    columns.join(", "),
                    index.columns.join(", "),
                    drop_index_hint(dialect, table, existing),
                    table = table.as_str(),
                ));
            }
            None => create.push(index),
        }
    }
    if conflicts.is_empty() {
        Ok(create)
    } else {
        Err(format!(
            "{} and run `outboxd migrate` again",
            conflicts.join("; ")
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::DEFAULT_TABLE;

    const DIALECTS: [Dialect; 3] = [Dialect::Sqlite, Dialect::MySql, Dialect::Postgres];

    fn table() -> TableName {
        TableName::new(DEFAULT_TABLE).unwrap()
    }

    fn lease() -> Lease {
        Lease {
            app_code: "live".into(),
            worker_id: "w1".into(),
            lock_until_ms: 5_000,
        }
    }

    fn record(event_id: &str) -> Record {
        Record::build(
            "room-1",
            "RoomGiftSent",
            1,
            std::time::SystemTime::now(),
            &"body".to_string(),
        )
        .with_event_id(event_id)
    }

    /// Placeholders in order: `?` everywhere, or `$1…$n` on PostgreSQL; matches the args.
    fn assert_placeholders(dialect: Dialect, bound: &Bound) {
        match dialect {
            Dialect::Postgres => {
                assert!(!bound.sql.contains('?'), "{}", bound.sql);
                for n in 1..=bound.args.len() {
                    assert!(
                        bound.sql.contains(&format!("${n}")),
                        "${n} missing: {}",
                        bound.sql
                    );
                }
                assert!(!bound.sql.contains(&format!("${}", bound.args.len() + 1)));
            }
            Dialect::Sqlite | Dialect::MySql => {
                assert!(!bound.sql.contains('$'), "{}", bound.sql);
                assert_eq!(
                    bound.sql.matches('?').count(),
                    bound.args.len(),
                    "{}",
                    bound.sql
                );
            }
        }
    }

    #[test]
    fn claim_pending_per_dialect() {
        let sqlite = Statements::new(Dialect::Sqlite, &table());
        assert_eq!(
            sqlite.claim_select(ClaimBranch::Pending, Ordering::None),
            "SELECT c.event_id, c.event_type, c.room_id, c.envelope, c.created_at_ms, c.retry_count \
             FROM room_outbox c WHERE c.app_code = ? AND c.status = 'pending' \
             ORDER BY c.created_at_ms, c.event_id LIMIT ?"
        );
        let mysql = Statements::new(Dialect::MySql, &table());
        assert!(
            mysql
                .claim_select(ClaimBranch::Pending, Ordering::None)
                .ends_with("ORDER BY c.created_at_ms, c.event_id LIMIT ? FOR UPDATE SKIP LOCKED")
        );
        let pg = Statements::new(Dialect::Postgres, &table());
        assert_eq!(
            pg.claim_select(ClaimBranch::Retryable, Ordering::None),
            "SELECT c.event_id, c.event_type, c.room_id, c.envelope, c.created_at_ms, c.retry_count \
             FROM room_outbox c WHERE c.app_code = $1 AND c.status = 'retryable' AND c.next_retry_at_ms <= $2 \
             ORDER BY c.next_retry_at_ms, c.created_at_ms, c.event_id LIMIT $3 FOR UPDATE SKIP LOCKED"
        );
        assert!(pg
            .claim_select(ClaimBranch::ExpiredLease, Ordering::None)
            .contains("c.status = 'delivering' AND c.lock_until_ms <= $2 ORDER BY c.lock_until_ms, c.created_at_ms, c.event_id LIMIT $3"));
    }

    #[test]
    fn claim_queries_bind_what_their_text_asks() {
        for dialect in DIALECTS {
            let statements = Statements::new(dialect, &table());
            for ordering in [Ordering::None, Ordering::PerRoom] {
                let params = ClaimParams {
                    app_code: "live".into(),
                    worker_id: "w".into(),
                    limit: 10,
                    lease_ms: 1_000,
                    now_ms: 7,
                    max_attempts: 3,
                    ordering,
                };
                for branch in ClaimBranch::ALL {
                    let bound = statements.claim_query(branch, &params, 4);
                    assert_placeholders(dialect, &bound);
                    assert_eq!(bound.args.first(), Some(&Arg::from("live")));
                    assert_eq!(bound.args.last(), Some(&Arg::Int(4)));
                }
            }
        }
    }

    #[test]
    fn per_room_probe_uses_active_statuses_only() {
        let statements = Statements::new(Dialect::Postgres, &table());
        let sql = statements.claim_select(ClaimBranch::Pending, Ordering::PerRoom);
        for status in ["pending", "retryable", "delivering"] {
            assert!(sql.contains(&format!(
                "AND NOT EXISTS (SELECT 1 FROM room_outbox p WHERE p.app_code = c.app_code AND p.room_id = c.room_id \
                 AND p.status = '{status}' AND p.created_at_ms <= c.created_at_ms \
                 AND (p.created_at_ms < c.created_at_ms OR p.event_id < c.event_id) OFFSET 0)"
            )));
        }
        // Only PostgreSQL needs the OFFSET 0 fence against anti-join pull-up.
        let mysql_statements = Statements::new(Dialect::MySql, &table());
        let mysql = mysql_statements.claim_select(ClaimBranch::Pending, Ordering::PerRoom);
        assert!(!mysql.contains("OFFSET") && mysql.matches("NOT EXISTS").count() == 3);
        assert_eq!(sql.matches("NOT EXISTS").count(), 3);
        assert!(!sql.contains("'failed'") && !sql.contains("'delivered'"));
        assert!(
            sql.ends_with("ORDER BY c.created_at_ms, c.event_id LIMIT $2 FOR UPDATE SKIP LOCKED")
        );
    }

    #[test]
    fn counts_statements() {
        let statements = Statements::new(Dialect::Postgres, &table());
        assert_eq!(
            &*statements.counts_query(Some("live")).sql,
            "SELECT status, COUNT(*), MIN(created_at_ms) FROM room_outbox WHERE app_code = $1 GROUP BY status"
        );
        assert!(statements.counts_query(None).args.is_empty());
    }

    #[test]
    fn insert_ignores_duplicate_keys_only() {
        let records = [record("a"), record("b")];
        let refs: Vec<&Record> = records.iter().collect();
        let sqlite = insert_records(Dialect::Sqlite, &table(), &refs);
        assert!(sqlite.sql.ends_with("(?, ?, ?, ?, 'pending', ?, ?, 0, NULL, '', NULL, 0, ?) ON CONFLICT (app_code, event_id) DO NOTHING"));
        assert!(!sqlite.sql.contains("IGNORE"));
        assert_eq!(sqlite.args.len(), 14);
        assert_eq!(sqlite.args[4], Arg::Bytes(records[0].encoded_envelope()));
        let mysql = insert_records(Dialect::MySql, &table(), &refs);
        assert!(
            mysql
                .sql
                .ends_with(" ON DUPLICATE KEY UPDATE event_id = event_id")
        );
        assert!(!mysql.sql.contains("IGNORE"));
        let pg = insert_records(Dialect::Postgres, &table(), &refs);
        assert!(
            pg.sql
                .contains("($8, $9, $10, $11, 'pending', $12, $13, 0, NULL, '', NULL, 0, $14)")
        );
        for (dialect, bound) in [
            (Dialect::Sqlite, sqlite),
            (Dialect::MySql, mysql),
            (Dialect::Postgres, pg),
        ] {
            assert_placeholders(dialect, &bound);
        }
        let existing = count_existing(Dialect::MySql, &table(), "live", &["e1", "e2"]);
        assert_eq!(
            &*existing.sql,
            "SELECT COUNT(*) FROM room_outbox WHERE app_code = ? AND event_id IN (?, ?)"
        );
        assert_eq!(existing.args.len(), 3);
    }

    #[test]
    fn duplicate_records_keep_the_first() {
        let mut second = record("a");
        second.event_type = "Other".into();
        let records = [
            record("a"),
            second,
            record("b"),
            record("a").with_app_code("other"),
        ];
        let distinct = distinct_records(&records);
        assert_eq!(distinct.len(), 3);
        assert_eq!(distinct[0].event_type, "RoomGiftSent");
    }

    #[test]
    fn lease_update_counts_reclaims_first() {
        let bound = lease_rows(Dialect::MySql, &table(), &lease(), 100, &["a", "b"]);
        assert_eq!(
            &*bound.sql,
            "UPDATE room_outbox FORCE INDEX (PRIMARY) SET retry_count = CASE WHEN status = 'delivering' THEN retry_count + 1 ELSE retry_count END, \
             status = 'delivering', worker_id = ?, lock_until_ms = ?, updated_at_ms = ? \
             WHERE app_code = ? AND event_id IN (?, ?)"
        );
        assert_eq!(bound.args[1], Arg::Int(5_000));
        let rejected = [RejectedRow {
            event_id: "a".into(),
            event_type: "T".into(),
            room_id: "r".into(),
            reason: "bad".into(),
        }];
        let bound = reject_rows(Dialect::Postgres, &table(), "live", 100, &rejected);
        assert!(
            bound.sql.starts_with(
                "UPDATE room_outbox SET retry_count = CASE WHEN status = 'delivering'"
            )
        );
        assert!(bound.sql.contains("status = 'failed', lock_until_ms = NULL, last_error = CASE event_id WHEN $1 THEN $2 ELSE last_error END"));
        assert_placeholders(Dialect::Postgres, &bound);
    }

    #[test]
    fn dispositions_to_columns() {
        assert_eq!(
            MarkColumns::of(&Disposition::Delivered),
            MarkColumns {
                status: Status::Delivered,
                failed_attempt: false,
                next_retry_at_ms: None,
                last_error: None
            }
        );
        let long = "x".repeat(600);
        let retry = MarkColumns::of(&Disposition::Retryable {
            next_retry_at_ms: 9,
            error: long.clone(),
        });
        assert_eq!(retry.status, Status::Retryable);
        assert!(retry.failed_attempt);
        assert_eq!(retry.next_retry_at_ms, Some(9));
        assert_eq!(retry.last_error.as_deref().map(str::len), Some(512));
        let failed = MarkColumns::of(&Disposition::Failed {
            error: "boom".into(),
        });
        assert_eq!(failed.status, Status::Failed);
        assert_eq!(failed.next_retry_at_ms, None);
        assert_eq!(failed.last_error.as_deref(), Some("boom"));
    }

    fn mixed_marks() -> Vec<Mark> {
        vec![
            Mark {
                event_id: "a".into(),
                disposition: Disposition::Delivered,
            },
            Mark {
                event_id: "b".into(),
                disposition: Disposition::Retryable {
                    next_retry_at_ms: 700,
                    error: "later".into(),
                },
            },
            Mark {
                event_id: "c".into(),
                disposition: Disposition::Failed {
                    error: "never".into(),
                },
            },
        ]
    }

    #[test]
    fn mark_is_one_fenced_statement() {
        let marks = mixed_marks();
        let pg = mark_rows(Dialect::Postgres, &table(), &lease(), &marks, 100);
        assert_eq!(
            &*pg.sql,
            "UPDATE room_outbox SET status = CASE event_id WHEN $1 THEN 'delivered' WHEN $2 THEN 'retryable' \
             WHEN $3 THEN 'failed' ELSE status END, \
             retry_count = CASE event_id WHEN $4 THEN retry_count + 1 WHEN $5 THEN retry_count + 1 ELSE retry_count END, \
             next_retry_at_ms = CASE event_id WHEN $6 THEN $7 ELSE next_retry_at_ms END, \
             last_error = CASE event_id WHEN $8 THEN $9 WHEN $10 THEN $11 ELSE NULL END, \
             lock_until_ms = NULL, updated_at_ms = $12 \
             WHERE app_code = $13 AND status = 'delivering' AND worker_id = $14 AND lock_until_ms = $15 \
             AND event_id IN ($16, $17, $18) RETURNING event_id"
        );
        assert_eq!(pg.args[6], Arg::Int(700));
        assert_eq!(pg.args[8], Arg::from("later"));
        assert_placeholders(Dialect::Postgres, &pg);

        let mysql = mark_rows(Dialect::MySql, &table(), &lease(), &marks, 100);
        assert!(!mysql.sql.contains("RETURNING"));
        assert!(
            mysql
                .sql
                .starts_with("UPDATE room_outbox FORCE INDEX (PRIMARY) SET status = CASE")
        );
        assert!(!pg.sql.contains("FORCE"));
        assert_placeholders(Dialect::MySql, &mysql);
        let lock = lock_fenced_rows(Dialect::MySql, &table(), &lease(), &marks);
        assert_eq!(
            &*lock.sql,
            "SELECT event_id FROM room_outbox FORCE INDEX (PRIMARY) WHERE app_code = ? AND status = 'delivering' AND worker_id = ? \
             AND lock_until_ms = ? AND event_id IN (?, ?, ?) FOR UPDATE"
        );

        let delivered = &marks[..1];
        let sqlite = mark_rows(Dialect::Sqlite, &table(), &lease(), delivered, 100);
        assert_eq!(
            &*sqlite.sql,
            "UPDATE room_outbox SET status = CASE event_id WHEN ? THEN 'delivered' ELSE status END, \
             last_error = NULL, lock_until_ms = NULL, updated_at_ms = ? \
             WHERE app_code = ? AND status = 'delivering' AND worker_id = ? AND lock_until_ms = ? \
             AND event_id IN (?) RETURNING event_id"
        );
    }

    #[test]
    fn failed_filters_are_anded() {
        let filter = FailedFilter {
            app_code: Some("live".into()),
            event_ids: vec!["a".into(), "b".into()],
            event_type: Some("T".into()),
            room_id: Some("r".into()),
            since_ms: Some(1),
            until_ms: Some(2),
        };
        let list = select_failed(Dialect::Postgres, &table(), &filter, 50);
        assert_eq!(
            &*list.sql,
            "SELECT app_code, event_id, event_type, room_id, retry_count, last_error, created_at_ms, updated_at_ms \
             FROM room_outbox WHERE status = 'failed' AND app_code = $1 AND event_id IN ($2, $3) \
             AND event_type = $4 AND room_id = $5 AND created_at_ms >= $6 AND created_at_ms < $7 \
             ORDER BY created_at_ms, event_id LIMIT $8"
        );
        let requeue = requeue_failed(Dialect::Sqlite, &table(), &FailedFilter::default(), 9);
        assert_eq!(
            &*requeue.sql,
            "UPDATE room_outbox SET status = 'pending', retry_count = 0, next_retry_at_ms = 0, worker_id = '', \
             lock_until_ms = NULL, updated_at_ms = ? WHERE status = 'failed'"
        );
        let count = count_failed(Dialect::MySql, &table(), &filter);
        assert_placeholders(Dialect::MySql, &count);
        assert!(count.sql.starts_with(
            "SELECT COUNT(*) FROM room_outbox WHERE status = 'failed' AND app_code = ?"
        ));
    }

    fn candidate(envelope: Vec<u8>, retry_count: i32) -> CandidateRow {
        CandidateRow {
            event_id: "e1".into(),
            event_type: "RowType".into(),
            room_id: "row-room".into(),
            envelope,
            created_at_ms: 10,
            retry_count,
        }
    }

    #[test]
    fn judge_fills_empty_envelope_fields() {
        let envelope = EventEnvelope {
            room_version: 3,
            occurred_at_ms: 4,
            body: b"x".to_vec(),
            ..Default::default()
        };
        let claimed = judge(
            "live",
            candidate(envelope.encode_to_vec(), 1),
            ClaimBranch::Retryable,
            5,
        )
        .unwrap();
        assert_eq!(claimed.retry_count, 1);
        assert_eq!(claimed.created_at_ms, 10);
        assert_eq!(
            claimed.event,
            Event {
                app_code: "live".into(),
                event_id: "e1".into(),
                event_type: "RowType".into(),
                room_id: "row-room".into(),
                room_version: 3,
                occurred_at_ms: 4,
                body: b"x".to_vec(),
                attempt: 2,
            }
        );
    }

    #[test]
    fn judge_rejects_corrupt_and_foreign_envelopes() {
        let corrupt = judge(
            "live",
            candidate(vec![0xff, 0xff, 0xff], 0),
            ClaimBranch::Pending,
            5,
        )
        .unwrap_err();
        assert!(
            corrupt.reason.starts_with("envelope does not decode"),
            "{}",
            corrupt.reason
        );
        assert_eq!(corrupt.room_id, "row-room");

        let foreign = EventEnvelope {
            app_code: "other".into(),
            ..Default::default()
        };
        let err = judge(
            "live",
            candidate(foreign.encode_to_vec(), 0),
            ClaimBranch::Pending,
            5,
        )
        .unwrap_err();
        assert!(err.reason.contains("app_code \"other\""), "{}", err.reason);

        let other_event = EventEnvelope {
            app_code: "live".into(),
            event_id: "e2".into(),
            ..Default::default()
        };
        let err = judge(
            "live",
            candidate(other_event.encode_to_vec(), 0),
            ClaimBranch::Pending,
            5,
        )
        .unwrap_err();
        assert!(err.reason.contains("event_id \"e2\""), "{}", err.reason);
    }

    #[test]
    fn judge_counts_reclaimed_leases_as_attempts() {
        let ok = EventEnvelope::default().encode_to_vec();
        let claimed = judge(
            "live",
            candidate(ok.clone(), 1),
            ClaimBranch::ExpiredLease,
            3,
        )
        .unwrap();
        assert_eq!(claimed.retry_count, 2);
        assert_eq!(claimed.event.attempt, 3);
        let dead = judge("live", candidate(ok, 2), ClaimBranch::ExpiredLease, 3).unwrap_err();
        assert!(dead.reason.contains("lease expired"), "{}", dead.reason);
        assert!(dead.reason.contains("(worker died?)"));
    }

    #[test]
    fn status_counts_fold() {
        let rows = [
            StatusCountRow {
                status: "pending".into(),
                rows: 3,
                oldest_created_at_ms: 40,
            },
            StatusCountRow {
                status: "delivered".into(),
                rows: 7,
                oldest_created_at_ms: 1,
            },
            StatusCountRow {
                status: "unknown".into(),
                rows: 1,
                oldest_created_at_ms: 1,
            },
        ];
        let counts = status_counts(&rows, 100);
        assert_eq!(counts.pending, 3);
        assert_eq!(counts.delivered, 7);
        assert_eq!(counts.oldest_pending_age_ms, Some(60));
        assert_eq!(status_counts(&[], 100).oldest_pending_age_ms, None);
    }

    #[test]
    fn claim_indexes_match_migration_0001() {
        for dialect in DIALECTS {
            let sql = migrations(dialect)[0].sql(&table());
            for index in &CLAIM_INDEXES {
                let name = index.name(&table());
                let columns = format!("({})", index.columns.join(", "));
                assert!(
                    sql.lines().any(|line| line.contains(&format!("{name} "))
                        && line
                            .trim_end()
                            .trim_end_matches(',')
                            .trim_end_matches(';')
                            .ends_with(&columns)),
                    "{dialect:?}: {name} {columns}"
                );
            }
            for column in OUTBOX_COLUMNS {
                assert!(
                    sql.contains(&format!("\n    {column} ")),
                    "{dialect:?}: {column}"
                );
            }
        }
    }

    #[test]
    fn claim_index_plan() {
        let index = |name: &str, columns: &[&str]| {
            (
                name.to_string(),
                columns
                    .iter()
                    .map(|c| Some(c.to_string()))
                    .collect::<Vec<_>>(),
            )
        };
        // The Go service's indexes: its claim index covers the pending branch under another name.
        let go = [
            index("PRIMARY", &["app_code", "event_id"]),
            index(
                "idx_room_outbox_claim",
                &["APP_CODE", "status", "created_at_ms", "event_id"],
            ),
        ];
        let create = plan_claim_indexes(Dialect::MySql, &table(), &go).unwrap();
        let names: Vec<String> = create.iter().map(|i| i.name(&table())).collect();
        assert_eq!(
            names,
            [
                "idx_room_outbox_retry",
                "idx_room_outbox_lease",
                "idx_room_outbox_room"
            ]
        );
        assert_eq!(
            create_claim_index(&table(), create[2]),
            "CREATE INDEX idx_room_outbox_room ON room_outbox (app_code, room_id, status, created_at_ms, event_id)"
        );
        let conflict = [
            index(
                "idx_room_outbox_pending",
                &["app_code", "status", "next_retry_at_ms"],
            ),
            (
                "idx_room_outbox_room".to_string(),
                vec![Some("app_code".to_string()), None],
            ),
        ];
        let err = plan_claim_indexes(Dialect::MySql, &table(), &conflict).unwrap_err();
        assert_eq!(
            err,
            "index idx_room_outbox_pending on room_outbox has columns (app_code, status, next_retry_at_ms) \
             but outboxd needs (app_code, status, created_at_ms, event_id): drop it \
             (DROP INDEX idx_room_outbox_pending ON room_outbox); index idx_room_outbox_room on room_outbox \
             has columns (app_code, <expression>) but outboxd needs (app_code, room_id, status, created_at_ms, \
             event_id): drop it (DROP INDEX idx_room_outbox_room ON room_outbox) and run `outboxd migrate` again"
        );
        let complete: Vec<_> = CLAIM_INDEXES
            .iter()
            .map(|i| index("other", i.columns))
            .collect();
        assert!(
            plan_claim_indexes(Dialect::Postgres, &table(), &complete)
                .unwrap()
                .is_empty()
        );
    }

    #[test]
    fn migrations_render_the_table_name() {
        let custom = TableName::new("orders_outbox").unwrap();
        for dialect in DIALECTS {
            let all = migrations(dialect);
            assert_eq!(all.first().map(|m| m.version), Some(1));
            for migration in all {
                let sql = migration.sql(&custom);
                assert!(!sql.contains("{{"), "{}", migration.name);
                assert!(sql.contains("CREATE TABLE IF NOT EXISTS orders_outbox"));
                assert!(sql.contains("idx_orders_outbox_room"));
            }
        }
        let record = record_version(Dialect::Postgres, &table(), 1, 2);
        assert!(
            record
                .sql
                .ends_with("VALUES ($1, $2, $3) ON CONFLICT (table_name, version) DO NOTHING")
        );
    }
}
