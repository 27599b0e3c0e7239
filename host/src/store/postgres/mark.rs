//! PostgreSQL's mark: the fenced `UPDATE … RETURNING event_id` alone, atomic on its own, so no
//! BEGIN and COMMIT round trips around it.

use super::PostgresStore;
use crate::store::driver::db;
use crate::store::exec_mark::MarkOps;
use crate::store::row::EventId;
use crate::store::session::Session;
use crate::store::statement::mark::{MarkAt, mark_rows};
use crate::store::{Backend, Lease, Mark, StoreError};

impl MarkOps for PostgresStore {
    async fn mark_once(
        &self,
        lease: &Lease,
        marks: &[Mark],
        at: MarkAt,
    ) -> Result<Vec<EventId>, StoreError> {
        const OP: &str = "mark";
        let update = mark_rows(Backend::Postgres, self.statements.table(), lease, marks, at);
        let mut conn = self.pool.acquire().await.map_err(db(OP))?;
        conn.rows::<EventId>(update).await.map_err(db(OP))
    }
}
