//! Retention's statements and operation: old `delivered` / `failed` rows deleted in bounded
//! batches, by primary key.
//!
//! One batch is two statements, each in its own (autocommit) transaction, so no lock is held
//! between them:
//! 1. `SELECT event_id … WHERE app_code = ? AND status = ? AND created_at_ms < ? AND
//!    updated_at_ms < ? ORDER BY created_at_ms, event_id LIMIT n`: a range of the
//!    `idx_<table>_pending (app_code, status, created_at_ms, event_id)` index (a row is never
//!    changed before it is created, so "changed before T" implies "created before T", and the
//!    index bounds the walk; the `updated_at_ms` test only skips the few old rows changed lately,
//!    e.g. requeued and failed again);
//! 2. `DELETE … WHERE app_code = ? AND event_id IN (…) AND status = ? AND updated_at_ms < ?`: by
//!    primary key, re-checking status and age, so a row requeued (or deleted by another host)
//!    in between is left alone.

use super::exec::{Driver, Session};
use super::{Bound, Dialect, EventId, Int, SqlBuilder};
use crate::record::Status;
use crate::store::{PurgeParams, PurgeStatus, StoreError, TableName};

fn status(status: PurgeStatus) -> Status {
    match status {
        PurgeStatus::Delivered => Status::Delivered,
        PurgeStatus::Failed => Status::Failed,
    }
}

/// `WHERE app_code = ? AND status = ? AND created_at_ms < ? AND updated_at_ms < ?`.
fn purgeable_where(b: &mut SqlBuilder, params: &PurgeParams) {
    b.push(" WHERE app_code = ")
        .bind(params.app_code.as_str())
        .push(" AND status = ")
        .status(status(params.status))
        .push(" AND created_at_ms < ")
        .bind(params.before_ms)
        .push(" AND updated_at_ms < ")
        .bind(params.before_ms);
}

/// The ids of the oldest `limit` purgeable rows.
pub(crate) fn select_purgeable(dialect: Dialect, table: &TableName, params: &PurgeParams) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("SELECT event_id FROM ").push(table.as_str());
    purgeable_where(&mut b, params);
    b.push(" ORDER BY created_at_ms, event_id LIMIT ")
        .bind(i64::from(params.limit.max(1)));
    b.finish()
}

/// How many rows are purgeable (a dry run).
pub(crate) fn count_purgeable(dialect: Dialect, table: &TableName, params: &PurgeParams) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("SELECT COUNT(*) FROM ").push(table.as_str());
    purgeable_where(&mut b, params);
    b.finish()
}

/// Deletes `event_ids` of the tenant by primary key, while still purgeable.
pub(crate) fn delete_purgeable(
    dialect: Dialect,
    table: &TableName,
    params: &PurgeParams,
    event_ids: &[String],
) -> Bound {
    let mut b = SqlBuilder::new(dialect);
    b.push("DELETE FROM ")
        .push(table.as_str())
        .push(" WHERE app_code = ")
        .bind(params.app_code.as_str())
        .push(" AND event_id IN ")
        .bind_list(event_ids.iter().map(String::as_str))
        .push(" AND status = ")
        .status(status(params.status))
        .push(" AND updated_at_ms < ")
        .bind(params.before_ms);
    b.finish()
}

/// One purge batch (or, dry, the count of every purgeable row).
pub(crate) async fn purge<D: Driver>(driver: &D, params: &PurgeParams) -> Result<u64, StoreError> {
    const OP: &str = "purge";
    let db = StoreError::db;
    let statements = driver.statements();
    let (dialect, table) = (statements.dialect(), statements.table());
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    if params.dry_run {
        let rows = conn
            .rows::<Int>(count_purgeable(dialect, table, params))
            .await
            .map_err(db(OP))?;
        return Ok(rows
            .first()
            .map_or(0, |Int(n)| u64::try_from(*n).unwrap_or(0)));
    }
    let ids: Vec<String> = conn
        .rows::<EventId>(select_purgeable(dialect, table, params))
        .await
        .map_err(db(OP))?
        .into_iter()
        .map(|EventId(id)| id)
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    conn.run(delete_purgeable(dialect, table, params, &ids))
        .await
        .map_err(db(OP))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> PurgeParams {
        PurgeParams {
            app_code: "live".into(),
            status: PurgeStatus::Delivered,
            before_ms: 1_000,
            limit: 500,
            dry_run: false,
        }
    }

    #[test]
    fn purge_statements_walk_the_status_index_and_delete_by_primary_key() {
        let table = TableName::default();
        let select = select_purgeable(Dialect::Postgres, &table, &params());
        assert_eq!(
            &*select.sql,
            "SELECT event_id FROM room_outbox WHERE app_code = $1 AND status = 'delivered' \
             AND created_at_ms < $2 AND updated_at_ms < $3 ORDER BY created_at_ms, event_id LIMIT $4"
        );
        assert_eq!(select.args.len(), 4);
        let delete = delete_purgeable(
            Dialect::MySql,
            &table,
            &PurgeParams {
                status: PurgeStatus::Failed,
                ..params()
            },
            &["a".into(), "b".into()],
        );
        assert_eq!(
            &*delete.sql,
            "DELETE FROM room_outbox WHERE app_code = ? AND event_id IN (?, ?) \
             AND status = 'failed' AND updated_at_ms < ?"
        );
        assert_eq!(delete.args.len(), 4);
    }
}
