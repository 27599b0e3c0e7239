//! `migrate`: the embedded migrations not yet recorded applied in one write transaction, then the
//! table's columns and required indexes checked (and completed) on every run.

use std::collections::HashSet;

use super::partition_count::catalog_partitions;
use super::{
    CREATE_BOOKKEEPING, applied_versions, create_index, missing_indexes, record_version,
    table_indexes, take_migration_lock,
};
use crate::record;
use crate::store::driver::{Driver, begin_write, db};
use crate::store::row::{Int, Name};
use crate::store::session::Session;
use crate::store::statement::insert::OUTBOX_COLUMNS;
use crate::store::{Backend, StoreError, TableName};

/// Applies the embedded migrations not yet recorded for the table, in one write transaction
/// (MySQL/MariaDB commit DDL implicitly: there every step is idempotent instead). Then checks
/// the table's columns and required indexes on every run ([`verify_outbox_table`]), so a table
/// adopted from another program gets them. Migrations marked to run outside a transaction follow once that
/// transaction commits ([`migrate_outside_transaction`]).
pub(crate) async fn migrate<D: Driver>(driver: &D) -> Result<Vec<i64>, StoreError> {
    let mut applied_now = migrate_in_transaction(driver).await?;
    applied_now.extend(migrate_outside_transaction(driver).await?);
    // The partition count the migrations left (64 on a new table), for the store's statements.
    let mut conn = driver.pool().acquire().await.map_err(db("migrate"))?;
    let statements = driver.statements();
    if let Some(partitions) = catalog_partitions(&mut *conn, statements).await? {
        statements.set_partitions(partitions);
    }
    Ok(applied_now)
}

/// The migrations that run in the transaction (all but [`Migration::outside_transaction`] ones),
/// the table's check, and their records.
async fn migrate_in_transaction<D: Driver>(driver: &D) -> Result<Vec<i64>, StoreError> {
    const OP: &str = "migrate";
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    let mut tx = begin_write(driver, OP).await?;
    if let Some(lock) = backend.dialect().migration_lock() {
        take_migration_lock(&mut *tx, table, lock).await?;
    }
    // A table created by another program must have every column before migration 0001's
    // indexes can be created on it.
    has_outbox_columns(&mut *tx, backend, table).await?;
    tx.script(format!(
        "{CREATE_BOOKKEEPING}{}",
        backend.dialect().bookkeeping_table_options()
    ))
    .await
    .map_err(db(OP))?;
    let applied = recorded_versions(&mut *tx, backend, table).await?;
    let mut applied_now = Vec::new();
    for migration in backend.dialect().migrations() {
        if applied.contains(&migration.version) || migration.outside_transaction {
            continue;
        }
        tx.script(migration.sql(table))
            .await
            .map_err(|source| StoreError::Migration {
                version: migration.version,
                name: migration.name,
                source,
            })?;
        applied_now.push(migration.version);
    }
    // Before recording: on MySQL/MariaDB the DDL above already committed, and a table refused
    // here must not count as migrated.
    verify_outbox_table(&mut *tx, backend, table).await?;
    for version in &applied_now {
        tx.run(record_version(backend, table, *version, record::now_ms()))
            .await
            .map_err(db(OP))?;
    }
    tx.commit().await.map_err(db(OP))?;
    Ok(applied_now)
}

