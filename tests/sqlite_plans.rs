//! SQLite's side of `tests/explain.rs` and `tests/stale_plans.rs`: history stays out of the
//! claim indexes it does not belong in, every claim and mark statement reads the rows it returns
//! through an index (`EXPLAIN QUERY PLAN`), and migration 0002 adopts a database migrated before
//! it.
//!
//! Migration 0002 made `idx_<table>_retry`, `_lease` and `_room` partial (live statuses only).
//! SQLite uses a partial index only for a statement whose WHERE implies the index's, so a
//! statement written another way (e.g. `status IN (…)`) would silently fall back to another
//! index or a scan: the plans below catch that.

mod support;

use outboxd::record::now_ms;
use outboxd::store::internals::{Arg, Bound, ClaimBranch, ClaimStatements, RoomWalk, migrations};
use outboxd::store::{
    Backend, ClaimBatch, ClaimParams, DEFAULT_TABLE, DeliveryOrder, Mark, MarkParams,
    MigrateOptions, PurgeStatus, TableName,
};
use sqlx::{AssertSqlSafe, Row};
use support::backlog::{APP, HISTORY, LATER, LIVE, NOW, ROOMS};
use support::{Bind, RawInsert, RawPool, TestDb};

fn pool(db: &TestDb) -> &sqlx::SqlitePool {
    match &db.pool {
        RawPool::Sqlite(pool) => pool,
        _ => unreachable!("SQLite test database"),
    }
}

/// `HISTORY` delivered rows (rooms `room0..room99`), then `LIVE` rows each of pending, due
/// retryable, not-due retryable, expired delivering, live delivering and failed, in rooms
/// `room0..room4`, created after the history; then `ANALYZE`.
async fn seed(db: &TestDb) {
    let envelope = support::record(APP, "h", "room0", 0).encoded_envelope();
    let sql = format!(
        "WITH RECURSIVE s(n) AS (SELECT 0 UNION ALL SELECT n + 1 FROM s WHERE n + 1 < {HISTORY}) \
         INSERT INTO {DEFAULT_TABLE} (app_code, event_id, event_type, room_id, status, envelope, \
         created_at_ms, updated_at_ms) \
         SELECT '{APP}', 'h' || n, 'History', 'room' || (n % {ROOMS}), 'delivered', ?, n, n FROM s"
    );
    assert_eq!(
        db.execute(&sql, &[Bind::Bytes(envelope)]).await,
        HISTORY as u64
    );
    let live = RawInsert::live_rows_of_each_kind(APP, LIVE, HISTORY, LATER);
    db.insert_raw(DEFAULT_TABLE, &live).await;
    db.analyze(DEFAULT_TABLE).await;
}

/// The `EXPLAIN QUERY PLAN` lines (`detail` column) of `sql` with `args` bound.
async fn plan(db: &TestDb, sql: &str, args: &[Arg]) -> Vec<String> {
    let mut query = sqlx::query(AssertSqlSafe(format!("EXPLAIN QUERY PLAN {sql}")));
    for arg in args {
        query = match arg {
            Arg::Text(v) => query.bind(v.clone()),
            Arg::Int(v) => query.bind(*v),
            Arg::Bytes(v) => query.bind(v.clone()),
            // Only a dialect with array parameters (PostgreSQL) writes one.
            Arg::TextList(v) => panic!("SQLite statement with a list bound as an array: {v:?}"),
        };
    }
    query
        .fetch_all(pool(db))
        .await
        .unwrap_or_else(|e| panic!("EXPLAIN QUERY PLAN {sql}: {e}"))
        .iter()
        .map(|row| row.get::<String, _>("detail"))
        .collect()
}

/// Index entries (cells of its b-tree pages) of index `name`, from the `dbstat` table.
async fn index_entries(db: &TestDb, name: &str) -> i64 {
    sqlx::query("SELECT COALESCE(SUM(ncell), 0) FROM dbstat WHERE name = ?")
        .bind(name)
        .fetch_one(pool(db))
        .await
        .expect("dbstat")
        .get(0)
}

