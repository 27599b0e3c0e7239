//! The pending branch of a per-room claim: it reads each room's head (its oldest pending event),
//! one index seek per room, instead of the tenant's backlog in claim order, where every event
//! behind a room's head is read and probed only to be passed over (with 2,000 pending events per
//! room a claim read the whole backlog). A head is handed out when no earlier event of its room
//! is retryable or delivering. Rooms are read in `room_id` order, bounded by the room cursor
//! ([`crate::store::room_cursor`]).
//!
//! The default statement ([`write_walk`], PostgreSQL and SQLite) walks the room index
//! `(app_code, status, room_id, created_at_ms, event_id)` with a recursive CTE: each step seeks
//! the first pending entry after the previous room, which is the next room's head. PostgreSQL
//! and SQLite run it lazily, so a claim reads only as many rooms as it needs. MariaDB runs a
//! correlated `room_id > w.room_id` as a scan of the tenant's pending entries, not a seek; its
//! statement is a loose index scan instead (`store/mysql/claim.rs`).

use super::{ACTIVE_STATUSES, PositionSide};
use crate::record::Status;
use crate::store::room_cursor::RoomWalk;
use crate::store::schema::ROOM_INDEX;
use crate::store::statement::{Arg, SqlBuilder};
use crate::store::{Backend, TableName};

/// The key order of a room's pending entries in the room index: its head first.
const HEAD_ORDER: &str = " ORDER BY x.room_id, x.created_at_ms, x.event_id LIMIT 1)";

/// Writes the room-walk claim of the pending branch returning `columns` (of alias `c`), over the
/// rooms `walk` names (`None`: every room; `After`: after the cursor; `UpTo`: up to and
/// including it). Binds what [`walk_args`] lists, then the row limit.
pub(crate) fn write_walk(
    b: &mut SqlBuilder,
    backend: Backend,
    table: &TableName,
    columns: &str,
    walk: Option<PositionSide>,
) {
    write_walk_cte(b, backend, table, walk);
    // `CROSS JOIN`: the walk drives (SQLite otherwise may read every pending row `c` of the
    // tenant and look each up in the walk); each head is read by its key.
    b.push(" SELECT ")
        .push(columns)
        .push(" FROM walk w CROSS JOIN ")
        .push(table.as_str())
        .push(" c WHERE ");
    write_head_key(b, "c");
    write_room_probes(b, backend, table, &[Status::Retryable, Status::Delivering]);
    b.push(" LIMIT ")
        .placeholder()
        .push(backend.dialect().row_lock());
}

/// The walk's columns, each the value of one seek: a room and its head's key.
const WALK_COLUMNS: [&str; 3] = ["room_id", "created_at_ms", "event_id"];

/// Writes `WITH RECURSIVE walk (room_id, created_at_ms, event_id) AS (…)`: the rooms `walk`
/// covers in `room_id` order, each with its head's key, one seek of the room index per column
/// and room (the first pending entry after the previous room is the next room's head).
pub(crate) fn write_walk_cte(
    b: &mut SqlBuilder,
    backend: Backend,
    table: &TableName,
    walk: Option<PositionSide>,
) {
    let t = table.as_str();
    let hint = room_index_hint(backend, table);
    // The first room: its head is the first pending entry (after the cursor).
    b.push("WITH RECURSIVE walk (room_id, created_at_ms, event_id) AS (SELECT ");
    for (i, column) in WALK_COLUMNS.into_iter().enumerate() {
        if i > 0 {
            b.push(", ");
        }
        next_head(b, t, &hint, column);
        write_cursor_bound(b, walk);
        b.push(HEAD_ORDER);
    }
    // Each next room: the first pending entry after the previous room.
    b.push(" UNION ALL SELECT ");
    for (i, column) in WALK_COLUMNS.into_iter().enumerate() {
        if i > 0 {
            b.push(", ");
        }
        next_head(b, t, &hint, column);
        b.push(" AND x.room_id > w.room_id");
        if walk == Some(PositionSide::UpTo) {
            b.push(" AND x.room_id <= ").placeholder();
        }
        b.push(HEAD_ORDER);
    }
    b.push(" FROM walk w WHERE w.room_id IS NOT NULL)");
}

