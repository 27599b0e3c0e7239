//! `outboxd-bench --retention`: claim latency on a table holding N old `delivered` rows, quiet
//! versus while the retention cleanup deletes them, side by side from one run.
//!
//! 1. Loads the history, every timestamp 30 days in the past: set-based by default
//!    ([`HistoryWriter`], 100k rows a statement, then the `--after-load` statistics maintenance),
//!    or with `--loader store` through the store itself (enqueue, claim, mark `delivered`, 1000
//!    rows a chunk).
//! 2. Quiet: `--windows` windows of `--window` each, while nothing else touches the table.
//! 3. Cleanup: the same [`Retention::pass`] that `outboxd run` and `outboxd purge` use (batch
//!    size and pause from `[retention]`, so its defaults unless configured) deletes the history,
//!    while windows are measured back to back until it is done or `--max-cleanup` has passed.
//!
//! A measured call is one [`OutboxStore::claim`] of `--claim-batch` fresh `pending` rows plus the
//! [`OutboxStore::mark`] of that batch as delivered; the fresh rows are enqueued untimed just
//! before. Fresh rows share the history's tenant, so the claim walks the same index the purge does.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::args::BenchArgs;
use crate::harness::{EventIds, Harness, records};
use crate::history::{
    AfterLoad, HISTORY_AGE, HistoryBenchError, HistoryWriter, Loader, claim_and_deliver,
};
pub use crate::retention_report::{LatencyWindow, RetentionBenchReport};
use outboxd::config::RetentionConfig;
use outboxd::metrics::Metrics;
use outboxd::record::now_ms;
use outboxd::retention::Retention;
use outboxd::store::{CountsParams, OutboxStore};

/// The retention age the cleanup uses: the history is older, the fresh rows are younger.
const CLEANUP_AGE: Duration = Duration::from_secs(24 * 3600);
/// Rows per history chunk (one enqueue, one claim, one mark).
const LOAD_CHUNK: u32 = 1000;

/// What to measure.
#[derive(Debug, Clone)]
pub struct RetentionBenchOptions {
    /// Old delivered rows to load.
    pub history: u32,
    /// Rows per measured claim + mark.
    pub claim_batch: u32,
    /// One window's length.
    pub window: Duration,
    /// Quiet windows before the cleanup.
    pub quiet_windows: u32,
    /// Bound on the cleanup phase.
    pub max_cleanup: Duration,
    /// How the history is loaded.
    pub loader: Loader,
    /// Statistics maintenance after the load.
    pub after_load: AfterLoad,
}

impl RetentionBenchOptions {
    /// The `--retention` options of `args`, checked.
    pub fn new(args: &BenchArgs) -> anyhow::Result<RetentionBenchOptions> {
        let r = &args.retention;
        if r.claim_batch == 0 || r.windows == 0 || r.window.is_zero() {
            anyhow::bail!("--claim-batch, --windows and --window must be greater than 0");
        }
        Ok(RetentionBenchOptions {
            history: r.history,
            claim_batch: r.claim_batch,
            window: r.window,
            quiet_windows: r.windows,
            max_cleanup: r.max_cleanup,
            loader: args.history.loader,
            after_load: args.history.after_load,
        })
    }
}

