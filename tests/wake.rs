//! Wake on commit: an idle worker claims rows committed by another connection (PostgreSQL
//! `LISTEN`/`NOTIFY` fed by the outbox trigger, SQLite `PRAGMA data_version`) or by a producer in
//! the same process ([`Wake::wake`]) at once, not after its poll interval; where the database
//! has no commit feed (MySQL / MariaDB without a binlog; the binlog: `tests/binlog_wake.rs`), a
//! busy table is probed every few milliseconds.
//!
//! Every worker here polls every 30 s, so a row delivered within a few seconds was delivered by a
//! wake-up, never by the poll. The commit-feed tests run where the test servers have a feed
//! (SQLite, PostgreSQL) and fail if it does not start; none branches on the backend's name.

use crate::support;

use std::sync::Arc;
use std::time::Duration;

use outboxd::record::now_ms;
use outboxd::retry::RetryPolicy;
use outboxd::store::{DeliveryOrder, FailedFilter, OutboxStore, RequeueParams, TableName};
use outboxd::wake::{self, Wake};
use outboxd::worker::WorkerOptions;
use support::{
    Backend, RawInsert, Running, TestDb, record, until_loops_wait, wait_for, wait_until,
};
use tokio_util::sync::CancellationToken;

/// Longer than any test waits: a delivery inside a test's deadline came from a wake-up.
const POLL: Duration = Duration::from_secs(30);
/// How long a woken delivery may take (generous: the machine is shared).
const DEADLINE: Duration = Duration::from_secs(5);

fn options() -> WorkerOptions {
    WorkerOptions {
        app_codes: vec!["app".into()],
        batch_size: 100,
        poll_interval: POLL,
        idle_probe: POLL,
        lease: Duration::from_secs(60),
        publish_timeout: Duration::from_secs(10),
        retry: RetryPolicy::default(),
        ordering: DeliveryOrder::None,
        concurrency: 2,
        node_id: "wake-test".into(),
    }
}

/// A worker over `store` woken by `wake`, polling every [`POLL`].
fn start(store: Arc<dyn OutboxStore>, wake: Wake) -> Running {
    Running::start(store, wake, options())
}

/// The next id `running` delivers, or a panic naming `what` after [`DEADLINE`].
async fn next(running: &mut Running, what: &str) -> String {
    running.next_within(DEADLINE, what).await.0
}

/// Waits until both loops of the worker woken by `wake` are idle, asleep until woken (the poll
/// interval is 30 s), so that the row written next is found by a wake-up, not by a round.
async fn until_asleep(wake: &Wake) {
    until_waiting(wake, "both loops asleep until woken", |probe| {
        probe.is_none()
    })
    .await;
}

/// Waits until both loops woken by `wake` wait for work and `probe` holds of the time until the
/// first probe they planned (`None`: neither probes).
async fn until_waiting(wake: &Wake, what: &str, probe: impl Fn(Option<Duration>) -> bool) {
    let loops = options().concurrency as usize;
    // Backing off past 1.5 s takes about 5 s of empty rounds (10 ms + 20 ms + … + 2.56 s).
    until_loops_wait(wake, loops, what, 3 * DEADLINE, probe).await;
}

async fn raw_row(db: &TestDb, event_id: &str) {
    db.insert_raw(
        outboxd::store::DEFAULT_TABLE,
        &[RawInsert::pending("app", event_id, "room-1", now_ms())],
    )
    .await;
}

