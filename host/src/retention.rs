//! Retention: deletes `delivered` and `failed` rows past their configured age, in bounded
//! batches at a bounded rate, beside the worker (`run`) or on demand (`outboxd purge`).
//!
//! Each batch is one [`OutboxStore::purge`] call: ids read from the tenant's status index, then deleted
//! by primary key, so a batch never scans the table and never touches `pending`, `delivering` or
//! `retryable` rows. Any number of hosts may run it at once (a row deleted twice is simply not
//! counted the second time).

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::RetentionConfig;
use crate::metrics::Metrics;
use crate::record::now_ms;
use crate::store::{OutboxStore, PurgeParams, PurgeStatus, StoreError};

/// What one cleanup pass deleted (or, dry, would delete) per status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PurgeTotals {
    /// `delivered` rows.
    pub delivered: u64,
    /// `failed` rows.
    pub failed: u64,
}

/// The cleanup of one table.
#[derive(Clone)]
pub struct Retention {
    /// The table.
    pub store: Arc<dyn OutboxStore>,
    /// Tenants to clean.
    pub app_codes: Vec<String>,
    /// Ages, batch size, pacing.
    pub config: RetentionConfig,
    /// `outboxd_purged_rows_total` goes here.
    pub metrics: Metrics,
}

impl Retention {
    /// The statuses with an age, and that age.
    fn targets(&self) -> impl Iterator<Item = (PurgeStatus, Duration)> + '_ {
        [
            (PurgeStatus::Delivered, self.config.delivered),
            (PurgeStatus::Failed, self.config.failed),
        ]
        .into_iter()
        .filter_map(|(status, age)| age.map(|age| (status, age)))
    }

    /// Cleans every tenant until caught up, pausing between batches; stops early (returning
    /// what was done) when `shutdown` is cancelled.
    pub async fn pass(&self, shutdown: &CancellationToken) -> Result<PurgeTotals, StoreError> {
        let mut totals = PurgeTotals::default();
        for (status, age) in self.targets().collect::<Vec<_>>() {
            for app_code in &self.app_codes {
                loop {
                    if shutdown.is_cancelled() {
                        return Ok(totals);
                    }
                    let deleted = self
                        .store
                        .purge(&self.params(app_code, status, age, false))
                        .await
                        .inspect_err(|e| self.metrics.count_database_error(e))?;
                    self.metrics
                        .count_purged(app_code, status.as_str(), deleted);
                    match status {
                        PurgeStatus::Delivered => totals.delivered += deleted,
                        PurgeStatus::Failed => totals.failed += deleted,
                    }
                    if deleted < u64::from(self.config.batch_size) {
                        break;
                    }
                    tokio::select! {
                        _ = shutdown.cancelled() => return Ok(totals),
                        _ = tokio::time::sleep(self.config.pause) => {}
                    }
                }
            }
        }
        Ok(totals)
    }

    /// How many rows a pass would delete now (`outboxd purge --dry-run`).
    pub async fn dry_run(&self) -> Result<PurgeTotals, StoreError> {
        let mut totals = PurgeTotals::default();
        for (status, age) in self.targets().collect::<Vec<_>>() {
            for app_code in &self.app_codes {
                let count = self
                    .store
                    .purge(&self.params(app_code, status, age, true))
                    .await?;
                match status {
                    PurgeStatus::Delivered => totals.delivered += count,
                    PurgeStatus::Failed => totals.failed += count,
                }
            }
        }
        Ok(totals)
    }

    fn params(
        &self,
        app_code: &str,
        status: PurgeStatus,
        age: Duration,
        dry_run: bool,
    ) -> PurgeParams {
        let age_ms = i64::try_from(age.as_millis()).unwrap_or(i64::MAX);
        PurgeParams {
            app_code: app_code.to_string(),
            status,
            before_ms: now_ms().saturating_sub(age_ms),
            limit: self.config.batch_size,
            dry_run,
        }
    }

    /// Runs a pass every `interval` until `shutdown` (a failing pass is logged and retried at
    /// the next interval).
    pub async fn run(self, shutdown: CancellationToken) {
        if !self.config.enabled() {
            return;
        }
        loop {
            match self.pass(&shutdown).await {
                Ok(totals) if totals.delivered + totals.failed > 0 => {
                    info!(
                        delivered = totals.delivered,
                        failed = totals.failed,
                        "retention deleted old rows"
                    )
                }
                Ok(_) => {}
                Err(error) => warn!(%error, "retention pass failed; retrying at the next interval"),
            }
            tokio::select! {
                _ = shutdown.cancelled() => return,
                _ = tokio::time::sleep(self.config.interval) => {}
            }
        }
    }
}
