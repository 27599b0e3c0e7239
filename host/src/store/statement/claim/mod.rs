//! The claim's statements: the three branch SELECTs (built once per store in [`Statements`]),
//! the UPDATE leasing the rows handed out, the UPDATE failing the rows the claim rejected, and the
//! status counts. A dialect that claims in one statement (`SqlDialect::claim_lease_text`:
//! PostgreSQL's, in `store/postgres/claim/`) supplies those texts instead, and a dialect whose
//! database seeks a claim position in another form (`SqlDialect::write_position_bound`: MariaDB's,
//! in `store/mysql/claim.rs`) writes that condition.
//!
//! Every statement that changes a row's status keeps one rule, so that MySQL's / MariaDB's retry
//! and lease indexes, which do not hold the status (`store/mysql/dialect.rs`), are rewritten only
//! when a row enters or leaves their state: `next_retry_at_ms` is 0 outside `retryable` (above 0
//! in it), `lock_until_ms` NULL outside `delivering`. Leases and rejections here, marks (leased
//! and held: `statement/mark.rs`) and requeues (`statement/failed.rs`) write both accordingly.

pub(crate) mod room_heads;
mod statements;

use std::sync::Arc;

use super::{Bound, SqlBuilder};

use crate::record::Status;
use crate::store::{Backend, DeliveryOrder, Lease, RejectedRow, TableName};
pub use statements::Statements;

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

    pub(crate) fn index(self) -> usize {
        match self {
            ClaimBranch::Pending => 0,
            ClaimBranch::Retryable => 1,
            ClaimBranch::ExpiredLease => 2,
        }
    }
}

/// Which rows of the pending branch a read bounded by a claim position covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PositionSide {
    /// The rows after the position in claim order: where a backlog continues.
    After,
    /// The rows up to and including the position: the older rows a read after the position that
    /// came back short reads next, in the same transaction (the rows it already has are not
    /// among them, whether or not the dialect has leased them yet).
    UpTo,
}

impl PositionSide {
    /// Both sides.
    pub const BOTH: [PositionSide; 2] = [PositionSide::After, PositionSide::UpTo];

    pub(crate) fn index(self) -> usize {
        match self {
            PositionSide::After => 0,
            PositionSide::UpTo => 1,
        }
    }
}

pub(crate) fn ordering_index(ordering: DeliveryOrder) -> usize {
    match ordering {
        DeliveryOrder::None => 0,
        DeliveryOrder::PerRoom => 1,
    }
}

/// Statuses that block a later event of the same room under [`DeliveryOrder::PerRoom`].
const ACTIVE_STATUSES: [Status; 3] = [Status::Pending, Status::Retryable, Status::Delivering];

/// Expression that adds the reclaimed-lease attempt: rows still `delivering` when the claim
/// updates them came from the expired-lease branch. It must be the first assignment of its UPDATE:
/// MySQL evaluates SET left to right, with `status` already changed by later assignments.
pub(crate) fn retry_count_after_reclaim(b: &mut SqlBuilder) {
    b.push("retry_count = CASE WHEN status = ")
        .status(Status::Delivering)
        .push(" THEN retry_count + 1 ELSE retry_count END");
}

/// The candidate columns a claim SELECT returns (of alias `c`).
pub(crate) const CLAIM_COLUMNS: &str =
    "c.event_id, c.event_type, c.room_id, c.envelope, c.created_at_ms, c.retry_count";

pub(crate) fn claim_select_text(
    backend: Backend,
    table: &TableName,
    branch: ClaimBranch,
    ordering: DeliveryOrder,
) -> Arc<str> {
    let mut b = SqlBuilder::new(backend);
    write_claim_select(
        &mut b,
        backend,
        table,
        branch,
        ordering,
        CLAIM_COLUMNS,
        None,
    );
    b.text()
}

/// The claim-position condition of the pending branch as one row comparison, the form most
/// databases seek on the pending index's full key (the default of
/// [`super::SqlDialect::write_position_bound`]): the rows on `side` of the position in claim
/// order. Binds the position's `created_at_ms`, then its `event_id`
/// ([`super::SqlDialect::position_args`]).
pub(crate) fn write_row_comparison_bound(b: &mut SqlBuilder, side: PositionSide) {
    let row = match side {
        PositionSide::After => ">",
        PositionSide::UpTo => "<=",
    };
    b.push(" AND (c.created_at_ms, c.event_id) ")
        .push(row)
        .push(" (")
        .placeholder()
        .push(", ")
        .placeholder()
        .push(")");
}

