//! Unit tests of the room-heads statements: their text per database and what they bind.

use crate::store::room_cursor::RoomWalk;
use crate::store::statement::Arg;
use crate::store::statement::claim::{ClaimBranch, Statements};
use crate::store::statement::tests::{BACKENDS, assert_placeholders, claim_params, table};
use crate::store::{Backend, DeliveryOrder, Lease};

/// The pending branch of a per-room claim reads room heads: PostgreSQL and SQLite walk the room
/// index, one seek per room, bounded by the room cursor; MariaDB reads the rooms' first pending
/// entries with a loose index scan and each head by its millisecond. Only the heads are locked,
/// and a head is handed out when no earlier event of its room is retryable or delivering.
#[test]
fn per_room_pending_branch_reads_room_heads() {
    let seek = |column: &str, bound: &str| {
        format!(
            "(SELECT x.{column} FROM room_outbox x WHERE x.app_code = ? AND x.status = 'pending'\
             {bound} ORDER BY x.room_id, x.created_at_ms, x.event_id LIMIT 1)"
        )
    };
    let sqlite = Statements::new(Backend::Sqlite, &table());
    let params = claim_params(DeliveryOrder::PerRoom, false);
    let lease = Lease {
        app_code: "live".into(),
        worker_id: "w".into(),
        lock_until_ms: 1_007,
        partition: None,
    };
    let up_to = RoomWalk::UpTo("r7".into());
    let bound = sqlite.claim_statement_by_room(&params, &lease, &up_to, 4);
    let step = " AND x.room_id > w.room_id AND x.room_id <= ?";
    let probe = |status: &str| {
        format!(
            " AND NOT EXISTS (SELECT 1 FROM room_outbox p WHERE p.app_code = c.app_code AND p.status = '{status}' \
             AND p.room_id = c.room_id AND p.created_at_ms <= c.created_at_ms AND (p.created_at_ms < c.created_at_ms \
             OR p.event_id < c.event_id))"
        )
    };
    assert_eq!(
        &*bound.sql,
        format!(
            "WITH RECURSIVE walk (room_id, created_at_ms, event_id) AS (SELECT {}, {}, {} \
             UNION ALL SELECT {}, {}, {} FROM walk w WHERE w.room_id IS NOT NULL) \
             SELECT c.event_id, c.event_type, c.room_id, c.envelope, c.created_at_ms, c.retry_count \
             FROM walk w CROSS JOIN room_outbox c WHERE c.app_code = ? AND c.status = 'pending' \
             AND c.room_id = w.room_id AND c.created_at_ms = w.created_at_ms AND c.event_id = w.event_id\
             {}{} LIMIT ?",
            seek("room_id", " AND x.room_id <= ?"),
            seek("created_at_ms", " AND x.room_id <= ?"),
            seek("event_id", " AND x.room_id <= ?"),
            seek("room_id", step),
            seek("created_at_ms", step),
            seek("event_id", step),
            probe("retryable"),
            probe("delivering"),
        )
    );
    let (app, r7) = (Arg::from("live"), Arg::from("r7"));
    assert_eq!(
        bound.args,
        [
            &app, &r7, &app, &r7, &app, &r7, &app, &r7, &app, &r7, &app, &r7, &app
        ]
        .into_iter()
        .cloned()
        .chain([Arg::Int(4)])
        .collect::<Vec<_>>()
    );
    assert_placeholders(Backend::Sqlite, &bound);
    for walk in [RoomWalk::Head, RoomWalk::After("r7".into()), up_to.clone()] {
        for backend in BACKENDS {
            let statements = Statements::new(backend, &table());
            let bound = statements.claim_statement_by_room(&params, &lease, &walk, 4);
            assert_placeholders(backend, &bound);
            let select = statements.claim_query_walk(ClaimBranch::Pending, &params, 4, &walk);
            assert_placeholders(backend, &select);
            assert_eq!(select.args.last(), Some(&Arg::Int(4)));
            assert_eq!(
                select.sql.contains("x.room_id > ?") || select.sql.contains("x.room_id > $"),
                matches!(walk, RoomWalk::After(_)),
                "{backend:?} {walk:?}: {}",
                select.sql
            );
        }
    }
    // PostgreSQL claims and leases the heads in one statement.
    let pg = Statements::new(Backend::Postgres, &table());
    let leased = pg.claim_statement_by_room(&params, &lease, &up_to, 4);
    assert!(
        leased.sql.starts_with("UPDATE room_outbox SET "),
        "{}",
        leased.sql
    );
    assert!(
        leased.sql.contains("FROM unnest(ARRAY(WITH RECURSIVE walk"),
        "{}",
        leased.sql
    );
    assert!(
        leased
            .sql
            .contains(" FOR UPDATE SKIP LOCKED) c LIMIT $17)) WITH ORDINALITY"),
        "{}",
        leased.sql
    );
    assert!(
        leased
            .sql
            .contains("CROSS JOIN LATERAL (SELECT c.ctid AS ctid, c.* FROM room_outbox c")
    );
    // MariaDB: a loose index scan of the room index, the heads joined by their key.
    let mysql = Statements::new(Backend::MySql, &table());
    let select = mysql.claim_query_walk(ClaimBranch::Pending, &params, 4, &up_to);
    assert_eq!(
        &*select.sql,
        "SELECT c.event_id, c.event_type, c.room_id, c.envelope, c.created_at_ms, c.retry_count \
         FROM (SELECT x.room_id, MIN(x.created_at_ms) AS head_at FROM room_outbox x \
         FORCE INDEX (idx_room_outbox_room) WHERE x.app_code BETWEEN ? AND ? \
         AND x.status BETWEEN 'pending' AND 'pending' AND x.room_id <= ? \
         GROUP BY x.app_code, x.status, x.room_id) h JOIN room_outbox c FORCE INDEX (PRIMARY) \
         ON c.app_code = ? AND c.event_id = (SELECT MIN(y.event_id) FROM room_outbox y \
         FORCE INDEX (idx_room_outbox_room) WHERE y.app_code = ? AND y.status = 'pending' \
         AND y.room_id = h.room_id AND y.created_at_ms = h.head_at) WHERE c.status = 'pending' \
         AND NOT EXISTS (SELECT 1 FROM room_outbox p FORCE INDEX (idx_room_outbox_room) \
         WHERE p.app_code = c.app_code AND p.status = 'retryable' AND p.room_id = c.room_id \
         AND p.created_at_ms <= c.created_at_ms AND (p.created_at_ms < c.created_at_ms OR p.event_id < c.event_id)) \
         AND NOT EXISTS (SELECT 1 FROM room_outbox p FORCE INDEX (idx_room_outbox_room) \
         WHERE p.app_code = c.app_code AND p.status = 'delivering' AND p.room_id = c.room_id \
         AND p.created_at_ms <= c.created_at_ms AND (p.created_at_ms < c.created_at_ms OR p.event_id < c.event_id)) \
         LIMIT ? FOR UPDATE SKIP LOCKED"
    );
    assert_eq!(
        select.args,
        vec![app.clone(), app.clone(), r7, app.clone(), app, Arg::Int(4)]
    );
}
