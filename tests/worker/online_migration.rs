//! A rolling upgrade through the newest index migration of each server database, with hosts
//! delivering throughout: PostgreSQL 0010 (the status index replaced by the history index, built
//! and dropped concurrently) and MariaDB 0007 (the failed-apart column and index added in place,
//! the status index dropped). The table starts as the version before left it, with a delivered
//! and failed history and a backlog; producers keep writing, two hosts deliver with per-room
//! order, and one of them is replaced by a new one while `migrate` runs. Every event is delivered
//! exactly once, in its room's order, no room is in two publishes at once, and deliveries went
//! on while the migration ran.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use outboxd::record::now_ms;
use outboxd::store::{DEFAULT_TABLE, DeliveryOrder, OutboxStore};
use outboxd::worker::{RunMode, Worker};
use sqlx::{Connection, Executor, PgConnection};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use super::partitioned::{assert_room_order, partitioned};
use super::support::{Backend, TestDb, wait_until};
use super::{Recorder, counts, enqueue_many, record};

crate::support::per_backend!([mysql, postgres] => hosts_deliver_through_the_status_index_swap);

/// Finished rows already in the table: the history the migration's index is built over.
const HISTORY: i64 = 30_000;
/// Live rows when the hosts start.
const BACKLOG: usize = 2_000;
/// Rooms of the backlog (the producer writes to rooms of its own).
const ROOMS: usize = 40;
/// The longest a step may take.
const DEADLINE: Duration = Duration::from_secs(120);

/// The migration that swaps the status index, and the statements that put a migrated table back
/// as the version before it left the table (its status index over every row, the migration not
/// recorded).
fn version_before(backend: Backend) -> (i64, &'static [&'static str]) {
    match backend {
        Backend::Postgres => (
            10,
            &[
                "DROP INDEX idx_room_outbox_history",
                "CREATE INDEX idx_room_outbox_pending ON room_outbox \
                 (app_code, status, created_at_ms, event_id)",
            ],
        ),
        _ => (
            7,
            &[
                "ALTER TABLE room_outbox DROP INDEX idx_room_outbox_failed, DROP COLUMN outbox_failed",
                "CREATE INDEX idx_room_outbox_pending ON room_outbox \
                 (app_code, status, created_at_ms, event_id)",
            ],
        ),
    }
}

/// `HISTORY` delivered rows (every hundredth failed) of tenant `app`, written long ago.
fn history_insert(backend: Backend) -> String {
    let columns = "INSERT INTO room_outbox (app_code, event_id, event_type, room_id, status, \
                   envelope, created_at_ms, updated_at_ms) ";
    let row = "'app', CONCAT('h', n), 'T', CONCAT('old-', n % 500), \
               CASE WHEN n % 100 = 0 THEN 'failed' ELSE 'delivered' END";
    match backend {
        Backend::Postgres => format!(
            "{columns} SELECT {row}, ''::bytea, n, n FROM generate_series(1, {HISTORY}) AS n"
        ),
        _ => format!(
            "{columns} SELECT {row}, '', n, n FROM (SELECT seq AS n FROM seq_1_to_{HISTORY}) AS s"
        ),
    }
}

/// A host of the rolling upgrade: a worker with per-room order, run until `shutdown`.
fn start_host(
    store: Arc<dyn OutboxStore>,
    recorder: &Arc<Recorder>,
    name: &str,
    shutdown: &CancellationToken,
) -> JoinHandle<()> {
    let mut options = partitioned(name, Duration::from_secs(3));
    options.ordering = DeliveryOrder::PerRoom;
    let worker = Worker::new(store, recorder.clone(), options);
    let shutdown = shutdown.clone();
    tokio::spawn(async move {
        worker
            .run(RunMode::Forever, shutdown)
            .await
            .expect("a host's run");
    })
}

