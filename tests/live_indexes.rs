//! Online migrations on live tables. PostgreSQL: a table of the per-row claim's era (its retry
//! and lease indexes, no partitions) gets the partition index built concurrently while producers
//! write (migration 0007), the per-row claim's indexes dropped concurrently (0008) and the status
//! index replaced by one of finished rows (0010); an
//! interrupted build is finished by the next `migrate`; two `migrate` runs at once apply each
//! migration once; a change of partition count cut short is finished by running it again.
//! MariaDB: the status index replaced by the failed-apart index (0007) while producers write, on
//! a table with rows in every state; a change of partition count cut short is finished by
//! running it again. PostgreSQL and SQLite: a partial index of the required index's columns
//! under another name does not stand in for it.

use crate::support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use outboxd::store::{
    Backend, CountsParams, DEFAULT_TABLE, FailedFilter, ListFailedParams, OutboxStore, TableName,
};
use sqlx::{Connection, Executor, PgConnection};
use support::{Bind, HandHost, RawInsert, TestDb, record, wait_until};

/// Tenant.
const APP: &str = "app_a";
/// Events delivered per run.
const EVENTS: usize = 5_000;
/// Rows per read (a default batch).
const BATCH: u32 = 500;

/// The predicate of `index` on `table` (`None`: no such index, or a whole one).
async fn predicate(db: &TestDb, index: &str) -> Option<String> {
    let rows = db
        .query_strings(
            "SELECT pg_get_expr(i.indpred, i.indrelid) FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relname = $1 \
             AND i.indpred IS NOT NULL",
            &[Bind::Str(index.into())],
        )
        .await;
    rows.into_iter().next()
}

/// The phase of a concurrent index build waiting for older transactions' snapshots to end.
const WAITING_FOR_SNAPSHOTS: &str = "waiting for old snapshots";

/// Longest wait for anything that should happen.
const DEADLINE: Duration = Duration::from_secs(10);

/// The index builds on the outbox table in progress now (PostgreSQL's
/// `pg_stat_progress_create_index`), as `<index>: <phase>`.
async fn builds_in_progress(db: &TestDb) -> Vec<String> {
    db.query_strings(
        "SELECT CAST(CAST(index_relid AS regclass) AS TEXT) || ': ' || phase \
         FROM pg_stat_progress_create_index \
         WHERE datname = current_database() AND relid = CAST($1 AS regclass) ORDER BY 1",
        &[Bind::Str(DEFAULT_TABLE.into())],
    )
    .await
}

/// Host `h1` of `APP`, by hand (a 30 s lease).
const HOST: HandHost<'static> = HandHost {
    app: APP,
    id: "h1",
    lease_ms: 30_000,
};

/// Enqueues `EVENTS` events and delivers them.
async fn deliver_all(store: &Arc<dyn OutboxStore>) {
    let records: Vec<_> = (0..EVENTS)
        .map(|i| {
            record(
                APP,
                &format!("e{i:05}"),
                &format!("room{}", i % 50),
                i as i64,
            )
        })
        .collect();
    for chunk in records.chunks(1_000) {
        store.enqueue(chunk).await.unwrap();
    }
    assert_eq!(HOST.deliver_due(&**store, BATCH).await, EVENTS as u64);
}

