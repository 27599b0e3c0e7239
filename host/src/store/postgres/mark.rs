//! PostgreSQL's mark: the fenced `UPDATE … RETURNING event_id` alone, atomic on its own, so no
//! BEGIN and COMMIT round trips around it.
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
use crate::store::row::{EventId, FromColumns};
use crate::store::session::{Session, bind_args};
use crate::store::statement::mark::{MarkAt, mark_rows};
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
        let mut update = mark_rows(Backend::Postgres, self.statements.table(), lease, marks, at);
        let mut conn = self.pool.acquire().await.map_err(db(OP))?;
        if marks.len() <= CACHED_PLAN_ROWS {
            return conn.rows::<EventId>(update).await.map_err(db(OP));
        }
        update.sql = format!("{} {UNPREPARED}", update.sql).into();
        let rows = bind_args::<sqlx::Postgres>(update)
            .persistent(false)
            .fetch_all(&mut *conn)
            .await
            .map_err(db(OP))?;
        rows.iter()
            .map(|row| EventId::from_columns(row))
            .collect::<Result<_, _>>()
            .map_err(db(OP))
    }
}
