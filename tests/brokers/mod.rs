//! Brokers as sinks, against real brokers: outboxd's own service (`Service`, as `outboxd run`
//! builds it) delivering from PostgreSQL through the shipped `broker` plugin into NATS JetStream,
//! RabbitMQ, Redis Streams, MQTT 5 and Kafka (tansu), each run from its config in
//! docs/plugins/broker-examples.md as written (pointed at a destination of the test's own).
//!
//! - `deliver`: on the shared brokers, every event arrives exactly once with its headers, in
//!   per-room order; a broker that is not there makes events retryable (never failed) and the
//!   sink's breaker open; a sink naming no broker, or a plugin importing `broker` on a sink that
//!   may use none, is refused;
//! - `faults`: a private broker killed and restarted mid-run (NATS, Redis, MQTT), or its
//!   connections cut through a proxy (RabbitMQ: a private RabbitMQ takes too long to start;
//!   Kafka: tansu keeps its data in memory only), loses no event and keeps per-room order;
//! - `kit`: the destinations and their readers; `servers`: the private brokers.
//!
//! Without a broker a test prints `SKIPPED` and passes, except under `CI` where it fails.

use crate::{fixtures, support};

mod deliver;
mod faults;
mod kit;
mod servers;

use std::sync::Arc;
use std::time::Duration;

use outboxd::config::Config;
use outboxd::record::now_ms;
use outboxd::service::Service;
use outboxd::store::OutboxStore;
use outboxd::trace_context::TraceContext;
use outboxd::worker::RunMode;
use tokio_util::sync::CancellationToken;

use kit::{Destination, Received};
use support::{TestDb, record, wait_until};

/// The broker examples of docs/plugins/broker-examples.md, in order (NATS, RabbitMQ, Redis,
/// MQTT, Kafka).
pub fn docs_examples() -> Vec<String> {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../docs/plugins/broker-examples.md"
    );
    let text = std::fs::read_to_string(path).unwrap();
    let section = text
        .split("## One example per broker")
        .nth(1)
        .expect("docs/plugins/broker-examples.md has its broker examples")
        .split("\n## ")
        .next()
        .unwrap();
    let blocks: Vec<String> = section
        .split("```toml\n")
        .skip(1)
        .map(|block| block.split("```").next().unwrap().to_string())
        .collect();
    assert_eq!(blocks.len(), 5, "one example per broker");
    blocks
}

/// `count` events over `rooms` rooms, room versions rising per room, enqueued in `store`;
/// returns their ids.
pub async fn enqueue(store: &Arc<dyn OutboxStore>, count: usize, rooms: usize) -> Vec<String> {
    let base = now_ms() - 60_000;
    let records: Vec<_> = (0..count)
        .map(|i| {
            let record = record(
                "default",
                &format!("e{i:06}"),
                &format!("room-{}", i % rooms),
                base + i as i64,
            );
            match traceparent_of(&record.event_id) {
                Some(parent) => record.with_trace_context(&TraceContext::new(parent, "").unwrap()),
                None => record,
            }
        })
        .collect();
    for chunk in records.chunks(1000) {
        store.enqueue(chunk).await.expect("enqueue");
    }
    records.iter().map(|r| r.event_id.clone()).collect()
}

/// The producer's trace context [`enqueue`] gives event `id` (every even-numbered one), which
/// the broker plugin sends on as the `traceparent` header.
pub fn traceparent_of(id: &str) -> Option<String> {
    let number: u64 = id.trim_start_matches('e').parse().ok()?;
    number
        .is_multiple_of(2)
        .then(|| format!("00-{:032x}-{:016x}-01", number + 1, number + 1))
}

/// The destination's docs config, loaded as outboxd loads it, with `adjust` applied to the
/// TOML table first.
pub fn load(
    destination: &Destination,
    db: &TestDb,
    dir: &std::path::Path,
    adjust: impl FnOnce(&mut toml::Table),
) -> Config {
    let mut table = destination.config(&db.url, &dir.join("cache"));
    adjust(&mut table);
    let text = toml::to_string(&table).unwrap();
    Config::from_toml_str(&text, std::iter::empty())
        .unwrap_or_else(|e| panic!("the {:?} config loads: {e}\n{text}", destination.kind))
}

/// A service running `config` over `store` in the background until the token is cancelled.
pub async fn start(
    config: Config,
    store: Arc<dyn OutboxStore>,
) -> (
    CancellationToken,
    tokio::task::JoinHandle<()>,
    outboxd::metrics::Metrics,
) {
    let service = Service::bind(config, store).await.expect("service binds");
    let metrics = service.metrics().clone();
    let shutdown = CancellationToken::new();
    let running = tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            service
                .run(RunMode::Forever, shutdown)
                .await
                .expect("service runs");
        }
    });
    (shutdown, running, metrics)
}

/// Waits until every row is `delivered`; panics naming the others.
pub async fn wait_delivered(db: &TestDb, count: usize, within: Duration) {
    wait_until("every row delivered", within, || async {
        let rows = db.all_rows(outboxd::store::DEFAULT_TABLE).await;
        let open: Vec<_> = rows
            .iter()
            .filter(|r| r.status != "delivered")
            .map(|r| (r.event_id.clone(), r.status.clone(), r.last_error.clone()))
            .take(5)
            .collect();
        if rows.len() == count && open.is_empty() {
            Ok(())
        } else {
            Err(open)
        }
    })
    .await;
}

/// Waits until the destination holds every id of `ids` at least once; returns what it holds.
pub async fn wait_received(
    destination: &mut Destination,
    ids: &[String],
    within: Duration,
) -> Vec<Received> {
    let deadline = tokio::time::Instant::now() + within;
    loop {
        let received = destination.received().await;
        let counts = kit::counts(&received);
        let missing: Vec<&String> = ids.iter().filter(|id| !counts.contains_key(*id)).collect();
        if missing.is_empty() {
            return received;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{:?}: {} of {} ids never arrived, e.g. {:?}",
            destination.kind,
            missing.len(),
            ids.len(),
            missing.iter().take(5).collect::<Vec<_>>()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