/// A commit feed of the default table started for a test, with what stops it.
struct Feed {
    wake: Wake,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Feed {
    /// Starts the feed of `db`'s database; `None` where the database has none.
    async fn start(db: &TestDb) -> Option<Feed> {
        let wake = Wake::new();
        let shutdown = CancellationToken::new();
        let task = wake::start_commit_feed(&db.url, &TableName::default(), &wake, shutdown.clone())
            .await
            .expect("start commit feed")?;
        Some(Feed {
            wake,
            shutdown,
            task,
        })
    }

    /// Waits until the feed is connected (on PostgreSQL: the listener and the notify gate).
    async fn connected(&self) {
        wait_for("the commit feed connected", DEADLINE, || async {
            self.wake.has_commit_feed()
        })
        .await;
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.expect("feed task");
    }
}

/// The PostgreSQL pool of a PostgreSQL test database.
fn pg_pool(db: &TestDb) -> &sqlx::PgPool {
    let support::RawPool::Postgres(pool) = &db.pool else {
        unreachable!("a PostgreSQL test database")
    };
    pool
}

async fn commit_feed_wakes_an_idle_worker(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let feed = Feed::start(&db)
        .await
        .unwrap_or_else(|| panic!("{backend:?}: no commit feed"));
    feed.connected().await;
    let wake = feed.wake.clone();
    let mut running = start(store.clone(), wake.clone());
    until_asleep(&wake).await;
    // Written by another connection, the way the Go service writes it.
    raw_row(&db, "from-another-connection").await;
    assert_eq!(
        next(&mut running, "a row committed by another connection").await,
        "from-another-connection"
    );
    until_asleep(&wake).await;
    raw_row(&db, "second").await;
    assert_eq!(next(&mut running, "a second row").await, "second");
    running.stop().await;
    feed.stop().await;
    assert!(!wake.has_commit_feed(), "the feed reports itself stopped");
    store.close().await;
    db.cleanup().await;
}

/// `outboxd requeue` (another pool, as another process) puts a `failed` row back to `pending`: a
/// running worker with a commit feed delivers it at once, not at its next poll (PostgreSQL: the
/// requeue trigger of migration 0003; SQLite: the write changes `data_version`).
async fn requeue_wakes_a_running_worker(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let feed = Feed::start(&db)
        .await
        .unwrap_or_else(|| panic!("{backend:?}: no commit feed"));
    feed.connected().await;
    let mut running = start(store.clone(), feed.wake.clone());
    db.insert_raw(
        outboxd::store::DEFAULT_TABLE,
        &[RawInsert::pending("app", "dead-letter", "room-1", now_ms()).with_status("failed")],
    )
    .await;
    // The insert's own wake finds nothing to claim (the row is failed); the loops go idle.
    until_asleep(&feed.wake).await;
    let operator = db.store_default().await;
    let requeued = operator
        .requeue(&RequeueParams {
            filter: FailedFilter {
                app_code: Some("app".into()),
                ..FailedFilter::default()
            },
            dry_run: false,
            now_ms: now_ms(),
            // In chunks, as `outboxd requeue` does.
            limit: Some(1000),
        })
        .await
        .expect("requeue");
    assert_eq!(requeued, 1, "the failed row was requeued");
    assert_eq!(next(&mut running, "a requeued row").await, "dead-letter");
    running.stop().await;
    feed.stop().await;
    operator.close().await;
    store.close().await;
    db.cleanup().await;
}

async fn a_busy_table_is_probed_without_a_feed(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    store
        .enqueue(&[record("app", "first", "room-1", now_ms())])
        .await
        .expect("enqueue");
    // No feed: only the adaptive probe can find rows before the 30 s poll.
    let mut running = start(store.clone(), Wake::new());
    assert_eq!(
        next(&mut running, "the row waiting at start").await,
        "first"
    );
    for i in 0..10 {
        // The producer's pace (part of the test: a row every ~20 ms is a busy table).
        tokio::time::sleep(Duration::from_millis(20)).await;
        let id = format!("busy-{i}");
        store
            .enqueue(&[record("app", &id, "room-1", now_ms())])
            .await
            .expect("enqueue");
        assert_eq!(next(&mut running, &id).await, id);
    }
    running.stop().await;
    store.close().await;
    db.cleanup().await;
}

async fn a_host_started_on_an_empty_table_probes_soon_without_a_feed(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    // No feed, an empty table: the loops' first rounds find nothing. A host started (or
    // restarted) into traffic must still find the first row by probing, long before the poll.
    let wake = Wake::new();
    let mut running = start(store.clone(), wake.clone());
    // The row comes after the loops' first (empty) rounds, while they wait on a probe.
    until_waiting(&wake, "both loops probing after an empty round", |p| {
        p.is_some()
    })
    .await;
    store
        .enqueue(&[record("app", "soon", "room-1", now_ms())])
        .await
        .expect("enqueue");
    assert_eq!(
        next(&mut running, "a row saved just after the start").await,
        "soon"
    );
    running.stop().await;
    store.close().await;
    db.cleanup().await;
}

async fn a_producer_in_this_process_wakes_the_worker(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let wake = Wake::new();
    let mut running = start(store.clone(), wake.clone());
    // The loops' adaptive probe backs off (waits of 10 ms, 20 ms, … doubling) until neither
    // probes within 1.5 s: then only the wake delivers within 1 s.
    until_waiting(&wake, "both loops' next probe 1.5 s away", |p| {
        p.is_some_and(|p| p >= Duration::from_millis(1500))
    })
    .await;
    store
        .enqueue(&[record("app", "in-process", "room-1", now_ms())])
        .await
        .expect("enqueue");
    wake.wake();
    assert_eq!(
        running
            .next_within(Duration::from_secs(1), "a row saved in this process")
            .await
            .0,
        "in-process"
    );
    running.stop().await;
    store.close().await;
    db.cleanup().await;
}

/// MySQL / MariaDB have a commit feed only where the server writes a binlog, which the shared
/// test server does not: their feed is tested on a private server in `tests/binlog_wake.rs`.
mod commit_feed {
    use super::{commit_feed_wakes_an_idle_worker, requeue_wakes_a_running_worker};

