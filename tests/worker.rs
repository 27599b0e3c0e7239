//! Worker-level tests on real SQLite, MariaDB and PostgreSQL: several hosts draining one table,
//! a host that died mid-batch (its partitions taken over once their lease ends), stale marks,
//! retries, corrupt rows, per-room ordering under failures, read-ahead, graceful shutdown, and hosts
//! delivering through a rolling upgrade while `migrate` swaps the status index.
//! Each test gets its own database (see `support`).

#[path = "worker/online_migration.rs"]
mod online_migration;
#[path = "worker/partitioned.rs"]
mod partitioned;
use crate::support;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outboxd::publish::{Event, Outcome, Publisher};
use outboxd::record::now_ms;
use outboxd::retry::{RetryPolicy, Strategy};
use outboxd::store::{
    ClaimBatch, CountsParams, DeliveryOrder, Disposition, Mark, MarkParams, OutboxStore,
    PartitionRead, RebalanceParams, Repartition, StoreError,
};
use outboxd::worker::{RunMode, Worker, WorkerOptions};
use support::{Backend, HandHost, RawInsert, TestDb, record, wait_until};
use tokio_util::sync::CancellationToken;

/// Decides, per event, whether this attempt fails (and how).
type FailWhen = Box<dyn Fn(&Event) -> Option<Outcome> + Send + Sync>;

/// Records every delivery; `fail` decides, per event, whether this attempt fails.
struct Recorder {
    delivered: Mutex<Vec<Event>>,
    attempts: Mutex<HashMap<String, Vec<u32>>>,
    in_flight_rooms: Mutex<HashSet<String>>,
    concurrent_room_violation: Mutex<Option<String>>,
    /// When the first publish call began.
    first_publish: OnceLock<Instant>,
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
            first_publish: OnceLock::new(),
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
        self.first_publish.get_or_init(Instant::now);
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

/// Two hosts of two loops each, small batches, a row every millisecond into four rooms:
/// partitions are read again beside their batches in flight over and over, and every row is
/// still published once (no failure, so exactly once) and delivered.
async fn a_stream_into_busy_partitions_is_published_once_by_two_hosts_of_two_loops(
    backend: Backend,
) {
    const ROWS: usize = 1_500;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let recorder = Recorder::new(|_| None);
    let shutdown = CancellationToken::new();
    let mut runs = Vec::new();
    for host in 0..2 {
        let options = WorkerOptions {
            batch_size: 8,
            concurrency: 2,
            ..options(&format!("host-{host}"))
        };
        let worker = Worker::new(db.store_default().await, recorder.clone(), options);
        let shutdown = shutdown.clone();
        runs.push(tokio::spawn(async move {
            worker.run(RunMode::Forever, shutdown).await
        }));
    }
    let store = db.store_default().await;
    let mut tick = tokio::time::interval(Duration::from_millis(1));
    for i in 0..ROWS {
        tick.tick().await;
        let row = record(
            "app",
            &format!("s{i:05}"),
            &format!("room-{}", i % 4),
            now_ms(),
        );
        store.enqueue(&[row]).await.expect("enqueue");
    }
    wait_until("every row delivered", Duration::from_secs(60), || async {
        let c = counts(&*store).await;
        if c.delivered == ROWS as u64 {
            Ok(())
        } else {
            Err(c)
        }
    })
    .await;
    shutdown.cancel();
    for run in runs {
        run.await.unwrap().unwrap();
    }
    let attempts = recorder.attempts.lock().unwrap().clone();
    let twice: Vec<_> = attempts.iter().filter(|(_, a)| a.len() > 1).collect();
    assert!(twice.is_empty(), "published more than once: {twice:?}");
    assert_eq!(attempts.len(), ROWS, "rows published");
}

/// What a host that died mid-batch did: one heartbeat of `host` taking every partition of `app`
/// for `lease_ms`, then a read of up to `limit` rows from each (nothing written): the batches
/// that handed out rows. It never marks them.
async fn read_and_die(
    store: &Arc<dyn OutboxStore>,
    host: &str,
    lease_ms: i64,
    limit: u32,
) -> Vec<ClaimBatch> {
    let dead = HandHost {
        app: "app",
        id: host,
        lease_ms,
    };
    let ownership = dead.heartbeat(&**store).await;
    assert_eq!(
        ownership.owned.len() as u32,
        ownership.partitions,
        "the dead host, alone, owns every partition: {ownership:?}"
    );
    let mut batches = Vec::new();
    for fence in ownership.owned {
        let batch = store
            .read_partitions(&dead.read(vec![fence], limit, now_ms(), false))
            .await
            .expect("the dead host's read");
        if !batch.events.is_empty() {
            batches.push(batch);
        }
    }
    batches
}

/// A host that read batches and died before marking them (its heartbeat stopped) spends no
/// attempt: its partitions pass to another host only once their lease ends (the survivor, running
/// all along, delivers nothing before then), which reads the same rows again and delivers
/// everything at attempt 1; the dead host's late marks are stale.
async fn crashed_worker_batch_is_finished_by_another(backend: Backend) {
    const DEAD_LEASE: Duration = Duration::from_millis(1_500);
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 50, 5).await;
    let dead_since = Instant::now();
    let crashed = read_and_die(&store, "dead", DEAD_LEASE.as_millis() as i64, 20).await;
    let read: Vec<String> = crashed
        .iter()
        .flat_map(|batch| batch.events.iter().map(|c| c.event.event_id.clone()))
        .collect();
    assert!(read.len() >= 20, "the dead host read {read:?}");
    let c = counts(&*store).await;
    assert_eq!((c.pending, c.delivering), (50, 0), "a read writes nothing");

