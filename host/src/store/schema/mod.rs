//! The outbox table's schema: the embedded migrations, the indexes outboxd needs on every table
//! (the dialect's required indexes) and reading a table's indexes; `migrate` itself is in
//! `migrate.rs`, the table's partition count in `partition_count.rs`. What differs per database
//! comes from the backend's `SqlDialect`.

mod migrate;
mod partition_count;

use super::driver::db;
use super::row::{IndexColumn, Int};
use super::session::Session;
use super::statement::{Arg, Bound, RequiredIndex, SqlBuilder};
use super::{Backend, StoreError, TableName};

pub use super::migration::Migration;
pub(crate) use migrate::migrate;
pub(crate) use partition_count::{checked_partitions, explain_failure, repartition};

/// Creates the bookkeeping table `outboxd_migrations(table_name, version, applied_at_ms)`: one
/// row per outbox table and migration applied (the backend may append table options).
const CREATE_BOOKKEEPING: &str = "CREATE TABLE IF NOT EXISTS outboxd_migrations (\
     table_name VARCHAR(64) NOT NULL, version BIGINT NOT NULL, applied_at_ms BIGINT NOT NULL, \
     PRIMARY KEY (table_name, version))";

/// The embedded migrations of `backend`, oldest first.
pub fn migrations(backend: Backend) -> &'static [Migration] {
    backend.dialect().migrations()
}

/// Versions already applied to `table`.
pub(crate) fn applied_versions(backend: Backend, table: &TableName) -> Bound {
    let mut b = SqlBuilder::new(backend);
    b.push("SELECT version FROM outboxd_migrations WHERE table_name = ")
        .bind(table.as_str());
    b.finish()
}

/// Records a migration as applied to `table`.
pub(crate) fn record_version(
    backend: Backend,
    table: &TableName,
    version: i64,
    now_ms: i64,
) -> Bound {
    let mut b = SqlBuilder::new(backend);
    b.push("INSERT INTO outboxd_migrations (table_name, version, applied_at_ms) VALUES ")
        .bind_list([
            Arg::from(table.as_str()),
            Arg::Int(version),
            Arg::Int(now_ms),
        ])
        .push(backend.dialect().ignore_duplicate_version());
    b.finish()
}

/// The name (on `table`) and key columns of each index outboxd needs on every table of
/// `backend` besides the partition index (the status index; on PostgreSQL the history index, on
/// MariaDB the failed-apart index),
/// for tools and tests that check a table's indexes.
pub fn required_indexes(backend: Backend, table: &TableName) -> Vec<(String, Vec<&'static str>)> {
    backend
        .dialect()
        .required_indexes()
        .iter()
        .map(|index| (index.name(table), index.columns.to_vec()))
        .collect()
}

/// The catalog query `migrate` reads a table's indexes with, for tools and tests that read them
/// on their own connection: the statement (one row per key column, `index name, column name,
/// partial`, the column NULL for an expression, `partial` 1 for an index with a `WHERE`, ordered
/// by index and position) and the one value to bind to
/// its placeholder, `table`'s name as the catalog stores it.
pub fn index_columns_query(backend: Backend, table: &TableName) -> (String, String) {
    let Bound { sql, args } = backend.dialect().table_index_columns(table);
    let [Arg::Text(catalog_name)] = args.as_slice() else {
        unreachable!("the catalog query binds the table name only: {args:?}")
    };
    (sql.to_string(), catalog_name.clone())
}

/// `CREATE INDEX` of a required index on `table` (static columns and predicate, name from the
/// validated table).
pub(crate) fn create_index(table: &TableName, index: &RequiredIndex) -> String {
    let mut sql = format!(
        "CREATE INDEX {} ON {} ({})",
        index.name(table),
        table.as_str(),
        index.columns.join(", ")
    );
    if let Some(predicate) = index.predicate {
        sql.push_str(" WHERE ");
        sql.push_str(predicate);
    }
    sql
}

/// One index of a table as the catalog lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CatalogIndex {
    /// Its name.
    pub(crate) name: String,
    /// Its key columns in order (`None` for an expression).
    pub(crate) columns: Vec<Option<String>>,
    /// It holds only the rows of a `WHERE` (PostgreSQL, SQLite).
    pub(crate) partial: bool,
}

