//! Worker-level tests on real SQLite, MariaDB and PostgreSQL: several hosts draining one table,
//! crashed workers, stale marks, retries, corrupt rows, per-room ordering under failures, and
//! graceful shutdown. Each test gets its own database (see `support`).

#[path = "worker/partitioned.rs"]
mod partitioned;
mod support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outboxd::publish::{Event, Outcome, Publisher};
use outboxd::record::now_ms;
use outboxd::retry::{RetryPolicy, Strategy};
use outboxd::store::{
    ClaimParams, CountsParams, DeliveryOrder, Disposition, Mark, MarkParams, MigrateOptions,
    OutboxStore, StoreError,
};
use outboxd::worker::{DUE_SCAN_INTERVAL, RunMode, Worker, WorkerOptions};
use support::{Backend, RawInsert, TestDb, record, wait_until};
use tokio_util::sync::CancellationToken;

/// Decides, per event, whether this attempt fails (and how).
type FailWhen = Box<dyn Fn(&Event) -> Option<Outcome> + Send + Sync>;

/// Records every delivery; `fail` decides, per event, whether this attempt fails.
struct Recorder {
    delivered: Mutex<Vec<Event>>,
    attempts: Mutex<HashMap<String, Vec<u32>>>,
    in_flight_rooms: Mutex<HashSet<String>>,
    concurrent_room_violation: Mutex<Option<String>>,
    delay: Duration,
    fail: FailWhen,
}

impl Recorder {
    fn new(fail: impl Fn(&Event) -> Option<Outcome> + Send + Sync + 'static) -> Arc<Recorder> {
        Self::with_delay(Duration::ZERO, fail)
    }

    fn with_delay(
        delay: Duration,
        fail: impl Fn(&Event) -> Option<Outcome> + Send + Sync + 'static,
    ) -> Arc<Recorder> {
        Arc::new(Recorder {
            delivered: Mutex::default(),
            attempts: Mutex::default(),
            in_flight_rooms: Mutex::default(),
            concurrent_room_violation: Mutex::default(),
            delay,
            fail: Box::new(fail),
        })
    }

    fn delivered_ids(&self) -> Vec<String> {
        self.delivered
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.event_id.clone())
            .collect()
    }
}

#[async_trait]
impl Publisher for Recorder {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        {
            let mut rooms = self.in_flight_rooms.lock().unwrap();
            for event in batch {
                if !rooms.insert(event.room_id.clone()) {
                    *self.concurrent_room_violation.lock().unwrap() = Some(event.room_id.clone());
                }
            }
        }
        if !self.delay.is_zero() {
            // The sink's configured delay (part of the test that sets one).
            tokio::time::sleep(self.delay).await;
        }
        let outcomes: Vec<Outcome> = batch
            .iter()
            .map(|event| {
                self.attempts
                    .lock()
                    .unwrap()
                    .entry(event.event_id.clone())
                    .or_default()
                    .push(event.attempt);
                match (self.fail)(event) {
                    Some(outcome) => outcome,
                    None => {
                        self.delivered.lock().unwrap().push(event.clone());
                        Outcome::Delivered
                    }
                }
            })
            .collect();
        let mut rooms = self.in_flight_rooms.lock().unwrap();
        for event in batch {
            rooms.remove(&event.room_id);
        }
        outcomes
    }
}

fn options(node_id: &str) -> WorkerOptions {
    WorkerOptions {
        app_codes: vec!["app".into()],
        batch_size: 200,
        poll_interval: Duration::from_millis(10),
        idle_probe: Duration::from_millis(10),
        lease: Duration::from_secs(30),
        publish_timeout: Duration::from_secs(10),
        retry: RetryPolicy {
            strategy: Strategy::FixedInterval {
                interval: Duration::from_millis(1),
            },
            max_attempts: 5,
        },
        ordering: DeliveryOrder::None,
        concurrency: 1,
        node_id: node_id.into(),
    }
}

async fn enqueue_many(store: &dyn OutboxStore, count: usize, rooms: usize) {
    let base = now_ms() - 60_000;
    let records: Vec<_> = (0..count)
        .map(|i| {
            record(
                "app",
                &format!("e{i:06}"),
                &format!("room-{}", i % rooms),
                base + i as i64,
            )
        })
        .collect();
    for chunk in records.chunks(1000) {
        store.enqueue(chunk).await.unwrap();
    }
}

async fn counts(store: &dyn OutboxStore) -> outboxd::store::StatusCounts {
    store
        .counts(&CountsParams {
            app_code: Some("app".into()),
            now_ms: now_ms(),
        })
        .await
        .unwrap()
}

