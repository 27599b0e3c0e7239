//! Plans that do not depend on fresh statistics: `migrate` on an empty database, then 200k rows
//! written by producers and never analyzed (PostgreSQL here runs with autovacuum off, the
//! MariaDB table with `STATS_AUTO_RECALC = 0`; in
//! production the same holds for any backlog that arrives between two autoanalyze runs or right
//! after a deploy). `EXPLAIN` of every statement a claim and a mark run (the store's own texts:
//! [`ClaimStatements::claim_statement`] and [`ClaimStatements::follow_up_statements`]) must reach the rows
//! through an index on its full key, never through the tenant's whole key range:
//!
//! - PostgreSQL: no `Seq Scan`; a scan of the primary key has `event_id` in its `Index Cond`
//!   (not `app_code` alone, the plan that made a lease UPDATE take 4.9 s); a scan of a claim
//!   index has `status` in it; a `Tid Scan` reaches rows by address;
//! - MariaDB: every step is an index `range`/`ref`/`eq_ref`, and a primary-key step uses both of
//!   its columns (`key_len` of the full key).
//!
//! No step may estimate more rows than the statement touches (≤ `2 × LIMIT`; on MariaDB for the
//! non-claim statements only, since its `rows` of a claim ignores the LIMIT), the tenant's 200k
//! rows being the failure this test exists for. A per-room claim probes the room index once per
//! active status (on MariaDB only because the probe names it, `FORCE INDEX`). The claims and marks are then run for real
//! through the store, to show the statements explained are the ones that work.

mod support;

use outboxd::record::now_ms;
use outboxd::store::internals::{
    Arg, Bound, ClaimBranch, ClaimPosition, ClaimStatements, PositionSide, RoomWalk,
};
use outboxd::store::{
    Backend, ClaimParams, DEFAULT_TABLE, DeliveryOrder, Mark, MarkParams, TableName,
};
use support::{Bind, PlanStep, TestDb};

/// Rows loaded after `migrate`, never analyzed.
const ROWS: i64 = 200_000;
/// Tenant.
const APP: &str = "app_a";
/// Rows per claim (the default batch size).
const LIMIT: i64 = 500;

/// Loads `ROWS` pending rows (rooms `room0..room999`) in one INSERT … SELECT, the same SQL on both
/// databases, and no ANALYZE.
async fn load_backlog(db: &TestDb) {
    // Empty app_code / event_id / room_id / type: the row's columns fill them in at claim.
    let envelope = prost::Message::encode_to_vec(&outboxd::envelope::EventEnvelope {
        body: b"gift".to_vec(),
        ..Default::default()
    });
    let digits = "(SELECT 0 AS d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 \
                  UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 \
                  UNION ALL SELECT 8 UNION ALL SELECT 9)";
    let sql = format!(
        "INSERT INTO {DEFAULT_TABLE} (app_code, event_id, event_type, room_id, status, envelope, \
         created_at_ms, updated_at_ms) \
         SELECT '{APP}', CONCAT('e', n), 'RoomGiftSent', CONCAT('room', n % 1000), 'pending', {ph}, n, n \
         FROM (SELECT a.d + 10 * b.d + 100 * c.d + 1000 * e.d + 10000 * f.d + 100000 * g.d AS n \
               FROM {digits} a CROSS JOIN {digits} b CROSS JOIN {digits} c CROSS JOIN {digits} e \
               CROSS JOIN {digits} f CROSS JOIN {digits} g) s \
         WHERE n < {ROWS}",
        ph = db.placeholder(1),
    );
    assert_eq!(
        db.execute(&sql, &[Bind::Bytes(envelope)]).await,
        ROWS as u64
    );
}

fn binds(args: &[Arg]) -> Vec<Bind> {
    args.iter().map(Bind::from_arg).collect()
}

