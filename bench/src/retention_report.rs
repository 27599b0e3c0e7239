//! The report of `outboxd-bench --retention`: claim + mark latency per window, quiet and while
//! the retention cleanup deletes the history.

use std::fmt;
use std::time::Duration;

use crate::history::{AfterLoad, Loader};
use crate::samples::{Samples, ms};
use outboxd::config::RetentionConfig;

/// Timed claim + mark calls of one window.
#[derive(Debug, Clone, Default)]
pub struct LatencyWindow {
    /// Each call's duration.
    pub calls: Vec<Duration>,
    /// Wall time of the window (enqueues included).
    pub elapsed: Duration,
}

impl LatencyWindow {
    /// The `p`-th percentile (0..=100) of the calls, nearest rank; zero without calls.
    pub fn percentile(&self, p: f64) -> Duration {
        Samples::new(self.calls.clone()).percentile(p)
    }

    /// Claim + mark calls per second of wall time.
    pub fn rate(&self) -> f64 {
        self.calls.len() as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// All windows' calls as one.
    pub fn pooled<'a>(windows: impl IntoIterator<Item = &'a LatencyWindow>) -> LatencyWindow {
        windows
            .into_iter()
            .fold(LatencyWindow::default(), |mut all, w| {
                all.calls.extend_from_slice(&w.calls);
                all.elapsed += w.elapsed;
                all
            })
    }
}

/// The result of one run.
#[derive(Debug, Clone)]
pub struct RetentionBenchReport {
    /// The database (password redacted).
    pub database: String,
    /// History rows loaded.
    pub history: u32,
    /// How they were loaded, and the statistics maintenance after.
    pub loader: (Loader, AfterLoad),
    /// Wall time of the load.
    pub load: Duration,
    /// Cleanup batch size and pause used.
    pub retention: RetentionConfig,
    /// Rows per measured call.
    pub claim_batch: u32,
    /// Windows before the cleanup.
    pub quiet: Vec<LatencyWindow>,
    /// Windows while the cleanup ran.
    pub cleanup: Vec<LatencyWindow>,
    /// History rows the cleanup deleted.
    pub deleted: u64,
    /// How long the cleanup ran (until done or stopped).
    pub cleanup_time: Duration,
    /// History rows left when the measurement stopped.
    pub history_left: u64,
}

fn write_window(f: &mut fmt::Formatter<'_>, name: &str, w: &LatencyWindow) -> fmt::Result {
    writeln!(
        f,
        "{:<12} {:>7} {:>9.2} {:>9.2} {:>9.2} {:>9.2} {:>10.0}",
        name,
        w.calls.len(),
        w.elapsed.as_secs_f64(),
        ms(w.percentile(50.0)),
        ms(w.percentile(90.0)),
        ms(w.percentile(99.0)),
        w.rate()
    )
}

impl fmt::Display for RetentionBenchReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "database: {}  history: {} delivered rows (loaded in {:.1}s, loader {}, after load: {})  claim batch: {}",
            self.database,
            self.history,
            self.load.as_secs_f64(),
            match self.loader.0 {
                Loader::Sql => "sql",
                Loader::Store => "store",
            },
            self.loader.1.name(),
            self.claim_batch
        )?;
        writeln!(
            f,
            "cleanup: retention.batch_size {} pause {}: deleted {} rows in {:.1}s, {} left",
            self.retention.batch_size,
            humantime::format_duration(self.retention.pause),
            self.deleted,
            self.cleanup_time.as_secs_f64(),
            self.history_left
        )?;
        writeln!(
            f,
            "{:<12} {:>7} {:>9} {:>9} {:>9} {:>9} {:>10}",
            "window", "calls", "secs", "p50 ms", "p90 ms", "p99 ms", "claims/s"
        )?;
        for (i, w) in self.quiet.iter().enumerate() {
            write_window(f, &format!("quiet {}", i + 1), w)?;
        }
        for (i, w) in self.cleanup.iter().enumerate() {
            write_window(f, &format!("cleanup {}", i + 1), w)?;
        }
        let quiet = LatencyWindow::pooled(&self.quiet);
        let cleanup = LatencyWindow::pooled(&self.cleanup);
        write_window(f, "quiet all", &quiet)?;
        write_window(f, "cleanup all", &cleanup)?;
        let ratio = |a: Duration, b: Duration| ms(a) / ms(b).max(1e-9);
        writeln!(
            f,
            "cleanup / quiet: p50 {:.2}x  p90 {:.2}x  p99 {:.2}x  claims/s {:.2}x",
            ratio(cleanup.percentile(50.0), quiet.percentile(50.0)),
            ratio(cleanup.percentile(90.0), quiet.percentile(90.0)),
            ratio(cleanup.percentile(99.0), quiet.percentile(99.0)),
            cleanup.rate() / quiet.rate().max(1e-9)
        )
    }
}