/// Three hosts (own pools, own worker ids) drain 10k events concurrently: each delivered once.
async fn three_hosts_drain_10k_exactly_once(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let seed = db.store_default().await;
    enqueue_many(&*seed, 10_000, 100).await;
    let recorder = Recorder::new(|_| None);
    let mut runs = Vec::new();
    for host in 0..3 {
        let store = db.store_default().await;
        let worker = Worker::new(store, recorder.clone(), options(&format!("host-{host}")));
        runs.push(tokio::spawn(async move {
            worker.run(RunMode::Drain, CancellationToken::new()).await
        }));
    }
    let mut per_host = Vec::new();
    for run in runs {
        per_host.push(run.await.unwrap().unwrap().delivered);
    }
    let ids = recorder.delivered_ids();
    let unique: HashSet<_> = ids.iter().collect();
    assert_eq!(ids.len(), 10_000, "deliveries (per host {per_host:?})");
    assert_eq!(unique.len(), 10_000, "an event was delivered twice");
    assert_eq!(per_host.iter().sum::<u64>(), 10_000);
    let c = counts(&*seed).await;
    assert_eq!((c.delivered, c.pending, c.delivering), (10_000, 0, 0));
}

/// A worker that dies mid-batch (claims, never marks) loses the batch when its lease expires;
/// another host finishes it, counting the lost attempt; the dead worker's late mark is stale.
async fn crashed_worker_batch_is_finished_by_another(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 50, 5).await;
    let crashed = store
        .claim(&ClaimParams {
            app_code: "app".into(),
            worker_id: "crashed/0".into(),
            limit: 20,
            lease_ms: 300,
            now_ms: now_ms(),
            max_attempts: 5,
            ordering: DeliveryOrder::None,
            scan_due: true,
        })
        .await
        .unwrap();
    assert_eq!(crashed.events.len(), 20);
    // The crashed worker's lease expires: a poll on its rows, not a sleep of the lease length.
    let leased: Vec<String> = crashed
        .events
        .iter()
        .map(|c| c.event.event_id.clone())
        .collect();
    wait_until(
        "the crashed worker's lease expired",
        Duration::from_secs(10),
        || async {
            let now = now_ms();
            let mut live = Vec::new();
            for id in &leased {
                let row = db.row("app", id).await.unwrap();
                if row.lock_until_ms.is_none_or(|until| until >= now) {
                    live.push((id.clone(), row.status, row.lock_until_ms));
                }
            }
            if live.is_empty() {
                Ok(())
            } else {
                Err((now, live))
            }
        },
    )
    .await;

    let recorder = Recorder::new(|_| None);
    let survivor = Worker::new(
        db.store_default().await,
        recorder.clone(),
        options("survivor"),
    );
    let stats = survivor
        .run(RunMode::Drain, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!(stats.delivered, 50);
    let reclaimed = &crashed.events[0].event.event_id;
    let attempts = recorder.attempts.lock().unwrap().get(reclaimed).cloned();
    assert_eq!(
        attempts,
        Some(vec![2]),
        "reclaimed lease counts as an attempt"
    );
    let row = db.row("app", reclaimed).await.unwrap();
    assert_eq!((row.status.as_str(), row.retry_count), ("delivered", 1));

    // The crashed worker wakes up and marks its old batch as failed: nothing changes.
    let marks: Vec<Mark> = crashed
        .events
        .iter()
        .map(|c| Mark {
            event_id: c.event.event_id.clone(),
            disposition: Disposition::Failed {
                error: "late".into(),
            },
        })
        .collect();
    let report = store
        .mark(&MarkParams {
            lease: &crashed.lease,
            marks: &marks,
            now_ms: now_ms(),
        })
        .await
        .unwrap();
    assert_eq!(report.applied, 0);
    assert_eq!(report.stale.len(), 20);
    assert_eq!(counts(&*store).await.delivered, 50);
}

/// Retryable failures are retried with the policy, then the row goes to `failed` at max_attempts.
async fn retries_then_fails_at_max_attempts(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 10, 10).await;
    let recorder = Recorder::new(|event| {
        (event.event_id == "e000003").then(|| Outcome::retryable("sink unavailable"))
    });
    let mut opts = options("retrier");
    opts.retry.max_attempts = 3;
    let worker = Worker::new(store.clone(), recorder.clone(), opts);
    // One batch at a time until the row has failed (each poll runs one batch).
    let row = wait_until("e000003 failed", Duration::from_secs(20), || async {
        worker.process_batch("retrier/0", "app").await.unwrap();
        let row = db.row("app", "e000003").await.unwrap();
        if row.status == "failed" {
            Ok(row)
        } else {
            Err((row.status, row.retry_count))
        }
    })
    .await;
    assert_eq!(row.retry_count, 3);
    assert_eq!(
        row.last_error.as_deref(),
        Some("gave up after 3 attempts: sink unavailable")
    );
    assert_eq!(recorder.attempts.lock().unwrap()["e000003"], vec![1, 2, 3]);
    assert_eq!(counts(&*store).await.delivered, 9);
}