    crate::support::per_backend!([sqlite, postgres] => commit_feed_wakes_an_idle_worker, requeue_wakes_a_running_worker);
}
support::per_backend!(
    a_busy_table_is_probed_without_a_feed,
    a_host_started_on_an_empty_table_probes_soon_without_a_feed,
    a_producer_in_this_process_wakes_the_worker
);

/// PostgreSQL's trigger notifies once per INSERT statement (not per row), only on commit, and the
/// host's listener comes back after its connection is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_trigger_notifies_per_statement_and_the_listener_reconnects() {
    use sqlx::postgres::PgListener;
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = db.store_default().await;
    let table = TableName::default();
    let mut listener = PgListener::connect(&db.url).await.expect("listen");
    listener
        .listen(&wake::postgres::channel(&table))
        .await
        .expect("listen");
    let quiet = Duration::from_millis(300);
    // Stand in for an armed host (migration 0005: commits notify only while one is).
    let pool = pg_pool(&db);
    let mut armed = pool.acquire().await.expect("connection");
    gate_lock(&mut armed, "pg_advisory_lock", &table, 0).await;

    let rows: Vec<RawInsert> = (0..50)
        .map(|i| RawInsert::pending("other-app", &format!("bulk-{i}"), "room-1", now_ms()))
        .collect();
    db.insert_raw(outboxd::store::DEFAULT_TABLE, &rows).await;
    tokio::time::timeout(DEADLINE, listener.recv())
        .await
        .expect("a notification for the INSERT")
        .expect("recv");
    assert!(
        tokio::time::timeout(quiet, listener.recv()).await.is_err(),
        "one INSERT of 50 rows notifies once"
    );

    let mut tx = pool.begin().await.expect("begin");
    sqlx::query(
        "INSERT INTO room_outbox (app_code, event_id, event_type, room_id, envelope, created_at_ms, updated_at_ms) \
         VALUES ('app', 'rolled-back', 'T', 'room-1', '\\x00', 1, 1)",
    )
    .execute(&mut *tx)
    .await
    .expect("insert");
    tx.rollback().await.expect("rollback");
    assert!(
        tokio::time::timeout(quiet, listener.recv()).await.is_err(),
        "a rolled-back INSERT notifies no one"
    );

    // The host's listener: kill its connection, then a commit must still wake the worker. (This
    // test's own listener stops listening first, so `LISTEN%` below finds the host's only.)
    listener.unlisten_all().await.expect("unlisten");
    gate_lock(&mut armed, "pg_advisory_unlock", &table, 0).await;
    let wake = Wake::new();
    let shutdown = CancellationToken::new();
    let feed = wake::start_commit_feed(&db.url, &table, &wake, shutdown.clone())
        .await
        .expect("feed")
        .expect("PostgreSQL has a commit feed");
    let listener_pid = || async {
        sqlx::query_scalar::<_, i32>(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
             AND query LIKE 'LISTEN%' AND pid <> pg_backend_pid() ORDER BY backend_start DESC LIMIT 1",
        )
        .fetch_optional(pool)
        .await
        .expect("pg_stat_activity")
    };
    let first_pid = wait_until("the host's listener connects", DEADLINE, || async {
        match (wake.has_commit_feed(), listener_pid().await) {
            (true, Some(pid)) => Ok(pid),
            seen => Err(seen),
        }
    })
    .await;
    sqlx::query("SELECT pg_terminate_backend($1)")
        .bind(first_pid)
        .execute(pool)
        .await
        .expect("terminate the listener's backend");
    let second_pid = wait_until(
        "the listener reconnects",
        Duration::from_secs(15),
        || async {
            match (wake.has_commit_feed(), listener_pid().await) {
                (true, Some(pid)) if pid != first_pid => Ok(pid),
                seen => Err(seen),
            }
        },
    )
    .await;
    assert_ne!(first_pid, second_pid);
    let mut running = start(store.clone(), wake.clone());
    until_asleep(&wake).await;
    raw_row(&db, "after-reconnect").await;
    assert_eq!(
        next(&mut running, "a row after the reconnect").await,
        "after-reconnect"
    );
    running.stop().await;
    shutdown.cancel();
    feed.await.expect("feed task");
    drop(listener);
    drop(armed);
    store.close().await;
    db.cleanup().await;
}

