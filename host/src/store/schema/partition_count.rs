//! The table's partition count: read off the catalog (the expression its partition index or
//! column masks with), checked by every heartbeat so that a host never reads or marks under a
//! count that changed, and changed by `outboxd migrate --partitions` while no host runs. The
//! statements are in `statement/repartition.rs` and each dialect's `partitions.rs`.

use super::take_migration_lock;
use crate::record;
use crate::store::driver::{Driver, db};
use crate::store::partitions::partitions_of_expression;
use crate::store::row::{Name, OptText};
use crate::store::session::Session;
use crate::store::statement::repartition as sql;
use crate::store::statement::rows::Statements;
use crate::store::{Repartition, StoreError, check_partition_count};

/// The partition count of the store's table as the catalog has it now: 1 where the backend has
/// one partition (SQLite); `None` where the table has no partition expression (not migrated, or
/// a change of count cut short between dropping the old index and naming the new one).
pub(crate) async fn catalog_partitions<S: Session>(
    session: &mut S,
    statements: &Statements,
) -> Result<Option<u32>, StoreError> {
    let table = statements.table();
    let Some(query) = statements.backend().dialect().partition_count_query(table) else {
        return Ok(Some(1));
    };
    let rows = session
        .rows::<OptText>(query)
        .await
        .map_err(db("partition count"))?;
    let Some(OptText(Some(expression))) = rows.into_iter().next() else {
        return Ok(None);
    };
    partitions_of_expression(&expression)
        .map(Some)
        .ok_or_else(|| {
            StoreError::Schema(format!(
                "the partition expression of {} is {expression:?}: expected `… & <partitions - 1>` \
             (as `outboxd migrate` writes it)",
                table.as_str()
            ))
        })
}

/// The partition count a heartbeat works with: the catalog's, recorded in the store's statements
/// the first time; [`StoreError::PartitionsChanged`] once it differs from the one recorded.
pub(crate) async fn checked_partitions<S: Session>(
    session: &mut S,
    statements: &Statements,
) -> Result<u32, StoreError> {
    let table = statements.table().as_str();
    let Some(now) = catalog_partitions(session, statements).await? else {
        return Err(no_partition_index(table));
    };
    match statements.known_partitions() {
        Some(was) if was != now => Err(StoreError::PartitionsChanged {
            table: table.to_string(),
            was,
            now,
        }),
        _ => {
            statements.set_partitions(now);
            Ok(now)
        }
    }
}

/// The table has no partition expression: never migrated, or its count is being changed.
fn no_partition_index(table: &str) -> StoreError {
    StoreError::Schema(format!(
        "{table} has no partition index (idx_{table}_part): an `outboxd migrate --partitions N` \
         is changing it (start the host again once it has finished), or one was cut short (run \
         it again), or the table was never migrated (run `outboxd migrate`)"
    ))
}

/// What to report when a heartbeat statement failed after its count was checked: the catalog is
/// read again, and when its count is no longer `partitions` (`outboxd migrate --partitions`
/// swapped the partition column or index meanwhile, e.g. under a host that was starting), the
/// error says so instead of the statement's own ("Unknown column 'outbox_partition'"). Otherwise,
/// or when the catalog cannot be read either, the statement's error.
pub(crate) async fn explain_failure<S: Session>(
    session: &mut S,
    statements: &Statements,
    partitions: u32,
    failure: StoreError,
) -> StoreError {
    if !matches!(failure, StoreError::Database { .. }) {
        return failure;
    }
    let table = statements.table().as_str();
    match catalog_partitions(session, statements).await {
        Ok(Some(now)) if now != partitions => StoreError::PartitionsChanged {
            table: table.to_string(),
            was: partitions,
            now,
        },
        Ok(None) => no_partition_index(table),
        _ => failure,
    }
}

/// Makes the table's partition count `partitions` per tenant (`outboxd migrate --partitions`):
/// refused while any host runs (alive, or owning a partition under a live lease); the partition
/// expression and its index rebuilt online, producers writing; then every partition row freed at
/// a new epoch, out of the crash guard's care, and the numbers past the count deleted. Nothing
/// happens when the table has that count already.
pub(crate) async fn repartition<D: Driver>(
    driver: &D,
    partitions: u32,
) -> Result<Repartition, StoreError> {
    const OP: &str = "repartition";
    check_partition_count(partitions)?;
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    let dialect = backend.dialect();
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let from = catalog_partitions(&mut *conn, statements).await?;
    if from == Some(partitions) {
        statements.set_partitions(partitions);
        return Ok(Repartition {
            from: partitions,
            to: partitions,
        });
    }
    let ddl = dialect.repartition_statements(table, partitions);
    if ddl.is_empty() {
        return Err(StoreError::Invalid(format!(
            "partitions = {partitions}: {} keeps one partition per tenant (one writer at a time)",
            backend.name()
        )));
    }
    let running = conn
        .rows::<Name>(sql::running_hosts(statements, record::now_ms()))
        .await
        .map_err(db(OP))?;
    if !running.is_empty() {
        let hosts: Vec<String> = running.into_iter().map(|Name(host)| host).collect();
        return Err(StoreError::Invalid(format!(
            "partitions: hosts {} of {} are running (alive, or owning a partition under a live \
             lease): stop every host first; a stopped host's lease ends within worker.lease",
            hosts.join(", "),
            table.as_str()
        )));
    }
    let lock = dialect.migration_session_lock();
    let changed = async {
        if let Some([take, _]) = lock {
            take_migration_lock(&mut *conn, table, take).await?;
        }
        tracing::info!(
            table = table.as_str(),
            from = from.unwrap_or(0),
            to = partitions,
            "changing the partition count: the partition index is built again beside the old \
             one (a scan of the table; producers keep writing)"
        );
        for statement in ddl {
            conn.script(statement).await.map_err(db(OP))?;
        }
        for statement in sql::restart_partitions(statements, partitions) {
            conn.run(statement).await.map_err(db(OP))?;
        }
        Ok::<_, StoreError>(())
    }
    .await;
    match (changed, lock) {
        (Ok(()), Some([_, unlock])) => {
            conn.script(unlock.to_string()).await.map_err(db(OP))?;
        }
        (Ok(()), None) => {}
        (Err(error), _) => {
            // Closing the connection releases its session lock, whatever state it is in.
            let _ = conn.close().await;
            return Err(error);
        }
    }
    statements.set_partitions(partitions);
    Ok(Repartition {
        from: from.unwrap_or(0),
        to: partitions,
    })
}