/// A permanent error fails the row at once; a retry-after from the sink sets next_retry_at_ms.
async fn permanent_fails_and_retry_after_wins(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 3, 3).await;
    let recorder = Recorder::new(|event| match event.event_id.as_str() {
        "e000000" => Some(Outcome::permanent("group gone")),
        "e000001" => Some(Outcome::Retryable {
            message: "rate limited".into(),
            retry_after: Some(Duration::from_secs(120)),
        }),
        _ => None,
    });
    let worker = Worker::new(store.clone(), recorder, options("w"));
    let before = now_ms();
    let stats = worker.process_batch("w/0", "app").await.unwrap();
    assert_eq!((stats.delivered, stats.retried, stats.failed), (1, 1, 1));
    let failed = db.row("app", "e000000").await.unwrap();
    assert_eq!(
        (failed.status.as_str(), failed.last_error.as_deref()),
        ("failed", Some("group gone"))
    );
    let retry = db.row("app", "e000001").await.unwrap();
    assert_eq!(retry.status, "retryable");
    let next = retry.next_retry_at_ms.unwrap();
    assert!(
        next >= before + 120_000 && next <= now_ms() + 120_000,
        "retry-after ignored: {next}"
    );
}

/// A corrupt envelope fails alone; the rest of the batch is delivered.
async fn corrupt_envelope_is_isolated(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 5, 5).await;
    db.insert_raw(
        outboxd::store::DEFAULT_TABLE,
        &[
            RawInsert::pending("app", "bad", "room-x", now_ms() - 120_000)
                .with_envelope(vec![0xff, 0xff, 0xff, 0x01]),
        ],
    )
    .await;
    let recorder = Recorder::new(|_| None);
    let worker = Worker::new(store.clone(), recorder.clone(), options("w"));
    let stats = worker
        .run(RunMode::Drain, CancellationToken::new())
        .await
        .unwrap();
    assert_eq!((stats.delivered, stats.rejected), (5, 1));
    let bad = db.row("app", "bad").await.unwrap();
    assert_eq!(bad.status, "failed");
    assert!(
        bad.last_error.unwrap_or_default().contains("envelope"),
        "decode error recorded"
    );
}

/// A publisher that overruns the publish timeout, or returns the wrong number of results, fails
/// the batch as retryable with the reason.
async fn timeout_and_wrong_result_count_are_retryable(backend: Backend) {
    struct Slow;
    #[async_trait]
    impl Publisher for Slow {
        async fn publish(&self, _: &[Event]) -> Vec<Outcome> {
            // Overruns the publish timeout: the sink's delay is what is tested.
            tokio::time::sleep(Duration::from_secs(5)).await;
            Vec::new()
        }
    }
    struct Short;
    #[async_trait]
    impl Publisher for Short {
        async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
            vec![Outcome::Delivered; batch.len() - 1]
        }
    }
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 4, 4).await;
    let mut opts = options("w");
    opts.publish_timeout = Duration::from_millis(100);
    opts.retry.strategy = Strategy::FixedInterval {
        interval: Duration::ZERO,
    };
    let stats = Worker::new(store.clone(), Arc::new(Slow), opts.clone())
        .process_batch("w/0", "app")
        .await
        .unwrap();
    assert_eq!(stats.retried, 4);
    let row = db.row("app", "e000000").await.unwrap();
    assert_eq!(
        row.last_error.as_deref(),
        Some("publish timed out after 100ms (worker.publish_timeout)")
    );
    let stats = Worker::new(store.clone(), Arc::new(Short), opts)
        .process_batch("w/0", "app")
        .await
        .unwrap();
    assert_eq!(stats.retried, 4);
    let row = db.row("app", "e000000").await.unwrap();
    assert_eq!(
        row.last_error.as_deref(),
        Some("publisher returned 3 results for 4 events")
    );
    assert_eq!(row.retry_count, 2);
}

/// Per-room ordering holds while failures are injected and four loops run concurrently: every
/// room's events are delivered in room_version order, never two of a room at once.
async fn per_room_ordering_survives_failures(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 400, 20).await;
    let failures = Arc::new(Mutex::new(0u32));
    let failures_in = failures.clone();
    let recorder = Recorder::new(move |event| {
        // Fail roughly a third of first and second attempts, deterministically by id.
        let hash = event
            .event_id
            .bytes()
            .fold(7u32, |h, b| h.wrapping_mul(31).wrapping_add(u32::from(b)));
        if event.attempt <= 2 && (hash + event.attempt) % 3 == 0 {
            *failures_in.lock().unwrap() += 1;
            Some(Outcome::retryable("injected"))
        } else {
            None
        }
    });
    let mut opts = options("ordered");
    opts.ordering = DeliveryOrder::PerRoom;
    opts.concurrency = 4;
    opts.batch_size = 50;
    let worker = Worker::new(store.clone(), recorder.clone(), opts);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(RunMode::Forever, shutdown).await }
    });
    wait_until("400 rows delivered", Duration::from_secs(120), || async {
        let c = counts(&*store).await;
        if c.delivered >= 400 { Ok(()) } else { Err(c) }
    })
    .await;
    shutdown.cancel();
    run.await.unwrap().unwrap();
    assert!(*failures.lock().unwrap() > 50, "failures were injected");
    assert_eq!(*recorder.concurrent_room_violation.lock().unwrap(), None);
    let mut last_version: HashMap<String, i64> = HashMap::new();
    for event in recorder.delivered.lock().unwrap().iter() {
        let previous = last_version.insert(event.room_id.clone(), event.room_version);
        assert!(
            previous.is_none_or(|p| p < event.room_version),
            "room {} delivered version {} after {:?}",
            event.room_id,
            event.room_version,
            previous
        );
    }
    assert_eq!(last_version.len(), 20);
}

