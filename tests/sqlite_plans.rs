//! SQLite's side of `tests/stale_plans.rs`: every statement a host runs per batch (the partition
//! read, the mark) reads the rows it returns through an index (`EXPLAIN QUERY PLAN`), never a
//! SCAN of the table, over a table whose history far outnumbers its live rows; and a database
//! migrated by an early version (0001 only) with rows written the Go service's way migrates to
//! the current schema and its rows are read.

use crate::support;

use outboxd::record::now_ms;
use outboxd::store::internals::{
    Arg, Bound, MarkAt, mark_statements, migrations, partition_read_statement, sqlite_query,
};
use outboxd::store::{
    Backend, ClaimBatch, DEFAULT_TABLE, OutboxStore, PartitionFence, PartitionRead, PurgeStatus,
    TableName,
};
use sqlx::{AssertSqlSafe, Row};
use support::backlog::{APP, HISTORY, LATER, LIVE, NOW, ROOMS};
use support::{Bind, HandHost, RawInsert, RawPool, TestDb, all_delivered, mark_delivered};

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

/// The `EXPLAIN QUERY PLAN` lines (`detail` column) of `statement`, its arguments bound.
async fn plan(db: &TestDb, statement: Bound) -> Vec<String> {
    let sql = statement.sql.clone();
    sqlite_query(Bound {
        sql: format!("EXPLAIN QUERY PLAN {sql}").into(),
        args: statement.args,
    })
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

/// Host `h` of `APP`, by hand.
const HOST: HandHost<'static> = HandHost {
    app: APP,
    id: "h",
    lease_ms: 60_000,
};

/// The one partition of a SQLite table, owned by [`HOST`].
async fn own(store: &dyn OutboxStore) -> PartitionFence {
    let ownership = HOST.heartbeat(store).await;
    assert_eq!(ownership.owned.len(), 1, "SQLite: one partition");
    ownership.owned[0]
}

/// A read of up to `limit` rows of the partition `fence` by [`HOST`] at `now`.
fn reading(fence: PartitionFence, limit: u32, now: i64, per_room: bool) -> PartitionRead {
    HOST.read(vec![fence], limit, now, per_room)
}

/// Every step reading the outbox is an index SEARCH: never a SCAN of the table or of an index
/// (a SCAN of a co-routine or materialized subquery, the read's branches, reads what its SEARCH
/// found).
fn check_searches(name: &str, plan: &[String]) {
    let context = format!("{name}:\n  {}", plan.join("\n  "));
    assert!(
        plan.iter().any(|s| s.starts_with("SEARCH ")),
        "no index search\n{context}"
    );
    let subqueries: Vec<&str> = plan
        .iter()
        .filter_map(|s| {
            s.strip_prefix("CO-ROUTINE ")
                .or_else(|| s.strip_prefix("MATERIALIZE "))
        })
        .collect();
    for step in plan {
        let Some(scanned) = step.strip_prefix("SCAN ") else {
            continue;
        };
        let of_subquery = subqueries
            .iter()
            .any(|q| scanned.split(' ').next() == Some(*q));
        assert!(
            of_subquery || scanned == "CONSTANT ROW",
            "full scan\n{context}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_reads_and_marks_search_indexes_over_history() {
    let db = TestDb::new(Backend::Sqlite).await.expect("SQLite");
    let store = db.store_default().await;
    seed(&db).await;
    let table = TableName::default();
    let fence = own(&*store).await;
    for per_room in [false, true] {
        let read = partition_read_statement(
            Backend::Sqlite,
            &table,
            1,
            &reading(fence, 10, NOW, per_room),
        );
        check_searches(
            &format!("read (per_room: {per_room})"),
            &plan(&db, read).await,
        );
    }

    // The statements explained are the ones the store runs: a real read takes the due live rows
    // (pending, due retries, expired leases) in write order and leaves history, failed rows,
    // not-due retries and live leases alone.
    let batch = store
        .read_partitions(&reading(fence, 1000, NOW, false))
        .await
        .expect("read");
    let ids = event_ids(&batch);
    assert_eq!(ids.len() as i64, 3 * LIVE, "{ids:?}");
    assert!(
        ids.iter()
            .all(|id| id.starts_with('p') || id.starts_with("rd") || id.starts_with("dx")),
        "{ids:?}"
    );
    let marks = all_delivered(&batch);
    for (name, statement) in mark_statements(
        Backend::Sqlite,
        &table,
        &batch.lease,
        &marks,
        MarkAt::first(now_ms()),
    ) {
        check_searches(name, &plan(&db, statement).await);
    }
    let report = mark_delivered(&*store, &batch).await;
    assert_eq!(report.applied, ids.len() as u64);

    // Retention and `failed list` read the status index, which keeps every status.
    for status in [PurgeStatus::Delivered, PurgeStatus::Failed] {
        let (select, _) =
            outboxd::store::internals::purge_statement_texts(Backend::Sqlite, &table, status, 1);
        let args = vec![Arg::from(APP), Arg::Int(NOW), Arg::Int(NOW), Arg::Int(10)];
        let plan = plan(
            &db,
            Bound {
                sql: select.into(),
                args,
            },
        )
        .await;
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

/// A database migrated by an early version (0001 only, version 1 recorded) with rows written the
/// Go service's way: `migrate` applies every later migration once, drops the per-row claim's
/// indexes, and the rows are read in write order, per room too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_migrates_a_database_of_migration_0001() {
    let db = TestDb::new(Backend::Sqlite).await.expect("SQLite");
    let table = TableName::default();
    let all = migrations(Backend::Sqlite);
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
    assert!(index_entries(&db, &index("room")).await > 0, "0001 made it");

    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    let applied = store.migrate().await.expect("migrate");
    let expected: Vec<i64> = (2..=all.len() as i64).collect();
    assert_eq!(applied, expected);
    assert!(store.migrate().await.expect("migrate again").is_empty());
    for suffix in ["retry", "lease", "room"] {
        let (count,): (i64,) = sqlx::query_as("SELECT count(*) FROM sqlite_master WHERE name = ?")
            .bind(index(suffix))
            .fetch_one(pool(&db))
            .await
            .expect("sqlite_master");
        assert_eq!(count, 0, "{} is dropped", index(suffix));
    }
    let fence = own(&*store).await;
    let batch = store
        .read_partitions(&reading(fence, 100, now_ms(), true))
        .await
        .expect("read");
    let expected: Vec<String> = (0..10).map(|i| format!("go{i}")).collect();
    assert_eq!(event_ids(&batch), expected, "write order");
    store.close().await;
    db.cleanup().await;
}

/// The event ids of a read batch, in write order.
fn event_ids(batch: &ClaimBatch) -> Vec<&str> {
    batch
        .events
        .iter()
        .map(|claimed| claimed.event.event_id.as_str())
        .collect()
}
