//! MariaDB's form of the console's "older than a position" condition: two ranges on the index
//! key instead of a row comparison, which MariaDB reads as a range on `created_at_ms` alone
//! measured with `EXPLAIN`'s `key_len`).

use crate::store::EventCursor;
use crate::store::statement::SqlBuilder;

/// ` AND (created_at_ms < ? OR (created_at_ms = ? AND event_id < ?))`.
pub(crate) fn write_before_bound(b: &mut SqlBuilder, before: &EventCursor) {
    b.push(" AND (created_at_ms < ")
        .bind(before.created_at_ms)
        .push(" OR (created_at_ms = ")
        .bind(before.created_at_ms)
        .push(" AND event_id < ")
        .bind(before.event_id.as_str())
        .push("))");
}
