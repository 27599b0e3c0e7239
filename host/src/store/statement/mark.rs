//! The mark: one UPDATE per batch setting each row's new state, fenced on the batch's lease, and
//! the rows a mark in autocommit changed, listed when it matched fewer rows than marks
//! ([`marked_rows`]: MySQL, PostgreSQL).

use super::fence::{at_epoch, live_rows, owned_partition_open};
use super::rows::{Statements, retry_count_after_reclaim, update_by_key};
use super::{Bound, SqlBuilder};
use crate::record::Status;
use crate::store::{Disposition, Lease, Mark, TableName};

/// The column values one [`Disposition`] writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct MarkColumns<'a> {
    /// New status.
    pub(crate) status: Status,
    /// Whether `retry_count` goes up by one (a failed attempt).
    pub(crate) failed_attempt: bool,
    /// New `next_retry_at_ms`: the retry time of a `retryable` row, 0 for every other status
    /// (the rule in `statement/rows.rs`).
    pub(crate) next_retry_at_ms: i64,
    /// New `last_error` (cut when bound: [`SqlBuilder::bind_last_error`]); `None` clears it.
    pub(crate) last_error: Option<&'a str>,
}

impl<'a> MarkColumns<'a> {
    /// The columns `disposition` writes. Every disposition also clears `lock_until_ms` and sets
    /// `updated_at_ms`; `worker_id` names the host for a row it did not deliver
    /// ([`worker_column`]).
    pub(crate) fn of(disposition: &'a Disposition) -> MarkColumns<'a> {
        match disposition {
            Disposition::Delivered => MarkColumns {
                status: Status::Delivered,
                failed_attempt: false,
                next_retry_at_ms: 0,
                last_error: None,
            },
            Disposition::Retryable {
                next_retry_at_ms,
                error,
            } => MarkColumns {
                status: Status::Retryable,
                failed_attempt: true,
                next_retry_at_ms: (*next_retry_at_ms).max(1),
                last_error: Some(error),
            },
            Disposition::Deferred {
                next_retry_at_ms,
                error,
            } => MarkColumns {
                status: Status::Retryable,
                failed_attempt: false,
                next_retry_at_ms: (*next_retry_at_ms).max(1),
                last_error: Some(error),
            },
            Disposition::Failed { error } => MarkColumns {
                status: Status::Failed,
                failed_attempt: true,
                next_retry_at_ms: 0,
                last_error: Some(error),
            },
        }
    }
}

/// The fence of a mark ([`Lease::partitions`]): `app_code = ? AND <one partition's span of the
/// partition index> AND status IN ('pending', 'retryable', 'delivering') AND event_id IN (…)`
/// (several partitions: the ids by primary key, then the status) `AND EXISTS (the row's
/// partition's row with this owner and the epoch the batch read it at)`, read under a shared lock
/// where the database needs one, so a host that lost a partition changes none of its rows (and
/// changes the batch's rows of the partitions it still owns).
pub(crate) fn lease_fence<'a>(
    b: &mut SqlBuilder,
    table: &TableName,
    lease: &Lease,
    event_ids: impl IntoIterator<Item = &'a str>,
) {
    let dialect = b.dialect();
    let partition_of_row = dialect.partition_of_row(lease.partition_count);
    let partitions = &lease.partitions;
    // One partition: within the batch's span of the partition index, a seek whatever the
    // statistics. Several: by primary key alone, one probe per id
    // ([`SqlBuilder::bind_keys_joined`]); an `OR` of their spans, or an `IN` list of them, was
    // planned on never-analyzed PostgreSQL tables as a scan of the tenant's whole partition index.
    if let [one] = partitions.as_slice() {
        b.push(" WHERE app_code = ").bind(lease.app_code.as_str());
        if let Some(expression) = partition_of_row.as_deref() {
            b.push(" AND ")
                .push(expression)
                .push(" = ")
                .bind(i64::from(one.fence.partition));
        }
        b.push(dialect.partition_index_predicate())
            .push(" AND created_at_ms >= ")
            .bind(one.first_created_ms)
            .push(" AND created_at_ms <= ")
            .bind(one.last_created_ms);
        live_rows(b);
        b.push(" AND event_id").bind_in(event_ids);
    } else {
        b.push(" WHERE ")
            .bind_keys_joined(lease.app_code.as_str(), event_ids);
        live_rows(b);
    }
    owned_partition_open(b, table, &lease.app_code, &lease.worker_id);
    match (partition_of_row.as_deref(), lease.partitions.as_slice()) {
        (_, [batch]) => at_epoch(b, &batch.fence),
        (Some(expression), batches) if !batches.is_empty() => {
            // The updated row's partition (the subquery's table has no `room_id` or partition
            // column of its own: the expression names the outer row's) at its epoch.
            b.push(" AND p.partition_id = ")
                .push(expression)
                .push(" AND p.epoch = CASE p.partition_id");
            for batch in batches {
                b.push(" WHEN ")
                    .bind(i64::from(batch.fence.partition))
                    .push(" THEN ")
                    .bind(batch.fence.epoch);
            }
            b.push(" END");
        }
        // No partition read (an empty batch), or several where the tenant has one: no row.
        _ => {
            b.push(" AND 1 = 0");
        }
    }
    b.push(dialect.fence_lock()).push(")");
}