/// Runs `function` (`pg_advisory_lock`, `pg_advisory_unlock`, …) on gate slot `slot` of `table`,
/// as a host's notify gate does (migration 0005).
async fn gate_lock(conn: &mut sqlx::PgConnection, function: &str, table: &TableName, slot: i32) {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "SELECT {function}(hashtext($1), $2)::text"
    )))
    .bind(wake::postgres::channel(table))
    .bind(slot)
    .execute(conn)
    .await
    .unwrap_or_else(|e| panic!("{function} on gate slot {slot}: {e}"));
}

/// Whether a gate's arm of `table` (on gate slot `slot`, or any) waits for its exclusive lock:
/// requested, not granted.
async fn arm_waits(pool: &sqlx::PgPool, table: &TableName, slot: Option<i32>) -> bool {
    sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' \
         AND mode = 'ExclusiveLock' AND NOT granted \
         AND classid::int4 = hashtext($1) AND objsubid = 2 \
         AND ($2::int4 IS NULL OR objid::int8 = $2::int4))",
    )
    .bind(wake::postgres::channel(table))
    .bind(slot)
    .fetch_one(pool)
    .await
    .expect("pg_locks")
}

/// The SQL of one producer row into the default table.
fn insert_sql(event_id: &str) -> String {
    format!(
        "INSERT INTO room_outbox (app_code, event_id, event_type, room_id, envelope, created_at_ms, updated_at_ms) \
         VALUES ('app', '{event_id}', 'T', 'room-1', '\\x00', {now}, {now})",
        now = now_ms()
    )
}

/// Migration 0005's trigger notifies only while some host holds a gate slot, and a host that
/// arms waits for the producer transactions that passed the trigger before it: they took the
/// slot's key shared until they end, while a producer that comes during the arm's wait notifies
/// instead of waiting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_trigger_notifies_only_while_a_host_is_armed() {
    use sqlx::postgres::PgListener;
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = db.store_default().await;
    let table = TableName::default();
    let pool = pg_pool(&db);
    let mut listener = PgListener::connect(&db.url).await.expect("listen");
    listener
        .listen(&wake::postgres::channel(&table))
        .await
        .expect("listen");
    let quiet = Duration::from_millis(300);
    let insert = |id: &str| sqlx::query(sqlx::AssertSqlSafe(insert_sql(id)));

    insert("nobody-armed").execute(pool).await.expect("insert");
    assert!(
        tokio::time::timeout(quiet, listener.recv()).await.is_err(),
        "no host armed: the commit notifies no one"
    );

    // A producer passes the trigger while no host is armed, and stays open.
    let mut early = pool.begin().await.expect("begin");
    insert("passed-before-the-arm")
        .execute(&mut *early)
        .await
        .expect("insert");
    // A host arms slot 5: it must wait for that producer.
    let mut host = pool.acquire().await.expect("connection");
    let arm = tokio::spawn(async move {
        gate_lock(&mut host, "pg_advisory_lock", &TableName::default(), 5).await;
        host
    });
    wait_for(
        "the arm waits for the producer that passed the trigger",
        DEADLINE,
        || arm_waits(pool, &table, Some(5)),
    )
    .await;
    assert!(
        !arm.is_finished(),
        "the arm waits for the producer that passed the trigger"
    );
    // A producer during the arm's wait neither waits nor stays silent.
    let during = tokio::time::timeout(DEADLINE, insert("during-the-arm").execute(pool)).await;
    assert!(
        during.is_ok(),
        "a producer during the arm does not wait for it"
    );
    tokio::time::timeout(DEADLINE, listener.recv())
        .await
        .expect("a producer during the arm notifies")
        .expect("recv");
    early.commit().await.expect("commit");
    let mut host = tokio::time::timeout(DEADLINE, arm)
        .await
        .expect("the arm completes once the producer commits")
        .expect("arm task");

    insert("while-armed").execute(pool).await.expect("insert");
    tokio::time::timeout(DEADLINE, listener.recv())
        .await
        .expect("armed: a commit notifies")
        .expect("recv");

    gate_lock(&mut host, "pg_advisory_unlock", &table, 5).await;
    insert("disarmed").execute(pool).await.expect("insert");
    assert!(
        tokio::time::timeout(quiet, listener.recv()).await.is_err(),
        "disarmed again: the commit notifies no one"
    );
    drop(host);
    drop(listener);
    store.close().await;
    db.cleanup().await;
}

