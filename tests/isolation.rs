//! A bad event or a busy plugin costs only itself, on every database, through the real plugin
//! host (`load_publisher`, as `outboxd run` builds it) and the real `chaos` and `log` guests:
//! - a poison event (its plugin traps whenever it is in the call) among a thousand in one batch is
//!   found by bisection: the 999 others are delivered on the first read, the poison alone spends
//!   its attempts and ends `failed` with the trap's reason; two poisons in one batch are both
//!   found; a room whose head is the poison stays in order;
//! - a sink that traps on everything is an outage, not a poison: its calls are bounded, its
//!   breaker opens, and once open its events spend no attempt;
//! - events are handed to plugins in calls bounded in bytes: 1 MiB bodies among small ones are
//!   all delivered with the default limits, and an event above `limits.max_event_size` fails
//!   alone, permanently;
//! - a guest spinning without host calls does not hold up another sink's marks.

use crate::{fixtures, support};

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outboxd::config::{BreakerSettings, Publishing, RouteConfig, SinkConfig, SinkLimits};
use outboxd::metrics::Metrics;
use outboxd::plugin::{SwappablePublisher, load_publisher_with_metrics};
use outboxd::publish::Publisher;
use outboxd::record::{Record, now_ms};
use outboxd::retry::{RetryPolicy, Strategy};
use outboxd::store::{DEFAULT_TABLE, DeliveryOrder};
use outboxd::worker::{BatchStats, RunMode, Worker, WorkerOptions};
use support::{Backend, TestDb, typed_record, wait_until, wait_until_every};
use tokio::sync::{RwLock, RwLockReadGuard};
use tokio_util::sync::CancellationToken;

/// The timing test runs alone in this binary (it takes this lock for writing, the others for
/// reading), so that its figures are not the other tests' CPU load.
static TIMING: RwLock<()> = RwLock::const_new(());

async fn shared() -> RwLockReadGuard<'static, ()> {
    TIMING.read().await
}

const QUIET: (&str, &str) = ("quiet", "true");

fn route(event_type: &str, sink: &str) -> RouteConfig {
    RouteConfig {
        event_type: event_type.into(),
        sink: sink.into(),
    }
}

/// The production publisher (router → breaker → plugin sink) over `sinks` and `routes`.
async fn publisher(
    sinks: Vec<SinkConfig>,
    routes: Vec<RouteConfig>,
    metrics: &Metrics,
) -> Arc<dyn Publisher> {
    let publishing = Publishing::new(sinks, routes, Path::new("")).expect("valid sinks");
    load_publisher_with_metrics(&publishing, &fixtures::settings(), metrics)
        .await
        .expect("sinks start")
}

/// A sink of the `chaos` guest that traps whenever an event of type `Poison` is in the call.
fn trapping() -> SinkConfig {
    fixtures::sink_config(
        "trapping",
        "chaos",
        &[("behaviour", "ok"), ("trap_on_type", "Poison"), QUIET],
    )
}

fn options(batch_size: u32, max_attempts: u32) -> WorkerOptions {
    WorkerOptions {
        app_codes: vec!["app".into()],
        batch_size,
        poll_interval: Duration::from_millis(10),
        idle_probe: Duration::from_millis(10),
        lease: Duration::from_secs(30),
        publish_timeout: Duration::from_secs(20),
        retry: RetryPolicy {
            strategy: Strategy::FixedInterval {
                interval: Duration::from_millis(1),
            },
            max_attempts,
        },
        ordering: DeliveryOrder::None,
        concurrency: 1,
        node_id: "isolation".into(),
    }
}

/// `n` records of tenant `app`, ids `e0000…`, all in room `room-1` (so in one partition: one read
/// hands out all of them), of type `RoomGiftSent` except the positions in `poison`, of type
/// `Poison`; created a minute ago, in order.
fn records(n: usize, poison: &[usize]) -> Vec<Record> {
    let base = now_ms() - 60_000;
    (0..n)
        .map(|i| {
            let event_type = if poison.contains(&i) {
                "Poison"
            } else {
                "RoomGiftSent"
            };
            typed_record("app", &id(i), "room-1", event_type, base + i as i64)
        })
        .collect()
}

