//! The held claim, written once for every backend over the shared executor's [`Driver`]: the
//! branch SELECTs of the leased claim (`… FOR UPDATE SKIP LOCKED`; SQLite: in `BEGIN
//! IMMEDIATE`) in a transaction that the returned [`HeldBatch`] keeps open, rejected rows failed
//! in it, no lease written; the mark ([`mark_held_rows`]) and the commit when the batch is marked.

use std::collections::HashMap;

use async_trait::async_trait;

use super::driver::{Driver, begin_write, db, retry_transient};
use super::exec_claim::fail_rejected;
use super::held::{HeldBatch, HeldTransaction};
use super::judge::judge;
use super::row::{AddressedRow, CandidateRow};
use super::session::Session;
use super::statement::MAX_ROWS_PER_STATEMENT;
use super::statement::claim::ClaimBranch;
use super::statement::held::mark_held_rows;
use crate::record;
use crate::store::{Backend, ClaimParams, StoreError, TableName};

/// Claims up to `params.limit` rows (pending, then due retryable, in the leased claim's order;
/// never an expired lease: see [`HELD_BRANCHES`]) and keeps them locked in the returned batch's
/// open transaction. `lease_ms`
/// bounds how long the transaction may sit idle where the database can enforce it
/// ([`super::statement::SqlDialect::held_idle_limit`]). A transaction the database aborts as
/// transient before the rows are handed out is run again, as a leased claim is.
pub(crate) async fn claim_held<D: Driver>(
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

/// The branches a held claim reads: pending and due retryable rows. A `delivering` row whose
/// lease expired may be one that killed the host publishing it; reclaimed by a held claim, a
/// second crash would roll the reclaim back and spend no attempt, so it is left to a leased
/// claim, whose reclaim is committed before the publish (a held-mode worker runs leased claims
/// for that: `worker/held.rs`).
pub(crate) const HELD_BRANCHES: [ClaimBranch; 2] = [ClaimBranch::Pending, ClaimBranch::Retryable];

/// One attempt of [`claim_held`].
async fn claim_held_once<D: Driver>(
    driver: &D,
    params: &ClaimParams,
) -> Result<HeldBatch, StoreError>
where
    for<'a> sqlx::Transaction<'a, D::Db>: Send,
{
    const OP: &str = "claim (held)";
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    let limit = params.limit as usize;
    let (mut events, mut rejected) = (Vec::new(), Vec::new());
    let address = backend.dialect().held_row_address();
    // event_id → address of the rows handed out, where the dialect addresses rows.
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
    let mut tx = begin_write(driver, OP).await?;
    if let Some(limit) = backend.dialect().held_idle_limit(params.lease_ms) {
        tx.run(limit).await.map_err(db(OP))?;
    }
    let mut taken = 0;
    for branch in HELD_BRANCHES {
        let remaining = limit - taken;
        if remaining == 0 {
            break;
        }
        let rows: Vec<(CandidateRow, Option<String>)> = match address {
            Some(address) => tx
                .rows::<AddressedRow>(statements.claim_query_with_address(
                    branch,
                    params,
                    remaining,
                    address.select,
                ))
                .await
                .map_err(db(OP))?
                .into_iter()
                .map(|row| (row.candidate, Some(row.address)))
                .collect(),
            None => tx
                .rows::<CandidateRow>(statements.claim_query(branch, params, remaining))
                .await
                .map_err(db(OP))?
                .into_iter()
                .map(|row| (row, None))
                .collect(),
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
