//! The busy claim in one round trip: where the store keeps a claim pool
//! ([`Driver::claim_pool`], PostgreSQL), a claim that reads only the pending branch from its
//! head runs its one `UPDATE … RETURNING` in autocommit on a session that commits without
//! waiting for the WAL flush, instead of `BEGIN; SET LOCAL synchronous_commit = off`, the
//! statement, `COMMIT` (three round trips).
//!
//! A claim qualifies when it does not ask for the due branches ([`ClaimParams::scan_due`]) and
//! reads the pending rows from the head (per-room ordering, or no claim position remembered). If
//! the statement hands out nothing, the due branches are read next in a transaction as before
//! (nothing was leased yet). Rows the statement leased but that fail to decode are failed by a
//! second statement; should that one fail, they keep their lease and are claimed again when it
//! expires, as after a host that died right after its claim.

use super::claim_position::PendingStart;
use super::exec::{Driver, Session, db};
use super::exec_claim::leased_rows;
use super::judge::judge;
use super::statement::MAX_ROWS_PER_STATEMENT;
use super::statement::claim::{ClaimBranch, reject_leased_rows};
use crate::store::{ClaimBatch, ClaimParams, DeliveryOrder, StoreError};

/// What [`claim_pending`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Autocommit {
    /// The claim does not qualify (or the store has no claim pool): claim in a transaction.
    NotTried,
    /// The pending branch handed out nothing: read the due branches in a transaction.
    NothingPending,
    /// The claim is done: `batch` holds its rows.
    Claimed,
}

/// Runs the claim's pending branch in autocommit on the claim pool when the claim qualifies
/// (module docs), filling `batch` and failing its rejected rows; remembers the claim position.
pub(crate) async fn claim_pending<D: Driver>(
    driver: &D,
    params: &ClaimParams,
    batch: &mut ClaimBatch,
) -> Result<Autocommit, StoreError> {
    const OP: &str = "claim";
    let Some(pool) = driver.claim_pool() else {
        return Ok(Autocommit::NotTried);
    };
    let positions = driver
        .positions()
        .filter(|_| params.ordering == DeliveryOrder::None);
    let from_head =
        positions.is_none_or(|p| p.start(&params.app_code, params.now_ms) == PendingStart::Head);
    if params.scan_due || !from_head {
        return Ok(Autocommit::NotTried);
    }
    let statements = driver.statements();
    let limit = params.limit as usize;
    let Some(query) =
        statements.claim_lease_query(ClaimBranch::Pending, params, &batch.lease, limit)
    else {
        return Ok(Autocommit::NotTried);
    };
    let mut conn = pool.acquire().await.map_err(db(OP))?;
    let rows = leased_rows(&mut *conn, query).await.map_err(db(OP))?;
    let (full, last) = (
        rows.len() == limit,
        rows.last().map(|row| row.candidate.created_at_ms),
    );
    let taken = rows.len();
    for row in rows {
        match judge(
            &params.app_code,
            row.candidate,
            ClaimBranch::Pending,
            params.max_attempts,
        ) {
            Ok(event) => batch.events.push(event),
            Err(rejected) => batch.rejected.push(rejected),
        }
    }
    for rejected in batch.rejected.chunks(MAX_ROWS_PER_STATEMENT) {
        conn.run(reject_leased_rows(
            statements.backend(),
            statements.table(),
            &batch.lease,
            params.now_ms,
            rejected,
        ))
        .await
        .map_err(db(OP))?;
    }
    if let Some(positions) = positions {
        positions.record(
            &params.app_code,
            params.now_ms,
            PendingStart::Head,
            full,
            last,
        );
    }
    Ok(if taken == 0 {
        Autocommit::NothingPending
    } else {
        Autocommit::Claimed
    })
}