async fn hosts_deliver_through_the_status_index_swap(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    db.execute(&history_insert(backend), &[]).await;
    let (version, statements) = version_before(backend);
    for statement in statements {
        db.execute(statement, &[]).await;
    }
    let unrecord = format!(
        "DELETE FROM outboxd_migrations WHERE table_name = 'room_outbox' AND version = {version}"
    );
    db.execute(&unrecord, &[]).await;
    enqueue_many(&*store, BACKLOG, ROOMS).await;

    // A producer writing one row at a time to its own rooms, each room's versions counting up,
    // until the hosts are told to finish.
    let stop_writing = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let producer = tokio::spawn({
        let (stop, written, store) = (stop_writing.clone(), written.clone(), store.clone());
        async move {
            let base = now_ms();
            let mut i = 0i64;
            while !stop.load(Ordering::Acquire) {
                let r = record(
                    "app",
                    &format!("w{i:06}"),
                    &format!("live-{}", i % 7),
                    base + i,
                );
                written.fetch_add(store.enqueue(&[r]).await.unwrap(), Ordering::AcqRel);
                i += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        }
    });

    // Two hosts of the version before, delivering slowly enough to overlap the migration.
    let recorder = Recorder::with_delay(Duration::from_millis(3), |_| None);
    let (first_stop, second_stop) = (CancellationToken::new(), CancellationToken::new());
    let first = start_host(
        db.store_unmigrated(DEFAULT_TABLE).await,
        &recorder,
        "old-1",
        &first_stop,
    );
    let second = start_host(
        db.store_unmigrated(DEFAULT_TABLE).await,
        &recorder,
        "old-2",
        &second_stop,
    );
    let delivered = || recorder.delivered.lock().unwrap().len();
    wait_until("the hosts delivering", DEADLINE, || async {
        match delivered() {
            n if n >= 100 => Ok(()),
            n => Err(n),
        }
    })
    .await;

    // PostgreSQL: a reader's snapshot, open before the migration, holds each concurrent build
    // until the test has seen the hosts deliver during it.
    let mut reader = match backend {
        Backend::Postgres => {
            let mut reader = PgConnection::connect(&db.url).await.expect("the reader");
            reader
                .execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
                .await
                .unwrap();
            reader.execute("SELECT 1").await.unwrap();
            Some(reader)
        }
        _ => None,
    };
    let migrate = async { db.store_unmigrated(DEFAULT_TABLE).await.migrate().await };
    let (before, third_stop) = (delivered(), CancellationToken::new());
    let roll = async {
        if let Some(reader) = reader.as_mut() {
            wait_until(
                "an index build waiting for old snapshots",
                DEADLINE,
                || async {
                    let waiting = db
                        .query_strings(
                            "SELECT phase FROM pg_stat_progress_create_index \
                         WHERE datname = current_database() AND phase LIKE 'waiting for old%'",
                            &[],
                        )
                        .await;
                    if waiting.is_empty() {
                        Err("no build waiting")
                    } else {
                        Ok(())
                    }
                },
            )
            .await;
            // One host replaced by a new one while the build is in progress.
            first_stop.cancel();
            let third = start_host(
                db.store_unmigrated(DEFAULT_TABLE).await,
                &recorder,
                "new-1",
                &third_stop,
            );
            let from = delivered();
            wait_until("deliveries during the build", DEADLINE, || async {
                match delivered() - from {
                    n if n >= 50 => Ok(()),
                    n => Err(n),
                }
            })
            .await;
            reader.execute("COMMIT").await.unwrap();
            Some(third)
        } else {
            // MariaDB builds in place: the replacement starts as soon as the migration does.
            first_stop.cancel();
            Some(start_host(
                db.store_unmigrated(DEFAULT_TABLE).await,
                &recorder,
                "new-1",
                &third_stop,
            ))
        }
    };
    let (applied, third) = tokio::join!(migrate, roll);
    assert_eq!(applied.expect("migrate"), [version]);
    let during = delivered() - before;
    assert!(
        during > 0,
        "no event was delivered while migrate ran (before it: {before})"
    );

    // The rest: the producer stops, the remaining hosts drain what is left.
    stop_writing.store(true, Ordering::Release);
    producer.await.unwrap();
    let total = BACKLOG as u64 + written.load(Ordering::Acquire);
    wait_until("every event delivered", DEADLINE, || async {
        let c = counts(&*store).await;
        if c.delivered == HISTORY as u64 - HISTORY as u64 / 100 + total {
            Ok(())
        } else {
            Err(c)
        }
    })
    .await;
    for stop in [&first_stop, &second_stop, &third_stop] {
        stop.cancel();
    }
    first.await.unwrap();
    second.await.unwrap();
    if let Some(third) = third {
        third.await.unwrap();
    }
    eprintln!("{total} events, {during} of them delivered while migrate ran");

    let seen = assert_room_order(&recorder);
    assert_eq!(seen.len() as u64, total, "every event delivered");
    assert!(
        seen.values().all(|n| *n == 1),
        "an event was delivered twice"
    );
    let c = counts(&*store).await;
    assert_eq!(
        (c.pending, c.retryable, c.delivering, c.failed),
        (0, 0, 0, HISTORY as u64 / 100)
    );
    let indexes = db.index_columns(DEFAULT_TABLE).await;
    assert!(
        !indexes.contains_key("idx_room_outbox_pending"),
        "the status index is gone: {indexes:?}"
    );
}
