//! MariaDB's claim: the claim position's bound written as two ranges on the pending index's full
//! key, since MariaDB's range optimizer seeks a row comparison `(created_at_ms, event_id) > (?, ?)`
//! on `created_at_ms` alone and reads a backlog written in one millisecond from its head
//! (EXPLAIN's `key_len`); and the per-room claim's room heads read by a loose index scan
//! ([`write_room_heads`]), sent as text with its values written in ([`ClaimOps::room_heads_rows`]).

use super::MySqlStore;
use crate::record::Status;
use crate::store::ClaimParams;
use crate::store::DeliveryOrder;
use crate::store::claim_position::ClaimPosition;
use crate::store::exec_claim::ClaimOps;
use crate::store::exec_held::HeldOps;
use crate::store::room_cursor::RoomWalk;
use crate::store::row::CandidateRow;
use crate::store::session::Session;
use crate::store::statement::Bound;
use crate::store::statement::claim::ClaimBranch;
use crate::store::statement::claim::PositionSide;
use crate::store::statement::claim::room_heads::{
    room_index_hint, write_cursor_bound, write_room_probes,
};
use crate::store::statement::{Arg, SqlBuilder};
use crate::store::{Backend, TableName};

/// The claim as written once (`SELECT … FOR UPDATE SKIP LOCKED`, then the lease UPDATE by
/// primary key), but for the room heads of a per-room claim: MariaDB 10.11 plans the loose index
/// scan of [`write_room_heads`] for a fresh statement, and a connection that runs the same
/// prepared statement again after the table changed drops it for a range scan of every pending
/// entry of the tenant (1M pending rows: ~1 s a claim instead of ~10 ms; `Handler_read_next` in
/// `tests/stale_plans.rs`). The room heads go as text with their values written in
/// ([`inline_values`]): planned on every run, in one round trip. (A prepared statement closed
/// after each run costs ~40 ms instead: sqlx's sockets keep Nagle's algorithm on, and the next
/// command waits behind the close, which the server does not answer, for its delayed ACK.)
impl ClaimOps for MySqlStore {
    async fn room_heads_rows<S: Session>(
        &self,
        session: &mut S,
        query: Bound,
    ) -> Result<Vec<CandidateRow>, sqlx::Error> {
        session.rows_of_text(inline_values(query)).await
    }
}

/// The held claim as written once (the branch SELECTs, rows marked by primary key), the room
/// heads sent as text as in the leased claim.
impl HeldOps for MySqlStore {
    async fn held_rows<S: Session>(
        &self,
        session: &mut S,
        branch: ClaimBranch,
        params: &ClaimParams,
        limit: usize,
        walk: &RoomWalk,
    ) -> Result<Vec<(CandidateRow, Option<String>)>, sqlx::Error> {
        let query = self
            .statements
            .claim_query_walk(branch, params, limit, walk);
        let rows = if branch == ClaimBranch::Pending && params.ordering == DeliveryOrder::PerRoom {
            session.rows_of_text(inline_values(query)).await?
        } else {
            session.rows::<CandidateRow>(query).await?
        };
        Ok(rows.into_iter().map(|row| (row, None)).collect())
    }
}

/// `statement`'s text with each `?` replaced by its value as a literal: a string as
/// `_utf8mb4 X'…'` (hex, so no character of it is read as SQL), a number in decimal, bytes as
/// `X'…'`. The statement's text holds no `?` but its placeholders (`store::statement` writes
/// only fixed fragments, the validated table name and `?`).
pub(crate) fn inline_values(statement: Bound) -> String {
    use std::fmt::Write;
    let hex = |out: &mut String, bytes: &[u8]| {
        out.push_str("X'");
        for byte in bytes {
            let _ = write!(out, "{byte:02x}");
        }
        out.push('\'');
    };
    let mut out = String::with_capacity(statement.sql.len() + 64 * statement.args.len());
    let mut args = statement.args.into_iter();
    for (i, part) in statement.sql.split('?').enumerate() {
        if i > 0 {
            match args.next().expect("one value per placeholder") {
                Arg::Text(text) => {
                    out.push_str("_utf8mb4 ");
                    hex(&mut out, text.as_bytes());
                }
                Arg::Int(n) => {
                    let _ = write!(out, "{n}");
                }
                Arg::Bytes(bytes) => hex(&mut out, &bytes),
                Arg::TextList(_) => unreachable!("MySQL binds no array parameter"),
            }
        }
        out.push_str(part);
    }
    assert!(args.next().is_none(), "one placeholder per value");
    out
}

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

