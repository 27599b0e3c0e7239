//! The room index `idx_<table>_room`: read only by per-room claims ([`DeliveryOrder::PerRoom`]),
//! so it is not part of the base schema. `migrate` creates it when asked
//! ([`crate::store::MigrateOptions::room_index`]); a worker with per-room ordering checks once at
//! start that the table has it ([`check_ordering`]), since without it each per-room probe would
//! scan the tenant's backlog. (The index itself is [`super::schema`]'s `ROOM_INDEX`.)

use super::driver::{Driver, db};
use super::schema::{ROOM_INDEX, has_index_columns, same_column_list, same_columns, table_indexes};
use super::{DeliveryOrder, StoreError};

/// Ok when claims with `ordering` find the indexes they read: always without ordering; with
/// per-room ordering when some index of the table has the room index's columns, under any name
/// or, where the per-room probes name the index (MySQL/MariaDB `FORCE INDEX`,
/// [`needs_own_name`](super::schema::needs_own_name)), under its own.
pub(crate) async fn check_ordering<D: Driver>(
    driver: &D,
    ordering: DeliveryOrder,
) -> Result<(), StoreError> {
    const OP: &str = "check_ordering";
    if ordering != DeliveryOrder::PerRoom {
        return Ok(());
    }
    let statements = driver.statements();
    let (backend, table) = (statements.backend(), statements.table());
    let mut conn = driver.pool().acquire().await.map_err(db(OP))?;
    let indexes = table_indexes(&mut *conn, backend, table, OP).await?;
    if has_index_columns(backend, table, &indexes, &ROOM_INDEX) {
        return Ok(());
    }
    let name = ROOM_INDEX.name(table);
    // Where the probes name the index, one of its columns under another name does not serve them.
    let other_name = indexes
        .iter()
        .find(|(_, columns)| same_columns(columns, &ROOM_INDEX))
        .map(|(other, _)| other.as_str());
    let former = indexes.iter().any(|(existing, columns)| {
        existing.eq_ignore_ascii_case(&name)
            && ROOM_INDEX
                .former_columns
                .iter()
                .any(|former| same_column_list(columns, former))
    });
    let note = match other_name {
        _ if former => format!(
            "; {name} has the columns of an earlier version, which cannot read room heads \
             (`outboxd migrate` rebuilds it)"
        ),
        Some(other) => format!(
            "; index {other} has its columns, but the per-room claims name {name} on this \
             database (drop {other} once {name} exists)"
        ),
        None => String::new(),
    };
    Err(StoreError::Schema(format!(
        "table {table} has no index {name} ({columns}), which worker.ordering = \"per-room\" \
         needs (without it every per-room claim scans the tenant's backlog): run `outboxd \
         migrate` with worker.ordering = \"per-room\" (or `outboxd migrate --room-index`) \
         first{note}",
        table = table.as_str(),
        columns = ROOM_INDEX.columns.join(", "),
    )))
}