/// Shutdown while batches are in flight: they are published and marked, nothing stays delivering.
async fn graceful_shutdown_leaves_nothing_delivering(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 2_000, 50).await;
    let recorder = Recorder::with_delay(Duration::from_millis(300), |_| None);
    let mut opts = options("stopper");
    opts.concurrency = 2;
    opts.batch_size = 100;
    let worker = Worker::new(store.clone(), recorder.clone(), opts);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(RunMode::Forever, shutdown).await }
    });
    // Shut down while batches are in flight (each publish takes 300 ms).
    wait_until("a batch in flight", Duration::from_secs(20), || async {
        let c = counts(&*store).await;
        if c.delivering > 0 { Ok(()) } else { Err(c) }
    })
    .await;
    shutdown.cancel();
    let stats = run.await.unwrap().unwrap();
    let c = counts(&*store).await;
    assert_eq!(c.delivering, 0, "rows left delivering: {c:?}");
    assert_eq!(c.delivered, stats.delivered);
    assert!(c.delivered > 0 && c.delivered < 2_000, "{c:?}");
    assert_eq!(c.pending, 2_000 - c.delivered);
}

/// A sink that answers when the test says so (or never).
struct Held {
    release: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Publisher for Held {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        self.release.notified().await;
        vec![Outcome::Delivered; batch.len()]
    }
}

/// Polls until every row of `ids` has `status`, or panics after 20 s with `what` and the rows
/// that have not.
async fn wait_for_statuses(db: &TestDb, ids: &[String], status: &str, what: &str) {
    wait_until(what, Duration::from_secs(20), || async {
        let mut other = Vec::new();
        for id in ids {
            let row = db.row("app", id).await.unwrap();
            if row.status != status {
                other.push((id.clone(), row.status));
            }
        }
        if other.is_empty() { Ok(()) } else { Err(other) }
    })
    .await
}

/// Sinks are isolated: a quick sink's events are marked `delivered` (and an unrouted event
/// `failed`) while another sink of the same batch is still publishing; when the worker's publish
/// deadline passes, only the events still unanswered become retryable — results already
/// obtained are kept.
async fn a_slow_sink_never_holds_up_another(backend: Backend) {
    use outboxd::plugin::RoutedPublisher;
    use outboxd::plugin::router::Route;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let base = now_ms() - 60_000;
    let mut records = Vec::new();
    let (mut quick_ids, mut held_ids) = (Vec::new(), Vec::new());
    for i in 0..30 {
        let (event_type, ids) = if i % 3 == 0 {
            ("Held.x", &mut held_ids)
        } else {
            ("Quick.x", &mut quick_ids)
        };
        let id = format!("e{i:03}");
        records.push(support::typed_record(
            "app",
            &id,
            "room",
            event_type,
            base + i,
        ));
        ids.push(id);
    }
    records.push(support::typed_record(
        "app",
        "lost",
        "room",
        "Nowhere",
        base + 99,
    ));
    store.enqueue(&records).await.unwrap();
    let release = Arc::new(tokio::sync::Notify::new());
    let route = |event_type: &str, sink: &str, publisher: Arc<dyn Publisher>| Route {
        event_type: event_type.into(),
        sink: sink.into(),
        publisher,
    };
    let held: Arc<dyn Publisher> = Arc::new(Held {
        release: release.clone(),
    });
    let router = RoutedPublisher::new(vec![
        route("Quick*", "quick", Recorder::new(|_| None)),
        route("Held*", "held", held),
    ]);
    let router = Arc::new(router);

    // 1. While `held` has not answered, `quick`'s rows are delivered and `lost` has failed.
    let mut opts = options("w");
    opts.publish_timeout = Duration::from_secs(60);
    let worker = Worker::new(store.clone(), router.clone(), opts.clone());
    let batch = tokio::spawn(async move { worker.process_batch("w/0", "app").await });
    wait_for_statuses(
        &db,
        &quick_ids,
        "delivered",
        "quick sink's rows held up by the held sink",
    )
    .await;
    wait_for_statuses(&db, &["lost".to_string()], "failed", "unrouted row held up").await;
    for id in &held_ids {
        assert_eq!(db.row("app", id).await.unwrap().status, "delivering");
    }
    release.notify_waiters();
    let stats = batch.await.unwrap().unwrap();
    assert_eq!((stats.delivered, stats.failed, stats.retried), (30, 1, 0));
    assert_eq!(
        db.row("app", "lost").await.unwrap().last_error.as_deref(),
        Some("no route for event type `Nowhere`")
    );

    // 2. A sink that never answers: the worker deadline makes only its rows retryable.
    let more: Vec<_> = (0..6)
        .map(|i| {
            let event_type = if i % 2 == 0 { "Held.y" } else { "Quick.y" };
            support::typed_record("app", &format!("f{i}"), "room", event_type, base + 200 + i)
        })
        .collect();
    store.enqueue(&more).await.unwrap();
    opts.publish_timeout = Duration::from_millis(700);
    let stats = Worker::new(store.clone(), router, opts)
        .process_batch("w/0", "app")
        .await
        .unwrap();
    assert_eq!((stats.delivered, stats.retried), (3, 3));
    for i in 0..6 {
        let row = db.row("app", &format!("f{i}")).await.unwrap();
        if i % 2 == 0 {
            assert_eq!(row.status, "retryable");
            assert_eq!(
                row.last_error.as_deref(),
                Some("publish timed out after 700ms (worker.publish_timeout)")
            );
        } else {
            assert_eq!(
                row.status, "delivered",
                "an answered result was thrown away"
            );
        }
    }
}

