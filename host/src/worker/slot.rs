//! One worker loop ("slot"), as named steps: [`Slot::claim_round`] claims each app code in turn
//! and hands every claimed batch to its deliveries; then the loop claims again at once (a claim
//! came back full), stops ([`Slot::drained`], a draining run that found nothing), or waits for
//! work ([`Slot::wait_for_work`]: a commit, a wake-up, the poll interval). The loop's deliveries
//! ([`Deliveries`]) go on throughout every step and are settled as they finish.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

use super::ahead::ClaimAhead;
use super::deliver::LEASE_MARGIN;
use super::{BatchStats, DUE_SCAN_INTERVAL, RunMode, Worker, WorkerError};
use crate::store::ClaimBatch;
use crate::wake::{Idle, IdleBackoff};

impl Worker {
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
    pub(super) async fn run_slot(
        &self,
        slot: u32,
        mode: RunMode,
        shutdown: CancellationToken,
        totals: &Totals,
    ) -> Result<(), WorkerError> {
        let lane = Lane::new(self, slot);
        let mut slot = Slot::new(self, &lane, mode, totals);
        info!(worker = %lane.worker_id, node_id = %self.options.node_id, mode = self.options.mode.as_str(), status = "started", "worker started");
        while !shutdown.is_cancelled() {
            let round = slot.claim_round(&shutdown).await;
            if slot.deliveries.stopped() {
                break;
            }
            if mode == RunMode::Drain && round.found_nothing() {
                if slot.drained(&round).await {
                    break;
                }
                continue;
            }
            self.wake.record_round(round.taken);
            if round.claims_again_at_once() {
                continue;
            }
            slot.wait_for_work(&round, &shutdown).await;
            if slot.deliveries.stopped() {
                break;
            }
        }
        // Shutdown (or a draining run's error): the batches in flight are published and marked.
        slot.deliveries.finish_all().await;
        info!(worker = %lane.worker_id, node_id = %self.options.node_id, status = "stopped", "worker stopped");
        slot.deliveries.into_result()
    }
}

/// What a loop keeps for its whole life and its deliveries borrow: its worker id, how far it
/// claims ahead, and the turn its batches take to publish.
pub(super) struct Lane {
    /// `<node_id>/<slot>`.
    worker_id: String,
    /// Deliveries a claim may overlap: two where writers run side by side while deliveries are
    /// quick, one behind a slow one, none on SQLite (`ahead.rs`).
    ahead: ClaimAhead,
    /// A batch claimed ahead publishes only once the one before it is marked: per loop at most
    /// one batch is published and not yet marked, so a host killed at any moment redelivers at
    /// most one batch per loop (the ones claimed ahead wait out their leases unpublished,
    /// counted as an attempt). FIFO, so batches publish in claim order.
    publishing: Semaphore,
}

impl Lane {
    fn new(worker: &Worker, slot: u32) -> Lane {
        let options = &*worker.options;
        Lane {
            worker_id: format!("{}/{}", options.node_id, slot),
            ahead: ClaimAhead::new(
                worker.store.backend().concurrent_writers(),
                options
                    .lease
                    .saturating_sub(options.publish_timeout + LEASE_MARGIN),
            ),
            publishing: Semaphore::new(1),
        }
    }
}

/// The state of one loop between its steps.
struct Slot<'a> {
    worker: &'a Worker,
    /// The batches this loop is delivering.
    deliveries: Deliveries<'a>,
    /// The idle wait of a loop without a commit feed.
    backoff: IdleBackoff,
    /// The last arm of the notify gate this loop claimed after (`Wake::idle`).
    armed_seen: Option<u64>,
    /// Per app code (same order as the options): when a claim last read the due branches.
    due_scanned: Vec<Option<Instant>>,
}

/// What one round of claims did.
struct Round {
    /// When the round began (an idle probe's wait counts from here).
    started: tokio::time::Instant,
    /// Rows this round's claims took (claimed or rejected).
    taken: u64,
    /// Whether a claim came back full.
    any_full: bool,
    /// Whether a claim or a delivery settled during the round failed.
    failed: bool,
    /// Whether a claim of this round ran beside a delivery (whose marks it may not see).
    overlapped: bool,
}

impl Round {
    /// A draining run found nothing to claim this round (and nothing failed).
    fn found_nothing(&self) -> bool {
        self.taken == 0 && !self.failed
    }

    /// A claim came back full and nothing failed: more rows are waiting.
    fn claims_again_at_once(&self) -> bool {
        self.any_full && !self.failed
    }
}

