//! The delivery loop: claim a leased batch → publish it → mark every row, fenced on the lease.
//!
//! Each sink's results are marked as soon as that sink answers ([`Publisher::publish_parts`]), so
//! a slow sink never holds up another sink's rows; the worker's publish deadline only turns the
//! events still unanswered into retryable ones.
//!
//! A database that cannot be reached is logged once when the outage begins (a claim or a mark
//! cannot connect) and once when it ends, not at every retry.
//!
//! A [`Worker`] runs `concurrency` loops ("worker slots"), each with its own worker id
//! (`<node_id>/<slot>`), over the configured app codes. A loop whose claim came back full claims
//! again at once; an idle loop waits for a [`Wake`] (a commit to the outbox, or a producer in this
//! process) or the poll interval, whichever comes first; without a commit feed it probes
//! adaptively ([`IdleBackoff`], every `idle_probe` at most). Shutdown is a [`CancellationToken`]: loops stop claiming, finish
//! and mark the batch in flight, and return. The worker retries no store call (the store retries
//! transient errors: see `store`'s "Who checks what, who retries what").

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{error, info, warn};

use crate::metrics::{Metrics, RowOutcome};
use crate::publish::Publisher;
use crate::retry::RetryPolicy;
use crate::store::{ClaimBatch, ClaimParams, DeliveryOrder, OutboxStore, RejectedRow, StoreError};
use crate::wake::{Idle, IdleBackoff, Wake};
use ahead::ClaimAhead;
use clock::ClockGuard;

mod ahead;
pub mod clock;
mod deliver;
mod held;

pub use clock::{CLOCK_CHECK_INTERVAL, Clock};
pub use held::WorkerMode;

/// How often a busy loop's claim also reads the due branches (retryable rows whose retry is due,
/// expired leases) of an app code while the pending branch keeps handing out rows
/// ([`ClaimParams::scan_due`]): a due row waits at most this long plus one round for a busy loop.
/// A claim that finds no pending row always reads them.
pub const DUE_SCAN_INTERVAL: Duration = Duration::from_millis(50);

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
    /// Longest idle wait of a loop without a commit feed ([`IdleBackoff`]'s bound; at most
    /// `poll_interval`).
    pub idle_probe: Duration,
    /// Lease of a claim.
    pub lease: Duration,
    /// Deadline of one batch's publish: events no sink answered by then are retryable; results
    /// already answered are kept. Must exceed every sink's `limits.publish_timeout`.
    pub publish_timeout: Duration,
    /// Retry policy and attempt limit.
    pub retry: RetryPolicy,
    /// Per-room ordering or none.
    pub ordering: DeliveryOrder,
    /// How a batch is claimed and marked: leased (the default) or held in an open transaction
    /// ([`WorkerMode`]).
    pub mode: WorkerMode,
    /// Loops in this process; each claims its next batch while the current one is delivered
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