fn show(plan: &[PlanStep]) -> String {
    plan.iter()
        .map(|s| format!("  {}", s.text.replace('\n', "\n    ")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The binds of one claim branch statement, in the order [`ClaimStatements::claim_statement`] documents.
fn claim_binds(statements: &ClaimStatements, branch: ClaimBranch, now: i64) -> Vec<Bind> {
    let mut binds = Vec::new();
    if statements.leases_in_claim() {
        binds.extend([
            Bind::Str("w-explain".into()),
            Bind::I64(now + 60_000),
            Bind::I64(now),
        ]);
    }
    binds.push(Bind::Str(APP.into()));
    if branch != ClaimBranch::Pending {
        binds.push(Bind::I64(now));
    }
    binds.push(Bind::I64(LIMIT));
    binds
}

/// The primary key's full length in MariaDB's `key_len`: app_code VARCHAR(64) + event_id
/// VARCHAR(128), utf8mb4 (4 bytes a character) plus 2 length bytes each.
const MYSQL_FULL_PRIMARY_KEY_LEN: &str = "772";

/// `claim`: the statement is a claim branch (its LIMIT bounds what it reads; MariaDB's `rows`
/// estimate ignores the LIMIT, so there only its index is checked).
fn check(backend: Backend, name: &str, claim: bool, plan: &[PlanStep]) {
    let context = format!("{backend:?} {name}:\n{}", show(plan));
    let max_rows = 2.0 * LIMIT as f64;
    match backend {
        Backend::Postgres => {
            for step in plan.iter().filter(|s| s.access.contains("Scan")) {
                let access = step.access.as_str();
                assert!(access != "Seq Scan", "sequential scan\n{context}");
                let walk_steps = ["CTE Scan", "WorkTable Scan", "Subquery Scan"];
                if ["Tid Scan", "Function Scan"].contains(&access) || walk_steps.contains(&access) {
                    continue;
                }
                if access == "Bitmap Heap Scan" {
                    // Reads what its Bitmap Index Scan child found; that child is checked.
                    continue;
                }
                let index = step.index.as_deref().unwrap_or_else(|| {
                    panic!("{access} without an index\n{context}");
                });
                let cond =
                    step.text.split("Index Cond: ").nth(1).unwrap_or_else(|| {
                        panic!("{index} scanned without a condition\n{context}")
                    });
                let cond = cond.lines().next().unwrap_or("");
                let wanted = if index.ends_with("_pkey") {
                    "event_id"
                } else {
                    "status"
                };
                assert!(
                    cond.contains("app_code") && cond.contains(wanted),
                    "{index} is read by {cond}, not by its full key (app_code and {wanted})\n{context}"
                );
                let rows = step.rows.unwrap_or(f64::INFINITY);
                assert!(rows <= max_rows, "{index} estimates {rows} rows\n{context}");
            }
        }
        Backend::MySql => {
            let tables = plan.iter().filter(|s| s.table.is_some());
            // A derived table (the per-room claim's room heads) is checked in the steps filling it.
            for step in tables.filter(|s| !s.table.as_deref().unwrap_or("").starts_with('<')) {
                assert!(
                    ["range", "ref", "eq_ref"].contains(&step.access.as_str()),
                    "access {} is not an index range/ref\n{context}",
                    step.access
                );
                let index = step.index.as_deref().unwrap_or("");
                if index == "PRIMARY" {
                    assert!(
                        step.text
                            .contains(&format!("key_len={MYSQL_FULL_PRIMARY_KEY_LEN}")),
                        "the primary key is not used on both columns\n{context}"
                    );
                } else {
                    assert!(
                        index.starts_with(&format!("idx_{DEFAULT_TABLE}_")),
                        "read through {index:?}, not a claim index\n{context}"
                    );
                }
                if !claim {
                    let rows = step.rows.unwrap_or(f64::INFINITY);
                    assert!(rows <= max_rows, "estimates {rows} rows\n{context}");
                }
            }
        }
        Backend::Sqlite => unreachable!("server databases only"),
    }
}

/// MariaDB's `key_len` of `idx_<table>_pending` on all four columns: app_code VARCHAR(64) and
/// status VARCHAR(16) and event_id VARCHAR(128), utf8mb4 plus 2 length bytes each, and the
/// BIGINT created_at_ms.
const MYSQL_FULL_PENDING_KEY_LEN: &str = "846";

/// The read of the pending index from a claim position bounds both columns of the claim order:
/// PostgreSQL's `Index Cond` names `event_id`; MariaDB's range uses the whole key.
fn check_seeks_the_whole_pending_key(backend: Backend, plan: &[PlanStep]) {
    let pending = format!("idx_{DEFAULT_TABLE}_pending");
    let step = plan
        .iter()
        .find(|s| s.index.as_deref() == Some(pending.as_str()))
        .unwrap_or_else(|| panic!("{backend:?}: {pending} not read:\n{}", show(plan)));
    let seeks = match backend {
        Backend::Postgres => step
            .text
            .split("Index Cond: ")
            .nth(1)
            .and_then(|cond| cond.lines().next())
            .is_some_and(|cond| cond.contains("created_at_ms") && cond.contains("event_id")),
        _ => step
            .text
            .contains(&format!("key_len={MYSQL_FULL_PENDING_KEY_LEN}")),
    };
    assert!(
        seeks,
        "{backend:?}: the claim position does not bound {pending} on (created_at_ms, \
         event_id):\n{}",
        show(plan)
    );
}

async fn claim_and_mark_plans_survive_stale_statistics(backend: Backend) {
    let Some(db) = TestDb::new_server_only(backend).await else {
        return;
    };
    let store = db.store_default().await;
    if backend == Backend::MySql {
        // As PostgreSQL's autovacuum is off here: InnoDB's background recalculation after the
        // load would otherwise race with the EXPLAINs (after migrate's ALTER TABLE it often does
        // not come at all, and the plans must not depend on it).
        db.execute(
            &format!("ALTER TABLE {DEFAULT_TABLE} STATS_AUTO_RECALC = 0"),
            &[],
        )
        .await;
    }
    let started = std::time::Instant::now();
    load_backlog(&db).await;
    eprintln!(
        "{backend:?}: loaded {ROWS} rows in {:?}, not analyzed",
        started.elapsed()
    );
    let statements = ClaimStatements::new(backend, &TableName::default());
    let now = now_ms();

    // A real claim first, so the lease the follow-up statements are fenced on exists.
    let params = ClaimParams {
        app_code: APP.into(),
        worker_id: "w-real".into(),
        limit: LIMIT as u32,
        lease_ms: 60_000,
        now_ms: now,
        max_attempts: 20,
        ordering: DeliveryOrder::None,
        scan_due: true,
    };
    let batch = store.claim(&params).await.expect("claim");
    assert_eq!(batch.events.len() as i64, LIMIT);
    let ids: Vec<&str> = batch
        .events
        .iter()
        .map(|e| e.event.event_id.as_str())
        .collect();

    // The pending branch of a per-room claim reads room heads, one seek of the room index per
    // room (MariaDB: a loose index scan), from the first room or either side of a room cursor.
    let mut per_room = params.clone();
    per_room.ordering = DeliveryOrder::PerRoom;
    for walk in [
        RoomWalk::Head,
        RoomWalk::After("room500".into()),
        RoomWalk::UpTo("room500".into()),
    ] {
        let Bound { sql, args } =
            statements.claim_statement_by_room(&per_room, &batch.lease, &walk, LIMIT as usize);
        let plan = db.explain(&sql, &binds(&args)).await;
        let name = format!("claim Pending/PerRoom {walk:?}");
        check(backend, &name, true, &plan);
        let room = format!("idx_{DEFAULT_TABLE}_room");
        let heads_seek = plan.iter().any(|s| {
            s.index.as_deref() == Some(room.as_str())
                && match backend {
                    Backend::MySql => s.text.contains("Using index for group-by"),
                    _ => s.access == "Index Only Scan",
                }
        });
        assert!(
            heads_seek,
            "{backend:?} {name} does not seek room heads in {room}:\n{}",
            show(&plan)
        );
    }
    for ordering in [DeliveryOrder::None, DeliveryOrder::PerRoom] {
        for branch in ClaimBranch::ALL {
            if (branch, ordering) == (ClaimBranch::Pending, DeliveryOrder::PerRoom) {
                continue; // the room heads, above
            }
            let sql = statements.claim_statement(branch, ordering);
            let plan = db
                .explain(sql, &claim_binds(&statements, branch, now))
                .await;
            check(
                backend,
                &format!("claim {branch:?}/{ordering:?}"),
                true,
                &plan,
            );
            if ordering == DeliveryOrder::PerRoom {
                // One probe of the room index per active status, whatever the (stale)
                // statistics say: the primary key's `app_code` prefix is a tenant's backlog.
                let room = format!("idx_{DEFAULT_TABLE}_room");
                assert_eq!(
                    plan.iter()
                        .filter(|s| s.index.as_deref() == Some(room.as_str()))
                        .count(),
                    3,
                    "{backend:?} claim {branch:?}/PerRoom does not probe {room}:\n{}",
                    show(&plan)
                );
            }
        }
    }
    // The pending branch read from a claim position (PostgreSQL and MariaDB remember one, so that
    // claims skip what earlier claims left in the pending index): a seek on the index's full key,
    // `(created_at_ms, event_id)` after `status`, else a backlog written in one millisecond is
    // read from its head.
    let position = ClaimPosition {
        created_at_ms: ROWS / 2,
        event_id: format!("e{}", ROWS / 2),
    };
    for side in PositionSide::BOTH {
        let Bound { sql, args } = statements.claim_statement_by_position(
            &params,
            &batch.lease,
            &position,
            side,
            LIMIT as usize,
        );
        let plan = db.explain(&sql, &binds(&args)).await;
        check(
            backend,
            &format!("claim Pending {side:?} a position"),
            true,
            &plan,
        );
        check_seeks_the_whole_pending_key(backend, &plan);
    }
    for (name, Bound { sql, args }) in statements.follow_up_statements(&batch.lease, now, &ids) {
        let plan = db.explain(&sql, &binds(&args)).await;
        check(backend, name, false, &plan);
    }
    // The held mode's mark (worker.mode = "held"), at addresses of the shape a held claim reads.
    let addresses: Vec<String> = (1..=ids.len()).map(|i| format!("(0,{i})")).collect();
    let addresses: Vec<&str> = addresses.iter().map(String::as_str).collect();
    let Bound { sql, args } = statements.held_mark_statement(APP, "w-held", now, &ids, &addresses);
    let plan = db.explain(&sql, &binds(&args)).await;
    check(backend, "held mark", false, &plan);

    // The statements explained run: the claimed batch marks, and claims go on in order.
    let marks: Vec<Mark> = ids.iter().map(|id| Mark::delivered(*id)).collect();
    let report = store
        .mark(&MarkParams {
            lease: &batch.lease,
            marks: &marks,
            now_ms: now_ms(),
        })
        .await
        .expect("mark");
    assert_eq!(report.applied, LIMIT as u64);
    assert!(report.stale.is_empty());
    let next = store
        .claim(&ClaimParams {
            app_code: APP.into(),
            worker_id: "w-next".into(),
            limit: 3,
            lease_ms: 60_000,
            now_ms: now_ms(),
            max_attempts: 20,
            ordering: DeliveryOrder::None,
            scan_due: true,
        })
        .await
        .expect("second claim");
    let next_ids: Vec<&str> = next
        .events
        .iter()
        .map(|e| e.event.event_id.as_str())
        .collect();
    assert_eq!(next_ids, ["e500", "e501", "e502"]);
    store.close().await;
    db.cleanup().await;
}

support::per_backend!([mysql, postgres] => claim_and_mark_plans_survive_stale_statistics);

/// Rooms of [`mariadb_per_room_claims_stay_loose_scans_claim_after_claim`]'s backlog.
const LOOSE_ROOMS: i64 = 100;
/// Its pending rows (1,000 per room).
const LOOSE_ROWS: i64 = 100_000;

/// MariaDB plans the room heads' loose index scan (one seek per room) when a statement is
/// prepared; a connection that runs the same prepared statement again after the table changed
/// plans a range scan of every pending entry of the tenant instead (at a million pending rows,
/// ~1 s a claim instead of ~10 ms: the per-room `make chaos` delivered 157 events/s). Per-room
/// claims through the store, each followed by its mark, must each read a number of index entries
/// bounded by the rooms, not by the backlog: `Handler_read_next` of a private server, whose
/// counters count this test alone.
#[tokio::test]
async fn mariadb_per_room_claims_stay_loose_scans_claim_after_claim() {
    use sqlx::{Connection, Executor};
    use support::private_server::{Kind, PrivateServer};

    let Some(server) = PrivateServer::start(Kind::MariaDb).await else {
        return;
    };
    let options = outboxd::store::ConnectOptions::new(server.url());
    let store = outboxd::store::connect(&options).await.expect("connect");
    store
        .migrate_with(&outboxd::store::MigrateOptions { room_index: true })
        .await
        .expect("migrate with the room index");
    let envelope = prost::Message::encode_to_vec(&outboxd::envelope::EventEnvelope {
        body: b"gift".to_vec(),
        ..Default::default()
    });
    let mut conn = sqlx::MySqlConnection::connect(&server.url())
        .await
        .expect("connect");
    let inserted = sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {DEFAULT_TABLE} (app_code, event_id, event_type, room_id, status, envelope, \
         created_at_ms, updated_at_ms) \
         SELECT '{APP}', CONCAT('e', LPAD(seq, 7, '0')), 'RoomGiftSent', \
         CONCAT('room', seq % {LOOSE_ROOMS}), 'pending', ?, seq, seq \
         FROM seq_1_to_{LOOSE_ROWS}"
    )))
    .bind(envelope)
    .execute(&mut conn)
    .await
    .expect("load the backlog");
    assert_eq!(inserted.rows_affected(), LOOSE_ROWS as u64);
    conn.execute(sqlx::AssertSqlSafe(format!(
        "ANALYZE TABLE {DEFAULT_TABLE}"
    )))
    .await
    .expect("analyze");

    for round in 0..6 {
        let before = handler_read_next(&mut conn).await;
        let params = ClaimParams {
            app_code: APP.into(),
            worker_id: format!("w-{round}"),
            limit: 40,
            lease_ms: 60_000,
            now_ms: now_ms(),
            max_attempts: 20,
            ordering: DeliveryOrder::PerRoom,
            scan_due: false,
        };
        let batch = store.claim(&params).await.expect("claim");
        assert_eq!(batch.events.len(), 40, "round {round}: one head per room");
        let marks: Vec<Mark> = batch
            .events
            .iter()
            .map(|e| Mark::delivered(e.event.event_id.as_str()))
            .collect();
        let report = store
            .mark(&MarkParams {
                lease: &batch.lease,
                marks: &marks,
                now_ms: now_ms(),
            })
            .await
            .expect("mark");
        assert_eq!(report.applied, 40);
        let read = handler_read_next(&mut conn).await - before;
        eprintln!("round {round}: {read} index entries read");
        // A loose scan reads a few entries per room; the range scan reads the backlog.
        assert!(
            read < 20 * LOOSE_ROOMS as u64,
            "round {round}: a per-room claim and its mark read {read} index entries \
             ({LOOSE_ROWS} pending rows over {LOOSE_ROOMS} rooms)"
        );
    }
    store.close().await;
    conn.close().await.expect("close");
}

/// The server's `Handler_read_next`: index entries read in index order since it started.
async fn handler_read_next(conn: &mut sqlx::MySqlConnection) -> u64 {
    let (_, value): (String, String) =
        sqlx::query_as("SHOW GLOBAL STATUS LIKE 'Handler_read_next'")
            .fetch_one(conn)
            .await
            .expect("handler counters");
    value.parse().expect("a count")
}
