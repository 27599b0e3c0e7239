//! The shared executor: the store operations written once for every backend — counts, failed
//! rows, requeue, purge and the producer insert; the claim is in [`super::exec_claim`], the mark
//! in [`super::exec_mark`], the held claim in [`super::exec_held`], `migrate` in
//! [`super::schema`] — and the one retry of transactions the database aborted as transient.
//!
//! A backend supplies its pool, its [`Statements`] and how it begins a write transaction
//! ([`Driver`]); its connection type runs bound statements ([`Session`], implemented by
//! [`impl_session!`]); [`impl_store!`] turns the pair into a [`crate::store::OutboxStore`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use sqlx::Database;

use super::claim_position::ClaimPositions;
use super::row::{EventId, FromColumns, Int, Key, StatusCountRow, status_counts};
use super::statement::claim::Statements;
use super::statement::failed::{
    count_failed, requeue_failed, requeue_keys, select_failed, select_requeue_chunk,
};
use super::statement::insert::{COUNT_EXISTING_MAX_IDS, distinct_records, insert_records};
use super::statement::purge::{count_purgeable, delete_purgeable, select_purgeable};
use super::statement::{Arg, Bound, MAX_ROWS_PER_STATEMENT};
use crate::record::{self, Record};
use crate::store::{
    Backend, CountsParams, FailedRow, ListFailedParams, PurgeParams, RequeueParams, StatusCounts,
    StoreError, TableName,
};

/// A connection (or open transaction) that runs [`Bound`] statements.
#[async_trait]
pub(crate) trait Session: Send {
    /// Runs a statement; returns the rows it affected.
    async fn run(&mut self, statement: Bound) -> Result<u64, sqlx::Error>;

    /// Runs a query; decodes every row.
    async fn rows<T: FromColumns + Send + 'static>(
        &mut self,
        statement: Bound,
    ) -> Result<Vec<T>, sqlx::Error>;

    /// Runs a script of several statements without arguments (a migration).
    async fn script(&mut self, sql: String) -> Result<(), sqlx::Error>;
}

/// How a database binds an [`Arg::TextList`]: as one array parameter where it has arrays.
pub(crate) trait BindTextList: Database {
    /// `query` with `values` bound as the next parameter.
    fn bind_text_list(
        query: sqlx::query::Query<'static, Self, <Self as Database>::Arguments>,
        values: Vec<String>,
    ) -> sqlx::query::Query<'static, Self, <Self as Database>::Arguments>;
}

impl BindTextList for sqlx::Postgres {
    fn bind_text_list(
        query: sqlx::query::Query<'static, Self, <Self as Database>::Arguments>,
        values: Vec<String>,
    ) -> sqlx::query::Query<'static, Self, <Self as Database>::Arguments> {
        query.bind(values)
    }
}

/// MySQL and SQLite have no array parameter: their dialects write `IN (?, …)`
/// ([`super::statement::SqlDialect::binds_lists_as_arrays`] is false), so no statement of theirs
/// carries an [`Arg::TextList`].
macro_rules! no_text_list {
    ($database:ty) => {
        impl BindTextList for $database {
            fn bind_text_list(
                _query: sqlx::query::Query<'static, Self, <Self as Database>::Arguments>,
                _values: Vec<String>,
            ) -> sqlx::query::Query<'static, Self, <Self as Database>::Arguments> {
                unreachable!("only a dialect that binds lists as arrays writes Arg::TextList")
            }
        }
    };
}
no_text_list!(sqlx::MySql);
no_text_list!(sqlx::Sqlite);

/// The sqlx query for `statement`, its arguments bound in order.
pub(crate) fn bind_args<DB>(
    statement: Bound,
) -> sqlx::query::Query<'static, DB, <DB as Database>::Arguments>
where
    DB: BindTextList,
    String: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    i64: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    Vec<u8>: for<'q> sqlx::Encode<'q, DB> + sqlx::Type<DB>,
{
    // The text comes from `store::statement`: static fragments and the validated table name only.
    let mut query = sqlx::query::<DB>(sqlx::AssertSqlSafe(statement.sql));
    for arg in statement.args {
        query = match arg {
            Arg::Text(value) => query.bind(value),
            Arg::Int(value) => query.bind(value),
            Arg::Bytes(value) => query.bind(value),
            Arg::TextList(values) => DB::bind_text_list(query, values),
        };
    }
    query
}

