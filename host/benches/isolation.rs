//! Sink isolation benchmark: how long a healthy sink's 300 events of a claimed batch take to be
//! marked `delivered` when the same batch carries 300 events for a quick sink, and when it carries
//! 300 events for a sink whose plugin loops until its 1 s deadline. Real worker, real SQLite
//! store, real `chaos` plugins; the clock runs from the start of `process_batch` until the
//! healthy rows are `delivered` in the database.
//!
//! Needs the guests built (`make plugins`). Run:
//! `cargo bench -p outboxd --profile dev --config 'profile.dev.package.outboxd.opt-level=3' --bench isolation`
//! (figures in docs/PERFORMANCE.md, section "Sink isolation").

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{Criterion, criterion_group, criterion_main};
use outboxd::config::{PluginSettings, SinkConfig, SinkLimits, SinkSpec};
use outboxd::plugin::{PluginEngine, PluginSink, Route, RoutedPublisher};
use outboxd::publish::Publisher;
use outboxd::record::Record;
use outboxd::retry::{RetryPolicy, Strategy};
use outboxd::store::sqlite::SqliteStore;
use outboxd::store::{ConnectOptions, DeliveryOrder, OutboxStore};
use outboxd::worker::{Worker, WorkerOptions};

#[path = "../../tests/fixtures/mod.rs"]
mod fixtures;
use fixtures::sink_config;

/// Events per sink in each batch.
const PER_SINK: usize = 300;

/// Length of every measured round (longer than the looping sink's 1 s deadline).
const ROUND: Duration = Duration::from_millis(1300);

fn route(event_type: &str, sink: &str, publisher: Arc<dyn Publisher>) -> Route {
    Route {
        event_type: event_type.into(),
        sink: sink.into(),
        publisher,
    }
}

fn options() -> WorkerOptions {
    WorkerOptions {
        app_codes: vec!["bench".into()],
        batch_size: (2 * PER_SINK) as u32,
        poll_interval: Duration::from_millis(10),
        idle_probe: Duration::from_millis(10),
        lease: Duration::from_secs(30),
        publish_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            strategy: Strategy::FixedInterval {
                interval: Duration::ZERO,
            },
            max_attempts: 1_000_000,
        },
        ordering: DeliveryOrder::None,
        concurrency: 1,
        node_id: "bench".into(),
    }
}

/// Enqueues one batch (300 `Healthy` + 300 `Neighbour` events, interleaved), runs one
/// `process_batch`, and returns how long the `Healthy` rows took to be delivered.
async fn healthy_time(store: &Arc<SqliteStore>, worker: &Worker, round: &mut u64) -> Duration {
    *round += 1;
    let records: Vec<Record> = (0..2 * PER_SINK)
        .map(|n| {
            let event_type = if n % 2 == 0 { "Healthy" } else { "Neighbour" };
            Record::build(
                "room",
                event_type,
                n as i64,
                std::time::SystemTime::now(),
                &(),
            )
            .with_app_code("bench")
            .with_event_id(format!("r{round}-{n:04}"))
        })
        .collect();
    store.enqueue(&records).await.unwrap();
    let healthy_done = format!(
        "SELECT COUNT(*) FROM room_outbox WHERE event_type = 'Healthy' AND status = 'delivered' \
         AND event_id LIKE 'r{round}-%'"
    );
    let started = Instant::now();
    let batch = {
        let worker = worker.clone();
        tokio::spawn(async move { worker.process_batch("bench/0", "bench").await })
    };
    loop {
        let delivered: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(healthy_done.clone()))
            .fetch_one(store.pool())
            .await
            .unwrap();
        if delivered == PER_SINK as i64 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let elapsed = started.elapsed();
    batch.await.unwrap().unwrap();
    // Every round lasts as long as the slowest (the looping sink's 1 s deadline), so each case
    // starts its rounds equally cold rather than the quick case back to back.
    tokio::time::sleep_until((started + ROUND).into()).await;
    elapsed
}

/// A native sink that answers after 1 s without using the CPU.
struct Sleeping;

#[async_trait::async_trait]
impl Publisher for Sleeping {
    async fn publish(&self, batch: &[outboxd::publish::Event]) -> Vec<outboxd::publish::Outcome> {
        tokio::time::sleep(Duration::from_secs(1)).await;
        vec![outboxd::publish::Outcome::Delivered; batch.len()]
    }
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let settings = PluginSettings {
        cache_dir: Some(dir.path().join("cache")),
        ..PluginSettings::default()
    };
    let engine = PluginEngine::new(&settings).unwrap();
    let url = format!(
        "sqlite://{}?mode=rwc",
        dir.path().join("bench.db").display()
    );
    let store = Arc::new(
        runtime
            .block_on(SqliteStore::connect(&ConnectOptions::new(url)))
            .unwrap(),
    );
    runtime.block_on(store.migrate()).unwrap();
    let start = |config: SinkConfig| -> Arc<dyn Publisher> {
        Arc::new(
            runtime
                .block_on(PluginSink::start(&engine, &SinkSpec::new(config).unwrap()))
                .unwrap(),
        )
    };
    let quiet = ("quiet", "true");
    let healthy = start(sink_config(
        "healthy",
        "chaos",
        &[("behaviour", "ok"), quiet],
    ));
    let quick = start(sink_config("quick", "chaos", &[("behaviour", "ok"), quiet]));
    let looping = start(SinkConfig {
        limits: SinkLimits {
            publish_timeout: Duration::from_secs(1),
            ..SinkLimits::default()
        },
        ..sink_config("looping", "chaos", &[("behaviour", "loop"), quiet])
    });
    let sleeping: Arc<dyn Publisher> = Arc::new(Sleeping);
    let worker_beside = |neighbour: &Arc<dyn Publisher>| {
        let router = RoutedPublisher::new(vec![
            route("Healthy", "healthy", healthy.clone()),
            route("Neighbour", "neighbour", neighbour.clone()),
        ]);
        Worker::new(store.clone(), Arc::new(router), options())
    };
    let mut round = 0;
    let mut group = c.benchmark_group("isolation");
    for (name, neighbour) in [
        ("healthy-300-beside-quick", &quick),
        ("healthy-300-beside-looping", &looping),
        ("healthy-300-beside-sleeping-native", &sleeping),
    ] {
        let worker = worker_beside(neighbour);
        group.bench_function(name, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        total += healthy_time(&store, &worker, &mut round).await;
                    }
                    total
                })
            });
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(14));
    targets = bench
}
criterion_main!(benches);