impl<'a> Slot<'a> {
    fn new(worker: &'a Worker, lane: &'a Lane, mode: RunMode, totals: &'a Totals) -> Slot<'a> {
        let options = &*worker.options;
        Slot {
            worker,
            deliveries: Deliveries {
                worker,
                lane,
                mode,
                totals,
                in_flight: FuturesUnordered::new(),
                first_error: None,
            },
            backoff: IdleBackoff::new(options.idle_probe.min(options.poll_interval)),
            armed_seen: None,
            due_scanned: vec![None; options.app_codes.len()],
        }
    }

    /// Claims each app code once, each claim after room is made for it (claim-ahead), and hands
    /// every claimed batch to the deliveries. Stops early on shutdown or when a draining run
    /// failed.
    async fn claim_round(&mut self, shutdown: &CancellationToken) -> Round {
        let mut round = Round {
            started: tokio::time::Instant::now(),
            taken: 0,
            any_full: false,
            failed: false,
            overlapped: false,
        };
        let worker = self.worker;
        for (app_index, app_code) in worker.options.app_codes.iter().enumerate() {
            if shutdown.is_cancelled() {
                break;
            }
            round.failed |= self.deliveries.make_room().await;
            if self.deliveries.stopped() {
                break;
            }
            round.overlapped |= !self.deliveries.in_flight.is_empty();
            self.claim_app_code(app_index, app_code, &mut round).await;
            if self.deliveries.stopped() {
                break;
            }
        }
        round
    }

    /// Claims `app_code` (the `app_index`-th) while the deliveries go on, books the claim into
    /// `round` and starts delivering what it handed out.
    async fn claim_app_code(&mut self, app_index: usize, app_code: &'a str, round: &mut Round) {
        let worker = self.worker;
        let claim_started = Instant::now();
        let scan_due = self.due_scanned[app_index]
            .is_none_or(|at| claim_started.duration_since(at) >= DUE_SCAN_INTERVAL);
        let claim = worker.claim_batch(&self.deliveries.lane.worker_id, app_code, scan_due);
        let (claimed, failed) = self.deliveries.beside(claim).await;
        round.failed |= failed;
        match claimed {
            Ok((stats, batch)) => {
                worker.outage_over();
                if scan_due {
                    self.due_scanned[app_index] = Some(claim_started);
                }
                self.deliveries.totals.add(&stats);
                let taken = stats.claimed + stats.rejected;
                round.taken += taken;
                round.any_full |= taken >= u64::from(worker.options.batch_size);
                if let Some(batch) = batch {
                    self.deliveries.start(app_code, batch);
                }
            }
            Err(e) => round.failed |= self.deliveries.settle((app_code, Err(e))),
        }
    }

    /// A draining run's round found nothing: whether the run is over. A delivery that ran beside
    /// the round's claims may have made rows claimable again (e.g. a retry due at once), so it is
    /// finished first and the loop looks once more.
    async fn drained(&mut self, round: &Round) -> bool {
        if !round.overlapped && self.deliveries.in_flight.is_empty() {
            return true;
        }
        self.deliveries.finish_all().await;
        self.deliveries.stopped()
    }

    /// Waits, after a round that left nothing waiting (or failed), until there may be work: a
    /// commit or a wake-up, the idle probe, the poll interval, or shutdown.
    ///
    /// With a commit feed a commit wakes the loop, so it may sleep the poll interval (the safety
    /// net; on PostgreSQL once its gate is armed, or it probes while the table is busy:
    /// `Wake::idle`); without one it probes sooner while rows keep arriving. The probe's wait
    /// counts from the start of the round (the claims took part of it), so a busy table is
    /// claimed at most every PROBE_MIN, not every PROBE_MIN plus a round.
    async fn wait_for_work(&mut self, round: &Round, shutdown: &CancellationToken) {
        let probe = self.backoff.after_round(round.taken > 0);
        let idle = if round.failed {
            Idle::UntilWoken
        } else {
            // Arming may wait for producers' transactions: deliveries go on meanwhile.
            let idle = self
                .worker
                .wake
                .idle(round.started, probe, &mut self.armed_seen);
            self.deliveries.beside(idle).await.0
        };
        if self.deliveries.stopped() {
            return;
        }
        let wake_at = match idle {
            Idle::ClaimNow => return,
            Idle::UntilWoken => tokio::time::Instant::now() + self.worker.options.poll_interval,
            Idle::ProbeAt(at) => at,
        };
        self.deliveries.sleep_until(wake_at, shutdown).await;
    }
}

/// A batch being published and marked by a loop: its app code and what the marks did.
type Delivery<'a> = BoxFuture<'a, (&'a str, Result<BatchStats, WorkerError>)>;

/// The batches one loop is delivering, and what their ends did: every step of the loop runs
/// beside them and settles the ones that finish ([`Deliveries::settle`]).
struct Deliveries<'a> {
    worker: &'a Worker,
    lane: &'a Lane,
    mode: RunMode,
    totals: &'a Totals,
    in_flight: FuturesUnordered<Delivery<'a>>,
    /// The error that ends a draining run.
    first_error: Option<WorkerError>,
}

impl<'a> Deliveries<'a> {
    /// Whether a draining run failed: the loop stops claiming and finishes its deliveries.
    fn stopped(&self) -> bool {
        self.first_error.is_some()
    }

