//! Background watchers of a running host: the status refresher (row gauges, oldest pending age,
//! database readiness), the wake reporter (what wakes idle loops, in readiness and metrics) and
//! `run`'s periodic summary line.
//!
//! The refresher runs one `counts` query per app code per `admin.refresh_interval`, whatever the
//! scrape rate; scrapes read the gauges it left.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::broker::Brokers;
use crate::metrics::{Metrics, RowOutcome};
use crate::outage::Outage;
use crate::readiness::Readiness;
use crate::record::now_ms;
use crate::store::{CountsParams, OutboxStore, StatusCounts};
use crate::wake::Wake;

/// How often [`report_wake`] reads the wake's state.
pub const WAKE_REPORT_INTERVAL: Duration = Duration::from_secs(1);

/// Reports what wakes idle loops ([`Wake::kind`]) and whether its feed is connected, into the
/// `outboxd_commit_feed_connected` gauge and the `/readyz` body, now and every
/// [`WAKE_REPORT_INTERVAL`] until `shutdown`.
pub async fn report_wake(
    wake: Wake,
    metrics: Metrics,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(WAKE_REPORT_INTERVAL);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let kind = wake.kind();
        let feed = kind.split_whitespace().next().unwrap_or("probe");
        let connected = wake.has_commit_feed();
        metrics.set_commit_feed(feed, connected);
        readiness.set_wake(if feed == "probe" {
            kind
        } else if connected {
            format!("{kind} (connected)")
        } else {
            format!("{kind} (reconnecting; probing meanwhile)")
        });
    }
}

/// Reports which `[[broker]]` connections are down to `readiness` every
/// [`WAKE_REPORT_INTERVAL`], until `shutdown` (their `outboxd_broker_connected` gauges are set
/// by the connections themselves).
pub async fn report_brokers(
    brokers: Brokers,
    readiness: Arc<Readiness>,
    shutdown: CancellationToken,
) {
    let mut ticker = tokio::time::interval(WAKE_REPORT_INTERVAL);
    ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = ticker.tick() => {}
        }
        let down = brokers
            .states()
            .into_iter()
            .filter(|(_, state)| !state.connected)
            .map(|(name, state)| {
                format!(
                    "broker `{name}` ({}): {}",
                    state.kind,
                    state.last_error.unwrap_or_else(|| "down".into())
                )
            })
            .collect();
        readiness.set_brokers_down(down);
    }
}

/// The latest counts per app code, shared by the refresher and the summary line.
#[derive(Debug, Default, Clone)]
pub struct StatusSnapshot {
    latest: Arc<Mutex<BTreeMap<String, StatusCounts>>>,
    refreshed_at_ms: Arc<std::sync::atomic::AtomicI64>,
}

impl StatusSnapshot {
    /// The counts of every app code as of the last refresh, and when that was (UTC ms; `None`
    /// before the first one).
    pub fn latest(&self) -> (BTreeMap<String, StatusCounts>, Option<i64>) {
        let counts = self.latest.lock().map(|l| l.clone()).unwrap_or_default();
        let at = self
            .refreshed_at_ms
            .load(std::sync::atomic::Ordering::Relaxed);
        (counts, (at > 0).then_some(at))
    }

    /// Backlog (`pending` + `retryable` + `delivering`) and the oldest pending age over every app
    /// code, as of the last refresh; `None` before the first one.
    pub fn backlog(&self) -> Option<(u64, Option<i64>)> {
        let latest = self.latest.lock().ok()?;
        if latest.is_empty() {
            return None;
        }
        let backlog = latest
            .values()
            .map(|c| c.pending + c.retryable + c.delivering)
            .sum();
        let oldest = latest
            .values()
            .filter_map(|c| c.oldest_pending_age_ms)
            .max();
        Some((backlog, oldest))
    }
}

/// Everything the refresher touches.
pub struct StatusRefresher {
    /// The table to count.
    pub store: Arc<dyn OutboxStore>,
    /// Tenants to count (one query each).
    pub app_codes: Vec<String>,
    /// Time between refreshes.
    pub interval: Duration,
    /// Where the gauges go.
    pub metrics: Metrics,
    /// Database readiness is set from each refresh.
    pub readiness: Arc<Readiness>,
    /// The latest counts, for the summary line.
    pub snapshot: StatusSnapshot,
}

impl StatusRefresher {
    /// Refreshes once now, then every interval, until `shutdown`.
    pub async fn run(self, shutdown: CancellationToken) {
        let mut ticker = tokio::time::interval(self.interval);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        let outage = Outage::new();
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = ticker.tick() => {}
            }
            match self.refresh_once().await {
                Ok(()) => {
                    outage.recovered(|ended| {
                        info!(outage = %ended.lasted_text(), failures = ended.failures,
                            "database reachable again");
                    });
                    self.readiness.set_database(Ok(()));
                }
                Err(reason) => {
                    outage.failed(|| warn!(error = %reason, "status refresh failed: not ready"));
                    self.readiness.set_database(Err(reason));
                }
            }
        }
    }

    /// One `counts` query per app code; the first error is returned as text.
    pub async fn refresh_once(&self) -> Result<(), String> {
        for app_code in &self.app_codes {
            let params = CountsParams {
                app_code: Some(app_code.clone()),
                now_ms: now_ms(),
            };
            match self.store.counts(&params).await {
                Ok(counts) => {
                    self.metrics.set_status_counts(app_code, &counts);
                    if let Ok(mut latest) = self.snapshot.latest.lock() {
                        latest.insert(app_code.clone(), counts);
                    }
                    self.snapshot
                        .refreshed_at_ms
                        .store(now_ms(), std::sync::atomic::Ordering::Relaxed);
                }
                Err(error) => {
                    self.metrics.count_database_error(&error);
                    return Err(error.to_string());
                }
            }
        }
        Ok(())
    }
}

/// Logs one summary line every `interval` until `shutdown`: rows delivered, retried, deferred
/// and failed since the previous line, delivery rate, backlog and oldest pending age.
pub async fn log_summaries(
    metrics: Metrics,
    app_codes: Vec<String>,
    snapshot: StatusSnapshot,
    interval: Duration,
    shutdown: CancellationToken,
) {
    let totals = |outcome| -> u64 {
        app_codes
            .iter()
            .map(|app| metrics.rows_counted(app, outcome))
            .sum()
    };
    let read = || {
        [
            totals(RowOutcome::delivered),
            totals(RowOutcome::retried),
            totals(RowOutcome::deferred),
            totals(RowOutcome::failed) + totals(RowOutcome::rejected),
        ]
    };
    let mut previous = read();
    let mut since = Instant::now();
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            _ = tokio::time::sleep(interval) => {}
        }
        let now = read();
        let elapsed = since.elapsed().as_secs_f64().max(0.001);
        since = Instant::now();
        let [delivered, retried, deferred, failed] =
            std::array::from_fn(|i| now[i].saturating_sub(previous[i]));
        previous = now;
        let (backlog, oldest) = snapshot.backlog().unzip();
        let oldest_pending_age = oldest
            .flatten()
            .map(|ms| humantime::format_duration(Duration::from_secs((ms.max(0) / 1000) as u64)))
            .map_or_else(|| "-".to_string(), |age| age.to_string());
        info!(
            delivered,
            retried,
            deferred,
            failed,
            events_per_second = format!("{:.1}", delivered as f64 / elapsed),
            backlog = backlog.map_or_else(|| "-".to_string(), |b| b.to_string()),
            oldest_pending_age,
            "summary"
        );
    }
}
