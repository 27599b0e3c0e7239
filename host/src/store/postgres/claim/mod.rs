//! PostgreSQL's claim: each branch claimed and leased in one statement that reaches the rows it
//! locked by `ctid` ([`claim_lease_text`]), the rows it rejected failed fenced on the new lease
//! ([`reject_leased_rows`]), and a claim transaction that commits without waiting for its WAL
//! flush ([`PostgresStore`]'s `begin_claim`).

use std::sync::Arc;

use super::PostgresStore;
use crate::record::Status;
use crate::store::driver::db;
use crate::store::exec_claim::ClaimOps;
use crate::store::row::{CandidateRow, LeasedRow};
use crate::store::session::Session;
use crate::store::statement::claim::room_heads::{
    write_head_key, write_room_probes, write_walk_cte,
};
use crate::store::statement::claim::{
    ClaimBranch, PositionSide, retry_count_after_reclaim, write_claim_select,
};
use crate::store::statement::mark::lease_fence;
use crate::store::statement::{Bound, MAX_ROWS_PER_STATEMENT, SqlBuilder};
use crate::store::{
    Backend, ClaimBatch, ClaimParams, DeliveryOrder, Lease, RejectedRow, StoreError, TableName,
};

impl ClaimOps for PostgresStore {
    /// A claim commits without waiting for the WAL flush (one simple query, one round trip): on
    /// this project's disk a flush is ~3.5 ms, half of a round's database time. Only a lease is
    /// at stake: a server crash may forget the last claims (their rows are claimed again,
    /// published twice at worst, and a reclaimed lease's attempt may go uncounted), never a
    /// mark, since the WAL is flushed in order and a mark's commit waits for its flush.
    async fn begin_claim(&self) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        let begin = "BEGIN; SET LOCAL synchronous_commit = off";
        self.pool.begin_with(begin).await.map_err(db("claim"))
    }

    /// The one-statement claim's rows, sorted back into the branch's order by their position.
    async fn claimed_rows<S: Session>(
        &self,
        session: &mut S,
        query: Bound,
    ) -> Result<Vec<CandidateRow>, sqlx::Error> {
        let mut rows = session.rows::<LeasedRow>(query).await?;
        rows.sort_by_key(|row| row.position);
        Ok(rows.into_iter().map(|row| row.candidate).collect())
    }

    /// The rows are leased already (by the claim statement): only the rejected ones are failed,
    /// under the new lease.
    async fn lease_and_reject<S: Session>(
        &self,
        session: &mut S,
        params: &ClaimParams,
        batch: &ClaimBatch,
    ) -> Result<(), StoreError> {
        let table = self.statements.table();
        for rejected in batch.rejected.chunks(MAX_ROWS_PER_STATEMENT) {
            let reject = reject_leased_rows(table, &batch.lease, params.now_ms, rejected);
            session.run(reject).await.map_err(db("claim"))?;
        }
        Ok(())
    }
}

/// One branch claimed and leased in one statement: the branch's
/// locking SELECT lists the addresses of its rows in claim order; the UPDATE reaches each by its
/// address (a TID scan on PostgreSQL, whatever the statistics), leases it exactly like
/// the lease UPDATE of the other databases (`statement::claim::lease_rows`), and returns the candidate columns with the position. `retry_count` is returned
/// as it was before the claim, so a reclaimed row is judged like one read by the SELECT.
pub(crate) fn claim_lease_text(
    table: &TableName,
    branch: ClaimBranch,
    ordering: DeliveryOrder,
    address: &str,
    position: Option<PositionSide>,
) -> Arc<str> {
    let t = table.as_str();
    let mut b = SqlBuilder::new(Backend::Postgres);
    b.push("UPDATE ").push(t).push(" SET ");
    retry_count_after_reclaim(&mut b);
    b.push(", status = ")
        .status(Status::Delivering)
        .push(", next_retry_at_ms = 0, worker_id = ")
        .placeholder()
        .push(", lock_until_ms = ")
        .placeholder()
        .push(", updated_at_ms = ")
        .placeholder()
        .push(" FROM unnest(ARRAY(");
    write_claim_select(
        &mut b,
        Backend::Postgres,
        table,
        branch,
        ordering,
        &format!("c.{address}"),
        position,
    );
    let retry_count_before = match branch {
        ClaimBranch::ExpiredLease => " - 1",
        ClaimBranch::Pending | ClaimBranch::Retryable => "",
    };
    b.push(")) WITH ORDINALITY AS claimed(address, position) WHERE ")
        .push(t)
        .push(".")
        .push(address)
        .push(" = claimed.address RETURNING ");
    for column in [
        "event_id",
        "event_type",
        "room_id",
        "envelope",
        "created_at_ms",
    ] {
        b.push(t).push(".").push(column).push(", ");
    }
    b.push(t)
        .push(".retry_count")
        .push(retry_count_before)
        .push(", claimed.position");
    b.text()
}

/// Moves rows a one-statement claim leased and then rejected to `failed` with their reason,
/// fenced on the new lease like a mark (the reclaimed attempt is already counted; `worker_id` is
/// the claiming worker's). The lease columns lead the lease index, so the rows are found through
/// it whatever the statistics say.
pub(crate) fn reject_leased_rows(
    table: &TableName,
    lease: &Lease,
    now_ms: i64,
    rejected: &[RejectedRow],
) -> Bound {
    let mut b = SqlBuilder::new(Backend::Postgres);
    b.push("UPDATE ")
        .push(table.as_str())
        .push(" SET status = ")
        .status(Status::Failed)
        .push(", lock_until_ms = NULL, last_error = CASE event_id");
    for row in rejected {
        b.push(" WHEN ")
            .bind(row.event_id.as_str())
            .push(" THEN ")
            .bind_last_error(&row.reason);
    }
    b.push(" ELSE last_error END, updated_at_ms = ")
        .bind(now_ms);
    lease_fence(
        &mut b,
        table,
        lease,
        rejected.iter().map(|r| r.event_id.as_str()),
    );
    b.finish()
}

/// Writes PostgreSQL's pending branch of a per-room claim, returning `columns` (of alias `c`):
/// the room walk ([`write_walk_cte`]), then per room a `LATERAL` subquery reading its head by
/// the head's whole key and locking it (`FOR UPDATE SKIP LOCKED`) when no earlier event of its
/// room is retryable or delivering. `LATERAL` keeps the walk driving, one point lookup per room,
/// whatever the statistics: joined plainly, the planner hash-joined the walk with every pending
/// row of a tenant whose table it had no statistics for. The subquery's `ctid` column stands for
/// the row's, so `columns` may name `c.ctid`. Binds like the default walk, then the row limit.
pub(crate) fn write_room_heads(
    b: &mut SqlBuilder,
    table: &TableName,
    columns: &str,
    walk: Option<PositionSide>,
) {
    let backend = Backend::Postgres;
    write_walk_cte(b, backend, table, walk);
    b.push(" SELECT ")
        .push(columns)
        .push(" FROM walk w CROSS JOIN LATERAL (SELECT c.ctid AS ctid, c.* FROM ")
        .push(table.as_str())
        .push(" c WHERE ");
    write_head_key(b, "c");
    write_room_probes(b, backend, table, &[Status::Retryable, Status::Delivering]);
    b.push(" FOR UPDATE SKIP LOCKED) c LIMIT ").placeholder();
}

#[cfg(test)]
mod tests;