/// A host's gate arms only once the producers before it have ended, and its loop claims once
/// more after the arm: a row whose transaction passed the trigger while the host was not armed
/// (so it sent no notification) is delivered at once, not at the next poll.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_host_claims_rows_of_producers_that_passed_the_trigger_before_it_armed() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = db.store_default().await;
    let table = TableName::default();
    let pool = pg_pool(&db);
    let feed = Feed::start(&db)
        .await
        .expect("PostgreSQL has a commit feed");
    feed.connected().await;
    let wake = feed.wake.clone();
    assert_eq!(
        wake.gate(),
        wake::gate::Gate::Disarmed,
        "no loop has asked to arm yet"
    );
    // The listener wakes a loop once when it connects: take that wake, so that only the loop's
    // claim after the arm can find the row below.
    let _ = tokio::time::timeout(Duration::from_millis(200), wake.woken()).await;

    let mut producer = pool.begin().await.expect("begin");
    let row = record("app", "before-the-arm", "room-1", now_ms());
    sqlx::query(
        "INSERT INTO room_outbox (app_code, event_id, event_type, room_id, envelope, created_at_ms, updated_at_ms) \
         VALUES ($1, $2, $3, $4, $5, $6, $6)",
    )
    .bind(&row.app_code)
    .bind(&row.event_id)
    .bind(&row.event_type)
    .bind(&row.room_id)
    .bind(row.encoded_envelope())
    .bind(row.created_at_ms)
    .execute(&mut *producer)
    .await
    .expect("insert");
    let mut running = start(store.clone(), wake.clone());
    // Commit while the gate's arm waits for this producer (its exclusive request not granted).
    wait_for(
        "the idle loop's arm waits for the open producer",
        DEADLINE,
        || arm_waits(pool, &table, None),
    )
    .await;
    producer.commit().await.expect("commit");
    assert_eq!(
        next(&mut running, "the row of the producer before the arm").await,
        "before-the-arm"
    );
    wait_until("an idle loop keeps the gate armed", DEADLINE, || async {
        match wake.gate() {
            wake::gate::Gate::Armed(_) => Ok(()),
            gate => Err(gate),
        }
    })
    .await;
    running.stop().await;
    feed.stop().await;
    store.close().await;
    db.cleanup().await;
}

/// Every gate slot taken by other hosts: this host's feed does not count as connected, so its
/// loops probe instead of sleeping on notifications that would never come.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_host_without_a_free_gate_slot_probes() {
    let Some(db) = TestDb::new(Backend::Postgres).await else {
        return;
    };
    let store = db.store_default().await;
    let table = TableName::default();
    let mut others = pg_pool(&db).acquire().await.expect("connection");
    for slot in 0..wake::gate::GATE_SLOTS {
        // The registry keys (slot + 1000) that hosts' gates hold for their lives.
        gate_lock(&mut others, "pg_advisory_lock", &table, 1000 + slot).await;
    }
    let feed = Feed::start(&db)
        .await
        .expect("PostgreSQL has a commit feed");
    let wake = feed.wake.clone();
    // A quiet spell, part of the test: the gate must stay off (no slot to take) while the feed
    // tries; there is no "gave up" to wait for.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(wake.gate(), wake::gate::Gate::Off);
    assert!(!wake.has_commit_feed(), "no slot: the loops must probe");
    let mut running = start(store.clone(), wake.clone());
    // The row comes after the loops' first (empty) rounds, while they wait on a probe.
    until_waiting(&wake, "both loops probing after an empty round", |p| {
        p.is_some()
    })
    .await;
    raw_row(&db, "probed").await;
    assert_eq!(next(&mut running, "a row found by probing").await, "probed");
    running.stop().await;
    feed.stop().await;
    drop(others);
    store.close().await;
    db.cleanup().await;
}
