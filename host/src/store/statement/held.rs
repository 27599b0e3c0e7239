//! The statements of a held claim ([`crate::store::OutboxStore::claim_held`]) that the leased
//! claim does not share: the one UPDATE that marks rows still locked by the held transaction.
//!
//! A held claim reads with the leased claim's branch SELECTs ([`super::claim::Statements`]:
//! `… FOR UPDATE SKIP LOCKED`; SQLite: inside `BEGIN IMMEDIATE`) and fails rejected rows with its
//! `reject_rows`; it writes no lease. Its mark needs no lease fence: the rows are locked by the
//! very transaction that marks them, so no other claim, mark or requeue can have changed them.

use super::Bound;
use crate::record::Status;
use crate::store::{Backend, Mark, TableName};

/// How a dialect addresses the rows a held transaction locked
/// ([`super::SqlDialect::held_row_address`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct HeldRowAddress {
    /// Appended to the held claim's SELECT list (alias `c`): the row's address as text.
    pub(crate) select: &'static str,
    /// Written before the bound text array literal of addresses in the mark's WHERE.
    pub(crate) match_start: &'static str,
    /// Written after it.
    pub(crate) match_end: &'static str,
}

/// The text array literal of `addresses` (`{"(0,1)","(0,2)"}`), bound as one text value.
fn array_literal(addresses: &[&str]) -> String {
    let quoted: Vec<String> = addresses
        .iter()
        .map(|a| format!("\"{}\"", a.replace('\\', "\\\\").replace('"', "\\\"")))
        .collect();
    format!("{{{}}}", quoted.join(","))
}

/// Writes the marks of rows a held transaction locked, by primary key (or by the addresses the
/// claim read, where the dialect has them: `addresses`, one per mark, in the same order), in one
/// UPDATE (`marks` at most [`super::MAX_ROWS_PER_STATEMENT`], distinct ids): the same column
/// values per [`crate::store::Disposition`] as the leased mark, `last_error` cut where bound,
/// plus `worker_id` (the worker that handled the row). A row still `delivering` was reclaimed
/// from a dead leased worker by the held claim: that reclaim counts as an attempt here, as the
/// leased claim counts it in its lease UPDATE.
pub(crate) fn mark_held_rows(
    backend: Backend,
    table: &TableName,
    app_code: &str,
    worker_id: &str,
    marks: &[Mark],
    addresses: Option<&[&str]>,
    now_ms: i64,
) -> Bound {
    let columns = super::mark::mark_columns(marks);
    let mut b = super::mark::update_by_key(backend, table);
    b
        // First assignment: MySQL evaluates SET left to right, and `status` changes below.
        .push(" SET retry_count = retry_count + CASE WHEN status = ")
        .status(Status::Delivering)
        .push(" THEN 1 ELSE 0 END");
    if columns.iter().any(|(_, c)| c.failed_attempt) {
        b.push(" + CASE event_id");
        for (event_id, _) in columns.iter().filter(|(_, c)| c.failed_attempt) {
            b.push(" WHEN ").bind(*event_id).push(" THEN 1");
        }
        b.push(" ELSE 0 END");
    }
    b.push(",");
    super::mark::status_column(&mut b, &columns);
    super::mark::retry_and_error_columns(&mut b, &columns);
    b.push(", worker_id = ")
        .bind(worker_id)
        .push(", lock_until_ms = NULL, updated_at_ms = ")
        .bind(now_ms)
        .push(" WHERE ");
    match (addresses, backend.dialect().held_row_address()) {
        // By address alone: with `app_code = ?` beside it, a never-analyzed table's estimate for
        // the tenant looks selective and PostgreSQL reads the tenant through the primary key.
        (Some(addresses), Some(address)) => {
            b.push(address.match_start)
                .bind(array_literal(addresses))
                .push(address.match_end);
        }
        _ => {
            b.push("app_code = ")
                .bind(app_code)
                .push(" AND event_id IN ")
                .bind_set(marks.iter().map(|m| m.event_id.as_str()));
        }
    }
    b.finish()
}
