//! The mark, written once for every backend over the shared executor ([`super::exec`]): a
//! batch's marks as UPDATEs fenced on its partition, retried while the partition's lease holds,
//! and the ids no UPDATE changed reported stale.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use super::driver::{Driver, TRANSIENT_RETRY_BUDGET, begin_write, db, retry_transient};
use super::row::EventId;
use super::session::Session;
use super::statement::MAX_ROWS_PER_STATEMENT;
use super::statement::mark::{MarkAt, mark_rows, mark_rows_counted};
use crate::record;
use crate::store::{Lease, Mark, MarkParams, MarkReport, StoreError};

/// Applies a batch's marks: one fenced UPDATE (per [`MAX_ROWS_PER_STATEMENT`] marks); the ids it
/// did not change are stale. How each statement runs is the database's ([`MarkOps::mark_once`]).
pub(crate) async fn mark<D: MarkOps>(
    driver: &D,
    params: &MarkParams<'_>,
) -> Result<MarkReport, StoreError> {
    let mut seen = HashSet::with_capacity(params.marks.len());
    if let Some(twice) = params
        .marks
        .iter()
        .find(|m| !seen.insert(m.event_id.as_str()))
    {
        return Err(StoreError::Invalid(format!(
            "event id {:?} is marked twice in one batch",
            twice.event_id
        )));
    }
    // The marks hold publish results that exist nowhere else: keep trying while the partition's
    // lease holds (after it, another host may own the partition and the marks would be stale
    // anyway), and for at least the transient budget.
    let deadline_ms = params
        .lease
        .lock_until_ms
        .max(record::now_ms() + TRANSIENT_RETRY_BUDGET.as_millis() as i64);
    let mut changed = HashSet::with_capacity(params.marks.len());
    for marks in params.marks.chunks(MAX_ROWS_PER_STATEMENT) {
        // A mark is also retried while the database cannot be reached (a restart, a dropped
        // connection): its results exist nowhere else. A run cut off that way may have
        // committed: the runs after it leave the rows that carry its time alone
        // ([`MarkAt::again`]; a `retryable` row, still live, would count a second attempt), and
        // report them stale (MySQL: changed), as they report a row another run finished.
        let reply_lost = AtomicBool::new(false);
        let retry_on = |err: &StoreError| {
            reply_lost.fetch_or(err.is_unreachable(), Ordering::Relaxed);
            err.is_transient() || err.is_unreachable()
        };
        let ids = retry_transient(deadline_ms, retry_on, || {
            let at = MarkAt {
                now_ms: params.now_ms,
                again: reply_lost.load(Ordering::Relaxed),
            };
            driver.mark_once(params.lease, marks, at)
        })
        .await?;
        changed.extend(ids.into_iter().map(|EventId(id)| id));
    }
    let stale = params
        .marks
        .iter()
        .filter(|m| !changed.contains(&m.event_id))
        .map(|m| m.event_id.clone())
        .collect();
    Ok(MarkReport {
        applied: changed.len() as u64,
        stale,
    })
}

/// How a database applies one statement's worth of marks in one transaction and lists the ids it
/// changed. The default body is SQLite's: [`mark_counted`] first, and when some row was stale the
/// fenced UPDATE again with `RETURNING event_id`. PostgreSQL and MySQL (`store/postgres/mark.rs`,
/// `store/mysql/mark.rs`: the UPDATE alone in autocommit, no `RETURNING`: the rows it changed
/// listed after it when it matched fewer) override it.
pub(crate) trait MarkOps: Driver + Sized {
    /// One transaction of [`mark`]: applies `marks` (one statement's worth) and returns the ids
    /// it changed.
    async fn mark_once(
        &self,
        lease: &Lease,
        marks: &[Mark],
        at: MarkAt,
    ) -> Result<Vec<EventId>, StoreError> {
        const OP: &str = "mark";
        if let Some(ids) = mark_counted(self, lease, marks, at).await? {
            return Ok(ids);
        }
        // Some row was stale (rare): the statement that lists the fenced rows it changes.
        let statements = self.statements();
        let update = mark_rows(statements.backend(), statements.table(), lease, marks, at);
        let mut tx = begin_write(self, OP).await?;
        let ids = tx.rows::<EventId>(update).await.map_err(db(OP))?;
        tx.commit().await.map_err(db(OP))?;
        Ok(ids)
    }
}

/// The optimistic first try of a mark: the fenced UPDATE alone, without an id list, in a write
/// transaction. Its affected-row count is the rows its WHERE matched (SQLite counts every row an
/// UPDATE writes; sqlx connects to MySQL with CLIENT_FOUND_ROWS; every mark changes `status`), so
/// when it equals the marks, every row was still under the lease and is changed: committed, every
/// id returned. Otherwise rolled back, `None`: the caller learns which ids are stale its own way.
/// On SQLite this saves handing 500 ids back row by row through the driver's channel
/// (the git history of docs/PERFORMANCE.md, "SQLite: a backlog of one timestamp").
pub(crate) async fn mark_counted<D: Driver>(
    driver: &D,
    lease: &Lease,
    marks: &[Mark],
    at: MarkAt,
) -> Result<Option<Vec<EventId>>, StoreError> {
    const OP: &str = "mark";
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    let mut tx = begin_write(driver, OP).await?;
    let counted = mark_rows_counted(backend, table, lease, marks, at);
    let changed = tx.run(counted).await.map_err(db(OP))?;
    if changed == marks.len() as u64 {
        tx.commit().await.map_err(db(OP))?;
        return Ok(Some(
            marks.iter().map(|m| EventId(m.event_id.clone())).collect(),
        ));
    }
    tx.rollback().await.map_err(db(OP))?;
    Ok(None)
}
