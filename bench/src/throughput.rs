//! `outboxd-bench` (the throughput mode, the default): enqueue N events, drain them through a
//! publisher (a no-op, or a plugin with `--plugin`), report events/s per delivery shape.
//!
//! Each shape runs on its own app code in the benchmark table, so runs never see each other's
//! rows. The `go` shape replays the Go version's delivery shape on the same store (claim 100, one
//! mark statement per row, one batch in flight), and the `raw` shape is a plain SQL client with no
//! outboxd code in its loop (`raw.rs`), so the ratios to both are measured in the same run.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::args::{BenchArgs, Shape};
use crate::collector::Collector;
use crate::cpu::{CpuMark, CpuSpent};
use crate::harness::{EventIds, Harness, records};
use crate::raw::{RawError, RawLoop, RawOptions};
use outboxd::config::{Config, TraceExport};
use outboxd::metrics::Metrics;
use outboxd::publish::Publisher;
use outboxd::record::now_ms;
use outboxd::retry::RetryPolicy;
use outboxd::store::{self, CountsParams, DeliveryOrder, OutboxStore, StoreError};
use outboxd::telemetry::Telemetry;
use outboxd::worker::{RunMode, Worker, WorkerError, WorkerOptions};

/// What to measure.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Events per shape.
    pub events: u32,
    /// Claim batch size of the outboxd shapes.
    pub batch_size: u32,
    /// Worker loops of the outboxd shapes.
    pub workers: u32,
    /// Concurrent clients of the raw shapes.
    pub raw_clients: u32,
    /// Rows per claim of the raw shapes.
    pub raw_batch_size: u32,
    /// Rooms the events are spread over (round robin).
    pub rooms: u32,
    /// Shapes to run, in order.
    pub shapes: Vec<Shape>,
}

impl BenchOptions {
    /// The throughput options of `args`: outboxd's batch size and loops default to the config's
    /// `worker.batch_size` and `worker.concurrency`.
    pub fn new(config: &Config, args: &BenchArgs) -> BenchOptions {
        BenchOptions {
            events: args.events,
            batch_size: args.batch_size.unwrap_or(config.worker.batch_size),
            workers: args.workers.unwrap_or(config.worker.concurrency),
            raw_clients: args.raw_clients,
            raw_batch_size: args.raw_batch_size,
            rooms: args.rooms,
            shapes: args.shapes.clone(),
        }
    }
}

/// One measured shape.
#[derive(Debug, Clone)]
pub struct BenchRow {
    /// The shape.
    pub shape: Shape,
    /// Claim batch size used.
    pub batch_size: u32,
    /// Batches in flight.
    pub workers: u32,
    /// Events enqueued and delivered.
    pub events: u32,
    /// Wall time of the enqueue.
    pub enqueue: Duration,
    /// Wall time of the drain.
    pub drain: Duration,
    /// CPU the drain cost the machine and this process (`None` where `/proc` is not readable).
    pub cpu: Option<CpuSpent>,
    /// The `traced` shape's spans: exported, dropped, and the bytes the collector took.
    pub spans: Option<(u64, u64, u64)>,
}

impl BenchRow {
    /// Delivered events per second.
    pub fn drain_rate(&self) -> f64 {
        f64::from(self.events) / self.drain.as_secs_f64().max(1e-9)
    }

    /// Enqueued events per second.
    pub fn enqueue_rate(&self) -> f64 {
        f64::from(self.events) / self.enqueue.as_secs_f64().max(1e-9)
    }
}

/// All shapes of one run.
#[derive(Debug, Clone)]
pub struct BenchReport {
    /// The database (password redacted).
    pub database: String,
    /// Rooms the events were spread over.
    pub rooms: u32,
    /// One row per shape.
    pub rows: Vec<BenchRow>,
}

