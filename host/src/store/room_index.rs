//! The room index `idx_<table>_room`: read only by per-room claims ([`DeliveryOrder::PerRoom`]),
//! so it is not part of the base schema. `migrate` creates it when asked
//! ([`crate::store::MigrateOptions::room_index`]); a worker with per-room ordering checks once at
//! start that the table has it ([`check_ordering`]), since without it each per-room probe would
//! scan the tenant's backlog.

use super::exec::{Driver, db};
use super::schema::{ClaimIndex, has_index_columns, table_indexes};
use super::{DeliveryOrder, StoreError};

/// The per-room probes' index ("is an earlier event of this room still pending, retryable or
/// delivering?", one probe per status). On SQLite it holds live rows only, as migration
/// `sqlite/0002` made it.
pub(crate) static ROOM_INDEX: ClaimIndex = ClaimIndex {
    suffix: "room",
    columns: &["app_code", "room_id", "status", "created_at_ms", "event_id"],
    live_rows_only: true,
};

/// Ok when claims with `ordering` find the indexes they read: always without ordering; with
/// per-room ordering when some index of the table has the room index's columns (any name).
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
    if has_index_columns(&indexes, &ROOM_INDEX) {
        return Ok(());
    }
    Err(StoreError::Schema(format!(
        "table {table} has no index {name} ({columns}), which worker.ordering = \"per-room\" \
         needs (without it every per-room claim scans the tenant's backlog): run `outboxd \
         migrate` with worker.ordering = \"per-room\" (or `outboxd migrate --room-index`) first",
        table = table.as_str(),
        name = ROOM_INDEX.name(table),
        columns = ROOM_INDEX.columns.join(", "),
    )))
}
