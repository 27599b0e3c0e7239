//! The store operations written once for every backend over its [`Driver`]: the producer
//! insert, counts, failed rows, requeue, purge.

use std::collections::BTreeMap;

use super::driver::{Driver, begin_write, db};
use super::row::{EventId, Int, Key, StatusCountRow, count, status_counts};
use super::session::Session;
use super::statement::failed::{
    count_failed, requeue_failed, requeue_keys, select_failed, select_requeue_chunk,
};
use super::statement::insert::{distinct_records, insert_records};
use super::statement::purge::{count_purgeable, delete_purgeable, select_purgeable};
use super::statement::rows::Statements;
use super::statement::{Bound, MAX_ROWS_PER_STATEMENT};
use crate::record::Record;
use crate::store::{
    Backend, CountsParams, FailedFilter, FailedRow, ListFailedParams, PurgeParams, RequeueParams,
    StatusCounts, StoreError, TableName,
};

/// The producer insert's step a database may do its own way: one chunk of distinct records
/// inserted, counting the rows it inserted. The default: one INSERT ignoring duplicate ids
/// ([`super::statement::SqlDialect::ignore_duplicate_key`]), whose affected-row count is the rows
/// inserted (PostgreSQL, SQLite). MySQL counts differently (`store/mysql/save.rs`).
pub(crate) trait SaveOps {
    /// The database the rows go to.
    const BACKEND: Backend;

    /// Inserts `chunk` (distinct ids, at most [`MAX_ROWS_PER_STATEMENT`]) as `pending` rows of
    /// `table`; returns the rows inserted (not the duplicates ignored).
    async fn insert_chunk<S: Session>(
        session: &mut S,
        table: &TableName,
        chunk: &[&Record],
    ) -> Result<u64, StoreError> {
        session
            .run(insert_records(Self::BACKEND, table, chunk))
            .await
            .map_err(db(SAVE_OP))
    }
}

/// The operation a producer insert's errors name.
pub(crate) const SAVE_OP: &str = "enqueue";

/// Inserts `records` as `pending` rows inside the caller's transaction, ignoring ids already
/// present (and repeats within `records`: the first wins). Returns rows inserted.
pub(crate) async fn save<O: SaveOps, S: Session>(
    session: &mut S,
    table: &TableName,
    records: &[Record],
) -> Result<u64, StoreError> {
    if let Some(reason) = records.iter().find_map(too_long_for_columns) {
        return Err(StoreError::Invalid(reason));
    }
    let records = distinct_records(records);
    let mut inserted = 0;
    for chunk in records.chunks(MAX_ROWS_PER_STATEMENT) {
        inserted += O::insert_chunk(session, table, chunk).await?;
    }
    Ok(inserted)
}

/// The VARCHAR sizes of migration 0001, in characters. Checked before any row is written so a
/// record is refused alike on every backend (SQLite does not enforce VARCHAR sizes; MariaDB and
/// PostgreSQL reject the statement).
const COLUMN_CHARS: [(&str, usize); 4] = [
    ("app_code", 64),
    ("event_id", 128),
    ("event_type", 128),
    ("room_id", 128),
];

/// Why `record` does not fit the table's columns, if it does not.
fn too_long_for_columns(record: &Record) -> Option<String> {
    let values = [
        &record.app_code,
        &record.event_id,
        &record.event_type,
        &record.room_id,
    ];
    COLUMN_CHARS
        .iter()
        .zip(values)
        .find_map(|((column, max), value)| {
            let chars = value.chars().count();
            (chars > *max).then(|| {
                format!(
                    "{column} of event {:.40}… is {chars} characters, at most {max} fit",
                    record.event_id
                )
            })
        })
}

/// [`save`] in a transaction of its own.
pub(crate) async fn enqueue<D: Driver + SaveOps>(
    driver: &D,
    records: &[Record],
) -> Result<u64, StoreError> {
    if records.is_empty() {
        return Ok(0);
    }
    let mut tx = begin_write(driver, SAVE_OP).await?;
    let inserted = save::<D, _>(&mut *tx, driver.statements().table(), records).await?;
    tx.commit().await.map_err(db(SAVE_OP))?;
    Ok(inserted)
}