/// What one claim → publish → mark round did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BatchStats {
    /// Rows handed out by the claim.
    pub claimed: u64,
    /// Rows the claim itself moved to `failed` (corrupt envelope, lease expired too often).
    pub rejected: u64,
    /// Rows marked `delivered`.
    pub delivered: u64,
    /// Rows marked `retryable` (an attempt spent).
    pub retried: u64,
    /// Rows put back `retryable` by an open circuit breaker (no attempt spent).
    pub deferred: u64,
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
    wake: Wake,
    /// When the current database outage began (shared by the loops, logged once each way).
    outage: Arc<Mutex<Option<Instant>>>,
    metrics: Metrics,
    /// Which claims of a held-mode worker are leased (its crash guard; unused in leased mode).
    held_schedule: Arc<held::HeldSchedule>,
    /// This host's clock (leases, retry times, marks).
    clock: Clock,
    /// Whether that clock agrees with the database's well enough to claim.
    clock_guard: Arc<ClockGuard>,
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
            outage: Arc::new(Mutex::new(None)),
            metrics: Metrics::default(),
            held_schedule: Arc::new(held::HeldSchedule::new(options.concurrency)),
            clock: clock::system_clock(),
            clock_guard: Arc::new(ClockGuard::new(options.lease)),
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

    /// The options this worker runs with.
    pub fn options(&self) -> &WorkerOptions {
        &self.options
    }

    /// Runs `concurrency` loops until `shutdown` is cancelled (or, in [`RunMode::Drain`], until
    /// nothing is claimable). Batches in flight are always published and marked before returning.
    ///
    /// First checks, once, that the table has the indexes its claims read
    /// ([`OutboxStore::check_ordering`]): with per-room ordering and no room index it returns that
    /// error before claiming anything.
    pub async fn run(
        &self,
        mode: RunMode,
        shutdown: CancellationToken,
    ) -> Result<BatchStats, WorkerError> {
        self.store
            .check_ordering(self.options.ordering)
            .await
            .inspect_err(|e| self.metrics.count_database_error(e))?;
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
    ///
    /// **Claim-ahead.** Where the database runs writers side by side
    /// ([`crate::store::Backend::concurrent_writers`]), the loop claims its next batch while the
    /// earlier ones are still publishing and marking: at most two batches are delivering when a
    /// claim starts (one while the last delivery was slow: [`ClaimAhead`]), so at most three are
    /// leased per loop, and a batch claimed ahead starts publishing when the one before it is
    /// marked (each publishes within its own lease, which starts at its claim). A row committed
    /// during a round is claimed without waiting for the round's marks. On SQLite (one writer at
    /// a time) a claim would only queue behind the mark, so the loop claims after its batch is
    /// marked.
    async fn run_slot(
        &self,
        slot: u32,
        mode: RunMode,
        shutdown: CancellationToken,
        totals: &Totals,
    ) -> Result<(), WorkerError> {
        let worker_id = format!("{}/{}", self.options.node_id, slot);
        let mut backoff = IdleBackoff::new(self.options.idle_probe.min(self.options.poll_interval));
        // The last arm of the notify gate this loop claimed after (`Wake::idle`).
        let mut armed_seen = None;
        // Deliveries a claim may overlap: two where writers run side by side while deliveries
        // are quick, one behind a slow one, none on SQLite (`ahead.rs`).
        let ahead = ClaimAhead::new(
            self.store.backend().concurrent_writers(),
            self.options
                .lease
                .saturating_sub(self.options.publish_timeout + deliver::LEASE_MARGIN),
        );
        // A batch claimed ahead publishes only once the one before it is marked: per loop at
        // most one batch is published and not yet marked, so a host killed at any moment
        // redelivers at most one batch per loop (the ones claimed ahead wait out their leases
        // unpublished, counted as an attempt). FIFO, so batches publish in claim order.
        let publishing = tokio::sync::Semaphore::new(1);
        let mut delivering: FuturesUnordered<Delivery<'_>> = FuturesUnordered::new();
        let mut first_error: Option<WorkerError> = None;
        // Per app code (same order as the options): when a claim last read the due branches.
        let mut due_scanned: Vec<Option<Instant>> = vec![None; self.options.app_codes.len()];
        info!(worker = %worker_id, node_id = %self.options.node_id, mode = self.options.mode.as_str(), status = "started", "worker started");
        'rounds: while !shutdown.is_cancelled() {
            let round_started = tokio::time::Instant::now();
            // Rows this round's claims took (claimed or rejected).
            let mut round_taken = 0u64;
            let mut any_full = false;
            let mut failed = false;
            // Whether a claim of this round ran beside a delivery (whose marks it may not see).
            let mut overlapped = false;
            for (app_index, app_code) in self.options.app_codes.iter().enumerate() {
                if shutdown.is_cancelled() {
                    break;
                }
                while delivering.len() > ahead.depth() {
                    let done = delivering.next().await.expect("a delivery in flight");
                    failed |= self.settle(&worker_id, mode, done, totals, &mut first_error);
                }
                if first_error.is_some() {
                    break 'rounds;
                }
                overlapped |= !delivering.is_empty();
                let claim_started = Instant::now();
                let scan_due = due_scanned[app_index]
                    .is_none_or(|at| claim_started.duration_since(at) >= DUE_SCAN_INTERVAL);
                let claim = self.claim_batch(&worker_id, app_code, scan_due);
                tokio::pin!(claim);
                let claimed = loop {
                    tokio::select! {
                        claimed = &mut claim => break claimed,
                        Some(done) = delivering.next() => {
                            failed |= self.settle(&worker_id, mode, done, totals, &mut first_error);
                        }
                    }
                };
                match claimed {
                    Ok((stats, batch)) => {
                        self.outage_over();
                        if scan_due {
                            due_scanned[app_index] = Some(claim_started);
                        }
                        totals.add(&stats);
                        let taken = stats.claimed + stats.rejected;
                        round_taken += taken;
                        any_full |= taken >= u64::from(self.options.batch_size);
                        if let Some(batch) = batch {
                            let worker_id = worker_id.as_str();
                            let (publishing, ahead) = (&publishing, &ahead);
                            delivering.push(Box::pin(async move {
                                // Never closed, so acquiring cannot fail.
                                let (_turn, queued) = match publishing.try_acquire() {
                                    Ok(turn) => (Some(turn), false),
                                    Err(_) => (publishing.acquire().await.ok(), true),
                                };
                                let turn_began = Instant::now();
                                let delivered =
                                    self.deliver(worker_id, app_code, batch, queued).await;
                                ahead.delivered_in(turn_began.elapsed());
                                (app_code.as_str(), delivered)
                            }));
                        }
                    }
                    Err(e) => {
                        failed |= self.settle(
                            &worker_id,
                            mode,
                            (app_code, Err(e)),
                            totals,
                            &mut first_error,
                        );
                    }
                }
                if first_error.is_some() {
                    break 'rounds;
                }
            }
            let found_any = round_taken > 0;
            if mode == RunMode::Drain && !found_any && !failed {
                if !overlapped && delivering.is_empty() {
                    break;
                }
                // A delivery ran beside this round's claims: its marks (e.g. a retry due at once)
                // may make rows claimable again, so finish it and look once more.
                while let Some(done) = delivering.next().await {
                    self.settle(&worker_id, mode, done, totals, &mut first_error);
                }
                if first_error.is_some() {
                    break;
                }
                continue;
            }
            self.wake.record_round(round_taken);
            if !any_full || failed {
                // With a commit feed a commit wakes the loop, so it may sleep the poll interval
                // (the safety net; on PostgreSQL once its gate is armed, or it probes while the
                // table is busy: `Wake::idle`); without one it probes sooner while rows keep
                // arriving. The probe's wait counts from the start of the round (the claims
                // took part of it), so a busy table is claimed at most every PROBE_MIN, not
                // every PROBE_MIN plus a round.
                let probe = backoff.after_round(found_any);
                let idle = if failed {
                    Idle::UntilWoken
                } else {
                    // Arming may wait for producers' transactions: deliveries go on meanwhile.
                    let idle = self.wake.idle(round_started, probe, &mut armed_seen);
                    tokio::pin!(idle);
                    loop {
                        tokio::select! {
                            idle = &mut idle => break idle,
                            Some(done) = delivering.next() => {
                                self.settle(&worker_id, mode, done, totals, &mut first_error);
                            }
                        }
                    }
                };
                if first_error.is_some() {
                    break 'rounds;
                }
                let wake_at = match idle {
                    Idle::ClaimNow => continue 'rounds,
                    Idle::UntilWoken => tokio::time::Instant::now() + self.options.poll_interval,
                    Idle::ProbeAt(at) => at,
                };
                let sleep = tokio::time::sleep_until(wake_at);
                tokio::pin!(sleep);
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = self.wake.woken() => break,
                        _ = &mut sleep => break,
                        Some(done) = delivering.next() => {
                            self.settle(&worker_id, mode, done, totals, &mut first_error);
                            if first_error.is_some() {
                                break 'rounds;
                            }
                        }
                    }
                }
            }
        }
        // Shutdown (or a draining run's error): the batches in flight are published and marked.
        while let Some(done) = delivering.next().await {
            self.settle(&worker_id, mode, done, totals, &mut first_error);
        }
        info!(worker = %worker_id, node_id = %self.options.node_id, status = "stopped", "worker stopped");
        match first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Books what a claim or a delivery of `app_code` did; returns whether it failed. A failure
    /// ends a draining run (kept in `first_error`); otherwise it is logged (an unreachable
    /// database once per outage) and the loop waits the poll interval.
    fn settle(
        &self,
        worker_id: &str,
        mode: RunMode,
        (app_code, result): (&str, Result<BatchStats, WorkerError>),
        totals: &Totals,
        first_error: &mut Option<WorkerError>,
    ) -> bool {
        let e = match result {
            Ok(stats) => {
                totals.add(&stats);
                return false;
            }
            Err(e) => e,
        };
        match e {
            e if mode == RunMode::Drain => {
                first_error.get_or_insert(e);
            }
            WorkerError::Store(e) if e.is_unreachable() => self.outage_began(&e),
            e => {
                error!(worker = %worker_id, node_id = %self.options.node_id, app_code = %app_code,
                    status = "batch_failed", error = %e, "round failed; retrying after the poll interval");
            }
        }
        true
    }

    /// Logs the start of a database outage once (the loops go on retrying every poll interval).
    fn outage_began(&self, error: &StoreError) {
        let mut outage = self.outage.lock().unwrap_or_else(|e| e.into_inner());
        if outage.is_none() {
            *outage = Some(Instant::now());
            error!(node_id = %self.options.node_id, status = "database_unreachable", error = %error,
                "database unreachable; retrying every poll interval until it answers");
        }
    }

    /// Logs the end of a database outage, once, with its length.
    fn outage_over(&self) {
        let mut outage = self.outage.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(since) = outage.take() {
            let lasted = Duration::from_millis(since.elapsed().as_millis() as u64);
            info!(node_id = %self.options.node_id, status = "database_reachable",
                outage = %humantime::format_duration(lasted), "database reachable again");
        }
    }

    /// One round for one app code: claim, publish, mark. Returns what happened to the rows.
    pub async fn process_batch(
        &self,
        worker_id: &str,
        app_code: &str,
    ) -> Result<BatchStats, WorkerError> {
        let (mut stats, batch) = self.claim_batch(worker_id, app_code, true).await?;
        if let Some(batch) = batch {
            stats.add_marks(&self.deliver(worker_id, app_code, batch, false).await?);
        }
        Ok(stats)
    }

    /// Claims a batch of `app_code`: the claim's counters, and the rows to publish (`None` when
    /// the claim handed out nothing). `scan_due`: read the due branches even if pending rows are
    /// handed out ([`ClaimParams::scan_due`]).
    async fn claim_batch(
        &self,
        worker_id: &str,
        app_code: &str,
        scan_due: bool,
    ) -> Result<(BatchStats, Option<ClaimBatch>), WorkerError> {
        if !self
            .clock_guard
            .allows_claims(&*self.store, &self.clock, &self.metrics)
            .await
        {
            // This host's clock is off the database's (logged once): claim nothing.
            return Ok((BatchStats::default(), None));
        }
        if self.options.mode == WorkerMode::Held {
            // A held round claims, publishes and marks in one go (its transaction cannot outlive
            // it): it hands no batch on, so nothing is claimed ahead of it. The few leased rounds
            // of held mode (its crash guard) run the same way.
            return Ok((self.held_mode_round(worker_id, app_code).await?, None));
        }
        self.claim_leased(worker_id, app_code, scan_due).await
    }

    /// A leased claim of `app_code`: the claim's counters, and the rows to publish (`None` when
    /// the claim handed out nothing). `scan_due` as in [`Worker::claim_batch`].
    async fn claim_leased(
        &self,
        worker_id: &str,
        app_code: &str,
        scan_due: bool,
    ) -> Result<(BatchStats, Option<ClaimBatch>), WorkerError> {
        let claimed = self
            .store
            .claim(&self.claim_params(worker_id, app_code, scan_due))
            .await;
        self.booked(worker_id, app_code, claimed)
    }

    /// A leased claim's outcome booked: a database error counted, the rejected rows logged and
    /// the claim counted ([`Worker::book_claim`]), the rows to publish (`None` when none).
    fn booked(
        &self,
        worker_id: &str,
        app_code: &str,
        claimed: Result<ClaimBatch, StoreError>,
    ) -> Result<(BatchStats, Option<ClaimBatch>), WorkerError> {
        let batch = claimed.inspect_err(|e| self.metrics.count_database_error(e))?;
        let stats = self.book_claim(worker_id, app_code, batch.events.len(), &batch.rejected);
        Ok((stats, (!batch.events.is_empty()).then_some(batch)))
    }

    /// The claim of one batch for `app_code` as `worker_id`, from the options; `lease_ms` is the
    /// lease (held mode: how long its transaction may sit idle; the publish deadline is at least
    /// 1 s shorter, by config).
    fn claim_params(&self, worker_id: &str, app_code: &str, scan_due: bool) -> ClaimParams {
        let options = &*self.options;
        ClaimParams {
            app_code: app_code.to_string(),
            worker_id: worker_id.to_string(),
            limit: options.batch_size,
            lease_ms: options.lease.as_millis() as i64,
            now_ms: self.now_ms(),
            max_attempts: options.retry.max_attempts,
            ordering: options.ordering,
            scan_due,
        }
    }

    /// Logs the rows a claim rejected and counts the claim: its first [`BatchStats`].
    fn book_claim(
        &self,
        worker_id: &str,
        app_code: &str,
        claimed: usize,
        rejected: &[RejectedRow],
    ) -> BatchStats {
        let options = &*self.options;
        let stats = BatchStats {
            claimed: claimed as u64,
            rejected: rejected.len() as u64,
            ..BatchStats::default()
        };
        for row in rejected {
            warn!(worker = %worker_id, node_id = %options.node_id, app_code = %app_code, event_id = %row.event_id,
                event_type = %row.event_type, room_id = %row.room_id, status = "failed", error = %row.reason,
                "row failed at claim");
        }
        self.metrics
            .count_rows(app_code, RowOutcome::claimed, stats.claimed);
        self.metrics
            .count_rows(app_code, RowOutcome::rejected, stats.rejected);
        stats
    }
}

