//! The delivery loop: read a batch from a partition this host owns → publish it → mark every
//! row once, fenced on the partition's owner and epoch.
//!
//! Each sink's results are marked as soon as that sink answers ([`Publisher::publish_parts`]), so
//! a slow sink never holds up another sink's rows; the worker's publish deadline only turns the
//! events still unanswered into retryable ones.
//!
//! A database that cannot be reached is logged once when the outage begins (a claim or a mark
//! cannot connect) and once when it ends, not at every retry.
//!
//! A [`Worker`] owns partitions of each tenant's rooms (`partitions.rs`: a heartbeat renews and
//! rebalances them) and runs `concurrency` loops ("worker slots", named `<node_id>/<slot>` in
//! logs) over the configured app codes; a loop reads one owned partition at a time. A loop whose
//! read came back full reads again at once; an idle loop waits for a [`Wake`] (a commit to the outbox, or a producer in this
//! process) or the poll interval, whichever comes first; without a commit feed it probes
//! adaptively ([`IdleBackoff`](crate::wake::IdleBackoff), every `idle_probe` at most). Shutdown is a [`CancellationToken`]: loops stop claiming, finish
//! and mark the batch in flight, and return. The worker retries no store call (the store retries
//! transient errors: see `store`'s "Who checks what, who retries what").
//!
//! # Layout
//!
//! - `slot.rs`: one loop as named steps (claim a round, drained?, wait for work).
//! - `deliveries.rs`: a loop's batches in flight, run beside every step and settled as they
//!   finish; the run's shared counters.
//! - `ahead.rs`: how many deliveries a loop's claim may overlap (claim-ahead).
//! - `claim.rs`: the clock check, the read of the owned partitions and its booking.
//! - `crash_guard.rs`: partitions taken over from a dead host read in smaller batches, down to
//!   one row announced first, so a row that kills its host ends `failed`.
//! - `deliver.rs`: one batch published and each part marked as it comes.
//! - `deadline.rs`: the publish deadline.
//! - `mark.rs`: outcomes turned into marks, marked fenced on the partition, counted and logged.
//! - `partitions.rs`: the partitions this host owns, lent to the loops one at a time, and the
//!   heartbeat that renews and rebalances them.
//! - `clock.rs`: the host's clock checked against the database's.
//! - `options.rs`: [`WorkerOptions`] derived from a loaded configuration.

use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info};

use crate::metrics::{Metrics, RowOutcome};
use crate::outage::Outage;
use crate::publish::Publisher;
use crate::retry::RetryPolicy;
use crate::store::{DeliveryOrder, OutboxStore, StoreError};
use crate::telemetry::Telemetry;
use crate::wake::Wake;
use clock::ClockGuard;
use deliveries::Totals;

mod ahead;
mod claim;
pub mod clock;
mod crash_guard;
mod deadline;
mod deliver;
mod deliveries;
mod lane;
mod mark;
mod options;
mod partitions;
mod slot;

pub use clock::{CLOCK_CHECK_INTERVAL, Clock};

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
    /// Longest idle wait of a loop without a commit feed ([`IdleBackoff`](crate::wake::IdleBackoff)'s bound; at most
    /// `poll_interval`).
    pub idle_probe: Duration,
    /// Lease of this host's partitions (renewed by its heartbeat every third of it).
    pub lease: Duration,
    /// Deadline of one batch's publish: events no sink answered by then are retryable; results
    /// already answered are kept. Must exceed every sink's `limits.publish_timeout`.
    pub publish_timeout: Duration,
    /// Retry policy and attempt limit.
    pub retry: RetryPolicy,
    /// Per-room ordering or none.
    pub ordering: DeliveryOrder,
    /// Loops in this process; each reads its next batch while the current one is delivered
    /// where the database runs writers side by side (see `run_slot`).
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

/// What one read → publish → mark round did: rows counted by what the worker did with them
/// ([`RowOutcome`], the `outcome` label of `outboxd_rows`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Rows handed out by the reads.
    pub claimed: u64,
    /// Rows the reads themselves moved to `failed` (corrupt envelope, an earlier version's lease
    /// expired too often).
    pub rejected: u64,
    /// Rows marked `delivered`.
    pub delivered: u64,
    /// Rows marked `retryable` (an attempt spent).
    pub retried: u64,
    /// Rows put back `retryable` by an open circuit breaker (no attempt spent).
    pub deferred: u64,
    /// Rows marked `failed`.
    pub failed: u64,
    /// Rows whose partition had been taken over, or that changed meanwhile, when marking (left
    /// untouched).
    pub stale: u64,
}