/// The migrations marked to run outside a transaction ([`Migration::outside_transaction`]) not
/// yet recorded, in version order, on one connection under the dialect's session lock: each
/// statement in autocommit, the record after the last. On an error the connection is closed,
/// which releases the lock; the migration runs again from its first statement next time.
async fn migrate_outside_transaction<D: Driver>(driver: &D) -> Result<Vec<i64>, StoreError> {
    const OP: &str = "migrate";
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    let dialect = backend.dialect();
    if !dialect.migrations().iter().any(|m| m.outside_transaction) {
        return Ok(Vec::new());
    }
    let Some([lock, unlock]) = dialect.migration_session_lock() else {
        return Err(StoreError::Schema(format!(
            "{backend:?} has migrations to run outside a transaction but no session lock to \
             serialize them"
        )));
    };
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let applied = async {
        take_migration_lock(&mut *conn, table, lock).await?;
        let recorded = recorded_versions(&mut *conn, backend, table).await?;
        let mut applied_now = Vec::new();
        for migration in dialect.migrations() {
            if !migration.outside_transaction || recorded.contains(&migration.version) {
                continue;
            }
            tracing::info!(
                table = table.as_str(),
                version = migration.version,
                name = migration.name,
                "applying a migration outside a transaction (an index built concurrently takes \
                 a scan of the table; producers keep writing)"
            );
            for statement in migration.statements(table) {
                conn.script(statement)
                    .await
                    .map_err(|source| StoreError::Migration {
                        version: migration.version,
                        name: migration.name,
                        source,
                    })?;
            }
            conn.run(record_version(
                backend,
                table,
                migration.version,
                record::now_ms(),
            ))
            .await
            .map_err(db(OP))?;
            applied_now.push(migration.version);
        }
        Ok::<_, StoreError>(applied_now)
    }
    .await;
    match applied {
        Ok(applied_now) => {
            conn.script(unlock.to_string()).await.map_err(db(OP))?;
            Ok(applied_now)
        }
        Err(error) => {
            // Closing the connection releases its session lock, whatever state it is in.
            let _ = conn.close().await;
            Err(error)
        }
    }
}

/// The versions recorded in the table's bookkeeping table.
async fn recorded_versions<S: Session>(
    session: &mut S,
    backend: Backend,
    table: &TableName,
) -> Result<HashSet<i64>, StoreError> {
    Ok(session
        .rows::<Int>(applied_versions(backend, table))
        .await
        .map_err(db("migrate"))?
        .into_iter()
        .map(|Int(version)| version)
        .collect())
}

/// Whether the outbox table exists; an error naming the missing columns when it exists without
/// every column of [`OUTBOX_COLUMNS`].
async fn has_outbox_columns<S: Session>(
    session: &mut S,
    backend: Backend,
    table: &TableName,
) -> Result<bool, StoreError> {
    let columns: Vec<String> = session
        .rows::<Name>(backend.dialect().table_columns(table))
        .await
        .map_err(db("migrate"))?
        .into_iter()
        .map(|Name(column)| column)
        .collect();
    if columns.is_empty() {
        return Ok(false);
    }
    let missing: Vec<&str> = OUTBOX_COLUMNS
        .iter()
        .copied()
        .filter(|wanted| !columns.iter().any(|c| c.eq_ignore_ascii_case(wanted)))
        .collect();
    if missing.is_empty() {
        Ok(true)
    } else {
        Err(StoreError::Schema(format!(
            "table {} lacks the column(s) {} that outboxd needs: add them as in \
             migrations/<backend>/0001_room_outbox.sql and run `outboxd migrate` again",
            table.as_str(),
            missing.join(", ")
        )))
    }
}

/// Checks the outbox table after the migrations: every column of the record present
/// ([`has_outbox_columns`]), and the dialect's required indexes (`SqlDialect::required_indexes`) present under any
/// name. A table created by another program (`CREATE TABLE IF NOT EXISTS` left it as it was)
/// gets the missing ones; one with an index named like a required index but of other columns is
/// refused, and nothing is created.
async fn verify_outbox_table<S: Session>(
    session: &mut S,
    backend: Backend,
    table: &TableName,
) -> Result<(), StoreError> {
    const OP: &str = "migrate";
    if !has_outbox_columns(session, backend, table).await? {
        return Err(StoreError::Schema(format!(
            "table {table} does not exist, but outboxd_migrations records it as migrated: \
             delete its rows there (DELETE FROM outboxd_migrations WHERE table_name = '{table}') \
             and run `outboxd migrate` again",
            table = table.as_str()
        )));
    }
    let indexes = table_indexes(session, backend, table, OP).await?;
    let create = missing_indexes(
        backend,
        table,
        &indexes,
        backend.dialect().required_indexes(),
    )
    .map_err(StoreError::Schema)?;
    for index in create {
        tracing::info!(
            table = table.as_str(),
            index = %index.name(table),
            columns = %index.columns.join(", "),
            "creating a missing index on the outbox table"
        );
        session
            .script(create_index(table, index))
            .await
            .map_err(db(OP))?;
    }
    Ok(())
}
