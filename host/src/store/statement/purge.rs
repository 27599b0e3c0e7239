//! Retention's statements (run by `exec::purge`): old `delivered` / `failed` rows deleted in
//! bounded batches of two statements, each in autocommit, so no lock is held between them: the
//! ids of the oldest purgeable rows, a range of the dialect's index of finished rows (a row is
//! never changed before it is created, so "changed before T" implies "created before T", and the
//! index bounds the walk); then a DELETE by primary key checking status and age again, so a row
//! requeued (or deleted by another host) in between is left alone.

use super::rows::Statements;
use super::{Bound, SqlBuilder};
use crate::record::Status;
use crate::store::{Backend, MAX_PARTITIONS, PurgeParams, PurgeStatus, TableName};

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
        .status_condition(status(params.status), 0..MAX_PARTITIONS)
        .push(" AND created_at_ms < ")
        .bind(params.before_ms)
        .push(" AND updated_at_ms < ")
        .bind(params.before_ms);
}

/// The ids of the oldest `limit` purgeable rows.
pub(crate) fn select_purgeable(statements: &Statements, params: &PurgeParams) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("SELECT event_id FROM ")
        .push(statements.table().as_str());
    purgeable_where(&mut b, params);
    b.push(" ORDER BY created_at_ms, event_id LIMIT ")
        .bind(i64::from(params.limit.max(1)));
    b.finish()
}

/// How many rows are purgeable (a dry run).
pub(crate) fn count_purgeable(statements: &Statements, params: &PurgeParams) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("SELECT COUNT(*) FROM ")
        .push(statements.table().as_str());
    purgeable_where(&mut b, params);
    b.finish()
}

/// Deletes `event_ids` of the tenant by primary key, while still purgeable.
pub(crate) fn delete_purgeable(
    statements: &Statements,
    params: &PurgeParams,
    event_ids: &[String],
) -> Bound {
    let mut b = SqlBuilder::new(statements.backend());
    b.push("DELETE FROM ")
        .push(statements.table().as_str())
        .push(" WHERE app_code = ")
        .bind(params.app_code.as_str())
        .push(" AND event_id IN ")
        .bind_set(event_ids.iter().map(String::as_str))
        .push(" AND status = ")
        .status(status(params.status))
        .push(" AND updated_at_ms < ")
        .bind(params.before_ms);
    b.finish()
}

/// The texts of the purge SELECT and of a DELETE of `ids` rows, as the store runs them (for
/// EXPLAIN checks). The SELECT binds `app_code, before_ms, before_ms, limit`; the DELETE binds
/// `app_code`, the `ids` event ids, then `before_ms`.
pub fn statement_texts(
    backend: Backend,
    table: &TableName,
    status: PurgeStatus,
    ids: usize,
) -> (String, String) {
    let params = PurgeParams {
        app_code: String::new(),
        status,
        before_ms: 0,
        limit: 1,
        dry_run: false,
    };
    let (statements, ids) = (
        Statements::new(backend, table),
        vec![String::new(); ids.max(1)],
    );
    (
        select_purgeable(&statements, &params).sql.to_string(),
        delete_purgeable(&statements, &params, &ids).sql.to_string(),
    )
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
        let select = select_purgeable(&Statements::new(Backend::Postgres, &table), &params());
        assert_eq!(
            &*select.sql,
            "SELECT event_id FROM room_outbox WHERE app_code = $1 AND status = 'delivered' \
             AND created_at_ms < $2 AND updated_at_ms < $3 ORDER BY created_at_ms, event_id LIMIT $4"
        );
        assert_eq!(select.args.len(), 4);
        let delete = delete_purgeable(
            &Statements::new(Backend::MySql, &table),
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
