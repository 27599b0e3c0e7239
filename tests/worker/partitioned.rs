//! The worker in partitioned mode (`worker.mode = "partitioned"`) on every database: hosts
//! draining one table share its partitions and deliver each event once, per-room order holds
//! with many events of a room in one batch and failures injected, and a host joining or leaving
//! moves partitions without delivering anything twice. A host whose table's partition count
//! changed under it (`outboxd migrate --partitions`) stops.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use outboxd::metrics::Metrics;
use outboxd::publish::{Event, Outcome};
use outboxd::store::{DeliveryOrder, OutboxStore};
use outboxd::worker::{RunMode, Worker, WorkerOptions};
use tokio_util::sync::CancellationToken;

use super::support::{Backend, TestDb, wait_until};
use super::{Recorder, counts, enqueue_many, options};

crate::support::per_backend!(
    partitioned_hosts_drain_exactly_once_in_room_order,
    partitioned_room_order_survives_failures,
    a_joining_host_gets_its_share_and_a_leaving_one_hands_on,
);

/// The test options in partitioned mode, with `lease` (heartbeats every third of it).
pub(super) fn partitioned(node_id: &str, lease: Duration) -> WorkerOptions {
    WorkerOptions {
        lease,
        publish_timeout: lease / 2,
        ..options(node_id)
    }
}

/// Asserts that `recorder` saw each room's events in write order (`room_version`), none twice in
/// one publish call or at once, and returns the deliveries per event id.
pub(super) fn assert_room_order(recorder: &Recorder) -> HashMap<String, usize> {
    assert_eq!(*recorder.concurrent_room_violation.lock().unwrap(), None);
    let mut last: HashMap<String, i64> = HashMap::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for event in recorder.delivered.lock().unwrap().iter() {
        *seen.entry(event.event_id.clone()).or_default() += 1;
        let previous = last.insert(event.room_id.clone(), event.room_version);
        assert!(
            previous.is_none_or(|p| p < event.room_version),
            "room {} delivered version {} after {:?}",
            event.room_id,
            event.room_version,
            previous
        );
    }
    seen
}

/// Three hosts drain 10k events over 50 rooms with per-room order: each delivered once, in
/// order, and the table holds nothing else.
async fn partitioned_hosts_drain_exactly_once_in_room_order(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let seed = db.store_default().await;
    enqueue_many(&*seed, 10_000, 50).await;
    let recorder = Recorder::new(|_| None);
    let mut runs = Vec::new();
    for host in 0..3 {
        let store = db.store_default().await;
        let mut opts = partitioned(&format!("host-{host}"), Duration::from_secs(30));
        opts.ordering = DeliveryOrder::PerRoom;
        let worker = Worker::new(store, recorder.clone(), opts);
        runs.push(tokio::spawn(async move {
            worker.run(RunMode::Drain, CancellationToken::new()).await
        }));
    }
    for run in runs {
        run.await.unwrap().unwrap();
    }
    let seen = assert_room_order(&recorder);
    assert_eq!(seen.len(), 10_000);
    assert!(
        seen.values().all(|n| *n == 1),
        "an event was delivered twice"
    );
    let c = counts(&*seed).await;
    assert_eq!(
        (c.delivered, c.pending, c.delivering, c.retryable),
        (10_000, 0, 0, 0)
    );
}

/// Per-room order with failures injected on first and second attempts, many events of a room
/// per batch (8 rooms, batches of 200): a room waits behind its retry, the others go on.
async fn partitioned_room_order_survives_failures(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 800, 8).await;
    let failures = Arc::new(Mutex::new(0u32));
    let failures_in = failures.clone();
    let recorder = Recorder::new(move |event: &Event| {
        let hash = event
            .event_id
            .bytes()
            .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        if event.attempt <= 2 && (hash + event.attempt).is_multiple_of(5) {
            *failures_in.lock().unwrap() += 1;
            Some(Outcome::retryable("injected"))
        } else {
            None
        }
    });
    let mut opts = partitioned("ordered", Duration::from_secs(30));
    opts.ordering = DeliveryOrder::PerRoom;
    opts.concurrency = 4;
    let worker = Worker::new(store.clone(), recorder.clone(), opts);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(RunMode::Forever, shutdown).await }
    });
    wait_until("800 rows delivered", Duration::from_secs(120), || async {
        let c = counts(&*store).await;
        if c.delivered >= 800 { Ok(()) } else { Err(c) }
    })
    .await;
    shutdown.cancel();
    run.await.unwrap().unwrap();
    assert!(*failures.lock().unwrap() > 50, "failures were injected");
    let seen = assert_room_order(&recorder);
    assert_eq!(seen.len(), 800);
}

/// The partitions `metrics` says this host owns.
fn owned(metrics: &Metrics) -> u64 {
    metrics
        .encode()
        .lines()
        .find(|line| line.starts_with("outboxd_partitions_owned{"))
        .and_then(|line| line.rsplit(' ').next())
        .and_then(|value| value.parse().ok())
        .unwrap_or(0)
}