/// A database that goes away mid-run: a draining run reports the error instead of hanging.
async fn draining_run_reports_a_dead_database(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 10, 10).await;
    store.close().await;
    let worker = Worker::new(store, Recorder::new(|_| None), options("w"));
    let err = worker
        .run(RunMode::Drain, CancellationToken::new())
        .await
        .unwrap_err();
    let outboxd::worker::WorkerError::Store(StoreError::Database { op, .. }) = err else {
        panic!("unexpected error {err}");
    };
    assert_eq!(op, "claim");
}

/// A loop claims its next batch while one publishes, but publishes it only after the one before
/// it is marked (never two of a loop's batches publishing at once), and a batch that waited so
/// long that its lease could not hold a publish goes back untried, no attempt spent: published
/// past its lease, a second host (B, polling) would take the expired rows over and publish them
/// again.
async fn a_batch_claimed_ahead_waits_its_turn_within_its_lease(backend: Backend) {
    #[derive(Default)]
    struct Paced {
        active: AtomicUsize,
        most_active: AtomicUsize,
        attempts: Arc<Mutex<HashMap<String, Vec<u32>>>>,
    }
    #[async_trait]
    impl Publisher for Paced {
        async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
            let now = self.active.fetch_add(1, AtomicOrdering::SeqCst) + 1;
            self.most_active.fetch_max(now, AtomicOrdering::SeqCst);
            for event in batch {
                let mut attempts = self.attempts.lock().unwrap();
                attempts
                    .entry(event.event_id.clone())
                    .or_default()
                    .push(event.attempt);
            }
            // The sink's pace, part of the test: a publish that leaves a batch claimed ahead
            // too little lease.
            tokio::time::sleep(Duration::from_millis(1_450)).await;
            self.active.fetch_sub(1, AtomicOrdering::SeqCst);
            vec![Outcome::Delivered; batch.len()]
        }
    }
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 4, 4).await;
    let attempts = Arc::new(Mutex::new(HashMap::new()));
    let paced = |attempts: &Arc<Mutex<HashMap<String, Vec<u32>>>>| {
        Arc::new(Paced {
            attempts: attempts.clone(),
            ..Paced::default()
        })
    };
    let (a, b) = (paced(&attempts), paced(&attempts));
    let mut opts = options("a");
    opts.batch_size = 2;
    // A batch that waited ~1.45 s for its turn has ~1 s of lease left: too little for a publish
    // of up to 1.5 s plus its mark.
    opts.lease = Duration::from_millis(2_500);
    opts.publish_timeout = Duration::from_millis(1_500);
    let host_a = Worker::new(store.clone(), a.clone(), opts.clone());
    let run_a =
        tokio::spawn(async move { host_a.run(RunMode::Drain, CancellationToken::new()).await });
    // B starts once A publishes its first batch and, where writers run side by side, holds the
    // second claimed ahead (SQLite claims only after the mark).
    let ids: Vec<String> = (0..4).map(|i| format!("e{i:06}")).collect();
    let held_by_a = if store.backend().concurrent_writers() {
        4
    } else {
        2
    };
    wait_until(
        "A publishes and holds what it claims ahead",
        Duration::from_secs(20),
        || async {
            let publishing = a.active.load(AtomicOrdering::SeqCst);
            let mut delivering = 0;
            for id in &ids {
                delivering += usize::from(db.row("app", id).await.unwrap().status == "delivering");
            }
            if publishing == 1 && delivering == held_by_a {
                Ok(())
            } else {
                Err((publishing, delivering))
            }
        },
    )
    .await;
    let shutdown = CancellationToken::new();
    opts.node_id = "b".into();
    let host_b = Worker::new(db.store_default().await, b.clone(), opts);
    let run_b = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { host_b.run(RunMode::Forever, shutdown).await }
    });
    run_a.await.unwrap().unwrap();
    wait_for_statuses(&db, &ids, "delivered", "all four delivered").await;
    shutdown.cancel();
    run_b.await.unwrap().unwrap();
    for host in [&a, &b] {
        assert!(
            host.most_active.load(AtomicOrdering::SeqCst) <= 1,
            "two batches of one loop published at once"
        );
    }
    let attempts = attempts.lock().unwrap().clone();
    assert_eq!(attempts.len(), 4);
    assert!(
        attempts.values().all(|a| a == &vec![1]),
        "each event published once, at attempt 1: {attempts:?}"
    );
    for id in &ids {
        assert_eq!(db.row("app", id).await.unwrap().retry_count, 0, "{id}");
    }
}

