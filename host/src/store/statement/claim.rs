//! The claim's statements: the three branch SELECTs (built once per store in [`Statements`]),
//! the UPDATE leasing the rows handed out, the UPDATE failing the rows the claim rejected, and the
//! status counts. A dialect that claims in one statement (`SqlDialect::claim_lease_text`:
//! PostgreSQL's, in `store/postgres/claim.rs`) supplies those texts instead, and a dialect whose
//! database seeks a claim position in another form (`SqlDialect::write_position_bound`: MariaDB's,
//! in `store/mysql/claim.rs`) writes that condition.

use std::sync::Arc;

use super::{Arg, Bound, SqlBuilder};
use crate::record::Status;
use crate::store::claim_position::ClaimPosition;
use crate::store::room_index::ROOM_INDEX;
use crate::store::{Backend, ClaimParams, DeliveryOrder, Lease, Mark, RejectedRow, TableName};

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

    fn index(self) -> usize {
        match self {
            PositionSide::After => 0,
            PositionSide::UpTo => 1,
        }
    }
}

fn ordering_index(ordering: DeliveryOrder) -> usize {
    match ordering {
        DeliveryOrder::None => 0,
        DeliveryOrder::PerRoom => 1,
    }
}

/// The fixed statements of one store, built once at connect from the backend and table name.
#[derive(Debug, Clone)]
pub struct Statements {
    backend: Backend,
    table: TableName,
    /// `[branch][ordering]`.
    claim: [[Arc<str>; 2]; 3],
    /// `[branch][ordering]`: the branch's one-statement claim and lease, where the dialect has it.
    claim_lease: Option<[[Arc<str>; 2]; 3]>,
    /// `[side]`: the pending branch's SELECT without ordering, reading one side of a claim
    /// position.
    claim_by_position: [Arc<str>; 2],
    /// `[side]`: the pending branch's one-statement claim without ordering, reading one side of a
    /// claim position, where the dialect has the one-statement claim.
    claim_lease_by_position: Option<[Arc<str>; 2]>,
    /// `[all tenants, one tenant]`.
    counts: [Arc<str>; 2],
}