fn id(i: usize) -> String {
    format!("e{i:04}")
}

/// Waits until no retryable row is due later than now (retries are due 1 ms after a failure): a
/// poll on the rows, not a sleep of the retry interval.
async fn until_retries_are_due(db: &TestDb) {
    wait_until("the retries due", Duration::from_secs(10), || async {
        let condition = format!("status = 'retryable' AND next_retry_at_ms > {}", now_ms());
        let later = db.rows_where(DEFAULT_TABLE, &condition, &[]).await.len();
        if later == 0 {
            Ok(())
        } else {
            Err(format!("{later} retries not due"))
        }
    })
    .await
}

/// Rounds of `worker` until nothing is claimable for a while (the retries due between rounds);
/// returns what they did together.
async fn rounds_until_settled(db: &TestDb, worker: &Worker) -> BatchStats {
    let mut total = BatchStats::default();
    let mut idle = 0;
    for _ in 0..50 {
        let stats = worker.process_batch("isolation/0", "app").await.unwrap();
        total.delivered += stats.delivered;
        total.retried += stats.retried;
        total.failed += stats.failed;
        total.deferred += stats.deferred;
        if stats.claimed == 0 {
            idle += 1;
            if idle == 3 {
                return total;
            }
        }
        until_retries_are_due(db).await;
    }
    panic!("rows still claimable after 50 rounds: {total:?}");
}

