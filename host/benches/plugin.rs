//! Plugin host benchmark: cost per event of publishing through a WebAssembly plugin at batch
//! sizes 1, 100 and 1000 against a native no-op publisher, plus instance start and rebuild cost.
//!
//! Needs the guests built (`make plugins`). Run:
//! `cargo bench -p outboxd --profile dev --config 'profile.dev.package.outboxd.opt-level=3' --bench plugin`
//! (dev profile: dependencies at opt-level 1 as the workspace sets, outboxd itself optimised).
//! (figures in docs/PERFORMANCE.md, section "Plugin host").

use std::time::Duration;

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use outboxd::config::{PluginSettings, SinkConfig, SinkSpec};
use outboxd::plugin::{PluginEngine, PluginSink};
use outboxd::publish::{Event, Outcome, Publisher};

#[path = "../../tests/fixtures/mod.rs"]
mod fixtures;
use fixtures::sink_config;

fn events(count: usize, event_type: &str) -> Vec<Event> {
    (0..count)
        .map(|n| Event {
            app_code: "app".to_string(),
            event_id: format!("01J9Z8Q4W6N3V2X7Y5T0R1S{n:05}"),
            event_type: event_type.to_string(),
            room_id: format!("room-{}", n % 50),
            room_version: n as i64,
            occurred_at_ms: 1_700_000_000_000 + n as i64,
            body: vec![b'x'; 256],
            attempt: 1,
            trace: None,
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let cache = tempfile::tempdir().unwrap();
    let settings = PluginSettings {
        cache_dir: Some(cache.path().join("cache")),
        ..PluginSettings::default()
    };
    let engine = PluginEngine::new(&settings).unwrap();
    let start = |config: SinkConfig| {
        let spec = SinkSpec::new(config).unwrap();
        runtime.block_on(PluginSink::start(&engine, &spec)).unwrap()
    };
    let noop = NoopPublisher;
    let chaos = start(sink_config(
        "chaos",
        "chaos",
        &[("behaviour", "ok"), ("quiet", "true")],
    ));
    let log = start(sink_config("log", "log", &[("format", "json")]));

    let mut group = c.benchmark_group("publish");
    for size in [1usize, 100, 1000] {
        let batch = events(size, "room.created");
        group.throughput(Throughput::Elements(size as u64));
        let publishers: [(&str, &dyn Publisher); 3] = [
            ("native-noop", &noop),
            ("plugin-ok", &chaos),
            ("plugin-log-json", &log),
        ];
        for (name, publisher) in publishers {
            group.bench_with_input(BenchmarkId::new(name, size), &batch, |b, batch| {
                b.to_async(&runtime).iter(|| publisher.publish(batch));
            });
        }
    }
    group.finish();

    let mut group = c.benchmark_group("instance");
    // Cache hit + link + instantiate + init: what a sink costs to start.
    let spec = SinkSpec::new(sink_config("start", "chaos", &[])).unwrap();
    group.bench_function("start-sink-from-cache", |b| {
        b.to_async(&runtime)
            .iter(|| PluginSink::start(&engine, &spec));
    });
    // A trapping batch (instance discarded) then a one-event batch on a rebuilt instance.
    let trapping = start(sink_config(
        "rebuild",
        "chaos",
        &[("trap_on_type", "boom"), ("quiet", "true")],
    ));
    let (boom, one) = (events(1, "boom"), events(1, "room.created"));
    group.bench_function("trap-then-rebuild-and-publish-1", |b| {
        b.to_async(&runtime).iter(|| async {
            trapping.publish(&boom).await;
            trapping.publish(&one).await
        });
    });
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = bench
}
criterion_main!(benches);

/// The baseline: a publisher that delivers everything without doing anything.
struct NoopPublisher;

#[async_trait::async_trait]
impl Publisher for NoopPublisher {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        vec![Outcome::Delivered; batch.len()]
    }
}