/// Writes the condition that row `alias` is walk row `w`'s head, still pending: the head's whole
/// key in the room index and in the primary key, so that whichever index the planner picks
/// (with or without statistics) reads one entry. Binds the tenant.
pub(crate) fn write_head_key(b: &mut SqlBuilder, alias: &str) {
    b.push(alias)
        .push(".app_code = ")
        .placeholder()
        .push(" AND ")
        .push(alias)
        .push(".status = ")
        .status(Status::Pending);
    for column in WALK_COLUMNS {
        b.push(" AND ")
            .push(alias)
            .push(".")
            .push(column)
            .push(" = w.")
            .push(column);
    }
}

/// The values [`write_walk`] binds before the row limit: the tenant and the cursor room in the
/// order its placeholders appear.
pub(crate) fn walk_args(app_code: &str, walk: &RoomWalk) -> Vec<Arg> {
    let app = || Arg::from(app_code);
    let room = |room: &str| Arg::from(room);
    let mut args = Vec::with_capacity(13);
    // The first room (a scalar subquery per walk column), then each next room, then the join.
    for _ in WALK_COLUMNS {
        args.push(app());
        if let Some(cursor) = walk.cursor() {
            args.push(room(cursor));
        }
    }
    for _ in WALK_COLUMNS {
        args.push(app());
        if let RoomWalk::UpTo(cursor) = walk {
            args.push(room(cursor));
        }
    }
    args.push(app());
    args
}

/// Writes the room cursor's bound on `x.room_id` for the rooms `walk` covers (`None`: every
/// room, no bound): ` AND x.room_id > ?` after the cursor, ` AND x.room_id <= ?` up to it.
pub(crate) fn write_cursor_bound(b: &mut SqlBuilder, walk: Option<PositionSide>) {
    match walk {
        None => {}
        Some(PositionSide::After) => {
            b.push(" AND x.room_id > ").placeholder();
        }
        Some(PositionSide::UpTo) => {
            b.push(" AND x.room_id <= ").placeholder();
        }
    }
}

/// `(SELECT x.<column> FROM <table> x WHERE x.app_code = ? AND x.status = 'pending'`: the start
/// of one seek of a room's head in the room index.
fn next_head(b: &mut SqlBuilder, table: &str, hint: &str, column: &str) {
    b.push("(SELECT x.")
        .push(column)
        .push(" FROM ")
        .push(table)
        .push(" x")
        .push(hint)
        .push(" WHERE x.app_code = ")
        .placeholder()
        .push(" AND x.status = ")
        .status(Status::Pending);
}

/// The room index hint of `backend` (MySQL/MariaDB `FORCE INDEX`), or nothing.
pub(crate) fn room_index_hint(backend: Backend, table: &TableName) -> String {
    backend
        .dialect()
        .room_probe_index_hint(&ROOM_INDEX.name(table))
        .unwrap_or_default()
}

/// Writes one `AND NOT EXISTS` probe per status in `statuses` (each among the active statuses):
/// is there an earlier event of candidate `c`'s room in that status? One probe of the room index
/// per status, each with `status = const`: with `status IN (…)` MariaDB probes only
/// `(app_code)` and reads far more (tests/explain.rs).
pub(crate) fn write_room_probes(
    b: &mut SqlBuilder,
    backend: Backend,
    table: &TableName,
    statuses: &[Status],
) {
    let hint = room_index_hint(backend, table);
    for &status in statuses {
        debug_assert!(ACTIVE_STATUSES.contains(&status));
        b.push(" AND NOT EXISTS (SELECT 1 FROM ")
            .push(table.as_str())
            .push(" p")
            .push(&hint)
            .push(" WHERE p.app_code = c.app_code AND p.status = ")
            .status(status)
            .push(" AND p.room_id = c.room_id")
            .push(" AND p.created_at_ms <= c.created_at_ms")
            .push(" AND (p.created_at_ms < c.created_at_ms OR p.event_id < c.event_id)")
            .push(backend.dialect().probe_end());
    }
}

#[cfg(test)]
mod tests;