    let recorder = Recorder::new(|_| None);
    let mut opts = options("survivor");
    opts.lease = Duration::from_secs(3);
    opts.publish_timeout = Duration::from_secs(1);
    let survivor = Worker::new(db.store_default().await, recorder.clone(), opts);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { survivor.run(RunMode::Forever, shutdown).await }
    });
    wait_until("every row delivered", Duration::from_secs(30), || async {
        let c = counts(&*store).await;
        if c.delivered == 50 { Ok(()) } else { Err(c) }
    })
    .await;
    // The lease counts on the database's clock from the dead host's heartbeat, which began after
    // `dead_since`; 100 ms for the clocks' granularity (a survivor that read a live partition
    // would publish within milliseconds).
    let first = *recorder.first_publish.get().expect("a publish");
    assert!(
        first.duration_since(dead_since) + Duration::from_millis(100) >= DEAD_LEASE,
        "the survivor published {:?} after the dead host's heartbeat, within its lease of \
         {DEAD_LEASE:?}",
        first.duration_since(dead_since)
    );
    let attempts = recorder.attempts.lock().unwrap().clone();
    assert_eq!(attempts.len(), 50);
    assert!(
        attempts.values().all(|a| a == &vec![1]),
        "each event published once, at attempt 1: {attempts:?}"
    );
    for id in &read {
        let row = db.row("app", id).await.unwrap();
        assert_eq!(
            (row.status.as_str(), row.retry_count),
            ("delivered", 0),
            "{id}: the dead host spent no attempt"
        );
    }

    // The dead host wakes up and marks its old batches as failed: nothing changes.
    for batch in &crashed {
        let marks: Vec<Mark> = batch
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
                lease: &batch.lease,
                marks: &marks,
                now_ms: now_ms(),
            })
            .await
            .unwrap();
        assert_eq!(report.applied, 0);
        assert_eq!(report.stale.len(), marks.len());
    }
    shutdown.cancel();
    run.await.unwrap().unwrap();
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
/// (The rows share a room, so one read of its partition hands out all three.)
async fn permanent_fails_and_retry_after_wins(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 3, 1).await;
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
/// the batch as retryable with the reason. (One worker, so one host owning the partition both
/// times; the rows share a room, so each read hands out all four.)
async fn timeout_and_wrong_result_count_are_retryable(backend: Backend) {
    /// First call: overruns the publish timeout; every later one: one result short.
    #[derive(Default)]
    struct SlowThenShort {
        calls: AtomicUsize,
    }
    #[async_trait]
    impl Publisher for SlowThenShort {
        async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
            if self.calls.fetch_add(1, AtomicOrdering::SeqCst) == 0 {
                // Overruns the publish timeout: the sink's delay is what is tested.
                tokio::time::sleep(Duration::from_secs(5)).await;
                return Vec::new();
            }
            vec![Outcome::Delivered; batch.len() - 1]
        }
    }
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 4, 1).await;
    let mut opts = options("w");
    opts.publish_timeout = Duration::from_millis(100);
    opts.retry.strategy = Strategy::FixedInterval {
        interval: Duration::ZERO,
    };
    let worker = Worker::new(store.clone(), Arc::new(SlowThenShort::default()), opts);
    let stats = worker.process_batch("w/0", "app").await.unwrap();
    assert_eq!(stats.retried, 4);
    let row = db.row("app", "e000000").await.unwrap();
    assert_eq!(
        row.last_error.as_deref(),
        Some("publish timed out after 100ms (worker.publish_timeout)")
    );
    let stats = worker.process_batch("w/0", "app").await.unwrap();
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