impl Statements {
    /// Builds the statements for `table` in `backend`.
    pub fn new(backend: Backend, table: &TableName) -> Statements {
        let claim = ClaimBranch::ALL.map(|branch| {
            [DeliveryOrder::None, DeliveryOrder::PerRoom]
                .map(|ordering| claim_select_text(backend, table, branch, ordering))
        });
        let dialect = backend.dialect();
        let claim_lease = dialect
            .claim_lease_text(table, ClaimBranch::Pending, DeliveryOrder::None, None)
            .map(|_| {
                ClaimBranch::ALL.map(|branch| {
                    [DeliveryOrder::None, DeliveryOrder::PerRoom].map(|ordering| {
                        let text = dialect.claim_lease_text(table, branch, ordering, None);
                        text.expect("a dialect leasing in its claim does so for every branch")
                    })
                })
            });
        let claim_by_position = PositionSide::BOTH.map(|side| {
            let mut b = SqlBuilder::new(backend);
            let (pending, none) = (ClaimBranch::Pending, DeliveryOrder::None);
            write_claim_select(
                &mut b,
                backend,
                table,
                pending,
                none,
                CLAIM_COLUMNS,
                Some(side),
            );
            b.text()
        });
        let claim_lease_by_position = claim_lease.as_ref().map(|_| {
            PositionSide::BOTH.map(|side| {
                let (pending, none) = (ClaimBranch::Pending, DeliveryOrder::None);
                let text = dialect.claim_lease_text(table, pending, none, Some(side));
                text.expect("a dialect leasing in its claim does so for every branch")
            })
        });
        let counts = [false, true].map(|by_app| counts_text(backend, table, by_app));
        Statements {
            backend,
            table: table.clone(),
            claim,
            claim_lease,
            claim_by_position,
            claim_lease_by_position,
            counts,
        }
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// The outbox table.
    pub fn table(&self) -> &TableName {
        &self.table
    }

    /// The SELECT of one claim branch, e.g. for `EXPLAIN` in tests. It returns `event_id,
    /// event_type, room_id, envelope, created_at_ms, retry_count` and binds, in order:
    /// `app_code` (text), then `now_ms` (bigint) for [`ClaimBranch::Retryable`] and
    /// [`ClaimBranch::ExpiredLease`] only, then the row limit (bigint).
    pub fn claim_select(&self, branch: ClaimBranch, ordering: DeliveryOrder) -> &str {
        &self.claim[branch.index()][ordering_index(ordering)]
    }

    /// Whether a claim leases each branch's rows in the statement that locks them
    /// (`Statements::claim_lease_query`) instead of SELECT then lease UPDATE.
    pub fn leases_in_claim(&self) -> bool {
        self.claim_lease.is_some()
    }

    /// The statement a claim runs for one branch, e.g. for `EXPLAIN` in tests: the one-statement
    /// claim and lease where the dialect has it, else [`Statements::claim_select`]. The
    /// one-statement form binds, in order: `worker_id` (text), `lock_until_ms`, `now_ms` (the
    /// lease), then what the SELECT binds; it returns the SELECT's columns (with `retry_count` as
    /// it was before the claim) and the row's position in the branch's order.
    pub fn claim_statement(&self, branch: ClaimBranch, ordering: DeliveryOrder) -> &str {
        match &self.claim_lease {
            Some(texts) => &texts[branch.index()][ordering_index(ordering)],
            None => self.claim_select(branch, ordering),
        }
    }

    /// The statement a claim runs for the pending branch (no ordering) when it reads `side` of a
    /// claim position ([`crate::store::claim_position`]), with its arguments, e.g. for `EXPLAIN`
    /// in tests: the one-statement claim and lease under `lease` where the dialect has it, else
    /// the locking SELECT.
    pub fn claim_statement_by_position(
        &self,
        params: &ClaimParams,
        lease: &Lease,
        position: &ClaimPosition,
        side: PositionSide,
        limit: usize,
    ) -> Bound {
        let select = Bound {
            sql: self.claim_by_position[side.index()].clone(),
            args: [Arg::from(params.app_code.as_str())]
                .into_iter()
                .chain(self.backend.dialect().position_args(position))
                .chain([Arg::Int(limit as i64)])
                .collect(),
        };
        match &self.claim_lease_by_position {
            Some(texts) => Bound {
                sql: texts[side.index()].clone(),
                args: [
                    Arg::from(lease.worker_id.as_str()),
                    Arg::Int(lease.lock_until_ms),
                    Arg::Int(params.now_ms),
                ]
                .into_iter()
                .chain(select.args)
                .collect(),
            },
            None => select,
        }
    }

    /// One branch's one-statement claim and lease with its arguments; `None` where the dialect
    /// has no such statement.
    pub(crate) fn claim_lease_query(
        &self,
        branch: ClaimBranch,
        params: &ClaimParams,
        lease: &Lease,
        limit: usize,
    ) -> Option<Bound> {
        let texts = self.claim_lease.as_ref()?;
        let select = self.claim_query(branch, params, limit);
        let mut args = vec![
            Arg::from(lease.worker_id.as_str()),
            Arg::Int(lease.lock_until_ms),
            Arg::Int(params.now_ms),
        ];
        args.extend(select.args);
        Some(Bound {
            sql: texts[branch.index()][ordering_index(params.ordering)].clone(),
            args,
        })
    }

    /// Every statement besides the branch statements ([`Statements::claim_statement`]) that a
    /// claim handing out `event_ids` under `lease` (rejecting the first of them) and the mark of
    /// those rows as delivered run, named `lease`, `reject`, `lock_fenced` and `mark` (those the
    /// dialect needs), with their arguments: e.g. for `EXPLAIN` in tests.
    pub fn follow_up_statements(
        &self,
        lease: &Lease,
        now_ms: i64,
        event_ids: &[&str],
    ) -> Vec<(&'static str, Bound)> {
        let (backend, table) = (self.backend, &self.table);
        let rejected: Vec<RejectedRow> = event_ids
            .iter()
            .take(1)
            .map(|id| RejectedRow {
                event_id: id.to_string(),
                event_type: String::new(),
                room_id: String::new(),
                reason: "envelope does not decode".into(),
            })
            .collect();
        let marks: Vec<Mark> = event_ids.iter().map(|id| Mark::delivered(*id)).collect();
        let dialect = backend.dialect();
        let mut statements = dialect.claim_follow_ups(table, lease, now_ms, event_ids, &rejected);
        statements.extend(dialect.mark_statements(table, lease, &marks, now_ms));
        statements
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

    /// The mark a held batch ([`crate::store::HeldBatch::mark`]) runs for rows `event_ids`
    /// (marked delivered) at `addresses` (one per id, as the held claim read them; ignored where
    /// the dialect marks by primary key), with its arguments: e.g. for `EXPLAIN` in tests.
    pub fn held_mark_statement(
        &self,
        app_code: &str,
        worker_id: &str,
        now_ms: i64,
        event_ids: &[&str],
        addresses: &[&str],
    ) -> Bound {
        let marks: Vec<Mark> = event_ids.iter().map(|id| Mark::delivered(*id)).collect();
        super::held::mark_held_rows(
            self.backend,
            &self.table,
            app_code,
            worker_id,
            &marks,
            Some(addresses),
            now_ms,
        )
    }

    /// One claim branch's locking SELECT with `address` (an expression of alias `c`) as a
    /// seventh column, for the held claim ([`super::SqlDialect::held_row_address`]); binds like
    /// [`Statements::claim_select`].
    pub(crate) fn claim_query_with_address(
        &self,
        branch: ClaimBranch,
        params: &ClaimParams,
        limit: usize,
        address: &str,
    ) -> Bound {
        let mut b = SqlBuilder::new(self.backend);
        write_claim_select(
            &mut b,
            self.backend,
            &self.table,
            branch,
            params.ordering,
            &format!(
                "c.event_id, c.event_type, c.room_id, c.envelope, c.created_at_ms, c.retry_count, {address}"
            ),
            None,
        );
        Bound {
            sql: b.text(),
            args: self.claim_query(branch, params, limit).args,
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
const CLAIM_COLUMNS: &str =
    "c.event_id, c.event_type, c.room_id, c.envelope, c.created_at_ms, c.retry_count";

fn claim_select_text(
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

/// Writes the locking SELECT of one claim branch returning `columns` (of alias `c`).
pub(crate) fn write_claim_select(
    b: &mut SqlBuilder,
    backend: Backend,
    table: &TableName,
    branch: ClaimBranch,
    ordering: DeliveryOrder,
    columns: &str,
    position: Option<PositionSide>,
) {
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
    if ordering == DeliveryOrder::PerRoom {
        // One probe of the (app_code, room_id, status, created_at_ms, event_id) index per active
        // status: is there an earlier event of this room still to deliver? Delivered history sits
        // under other status keys and is never read. One NOT EXISTS per status, each with
        // `status = const`: with `status IN (…)` MariaDB probes only (app_code, room_id) and reads
        // the room's whole history (tests/explain.rs).
        let hint = backend
            .dialect()
            .room_probe_index_hint(&ROOM_INDEX.name(table))
            .unwrap_or_default();
        for status in ACTIVE_STATUSES {
            b.push(" AND NOT EXISTS (SELECT 1 FROM ")
                .push(table.as_str())
                .push(" p")
                .push(&hint)
                .push(" WHERE p.app_code = c.app_code AND p.room_id = c.room_id AND p.status = ")
                .status(status)
                .push(" AND p.created_at_ms <= c.created_at_ms")
                .push(" AND (p.created_at_ms < c.created_at_ms OR p.event_id < c.event_id)")
                .push(backend.dialect().probe_end());
        }
    }
    b.push(" ORDER BY ")
        .push(order_by)
        .push(" LIMIT ")
        .placeholder()
        .push(backend.dialect().row_lock());
}

fn counts_text(backend: Backend, table: &TableName, by_app: bool) -> Arc<str> {
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
    b.push(", worker_id = ")
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
    backend: Backend,
    table: &TableName,
    app_code: &str,
    now_ms: i64,
    rejected: &[RejectedRow],
) -> Bound {
    let mut b = claimed_rows_update(backend, table, Status::Failed);
    b.push(", lock_until_ms = NULL, last_error = CASE event_id");
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
        .bind_list(rejected.iter().map(|r| r.event_id.as_str()));
    b.finish()
}