impl BatchStats {
    /// Adds the mark counters (delivered, retried, deferred, failed, stale) of `other`.
    fn add_marks(&mut self, other: &BatchStats) {
        self.delivered += other.delivered;
        self.retried += other.retried;
        self.deferred += other.deferred;
        self.failed += other.failed;
        self.stale += other.stale;
    }
}

/// A batch being published and marked by a loop: its app code and what the marks did.
type Delivery<'a> = BoxFuture<'a, (&'a str, Result<BatchStats, WorkerError>)>;

/// Counters shared by the loops of one run.
#[derive(Default)]
struct Totals {
    claimed: AtomicU64,
    rejected: AtomicU64,
    delivered: AtomicU64,
    retried: AtomicU64,
    deferred: AtomicU64,
    failed: AtomicU64,
    stale: AtomicU64,
}

impl Totals {
    fn add(&self, stats: &BatchStats) {
        self.claimed.fetch_add(stats.claimed, Ordering::Relaxed);
        self.rejected.fetch_add(stats.rejected, Ordering::Relaxed);
        self.delivered.fetch_add(stats.delivered, Ordering::Relaxed);
        self.retried.fetch_add(stats.retried, Ordering::Relaxed);
        self.deferred.fetch_add(stats.deferred, Ordering::Relaxed);
        self.failed.fetch_add(stats.failed, Ordering::Relaxed);
        self.stale.fetch_add(stats.stale, Ordering::Relaxed);
    }

    fn snapshot(&self) -> BatchStats {
        BatchStats {
            claimed: self.claimed.load(Ordering::Relaxed),
            rejected: self.rejected.load(Ordering::Relaxed),
            delivered: self.delivered.load(Ordering::Relaxed),
            retried: self.retried.load(Ordering::Relaxed),
            deferred: self.deferred.load(Ordering::Relaxed),
            failed: self.failed.load(Ordering::Relaxed),
            stale: self.stale.load(Ordering::Relaxed),
        }
    }
}