/// Shutdown while batches are in flight: they are published and marked (every event the sink
/// was handed is `delivered`: nothing published is left for another host to publish again),
/// nothing stays delivering, and the rest stays pending.
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
    // Shut down while a batch is in flight (each publish takes 300 ms; a read writes nothing, so
    // the sink is where a batch in flight shows).
    wait_until("a batch in flight", Duration::from_secs(20), || async {
        let rooms = recorder.in_flight_rooms.lock().unwrap().len();
        if rooms > 0 { Ok(()) } else { Err(rooms) }
    })
    .await;
    shutdown.cancel();
    let stats = run.await.unwrap().unwrap();
    let c = counts(&*store).await;
    assert_eq!(c.delivering, 0, "rows left delivering: {c:?}");
    assert_eq!(c.delivered, stats.delivered);
    assert_eq!(
        recorder.delivered_ids().len() as u64,
        c.delivered,
        "an event published in flight was not marked: {c:?}"
    );
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
/// obtained are kept. (Every event is in one room: one partition, one batch.)
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

    // 1. While `held` has not answered, `quick`'s rows are delivered and `lost` has failed. A
    // draining run, which leaves its partitions on its way out to the host of part 2.
    let mut opts = options("w");
    opts.publish_timeout = Duration::from_secs(60);
    let worker = Worker::new(store.clone(), router.clone(), opts.clone());
    let batch =
        tokio::spawn(async move { worker.run(RunMode::Drain, CancellationToken::new()).await });
    wait_for_statuses(
        &db,
        &quick_ids,
        "delivered",
        "quick sink's rows held up by the held sink",
    )
    .await;
    wait_for_statuses(&db, &["lost".to_string()], "failed", "unrouted row held up").await;
    for id in &held_ids {
        let row = db.row("app", id).await.unwrap();
        assert_eq!(
            (row.status.as_str(), row.retry_count),
            ("pending", 0),
            "{id}: read, not marked, while its sink publishes"
        );
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
    opts.node_id = "w2".into();
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

/// A database that goes away: a draining run reports the error instead of hanging, whether it
/// is gone at the start (the first heartbeat fails) or goes away once the run has started (its
/// read fails).
async fn draining_run_reports_a_dead_database(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    enqueue_many(&*store, 10, 10).await;
    let running = Arc::new(SpyStore {
        close_on_read: true,
        ..SpyStore::new(db.store_default().await)
    });
    let worker = Worker::new(running.clone(), Recorder::new(|_| None), options("w"));
    let err = worker
        .run(RunMode::Drain, CancellationToken::new())
        .await
        .unwrap_err();
    let outboxd::worker::WorkerError::Store(StoreError::Database { op, .. }) = err else {
        panic!("unexpected error {err}");
    };
    assert_eq!(op, "read partitions");
    assert!(running.reads.lock().unwrap().is_empty(), "a read succeeded");

    store.close().await;
    let worker = Worker::new(store, Recorder::new(|_| None), options("w"));
    let err = worker
        .run(RunMode::Drain, CancellationToken::new())
        .await
        .unwrap_err();
    let outboxd::worker::WorkerError::Store(StoreError::Database { op, .. }) = err else {
        panic!("unexpected error {err}");
    };
    assert_eq!(op, "rebalance");
}
/// While new rows keep arriving (so reads of their partition always find pending rows), a
/// retryable row that is due (in the stream's room: its partition) and an earlier version's
/// expired lease (another room) are still read and delivered before the stream stops, the lease
/// as an attempt.
async fn due_rows_are_claimed_while_new_rows_keep_coming(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
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
                ..RawInsert::pending("app", "due-retry", "room", now - 10_000)
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
        "the expired lease is an attempt"
    );
    let dead = db.row("app", "dead-lease").await.unwrap();
    assert_eq!(
        (dead.status.as_str(), dead.retry_count),
        ("delivered", 1),
        "the expired lease's attempt is written"
    );
}
/// Where writers run side by side, a loop reads up to two batches ahead while its deliveries
/// are quick: the third batch is read while the first still publishes (so reads and marks
/// overlap without waiting for each other every round), each from another partition (a
/// partition whose read was cut at the limit is read again only once its batch is marked: the
/// six rooms are in six), still with
/// one batch publishing at a time and each event published once. On SQLite (one partition) a
/// loop reads only after its batch is marked.
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
    let reads = store.reads.lock().unwrap().clone();
    assert!(reads.len() >= 3, "{} reads with rows", reads.len());
    let third = reads[2].at - reads[0].at;
    if store.backend().concurrent_writers() {
        assert!(
            third < PUBLISH,
            "the third batch was read {third:?} after the first, once the first was marked: \
             only one batch read ahead"
        );
        let partitions: Vec<u32> = reads[..3]
            .iter()
            .flat_map(|r| r.partitions.clone())
            .collect();
        let distinct: HashSet<u32> = partitions.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            partitions.len(),
            "a partition read again before its batch was marked: {reads:?}"
        );
    } else {
        assert!(
            third >= 2 * PUBLISH,
            "SQLite: the third batch was read {third:?} after the first, before two were marked"
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
    let mut read: Vec<String> = reads.iter().flat_map(|r| r.ids.clone()).collect();
    read.sort();
    assert_eq!(read, expected, "each event read once");
}

/// How long a sink of [`beside_a_batch_in_flight`] takes to publish a batch.
const SLOW_PUBLISH: Duration = Duration::from_millis(1_500);

/// Without per-room order, a row written to a partition while a small batch of it publishes is
/// read beside that batch, leaving its rows out, instead of once the batch is marked; each event
/// is published once. With per-room order, and on SQLite (one writer: a loop reads after its
/// batch is marked), the row is read once the batch is marked.
async fn a_row_written_beside_a_small_batch_in_flight_is_read_before_that_batch_is_marked(
    backend: Backend,
) {
    for ordering in [DeliveryOrder::None, DeliveryOrder::PerRoom] {
        let Some((gap, concurrent_writers)) = beside_a_batch_in_flight(backend, ordering).await
        else {
            return;
        };
        if ordering == DeliveryOrder::None && concurrent_writers {
            assert!(
                gap < SLOW_PUBLISH,
                "the row was read {gap:?} after the batch beside it: once that was marked"
            );
        } else {
            assert!(
                gap >= SLOW_PUBLISH,
                "{ordering:?}: the row was read {gap:?} after the batch beside it, before that \
                 was marked"
            );
        }
    }
}

/// A host with `ordering` and a sink taking [`SLOW_PUBLISH`] delivers a row, and a second row of
/// its room written while the first publishes: how long after the read of the first the second
/// was read, and whether the backend runs writers side by side. Checks each was published once.
async fn beside_a_batch_in_flight(
    backend: Backend,
    ordering: DeliveryOrder,
) -> Option<(Duration, bool)> {
    #[derive(Default)]
    struct Slow {
        published: Mutex<Vec<String>>,
    }
    #[async_trait]
    impl Publisher for Slow {
        async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
            let ids = batch.iter().map(|event| event.event_id.clone());
            self.published.lock().unwrap().extend(ids);
            tokio::time::sleep(SLOW_PUBLISH).await;
            vec![Outcome::Delivered; batch.len()]
        }
    }
    let db = TestDb::new(backend).await?;
    let store = Arc::new(SpyStore::new(db.store_default().await));
    let publisher = Arc::new(Slow::default());
    let options = WorkerOptions {
        ordering,
        ..options("w")
    };
    let worker = Worker::new(store.clone(), publisher.clone(), options);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let shutdown = shutdown.clone();
        async move { worker.run(RunMode::Forever, shutdown).await }
    });
    let published = |id: &'static str| {
        let publisher = publisher.clone();
        move || {
            let publisher = publisher.clone();
            async move {
                let published = publisher.published.lock().unwrap().clone();
                if published.iter().any(|p| p == id) {
                    Ok(())
                } else {
                    Err(published)
                }
            }
        }
    };
    let enqueue = async |id: &str| {
        let row = record("app", id, "room", now_ms());
        store.enqueue(&[row]).await.expect("enqueue");
    };
    enqueue("first").await;
    wait_until(
        "the first row publishing",
        Duration::from_secs(10),
        published("first"),
    )
    .await;
    enqueue("second").await;
    wait_until(
        "the second row published",
        Duration::from_secs(20),
        published("second"),
    )
    .await;
    shutdown.cancel();
    run.await.unwrap().unwrap();
    let published = publisher.published.lock().unwrap().clone();
    assert_eq!(
        published,
        ["first", "second"],
        "each published once, in order"
    );
    let reads = store.reads.lock().unwrap().clone();
    let read_of = |id: &str| {
        let read = reads.iter().find(|r| r.ids.iter().any(|i| i == id));
        read.unwrap_or_else(|| panic!("{id} never read: {reads:?}"))
            .at
    };
    Some((
        read_of("second") - read_of("first"),
        store.backend().concurrent_writers(),
    ))
}