/// Writes the locking SELECT of one claim branch returning `columns` (of alias `c`). `position`
/// bounds the pending branch: by the claim position without ordering, by the room cursor with
/// per-room ordering (whose pending branch reads room heads: [`room_heads`]).
pub(crate) fn write_claim_select(
    b: &mut SqlBuilder,
    backend: Backend,
    table: &TableName,
    branch: ClaimBranch,
    ordering: DeliveryOrder,
    columns: &str,
    position: Option<PositionSide>,
) {
    if branch == ClaimBranch::Pending && ordering == DeliveryOrder::PerRoom {
        // `position` is the room walk's side of the room cursor here.
        backend
            .dialect()
            .write_room_heads(b, table, columns, position);
        return;
    }
    b.push("SELECT ")
        .push(columns)
        .push(" FROM ")
        .push(table.as_str())
        .push(" c WHERE c.app_code = ")
        .placeholder()
        .push(" AND c.status = ");
    let order_by = match branch {
        ClaimBranch::Pending => {
            b.status(Status::Pending);
            if let Some(side) = position {
                backend.dialect().write_position_bound(b, side);
            }
            "c.created_at_ms, c.event_id"
        }
        ClaimBranch::Retryable => {
            b.status(Status::Retryable);
            backend.dialect().write_due_retry_bound(b);
            "c.next_retry_at_ms, c.created_at_ms, c.event_id"
        }
        ClaimBranch::ExpiredLease => {
            b.status(Status::Delivering)
                .push(" AND c.lock_until_ms <= ")
                .placeholder();
            "c.lock_until_ms, c.created_at_ms, c.event_id"
        }
    };
    if ordering == DeliveryOrder::PerRoom {
        room_heads::write_room_probes(b, backend, table, &ACTIVE_STATUSES);
    }
    b.push(" ORDER BY ")
        .push(order_by)
        .push(" LIMIT ")
        .placeholder()
        .push(backend.dialect().row_lock());
}

pub(crate) fn counts_text(backend: Backend, table: &TableName, by_app: bool) -> Arc<str> {
    let mut b = SqlBuilder::new(backend);
    b.push("SELECT status, COUNT(*), MIN(created_at_ms) FROM ")
        .push(table.as_str());
    if by_app {
        b.push(" WHERE app_code = ").placeholder();
    }
    b.push(" GROUP BY status");
    b.text()
}

/// `UPDATE <table> SET retry_count = <reclaim attempt>, status = '<status>'` by primary key: the
/// head of the claim's two UPDATEs.
fn claimed_rows_update(backend: Backend, table: &TableName, status: Status) -> SqlBuilder {
    let mut b = SqlBuilder::new(backend);
    b.push("UPDATE ")
        .push(table.as_str())
        .push(backend.dialect().primary_key_access())
        .push(" SET ");
    retry_count_after_reclaim(&mut b);
    b.push(", status = ").status(status);
    b
}

/// Leases claimed rows to the worker (one UPDATE; `event_ids` at most [`super::MAX_ROWS_PER_STATEMENT`]).
pub(crate) fn lease_rows(
    backend: Backend,
    table: &TableName,
    lease: &Lease,
    now_ms: i64,
    event_ids: &[&str],
) -> Bound {
    let mut b = claimed_rows_update(backend, table, Status::Delivering);
    // A row leaves 'retryable' here: its retry time goes back to 0 (module docs).
    b.push(", next_retry_at_ms = 0, worker_id = ")
        .bind(lease.worker_id.as_str())
        .push(", lock_until_ms = ")
        .bind(lease.lock_until_ms)
        .push(", updated_at_ms = ")
        .bind(now_ms)
        .push(" WHERE app_code = ")
        .bind(lease.app_code.as_str())
        .push(" AND event_id IN ")
        .bind_set(event_ids.iter().copied());
    b.finish()
}

/// Moves rows the claim rejected to `failed` with their reason. `worker_id` keeps the last
/// worker that held the row.
pub(crate) fn reject_rows(
    backend: Backend,
    table: &TableName,
    app_code: &str,
    now_ms: i64,
    rejected: &[RejectedRow],
) -> Bound {
    let mut b = claimed_rows_update(backend, table, Status::Failed);
    b.push(", next_retry_at_ms = 0, lock_until_ms = NULL, last_error = CASE event_id");
    for row in rejected {
        b.push(" WHEN ")
            .bind(row.event_id.as_str())
            .push(" THEN ")
            .bind_last_error(&row.reason);
    }
    b.push(" ELSE last_error END, updated_at_ms = ")
        .bind(now_ms)
        .push(" WHERE app_code = ")
        .bind(app_code)
        .push(" AND event_id IN ")
        .bind_set(rejected.iter().map(|r| r.event_id.as_str()));
    b.finish()
}
