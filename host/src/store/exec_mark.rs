//! The leased mark, written once for every backend over the shared executor ([`super::exec`]):
//! a batch's marks as fenced UPDATEs, retried while the lease holds, and the ids no UPDATE
//! changed reported stale.

use std::collections::HashSet;

use super::exec::{CLAIM_RETRY_BUDGET, Driver, Session, begin_write, db, retry_transient};
use super::row::EventId;
use super::statement::MAX_ROWS_PER_STATEMENT;
use super::statement::mark::{lock_fenced_rows, mark_rows, mark_rows_counted};
use crate::record;
use crate::store::{Lease, Mark, MarkParams, MarkReport, StoreError};

/// Applies a batch's marks: one fenced UPDATE (per [`MAX_ROWS_PER_STATEMENT`] marks); the ids it
/// did not change are stale. PostgreSQL runs it alone (no BEGIN/COMMIT) with `RETURNING`, which
/// lists the ids it changed. SQLite and MySQL run it first in a transaction without an id list
/// and commit when it matched every mark; otherwise it is rolled back and runs again listing the
/// ids: with `RETURNING` (SQLite), or after locking and listing the fenced rows with `SELECT …
/// FOR UPDATE` (MySQL).
pub(crate) async fn mark<D: Driver>(
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
    // The marks hold publish results that exist nowhere else: keep trying while the lease holds
    // (after it, the rows are reclaimed and the marks would be stale anyway), and for at least the
    // claim's budget.
    let deadline_ms = params
        .lease
        .lock_until_ms
        .max(record::now_ms() + CLAIM_RETRY_BUDGET.as_millis() as i64);
    let mut changed = HashSet::with_capacity(params.marks.len());
    for marks in params.marks.chunks(MAX_ROWS_PER_STATEMENT) {
        // A mark is also retried while the database cannot be reached (a restart, a dropped
        // connection): its results exist nowhere else. Repeating a mark that did commit changes
        // nothing (the fence no longer matches) and reports its rows as stale.
        let retry_on = |err: &StoreError| err.is_transient() || err.is_unreachable();
        let ids = retry_transient(deadline_ms, retry_on, || {
            mark_once(driver, params.lease, marks, params.now_ms)
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

/// One transaction of [`mark`]: applies `marks` (one statement's worth) and returns the ids it
/// changed.
async fn mark_once<D: Driver>(
    driver: &D,
    lease: &Lease,
    marks: &[Mark],
    now_ms: i64,
) -> Result<Vec<EventId>, StoreError> {
    const OP: &str = "mark";
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    if backend.dialect().has_update_returning() && D::BEGIN_WRITE.is_none() {
        // One statement, atomic on its own: no BEGIN and COMMIT round trips around it.
        let update = mark_rows(backend, table, lease, marks, now_ms);
        let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
        return conn.rows::<EventId>(update).await.map_err(db(OP));
    }
    // Optimistic first: the fenced UPDATE alone, without an id list. Its affected-row count is
    // the rows its WHERE matched (SQLite counts every row an UPDATE writes; sqlx connects to MySQL
    // with CLIENT_FOUND_ROWS; every mark changes `status`), so when it equals the marks, every row
    // was still under the lease and is changed. Only when some were not does the mark roll back
    // and learn which ids are stale: listed by `RETURNING` (SQLite), or locked and listed first
    // (MySQL). On SQLite this saves handing 500 ids back row by row through the driver's channel
    // (docs/PERFORMANCE.md, "SQLite: a backlog of one timestamp").
    let mut tx = begin_write(driver, OP).await?;
    let counted = mark_rows_counted(backend, table, lease, marks, now_ms);
    let changed = tx.run(counted).await.map_err(db(OP))?;
    if changed == marks.len() as u64 {
        tx.commit().await.map_err(db(OP))?;
        return Ok(marks.iter().map(|m| EventId(m.event_id.clone())).collect());
    }
    tx.rollback().await.map_err(db(OP))?;
    // Some row was stale (rare): the statement that lists or follows the fenced rows.
    let update = mark_rows(backend, table, lease, marks, now_ms);
    tx = begin_write(driver, OP).await?;
    let ids = if backend.dialect().has_update_returning() {
        tx.rows::<EventId>(update).await.map_err(db(OP))?
    } else {
        let locked = tx
            .rows::<EventId>(lock_fenced_rows(backend, table, lease, marks))
            .await
            .map_err(db(OP))?;
        if !locked.is_empty() {
            tx.run(update).await.map_err(db(OP))?;
        }
        locked
    };
    tx.commit().await.map_err(db(OP))?;
    Ok(ids)
}
