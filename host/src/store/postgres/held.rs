//! PostgreSQL's held claim: its transaction bounded in idle time by the server
//! (`idle_in_transaction_session_timeout`, for that transaction only), and each row read with its
//! `ctid`, which the held mark reaches it by (a TID scan whatever the statistics).

use super::PostgresStore;
use crate::store::driver::{begin_write, db};
use crate::store::exec_held::{HELD_OP, HeldOps};
use crate::store::room_cursor::RoomWalk;
use crate::store::row::{AddressedRow, CandidateRow};
use crate::store::session::Session;
use crate::store::statement::claim::ClaimBranch;
use crate::store::statement::held::HeldRowAddress;
use crate::store::statement::{Bound, SqlBuilder};
use crate::store::{Backend, ClaimParams, StoreError};

/// How a held mark reaches the rows its claim locked: by `ctid` (locked by the same transaction,
/// so the address cannot change under it).
pub(crate) const HELD_ROW_ADDRESS: HeldRowAddress = HeldRowAddress {
    select: "c.ctid::text",
    match_start: "ctid = ANY(",
    match_end: "::tid[])",
};

impl HeldOps for PostgresStore {
    /// A write transaction that the server ends (rolling it back, releasing its row locks) once
    /// it has sat idle for `params.lease_ms`, so a host that hangs mid-publish without dying
    /// cannot hold rows forever.
    async fn begin_held(
        &self,
        params: &ClaimParams,
    ) -> Result<sqlx::Transaction<'static, sqlx::Postgres>, StoreError> {
        let mut tx = begin_write(self, HELD_OP).await?;
        tx.run(idle_limit(params.lease_ms))
            .await
            .map_err(db(HELD_OP))?;
        Ok(tx)
    }

    /// The branch's SELECT with each row's `ctid` as a seventh column.
    async fn held_rows<S: Session>(
        &self,
        session: &mut S,
        branch: ClaimBranch,
        params: &ClaimParams,
        limit: usize,
        walk: &RoomWalk,
    ) -> Result<Vec<(CandidateRow, Option<String>)>, sqlx::Error> {
        let address = HELD_ROW_ADDRESS.select;
        let query = self
            .statements
            .claim_query_with_address(branch, params, limit, address, walk);
        let rows = session.rows::<AddressedRow>(query).await?;
        Ok(rows
            .into_iter()
            .map(|row| (row.candidate, Some(row.address)))
            .collect())
    }
}

/// `idle_in_transaction_session_timeout` for this transaction only (`set_config(…, true)` is
/// `SET LOCAL`): the server ends the session of a held transaction idle that long.
fn idle_limit(limit_ms: i64) -> Bound {
    let mut b = SqlBuilder::new(Backend::Postgres);
    b.push("SELECT set_config('idle_in_transaction_session_timeout', ")
        .bind(limit_ms.max(1).to_string())
        .push(", true)");
    b.finish()
}