/// Loads the history, measures the quiet windows, then the cleanup windows.
pub async fn run(
    harness: &Harness<'_>,
    options: &RetentionBenchOptions,
) -> Result<RetentionBenchReport, HistoryBenchError> {
    let config = harness.config;
    let store = harness.store(4).await?;
    let app_code = Harness::app_code("retention");
    let started = Instant::now();
    let base = now_ms() - HISTORY_AGE.as_millis() as i64;
    let mut writer = HistoryWriter::connect(
        &config.database.url,
        &harness.table,
        &app_code,
        &format!("{app_code}-h"),
        base,
    )
    .await?;
    match options.loader {
        Loader::Store => load_history(&*store, &app_code, options.history, base).await?,
        Loader::Sql => {
            let history = u64::from(options.history);
            writer
                .load(0, history, |n| {
                    if n % 1_000_000 == 0 {
                        eprintln!("history: {n} of {history} rows loaded");
                    }
                })
                .await?;
        }
    }
    // Either loader: the same statistics maintenance afterwards.
    writer.after_load(options.after_load).await?;
    writer.close().await;
    let load = started.elapsed();

    let next_fresh = AtomicU64::new(0);
    let mut quiet = Vec::new();
    for _ in 0..options.quiet_windows {
        quiet.push(
            measure(
                &*store,
                &app_code,
                options,
                &next_fresh,
                &CancellationToken::new(),
            )
            .await?,
        );
    }

    let retention = RetentionConfig {
        delivered: Some(CLEANUP_AGE),
        failed: None,
        ..config.retention.clone()
    };
    let cleanup_task = Retention {
        store: store.clone(),
        app_codes: vec![app_code.clone()],
        config: retention.clone(),
        metrics: Metrics::default(),
    };
    let stop = CancellationToken::new();
    let done = CancellationToken::new();
    let cleanup_started = Instant::now();
    let task = tokio::spawn({
        let (stop, done) = (stop.clone(), done.clone());
        async move {
            let totals = cleanup_task.pass(&stop).await;
            done.cancel();
            totals
        }
    });
    let mut cleanup = Vec::new();
    while !done.is_cancelled() && cleanup_started.elapsed() < options.max_cleanup {
        cleanup.push(measure(&*store, &app_code, options, &next_fresh, &done).await?);
    }
    stop.cancel();
    let totals = task.await??;
    let cleanup_time = cleanup_started.elapsed();
    let fresh = next_fresh.load(Ordering::Relaxed);
    let counts = store
        .counts(&CountsParams {
            app_code: Some(app_code),
            now_ms: now_ms(),
        })
        .await?;
    store.close().await;
    Ok(RetentionBenchReport {
        database: harness.database(),
        history: options.history,
        loader: (options.loader, options.after_load),
        load,
        retention,
        claim_batch: options.claim_batch,
        quiet,
        cleanup,
        deleted: totals.delivered,
        cleanup_time,
        history_left: counts.delivered.saturating_sub(fresh),
    })
}

/// Loads `history` rows delivered long ago (created from `base` on), a chunk at a time through
/// the store (`--loader store`).
async fn load_history(
    store: &dyn OutboxStore,
    app_code: &str,
    history: u32,
    base: i64,
) -> Result<(), HistoryBenchError> {
    let mut next_report = 100_000;
    for from in (0..history).step_by(LOAD_CHUNK as usize) {
        let to = history.min(from + LOAD_CHUNK);
        let rows = records(
            app_code,
            u64::from(from)..u64::from(to),
            1000,
            EventIds::Numbered {
                kind: "h",
                created_at_ms: base,
            },
        );
        store.enqueue(&rows).await?;
        claim_and_deliver(store, app_code, to - from, base + i64::from(to), "history").await?;
        if to >= next_report {
            eprintln!("history: {to} of {history} rows loaded");
            next_report += 100_000;
        }
    }
    Ok(())
}

/// One window: fresh batches enqueued (untimed), each claim + mark timed, until the window's
/// length has passed or `done` is cancelled.
async fn measure(
    store: &dyn OutboxStore,
    app_code: &str,
    options: &RetentionBenchOptions,
    next_fresh: &AtomicU64,
    done: &CancellationToken,
) -> Result<LatencyWindow, HistoryBenchError> {
    let started = Instant::now();
    let mut window = LatencyWindow::default();
    while started.elapsed() < options.window && !done.is_cancelled() {
        let from = next_fresh.fetch_add(u64::from(options.claim_batch), Ordering::Relaxed);
        let rows = records(
            app_code,
            from..from + u64::from(options.claim_batch),
            1000,
            EventIds::Numbered {
                kind: "f",
                created_at_ms: now_ms(),
            },
        );
        store.enqueue(&rows).await?;
        let call = Instant::now();
        claim_and_deliver(store, app_code, options.claim_batch, now_ms(), "measure").await?;
        window.calls.push(call.elapsed());
    }
    window.elapsed = started.elapsed();
    Ok(window)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_use_the_nearest_rank() {
        let window = LatencyWindow {
            calls: (1..=100).rev().map(Duration::from_millis).collect(),
            elapsed: Duration::from_secs(2),
        };
        assert_eq!(window.percentile(50.0), Duration::from_millis(50));
        assert_eq!(window.percentile(99.0), Duration::from_millis(99));
        assert_eq!(window.rate(), 50.0);
        assert_eq!(LatencyWindow::default().percentile(50.0), Duration::ZERO);
    }
}