/// While new rows keep arriving (so claims find pending rows and may skip the due branches), a
/// retryable row that is due and a dead worker's expired lease are still claimed, the lease as
/// an attempt, before the stream stops; and no claim skipped the due branches longer than
/// [`DUE_SCAN_INTERVAL`] after the last one that read them.
async fn due_rows_are_claimed_while_new_rows_keep_coming(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = Arc::new(SpyStore::new(db.store_default().await));
    let recorder = Recorder::new(|_| None);
    let shutdown = CancellationToken::new();
    let worker = Worker::new(store.clone(), recorder.clone(), options("w"));
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(RunMode::Forever, shutdown).await }
    });
    // A new row every 2 ms for 4 s.
    let producer = tokio::spawn({
        let store = store.clone();
        async move {
            let mut tick = tokio::time::interval(Duration::from_millis(2));
            let started = Instant::now();
            let mut i = 0;
            while started.elapsed() < Duration::from_secs(4) {
                tick.tick().await;
                let rec = record("app", &format!("new{i:05}"), "room", now_ms());
                store.enqueue(&[rec]).await.expect("enqueue");
                i += 1;
            }
            Instant::now()
        }
    });
    // The due rows come while the stream flows: once the worker is delivering its rows.
    wait_until("the stream delivered", Duration::from_secs(10), || async {
        let delivered = recorder.delivered_ids().len();
        if delivered >= 100 {
            Ok(())
        } else {
            Err(delivered)
        }
    })
    .await;
    let now = now_ms();
    db.insert_raw(
        outboxd::store::DEFAULT_TABLE,
        &[
            RawInsert {
                retry_count: Some(1),
                next_retry_at_ms: Some(now),
                ..RawInsert::pending("app", "due-retry", "room-r", now - 10_000)
            }
            .with_status("retryable"),
            RawInsert {
                worker_id: Some("dead/0".into()),
                lock_until_ms: Some(now - 1),
                ..RawInsert::pending("app", "dead-lease", "room-d", now - 10_000)
            }
            .with_status("delivering"),
        ],
    )
    .await;
    let inserted = Instant::now();
    let due = ["due-retry".to_string(), "dead-lease".to_string()];
    let delivered_at = wait_until(
        "the due rows delivered",
        Duration::from_secs(30),
        || async {
            let delivered = recorder.delivered_ids();
            if due.iter().all(|id| delivered.contains(id)) {
                Ok(Instant::now())
            } else {
                Err(delivered.len())
            }
        },
    )
    .await;
    let stream_stopped = producer.await.unwrap();
    shutdown.cancel();
    run.await.unwrap().unwrap();
    assert!(
        delivered_at < stream_stopped,
        "the due rows waited {:?}, until new rows stopped coming",
        delivered_at - inserted
    );
    let attempts = recorder.attempts.lock().unwrap().clone();
    assert_eq!(attempts["due-retry"], vec![2]);
    assert_eq!(
        attempts["dead-lease"],
        vec![2],
        "the reclaimed lease is an attempt"
    );
    let claims = store.claims.lock().unwrap().clone();
    assert!(
        claims.iter().any(|(_, scan_due)| !scan_due),
        "no claim skipped the due branches: the test did not exercise the skip"
    );
    // Noted when the store is called, after the worker read the clock to decide (on a loaded
    // machine, a thread descheduled in between adds milliseconds); a loop that stopped scanning
    // would show seconds.
    let slack = DUE_SCAN_INTERVAL;
    let mut last_scan = None;
    for (at, scan_due) in claims {
        if scan_due {
            last_scan = Some(at);
        } else {
            let since = at - last_scan.expect("the first claim reads the due branches");
            assert!(
                since < DUE_SCAN_INTERVAL + slack,
                "a claim skipped the due branches {since:?} after the last scan"
            );
        }
    }
}

