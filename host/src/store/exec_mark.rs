//! The mark, written once for every backend over the shared executor ([`super::exec`]): a
//! batch's marks as UPDATEs fenced on its partition, retried while the partition's lease holds,
//! and the ids no UPDATE changed reported stale.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use sqlx::Database;

use super::driver::{Driver, TRANSIENT_RETRY_BUDGET, db, retry_transient};
use super::row::EventId;
use super::session::Session;
use super::statement::mark::{MarkAt, mark_rows_counted, marked_rows};
use super::statement::{Bound, MAX_ROWS_PER_STATEMENT};
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

/// How a database applies one statement's worth of marks and lists the ids it changed. The
/// default (MySQL, PostgreSQL): the fenced UPDATE alone, in autocommit (no `BEGIN`, no `COMMIT`
/// round trip). Its affected-row count is the rows its WHERE matched (sqlx connects to MySQL with
/// `CLIENT_FOUND_ROWS`); when that is every mark, every row was still under the lease. Otherwise
/// (rare: a row of a partition another host took over, or this mark run again after a lost
/// reply) the rows it changed are listed by what it wrote ([`marked_rows`]). (Handing 1,000 ids
/// back took ~4 % of a mark's time in `psql`; a whole drain does not show it through the noise.)
/// SQLite marks in a write transaction instead (`sqlite/mod.rs`).
pub(crate) trait MarkOps: Driver + Sized {
    /// Runs the fenced UPDATE of a mark of `marks` rows on `conn`: the rows it matched. Default:
    /// as every statement, prepared (PostgreSQL sends a large mark unprepared: `postgres/mark.rs`).
    async fn run_update(
        conn: &mut <Self::Db as Database>::Connection,
        update: Bound,
        _marks: usize,
    ) -> Result<u64, sqlx::Error> {
        conn.run(update).await
    }

    /// One try of [`mark`]: applies `marks` (one statement's worth) and returns the ids it
    /// changed.
    async fn mark_once(
        &self,
        lease: &Lease,
        marks: &[Mark],
        at: MarkAt,
    ) -> Result<Vec<EventId>, StoreError> {
        const OP: &str = "mark";
        let statements = self.statements();
        let mut conn = self.pool().acquire().await.map_err(db(OP))?;
        let update = mark_rows_counted(statements, lease, marks, at);
        let matched = Self::run_update(&mut conn, update, marks.len())
            .await
            .map_err(db(OP))?;
        if matched == marks.len() as u64 {
            return Ok(event_ids(marks));
        }
        let marked = marked_rows(statements, lease, marks, at.now_ms);
        conn.rows::<EventId>(marked).await.map_err(db(OP))
    }
}

/// The ids of `marks`: what a mark that matched every row changed.
pub(crate) fn event_ids(marks: &[Mark]) -> Vec<EventId> {
    marks.iter().map(|m| EventId(m.event_id.clone())).collect()
}