/// A table of the per-row claim's era (migrations up to 0006: its retry and lease indexes, no
/// partition index) with rows in it: `migrate` builds the partition index concurrently while
/// another connection keeps inserting (rows inserted while the build is in progress, seen in
/// PostgreSQL's progress view), and drops the retry and lease indexes; an interrupted build (the
/// new index left behind by an earlier run) is finished by the next `migrate`.
#[tokio::test]
async fn migrate_builds_the_partition_index_while_producers_write() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = db.store_default().await;
    deliver_all(&store).await;
    // As before migration 0007: the status index over every row, the per-row claim's indexes,
    // no partition index, the migrations not recorded; an interrupted earlier run left the new
    // index half done.
    db.execute("DROP INDEX idx_room_outbox_part", &[]).await;
    db.execute("DROP INDEX idx_room_outbox_history", &[]).await;
    db.execute(
        "CREATE INDEX idx_room_outbox_pending ON room_outbox \
         (app_code, status, created_at_ms, event_id)",
        &[],
    )
    .await;
    db.execute(
        "CREATE INDEX idx_room_outbox_retry ON room_outbox \
         (app_code, status, next_retry_at_ms, created_at_ms, event_id) \
         WHERE status = 'retryable' AND next_retry_at_ms IS NOT NULL",
        &[],
    )
    .await;
    db.execute(
        "CREATE INDEX idx_room_outbox_lease ON room_outbox \
         (app_code, status, lock_until_ms, created_at_ms, event_id) \
         WHERE status = 'delivering' AND lock_until_ms IS NOT NULL",
        &[],
    )
    .await;
    db.execute(
        "CREATE INDEX idx_room_outbox_part_new ON room_outbox (app_code, status)",
        &[],
    )
    .await;
    db.execute("DELETE FROM outboxd_migrations WHERE version >= 7", &[])
        .await;

    // A producer inserting one row at a time throughout the migration, until it returns.
    let migrated = AtomicBool::new(false);
    let saved = AtomicU64::new(0);
    let producer = async {
        let mut i = 0;
        while !migrated.load(Ordering::Acquire) {
            let r = record(APP, &format!("p{i:05}"), "room0", 100_000 + i);
            saved.fetch_add(store.enqueue(&[r]).await.unwrap(), Ordering::AcqRel);
            i += 1;
        }
        i as u64
    };
    // An older transaction's snapshot (a reader, on no table of the outbox), open before the
    // migration: each concurrent build waits for it once built, before it can finish. The test
    // holds it until it has seen producer rows inserted while the first build was in progress.
    let mut reader = PgConnection::connect(&db.url)
        .await
        .expect("connect the reader");
    reader
        .execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        .await
        .unwrap();
    reader.execute("SELECT 1").await.unwrap();
    let overlap = async {
        let build = wait_until("an index build in progress", DEADLINE, || async {
            let builds = builds_in_progress(&db).await;
            match builds.iter().find(|b| b.ends_with(WAITING_FOR_SNAPSHOTS)) {
                Some(build) => Ok(build.clone()),
                None => Err(builds),
            }
        })
        .await;
        let from = saved.load(Ordering::Acquire);
        // Three rows more: at least two inserted from start to end within the build.
        let during = wait_until(
            "producer rows inserted during the build",
            DEADLINE,
            || async {
                match saved.load(Ordering::Acquire) - from {
                    during if during >= 3 => Ok(during),
                    during => Err(format!(
                        "{during} rows inserted since {build} was seen, {from} before"
                    )),
                }
            },
        )
        .await;
        let still = builds_in_progress(&db).await;
        reader.execute("COMMIT").await.unwrap();
        (build, during, still)
    };
    let migrate = async {
        let applied = db.store_unmigrated(DEFAULT_TABLE).await.migrate().await;
        migrated.store(true, Ordering::Release);
        applied
    };
    let (inserts, (build, during, still), applied) = tokio::join!(producer, overlap, migrate);
    assert_eq!(applied.unwrap(), vec![7, 8, 9, 10]);
    let saved = saved.into_inner();
    assert_eq!(saved, inserts, "every producer row saved");
    eprintln!("{saved} producer rows, {during} of them inserted while {build}");
    assert!(
        still.contains(&build),
        "the build {build} ended while the test held the snapshot it waits for: {still:?}"
    );

    assert!(predicate(&db, "idx_room_outbox_part").await.is_some());
    let history = predicate(&db, "idx_room_outbox_history").await;
    assert!(
        history
            .as_deref()
            .is_some_and(|p| p.contains("'delivered'") && p.contains("'failed'")),
        "{history:?}"
    );
    let names = db
        .query_strings(
            "SELECT c.relname::text FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid \
             JOIN pg_class t ON t.oid = i.indrelid WHERE t.relname = 'room_outbox' \
             AND i.indisvalid ORDER BY 1",
            &[],
        )
        .await;
    assert_eq!(
        names,
        [
            "idx_room_outbox_history",
            "idx_room_outbox_part",
            "room_outbox_pkey"
        ]
    );
    assert_eq!(
        HOST.deliver_due(&*store, BATCH).await,
        saved,
        "the producer's events"
    );
}

/// Two `migrate` runs at once on a fresh database (two hosts' deploy steps): each waits for the
/// other's lock between statements, never inside one, so neither deadlocks against the other's
/// concurrent index build; together they apply every migration once.
#[tokio::test]
async fn concurrent_migrates_apply_each_migration_once() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let (a, b) = (
        db.store_unmigrated(DEFAULT_TABLE).await,
        db.store_unmigrated(DEFAULT_TABLE).await,
    );
    let (ra, rb) = tokio::join!(a.migrate(), b.migrate());
    let mut applied = ra.unwrap();
    applied.extend(rb.unwrap());
    applied.sort();
    let all: Vec<i64> = outboxd::store::internals::migrations(Backend::Postgres)
        .iter()
        .map(|m| m.version)
        .collect();
    assert_eq!(applied, all);
    assert!(predicate(&db, "idx_room_outbox_part").await.is_some());
    assert!(predicate(&db, "idx_room_outbox_retry").await.is_none());
}

