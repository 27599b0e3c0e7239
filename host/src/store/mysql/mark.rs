//! MySQL's / MariaDB's mark: the fenced UPDATE alone, in autocommit (no `BEGIN`, no `COMMIT`
//! round trip: the statement commits itself). Its affected-row count is the rows its WHERE
//! matched (sqlx connects with `CLIENT_FOUND_ROWS`); when that is every mark, every row was still
//! under the lease. Otherwise (rare: a row of a partition another host took over, or this mark
//! run again after a lost reply) MySQL has no `UPDATE … RETURNING`, so the rows this mark
//! changed are listed by what it wrote ([`marked_rows`]).

use super::MySqlStore;
use crate::record::Status;
use crate::store::driver::db;
use crate::store::exec_mark::MarkOps;
use crate::store::row::EventId;
use crate::store::session::Session;
use crate::store::statement::mark::{MarkAt, mark_rows_counted};
use crate::store::statement::{Bound, SqlBuilder};
use crate::store::{Backend, Lease, Mark, StoreError, TableName};

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
        conn.rows::<EventId>(marked_rows(table, lease, marks, at.now_ms))
            .await
            .map_err(db(OP))
    }
}

/// The rows of `marks` that a mark under `lease` at `now_ms` changed: each has no lease left,
/// `updated_at_ms = now_ms` and a status a mark writes (a row left `pending` was not changed,
/// whatever time its producer wrote). A row marked earlier carries another time; a mark run
/// again after a lost reply (the same `now_ms`) finds the rows its first run changed. (A row of a
/// partition another host took over and marked in the very same millisecond would be counted
/// here too: both delivered it, and only this host's count of applied marks is off.)
pub(crate) fn marked_rows(table: &TableName, lease: &Lease, marks: &[Mark], now_ms: i64) -> Bound {
    let mut b = SqlBuilder::new(Backend::MySql);
    b.push("SELECT event_id FROM ")
        .push(table.as_str())
        .push(" FORCE INDEX (PRIMARY) WHERE app_code = ")
        .bind(lease.app_code.as_str())
        .push(" AND event_id")
        .bind_in(marks.iter().map(|m| m.event_id.as_str()))
        .push(" AND status <> ")
        .status(Status::Pending)
        .push(" AND lock_until_ms IS NULL AND updated_at_ms = ")
        .bind(now_ms);
    b.finish()
}
