//! Progress of long work: `run --drain` ([`drain_progress`]) and one-off jobs over a known
//! number of rows such as `requeue` ([`RowsProgress`]). On a terminal a bar with rows done, rate
//! and ETA (indicatif); when stderr is not a terminal, one plain log line every few seconds.
//!
//! The total is the backlog (`pending` + `retryable` + `delivering`) when the drain starts; rows
//! done are the ones this process marked `delivered` or `failed` (or the claim rejected).

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::metrics::{Metrics, RowOutcome};
use crate::record::now_ms;
use crate::store::{CountsParams, OutboxStore};

/// Interval of the plain progress lines.
const PLAIN_INTERVAL: Duration = Duration::from_secs(5);

/// Shows the drain's progress until `shutdown`.
pub async fn drain_progress(
    store: Arc<dyn OutboxStore>,
    app_codes: Vec<String>,
    metrics: Metrics,
    shutdown: CancellationToken,
) {
    let mut total = 0;
    for app_code in &app_codes {
        let params = CountsParams {
            app_code: Some(app_code.clone()),
            now_ms: now_ms(),
        };
        if let Ok(counts) = store.counts(&params).await {
            total += counts.pending + counts.retryable + counts.delivering;
        }
    }
    let done = || -> u64 {
        app_codes
            .iter()
            .map(|app| {
                metrics.rows_counted(app, RowOutcome::delivered)
                    + metrics.rows_counted(app, RowOutcome::failed)
                    + metrics.rows_counted(app, RowOutcome::rejected)
            })
            .sum()
    };
    let start = done();
    if std::io::stderr().is_terminal() {
        let style = ProgressStyle::with_template(
            "drain [{elapsed_precise}] {wide_bar} {pos}/{len} rows  {per_sec}  ETA {eta}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar());
        let bar = ProgressBar::new(total).with_style(style);
        loop {
            let position = done() - start;
            bar.set_length(total.max(position));
            bar.set_position(position);
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
        }
        bar.finish_and_clear();
    } else {
        let started = Instant::now();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(PLAIN_INTERVAL) => {}
            }
            let position = done() - start;
            let elapsed = started.elapsed().as_secs_f64().max(0.001);
            let rate = position as f64 / elapsed;
            let left = total.saturating_sub(position);
            let eta = if rate > 0.0 {
                humantime::format_duration(Duration::from_secs((left as f64 / rate) as u64))
                    .to_string()
            } else {
                "-".to_string()
            };
            info!(
                done = position,
                total,
                events_per_second = format!("{rate:.1}"),
                eta,
                "drain progress"
            );
        }
    }
}

/// Progress of a one-off job over a known number of rows (`outboxd requeue`): on a terminal a
/// bar with rows done, rate and ETA; otherwise a plain log line at most every few seconds, and
/// one at the end.
pub struct RowsProgress {
    label: &'static str,
    total: u64,
    done: u64,
    started: Instant,
    last_line: Instant,
    bar: Option<ProgressBar>,
}

impl RowsProgress {
    /// Starts showing progress of `total` rows, labelled `label` (e.g. `requeue`).
    pub fn new(label: &'static str, total: u64) -> RowsProgress {
        let bar = std::io::stderr().is_terminal().then(|| {
            let template = format!(
                "{label} [{{elapsed_precise}}] {{wide_bar}} {{pos}}/{{len}} rows  {{per_sec}}  ETA {{eta}}"
            );
            let style = ProgressStyle::with_template(&template)
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            ProgressBar::new(total).with_style(style)
        });
        let now = Instant::now();
        RowsProgress {
            label,
            total,
            done: 0,
            started: now,
            last_line: now,
            bar,
        }
    }

    /// Counts `rows` more rows done.
    pub fn add(&mut self, rows: u64) {
        self.done += rows;
        self.total = self.total.max(self.done);
        match &self.bar {
            Some(bar) => {
                bar.set_length(self.total);
                bar.set_position(self.done);
            }
            None if self.last_line.elapsed() >= PLAIN_INTERVAL => {
                self.last_line = Instant::now();
                self.log_line();
            }
            None => {}
        }
    }

    /// Rows done so far.
    pub fn done(&self) -> u64 {
        self.done
    }

    /// Clears the bar (or writes the last plain line).
    pub fn finish(self) {
        match &self.bar {
            Some(bar) => bar.finish_and_clear(),
            None => self.log_line(),
        }
    }

    fn log_line(&self) {
        let elapsed = self.started.elapsed().as_secs_f64().max(0.001);
        info!(
            done = self.done,
            total = self.total,
            rows_per_second = format!("{:.1}", self.done as f64 / elapsed),
            "{} progress",
            self.label
        );
    }
}