/// Writes MariaDB's pending branch of a per-room claim, returning `columns` (of alias `c`): the
/// rooms' first pending `created_at_ms` read by a loose index scan of the room index (one seek
/// per room with pending events, EXPLAIN's "Using index for group-by"; written with `BETWEEN`
/// bounds and every key column in the `GROUP BY`, the form whose loose scan MariaDB 10.11 plans:
/// with `app_code = ?` it scans the tenant's pending entries), each room's head the least
/// `event_id` of that millisecond (a ref of the room index: the events committed in one
/// millisecond, however deep the backlog behind them), read by primary key and handed out when
/// no earlier event of its room is retryable or delivering. MariaDB seeks no range bounded by a
/// correlated value (`room_id > w.room_id`, `created_at_ms <= c.created_at_ms`): it reads from
/// the start of the ref, so every seek here is an equality. The scan is a plain read: only the
/// heads are locked. Binds what [`room_heads_args`] lists, then the row limit.
pub(crate) fn write_room_heads(
    b: &mut SqlBuilder,
    table: &TableName,
    columns: &str,
    walk: Option<PositionSide>,
) {
    let t = table.as_str();
    let hint = room_index_hint(Backend::MySql, table);
    b.push("SELECT ")
        .push(columns)
        .push(" FROM (SELECT x.room_id, MIN(x.created_at_ms) AS head_at FROM ")
        .push(t)
        .push(" x")
        .push(&hint)
        .push(" WHERE x.app_code BETWEEN ")
        .placeholder()
        .push(" AND ")
        .placeholder()
        .push(" AND x.status BETWEEN ")
        .status(Status::Pending)
        .push(" AND ")
        .status(Status::Pending);
    write_cursor_bound(b, walk);
    // The head: the least event id of the room's first millisecond. (In the join condition, not
    // a derived table of its own: MariaDB merges that one, and a prepared statement run a
    // second time then fails with "Unknown column 'h.room_id'".)
    b.push(" GROUP BY x.app_code, x.status, x.room_id) h JOIN ")
        .push(t)
        .push(" c FORCE INDEX (PRIMARY) ON c.app_code = ")
        .placeholder()
        .push(" AND c.event_id = (SELECT MIN(y.event_id) FROM ")
        .push(t)
        .push(" y")
        .push(&hint)
        .push(" WHERE y.app_code = ")
        .placeholder()
        .push(" AND y.status = ")
        .status(Status::Pending)
        .push(" AND y.room_id = h.room_id AND y.created_at_ms = h.head_at) WHERE c.status = ")
        .status(Status::Pending);
    write_room_probes(
        b,
        Backend::MySql,
        table,
        &[Status::Retryable, Status::Delivering],
    );
    b.push(" LIMIT ")
        .placeholder()
        .push(" FOR UPDATE SKIP LOCKED");
}

/// The values [`write_room_heads`] binds before the row limit.
pub(crate) fn room_heads_args(app_code: &str, walk: &RoomWalk) -> Vec<Arg> {
    let app = || Arg::from(app_code);
    let mut args = vec![app(), app()];
    if let Some(cursor) = walk.cursor() {
        args.push(Arg::from(cursor));
    }
    args.extend([app(), app()]);
    args
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_written_in_as_hex_and_decimal_literals() {
        let statement = Bound {
            sql: "SELECT 1 FROM t WHERE a = ? AND b = ? LIMIT ?".into(),
            args: vec![Arg::from("it's é"), Arg::Bytes(vec![0, 255]), Arg::Int(-5)],
        };
        assert_eq!(
            inline_values(statement),
            "SELECT 1 FROM t WHERE a = _utf8mb4 X'6974277320c3a9' AND b = X'00ff' LIMIT -5"
        );
    }
}