/// Where writers run side by side, a loop claims up to two batches ahead while its deliveries
/// are quick: the third batch is claimed while the first still publishes (so claims and marks
/// overlap without waiting for each other every round), still with one batch publishing at a
/// time and each event published once. On SQLite a loop claims only after its batch is marked.
async fn a_loop_claims_two_batches_ahead_of_quick_deliveries(backend: Backend) {
    const PUBLISH: Duration = Duration::from_millis(1_000);
    #[derive(Default)]
    struct Slow {
        active: AtomicUsize,
        most_active: AtomicUsize,
        published: Mutex<Vec<String>>,
    }
    #[async_trait]
    impl Publisher for Slow {
        async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
            let now = self.active.fetch_add(1, AtomicOrdering::SeqCst) + 1;
            self.most_active.fetch_max(now, AtomicOrdering::SeqCst);
            let ids = batch.iter().map(|event| event.event_id.clone());
            self.published.lock().unwrap().extend(ids);
            // The sink's configured delay (part of the test).
            tokio::time::sleep(PUBLISH).await;
            self.active.fetch_sub(1, AtomicOrdering::SeqCst);
            vec![Outcome::Delivered; batch.len()]
        }
    }
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = Arc::new(SpyStore::new(db.store_default().await));
    enqueue_many(&*store, 6, 6).await;
    let mut opts = options("w");
    opts.batch_size = 2;
    let publisher = Arc::new(Slow::default());
    Worker::new(store.clone(), publisher.clone(), opts)
        .run(RunMode::Drain, CancellationToken::new())
        .await
        .unwrap();
    let claims = store.claims.lock().unwrap().clone();
    assert!(claims.len() >= 3, "{} claims", claims.len());
    let third = claims[2].0 - claims[0].0;
    if store.backend().concurrent_writers() {
        assert!(
            third < PUBLISH,
            "the third batch was claimed {third:?} after the first, once the first was marked: \
             only one batch claimed ahead"
        );
    } else {
        assert!(
            third >= 2 * PUBLISH,
            "SQLite: the third batch was claimed {third:?} after the first, before two were marked"
        );
    }
    assert_eq!(
        publisher.most_active.load(AtomicOrdering::SeqCst),
        1,
        "two batches of one loop published at once"
    );
    let mut published = publisher.published.lock().unwrap().clone();
    published.sort();
    let expected: Vec<String> = (0..6).map(|i| format!("e{i:06}")).collect();
    assert_eq!(published, expected, "each event published once");
}

/// A worker with per-room ordering on a table without the room index refuses to start: the
/// error names the index and the fix, and nothing is claimed; after `migrate` with the room
/// index the same worker drains the table.
async fn per_room_worker_refuses_without_the_room_index(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 6, 2).await;
    let recorder = Recorder::new(|_| None);
    let mut opts = options("ordered");
    opts.ordering = DeliveryOrder::PerRoom;
    let worker = Worker::new(store.clone(), recorder.clone(), opts);
    let err = worker
        .run(RunMode::Drain, CancellationToken::new())
        .await
        .expect_err("per-room ordering without the room index");
    let message = err.to_string();
    assert!(
        message.contains("table room_outbox has no index idx_room_outbox_room")
            && message.contains("run `outboxd migrate` with worker.ordering = \"per-room\""),
        "{message}"
    );
    assert_eq!(counts(&*store).await.pending, 6, "nothing claimed");
    assert!(recorder.delivered.lock().unwrap().is_empty());
    store
        .migrate_with(&MigrateOptions { room_index: true })
        .await
        .expect("migrate with the room index");
    let stats = worker
        .run(RunMode::Drain, CancellationToken::new())
        .await
        .expect("per-room worker with the room index");
    assert_eq!(stats.delivered, 6);
}

/// The store of a worker under test: when each leased claim started and whether it asked for
/// the due branches ([`ClaimParams::scan_due`]), which rows leased and held claims handed out,
/// and (with `late_rows_at`) 10 rows committed just before the leased claim of that number
/// (0-based; reclaims count), as a producer committing between two claims.
struct SpyStore {
    inner: Arc<dyn OutboxStore>,
    late_rows_at: Option<usize>,
    leased_calls: AtomicUsize,
    claims: Mutex<Vec<(Instant, bool)>>,
    held_ids: Mutex<Vec<String>>,
    leased_ids: Mutex<Vec<String>>,
}

impl SpyStore {
    fn new(inner: Arc<dyn OutboxStore>) -> SpyStore {
        SpyStore {
            inner,
            late_rows_at: None,
            leased_calls: AtomicUsize::new(0),
            claims: Mutex::default(),
            held_ids: Mutex::default(),
            leased_ids: Mutex::default(),
        }
    }

    /// Notes a leased claim (or reclaim); commits the late rows first when it is their turn.
    async fn before_leased_claim(&self, scan_due: bool) {
        self.claims.lock().unwrap().push((Instant::now(), scan_due));
        let call = self.leased_calls.fetch_add(1, AtomicOrdering::SeqCst);
        if self.late_rows_at == Some(call) {
            let now = now_ms();
            let records: Vec<_> = (0..10)
                .map(|i| record("app", &format!("late{i:02}"), "room-l", now + i))
                .collect();
            self.inner.enqueue(&records).await.expect("enqueue");
        }
    }

    fn note(list: &Mutex<Vec<String>>, batch: &outboxd::store::ClaimBatch) {
        let ids = batch.events.iter().map(|e| e.event.event_id.clone());
        list.lock().unwrap().extend(ids);
    }
}

