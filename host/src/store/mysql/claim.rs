//! MariaDB's claim position: the pending branch's bound written as two ranges on the pending
//! index's full key, since MariaDB's range optimizer seeks a row comparison
//! `(created_at_ms, event_id) > (?, ?)` on `created_at_ms` alone and reads a backlog written in
//! one millisecond from its head (EXPLAIN's `key_len`).

use crate::store::claim_position::ClaimPosition;
use crate::store::statement::claim::PositionSide;
use crate::store::statement::{Arg, SqlBuilder};

/// Writes `created_at_ms > ? OR (created_at_ms = ? AND event_id > ?)` (or its `UpTo` side):
/// two ranges on the full key.
pub(crate) fn write_position_bound(b: &mut SqlBuilder, side: PositionSide) {
    let (created, id) = match side {
        PositionSide::After => (">", ">"),
        PositionSide::UpTo => ("<", "<="),
    };
    b.push(" AND (c.created_at_ms ")
        .push(created)
        .push(" ")
        .placeholder()
        .push(" OR (c.created_at_ms = ")
        .placeholder()
        .push(" AND c.event_id ")
        .push(id)
        .push(" ")
        .placeholder()
        .push("))");
}

/// The values [`write_position_bound`] binds: `created_at_ms` twice, then `event_id`.
pub(crate) fn position_args(position: &ClaimPosition) -> Vec<Arg> {
    let created = Arg::Int(position.created_at_ms);
    vec![
        created.clone(),
        created,
        Arg::from(position.event_id.as_str()),
    ]
}