/// The partition holding `room`'s rows, learnt from the store: the one live partition of tenant
/// `probe` while it holds one row, of that room. (Its partitions must have been seeded by a
/// heartbeat: [`OutboxStore::live_partitions`] lists a served tenant's.)
async fn partition_of(db: &TestDb, store: &dyn OutboxStore, room: &str) -> u32 {
    store
        .enqueue(&[record("probe", "probe", room, now_ms())])
        .await
        .expect("enqueue");
    let live = store
        .live_partitions("probe")
        .await
        .expect("live partitions")
        .expect("more than one partition");
    let placeholder = db.placeholder(1);
    db.execute(
        &format!("DELETE FROM room_outbox WHERE app_code = {placeholder}"),
        &[support::Bind::Str("probe".into())],
    )
    .await;
    assert_eq!(live.len(), 1, "{room}: {live:?}");
    live[0]
}

/// A partition whose rows are due at every round (a room whose sink keeps failing) never starves
/// another: the loop reads its partitions in turn, so the other partition's row is delivered at
/// once. The other partition is the twentieth after the busy one, beyond the partitions a read
/// takes together with it, where a read of the partitions in turn asks which partitions hold
/// live rows. One partition on SQLite: nothing to starve.
async fn a_busy_partition_never_starves_another(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let partitions = store.partitions();
    if partitions == 1 {
        return;
    }
    store
        .rebalance(&RebalanceParams {
            app_code: "probe",
            host_id: "prober",
            lease_ms: 1,
            release: &[],
            leaving: false,
            careful_rows: 100,
            now_ms: now_ms(),
        })
        .await
        .expect("seed the probe tenant's partitions");
    let busy = partition_of(&db, &*store, "hot").await;
    let mut other = None;
    for i in 0..1_000 {
        let room = format!("room-{i}");
        if partition_of(&db, &*store, &room).await == (busy + 20) % partitions {
            other = Some(room);
            break;
        }
    }
    let other = other.expect("a room in the twentieth partition after the busy one");
    let recorder = Recorder::new(|event| {
        (event.room_id == "hot").then(|| Outcome::retryable("the hot room's sink is down"))
    });
    let mut opts = options("w");
    opts.retry.max_attempts = 1_000;
    let worker = Worker::new(store.clone(), recorder.clone(), opts);
    let hot_due = || async {
        wait_until(
            "the hot row's retry due",
            Duration::from_secs(10),
            || async {
                let row = db.row("app", "hot-1").await.unwrap();
                let due = row.next_retry_at_ms.unwrap_or(0);
                if due <= now_ms() { Ok(()) } else { Err(due) }
            },
        )
        .await
    };
    store
        .enqueue(&[record("app", "hot-1", "hot", now_ms())])
        .await
        .expect("enqueue");
    for _ in 0..3 {
        worker.process_batch("w/0", "app").await.unwrap();
        hot_due().await;
    }
    store
        .enqueue(&[record("app", "quiet-1", &other, now_ms())])
        .await
        .expect("enqueue");
    for _ in 0..10 {
        worker.process_batch("w/0", "app").await.unwrap();
        if recorder.delivered_ids().contains(&"quiet-1".to_string()) {
            return;
        }
        hot_due().await;
    }
    let hot = recorder.attempts.lock().unwrap()["hot-1"].len();
    panic!(
        "the row of {other} (partition {}) was not read in 10 rounds; the busy partition {busy} \
         was read {hot} times",
        (busy + 20) % partitions
    );
}

