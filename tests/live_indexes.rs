//! PostgreSQL's retry and lease indexes hold live rows only (migration 0006): events delivered
//! through the store leave the retry index empty and the lease index holding only the entries of
//! the leases taken; a table with the whole indexes of migration 0001 gets them replaced, built
//! concurrently, by `migrate`. The index sizes are read from the catalog (no vacuum runs here).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use outboxd::store::{
    Backend, ClaimParams, DEFAULT_TABLE, DeliveryOrder, Mark, MarkParams, OutboxStore,
};
use sqlx::{Connection, Executor, PgConnection};
use support::{Bind, TestDb, record, wait_until};

/// Tenant.
const APP: &str = "app_a";
/// Events delivered per run.
const EVENTS: usize = 5_000;
/// Rows per claim (the default batch size).
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

/// The size of `index` in 8 KiB pages.
async fn pages(db: &TestDb, index: &str) -> i64 {
    let rows = db
        .query_strings(
            "SELECT CAST(pg_relation_size(CAST($1 AS regclass)) / 8192 AS TEXT)",
            &[Bind::Str(index.into())],
        )
        .await;
    rows[0].parse().unwrap()
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

/// A claim of up to `BATCH` rows at `now_ms` by worker `w1`, leased for 30 s.
fn claim_at(now_ms: i64) -> ClaimParams {
    ClaimParams {
        app_code: APP.into(),
        worker_id: "w1".into(),
        limit: BATCH,
        lease_ms: 30_000,
        now_ms,
        max_attempts: 10,
        ordering: DeliveryOrder::None,
        scan_due: true,
    }
}

/// Enqueues `EVENTS` events, then claims and marks them delivered, `BATCH` at a time.
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
    let mut delivered = 0;
    let mut now = 10_000;
    while delivered < EVENTS {
        let batch = store.claim(&claim_at(now)).await.unwrap();
        assert!(
            !batch.events.is_empty(),
            "{delivered} of {EVENTS} delivered"
        );
        let marks: Vec<Mark> = batch
            .events
            .iter()
            .map(|e| Mark::delivered(&e.event.event_id))
            .collect();
        let marked = store
            .mark(&MarkParams {
                lease: &batch.lease,
                marks: &marks,
                now_ms: now + 5,
            })
            .await
            .unwrap();
        assert_eq!(marked.applied, marks.len() as u64);
        delivered += marks.len();
        now += 10;
    }
}

/// After `migrate`, the retry and lease indexes are partial, each on its state and its claim
/// branch's column; delivering 5,000 events writes nothing into the retry index and one lease
/// entry per claim into the lease index, while the pending index, which every status change
/// writes, grows with them.
#[tokio::test]
async fn delivered_events_leave_the_retry_index_empty() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = db.store_default().await;
    assert_eq!(
        predicate(&db, "idx_room_outbox_retry").await.as_deref(),
        Some("(((status)::text = 'retryable'::text) AND (next_retry_at_ms IS NOT NULL))")
    );
    assert_eq!(
        predicate(&db, "idx_room_outbox_lease").await.as_deref(),
        Some("(((status)::text = 'delivering'::text) AND (lock_until_ms IS NOT NULL))")
    );
    assert_eq!(predicate(&db, "idx_room_outbox_pending").await, None);
    // Dropped after the migration: the next `migrate` creates it over live rows again.
    db.execute("DROP INDEX idx_room_outbox_retry", &[]).await;
    assert!(store.migrate().await.unwrap().is_empty());
    assert_eq!(
        predicate(&db, "idx_room_outbox_retry").await.as_deref(),
        Some("(((status)::text = 'retryable'::text) AND (next_retry_at_ms IS NOT NULL))")
    );
    deliver_all(&store).await;
    let (pending, retry, lease) = (
        pages(&db, "idx_room_outbox_pending").await,
        pages(&db, "idx_room_outbox_retry").await,
        pages(&db, "idx_room_outbox_lease").await,
    );
    // An empty B-tree is its metapage (and a root page once anything was inserted).
    assert!(retry <= 1, "retry index: {retry} pages");
    assert!(
        lease * 2 < pending,
        "lease index {lease} pages, pending index {pending} pages"
    );
}

/// A table whose retry and lease indexes are whole (as migration 0001 built them, before 0006
/// was applied) with rows in it: `migrate` replaces both with the partial ones, built
/// concurrently while another connection keeps inserting (rows inserted while a build is in
/// progress, seen in PostgreSQL's progress view), and leaves no index behind; an
/// interrupted replacement (the new index built, the old one still there) is finished by the
/// next `migrate`.
#[tokio::test]
async fn migrate_replaces_whole_indexes_while_producers_write() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = db.store_default().await;
    // As before migration 0006: whole indexes, the migration not recorded.
    db.execute("DROP INDEX idx_room_outbox_retry", &[]).await;
    db.execute("DROP INDEX idx_room_outbox_lease", &[]).await;
    db.execute(
        "CREATE INDEX idx_room_outbox_retry ON room_outbox \
         (app_code, status, next_retry_at_ms, created_at_ms, event_id)",
        &[],
    )
    .await;
    db.execute(
        "CREATE INDEX idx_room_outbox_lease ON room_outbox \
         (app_code, status, lock_until_ms, created_at_ms, event_id)",
        &[],
    )
    .await;
    // An interrupted earlier run: the new retry index already built beside the old one.
    db.execute(
        "CREATE INDEX idx_room_outbox_retry_new ON room_outbox \
         (app_code, status, next_retry_at_ms, created_at_ms, event_id)",
        &[],
    )
    .await;
    db.execute("DELETE FROM outboxd_migrations WHERE version = 6", &[])
        .await;
    deliver_all(&store).await;

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
    assert_eq!(applied.unwrap(), vec![6]);
    let saved = saved.into_inner();
    assert_eq!(saved, inserts, "every producer row saved");
    eprintln!("{saved} producer rows, {during} of them inserted while {build}");
    assert!(
        still.contains(&build),
        "the build {build} ended while the test held the snapshot it waits for: {still:?}"
    );

    assert!(predicate(&db, "idx_room_outbox_retry").await.is_some());
    assert!(predicate(&db, "idx_room_outbox_lease").await.is_some());
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
            "idx_room_outbox_lease",
            "idx_room_outbox_part",
            "idx_room_outbox_pending",
            "idx_room_outbox_retry",
            "room_outbox_pkey"
        ]
    );
    assert_eq!(pages(&db, "idx_room_outbox_retry").await, 1, "built empty");
    let mut claimed = 0;
    loop {
        let batch = store.claim(&claim_at(200_000)).await.unwrap();
        if batch.events.is_empty() {
            break;
        }
        claimed += batch.events.len() as u64;
    }
    assert_eq!(claimed, saved, "the producer's events");
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
    assert!(predicate(&db, "idx_room_outbox_retry").await.is_some());
}