/// Reads the indexes of `table` with the backend's catalog query.
pub(crate) async fn table_indexes<S: Session>(
    session: &mut S,
    backend: Backend,
    table: &TableName,
    op: &'static str,
) -> Result<Vec<CatalogIndex>, StoreError> {
    let mut indexes: Vec<CatalogIndex> = Vec::new();
    let rows = session
        .rows::<IndexColumn>(backend.dialect().table_index_columns(table))
        .await
        .map_err(StoreError::db(op))?;
    for IndexColumn {
        index,
        column,
        partial,
    } in rows
    {
        match indexes.last_mut() {
            Some(last) if last.name == index => last.columns.push(column),
            _ => indexes.push(CatalogIndex {
                name: index,
                columns: vec![column],
                partial,
            }),
        }
    }
    Ok(indexes)
}

/// Whether `columns` (an index's key columns, `None` for an expression) are exactly `wanted`.
pub(crate) fn same_column_list(columns: &[Option<String>], wanted: &[&str]) -> bool {
    columns.len() == wanted.len()
        && columns.iter().zip(wanted).all(|(column, wanted)| {
            column
                .as_deref()
                .is_some_and(|c| c.eq_ignore_ascii_case(wanted))
        })
}

/// The `wanted` indexes a table lacks, given its indexes: those no index has the key columns of,
/// under the wanted name or, holding every row (no `WHERE`), under any other (a partial index of
/// another name may leave out rows the wanted one must hold); or why `migrate` cannot create
/// them (an index of the wanted name has other columns).
pub(crate) fn missing_indexes(
    backend: Backend,
    table: &TableName,
    existing: &[CatalogIndex],
    wanted: &'static [RequiredIndex],
) -> Result<Vec<&'static RequiredIndex>, String> {
    let mut create = Vec::new();
    let mut conflicts = Vec::new();
    for index in wanted {
        let name = index.name(table);
        let named = |e: &&CatalogIndex| e.name.eq_ignore_ascii_case(&name);
        if existing
            .iter()
            .any(|e| same_column_list(&e.columns, index.columns) && (!e.partial || named(&e)))
        {
            continue;
        }
        match existing.iter().find(named) {
            Some(CatalogIndex {
                name: existing,
                columns,
                ..
            }) => {
                let columns: Vec<&str> = columns
                    .iter()
                    .map(|c| c.as_deref().unwrap_or("<expression>"))
                    .collect();
                conflicts.push(format!(
                    "index {existing} on {table} has columns ({}) but outboxd needs ({}): \
                     drop it ({})",
                    columns.join(", "),
                    index.columns.join(", "),
                    backend.dialect().drop_index_hint(table, existing),
                    table = table.as_str(),
                ));
            }
            None => create.push(index),
        }
    }
    if conflicts.is_empty() {
        Ok(create)
    } else {
        Err(format!(
            "{} and run `outboxd migrate` again",
            conflicts.join("; ")
        ))
    }
}

/// How long `migrate` waits between two attempts at the lock another `migrate` holds.
const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(50);

/// Takes the lock serializing `migrate` runs with `lock`, a statement returning 1 when it took
/// the lock and 0 when another session holds it, retried every [`LOCK_RETRY`]. Waiting between
/// statements, not inside one, keeps this session's snapshot out of the way of an index that
/// another `migrate` builds concurrently (which waits for every older snapshot).
pub(super) async fn take_migration_lock<S: Session>(
    session: &mut S,
    table: &TableName,
    lock: &'static str,
) -> Result<(), StoreError> {
    let mut logged = false;
    loop {
        let taken = session
            .rows::<Int>(Bound::text(lock))
            .await
            .map_err(db("migrate"))?;
        if matches!(taken.as_slice(), [Int(1)]) {
            return Ok(());
        }
        if !logged {
            tracing::info!(
                table = table.as_str(),
                "waiting for another `outboxd migrate` to finish"
            );
            logged = true;
        }
        tokio::time::sleep(LOCK_RETRY).await;
    }
}

#[cfg(test)]
mod tests;
