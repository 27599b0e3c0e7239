//! PostgreSQL's mark: the fenced UPDATE alone, in autocommit (no BEGIN and COMMIT round trips),
//! without `RETURNING`. Its affected-row count is the rows its WHERE matched; when that is every
//! mark, every row was still under the lease. Otherwise (rare: a row of a partition another host
//! took over, or this mark run again after a lost reply) the rows this mark changed are listed by
//! what it wrote ([`marked_rows`]), as on MySQL: both server databases mark one way. (Handing
//! 1,000 ids back took ~4 % of a mark's time in `psql`; a whole drain does not show it through
//! the noise.)
//!
//! A mark of up to [`CACHED_PLAN_ROWS`] rows runs as the connection's prepared statement, on the
//! plan PostgreSQL caches for it. A larger one is sent unprepared, as a text of its own (sqlx
//! would run a text it has prepared before on that statement), so it is planned for its own
//! ids: a cached (generic) plan compares each row it reads with every id of the bound array in
//! turn (the ids are a parameter, not a constant it can hash), which took 105 ms for a mark of
//! 1,000 rows against 11 ms planned for them (`EXPLAIN ANALYZE`, PostgreSQL 15). The extra round
//! trip and the planning cost a large mark well under a tenth of its time.

use super::PostgresStore;
use crate::store::driver::db;
use crate::store::exec_mark::MarkOps;
use crate::store::row::EventId;
use crate::store::session::{Session, bind_args};
use crate::store::statement::mark::{MarkAt, mark_rows_counted, marked_rows};
use crate::store::{Backend, Lease, Mark, StoreError};

/// The most rows a mark runs on a cached plan: comparing each row read with each id costs
/// 64 × 64 string comparisons at most, a few microseconds.
const CACHED_PLAN_ROWS: usize = 64;

/// Ends the text of a mark sent unprepared, so it is never the text of a prepared statement.
const UNPREPARED: &str = "/* unprepared: planned for its ids */";

impl MarkOps for PostgresStore {
    async fn mark_once(
        &self,
        lease: &Lease,
        marks: &[Mark],
        at: MarkAt,
    ) -> Result<Vec<EventId>, StoreError> {
        const OP: &str = "mark";
        let table = self.statements.table();
        let mut update = mark_rows_counted(Backend::Postgres, table, lease, marks, at);
        let mut conn = self.pool.acquire().await.map_err(db(OP))?;
        let matched = if marks.len() <= CACHED_PLAN_ROWS {
            conn.run(update).await
        } else {
            update.sql = format!("{} {UNPREPARED}", update.sql).into();
            bind_args::<sqlx::Postgres>(update)
                .persistent(false)
                .execute(&mut *conn)
                .await
                .map(|done| done.rows_affected())
        }
        .map_err(db(OP))?;
        if matched == marks.len() as u64 {
            return Ok(marks.iter().map(|m| EventId(m.event_id.clone())).collect());
        }
        let marked = marked_rows(Backend::Postgres, table, lease, marks, at.now_ms);
        conn.rows::<EventId>(marked).await.map_err(db(OP))
    }
}
