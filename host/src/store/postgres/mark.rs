//! PostgreSQL's mark: the shared autocommit mark ([`MarkOps`]), a large one sent unprepared.
//!
//! A mark of up to [`CACHED_PLAN_ROWS`] rows runs as the connection's prepared statement, on the
//! plan PostgreSQL caches for it. A larger one is sent unprepared, as a text of its own (sqlx
//! would run a text it has prepared before on that statement), so it is planned for its own
//! ids: a cached (generic) plan compares each row it reads with every id of the bound array in
//! turn (the ids are a parameter, not a constant it can hash), which took 105 ms for a mark of
//! 1,000 rows against 11 ms planned for them (`EXPLAIN ANALYZE`, PostgreSQL 15). The extra round
//! trip and the planning cost a large mark well under a tenth of its time.

use sqlx::{PgConnection, Postgres};

use super::PostgresStore;
use crate::store::exec_mark::MarkOps;
use crate::store::session::{Session, bind_args};
use crate::store::statement::Bound;

/// The most rows a mark runs on a cached plan: comparing each row read with each id costs
/// 64 × 64 string comparisons at most, a few microseconds.
const CACHED_PLAN_ROWS: usize = 64;

/// Ends the text of a mark sent unprepared, so it is never the text of a prepared statement.
const UNPREPARED: &str = "/* unprepared: planned for its ids */";

impl MarkOps for PostgresStore {
    async fn run_update(
        conn: &mut PgConnection,
        mut update: Bound,
        marks: usize,
    ) -> Result<u64, sqlx::Error> {
        if marks <= CACHED_PLAN_ROWS {
            return conn.run(update).await;
        }
        update.sql = format!("{} {UNPREPARED}", update.sql).into();
        let done = bind_args::<Postgres>(update)
            .persistent(false)
            .execute(conn)
            .await?;
        Ok(done.rows_affected())
    }
}