/// Implements [`Session`] for a sqlx connection type: `impl_session!(sqlx::SqliteConnection, sqlx::Sqlite);`.
macro_rules! impl_session {
    ($connection:ty, $database:ty) => {
        #[async_trait::async_trait]
        impl $crate::store::exec::Session for $connection {
            async fn run(
                &mut self,
                statement: $crate::store::statement::Bound,
            ) -> Result<u64, sqlx::Error> {
                let query = $crate::store::exec::bind_args::<$database>(statement);
                Ok(query.execute(&mut *self).await?.rows_affected())
            }

            async fn rows<T: $crate::store::row::FromColumns + Send + 'static>(
                &mut self,
                statement: $crate::store::statement::Bound,
            ) -> Result<Vec<T>, sqlx::Error> {
                let query = $crate::store::exec::bind_args::<$database>(statement);
                let rows = query.fetch_all(&mut *self).await?;
                rows.iter().map(|row| T::from_columns(row)).collect()
            }

            async fn script(&mut self, sql: String) -> Result<(), sqlx::Error> {
                // A migration file embedded in the binary, table name validated.
                sqlx::raw_sql(sqlx::AssertSqlSafe(sql))
                    .execute(&mut *self)
                    .await?;
                Ok(())
            }
        }
    };
}
pub(crate) use impl_session;

/// What a backend store provides to the shared operations.
pub(crate) trait Driver: Send + Sync {
    /// The sqlx database; its connections run statements.
    type Db: Database<Connection: Session>;

    /// The statement beginning a write transaction, when the default `BEGIN` is not enough
    /// (SQLite: `BEGIN IMMEDIATE`, so the write lock is taken up front and waits on busy_timeout
    /// instead of failing to upgrade).
    const BEGIN_WRITE: Option<&'static str>;

    /// The connection pool.
    fn pool(&self) -> &sqlx::Pool<Self::Db>;

    /// The store's statements (backend and table).
    fn statements(&self) -> &Statements;

    /// The claim positions the store remembers between claims, where its claims read pending
    /// rows from one ([`super::claim_position`]); `None`: every claim reads from the head (SQLite,
    /// which removes a claimed row's old index entry in its own write).
    fn positions(&self) -> Option<&ClaimPositions> {
        None
    }
}

/// Implements [`crate::store::OutboxStore`] for a [`Driver`] with the shared operations:
/// `impl_store!(SqliteStore, Backend::Sqlite);`.
macro_rules! impl_store {
    ($store:ty, $backend:expr) => {
        #[async_trait::async_trait]
        impl $crate::store::OutboxStore for $store {
            fn backend(&self) -> $crate::store::Backend {
                $backend
            }

            fn table(&self) -> &$crate::store::TableName {
                $crate::store::exec::Driver::statements(self).table()
            }

            async fn migrate_with(
                &self,
                options: &$crate::store::MigrateOptions,
            ) -> Result<Vec<i64>, $crate::store::StoreError> {
                $crate::store::schema::migrate(self, options).await
            }

            async fn check_ordering(
                &self,
                ordering: $crate::store::DeliveryOrder,
            ) -> Result<(), $crate::store::StoreError> {
                $crate::store::room_index::check_ordering(self, ordering).await
            }

            async fn enqueue(
                &self,
                records: &[$crate::record::Record],
            ) -> Result<u64, $crate::store::StoreError> {
                $crate::store::exec::enqueue(self, records).await
            }

            async fn claim(
                &self,
                params: &$crate::store::ClaimParams,
            ) -> Result<$crate::store::ClaimBatch, $crate::store::StoreError> {
                $crate::store::exec_claim::claim(self, params).await
            }

            async fn reclaim_expired(
                &self,
                params: &$crate::store::ClaimParams,
            ) -> Result<$crate::store::ClaimBatch, $crate::store::StoreError> {
                $crate::store::exec_claim::reclaim_expired(self, params).await
            }

            async fn claim_held(
                &self,
                params: &$crate::store::ClaimParams,
            ) -> Result<$crate::store::HeldBatch, $crate::store::StoreError> {
                $crate::store::exec_held::claim_held(self, params).await
            }

            async fn mark(
                &self,
                params: &$crate::store::MarkParams<'_>,
            ) -> Result<$crate::store::MarkReport, $crate::store::StoreError> {
                $crate::store::exec_mark::mark(self, params).await
            }

            async fn counts(
                &self,
                params: &$crate::store::CountsParams,
            ) -> Result<$crate::store::StatusCounts, $crate::store::StoreError> {
                $crate::store::exec::counts(self, params).await
            }

            async fn clock_ms(&self) -> Result<Option<i64>, $crate::store::StoreError> {
                $crate::store::exec::clock_ms(self).await
            }

            async fn list_failed(
                &self,
                params: &$crate::store::ListFailedParams,
            ) -> Result<Vec<$crate::store::FailedRow>, $crate::store::StoreError> {
                $crate::store::exec::list_failed(self, params).await
            }

            async fn requeue(
                &self,
                params: &$crate::store::RequeueParams,
            ) -> Result<u64, $crate::store::StoreError> {
                $crate::store::exec::requeue(self, params).await
            }

            async fn purge(
                &self,
                params: &$crate::store::PurgeParams,
            ) -> Result<u64, $crate::store::StoreError> {
                $crate::store::exec::purge(self, params).await
            }

            async fn close(&self) {
                $crate::store::exec::Driver::pool(self).close().await
            }
        }
    };
}
pub(crate) use impl_store;

