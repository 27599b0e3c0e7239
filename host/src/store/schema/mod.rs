//! The outbox table's schema: the embedded migrations, the columns and claim indexes outboxd
//! needs (the room index `ROOM_INDEX` among them), and reading a table's indexes; `migrate`
//! itself (apply what is missing, then check and complete an adopted table) is in `migrate.rs`.
//!
//! What differs per database (the migration files, the bookkeeping DDL, catalog queries, the
//! migration lock) comes from the backend's `SqlDialect`.

mod migrate;

use super::row::IndexColumn;
use super::session::Session;
use super::statement::{Arg, Bound, SqlBuilder};
use super::{Backend, StoreError, TableName};

pub(crate) use super::claim_index::{ClaimIndex, ROOM_INDEX};
pub use super::migration::Migration;
pub(crate) use migrate::migrate;

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

/// The claim indexes `backend`'s claims read ([`SqlDialect::claim_indexes`](super::statement::SqlDialect::claim_indexes)).
pub(crate) fn claim_indexes(backend: Backend) -> &'static [ClaimIndex; 3] {
    backend.dialect().claim_indexes()
}

/// The key columns of each claim index `backend`'s claims read (pending, retry, lease), for
/// tools and tests that check a table's indexes.
pub fn claim_index_columns(backend: Backend) -> Vec<Vec<&'static str>> {
    claim_indexes(backend)
        .iter()
        .map(|index| index.columns.to_vec())
        .collect()
}

/// The catalog query `migrate` reads a table's indexes with, for tools and tests that read them
/// on their own connection: the statement (one row per key column, `index name, column name`,
/// the column NULL for an expression, ordered by index and position) and the one value to bind to
/// its placeholder, `table`'s name as the catalog stores it.
pub fn index_columns_query(backend: Backend, table: &TableName) -> (String, String) {
    let Bound { sql, args } = backend.dialect().table_index_columns(table);
    let [Arg::Text(catalog_name)] = args.as_slice() else {
        unreachable!("the catalog query binds the table name only: {args:?}")
    };
    (sql.to_string(), catalog_name.clone())
}

/// `CREATE INDEX` of a claim index on `table` (static columns, name from the validated table),
/// over the rows of `index.predicate`, or over live rows only where `index.live_rows_only` and
/// the database has such a predicate.
pub(crate) fn create_claim_index(
    backend: Backend,
    table: &TableName,
    index: &ClaimIndex,
) -> String {
    let mut sql = format!(
        "CREATE INDEX {} ON {} ({})",
        index.name(table),
        table.as_str(),
        index.columns.join(", ")
    );
    if let Some(predicate) = index.predicate.or_else(|| {
        backend
            .dialect()
            .live_rows_predicate()
            .filter(|_| index.live_rows_only)
    }) {
        sql.push_str(" WHERE ");
        sql.push_str(predicate);
    }
    sql
}

/// A table's indexes as the catalog lists them: name and key columns in order (`None` for an
/// expression).
pub(crate) type TableIndexes = Vec<(String, Vec<Option<String>>)>;

/// Reads the indexes of `table` ([`TableIndexes`]) with the backend's catalog query.
pub(crate) async fn table_indexes<S: Session>(
    session: &mut S,
    backend: Backend,
    table: &TableName,
    op: &'static str,
) -> Result<TableIndexes, StoreError> {
    let mut indexes: TableIndexes = Vec::new();
    let rows = session
        .rows::<IndexColumn>(backend.dialect().table_index_columns(table))
        .await
        .map_err(StoreError::db(op))?;
    for IndexColumn { index, column } in rows {
        match indexes.last_mut() {
            Some((name, columns)) if *name == index => columns.push(column),
            _ => indexes.push((index, vec![column])),
        }
    }
    Ok(indexes)
}

/// Whether `backend`'s claims name `index`, so that only an index of that exact name (and
/// columns) serves them; otherwise any index with its columns does.
pub(crate) fn needs_own_name(index: &ClaimIndex, backend: Backend, table: &TableName) -> bool {
    index.named_in_claims
        && backend
            .dialect()
            .room_probe_index_hint(&index.name(table))
            .is_some()
}

/// Whether some index of `existing` has exactly `index`'s key columns: under any name, or under
/// `index`'s own name where `backend`'s claims name it ([`needs_own_name`]).
pub(crate) fn has_index_columns(
    backend: Backend,
    table: &TableName,
    existing: &[(String, Vec<Option<String>>)],
    index: &ClaimIndex,
) -> bool {
    let own_name = needs_own_name(index, backend, table).then(|| index.name(table));
    existing.iter().any(|(name, columns)| {
        own_name
            .as_deref()
            .is_none_or(|own| name.eq_ignore_ascii_case(own))
            && same_columns(columns, index)
    })
}

/// Whether `columns` (an index's key columns, `None` for an expression) are exactly `index`'s.
pub(crate) fn same_columns(columns: &[Option<String>], index: &ClaimIndex) -> bool {
    same_column_list(columns, index.columns)
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

/// What `migrate` does about one wanted claim index that the table lacks.
#[derive(Debug, Clone, Copy)]
pub(crate) enum IndexChange {
    /// Create it.
    Create(&'static ClaimIndex),
    /// Drop the index of its name, which has columns an earlier version gave it
    /// ([`ClaimIndex::former_columns`]), and create it.
    Replace(&'static ClaimIndex),
}

impl IndexChange {
    /// The index created.
    pub(crate) fn index(&self) -> &'static ClaimIndex {
        match self {
            IndexChange::Create(index) | IndexChange::Replace(index) => index,
        }
    }
}

/// What `migrate` must do about the `wanted` claim indexes of a table, given its indexes (name
/// and key columns, `None` for an expression): the indexes to create or replace, or why it
/// cannot.
pub(crate) fn plan_claim_indexes(
    backend: Backend,
    table: &TableName,
    existing: &[(String, Vec<Option<String>>)],
    wanted: &[&'static ClaimIndex],
) -> Result<Vec<IndexChange>, String> {
    let mut create = Vec::new();
    let mut conflicts = Vec::new();
    for &index in wanted {
        if has_index_columns(backend, table, existing, index) {
            continue;
        }
        let name = index.name(table);
        match existing
            .iter()
            .find(|(existing, _)| existing.eq_ignore_ascii_case(&name))
        {
            Some((_, columns))
                if index
                    .former_columns
                    .iter()
                    .any(|former| same_column_list(columns, former)) =>
            {
                create.push(IndexChange::Replace(index));
            }
            Some((existing, columns)) => {
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
            None => create.push(IndexChange::Create(index)),
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

#[cfg(test)]
mod tests;