fn index(suffix: &str) -> String {
    format!("idx_{DEFAULT_TABLE}_{suffix}")
}

fn branch_index(branch: ClaimBranch) -> String {
    index(match branch {
        ClaimBranch::Pending => "pending",
        ClaimBranch::Retryable => "retry",
        ClaimBranch::ExpiredLease => "lease",
    })
}

/// Every step that reads the outbox is an index SEARCH (never a SCAN of the table or of a whole
/// index), the claim's (alias `c`) on the branch's index, each per-room probe's (alias `p`) on
/// the room index with the status in its key. The pending branch of a per-room claim walks the
/// room index instead (alias `x`: each room's head, one seek per room) and reads each head (`c`)
/// by its whole key, probing the other two active statuses.
fn check_claim(branch: ClaimBranch, ordering: DeliveryOrder, plan: &[String]) {
    let context = format!("{branch:?}/{ordering:?}:\n  {}", plan.join("\n  "));
    let room_heads = (branch, ordering) == (ClaimBranch::Pending, DeliveryOrder::PerRoom);
    let mut claim = false;
    let (mut probes, mut seeks) = (0, 0);
    for step in plan {
        // The room walk's own rows (`w`, a constant row to start it) are no read of the outbox.
        let walk = ["SCAN w", "SCAN CONSTANT ROW"].contains(&step.as_str());
        assert!(!step.starts_with("SCAN ") || walk, "full scan\n{context}");
        if step.starts_with("SEARCH c ") {
            claim = true;
            // A head by its whole key: the primary key's, or the room index's.
            let claim_index = if room_heads {
                vec![
                    format!("sqlite_autoindex_{DEFAULT_TABLE}_1 (app_code=? AND event_id=?)"),
                    format!(
                        "{} (app_code=? AND status=? AND room_id=? AND created_at_ms=? AND event_id=?)",
                        index("room")
                    ),
                ]
            } else {
                vec![format!("{} (", branch_index(branch))]
            };
            assert!(
                claim_index
                    .iter()
                    .any(|index| step.contains(&format!("INDEX {index}"))),
                "claim index\n{context}"
            );
        } else if step.starts_with("SEARCH x ") {
            seeks += 1;
            assert!(
                step.contains(&format!("INDEX {} (app_code=? AND status=?", index("room"))),
                "room head\n{context}"
            );
        } else if step.starts_with("SEARCH p ") {
            probes += 1;
            assert!(
                step.contains(&format!(
                    "INDEX {} (app_code=? AND status=? AND room_id=?",
                    index("room")
                )),
                "room probe\n{context}"
            );
        }
    }
    assert!(claim, "no step reads the outbox\n{context}");
    let expected = match ordering {
        DeliveryOrder::PerRoom if room_heads => 2,
        DeliveryOrder::PerRoom => 3,
        DeliveryOrder::None => 0,
    };
    assert_eq!(probes, expected, "room probes\n{context}");
    assert_eq!(seeks > 0, room_heads, "room heads\n{context}");
}

/// A statement reaching rows by key: a SEARCH of the primary key or of the lease index with the
/// lease in its key, never a SCAN.
fn check_by_key(name: &str, plan: &[String]) {
    let context = format!("{name}:\n  {}", plan.join("\n  "));
    assert!(
        !plan.iter().any(|s| s.starts_with("SCAN ")),
        "full scan\n{context}"
    );
    assert!(
        plan.iter().any(|s| s.starts_with("SEARCH ")
            && (s.contains(&format!(
                "sqlite_autoindex_{DEFAULT_TABLE}_1 (app_code=? AND event_id=?)"
            )) || s.contains(&format!(
                "{} (app_code=? AND status=? AND lock_until_ms=?",
                index("lease")
            )))),
        "not by key\n{context}"
    );
}