/// ` status = …`: one literal when every row gets the same status (a batch that was delivered:
/// the common case, and a `CASE` of 500 branches costs the database ~3 ms per 500 rows), else
/// `CASE event_id WHEN … END`.
pub(crate) fn status_column(b: &mut SqlBuilder, columns: &[(&str, MarkColumns<'_>)]) {
    let first = columns.first().map(|(_, c)| c.status);
    if let Some(status) = first.filter(|s| columns.iter().all(|(_, c)| c.status == *s)) {
        b.push(" status = ").status(status);
        return;
    }
    b.push(" status = CASE event_id");
    for (event_id, cols) in columns {
        b.push(" WHEN ")
            .bind(*event_id)
            .push(" THEN ")
            .status(cols.status);
    }
    b.push(" ELSE status END");
}

/// `, next_retry_at_ms = …` (one value when every row gets the same, as a delivered batch's 0;
/// else `CASE event_id`) and `, last_error = …` (cut when bound).
pub(crate) fn retry_and_error_columns(b: &mut SqlBuilder, columns: &[(&str, MarkColumns<'_>)]) {
    let first = columns.first().map_or(0, |(_, c)| c.next_retry_at_ms);
    if first == 0 && columns.iter().all(|(_, c)| c.next_retry_at_ms == 0) {
        b.push(", next_retry_at_ms = 0");
    } else if columns.iter().all(|(_, c)| c.next_retry_at_ms == first) {
        b.push(", next_retry_at_ms = ").bind(first);
    } else {
        b.push(", next_retry_at_ms = CASE event_id");
        for (event_id, cols) in columns.iter().filter(|(_, c)| c.next_retry_at_ms != 0) {
            b.push(" WHEN ")
                .bind(*event_id)
                .push(" THEN ")
                .bind(cols.next_retry_at_ms);
        }
        b.push(" ELSE 0 END");
    }
    if columns.iter().any(|(_, c)| c.last_error.is_some()) {
        b.push(", last_error = CASE event_id");
        for (event_id, cols) in columns {
            if let Some(error) = &cols.last_error {
                b.push(" WHEN ")
                    .bind(*event_id)
                    .push(" THEN ")
                    .bind_last_error(error);
            }
        }
        b.push(" ELSE NULL END");
    } else {
        b.push(", last_error = NULL");
    }
}

/// `, worker_id = …`: the host for a row it did not deliver (retryable, failed: who tried it
/// last), `''` for a delivered one. A delivered row's `worker_id` stays as it was when it was
/// already `''` (every row a producer wrote, delivered on its first read): InnoDB then leaves the
/// column alone, where writing the host's id grew every row in place, which cost MariaDB ~13 µs
/// a row (a third of a 1,000-row mark).
pub(crate) fn worker_column(b: &mut SqlBuilder, columns: &[(&str, MarkColumns<'_>)], worker: &str) {
    let tried = |c: &MarkColumns<'_>| c.status != Status::Delivered;
    if !columns.iter().any(|(_, c)| tried(c)) {
        b.push(", worker_id = ''");
        return;
    }
    if columns.iter().all(|(_, c)| tried(c)) {
        b.push(", worker_id = ").bind(worker);
        return;
    }
    b.push(", worker_id = CASE event_id");
    for (event_id, _) in columns.iter().filter(|(_, c)| tried(c)) {
        b.push(" WHEN ").bind(*event_id).push(" THEN ").bind(worker);
    }
    b.push(" ELSE '' END");
}

/// Each mark's event id with the columns its disposition writes.
pub(crate) fn mark_columns(marks: &[Mark]) -> Vec<(&str, MarkColumns<'_>)> {
    marks
        .iter()
        .map(|m| (m.event_id.as_str(), MarkColumns::of(&m.disposition)))
        .collect()
}

/// The one fenced UPDATE applying `marks` (at most [`super::MAX_ROWS_PER_STATEMENT`], distinct ids),
/// with `RETURNING event_id`: SQLite's mark once a row was stale (MySQL and PostgreSQL list the
/// rows a mark changed after it instead: [`marked_rows`]).
pub(crate) fn mark_rows(
    statements: &Statements,
    lease: &Lease,
    marks: &[Mark],
    at: MarkAt,
) -> Bound {
    mark_update(statements, lease, marks, at, true)
}

/// [`mark_rows`] without `RETURNING`: the first try of a mark in a transaction, whose affected-row
/// count tells whether every mark matched its row (then no id list is needed).
pub(crate) fn mark_rows_counted(
    statements: &Statements,
    lease: &Lease,
    marks: &[Mark],
    at: MarkAt,
) -> Bound {
    mark_update(statements, lease, marks, at, false)
}

/// When a mark writes (`updated_at_ms`), and whether it runs again after its earlier run's reply
/// was lost (the connection broke): that run may have committed, so the rows it changed (they
/// carry `updated_at_ms = now_ms`) are left alone. Without this a row marked `retryable` would
/// count a second failed attempt and get a later retry time. (A row its producer wrote, or a
/// mark changed, in that very millisecond is left alone too: it is read and delivered again.)
#[derive(Debug, Clone, Copy)]
pub struct MarkAt {
    /// The mark's time, UTC milliseconds.
    pub now_ms: i64,
    /// A run after a lost reply.
    pub again: bool,
}

impl MarkAt {
    /// The first run of a mark at `now_ms`.
    pub fn first(now_ms: i64) -> MarkAt {
        MarkAt {
            now_ms,
            again: false,
        }
    }
}

/// The fenced UPDATE of [`mark_rows`], listing the ids it changed when `returning`.
fn mark_update(
    statements: &Statements,
    lease: &Lease,
    marks: &[Mark],
    at: MarkAt,
    returning: bool,
) -> Bound {
    let columns = mark_columns(marks);
    let mut b = update_by_key(statements);
    // The attempt first (MySQL evaluates SET left to right): a row still `delivering` is an
    // earlier version's expired lease, whose attempt the read counted but did not write.
    retry_count_after_reclaim(&mut b);
    if columns.iter().any(|(_, c)| c.failed_attempt) {
        b.push(" + CASE event_id");
        for (event_id, _) in columns.iter().filter(|(_, c)| c.failed_attempt) {
            b.push(" WHEN ").bind(*event_id).push(" THEN 1");
        }
        b.push(" ELSE 0 END");
    }
    b.push(",");
    status_column(&mut b, &columns);
    retry_and_error_columns(&mut b, &columns);
    b.push(", lock_until_ms = NULL, updated_at_ms = ")
        .bind(at.now_ms);
    worker_column(&mut b, &columns, &lease.worker_id);
    lease_fence(
        &mut b,
        statements.table(),
        lease,
        marks.iter().map(|m| m.event_id.as_str()),
    );
    if at.again {
        b.push(" AND updated_at_ms <> ").bind(at.now_ms);
    }
    if returning {
        b.push(" RETURNING event_id");
    }
    b.finish()
}

/// The rows of `marks` that a mark under `lease` at `now_ms` changed: each has no lease left,
/// `updated_at_ms = now_ms` and a status a mark writes (a row left `pending` was not changed,
/// whatever time its producer wrote). A row marked earlier carries another time; a mark run
/// again after a lost reply (the same `now_ms`) finds the rows its first run changed. (A row of a
/// partition another host took over and marked in the very same millisecond would be counted
/// here too: both delivered it, and only this host's count of applied marks is off.)
pub(crate) fn marked_rows(
    statements: &Statements,
    lease: &Lease,
    marks: &[Mark],
    now_ms: i64,
) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    let by_key = b.dialect().primary_key_access();
    b.push("SELECT event_id FROM ")
        .push(statements.table().as_str())
        .push(by_key)
        .push(" WHERE ");
    // One primary-key probe per id whatever the statistics (PostgreSQL read a tenant never
    // analyzed whole by `app_code`, the ids a filter).
    let ids = marks.iter().map(|m| m.event_id.as_str());
    b.bind_keys_joined(lease.app_code.as_str(), ids)
        .push(" AND status <> ")
        .status(Status::Pending)
        .push(" AND lock_until_ms IS NULL AND updated_at_ms = ")
        .bind(now_ms);
    b.finish()
}
