//! The held claim, written once for every backend over the shared executor's [`Driver`]: the
//! branch SELECTs of the leased claim (`… FOR UPDATE SKIP LOCKED`; SQLite: in `BEGIN
//! IMMEDIATE`) in a transaction that the returned [`HeldBatch`] keeps open, rejected rows failed
//! in it, no lease written; the mark ([`mark_held_rows`]) and the commit when the batch is marked.
//! The steps a database does its own way are [`HeldOps`]' methods (PostgreSQL's, which bound the
//! transaction's idle time and read each row's `ctid`, in `store/postgres/held.rs`).

use std::collections::HashMap;

use async_trait::async_trait;

use super::driver::{Driver, begin_write, db, retry_transient};
use super::exec_claim::fail_rejected;
use super::held::{HeldBatch, HeldTransaction};
use super::judge::judge;
use super::room_cursor::RoomWalk;
use super::row::CandidateRow;
use super::session::Session;
use super::statement::MAX_ROWS_PER_STATEMENT;
use super::statement::claim::ClaimBranch;
use super::statement::held::mark_held_rows;
use crate::record;
use crate::store::{Backend, ClaimParams, DeliveryOrder, StoreError, TableName};

/// Claims up to `params.limit` rows (pending, then due retryable, in the leased claim's order;
/// never an expired lease: see [`HELD_BRANCHES`]) and keeps them locked in the returned batch's
/// open transaction. `lease_ms`
/// bounds how long the transaction may sit idle where the database can enforce it
/// ([`HeldOps::begin_held`]). A transaction the database aborts as
/// transient before the rows are handed out is run again, as a leased claim is.
pub(crate) async fn claim_held<D: HeldOps>(
    driver: &D,
    params: &ClaimParams,
) -> Result<HeldBatch, StoreError>
where
    for<'a> sqlx::Transaction<'a, D::Db>: Send,
{
    let deadline_ms = record::now_ms() + super::driver::CLAIM_RETRY_BUDGET.as_millis() as i64;
    retry_transient(deadline_ms, StoreError::is_transient, || {
        claim_held_once(driver, params)
    })
    .await
}

/// The steps of a held claim that a database may do its own way. The defaults: a write
/// transaction, and each branch read by the leased claim's SELECT, its rows marked later by
/// primary key.
pub(crate) trait HeldOps: Driver + Sized {
    /// Begins the held claim's transaction ([`begin_write`]).
    async fn begin_held(
        &self,
        params: &ClaimParams,
    ) -> Result<sqlx::Transaction<'static, Self::Db>, StoreError> {
        let _ = params;
        begin_write(self, HELD_OP).await
    }

    /// The rows of one branch, up to `limit`, in the branch's order (with per-room ordering, the
    /// pending branch's heads of the rooms `walk` covers), each with the address the held mark
    /// reaches it by (`None`: by primary key).
    async fn held_rows<S: Session>(
        &self,
        session: &mut S,
        branch: ClaimBranch,
        params: &ClaimParams,
        limit: usize,
        walk: &RoomWalk,
    ) -> Result<Vec<(CandidateRow, Option<String>)>, sqlx::Error> {
        let query = self
            .statements()
            .claim_query_walk(branch, params, limit, walk);
        let rows = session.rows::<CandidateRow>(query).await?;
        Ok(rows.into_iter().map(|row| (row, None)).collect())
    }
}

/// The operation a held claim's errors name.
pub(crate) const HELD_OP: &str = "claim (held)";

/// The branches a held claim reads: pending and due retryable rows. A `delivering` row whose
/// lease expired may be one that killed the host publishing it; reclaimed by a held claim, a
/// second crash would roll the reclaim back and spend no attempt, so it is left to a leased
/// claim, whose reclaim is committed before the publish (a held-mode worker runs leased claims
/// for that: `worker/held.rs`).
pub(crate) const HELD_BRANCHES: [ClaimBranch; 2] = [ClaimBranch::Pending, ClaimBranch::Retryable];

