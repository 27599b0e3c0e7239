//! The producer insert: a multi-row INSERT of new `pending` rows that ignores ids already
//! present, or the plain INSERT that a duplicate id fails (MySQL's one-record insert).

use std::collections::HashSet;

use super::{Bound, SqlBuilder};
use crate::record::{Record, Status};
use crate::store::{Backend, TableName};

/// Every column of the outbox table (migration 0001), in table order: the outbox INSERT lists them
/// in this order and the schema's `migrate` checks that the table has them all.
pub(crate) const OUTBOX_COLUMNS: [&str; 13] = [
    "app_code",
    "event_id",
    "event_type",
    "room_id",
    "status",
    "envelope",
    "created_at_ms",
    "retry_count",
    "last_error",
    "worker_id",
    "lock_until_ms",
    "next_retry_at_ms",
    "updated_at_ms",
];

/// The multi-row INSERT of new `pending` rows (`records` at most [`super::MAX_ROWS_PER_STATEMENT`]),
/// ignoring ids already present.
pub(crate) fn insert_records(backend: Backend, table: &TableName, records: &[&Record]) -> Bound {
    let mut b = values_insert(backend, table, records);
    b.push(backend.dialect().ignore_duplicate_key());
    b.finish()
}

/// The plain INSERT of `records` as `pending` rows, without [`insert_records`]' clause that ignores
/// a duplicate id: the statement fails on one (MySQL's one-record insert, `store/mysql/save.rs`).
pub(crate) fn insert_records_strict(
    backend: Backend,
    table: &TableName,
    records: &[&Record],
) -> Bound {
    values_insert(backend, table, records).finish()
}

/// `INSERT INTO table (columns) VALUES (…), …` of `records` as `pending` rows.
fn values_insert(backend: Backend, table: &TableName, records: &[&Record]) -> SqlBuilder {
    let mut b = SqlBuilder::new(backend);
    b.push("INSERT INTO ")
        .push(table.as_str())
        .push(" (")
        .push(&OUTBOX_COLUMNS.join(", "))
        .push(") VALUES ");
    for (i, record) in records.iter().enumerate() {
        if i > 0 {
            b.push(", ");
        }
        b.push("(")
            .bind(record.app_code.as_str())
            .push(", ")
            .bind(record.event_id.as_str())
            .push(", ")
            .bind(record.event_type.as_str())
            .push(", ")
            .bind(record.room_id.as_str())
            .push(", ")
            .status(Status::Pending)
            .push(", ")
            .bind(record.encoded_envelope())
            .push(", ")
            .bind(record.created_at_ms)
            .push(", 0, NULL, '', NULL, 0, ")
            .bind(record.created_at_ms)
            .push(")");
    }
    b
}

/// The records to insert: the first of each (app_code, event_id), like the database would keep.
pub(crate) fn distinct_records(records: &[Record]) -> Vec<&Record> {
    let mut seen = HashSet::with_capacity(records.len());
    records
        .iter()
        .filter(|r| seen.insert((r.app_code.as_str(), r.event_id.as_str())))
        .collect()
}