/// Host A owns every partition; B joins and gets its share within two leases while rows keep
/// coming; B leaves and A gets them all back at once. Nothing is delivered twice (a partition
/// changes hands only once its batch is marked).
async fn a_joining_host_gets_its_share_and_a_leaving_one_hands_on(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let lease = Duration::from_millis(1_500);
    let seed = db.store_default().await;
    let partitions = u64::from(seed.partitions());
    let recorder = Recorder::with_delay(Duration::from_millis(2), |_| None);
    let start = |name: &str| {
        let metrics = Metrics::new();
        let recorder = recorder.clone();
        let name = name.to_string();
        let db = &db;
        async move {
            let worker = Worker::new(
                db.store_default().await,
                recorder,
                partitioned(&name, lease),
            )
            .with_metrics(metrics.clone());
            let shutdown = CancellationToken::new();
            let run = tokio::spawn({
                let shutdown = shutdown.clone();
                async move { worker.run(RunMode::Forever, shutdown).await }
            });
            (metrics, shutdown, run)
        }
    };
    let (metrics_a, stop_a, run_a) = start("host-a").await;
    wait_until(
        "A owns every partition",
        Duration::from_secs(10),
        || async {
            let n = owned(&metrics_a);
            if n == partitions { Ok(()) } else { Err(n) }
        },
    )
    .await;
    let writing = tokio::spawn({
        let seed = seed.clone();
        async move {
            for round in 0..20 {
                let records: Vec<_> = (0..100)
                    .map(|i| {
                        let n = round * 100 + i;
                        super::support::record(
                            "app",
                            &format!("j{n:05}"),
                            &format!("room-{}", n % 40),
                            outboxd::record::now_ms(),
                        )
                    })
                    .collect();
                seed.enqueue(&records).await.unwrap();
                tokio::time::sleep(Duration::from_millis(150)).await;
            }
        }
    });
    let (metrics_b, stop_b, run_b) = start("host-b").await;
    let joined = std::time::Instant::now();
    wait_until("B gets its share", Duration::from_secs(10), || async {
        let (a, b) = (owned(&metrics_a), owned(&metrics_b));
        if b == partitions / 2 && a == partitions - partitions / 2 {
            Ok(())
        } else {
            Err((a, b))
        }
    })
    .await;
    assert!(
        joined.elapsed() <= lease * 2 + Duration::from_millis(500),
        "rebalanced in {:?}, more than two leases",
        joined.elapsed()
    );
    writing.await.unwrap();
    stop_b.cancel();
    run_b.await.unwrap().unwrap();
    wait_until(
        "A owns every partition again",
        Duration::from_secs(10),
        || async {
            let n = owned(&metrics_a);
            if n == partitions { Ok(()) } else { Err(n) }
        },
    )
    .await;
    wait_until("2,000 rows delivered", Duration::from_secs(60), || async {
        let c = counts(&*seed).await;
        if c.delivered == 2_000 { Ok(()) } else { Err(c) }
    })
    .await;
    stop_a.cancel();
    run_a.await.unwrap().unwrap();
    let ids: Vec<String> = recorder.delivered_ids();
    let unique: HashSet<&String> = ids.iter().collect();
    assert_eq!(
        (ids.len(), unique.len()),
        (2_000, 2_000),
        "each row delivered once"
    );
}

/// Only where a table has more than one partition.
mod count_changed {
    use super::*;

    crate::support::per_backend!(
        [mysql, postgres] => a_host_whose_partition_count_changed_under_it_stops,
    );

    /// A host that started before the table's partition count changed (as one started while
    /// `outboxd migrate --partitions` ran would: the change refuses to start while a host is seen
    /// running, so the test hides it) stops at its next heartbeat with an error saying to restart
    /// it; a host started afterwards delivers every row.
    async fn a_host_whose_partition_count_changed_under_it_stops(backend: Backend) {
        let Some(db) = TestDb::new(backend).await else {
            return;
        };
        let seed = db.store_default().await;
        enqueue_many(&*seed, 500, 20).await;
        let lease = Duration::from_millis(1_500);
        // Each host a process of its own: a store of its own, which reads the count once.
        let start = |name: &str, store: Arc<dyn OutboxStore>| {
            let worker = Worker::new(
                store,
                Recorder::with_delay(Duration::from_millis(20), |_| None),
                partitioned(name, lease),
            );
            let shutdown = CancellationToken::new();
            let run = tokio::spawn({
                let shutdown = shutdown.clone();
                async move { worker.run(RunMode::Forever, shutdown).await }
            });
            (shutdown, run)
        };
        let (_stop_a, run_a) = start("host-a", seed.clone());
        // Host A running: its first heartbeat has read the count and taken partitions.
        let table = outboxd::store::DEFAULT_TABLE;
        wait_until(
            "host A takes partitions",
            Duration::from_secs(10),
            || async {
                let owned = db
                    .query_strings(
                        &format!(
                            "SELECT owner FROM {table}_partitions WHERE owner LIKE 'host-a#%'"
                        ),
                        &[],
                    )
                    .await;
                if owned.is_empty() {
                    Err("none yet")
                } else {
                    Ok(())
                }
            },
        )
        .await;
        let changer = db.store_default().await;
        wait_until(
            "the count changes under host A",
            Duration::from_secs(10),
            || async {
                db.execute(&format!("DELETE FROM {table}_hosts"), &[]).await;
                db.execute(
                    &format!("UPDATE {table}_partitions SET lease_until_ms = 0"),
                    &[],
                )
                .await;
                changer.repartition(8).await.map_err(|e| e.to_string())
            },
        )
        .await;
        let ended = tokio::time::timeout(lease * 2, run_a)
            .await
            .expect("host A stops within a heartbeat")
            .expect("host A's task");
        let error = ended.expect_err("host A ends with an error").to_string();
        assert!(
            error.contains("partitions per tenant") && error.contains("restart the host"),
            "{error}"
        );
        let (stop_b, run_b) = start("host-b", db.store_default().await);
        wait_until(
            "host B delivers every row",
            Duration::from_secs(30),
            || async {
                let c = counts(&*seed).await;
                if c.delivered == 500 { Ok(()) } else { Err(c) }
            },
        )
        .await;
        stop_b.cancel();
        run_b.await.unwrap().unwrap();
    }
}