pub(crate) fn db(op: &'static str) -> impl FnOnce(sqlx::Error) -> StoreError {
    StoreError::db(op)
}

/// Begins a write transaction.
pub(crate) async fn begin_write<D: Driver>(
    driver: &D,
    op: &'static str,
) -> Result<sqlx::Transaction<'static, D::Db>, StoreError> {
    match D::BEGIN_WRITE {
        Some(begin) => driver.pool().begin_with(begin).await,
        None => driver.pool().begin().await,
    }
    .map_err(db(op))
}

/// Inserts `records` as `pending` rows inside the caller's transaction, ignoring ids already
/// present (and repeats within `records`: the first wins). Returns rows inserted.
pub(crate) async fn save<S: Session>(
    session: &mut S,
    backend: Backend,
    table: &TableName,
    records: &[Record],
) -> Result<u64, StoreError> {
    const OP: &str = "enqueue";
    if let Some(reason) = records.iter().find_map(too_long_for_columns) {
        return Err(StoreError::Invalid(reason));
    }
    let records = distinct_records(records);
    let mut inserted = 0;
    for chunk in records.chunks(MAX_ROWS_PER_STATEMENT) {
        let existing = if backend.dialect().insert_counts_duplicates() {
            count_existing(session, backend, table, chunk).await?
        } else {
            0
        };
        let affected = session
            .run(insert_records(backend, table, chunk))
            .await
            .map_err(db(OP))?;
        inserted += affected.saturating_sub(existing);
    }
    Ok(inserted)
}