/// 200 rows over 20 rooms, for a change of partition count cut short.
async fn enqueue_200(db: &TestDb) -> Arc<dyn OutboxStore> {
    let store = db.store_default().await;
    let records: Vec<_> = (0..200)
        .map(|i| record(APP, &format!("e{i:03}"), &format!("room{}", i % 20), i))
        .collect();
    store.enqueue(&records).await.unwrap();
    store
}

/// With the change cut short: a host's heartbeat is refused, naming `--partitions`; the change
/// to 16 run again finishes it (from no partition index).
async fn refused_then_run_again(db: &TestDb, store: &Arc<dyn OutboxStore>) {
    let host = db.store_default().await;
    let refused = HOST
        .heartbeat_or_leave(&*host, false)
        .await
        .expect_err("no partition index: the host reads nothing");
    assert!(
        refused.to_string().contains("has no partition index")
            && refused.to_string().contains("--partitions"),
        "{refused}"
    );
    let change = store.repartition(16).await.expect("run again");
    assert_eq!((change.from, change.to), (0, 16));
}

/// A host started after the change works with 16 partitions and delivers all 200 rows.
async fn sixteen_partitions_deliver_all_200(db: &TestDb) {
    let restarted = db.store_default().await;
    assert_eq!(restarted.partitions(), 16);
    assert_eq!(HOST.deliver_due(&*restarted, BATCH).await, 200);
}

/// A change of partition count cut short after the old partition index was dropped, before the
/// new one was named (as a lost connection would leave it): a host refuses to start, saying what
/// to run, and `migrate --partitions` run again finishes the change; every row is delivered.
#[tokio::test]
async fn a_change_of_partition_count_cut_short_is_finished_by_running_it_again() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = enqueue_200(&db).await;
    // The state between the change's last two steps: the new index built, the old one dropped.
    db.execute(
        "CREATE INDEX idx_room_outbox_part_next ON room_outbox (app_code, \
         (hashtextextended(room_id, 0) & 15), status, created_at_ms, event_id) \
         WHERE status IN ('pending', 'retryable', 'delivering') AND updated_at_ms IS NOT NULL",
        &[],
    )
    .await;
    db.execute("DROP INDEX idx_room_outbox_part", &[]).await;
    refused_then_run_again(&db, &store).await;
    assert!(predicate(&db, "idx_room_outbox_part").await.is_some());
    assert!(predicate(&db, "idx_room_outbox_part_next").await.is_none());
    sixteen_partitions_deliver_all_200(&db).await;
}