/// A claim of 100 rows for the seeded tenant at `NOW` with `ordering`.
fn claim_params(ordering: DeliveryOrder) -> ClaimParams {
    ClaimParams {
        app_code: APP.into(),
        worker_id: "w-new".into(),
        limit: 100,
        lease_ms: 1_000,
        now_ms: NOW,
        max_attempts: 100,
        ordering,
        scan_due: true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_history_stays_out_of_the_live_indexes_and_plans_use_them() {
    let db = TestDb::new(Backend::Sqlite).await.expect("SQLite");
    let store = db.store_default().await;
    seed(&db).await;

    // The history is in the table, its primary key and the pending/status index (retention and
    // `failed list` read it there); the other three claim indexes hold the live rows only.
    assert_eq!(
        index_entries(&db, &index("room")).await,
        5 * LIVE, // every live kind but failed
        "room index"
    );
    assert_eq!(index_entries(&db, &index("retry")).await, 2 * LIVE);
    assert_eq!(index_entries(&db, &index("lease")).await, 2 * LIVE);
    assert!(index_entries(&db, &index("pending")).await > HISTORY);

    let statements = ClaimStatements::new(Backend::Sqlite, &TableName::default());
    for ordering in [DeliveryOrder::None, DeliveryOrder::PerRoom] {
        for branch in ClaimBranch::ALL {
            let mut params = claim_params(ordering);
            params.limit = 10;
            let all = RoomWalk::Head;
            let query = statements.claim_query_walk(branch, &params, 10, &all);
            assert_eq!(&*query.sql, statements.claim_statement(branch, ordering));
            let plan = plan(&db, &query.sql, &query.args).await;
            check_claim(branch, ordering, &plan);
        }
    }

    // The statements explained are the ones the store runs: a real claim takes the live rows in
    // branch order, per room too, and leaves history, failed rows, not-due retries and live
    // leases alone.
    let params = claim_params;
    let per_room = store
        .claim(&params(DeliveryOrder::PerRoom))
        .await
        .expect("claim");
    let heads = event_ids(&per_room);
    // Kinds are created in the order p, rd, rn, dx, dl, f: each room's head is its first
    // pending row, and every later live row waits behind it.
    assert_eq!(heads, ["p00", "p01", "p02", "p03", "p04"], "per-room heads");

    let batch = store
        .claim(&params(DeliveryOrder::None))
        .await
        .expect("claim");
    let ids = event_ids(&batch);
    assert_eq!(ids.len() as i64, 3 * LIVE - 5, "{ids:?}");
    assert!(
        ids[..(LIVE - 5) as usize]
            .iter()
            .all(|id| id.starts_with('p')),
        "{ids:?}"
    );
    assert!(
        ids[(LIVE - 5) as usize..]
            .iter()
            .all(|id| id.starts_with("rd") || id.starts_with("dx")),
        "{ids:?}"
    );

    let now = now_ms();
    for (name, Bound { sql, args }) in statements.follow_up_statements(&batch.lease, now, &ids) {
        check_by_key(name, &plan(&db, &sql, &args).await);
    }
    let marks: Vec<Mark> = ids.iter().map(|id| Mark::delivered(*id)).collect();
    let report = store
        .mark(&MarkParams {
            lease: &batch.lease,
            marks: &marks,
            now_ms: now,
        })
        .await
        .expect("mark");
    assert_eq!(report.applied, ids.len() as u64);
    // Delivered rows leave the live indexes.
    assert_eq!(index_entries(&db, &index("lease")).await, LIVE + 5);
    assert_eq!(index_entries(&db, &index("retry")).await, LIVE);

    // Retention and `failed list` still read the status index, which keeps every status.
    for status in [PurgeStatus::Delivered, PurgeStatus::Failed] {
        let (select, _) = outboxd::store::internals::purge_statement_texts(
            Backend::Sqlite,
            &TableName::default(),
            status,
            1,
        );
        let args = [Arg::from(APP), Arg::Int(NOW), Arg::Int(NOW), Arg::Int(10)];
        let plan = plan(&db, &select, &args).await;
        assert!(
            plan.iter().any(|s| s.starts_with("SEARCH ")
                && s.contains(&format!(
                    "INDEX {} (app_code=? AND status=? AND created_at_ms<?)",
                    index("pending")
                ))),
            "purge {status:?}: {plan:?}"
        );
    }
    store.close().await;
    db.cleanup().await;
}

/// A database migrated before 0002 (0001's full indexes, version 1 recorded) with rows written
/// the Go service's way: `migrate` applies 0002 once, the indexes become partial, and the rows
/// are claimed as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_migration_0002_adopts_a_database_migrated_before_it() {
    let db = TestDb::new(Backend::Sqlite).await.expect("SQLite");
    let table = TableName::default();
    let all = migrations(Backend::Sqlite);
    assert!(all.len() >= 2 && all[1].name == "0002_partial_indexes");
    let old = all[0].sql(&table);
    sqlx::raw_sql(AssertSqlSafe(format!(
        "{old}; CREATE TABLE outboxd_migrations (table_name VARCHAR(64) NOT NULL, \
         version BIGINT NOT NULL, applied_at_ms BIGINT NOT NULL, PRIMARY KEY (table_name, version)); \
         INSERT INTO outboxd_migrations VALUES ('{DEFAULT_TABLE}', 1, 0)"
    )))
    .execute(pool(&db))
    .await
    .expect("migration 0001 by hand");
    let rows: Vec<RawInsert> = (0..10)
        .map(|i| RawInsert::pending(APP, &format!("go{i}"), &format!("room{}", i % 2), 100 + i))
        .chain((0..10).map(|i| {
            RawInsert::pending(APP, &format!("old{i}"), "room0", i).with_status("delivered")
        }))
        .collect();
    db.insert_raw(DEFAULT_TABLE, &rows).await;
    assert_eq!(
        index_entries(&db, &index("room")).await,
        20,
        "0001: every row"
    );

    // Migrated with per-room ordering: 0003 drops the room index, `migrate` creates it again
    // as 0002 made it.
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    let per_room = MigrateOptions { room_index: true };
    let applied = store.migrate_with(&per_room).await.expect("migrate");
    let expected: Vec<i64> = (2..=all.len() as i64).collect();
    assert_eq!(applied, expected);
    assert!(
        store
            .migrate_with(&per_room)
            .await
            .expect("migrate again")
            .is_empty()
    );
    for suffix in ["retry", "lease", "room"] {
        let (sql,): (String,) = sqlx::query_as("SELECT sql FROM sqlite_master WHERE name = ?")
            .bind(index(suffix))
            .fetch_one(pool(&db))
            .await
            .expect("index");
        assert!(sql.contains(" WHERE status = "), "{sql}");
    }
    assert_eq!(
        index_entries(&db, &index("room")).await,
        10,
        "0002: live rows only"
    );

    let batch = store
        .claim(&ClaimParams {
            app_code: APP.into(),
            worker_id: "w".into(),
            limit: 100,
            lease_ms: 60_000,
            now_ms: now_ms(),
            max_attempts: 5,
            ordering: DeliveryOrder::PerRoom,
            scan_due: true,
        })
        .await
        .expect("claim");
    let ids = event_ids(&batch);
    assert_eq!(ids, ["go0", "go1"], "one head per room");
    store.close().await;
    db.cleanup().await;
}

/// The event ids of a claimed batch, in claim order.
fn event_ids(batch: &ClaimBatch) -> Vec<&str> {
    batch
        .events
        .iter()
        .map(|claimed| claimed.event.event_id.as_str())
        .collect()
}
