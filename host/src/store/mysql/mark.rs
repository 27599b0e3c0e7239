//! MySQL's / MariaDB's mark: it has no `UPDATE … RETURNING`, so when the fenced UPDATE alone did
//! not match every mark, the rows still under the lease are locked and listed (`SELECT … FOR
//! UPDATE`, [`lock_fenced_rows`]) and then updated, in one transaction.

use super::MySqlStore;
use crate::store::driver::{begin_write, db};
use crate::store::exec_mark::{MarkOps, mark_counted};
use crate::store::row::EventId;
use crate::store::session::Session;
use crate::store::statement::mark::{lease_fence, mark_rows_counted};
use crate::store::statement::{Bound, SqlBuilder};
use crate::store::{Backend, Lease, Mark, StoreError, TableName};

impl MarkOps for MySqlStore {
    async fn mark_once(
        &self,
        lease: &Lease,
        marks: &[Mark],
        now_ms: i64,
    ) -> Result<Vec<EventId>, StoreError> {
        const OP: &str = "mark";
        if let Some(ids) = mark_counted(self, lease, marks, now_ms).await? {
            return Ok(ids);
        }
        // Some row was stale (rare): lock and list the fenced rows, then update them.
        let table = self.statements.table();
        let mut tx = begin_write(self, OP).await?;
        let locked = tx
            .rows::<EventId>(lock_fenced_rows(table, lease, marks))
            .await
            .map_err(db(OP))?;
        if !locked.is_empty() {
            let update = mark_rows_counted(Backend::MySql, table, lease, marks, now_ms);
            tx.run(update).await.map_err(db(OP))?;
        }
        tx.commit().await.map_err(db(OP))?;
        Ok(locked)
    }
}

/// Locks and lists the rows of `marks` still under the lease, before the mark's UPDATE runs
/// again (after a first run that did not match every mark was rolled back).
pub(crate) fn lock_fenced_rows(table: &TableName, lease: &Lease, marks: &[Mark]) -> Bound {
    let mut b = SqlBuilder::new(Backend::MySql);
    b.push("SELECT event_id FROM ")
        .push(table.as_str())
        .push(" FORCE INDEX (PRIMARY)");
    lease_fence(&mut b, lease, marks.iter().map(|m| m.event_id.as_str()));
    b.push(" FOR UPDATE");
    b.finish()
}