#[async_trait]
impl OutboxStore for SpyStore {
    fn backend(&self) -> outboxd::store::Backend {
        self.inner.backend()
    }
    fn table(&self) -> &outboxd::store::TableName {
        self.inner.table()
    }
    async fn migrate_with(&self, options: &MigrateOptions) -> Result<Vec<i64>, StoreError> {
        self.inner.migrate_with(options).await
    }
    async fn check_ordering(&self, ordering: DeliveryOrder) -> Result<(), StoreError> {
        self.inner.check_ordering(ordering).await
    }
    async fn enqueue(&self, records: &[outboxd::record::Record]) -> Result<u64, StoreError> {
        self.inner.enqueue(records).await
    }
    async fn claim(&self, params: &ClaimParams) -> Result<outboxd::store::ClaimBatch, StoreError> {
        self.before_leased_claim(params.scan_due).await;
        let batch = self.inner.claim(params).await?;
        Self::note(&self.leased_ids, &batch);
        Ok(batch)
    }
    async fn reclaim_expired(
        &self,
        params: &ClaimParams,
    ) -> Result<outboxd::store::ClaimBatch, StoreError> {
        self.before_leased_claim(params.scan_due).await;
        let batch = self.inner.reclaim_expired(params).await?;
        Self::note(&self.leased_ids, &batch);
        Ok(batch)
    }
    async fn claim_held(
        &self,
        params: &ClaimParams,
    ) -> Result<outboxd::store::HeldBatch, StoreError> {
        let batch = self.inner.claim_held(params).await?;
        let ids = batch.events.iter().map(|e| e.event.event_id.clone());
        self.held_ids.lock().unwrap().extend(ids);
        Ok(batch)
    }
    async fn mark(
        &self,
        params: &MarkParams<'_>,
    ) -> Result<outboxd::store::MarkReport, StoreError> {
        self.inner.mark(params).await
    }
    async fn counts(
        &self,
        params: &CountsParams,
    ) -> Result<outboxd::store::StatusCounts, StoreError> {
        self.inner.counts(params).await
    }
    async fn list_failed(
        &self,
        params: &outboxd::store::ListFailedParams,
    ) -> Result<Vec<outboxd::store::FailedRow>, StoreError> {
        self.inner.list_failed(params).await
    }
    async fn requeue(&self, params: &outboxd::store::RequeueParams) -> Result<u64, StoreError> {
        self.inner.requeue(params).await
    }
    async fn purge(&self, params: &outboxd::store::PurgeParams) -> Result<u64, StoreError> {
        self.inner.purge(params).await
    }
    async fn close(&self) {
        self.inner.close().await
    }
}

/// A held-mode worker's leased claim after a held claim that came back short reclaims expired
/// leases only: rows a producer commits between the two are held by the next held claim, not
/// leased (leasing them would write each row twice, and a host killed while publishing them
/// would spend their attempt). Only the warm-up row is handed out leased.
async fn a_held_worker_holds_rows_committed_between_its_claims(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    // The second leased claim is the first after the one-loop warm-up.
    let store = Arc::new(SpyStore {
        late_rows_at: Some(1),
        ..SpyStore::new(db.store_default().await)
    });
    store
        .enqueue(&[record("app", "warm-up", "room-w", now_ms())])
        .await
        .expect("enqueue");
    let recorder = Recorder::new(|_| None);
    let mut opts = options("held");
    opts.mode = WorkerMode::Held;
    opts.publish_timeout = Duration::from_secs(5);
    let worker = Worker::new(store.clone(), recorder.clone(), opts);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(RunMode::Forever, shutdown).await }
    });
    wait_until("11 rows delivered", Duration::from_secs(30), || async {
        let delivered = recorder.delivered_ids();
        if delivered.len() >= 11 {
            Ok(())
        } else {
            Err(delivered)
        }
    })
    .await;
    shutdown.cancel();
    run.await.unwrap().unwrap();
    assert!(
        store.leased_calls.load(AtomicOrdering::SeqCst) >= 2,
        "the test did not reach a leased claim after the warm-up"
    );
    assert_eq!(
        *store.leased_ids.lock().unwrap(),
        vec!["warm-up".to_string()]
    );
    let mut held = store.held_ids.lock().unwrap().clone();
    held.sort();
    let late: Vec<String> = (0..10).map(|i| format!("late{i:02}")).collect();
    assert_eq!(held, late, "the late rows are held");
}

support::per_backend!(
    per_room_worker_refuses_without_the_room_index,
    three_hosts_drain_10k_exactly_once,
    crashed_worker_batch_is_finished_by_another,
    retries_then_fails_at_max_attempts,
    permanent_fails_and_retry_after_wins,
    corrupt_envelope_is_isolated,
    timeout_and_wrong_result_count_are_retryable,
    per_room_ordering_survives_failures,
    graceful_shutdown_leaves_nothing_delivering,
    a_slow_sink_never_holds_up_another,
    draining_run_reports_a_dead_database,
    a_batch_claimed_ahead_waits_its_turn_within_its_lease,
    a_loop_claims_two_batches_ahead_of_quick_deliveries,
    due_rows_are_claimed_while_new_rows_keep_coming,
    a_held_worker_holds_rows_committed_between_its_claims,
);