/// Row counts by status and the oldest pending row's age, in one grouped query.
pub(crate) async fn counts<D: Driver>(
    driver: &D,
    params: &CountsParams,
) -> Result<StatusCounts, StoreError> {
    const OP: &str = "counts";
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let rows = conn
        .rows::<StatusCountRow>(driver.statements().counts_query(params.app_code.as_deref()))
        .await
        .map_err(db(OP))?;
    Ok(status_counts(&rows, params.now_ms))
}

/// The database's clock in UTC milliseconds, where it has one of its own.
pub(crate) async fn clock_ms<D: Driver>(driver: &D) -> Result<Option<i64>, StoreError> {
    const OP: &str = "clock";
    let Some(sql) = driver.statements().backend().dialect().clock_ms() else {
        return Ok(None);
    };
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let rows = conn.rows::<Int>(Bound::text(sql)).await.map_err(db(OP))?;
    Ok(rows.first().map(|Int(ms)| *ms))
}

/// `failed` rows matching the filter, oldest first.
pub(crate) async fn list_failed<D: Driver>(
    driver: &D,
    params: &ListFailedParams,
) -> Result<Vec<FailedRow>, StoreError> {
    const OP: &str = "list_failed";
    let query = select_failed(driver.statements(), &params.filter, params.limit);
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    conn.rows::<FailedRow>(query).await.map_err(db(OP))
}

/// The `failed` rows `filter` matches: what a dry run of a requeue or a delete would touch.
pub(crate) async fn count_failed_rows<D: Driver>(
    driver: &D,
    filter: &FailedFilter,
    op: &'static str,
) -> Result<u64, StoreError> {
    let query = count_failed(driver.statements(), filter);
    let mut conn = driver.pool().acquire().await.map_err(db(op))?;
    Ok(count(&conn.rows::<Int>(query).await.map_err(db(op))?))
}

/// Runs `change` (an UPDATE or DELETE by primary key, while still `failed`) over the oldest
/// `limit` `failed` rows `filter` matches, one statement per tenant: the rows it changed.
pub(crate) async fn change_oldest_failed<S: Session>(
    session: &mut S,
    statements: &Statements,
    (filter, limit): (&FailedFilter, u32),
    op: &'static str,
    change: impl Fn(&str, &[String]) -> Bound,
) -> Result<u64, StoreError> {
    let keys = session
        .rows::<Key>(select_requeue_chunk(statements, filter, limit))
        .await
        .map_err(db(op))?;
    let mut by_tenant: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for Key { app_code, event_id } in keys {
        by_tenant.entry(app_code).or_default().push(event_id);
    }
    let mut changed = 0;
    for (app_code, event_ids) in &by_tenant {
        changed += session
            .run(change(app_code, event_ids))
            .await
            .map_err(db(op))?;
    }
    Ok(changed)
}

/// Moves matching `failed` rows back to `pending` (or counts them on a dry run).
pub(crate) async fn requeue<D: Driver>(
    driver: &D,
    params: &RequeueParams,
) -> Result<u64, StoreError> {
    const OP: &str = "requeue";
    let statements = driver.statements();
    if params.dry_run {
        return count_failed_rows(driver, &params.filter, OP).await;
    }
    let mut tx = begin_write(driver, OP).await?;
    let moved = match params.limit {
        None => {
            let requeue = requeue_failed(statements, &params.filter, params.now_ms);
            tx.run(requeue).await.map_err(db(OP))?
        }
        Some(limit) => {
            let requeue = |app_code: &str, event_ids: &[String]| {
                requeue_keys(statements, app_code, event_ids, params.now_ms)
            };
            change_oldest_failed(&mut *tx, statements, (&params.filter, limit), OP, requeue).await?
        }
    };
    tx.commit().await.map_err(db(OP))?;
    Ok(moved)
}

/// One batch of [`crate::store::OutboxStore::purge`] (or, dry, the count of every purgeable row).
pub(crate) async fn purge<D: Driver>(driver: &D, params: &PurgeParams) -> Result<u64, StoreError> {
    const OP: &str = "purge";
    let statements = driver.statements();
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    if params.dry_run {
        let query = count_purgeable(statements, params);
        return Ok(count(&conn.rows::<Int>(query).await.map_err(db(OP))?));
    }
    let ids: Vec<String> = conn
        .rows::<EventId>(select_purgeable(statements, params))
        .await
        .map_err(db(OP))?
        .into_iter()
        .map(|EventId(id)| id)
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    conn.run(delete_purgeable(statements, params, &ids))
        .await
        .map_err(db(OP))
}