/// One read of a [`SpyStore`] that handed out rows.
#[derive(Debug, Clone)]
struct Read {
    /// When the read started.
    at: Instant,
    /// The partitions whose rows it handed out.
    partitions: Vec<u32>,
    /// The rows handed out.
    ids: Vec<String>,
}

/// The store of a worker under test: every read that handed out rows, and (with
/// `close_on_read`) the database gone at the first read, as one that goes away once the host has
/// started. Every other call is forwarded.
struct SpyStore {
    inner: Arc<dyn OutboxStore>,
    close_on_read: bool,
    reads: Mutex<Vec<Read>>,
}

impl SpyStore {
    fn new(inner: Arc<dyn OutboxStore>) -> SpyStore {
        SpyStore {
            inner,
            close_on_read: false,
            reads: Mutex::default(),
        }
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
    async fn migrate(&self) -> Result<Vec<i64>, StoreError> {
        self.inner.migrate().await
    }

    fn partitions(&self) -> u32 {
        self.inner.partitions()
    }

    async fn repartition(&self, partitions: u32) -> Result<Repartition, StoreError> {
        self.inner.repartition(partitions).await
    }
    async fn enqueue(&self, records: &[outboxd::record::Record]) -> Result<u64, StoreError> {
        self.inner.enqueue(records).await
    }
    async fn rebalance(
        &self,
        params: &RebalanceParams<'_>,
    ) -> Result<outboxd::store::Ownership, StoreError> {
        self.inner.rebalance(params).await
    }
    async fn read_partitions(&self, read: &PartitionRead) -> Result<ClaimBatch, StoreError> {
        if self.close_on_read {
            self.inner.close().await;
        }
        let at = Instant::now();
        let batch = self.inner.read_partitions(read).await?;
        if !batch.events.is_empty() {
            self.reads.lock().unwrap().push(Read {
                at,
                partitions: batch
                    .lease
                    .partitions
                    .iter()
                    .map(|p| p.fence.partition)
                    .collect(),
                ids: batch
                    .events
                    .iter()
                    .map(|e| e.event.event_id.clone())
                    .collect(),
            });
        }
        Ok(batch)
    }
    async fn live_partitions(&self, app_code: &str) -> Result<Option<Vec<u32>>, StoreError> {
        self.inner.live_partitions(app_code).await
    }
    async fn set_careful(
        &self,
        owner: (&str, &str),
        fence: &outboxd::store::PartitionFence,
        careful: &outboxd::store::Careful,
    ) -> Result<bool, StoreError> {
        self.inner.set_careful(owner, fence, careful).await
    }
    async fn reject(
        &self,
        owner: (&str, &str),
        fence: &outboxd::store::PartitionFence,
        now_ms: i64,
        rows: &[outboxd::store::RejectedRow],
    ) -> Result<u64, StoreError> {
        self.inner.reject(owner, fence, now_ms, rows).await
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
    async fn clock_ms(&self) -> Result<Option<i64>, StoreError> {
        self.inner.clock_ms().await
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

support::per_backend!(
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
    a_loop_claims_two_batches_ahead_of_quick_deliveries,
    due_rows_are_claimed_while_new_rows_keep_coming,
    a_busy_partition_never_starves_another,
    a_row_written_beside_a_small_batch_in_flight_is_read_before_that_batch_is_marked,
    a_stream_into_busy_partitions_is_published_once_by_two_hosts_of_two_loops,
);
