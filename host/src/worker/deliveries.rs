//! A loop's deliveries: the batches it is publishing and marking, started in claim order (each
//! publishes once the one before it is marked), and settled as they finish while the loop's
//! steps run beside them; the counters the loops of one run share.

use std::sync::Mutex;
use std::time::Instant;

use futures::future::BoxFuture;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;
use tracing::error;

use super::lane::Lane;
use super::partitions::PartitionTurn;
use super::{BatchStats, RunMode, Worker, WorkerError};
use crate::metrics::RowOutcome;
use crate::store::ClaimBatch;

/// A batch being published and marked by a loop: its app code and what the marks did.
type Delivery<'a> = BoxFuture<'a, (&'a str, Result<BatchStats, WorkerError>)>;

/// The batches one loop is delivering, and what their ends did: every step of the loop runs
/// beside them and settles the ones that finish ([`Deliveries::settle`]).
pub(super) struct Deliveries<'a> {
    worker: &'a Worker,
    pub(super) lane: &'a Lane,
    mode: RunMode,
    pub(super) totals: &'a Totals,
    in_flight: FuturesUnordered<Delivery<'a>>,
    /// The error that ends a draining run.
    first_error: Option<WorkerError>,
}

impl<'a> Deliveries<'a> {
    /// No deliveries yet, for the loop of `lane` running in `mode`, counting into `totals`.
    pub(super) fn new(
        worker: &'a Worker,
        lane: &'a Lane,
        mode: RunMode,
        totals: &'a Totals,
    ) -> Deliveries<'a> {
        Deliveries {
            worker,
            lane,
            mode,
            totals,
            in_flight: FuturesUnordered::new(),
            first_error: None,
        }
    }

    /// Whether no batch is delivering.
    pub(super) fn is_empty(&self) -> bool {
        self.in_flight.is_empty()
    }

    /// Whether a draining run failed: the loop stops claiming and finishes its deliveries.
    pub(super) fn stopped(&self) -> bool {
        self.first_error.is_some()
    }

    /// Starts delivering `batch` of `app_code`: it publishes once the loop's batch before it is
    /// marked. `turn`: the partition it was read from, freed once the batch is marked.
    pub(super) fn start(&mut self, app_code: &'a str, batch: ClaimBatch, mut turn: PartitionTurn) {
        let (worker, lane) = (self.worker, self.lane);
        self.in_flight.push(Box::pin(async move {
            // Never closed, so acquiring cannot fail.
            let publishing = lane.publishing.acquire().await.ok();
            let turn_began = Instant::now();
            let rows = u32::try_from(batch.events.len()).unwrap_or(u32::MAX);
            let delivered = worker
                .deliver(&lane.worker_id, app_code, batch, publishing)
                .await;
            lane.ahead.delivered_in(turn_began.elapsed());
            if delivered.is_ok() && turn.careful.is_some() {
                worker.guard_delivered(&mut turn, app_code, rows).await;
            }
            drop(turn);
            (app_code, delivered)
        }));
    }

    /// Waits for deliveries to finish until a claim may overlap the rest ([`ClaimAhead`]);
    /// returns whether one of them failed.
    pub(super) async fn make_room(&mut self) -> bool {
        let mut failed = false;
        while self.in_flight.len() > self.lane.ahead.depth() {
            let done = self.in_flight.next().await.expect("a delivery in flight");
            failed |= self.settle(done);
        }
        failed
    }

    /// Runs `step` to its end while settling the deliveries that finish meanwhile: its output,
    /// and whether one of them failed.
    pub(super) async fn beside<T>(&mut self, step: impl Future<Output = T>) -> (T, bool) {
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
    /// meanwhile; wakes early when one of them ends a draining run, or with `until_delivered`
    /// when one finishes.
    pub(super) async fn sleep_until(
        &mut self,
        wake_at: tokio::time::Instant,
        until_delivered: bool,
        shutdown: &CancellationToken,
    ) {
        let sleep = tokio::time::sleep_until(wake_at);
        tokio::pin!(sleep);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = self.worker.wake.woken() => break,
                _ = &mut sleep => break,
                Some(done) = self.in_flight.next() => {
                    self.settle(done);
                    if self.stopped() || until_delivered {
                        break;
                    }
                }
            }
        }
    }

    /// Waits for every delivery in flight to be published and marked.
    pub(super) async fn finish_all(&mut self) {
        while let Some(done) = self.in_flight.next().await {
            self.settle(done);
        }
    }

    /// Books what a claim or a delivery of `app_code` did; returns whether it failed. A failure
    /// ends a draining run (kept as its first error); otherwise it is logged (an unreachable
    /// database once per outage) and the loop waits the poll interval.
    pub(super) fn settle(
        &mut self,
        (app_code, result): (&str, Result<BatchStats, WorkerError>),
    ) -> bool {
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
    pub(super) fn into_result(self) -> Result<(), WorkerError> {
        match self.first_error {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

/// Counters shared by the loops of one run.
#[derive(Default)]
pub(super) struct Totals(Mutex<BatchStats>);

impl Totals {
    /// Adds one claim's or delivery's counters.
    pub(super) fn add(&self, stats: &BatchStats) {
        let mut totals = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for outcome in RowOutcome::ALL {
            totals.count(outcome, stats.of(outcome));
        }
    }

    /// The counters so far.
    pub(super) fn snapshot(&self) -> BatchStats {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }
}