impl fmt::Display for BenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let rate_of = |shape| {
            self.rows
                .iter()
                .find(|r| r.shape == shape)
                .map(BenchRow::drain_rate)
        };
        let (raw, one_index) = (rate_of(Shape::Raw), rate_of(Shape::RawOneIndex));
        writeln!(f, "database: {}  rooms: {}", self.database, self.rooms)?;
        writeln!(
            f,
            "{:<20} {:>6} {:>8} {:>8} {:>14} {:>10} {:>12} {:>7} {:>8} {:>6} {:>10} {:>10}",
            "shape",
            "batch",
            "workers",
            "events",
            "enqueue ev/s",
            "drain s",
            "drain ev/s",
            "vs raw",
            "vs 1idx",
            "cores",
            "cpu us/ev",
            "own us/ev"
        )?;
        for row in &self.rows {
            let ratio = |base: Option<f64>| {
                base.map(|base| format!("{:.2}x", row.drain_rate() / base))
                    .unwrap_or_else(|| "-".into())
            };
            let per_event = |seconds: f64| seconds * 1e6 / f64::from(row.events.max(1));
            let (cores, machine, own) = match row.cpu {
                Some(cpu) => (
                    format!("{:.2}", cpu.busy_cores()),
                    format!("{:.1}", per_event(cpu.machine)),
                    format!("{:.1}", per_event(cpu.own)),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
            writeln!(
                f,
                "{:<20} {:>6} {:>8} {:>8} {:>14.0} {:>10.2} {:>12.0} {:>7} {:>8} {:>6} {:>10} {:>10}",
                row.shape.name(),
                row.batch_size,
                row.workers,
                row.events,
                row.enqueue_rate(),
                row.drain.as_secs_f64(),
                row.drain_rate(),
                ratio(raw),
                ratio(one_index),
                cores,
                machine,
                own
            )?;
        }
        let mean_rate = |shape| {
            let rates: Vec<f64> = self
                .rows
                .iter()
                .filter(|r| r.shape == shape)
                .map(BenchRow::drain_rate)
                .collect();
            (!rates.is_empty()).then(|| rates.iter().sum::<f64>() / rates.len() as f64)
        };
        if self.rows.iter().any(|r| r.spans.is_some()) {
            let spans = self.rows.iter().filter_map(|r| r.spans);
            let (exported, dropped, bytes) =
                spans.fold((0, 0, 0), |t, s| (t.0 + s.0, t.1 + s.1, t.2 + s.2));
            writeln!(
                f,
                "traced spans: {exported} exported, {dropped} dropped, {:.1} MB to the collector",
                bytes as f64 / 1e6
            )?;
        }
        if let (Some(plain), Some(traced)) = (mean_rate(Shape::Outboxd), mean_rate(Shape::Traced)) {
            writeln!(
                f,
                "traced / outboxd: {:.2}x (mean drain rates)",
                traced / plain
            )?;
        }
        Ok(())
    }
}

/// Errors of a benchmark run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The worker failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// A raw SQL loop failed.
    #[error(transparent)]
    Raw(#[from] RawError),
    /// The `traced` shape's collector or tracing could not start.
    #[error("the traced shape's OTLP collector: {0}")]
    Collector(std::io::Error),
    /// A shape finished without delivering every event.
    #[error("{shape} run delivered {delivered} of {expected} events")]
    Incomplete {
        /// Shape name.
        shape: &'static str,
        /// Delivered rows found.
        delivered: u64,
        /// Events enqueued.
        expected: u32,
    },
}

/// Runs every requested shape on the harness's table.
///
/// Every shape publishes through `publisher`: [`crate::harness::NoopPublisher`] measures the
/// host and the database; a plugin (`outboxd-bench --plugin FILE`) measures what users run.
pub async fn run(
    harness: &Harness<'_>,
    options: &BenchOptions,
    publisher: Arc<dyn Publisher>,
) -> Result<BenchReport, BenchError> {
    let config = harness.config;
    let store = harness.store(options.workers + 2).await?;
    let run_id = now_ms();
    let mut rows = Vec::new();
    for (index, &shape) in options.shapes.iter().enumerate() {
        // A shape may be listed more than once (`outboxd,traced,traced,outboxd`): its own rows
        // each time.
        let app_code = format!("bench-{}-{run_id}-{index}", shape.name());
        // The yardstick shape runs on a table of its own (created fresh, one claim index).
        let yardstick = if shape == Shape::RawOneIndex {
            let table = crate::yardstick::table_name(&harness.table)?;
            crate::yardstick::create(
                &config.database.url,
                &table,
                config.database.connect_timeout,
            )
            .await?;
            Some(store::connect(&harness.connect_options(&table, 2)).await?)
        } else {
            None
        };
        let shape_store = yardstick.as_ref().unwrap_or(&store);
        let enqueue = enqueue(&**shape_store, &app_code, options).await?;
        let settle = crate::settle::settle(&config.database.url, config.database.connect_timeout);
        if let Some(warning) = settle.await? {
            eprintln!("warning: {warning}");
        }
        let started = Instant::now();
        let cpu = CpuMark::now();
        let mut spans = None;
        let (batch_size, workers) = match shape {
            Shape::Outboxd | Shape::PerRoom => {
                drain_worker(
                    &store,
                    &app_code,
                    shape,
                    options,
                    publisher.clone(),
                    Telemetry::off(),
                )
                .await?;
                (options.batch_size, options.workers)
            }
            Shape::Traced => {
                let drained = drain_traced(&store, &app_code, options, publisher.clone()).await?;
                spans = Some(drained);
                (options.batch_size, options.workers)
            }
            Shape::Raw | Shape::RawOneIndex | Shape::RawHeld => {
                let raw = if shape == Shape::RawHeld {
                    RawLoop::Held
                } else {
                    RawLoop::TwoWrite
                };
                let raw_options = RawOptions {
                    url: config.database.url.clone(),
                    table: shape_store.table().clone(),
                    app_code: app_code.clone(),
                    clients: options.raw_clients,
                    batch_size: options.raw_batch_size,
                    connect_timeout: config.database.connect_timeout,
                };
                crate::raw::drain(raw, &raw_options).await?;
                (options.raw_batch_size.max(1), options.raw_clients.max(1))
            }
        };
        let drain = started.elapsed();
        let cpu = cpu.and_then(|mark| mark.spent());
        let counts = shape_store
            .counts(&CountsParams {
                app_code: Some(app_code),
                now_ms: now_ms(),
            })
            .await?;
        if counts.delivered != u64::from(options.events) {
            return Err(BenchError::Incomplete {
                shape: shape.name(),
                delivered: counts.delivered,
                expected: options.events,
            });
        }
        if let Some(yardstick) = yardstick {
            yardstick.close().await;
        }
        rows.push(BenchRow {
            shape,
            batch_size,
            workers,
            events: options.events,
            enqueue,
            drain,
            cpu,
            spans,
        });
    }
    store.close().await;
    Ok(BenchReport {
        database: harness.database(),
        rooms: options.rooms,
        rows,
    })
}

