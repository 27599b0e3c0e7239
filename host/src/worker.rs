//! The delivery loop: claim a leased batch → publish it → mark every row, fenced on the lease.
//!
//! A [`Worker`] runs `concurrency` loops ("worker slots"), each with its own worker id
//! (`<node_id>/<slot>`), over the configured app codes. Idle loops wait the poll interval; a loop
//! whose claim came back full claims again at once. Shutdown is a [`CancellationToken`]: loops stop
//! claiming, finish and mark the batch in flight, and return. The worker retries no store call
//! (the store retries transient errors: see `store`'s "Who checks what, who retries what").

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, error, info, warn};

use crate::publish::{Event, Outcome, Publisher};
use crate::record::now_ms;
use crate::retry::{Decision, RetryPolicy};
use crate::store::{
    ClaimBatch, ClaimParams, DeliveryOrder, Disposition, Mark, MarkParams, OutboxStore, StoreError,
};

/// Everything a worker needs to know besides its store and publisher (from a configuration:
/// `Config::worker_options`).
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerOptions {
    /// Tenants served, claimed in turn.
    pub app_codes: Vec<String>,
    /// Most rows per claim.
    pub batch_size: u32,
    /// Wait between claims when idle (and after a database error).
    pub poll_interval: Duration,
    /// Lease of a claim.
    pub lease: Duration,
    /// Deadline of one publish call.
    pub publish_timeout: Duration,
    /// Retry policy and attempt limit.
    pub retry: RetryPolicy,
    /// Per-room ordering or none.
    pub ordering: DeliveryOrder,
    /// Loops (batches in flight) in this process.
    pub concurrency: u32,
    /// This host's name in worker ids and logs.
    pub node_id: String,
}

/// When [`Worker::run`] returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunMode {
    /// Until shutdown is requested.
    Forever,
    /// Once a loop finds nothing claimable in any app code (or on shutdown). A database error ends
    /// a draining run with that error instead of waiting for the database to come back.
    Drain,
}

/// What one claim → publish → mark round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Rows handed out by the claim.
    pub claimed: u64,
    /// Rows the claim itself moved to `failed` (corrupt envelope, lease expired too often).
    pub rejected: u64,
    /// Rows marked `delivered`.
    pub delivered: u64,
    /// Rows marked `retryable`.
    pub retried: u64,
    /// Rows marked `failed`.
    pub failed: u64,
    /// Rows whose lease had been taken over when marking (left untouched).
    pub stale: u64,
}

/// Errors that stop a round.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The store failed (claim or mark).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The claim → publish → mark loop over one store and one publisher. Cheap to clone.
#[derive(Clone)]
pub struct Worker {
    store: Arc<dyn OutboxStore>,
    publisher: Arc<dyn Publisher>,
    options: Arc<WorkerOptions>,
}

impl Worker {
    /// A worker over `store` publishing through `publisher`.
    pub fn new(
        store: Arc<dyn OutboxStore>,
        publisher: Arc<dyn Publisher>,
        options: WorkerOptions,
    ) -> Worker {
        Worker {
            store,
            publisher,
            options: Arc::new(options),
        }
    }

    /// The options this worker runs with.
    pub fn options(&self) -> &WorkerOptions {
        &self.options
    }

