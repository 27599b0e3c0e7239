//! `outboxd-bench --history-scaling 10000,100000,…`: the cost of a claim as the delivered
//! history grows, from one run on one table.
//!
//! For each size, in ascending order, the same tenant's history is grown to that many old
//! `delivered` rows (set-based, [`HistoryWriter`]; statistics maintenance per `--after-load`),
//! then `--rounds` calls are measured after a few untimed warm-up calls. A call is one
//! [`OutboxStore::claim`](outboxd::store::OutboxStore::claim) of `--scaling-batch` fresh `pending` rows (enqueued untimed just before)
//! plus the [`OutboxStore::mark`](outboxd::store::OutboxStore::mark) of all of them as delivered. The report prints p50/p90/p99, the
//! events/s of the calls alone, and each figure's ratio to the smallest size.

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use crate::args::BenchArgs;
use crate::harness::{EventIds, Harness, records};
use crate::history::{AfterLoad, HISTORY_AGE, HistoryBenchError, HistoryWriter, claim_and_deliver};
use crate::retention::LatencyWindow;
use crate::samples::ms;
use outboxd::record::now_ms;
use outboxd::store;

/// Untimed claim + mark calls before each size's measured rounds.
const WARM_UP: u32 = 5;

/// One measured size.
#[derive(Debug, Clone)]
pub struct ScalingRow {
    /// Delivered history rows in the table when measured.
    pub history: u64,
    /// Wall time of growing the history to this size (statistics maintenance included).
    pub load: Duration,
    /// The measured calls.
    pub calls: LatencyWindow,
}

impl ScalingRow {
    /// Events per second of the measured calls alone (rows claimed and marked / time in calls).
    pub fn events_per_sec(&self, batch: u32) -> f64 {
        let busy: Duration = self.calls.calls.iter().sum();
        self.calls.calls.len() as f64 * f64::from(batch) / busy.as_secs_f64().max(1e-9)
    }
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct ScalingReport {
    /// The database (password redacted).
    pub database: String,
    /// Rows per call.
    pub batch: u32,
    /// Statistics maintenance after each load.
    pub after_load: AfterLoad,
    /// One row per size, ascending.
    pub rows: Vec<ScalingRow>,
}

impl fmt::Display for ScalingReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "database: {}  claim + mark of {} fresh rows  after load: {}",
            self.database,
            self.batch,
            self.after_load.name()
        )?;
        writeln!(
            f,
            "{:>10} {:>8} {:>6} {:>8} {:>8} {:>8} {:>9} {:>9} {:>9}",
            "history", "load s", "calls", "p50 ms", "p90 ms", "p99 ms", "ev/s", "p50 ×", "ev/s ×"
        )?;
        let Some(first) = self.rows.first() else {
            return Ok(());
        };
        let (p50_0, rate_0) = (
            ms(first.calls.percentile(50.0)),
            first.events_per_sec(self.batch),
        );
        for row in &self.rows {
            let p50 = ms(row.calls.percentile(50.0));
            let rate = row.events_per_sec(self.batch);
            writeln!(
                f,
                "{:>10} {:>8.1} {:>6} {:>8.2} {:>8.2} {:>8.2} {:>9.0} {:>9.2} {:>9.2}",
                row.history,
                row.load.as_secs_f64(),
                row.calls.calls.len(),
                p50,
                ms(row.calls.percentile(90.0)),
                ms(row.calls.percentile(99.0)),
                rate,
                p50 / p50_0.max(1e-9),
                rate / rate_0.max(1e-9)
            )?;
        }
        Ok(())
    }
}

/// What `--history-scaling` measures.
#[derive(Debug, Clone)]
pub struct ScalingOptions {
    /// History sizes, ascending.
    pub sizes: Vec<u64>,
    /// Measured calls per size.
    pub rounds: u32,
    /// Fresh rows per call.
    pub batch: u32,
    /// Statistics maintenance after each load.
    pub after_load: AfterLoad,
}

