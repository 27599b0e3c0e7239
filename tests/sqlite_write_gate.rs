//! SQLite's in-process write gate (`store/write_gate.rs`): the writes of one store queue in the
//! process and never meet in SQLite's busy handler.
//!
//! Deterministic by construction: every connection of the store's pool runs with
//! `PRAGMA busy_timeout = 0`, so a write that finds the file's write lock taken fails at once
//! with "database is locked" instead of sleeping. With the gate no write of the store can find
//! the lock taken (nothing else writes the file), so not one of the concurrent writes below may
//! fail; without it, eight writers started together collide at once.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::SystemTime;

use outboxd::record::{DEFAULT_APP_CODE, Record, now_ms};
use outboxd::store::sqlite::SqliteStore;
use outboxd::store::{
    ClaimParams, ConnectOptions, DeliveryOrder, Mark, MarkParams, OutboxStore, PurgeParams,
    PurgeStatus,
};

/// Concurrent writers (the pool's size).
const WRITERS: usize = 8;
/// Enqueues per writer.
const ROUNDS: usize = 25;
/// Records per enqueue.
const RECORDS: usize = 20;

/// A migrated store on a fresh file whose every pooled connection has no busy timeout.
async fn store_without_busy_timeout(dir: &tempfile::TempDir) -> Arc<SqliteStore> {
    let url = format!("sqlite://{}/gate.db?mode=rwc", dir.path().display());
    let mut options = ConnectOptions::new(url);
    options.max_connections = WRITERS as u32;
    let store = SqliteStore::connect(&options).await.expect("connect");
    store.migrate().await.expect("migrate");
    // Hold every connection the pool may open at once, so each gets the setting.
    let mut connections = Vec::new();
    for _ in 0..WRITERS {
        let mut connection = store.pool().acquire().await.expect("acquire");
        sqlx::query("PRAGMA busy_timeout = 0")
            .execute(&mut *connection)
            .await
            .expect("busy_timeout");
        connections.push(connection);
    }
    drop(connections);
    Arc::new(store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writes_of_one_store_never_find_the_write_lock_taken() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_without_busy_timeout(&dir).await;

    // Enqueues (never retried by the store: a busy file would be returned as is).
    let mut tasks = Vec::new();
    for writer in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut errors = Vec::new();
            for round in 0..ROUNDS {
                let records: Vec<Record> = (0..RECORDS)
                    .map(|i| {
                        let room = format!("room-{writer}-{round}-{i}");
                        Record::build(room, "Gate", 1, SystemTime::now(), &"x".to_string())
                    })
                    .collect();
                if let Err(error) = store.enqueue(&records).await {
                    errors.push(error.to_string());
                }
            }
            errors
        }));
    }
    let mut errors = Vec::new();
    for task in tasks {
        errors.extend(task.await.unwrap());
    }
    assert!(
        errors.is_empty(),
        "{} of {} enqueues found the write lock taken, e.g. {}",
        errors.len(),
        WRITERS * ROUNDS,
        errors[0]
    );

    // Claims and marks from several loops, with a purge beside them: every row delivered once.
    let total = WRITERS * ROUNDS * RECORDS;
    let mut loops = Vec::new();
    for worker in 0..4 {
        let store = store.clone();
        loops.push(tokio::spawn(async move {
            let mut delivered = Vec::new();
            loop {
                let now = now_ms();
                let batch = store
                    .claim(&ClaimParams {
                        app_code: DEFAULT_APP_CODE.to_string(),
                        worker_id: format!("w{worker}"),
                        limit: 50,
                        lease_ms: 60_000,
                        now_ms: now,
                        max_attempts: 5,
                        ordering: DeliveryOrder::None,
                        scan_due: false,
                    })
                    .await
                    .expect("claim");
                if batch.events.is_empty() {
                    return delivered;
                }
                let marks: Vec<Mark> = batch
                    .events
                    .iter()
                    .map(|e| Mark::delivered(e.event.event_id.clone()))
                    .collect();
                let report = store
                    .mark(&MarkParams {
                        lease: &batch.lease,
                        marks: &marks,
                        now_ms: now_ms(),
                    })
                    .await
                    .expect("mark");
                assert!(report.stale.is_empty(), "{report:?}");
                delivered.extend(marks.into_iter().map(|m| m.event_id));
            }
        }));
    }
    let purger = {
        let store = store.clone();
        tokio::spawn(async move {
            for _ in 0..20 {
                store
                    .purge(&PurgeParams {
                        app_code: DEFAULT_APP_CODE.to_string(),
                        status: PurgeStatus::Delivered,
                        before_ms: now_ms() + 1,
                        limit: 10,
                        dry_run: false,
                    })
                    .await
                    .expect("purge");
            }
        })
    };
    let mut seen = HashSet::new();
    for worker in loops {
        for id in worker.await.unwrap() {
            assert!(seen.insert(id.clone()), "{id} delivered twice");
        }
    }
    purger.await.unwrap();
    assert_eq!(seen.len(), total);
}