/// One attempt of [`claim_held`].
async fn claim_held_once<D: HeldOps>(
    driver: &D,
    params: &ClaimParams,
) -> Result<HeldBatch, StoreError>
where
    for<'a> sqlx::Transaction<'a, D::Db>: Send,
{
    const OP: &str = HELD_OP;
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    let limit = params.limit as usize;
    let (mut events, mut rejected) = (Vec::new(), Vec::new());
    // event_id → address of the rows handed out, where the database reads one.
    let mut addresses = HashMap::new();
    if limit == 0 {
        return Ok(HeldBatch::new(
            params.app_code.clone(),
            params.worker_id.clone(),
            events,
            rejected,
            None,
        ));
    }
    let mut tx = driver.begin_held(params).await?;
    let mut taken = 0;
    for branch in HELD_BRANCHES {
        let remaining = limit - taken;
        if remaining == 0 {
            break;
        }
        let rows = if branch == ClaimBranch::Pending && params.ordering == DeliveryOrder::PerRoom {
            held_room_heads(&mut *tx, driver, params, remaining).await?
        } else {
            let all = RoomWalk::Head;
            driver
                .held_rows(&mut *tx, branch, params, remaining, &all)
                .await
                .map_err(db(OP))?
        };
        taken += rows.len();
        for (row, address) in rows {
            match judge(&params.app_code, row, branch, params.max_attempts) {
                Ok(event) => {
                    if let Some(address) = address {
                        addresses.insert(event.event.event_id.clone(), address);
                    }
                    events.push(event);
                }
                Err(row) => rejected.push(row),
            }
        }
    }
    fail_rejected(&mut *tx, driver, params, &rejected, OP).await?;
    if events.is_empty() {
        // Nothing to hold: commit the rejections now.
        tx.commit().await.map_err(db(OP))?;
        return Ok(HeldBatch::new(
            params.app_code.clone(),
            params.worker_id.clone(),
            events,
            rejected,
            None,
        ));
    }
    let transaction = OpenTransaction {
        tx,
        backend,
        table: table.clone(),
        addresses,
    };
    Ok(HeldBatch::new(
        params.app_code.clone(),
        params.worker_id.clone(),
        events,
        rejected,
        Some(Box::new(transaction)),
    ))
}

/// The pending branch of a per-room held claim: up to `limit` room heads from the tenant's room
/// cursor on, then from the rooms up to it when those come back short, as the leased claim reads
/// them (`exec_claim.rs`); the room of the last head read becomes the cursor.
async fn held_room_heads<D: HeldOps, S: Session>(
    session: &mut S,
    driver: &D,
    params: &ClaimParams,
    limit: usize,
) -> Result<Vec<(CandidateRow, Option<String>)>, StoreError> {
    let mut walk = Some(driver.room_cursors().start(&params.app_code));
    let (mut rows, mut last_room) = (Vec::new(), None);
    while let Some(rooms) = walk.take() {
        let wanted = limit - rows.len();
        let read = driver
            .held_rows(session, ClaimBranch::Pending, params, wanted, &rooms)
            .await
            .map_err(db(HELD_OP))?;
        if let Some((row, _)) = read.last() {
            last_room = Some(row.room_id.clone());
        }
        walk = rooms.then(read.len(), wanted);
        rows.extend(read);
    }
    driver.room_cursors().record(&params.app_code, last_room);
    Ok(rows)
}

/// A held claim's open transaction (dropping it rolls back: sqlx queues the ROLLBACK and the
/// pool sends it when the connection comes back).
struct OpenTransaction<DB: sqlx::Database> {
    tx: sqlx::Transaction<'static, DB>,
    backend: Backend,
    table: TableName,
    /// event_id → the row's address, where the dialect addresses rows (else empty).
    addresses: HashMap<String, String>,
}

#[async_trait]
impl<DB> HeldTransaction for OpenTransaction<DB>
where
    DB: sqlx::Database<Connection: Session>,
    for<'a> sqlx::Transaction<'a, DB>: Send,
{
    async fn mark_and_commit(
        mut self: Box<Self>,
        app_code: &str,
        worker_id: &str,
        marks: &[super::Mark],
        now_ms: i64,
    ) -> Result<u64, StoreError> {
        const OP: &str = "mark (held)";
        let mut applied = 0;
        for chunk in marks.chunks(MAX_ROWS_PER_STATEMENT) {
            let addresses: Option<Vec<&str>> = chunk
                .iter()
                .map(|m| self.addresses.get(&m.event_id).map(String::as_str))
                .collect();
            let update = mark_held_rows(
                self.backend,
                &self.table,
                app_code,
                worker_id,
                chunk,
                addresses.as_deref(),
                now_ms,
            );
            applied += self.tx.run(update).await.map_err(db(OP))?;
        }
        self.tx.commit().await.map_err(db(OP))?;
        Ok(applied)
    }

    async fn release(self: Box<Self>) -> Result<(), StoreError> {
        self.tx.commit().await.map_err(db("release (held)"))
    }
}