/// How many of `records` already exist, one primary-key range read per tenant and id chunk.
async fn count_existing<S: Session>(
    session: &mut S,
    backend: Backend,
    table: &TableName,
    records: &[&Record],
) -> Result<u64, StoreError> {
    let mut by_app: std::collections::BTreeMap<&str, Vec<&str>> = std::collections::BTreeMap::new();
    for record in records {
        by_app
            .entry(record.app_code.as_str())
            .or_default()
            .push(record.event_id.as_str());
    }
    let mut existing = 0;
    for (app_code, ids) in by_app {
        for ids in ids.chunks(COUNT_EXISTING_MAX_IDS) {
            let rows = session
                .rows::<Int>(super::statement::insert::count_existing(
                    backend, table, app_code, ids,
                ))
                .await
                .map_err(db("enqueue"))?;
            existing += rows
                .first()
                .map_or(0, |Int(n)| u64::try_from(*n).unwrap_or(0));
        }
    }
    Ok(existing)
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
pub(crate) async fn enqueue<D: Driver>(driver: &D, records: &[Record]) -> Result<u64, StoreError> {
    if records.is_empty() {
        return Ok(0);
    }
    let statements = driver.statements();
    let mut tx = begin_write(driver, "enqueue").await?;
    let inserted = save(&mut *tx, statements.backend(), statements.table(), records).await?;
    tx.commit().await.map_err(db("enqueue"))?;
    Ok(inserted)
}

/// How long a claim transaction the database aborted as transient is re-run before the error is
/// returned (wall clock, from the first attempt).
pub(crate) const CLAIM_RETRY_BUDGET: Duration = Duration::from_secs(2);

/// Longest pause between two attempts.
const MAX_RETRY_PAUSE_MS: u64 = 200;

/// Runs a claim or mark transaction again while `retry_on` holds for its error — the database
/// aborted it as transient (and, for marks, the database cannot be reached)
/// ([`StoreError::is_transient`]: deadlock victim, serialization failure, lock wait timeout, busy
/// SQLite file) and wall-clock time `deadline_ms` is not reached: the whole transaction was rolled
/// back, so repeating it is safe. Concurrent hosts' `FOR UPDATE SKIP LOCKED` scans and the UPDATEs
/// moving rows between the status-leading indexes can still meet on an index entry in MariaDB.
///
/// This is the only place that retries a database error: the worker never retries a store call
/// (see the store's module docs, "Who retries what").
pub(crate) async fn retry_transient<T, F, Fut>(
    deadline_ms: i64,
    retry_on: impl Fn(&StoreError) -> bool,
    mut attempt: F,
) -> Result<T, StoreError>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, StoreError>>,
{
    let mut tries: u64 = 1;
    loop {
        match attempt().await {
            Err(err) if retry_on(&err) => {
                let pause_ms = (rand::random_range(1..=10) * tries).min(MAX_RETRY_PAUSE_MS);
                if record::now_ms().saturating_add(pause_ms as i64) >= deadline_ms {
                    return Err(err);
                }
                tokio::time::sleep(Duration::from_millis(pause_ms)).await;
                tries += 1;
            }
            result => return result,
        }
    }
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
    let rows = conn
        .rows::<Int>(Bound {
            sql: Arc::from(sql),
            args: Vec::new(),
        })
        .await
        .map_err(db(OP))?;
    Ok(rows.first().map(|Int(ms)| *ms))
}

/// `failed` rows matching the filter, oldest first.
pub(crate) async fn list_failed<D: Driver>(
    driver: &D,
    params: &ListFailedParams,
) -> Result<Vec<FailedRow>, StoreError> {
    const OP: &str = "list_failed";
    let statements = driver.statements();
    let query = select_failed(
        statements.backend(),
        statements.table(),
        &params.filter,
        params.limit,
    );
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    conn.rows::<FailedRow>(query).await.map_err(db(OP))
}

/// Moves matching `failed` rows back to `pending` (or counts them on a dry run).
pub(crate) async fn requeue<D: Driver>(
    driver: &D,
    params: &RequeueParams,
) -> Result<u64, StoreError> {
    const OP: &str = "requeue";
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    if params.dry_run {
        let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
        let rows = conn
            .rows::<Int>(count_failed(backend, table, &params.filter))
            .await
            .map_err(db(OP))?;
        return Ok(rows
            .first()
            .map_or(0, |Int(n)| u64::try_from(*n).unwrap_or(0)));
    }
    let mut tx = begin_write(driver, OP).await?;
    let moved = match params.limit {
        None => tx
            .run(requeue_failed(
                backend,
                table,
                &params.filter,
                params.now_ms,
            ))
            .await
            .map_err(db(OP))?,
        Some(limit) => {
            let keys = tx
                .rows::<Key>(select_requeue_chunk(backend, table, &params.filter, limit))
                .await
                .map_err(db(OP))?;
            let mut by_tenant: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for Key { app_code, event_id } in keys {
                by_tenant.entry(app_code).or_default().push(event_id);
            }
            let mut moved = 0;
            for (app_code, event_ids) in &by_tenant {
                moved += tx
                    .run(requeue_keys(
                        backend,
                        table,
                        app_code,
                        event_ids,
                        params.now_ms,
                    ))
                    .await
                    .map_err(db(OP))?;
            }
            moved
        }
    };
    tx.commit().await.map_err(db(OP))?;
    Ok(moved)
}

/// One batch of [`crate::store::OutboxStore::purge`] (or, dry, the count of every purgeable row).
pub(crate) async fn purge<D: Driver>(driver: &D, params: &PurgeParams) -> Result<u64, StoreError> {
    const OP: &str = "purge";
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    if params.dry_run {
        let rows = conn
            .rows::<Int>(count_purgeable(backend, table, params))
            .await
            .map_err(db(OP))?;
        return Ok(rows
            .first()
            .map_or(0, |Int(n)| u64::try_from(*n).unwrap_or(0)));
    }
    let ids: Vec<String> = conn
        .rows::<EventId>(select_purgeable(backend, table, params))
        .await
        .map_err(db(OP))?
        .into_iter()
        .map(|EventId(id)| id)
        .collect();
    if ids.is_empty() {
        return Ok(0);
    }
    conn.run(delete_purgeable(backend, table, params, &ids))
        .await
        .map_err(db(OP))
}
