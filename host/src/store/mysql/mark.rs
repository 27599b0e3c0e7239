//! MySQL's / MariaDB's mark: the fenced UPDATE alone, in autocommit (no `BEGIN`, no `COMMIT`
//! round trip: the statement commits itself). Its affected-row count is the rows its WHERE
//! matched (sqlx connects with `CLIENT_FOUND_ROWS`); when that is every mark, every row was still
//! under the lease. Otherwise (rare: a row of a partition another host took over, or this mark
//! run again after a lost reply) MySQL has no `UPDATE … RETURNING`, so the rows this mark
//! changed are listed by what it wrote ([`marked_rows`]). PostgreSQL marks the same way.

use super::MySqlStore;
use crate::store::driver::db;
use crate::store::exec_mark::MarkOps;
use crate::store::row::EventId;
use crate::store::session::Session;
use crate::store::statement::mark::{MarkAt, mark_rows_counted, marked_rows};
use crate::store::{Backend, Lease, Mark, StoreError};

impl MarkOps for MySqlStore {
    async fn mark_once(
        &self,
        lease: &Lease,
        marks: &[Mark],
        at: MarkAt,
    ) -> Result<Vec<EventId>, StoreError> {
        const OP: &str = "mark";
        let table = self.statements.table();
        let mut conn = self.pool().acquire().await.map_err(db(OP))?;
        let update = mark_rows_counted(Backend::MySql, table, lease, marks, at);
        let matched = conn.run(update).await.map_err(db(OP))?;
        if matched == marks.len() as u64 {
            return Ok(marks.iter().map(|m| EventId(m.event_id.clone())).collect());
        }
        conn.rows::<EventId>(marked_rows(Backend::MySql, table, lease, marks, at.now_ms))
            .await
            .map_err(db(OP))
    }
}