    /// Starts delivering `batch` of `app_code`: it publishes once the loop's batch before it is
    /// marked.
    fn start(&mut self, app_code: &'a str, batch: ClaimBatch) {
        let (worker, lane) = (self.worker, self.lane);
        self.in_flight.push(Box::pin(async move {
            // Never closed, so acquiring cannot fail.
            let (_turn, queued) = match lane.publishing.try_acquire() {
                Ok(turn) => (Some(turn), false),
                Err(_) => (lane.publishing.acquire().await.ok(), true),
            };
            let turn_began = Instant::now();
            let delivered = worker
                .deliver(&lane.worker_id, app_code, batch, queued)
                .await;
            lane.ahead.delivered_in(turn_began.elapsed());
            (app_code, delivered)
        }));
    }

    /// Waits for deliveries to finish until a claim may overlap the rest ([`ClaimAhead`]);
    /// returns whether one of them failed.
    async fn make_room(&mut self) -> bool {
        let mut failed = false;
        while self.in_flight.len() > self.lane.ahead.depth() {
            let done = self.in_flight.next().await.expect("a delivery in flight");
            failed |= self.settle(done);
        }
        failed
    }

    /// Runs `step` to its end while settling the deliveries that finish meanwhile: its output,
    /// and whether one of them failed.
    async fn beside<T>(&mut self, step: impl Future<Output = T>) -> (T, bool) {
        tokio::pin!(step);
        let mut failed = false;
        loop {
            tokio::select! {
                output = &mut step => return (output, failed),
                Some(done) = self.in_flight.next() => failed |= self.settle(done),
            }
        }
    }

    /// Sleeps until `wake_at`, a wake-up or shutdown, settling the deliveries that finish
    /// meanwhile; wakes early when one of them ends a draining run.
    async fn sleep_until(&mut self, wake_at: tokio::time::Instant, shutdown: &CancellationToken) {
        let sleep = tokio::time::sleep_until(wake_at);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.worker.wake.woken() => break,
                _ = &mut sleep => break,
                Some(done) = self.in_flight.next() => {
                    self.settle(done);
                    if self.stopped() {
                        break;
                    }
                }
            }
        }
    }

    /// Waits for every delivery in flight to be published and marked.
    async fn finish_all(&mut self) {
        while let Some(done) = self.in_flight.next().await {
            self.settle(done);
        }
    }

    /// Books what a claim or a delivery of `app_code` did; returns whether it failed. A failure
    /// ends a draining run (kept as its first error); otherwise it is logged (an unreachable
    /// database once per outage) and the loop waits the poll interval.
    fn settle(&mut self, (app_code, result): (&str, Result<BatchStats, WorkerError>)) -> bool {
        let e = match result {
            Ok(stats) => {
                self.totals.add(&stats);
                return false;
            }
            Err(e) => e,
        };
        match e {
            e if self.mode == RunMode::Drain => {
                self.first_error.get_or_insert(e);
            }
            WorkerError::Store(e) if e.is_unreachable() => self.worker.outage_began(&e),
            e => {
                error!(worker = %self.lane.worker_id, node_id = %self.worker.options.node_id, app_code = %app_code,
                    status = "batch_failed", error = %e, "round failed; retrying after the poll interval");
            }
        }
        true
    }

    /// The loop's end: the error that ended a draining run, if any.
    fn into_result(self) -> Result<(), WorkerError> {
        match self.first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Counters shared by the loops of one run.
#[derive(Default)]
pub(super) struct Totals {
    claimed: AtomicU64,
    rejected: AtomicU64,
    delivered: AtomicU64,
    retried: AtomicU64,
    deferred: AtomicU64,
    failed: AtomicU64,
    stale: AtomicU64,
}

impl Totals {
    /// Adds one claim's or delivery's counters.
    pub(super) fn add(&self, stats: &BatchStats) {
        self.claimed.fetch_add(stats.claimed, Ordering::Relaxed);
        self.rejected.fetch_add(stats.rejected, Ordering::Relaxed);
        self.delivered.fetch_add(stats.delivered, Ordering::Relaxed);
        self.retried.fetch_add(stats.retried, Ordering::Relaxed);
        self.deferred.fetch_add(stats.deferred, Ordering::Relaxed);
        self.failed.fetch_add(stats.failed, Ordering::Relaxed);
        self.stale.fetch_add(stats.stale, Ordering::Relaxed);
    }

    /// The counters so far.
    pub(super) fn snapshot(&self) -> BatchStats {
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