/// Errors that stop a round.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The store failed (read, heartbeat or mark).
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The read → publish → mark loop over one store and one publisher. Cheap to clone.
#[derive(Clone)]
pub struct Worker {
    store: Arc<dyn OutboxStore>,
    publisher: Arc<dyn Publisher>,
    options: Arc<WorkerOptions>,
    wake: Wake,
    /// When the current database outage began (shared by the loops, logged once each way).
    outage: Arc<Outage>,
    metrics: Metrics,
    /// The partitions this host owns.
    partitions: Arc<partitions::PartitionBook>,
    /// This host's clock (leases, retry times, marks).
    clock: Clock,
    /// Whether that clock agrees with the database's well enough to claim.
    clock_guard: Arc<ClockGuard>,
    /// The host's spans (off unless configured).
    telemetry: Telemetry,
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
            wake: Wake::new(),
            outage: Arc::new(Outage::new()),
            metrics: Metrics::default(),
            partitions: Arc::new(partitions::PartitionBook::new(
                &options.node_id,
                options.ordering != DeliveryOrder::PerRoom,
            )),
            clock: clock::system_clock(),
            clock_guard: Arc::new(ClockGuard::new(options.lease)),
            telemetry: Telemetry::off(),
            options: Arc::new(options),
        }
    }

    /// The same worker reading time from `clock` instead of the system clock (tests shift it to
    /// play a host whose clock is off).
    pub fn with_clock(mut self, clock: Clock) -> Worker {
        self.clock = clock;
        self
    }

    /// Now, by this worker's clock: UTC milliseconds.
    fn now_ms(&self) -> i64 {
        (self.clock)()
    }

    /// The same worker woken by `wake` (shared with a commit feed, [`crate::wake::start_commit_feed`],
    /// or a producer in this process).
    pub fn with_wake(mut self, wake: Wake) -> Worker {
        self.wake = wake;
        self
    }

    /// What wakes this worker's idle loops: call [`Wake::wake`] after committing outbox rows in
    /// this process to have them delivered at once.
    pub fn wake(&self) -> &Wake {
        &self.wake
    }

    /// The same worker reporting rows, latencies and database errors to `metrics`.
    pub fn with_metrics(mut self, metrics: Metrics) -> Worker {
        self.metrics = metrics;
        self
    }

    /// The same worker recording its deliveries, reads and marks as spans through `telemetry`
    /// (each event's sink then gets its delivery span's context).
    pub fn with_telemetry(mut self, telemetry: Telemetry) -> Worker {
        self.telemetry = telemetry;
        self
    }

    /// The options this worker runs with.
    pub fn options(&self) -> &WorkerOptions {
        &self.options
    }

    /// Runs `concurrency` loops until `shutdown` is cancelled (or, in [`RunMode::Drain`], until
    /// nothing is claimable). Batches in flight are always published and marked before returning.
    ///
    /// First runs the first heartbeat (its error returned: the partition tables missing, the
    /// database down), then heartbeats beside the loops, and releases the partitions on return.
    pub async fn run(
        &self,
        mode: RunMode,
        shutdown: CancellationToken,
    ) -> Result<BatchStats, WorkerError> {
        self.partitions.keep_excess(mode == RunMode::Drain);
        let (beating, stop) = self.start_partitions(&shutdown).await?;
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
        stop.cancel();
        if let Ok(Err(e)) = beating.await {
            first_error.get_or_insert(e.into());
        }
        // Leaving: the partitions go to the other hosts at their next heartbeat.
        if let Err(e) = self.heartbeat(true).await {
            info!(node_id = %self.options.node_id, error = %e,
                "could not release the partitions on the way out; they pass on when their lease ends");
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(totals.snapshot()),
        }
    }

    /// Before the loops start: the first heartbeat (its error returned: the tables missing, the
    /// database down), then the heartbeat task, with what stops it.
    async fn start_partitions(
        &self,
        shutdown: &CancellationToken,
    ) -> Result<
        (
            tokio::task::JoinHandle<Result<(), StoreError>>,
            CancellationToken,
        ),
        WorkerError,
    > {
        self.heartbeat(false).await?;
        let stop = shutdown.child_token();
        let worker = self.clone();
        let beating = tokio::spawn({
            let (stop, run) = (stop.clone(), shutdown.clone());
            async move { worker.run_heartbeat(stop, run).await }
        });
        Ok((beating, stop))
    }

    /// Logs the start of a database outage once (the loops go on retrying every poll interval).
    fn outage_began(&self, error: &StoreError) {
        self.outage.failed(|| {
            error!(node_id = %self.options.node_id, status = "database_unreachable", error = %error,
                "database unreachable; retrying every poll interval until it answers");
        });
    }

    /// Logs the end of a database outage, once, with its length.
    fn outage_over(&self) {
        self.outage.recovered(|ended| {
            info!(node_id = %self.options.node_id, status = "database_reachable",
                outage = %ended.lasted_text(), failures = ended.failures, "database reachable again");
        });
    }

    /// One round for one app code outside [`Worker::run`]: a heartbeat (own partitions first),
    /// then read, publish, mark. Returns what happened to the rows.
    pub async fn process_batch(
        &self,
        worker_id: &str,
        app_code: &str,
    ) -> Result<BatchStats, WorkerError> {
        self.heartbeat(false).await?;
        let (mut stats, batch) = self.claim_batch(worker_id, app_code).await?;
        if let Some((batch, _turn)) = batch {
            stats.add_marks(&self.deliver(worker_id, app_code, batch, None).await?);
        }
        Ok(stats)
    }
}

impl BatchStats {
    /// The rows counted for `outcome`.
    pub fn of(&self, outcome: RowOutcome) -> u64 {
        match outcome {
            RowOutcome::claimed => self.claimed,
            RowOutcome::rejected => self.rejected,
            RowOutcome::delivered => self.delivered,
            RowOutcome::retried => self.retried,
            RowOutcome::deferred => self.deferred,
            RowOutcome::failed => self.failed,
            RowOutcome::stale => self.stale,
        }
    }

    /// Counts `rows` more for `outcome`.
    fn count(&mut self, outcome: RowOutcome, rows: u64) {
        let counter = match outcome {
            RowOutcome::claimed => &mut self.claimed,
            RowOutcome::rejected => &mut self.rejected,
            RowOutcome::delivered => &mut self.delivered,
            RowOutcome::retried => &mut self.retried,
            RowOutcome::deferred => &mut self.deferred,
            RowOutcome::failed => &mut self.failed,
            RowOutcome::stale => &mut self.stale,
        };
        *counter += rows;
    }

    /// Adds the mark counters (delivered, retried, deferred, failed, stale) of `other`.
    fn add_marks(&mut self, other: &BatchStats) {
        for outcome in RowOutcome::MARKED {
            self.count(outcome, other.of(outcome));
        }
    }
}
