//! [`Statements`]: the fixed statements of one store, built once at connect from its backend and
//! table (the claim branches, the one-statement claims where the dialect has them, the counts),
//! and the statements a claim and a mark run, with their arguments, for `EXPLAIN` in tests.

use std::sync::Arc;

use super::{
    CLAIM_COLUMNS, ClaimBranch, PositionSide, claim_select_text, counts_text, ordering_index,
    write_claim_select,
};
use crate::store::claim_position::ClaimPosition;
use crate::store::room_cursor::RoomWalk;
use crate::store::statement::{Arg, Bound, SqlBuilder};
use crate::store::{Backend, ClaimParams, DeliveryOrder, Lease, Mark, RejectedRow, TableName};

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
    /// `[side]`: the pending branch's SELECT with per-room ordering, reading the rooms on one
    /// side of the room cursor.
    room_walk: [Arc<str>; 2],
    /// `[side]`: the same as one-statement claims, where the dialect has them.
    room_walk_lease: Option<[Arc<str>; 2]>,
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
        let (pending, per_room) = (ClaimBranch::Pending, DeliveryOrder::PerRoom);
        let room_walk = PositionSide::BOTH.map(|side| {
            let mut b = SqlBuilder::new(backend);
            write_claim_select(
                &mut b,
                backend,
                table,
                pending,
                per_room,
                CLAIM_COLUMNS,
                Some(side),
            );
            b.text()
        });
        let room_walk_lease = claim_lease.as_ref().map(|_| {
            PositionSide::BOTH.map(|side| {
                let text = dialect.claim_lease_text(table, pending, per_room, Some(side));
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
            room_walk,
            room_walk_lease,
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
    /// claim position ([`ClaimPosition`](crate::store::internals::ClaimPosition)), with its
    /// arguments, e.g. for `EXPLAIN` in tests: the one-statement claim and lease under `lease`
    /// where the dialect has it, else the locking SELECT.
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
    /// those rows as delivered run, named `lease`, `reject`, `mark` and (MySQL) `marked` (those the
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
        let args = self.claim_args(branch, params, &RoomWalk::Head, limit);
        Bound {
            sql: self.claim[branch.index()][ordering_index(params.ordering)].clone(),
            args,
        }
    }

    /// What one claim branch's SELECT binds: the room-heads statement's values for the pending
    /// branch with per-room ordering (`walk`: the rooms it reads), else `app_code`, then `now_ms`
    /// for the due branches; then the row limit.
    fn claim_args(
        &self,
        branch: ClaimBranch,
        params: &ClaimParams,
        walk: &RoomWalk,
        limit: usize,
    ) -> Vec<Arg> {
        let app_code = params.app_code.as_str();
        let mut args =
            if branch == ClaimBranch::Pending && params.ordering == DeliveryOrder::PerRoom {
                self.backend.dialect().room_heads_args(app_code, walk)
            } else {
                vec![Arg::from(app_code)]
            };
        if branch != ClaimBranch::Pending {
            args.push(Arg::Int(params.now_ms));
        }
        args.push(Arg::Int(limit as i64));
        args
    }

    /// The statement a per-room claim runs for the pending branch over the rooms `walk` covers
    /// ([`RoomWalk`](crate::store::internals::RoomWalk)), with its arguments (e.g. for `EXPLAIN`
    /// in tests): the one-statement claim and lease under `lease` where the dialect has it, else
    /// the locking SELECT. It hands out room heads, each leased (or locked) in its own row.
    pub fn claim_statement_by_room(
        &self,
        params: &ClaimParams,
        lease: &Lease,
        walk: &RoomWalk,
        limit: usize,
    ) -> Bound {
        let args = self.claim_args(ClaimBranch::Pending, params, walk, limit);
        let lease_text = self.room_walk_lease.as_ref().and_then(|walk_texts| {
            let texts = self.claim_lease.as_ref()?;
            Some(match walk {
                RoomWalk::Head => texts[ClaimBranch::Pending.index()]
                    [ordering_index(DeliveryOrder::PerRoom)]
                .clone(),
                RoomWalk::After(_) => walk_texts[PositionSide::After.index()].clone(),
                RoomWalk::UpTo(_) => walk_texts[PositionSide::UpTo.index()].clone(),
            })
        });
        let select = self.claim_statement_by_room_select(walk);
        match lease_text {
            Some(sql) => Bound {
                sql,
                args: [
                    Arg::from(lease.worker_id.as_str()),
                    Arg::Int(lease.lock_until_ms),
                    Arg::Int(params.now_ms),
                ]
                .into_iter()
                .chain(args)
                .collect(),
            },
            None => Bound { sql: select, args },
        }
    }

    /// One claim branch with its arguments, the pending branch with per-room ordering over the
    /// rooms `walk` covers (the held claim's SELECT).
    pub fn claim_query_walk(
        &self,
        branch: ClaimBranch,
        params: &ClaimParams,
        limit: usize,
        walk: &RoomWalk,
    ) -> Bound {
        if branch == ClaimBranch::Pending && params.ordering == DeliveryOrder::PerRoom {
            let select = self.claim_statement_by_room_select(walk);
            return Bound {
                sql: select,
                args: self.claim_args(branch, params, walk, limit),
            };
        }
        self.claim_query(branch, params, limit)
    }

    /// The per-room pending branch's SELECT text over the rooms `walk` covers.
    fn claim_statement_by_room_select(&self, walk: &RoomWalk) -> Arc<str> {
        match walk {
            RoomWalk::Head => {
                let per_room = ordering_index(DeliveryOrder::PerRoom);
                self.claim[ClaimBranch::Pending.index()][per_room].clone()
            }
            RoomWalk::After(_) => self.room_walk[PositionSide::After.index()].clone(),
            RoomWalk::UpTo(_) => self.room_walk[PositionSide::UpTo.index()].clone(),
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
        crate::store::statement::held::mark_held_rows(
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
    /// seventh column, for the held claim ([`crate::store::statement::SqlDialect::held_row_address`]); binds like
    /// [`Statements::claim_select`] (with per-room ordering, its pending branch reads the rooms
    /// `walk` covers).
    pub(crate) fn claim_query_with_address(
        &self,
        branch: ClaimBranch,
        params: &ClaimParams,
        limit: usize,
        address: &str,
        walk: &RoomWalk,
    ) -> Bound {
        let side = match walk {
            RoomWalk::Head => None,
            RoomWalk::After(_) => Some(PositionSide::After),
            RoomWalk::UpTo(_) => Some(PositionSide::UpTo),
        };
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
            side.filter(|_| {
                branch == ClaimBranch::Pending && params.ordering == DeliveryOrder::PerRoom
            }),
        );
        Bound {
            sql: b.text(),
            args: self.claim_args(branch, params, walk, limit),
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