    /// Runs `concurrency` loops until `shutdown` is cancelled (or, in [`RunMode::Drain`], until
    /// nothing is claimable). Batches in flight are always published and marked before returning.
    pub async fn run(
        &self,
        mode: RunMode,
        shutdown: CancellationToken,
    ) -> Result<BatchStats, WorkerError> {
        let tracker = TaskTracker::new();
        let totals = Arc::new(Totals::default());
        let mut handles = Vec::new();
        for slot in 0..self.options.concurrency {
            let worker = self.clone();
            let shutdown = shutdown.clone();
            let totals = totals.clone();
            handles.push(
                tracker.spawn(async move { worker.run_slot(slot, mode, shutdown, &totals).await }),
            );
        }
        tracker.close();
        let mut first_error = None;
        for handle in handles {
            match handle.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => {
                    shutdown.cancel(); // one draining loop failed: stop the others too
                    first_error.get_or_insert(e);
                }
                Err(join) => std::panic::resume_unwind(join.into_panic()),
            }
        }
        tracker.wait().await;
        match first_error {
            Some(e) => Err(e),
            None => Ok(totals.snapshot()),
        }
    }

    /// One loop: worker id `<node_id>/<slot>`.
    async fn run_slot(
        &self,
        slot: u32,
        mode: RunMode,
        shutdown: CancellationToken,
        totals: &Totals,
    ) -> Result<(), WorkerError> {
        let worker_id = format!("{}/{}", self.options.node_id, slot);
        info!(worker = %worker_id, node_id = %self.options.node_id, status = "started", "worker started");
        while !shutdown.is_cancelled() {
            let mut found_any = false;
            let mut any_full = false;
            let mut failed = false;
            for app_code in &self.options.app_codes {
                if shutdown.is_cancelled() {
                    break;
                }
                match self.process_batch(&worker_id, app_code).await {
                    Ok(stats) => {
                        totals.add(&stats);
                        let taken = stats.claimed + stats.rejected;
                        found_any |= taken > 0;
                        any_full |= taken >= u64::from(self.options.batch_size);
                    }
                    Err(e) if mode == RunMode::Drain => return Err(e),
                    Err(e) => {
                        error!(worker = %worker_id, node_id = %self.options.node_id, app_code = %app_code,
                            status = "batch_failed", error = %e, "round failed; retrying after the poll interval");
                        failed = true;
                    }
                }
            }
            if mode == RunMode::Drain && !found_any && !failed {
                break;
            }
            if !any_full || failed {
                tokio::select! {
                    _ = shutdown.cancelled() => {}
                    _ = tokio::time::sleep(self.options.poll_interval) => {}
                }
            }
        }
        info!(worker = %worker_id, node_id = %self.options.node_id, status = "stopped", "worker stopped");
        Ok(())
    }

    /// One round for one app code: claim, publish, mark. Returns what happened to the rows.
    pub async fn process_batch(
        &self,
        worker_id: &str,
        app_code: &str,
    ) -> Result<BatchStats, WorkerError> {
        let options = &*self.options;
        let batch = self
            .store
            .claim(&ClaimParams {
                app_code: app_code.to_string(),
                worker_id: worker_id.to_string(),
                limit: options.batch_size,
                lease_ms: options.lease.as_millis() as i64,
                now_ms: now_ms(),
                max_attempts: options.retry.max_attempts,
                ordering: options.ordering,
            })
            .await?;
        let mut stats = BatchStats {
            claimed: batch.events.len() as u64,
            rejected: batch.rejected.len() as u64,
            ..BatchStats::default()
        };
        for row in &batch.rejected {
            warn!(worker = %worker_id, node_id = %options.node_id, app_code = %app_code, event_id = %row.event_id,
                event_type = %row.event_type, room_id = %row.room_id, status = "failed", error = %row.reason,
                "row failed at claim");
        }
        if batch.events.is_empty() {
            return Ok(stats);
        }
        let ClaimBatch { lease, events, .. } = batch;
        let events: Vec<Event> = events.into_iter().map(|claimed| claimed.event).collect();
        let outcomes = self.publish(&events).await;
        let now = now_ms();
        let marks: Vec<Mark> = events
            .iter()
            .zip(outcomes)
            .map(|(event, outcome)| Mark {
                event_id: event.event_id.clone(),
                disposition: self.disposition(event.attempt, outcome, now),
            })
            .collect();
        // The store retries a transient failure while the lease holds; any error left ends the
        // round, and the rows come back when the lease expires (counted as an attempt).
        let report = self
            .store
            .mark(&MarkParams {
                lease: &lease,
                marks: &marks,
                now_ms: now_ms(),
            })
            .await?;
        for (event, mark) in events.iter().zip(&marks) {
            let stale = report.stale.contains(&mark.event_id);
            let (status, error) = match (&mark.disposition, stale) {
                (_, true) => ("stale", None),
                (Disposition::Delivered, _) => ("delivered", None),
                (Disposition::Retryable { error, .. }, _) => ("retryable", Some(error.as_str())),
                (Disposition::Failed { error }, _) => ("failed", Some(error.as_str())),
            };
            match status {
                "delivered" => stats.delivered += 1,
                "retryable" => stats.retried += 1,
                "failed" => stats.failed += 1,
                _ => stats.stale += 1,
            }
            if status == "delivered" {
                debug!(worker = %worker_id, node_id = %options.node_id, app_code = %app_code, event_id = %event.event_id,
                    event_type = %event.event_type, room_id = %event.room_id, retry_count = event.attempt - 1,
                    status, "event delivered");
            } else {
                warn!(worker = %worker_id, node_id = %options.node_id, app_code = %app_code, event_id = %event.event_id,
                    event_type = %event.event_type, room_id = %event.room_id, retry_count = event.attempt - 1,
                    status, error = error.unwrap_or("lease taken over by another worker; left untouched"),
                    "event not delivered");
            }
        }
        Ok(stats)
    }

    /// Publishes with the publish timeout; a timeout or a result list of the wrong length fails
    /// the whole batch as retryable.
    async fn publish(&self, events: &[Event]) -> Vec<Outcome> {
        let timeout = self.options.publish_timeout;
        match tokio::time::timeout(timeout, self.publisher.publish(events)).await {
            Ok(outcomes) if outcomes.len() == events.len() => outcomes,
            Ok(outcomes) => {
                let reason = format!(
                    "publisher returned {} results for {} events",
                    outcomes.len(),
                    events.len()
                );
                vec![Outcome::retryable(reason); events.len()]
            }
            Err(_) => {
                let reason = format!(
                    "publish timed out after {}",
                    humantime::format_duration(timeout)
                );
                vec![Outcome::retryable(reason); events.len()]
            }
        }
    }

    /// Maps a publish outcome of attempt `attempt` to the row's new state via the retry policy.
    fn disposition(&self, attempt: u32, outcome: Outcome, now: i64) -> Disposition {
        match outcome {
            Outcome::Delivered => Disposition::Delivered,
            Outcome::Permanent { message } => Disposition::Failed { error: message },
            Outcome::Retryable {
                message,
                retry_after,
            } => match self.options.retry.decide(attempt, retry_after, now) {
                Decision::RetryAt(next_retry_at_ms) => Disposition::Retryable {
                    next_retry_at_ms,
                    error: message,
                },
                Decision::GiveUp => Disposition::Failed {
                    error: format!("gave up after {attempt} attempts: {message}"),
                },
            },
        }
    }
}

/// Counters shared by the loops of one run.
#[derive(Default)]
struct Totals {
    claimed: AtomicU64,
    rejected: AtomicU64,
    delivered: AtomicU64,
    retried: AtomicU64,
    failed: AtomicU64,
    stale: AtomicU64,
}

impl Totals {
    fn add(&self, stats: &BatchStats) {
        self.claimed.fetch_add(stats.claimed, Ordering::Relaxed);
        self.rejected.fetch_add(stats.rejected, Ordering::Relaxed);
        self.delivered.fetch_add(stats.delivered, Ordering::Relaxed);
        self.retried.fetch_add(stats.retried, Ordering::Relaxed);
        self.failed.fetch_add(stats.failed, Ordering::Relaxed);
        self.stale.fetch_add(stats.stale, Ordering::Relaxed);
    }

    fn snapshot(&self) -> BatchStats {
        BatchStats {
            claimed: self.claimed.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            stale: self.stale.load(Ordering::Relaxed),
        }
    }
}