async fn one_poison_among_a_thousand(backend: Backend) {
    let _shared = shared().await;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    store.enqueue(&records(1000, &[637])).await.unwrap();
    let metrics = Metrics::new();
    let publisher = publisher(vec![trapping()], vec![route("*", "trapping")], &metrics).await;
    let worker = Worker::new(store.clone(), publisher, options(1000, 3));

    let first = worker.process_batch("isolation/0", "app").await.unwrap();
    assert_eq!(
        (first.claimed, first.delivered, first.retried, first.failed),
        (1000, 999, 1, 0),
        "the first claim delivers every innocent event: {first:?}"
    );
    let poison = db.row("app", &id(637)).await.unwrap();
    assert_eq!(poison.status, "retryable");
    assert!(
        poison
            .last_error
            .as_deref()
            .is_some_and(|e| e.contains("trapped") && e.contains("event type Poison")),
        "{poison:?}"
    );
    let text = metrics.encode();
    assert!(
        text.contains(r#"outboxd_breaker_state{sink="trapping"} 0"#),
        "a bisected batch whose neighbours were delivered counts as a success:\n{text}"
    );

    let rest = rounds_until_settled(&db, &worker).await;
    assert_eq!((rest.delivered, rest.failed), (0, 1), "{rest:?}");
    let poison = db.row("app", &id(637)).await.unwrap();
    assert_eq!(
        (poison.status.as_str(), poison.retry_count),
        ("failed", 3),
        "{poison:?}"
    );
    let counts = support::status_counts(&store).await;
    assert_eq!((counts.delivered, counts.failed), (999, 1), "{counts:?}");
    assert!(
        metrics
            .encode()
            .contains(r#"outboxd_breaker_state{sink="trapping"} 0"#),
        "the breaker stays closed for a poison event"
    );
}

async fn two_poisons_in_one_batch_are_both_found(backend: Backend) {
    let _shared = shared().await;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    store.enqueue(&records(500, &[3, 420])).await.unwrap();
    let metrics = Metrics::new();
    let publisher = publisher(vec![trapping()], vec![route("*", "trapping")], &metrics).await;
    let worker = Worker::new(store.clone(), publisher, options(1000, 2));
    let first = worker.process_batch("isolation/0", "app").await.unwrap();
    assert_eq!(
        (first.delivered, first.retried),
        (498, 2),
        "both culprits found on the first claim: {first:?}"
    );
    rounds_until_settled(&db, &worker).await;
    for poison in [3, 420] {
        let row = db.row("app", &id(poison)).await.unwrap();
        assert_eq!((row.status.as_str(), row.retry_count), ("failed", 2));
    }
    assert_eq!(support::status_counts(&store).await.delivered, 498);
}

async fn a_sink_that_traps_on_everything_opens_its_breaker(backend: Backend) {
    let _shared = shared().await;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let all: Vec<usize> = (0..200).collect();
    store.enqueue(&records(200, &all)).await.unwrap();
    let metrics = Metrics::new();
    let sink = SinkConfig {
        breaker: BreakerSettings {
            failures: 1,
            cool_down: Duration::from_secs(600),
        },
        ..trapping()
    };
    let publisher = publisher(vec![sink], vec![route("*", "trapping")], &metrics).await;
    let worker = Worker::new(store.clone(), publisher, options(1000, 5));

    let first = worker.process_batch("isolation/0", "app").await.unwrap();
    assert_eq!((first.retried, first.delivered), (200, 0), "{first:?}");
    let text = metrics.encode();
    assert!(
        text.contains(r#"outboxd_plugin_failures_total{sink="trapping",kind="trap"} 7"#),
        "an outage stops halving after the whole call, its halves and its quarters:\n{text}"
    );
    assert!(
        text.contains(r#"outboxd_breaker_state{sink="trapping"} 1"#),
        "the outage opened the breaker:\n{text}"
    );
    until_retries_are_due(&db).await;
    let second = worker.process_batch("isolation/0", "app").await.unwrap();
    assert_eq!((second.deferred, second.retried), (200, 0), "{second:?}");
    for i in [0, 99, 199] {
        let row = db.row("app", &id(i)).await.unwrap();
        assert_eq!(row.retry_count, 1, "no attempt spent while open: {row:?}");
    }
}

async fn a_poison_at_a_rooms_head_keeps_the_room_in_order(backend: Backend) {
    let _shared = shared().await;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let base = now_ms() - 60_000;
    let mut rows = vec![
        typed_record("app", "head", "room-p", "Poison", base),
        typed_record("app", "second", "room-p", "RoomGiftSent", base + 1),
        typed_record("app", "third", "room-p", "RoomGiftSent", base + 2),
    ];
    rows.extend(
        (0..40).map(|i| typed_record("app", &id(i), &format!("r{i}"), "RoomGiftSent", base + 3)),
    );
    store.enqueue(&rows).await.unwrap();
    let publisher = publisher(
        vec![trapping()],
        vec![route("*", "trapping")],
        &Metrics::new(),
    )
    .await;
    let mut opts = options(1000, 3);
    opts.ordering = DeliveryOrder::PerRoom;
    let worker = Worker::new(store.clone(), publisher, opts);
    // One partition's batch a round, the partitions in turn: the other rooms' (~40 rounds at
    // most), then room-p's retries.
    for _ in 0..100 {
        let stats = worker.process_batch("isolation/0", "app").await.unwrap();
        let head = db.row("app", "head").await.unwrap();
        let second = db.row("app", "second").await.unwrap();
        let third = db.row("app", "third").await.unwrap();
        if head.status != "failed" {
            // Read with their head (one partition's batch, published in per-room waves), they
            // are not tried while it fails: pending, or back `retryable` untried, no attempt spent.
            for later in [&second, &third] {
                let untried = match later.status.as_str() {
                    "pending" => true,
                    "retryable" => {
                        later.last_error.as_deref()
                            == Some("not tried: an earlier event of its room was not delivered")
                    }
                    _ => false,
                };
                assert!(
                    untried && later.retry_count == 0,
                    "the room's later events wait for its head: {later:?}"
                );
            }
        } else if third.status == "delivered" {
            assert_eq!(second.status, "delivered");
            assert_eq!(head.retry_count, 3);
            // Every other room was delivered meanwhile: the partitions are read in turn, so
            // room-p's retries never starve another partition.
            let left: Vec<(String, String, String)> = db
                .rows_where(
                    DEFAULT_TABLE,
                    "status <> 'delivered' AND event_id <> 'head'",
                    &[],
                )
                .await
                .into_iter()
                .map(|row| (row.event_id, row.room_id, row.status))
                .collect();
            assert_eq!(
                support::status_counts(&store).await.delivered,
                42,
                "not delivered while room-p finished: {left:?}"
            );
            return;
        }
        if stats.claimed == 0 {
            until_retries_are_due(&db).await;
        }
    }
    panic!("room-p did not finish");
}

async fn large_events_go_in_calls_bounded_in_bytes(backend: Backend) {
    let _shared = shared().await;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let base = now_ms() - 60_000;
    let mut rows = Vec::new();
    for i in 0..240 {
        let mut record = typed_record("app", &id(i), "room-1", "RoomGiftSent", base + i as i64);
        if i % 4 == 0 {
            // 60 events of 1 MiB among 180 small ones: 60 MiB in one claim.
            record.envelope.body = vec![b'x'; 1 << 20];
        }
        rows.push(record);
    }
    // One event above the default max_event_size (an eighth of the 64 MiB memory cap: 8 MiB).
    // In the same room: one read hands out all 241.
    let mut huge = typed_record("app", "huge", "room-1", "RoomGiftSent", base + 500);
    huge.envelope.body = vec![b'y'; 9 << 20];
    for chunk in rows.chunks(8) {
        store.enqueue(chunk).await.unwrap();
    }
    store.enqueue(&[huge]).await.unwrap();
    let sink = fixtures::sink_config("log", "log", &[]);
    assert_eq!(sink.limits, SinkLimits::default(), "the default limits");
    let publisher = publisher(vec![sink], vec![route("*", "log")], &Metrics::new()).await;
    let worker = Worker::new(store.clone(), publisher, options(1000, 3));
    let stats = worker.process_batch("isolation/0", "app").await.unwrap();
    assert_eq!(
        (stats.claimed, stats.delivered, stats.failed, stats.retried),
        (241, 240, 1, 0),
        "{stats:?}"
    );
    let huge = db.row("app", "huge").await.unwrap();
    assert_eq!(huge.status, "failed");
    let error = huge.last_error.unwrap_or_default();
    assert!(
        error.contains("exceeds sink `log`'s limits.max_event_size (8388608 bytes)"),
        "{error}"
    );
}

/// How long the 300 rows of the `healthy` sink take to be marked delivered when 5 events of the
/// same read go to `other` (all in one room: one partition, one batch), through the publisher
/// `outboxd run` builds (router → breaker → sink, behind the hot-reload swap).
async fn healthy_rows_marked_beside(backend: Backend, other: SinkConfig) -> Option<Duration> {
    let db = TestDb::new(backend).await?;
    let store = db.store_default().await;
    let healthy = fixtures::sink_config("healthy", "chaos", &[("behaviour", "ok"), QUIET]);
    let routed = publisher(
        vec![healthy, other],
        vec![route("Spin*", "other"), route("*", "healthy")],
        &Metrics::new(),
    )
    .await;
    let publisher: Arc<dyn Publisher> = Arc::new(SwappablePublisher::new(routed));
    let mut opts = options(1000, 3);
    opts.publish_timeout = Duration::from_secs(5);
    opts.lease = Duration::from_secs(10);
    let worker = Worker::new(store.clone(), publisher, opts);
    let shutdown = CancellationToken::new();
    let run = tokio::spawn({
        let (worker, shutdown) = (worker.clone(), shutdown.clone());
        async move { worker.run(RunMode::Forever, shutdown).await }
    });
    // The rows below come to an idle worker (its loop waiting on a probe after an empty round),
    // so the time measured is the delivery's, not the worker's start.
    support::until_loops_wait(
        worker.wake(),
        1,
        "the loop idle",
        Duration::from_secs(10),
        |p| p.is_some(),
    )
    .await;
    let base = now_ms();
    let mut rows: Vec<Record> = (0..300)
        .map(|i| typed_record("app", &id(i), "r", "RoomGiftSent", base))
        .collect();
    rows.extend((0..5).map(|i| typed_record("app", &format!("spin{i}"), "r", "SpinA", base)));
    let started = Instant::now();
    store.enqueue(&rows).await.unwrap();
    worker.wake().wake();
    // Polled every 2 ms: the time it takes is the figure compared.
    let every = Duration::from_millis(2);
    wait_until_every(
        "300 rows delivered",
        Duration::from_secs(20),
        every,
        || async {
            let c = support::status_counts(&store).await;
            if c.delivered >= 300 { Ok(()) } else { Err(c) }
        },
    )
    .await;
    let took = started.elapsed();
    shutdown.cancel();
    run.await.unwrap().unwrap();
    Some(took)
}

async fn a_spinning_guest_does_not_hold_up_another_sinks_marks(backend: Backend) {
    let _alone = TIMING.write().await;
    let quick = fixtures::sink_config("other", "chaos", &[("behaviour", "ok"), QUIET]);
    let mut spinning = fixtures::sink_config("other", "chaos", &[("behaviour", "loop"), QUIET]);
    // Longer than the healthy rows take by far; short enough to keep the test quick.
    spinning.limits.publish_timeout = Duration::from_secs(1);
    let mut beside_quick = Vec::new();
    let mut beside_spinning = Vec::new();
    for _ in 0..3 {
        let Some(took) = healthy_rows_marked_beside(backend, quick.clone()).await else {
            return;
        };
        beside_quick.push(took);
        let took = healthy_rows_marked_beside(backend, spinning.clone())
            .await
            .unwrap();
        beside_spinning.push(took);
    }
    beside_quick.sort();
    beside_spinning.sort();
    let (quick, spinning) = (beside_quick[1], beside_spinning[1]);
    eprintln!(
        "healthy rows marked: beside a quick sink {beside_quick:?}, beside a spinning one {beside_spinning:?}"
    );
    // Medians of three; 30 ms of slack for a loaded 2-core machine on a figure of tens of ms.
    assert!(
        spinning <= quick.mul_f64(1.5) + Duration::from_millis(30),
        "beside a spinning guest the healthy sink's rows took {spinning:?}, beside a quick one {quick:?}"
    );
}

/// With per-room order, a guest spinning without host calls on a room's first event: the batch
/// ends at `worker.publish_timeout` (the sink's own call deadline is far later), that event is
/// retryable with the deadline's reason, and the room's later events are not tried.
async fn a_spinning_guest_with_per_room_order_ends_at_the_publish_deadline(backend: Backend) {
    let _shared = shared().await;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    store.enqueue(&records(3, &[])).await.unwrap();
    let mut spinning = fixtures::sink_config("spinning", "chaos", &[("behaviour", "loop"), QUIET]);
    spinning.limits.publish_timeout = Duration::from_secs(30);
    let publisher = publisher(
        vec![spinning],
        vec![route("*", "spinning")],
        &Metrics::new(),
    )
    .await;
    let mut opts = options(1000, 3);
    opts.ordering = DeliveryOrder::PerRoom;
    opts.publish_timeout = Duration::from_secs(1);
    let worker = Worker::new(store.clone(), publisher, opts);
    let started = Instant::now();
    let stats = worker.process_batch("isolation/0", "app").await.unwrap();
    let took = started.elapsed();
    assert_eq!((stats.claimed, stats.delivered), (3, 0), "{stats:?}");
    assert!(
        took < Duration::from_secs(5),
        "the batch took {took:?} against a 1 s publish timeout"
    );
    let first = db.row("app", &id(0)).await.unwrap();
    assert_eq!(first.status, "retryable");
    assert_eq!(first.retry_count, 1);
    assert_eq!(
        first.last_error.as_deref(),
        Some("publish timed out after 1s (worker.publish_timeout)")
    );
    for later in [id(1), id(2)] {
        let row = db.row("app", &later).await.unwrap();
        assert_eq!(
            (
                row.status.as_str(),
                row.retry_count,
                row.last_error.as_deref()
            ),
            (
                "retryable",
                0,
                Some("not tried: an earlier event of its room was not delivered")
            ),
            "{later}"
        );
    }
}

support::per_backend!(
    one_poison_among_a_thousand,
    a_spinning_guest_with_per_room_order_ends_at_the_publish_deadline,
    two_poisons_in_one_batch_are_both_found,
    a_sink_that_traps_on_everything_opens_its_breaker,
    a_poison_at_a_rooms_head_keeps_the_room_in_order,
    large_events_go_in_calls_bounded_in_bytes,
    a_spinning_guest_does_not_hold_up_another_sinks_marks,
);