impl ScalingOptions {
    /// The `--history-scaling` options of `args`, checked.
    pub fn new(args: &BenchArgs) -> anyhow::Result<ScalingOptions> {
        let sizes = args.scaling.history_scaling.clone().unwrap_or_default();
        if sizes.is_empty() || sizes.windows(2).any(|w| w[0] >= w[1]) {
            anyhow::bail!("--history-scaling takes ascending sizes, e.g. 10000,100000,1000000");
        }
        if args.scaling.rounds == 0 || args.scaling.scaling_batch == 0 {
            anyhow::bail!("--rounds and --scaling-batch must be greater than 0");
        }
        Ok(ScalingOptions {
            sizes,
            rounds: args.scaling.rounds,
            batch: args.scaling.scaling_batch,
            after_load: args.history.after_load,
        })
    }
}

/// Grows the history through `sizes` and measures each.
pub async fn run(
    harness: &Harness<'_>,
    options: &ScalingOptions,
) -> Result<ScalingReport, HistoryBenchError> {
    let ScalingOptions {
        sizes,
        rounds,
        batch,
        after_load,
    } = options;
    let (rounds, batch, after_load) = (*rounds, *batch, *after_load);
    let store = harness.store(2).await?;
    let app_code = Harness::app_code("scaling");
    let base_ms = now_ms() - HISTORY_AGE.as_millis() as i64;
    let mut writer = HistoryWriter::connect(
        &harness.config.database.url,
        &harness.table,
        &app_code,
        &format!("{app_code}-h"),
        base_ms,
    )
    .await?;
    let next_fresh = AtomicU64::new(0);
    let mut loaded = 0u64;
    let mut rows = Vec::new();
    for &size in sizes.iter() {
        let started = Instant::now();
        writer
            .load(loaded, size, |n| {
                if n % 1_000_000 == 0 {
                    eprintln!("history: {n} of {size} rows loaded");
                }
            })
            .await?;
        writer.after_load(after_load).await?;
        loaded = size;
        let load = started.elapsed();
        eprintln!(
            "history: {size} rows ({:.1}s); measuring",
            load.as_secs_f64()
        );
        for _ in 0..WARM_UP {
            call(&*store, &app_code, batch, &next_fresh).await?;
        }
        let mut calls = LatencyWindow::default();
        let measured = Instant::now();
        for _ in 0..rounds {
            calls
                .calls
                .push(call(&*store, &app_code, batch, &next_fresh).await?);
        }
        calls.elapsed = measured.elapsed();
        let row = ScalingRow {
            history: size,
            load,
            calls,
        };
        // Each size as it is measured, so a long run's early figures are not lost.
        eprintln!(
            "history {size}: p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, {:.0} ev/s",
            ms(row.calls.percentile(50.0)),
            ms(row.calls.percentile(90.0)),
            ms(row.calls.percentile(99.0)),
            row.events_per_sec(batch)
        );
        rows.push(row);
    }
    writer.close().await;
    store.close().await;
    Ok(ScalingReport {
        database: harness.database(),
        batch,
        after_load,
        rows,
    })
}

/// Enqueues `batch` fresh rows (untimed), then times one claim + mark of them.
async fn call(
    store: &dyn store::OutboxStore,
    app_code: &str,
    batch: u32,
    next_fresh: &AtomicU64,
) -> Result<Duration, HistoryBenchError> {
    let from = next_fresh.fetch_add(u64::from(batch), std::sync::atomic::Ordering::Relaxed);
    store
        .enqueue(&records(
            app_code,
            from..from + u64::from(batch),
            1000,
            EventIds::Numbered {
                kind: "f",
                created_at_ms: now_ms(),
            },
        ))
        .await?;
    let started = Instant::now();
    claim_and_deliver(store, app_code, batch, now_ms(), "measure").await?;
    Ok(started.elapsed())
}
