//! Misbehaving plugins on every database backend: one host routes a batch to sinks that loop
//! forever, allocate past their memory cap, trap on one event type, return too few results, or
//! answer rate-limited, next to a healthy sink. Each misbehaviour fails only its own events (a
//! trap only the event that causes it), as retryable with the reason in `last_error`; the healthy sink's events are delivered; and the
//! host goes on serving the next batch.

use crate::{fixtures, support};

use std::path::Path;
use std::time::Duration;

use outboxd::config::{ByteSize, Publishing, RouteConfig, SinkConfig, SinkLimits};
use outboxd::plugin::load_publisher;
use outboxd::record::now_ms;
use outboxd::retry::{RetryPolicy, Strategy};
use outboxd::store::DeliveryOrder;
use outboxd::worker::{Worker, WorkerOptions};
use support::{Backend, TestDb, typed_record};

/// A chaos sink named `name` with init settings `config` and `limits`.
fn chaos(name: &str, config: &[(&str, &str)], limits: SinkLimits) -> SinkConfig {
    SinkConfig {
        limits,
        ..fixtures::sink_config(name, "chaos", config)
    }
}

fn route(event_type: &str, sink: &str) -> RouteConfig {
    RouteConfig {
        event_type: event_type.into(),
        sink: sink.into(),
    }
}

async fn misbehaving_sinks_are_contained(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    let quiet = ("quiet", "true");
    let sinks = [
        chaos(
            "healthy",
            &[("behaviour", "ok"), quiet],
            SinkLimits::default(),
        ),
        chaos(
            "looping",
            &[("behaviour", "loop"), quiet],
            SinkLimits {
                publish_timeout: Duration::from_millis(300),
                ..SinkLimits::default()
            },
        ),
        chaos(
            "hungry",
            &[("behaviour", "alloc"), quiet],
            SinkLimits {
                memory: ByteSize(16 << 20),
                ..SinkLimits::default()
            },
        ),
        chaos(
            "trapping",
            &[("behaviour", "ok"), ("trap_on_type", "Boom"), quiet],
            SinkLimits::default(),
        ),
        chaos(
            "short",
            &[("behaviour", "too_few"), quiet],
            SinkLimits::default(),
        ),
        chaos(
            "limited",
            &[("rate_limited", "60000"), quiet],
            SinkLimits::default(),
        ),
    ];
    let routes = [
        route("Loop*", "looping"),
        route("Alloc*", "hungry"),
        route("Boom", "trapping"),
        route("Trap*", "trapping"),
        route("Short*", "short"),
        route("Limited*", "limited"),
        route("*", "healthy"),
    ];
    let publisher = load_publisher(
        &Publishing::new(sinks.to_vec(), routes.to_vec(), Path::new("")).expect("valid sinks"),
        &fixtures::settings(),
    )
    .await
    .expect("sinks start");
    let worker = Worker::new(
        store.clone(),
        publisher,
        WorkerOptions {
            app_codes: vec!["app".into()],
            batch_size: 100,
            poll_interval: Duration::from_millis(10),
            idle_probe: Duration::from_millis(10),
            lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(10),
            retry: RetryPolicy {
                strategy: Strategy::FixedInterval {
                    interval: Duration::from_secs(60),
                },
                max_attempts: 5,
            },
            ordering: DeliveryOrder::None,
            concurrency: 1,
            node_id: "chaos".into(),
        },
    );
    let base = now_ms() - 10_000;
    let events = [
        ("loop-1", "LoopForever"),
        ("alloc-1", "AllocALot"),
        ("boom-1", "Boom"),
        ("trap-ok-1", "TrapNeighbour"),
        ("short-1", "ShortA"),
        ("short-2", "ShortB"),
        ("limited-1", "LimitedA"),
        ("fine-1", "RoomGiftSent"),
        ("fine-2", "RoomMicChanged"),
        ("fine-3", "RoomHeatChanged"),
    ];
    let records: Vec<_> = events
        .iter()
        .enumerate()
        .map(|(i, (id, event_type))| typed_record("app", id, "room-1", event_type, base + i as i64))
        .collect();
    store.enqueue(&records).await.unwrap();

    let before = now_ms();
    let stats = worker.process_batch("chaos/0", "app").await.unwrap();
    assert_eq!(
        (stats.claimed, stats.delivered, stats.retried),
        (10, 4, 6),
        "{stats:?}"
    );

    expect(
        &db,
        "loop-1",
        "retryable",
        Some("plugin `looping` exceeded its 300ms publish deadline"),
    )
    .await;
    expect(
        &db,
        "alloc-1",
        "retryable",
        Some("plugin `hungry` exceeded its memory cap of 16777216 bytes"),
    )
    .await;
    expect(
        &db,
        "boom-1",
        "retryable",
        Some("plugin `trapping` trapped"),
    )
    .await;
    // The trap's neighbour was found innocent (bisection) and delivered on the same claim.
    expect(&db, "trap-ok-1", "delivered", None).await;
    // Too few results for both, and for each alone.
    for id in ["short-1", "short-2"] {
        expect(
            &db,
            id,
            "retryable",
            Some("returned 0 results for 1 events"),
        )
        .await;
    }
    // A rate-limited answer's `last_error` is its message as the plugin gave it
    // (docs/plugins/contract.md: `rate-limited({message, retry-after-ms})` → `message`),
    // untouched: its 60 s retry-after is under `limits.max_retry_after` (1 h), so nothing is
    // appended. The `limited` sink's first call, hence `call 1` (compared whole: `call 10` would
    // contain it).
    let limited = expect(&db, "limited-1", "retryable", Some("chaos rate limited")).await;
    assert_eq!(
        limited.last_error.as_deref(),
        Some("chaos rate limited, call 1"),
        "limited-1: {limited:?}"
    );
    let next = limited.next_retry_at_ms.unwrap();
    assert!(
        next >= before + 60_000 && next <= now_ms() + 60_000,
        "rate-limit retry-after ignored: {next}"
    );
    for id in ["fine-1", "fine-2", "fine-3"] {
        expect(&db, id, "delivered", None).await;
    }

    // The host goes on: the next batch (to the healthy and the trapping sink, whose instance is
    // rebuilt) is delivered.
    store
        .enqueue(&[
            typed_record("app", "fine-4", "room-2", "RoomGiftSent", now_ms()),
            typed_record("app", "trap-ok-2", "room-2", "TrapNeighbour", now_ms()),
        ])
        .await
        .unwrap();
    let stats = worker.process_batch("chaos/0", "app").await.unwrap();
    assert_eq!((stats.claimed, stats.delivered), (2, 2), "{stats:?}");
}

/// Asserts row `id` has `status` and a `last_error` containing `reason` (`Some`, never empty), or
/// no `last_error` at all (`None`: a row delivered on its first attempt, docs/plugins/contract.md's
/// `—`); returns the row.
async fn expect(db: &TestDb, id: &str, status: &str, reason: Option<&str>) -> support::RawRow {
    let row = db.row("app", id).await.unwrap();
    assert_eq!(row.status, status, "{id}: {row:?}");
    match reason {
        Some(reason) => {
            assert!(
                !reason.is_empty(),
                "{id}: an empty reason matches any error"
            );
            let error = row.last_error.clone().unwrap_or_default();
            assert!(
                error.contains(reason),
                "{id}: last_error {error:?} lacks {reason:?}"
            );
        }
        None => assert_eq!(row.last_error, None, "{id}: {row:?}"),
    }
    row
}

support::per_backend!(misbehaving_sinks_are_contained);