/// Enqueues the events of one shape in chunks of 1000; returns the time taken.
async fn enqueue(
    store: &dyn OutboxStore,
    app_code: &str,
    options: &BenchOptions,
) -> Result<Duration, StoreError> {
    let started = Instant::now();
    let events = u64::from(options.events);
    for from in (0..events).step_by(1000) {
        let chunk = records(
            app_code,
            from..events.min(from + 1000),
            options.rooms,
            EventIds::Fresh,
        );
        store.enqueue(&chunk).await?;
    }
    Ok(started.elapsed())
}

/// Drains with outboxd's worker, tracing on: every span exported to a collector on loopback,
/// the last one before this returns. The spans exported and dropped, and the bytes taken.
async fn drain_traced(
    store: &Arc<dyn OutboxStore>,
    app_code: &str,
    options: &BenchOptions,
    publisher: Arc<dyn Publisher>,
) -> Result<(u64, u64, u64), BenchError> {
    let collector = Collector::start().map_err(BenchError::Collector)?;
    let metrics = Metrics::default();
    let export = TraceExport {
        endpoint: format!("{}/v1/traces", collector.endpoint()),
        service_name: "outboxd-bench".into(),
        resource: Vec::new(),
        sampling_ratio: 1.0,
        headers: Default::default(),
        timeout: outboxd::config::telemetry::DEFAULT_EXPORT_TIMEOUT,
        queue_size: outboxd::config::telemetry::DEFAULT_SPAN_QUEUE,
    };
    let telemetry = Telemetry::start(Some(&export), "bench", &metrics)
        .map_err(|e| BenchError::Collector(std::io::Error::other(e)))?;
    let shape = Shape::Traced;
    drain_worker(
        store,
        app_code,
        shape,
        options,
        publisher,
        telemetry.clone(),
    )
    .await?;
    telemetry.shutdown().await;
    let traces = metrics.traces();
    let (_, bytes) = collector.taken();
    Ok((traces.counted("exported"), traces.counted("dropped"), bytes))
}

/// Drains with outboxd's worker.
async fn drain_worker(
    store: &Arc<dyn OutboxStore>,
    app_code: &str,
    shape: Shape,
    options: &BenchOptions,
    publisher: Arc<dyn Publisher>,
    telemetry: Telemetry,
) -> Result<(), WorkerError> {
    let worker = Worker::new(
        store.clone(),
        publisher,
        WorkerOptions {
            app_codes: vec![app_code.to_string()],
            batch_size: options.batch_size,
            poll_interval: Duration::from_millis(5),
            idle_probe: Duration::from_millis(5),
            lease: Duration::from_secs(60),
            publish_timeout: Duration::from_secs(30),
            retry: RetryPolicy::default(),
            ordering: if shape == Shape::PerRoom {
                DeliveryOrder::PerRoom
            } else {
                DeliveryOrder::None
            },
            concurrency: options.workers,
            node_id: "bench".into(),
        },
    )
    .with_telemetry(telemetry);
    worker.run(RunMode::Drain, CancellationToken::new()).await?;
    Ok(())
}