/// MariaDB's migration 0007 on a table as the version before left it (the status index, no
/// `outbox_failed`), with delivered history, failed, pending and due retryable rows, while a
/// producer writes: no producer write fails, the status index is gone and the failed-apart index
/// is there, the failed listing and the counts find every row, and every due row is delivered.
#[tokio::test]
async fn mariadb_keeps_failed_rows_apart_online_with_rows_in_every_state() {
    let Some(db) = TestDb::new(Backend::MySql).await else {
        return;
    };
    let store = db.store_default().await;
    let mut rows: Vec<RawInsert> = Vec::new();
    for (status, count) in [
        ("delivered", 100),
        ("failed", 10),
        ("pending", 20),
        ("retryable", 5),
    ] {
        rows.extend((0..count).map(|i| {
            let mut row =
                RawInsert::pending(APP, &format!("{status}{i:03}"), &format!("room{i}"), i)
                    .with_status(status);
            if status == "retryable" {
                row.next_retry_at_ms = Some(1);
            }
            row
        }));
    }
    db.insert_raw(DEFAULT_TABLE, &rows).await;
    // The version before: its status index, no failed-apart column or index, 0007 not recorded.
    db.execute(
        "ALTER TABLE room_outbox DROP INDEX idx_room_outbox_failed, DROP COLUMN outbox_failed",
        &[],
    )
    .await;
    db.execute(
        "CREATE INDEX idx_room_outbox_pending ON room_outbox (app_code, status, created_at_ms, event_id)",
        &[],
    )
    .await;
    db.execute(
        "DELETE FROM outboxd_migrations WHERE table_name = 'room_outbox' AND version = 7",
        &[],
    )
    .await;

    let producer = db.store_unmigrated(DEFAULT_TABLE).await;
    let stop = Arc::new(AtomicBool::new(false));
    let writing = tokio::spawn({
        let stop = Arc::clone(&stop);
        async move {
            let mut saved = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let record = record(APP, &format!("w{saved:05}"), "room-w", 1_000 + saved as i64);
                saved += producer.enqueue(&[record]).await.expect("a producer write");
            }
            saved
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    let applied = store.migrate().await.expect("migrate");
    tokio::time::sleep(Duration::from_millis(100)).await;
    stop.store(true, Ordering::Relaxed);
    let written = writing.await.unwrap();
    assert_eq!(applied, [7]);
    assert!(written > 0, "the producer wrote while migrate ran");
    eprintln!("{written} producer rows saved around and during migrate");

    let indexes = db.index_columns(DEFAULT_TABLE).await;
    assert_eq!(
        indexes.keys().map(String::as_str).collect::<Vec<_>>(),
        ["idx_room_outbox_failed", "idx_room_outbox_part", "primary"],
        "{indexes:?}"
    );
    let failed = store
        .list_failed(&ListFailedParams {
            filter: FailedFilter {
                app_code: Some(APP.into()),
                ..FailedFilter::default()
            },
            limit: 100,
        })
        .await
        .unwrap();
    assert_eq!(failed.len(), 10);
    let counts = store
        .counts(&CountsParams {
            app_code: Some(APP.into()),
            now_ms: outboxd::record::now_ms(),
        })
        .await
        .unwrap();
    assert_eq!(
        (
            counts.delivered,
            counts.failed,
            counts.pending,
            counts.retryable
        ),
        (100, 10, 20 + written, 5)
    );
    assert_eq!(HOST.deliver_due(&*store, BATCH).await, 20 + 5 + written);
}

/// MariaDB: a change of partition count cut short after the old partition column and index were
/// dropped, before the new ones were named: a host refuses to start, saying what to run, and
/// `migrate --partitions` run again finishes the change; every row is delivered.
#[tokio::test]
async fn mariadb_change_of_partition_count_cut_short_is_finished_by_running_it_again() {
    let Some(db) = TestDb::new(Backend::MySql).await else {
        return;
    };
    let store = enqueue_200(&db).await;
    // The state between the change's last two steps: the new column and index built, the old
    // ones dropped.
    for ddl in [
        "ALTER TABLE room_outbox ADD COLUMN outbox_partition_next SMALLINT AS (CRC32(room_id) & 15) VIRTUAL",
        "CREATE INDEX idx_room_outbox_part_next ON room_outbox (app_code, outbox_partition_next, \
         status, created_at_ms, event_id)",
        "ALTER TABLE room_outbox DROP INDEX idx_room_outbox_part",
        "ALTER TABLE room_outbox DROP COLUMN outbox_partition",
    ] {
        db.execute(ddl, &[]).await;
    }
    refused_then_run_again(&db, &store).await;
    let indexes = db.index_columns(DEFAULT_TABLE).await;
    assert_eq!(
        indexes.get("idx_room_outbox_part").map(Vec::as_slice),
        Some(
            &[
                "app_code",
                "outbox_partition",
                "status",
                "created_at_ms",
                "event_id"
            ]
            .map(String::from)[..]
        ),
        "{indexes:?}"
    );
    assert!(
        !indexes.contains_key("idx_room_outbox_part_next"),
        "{indexes:?}"
    );
    sixteen_partitions_deliver_all_200(&db).await;
}

/// A partial index of the required index's columns under another name (an operator's index of
/// failed rows only) does not stand in for it: `migrate` creates the required index beside it,
/// once (PostgreSQL and SQLite, the databases with partial indexes).
#[tokio::test]
async fn migrate_creates_the_required_index_beside_a_partial_one_of_its_columns() {
    for backend in [Backend::Sqlite, Backend::Postgres] {
        let Some(db) = TestDb::new(backend).await else {
            continue;
        };
        let store = db.store_default().await;
        let (name, columns) =
            outboxd::store::internals::required_indexes(backend, &TableName::default())
                .into_iter()
                .next()
                .expect("a required index");
        db.drop_index(DEFAULT_TABLE, &name).await;
        db.execute(
            &format!(
                "CREATE INDEX idx_ops_failed_only ON {DEFAULT_TABLE} ({}) \
                 WHERE status = 'failed'",
                columns.join(", ")
            ),
            &[],
        )
        .await;
        for run in ["first", "second"] {
            assert!(
                store.migrate().await.expect("migrate").is_empty(),
                "{backend:?}: no migration left"
            );
            let indexes = db.index_columns(DEFAULT_TABLE).await;
            assert_eq!(
                indexes.get(&name),
                Some(&columns.iter().map(|c| c.to_string()).collect()),
                "{backend:?}, {run} migrate: the required index beside the partial one: \
                 {indexes:?}"
            );
            assert!(
                indexes.contains_key("idx_ops_failed_only"),
                "{backend:?}: the operator's index is kept"
            );
        }
        db.cleanup().await;
    }
}
