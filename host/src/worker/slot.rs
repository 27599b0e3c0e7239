//! One worker loop ("slot"), as named steps: [`Slot::claim_round`] reads each app code in turn
//! and hands every batch read to its deliveries; then the loop reads again at once (a read found
//! rows, or its batches in flight held the partitions with rows: [`Slot::turns_freed`]), stops
//! ([`Slot::drained`], a draining run that found nothing), or waits for work
//! ([`Slot::wait_for_work`]: a commit, a wake-up, the poll interval). The loop's deliveries
//! ([`Deliveries`], `deliveries.rs`) go on throughout every step and are settled as they finish.

use tokio_util::sync::CancellationToken;
use tracing::info;

use super::deliveries::{Deliveries, Totals};
use super::lane::Lane;
use super::{RunMode, Worker, WorkerError};
use crate::wake::{Idle, IdleBackoff};

impl Worker {
    /// One loop: worker id `<node_id>/<slot>`.
    ///
    /// **Read-ahead.** Where the database runs writers side by side
    /// ([`crate::store::Backend::concurrent_writers`]), the loop reads its next batch while the
    /// earlier ones are still publishing and marking (a partition of theirs is read again beside
    /// them, leaving their rows out, only without per-room order and while they are small:
    /// [`super::partitions::PartitionBook::take_turn`]): at most two batches are delivering when
    /// a read starts (one while the last delivery was slow: `ClaimAhead`), and a batch read ahead
    /// starts publishing when the one before it is published. On SQLite (one writer at a time,
    /// one partition) the loop reads after its batch is marked.
    pub(super) async fn run_slot(
        &self,
        slot: u32,
        mode: RunMode,
        shutdown: CancellationToken,
        totals: &Totals,
    ) -> Result<(), WorkerError> {
        let lane = Lane::new(self, slot);
        let mut slot = Slot::new(self, &lane, mode, totals);
        info!(worker = %lane.worker_id, node_id = %self.options.node_id, status = "started", "worker started");
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
                slot.found_since_wait = true;
                continue;
            }
            if slot.turns_freed(&round).await {
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

/// The state of one loop between its steps.
struct Slot<'a> {
    worker: &'a Worker,
    /// The batches this loop is delivering.
    deliveries: Deliveries<'a>,
    /// The idle wait of a loop without a commit feed.
    backoff: IdleBackoff,
    /// The last arm of the notify gate this loop claimed after (`Wake::idle`).
    armed_seen: Option<u64>,
    /// Whether a round since the loop last waited found rows: the rounds that read again at once
    /// and the empty one that ends them are one stretch of a busy table for the idle probe.
    found_since_wait: bool,
}

/// What one round of claims did.
struct Round {
    /// When the round began (an idle probe's wait counts from here).
    started: tokio::time::Instant,
    /// Rows this round's claims took (claimed or rejected).
    taken: u64,
    /// Whether a read found rows: the partition read may have more, and the other owned
    /// partitions may have some (a read takes one partition's rows).
    found_rows: bool,
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

    /// A read found rows and nothing failed: read again at once (the next owned partition with
    /// due rows), until a round finds none. Waiting for a commit instead would serve one
    /// partition per wake-up: at 2,000 rows/s over 64 partitions, commit → delivered p50 went
    /// from ~3 ms to ~70 ms on PostgreSQL (`make bench-latency`).
    fn claims_again_at_once(&self) -> bool {
        self.found_rows && !self.failed
    }
}

impl<'a> Slot<'a> {
    fn new(worker: &'a Worker, lane: &'a Lane, mode: RunMode, totals: &'a Totals) -> Slot<'a> {
        let options = &*worker.options;
        Slot {
            worker,
            deliveries: Deliveries::new(worker, lane, mode, totals),
            backoff: IdleBackoff::new(options.idle_probe.min(options.poll_interval)),
            armed_seen: None,
            found_since_wait: false,
        }
    }

    /// Claims each app code once, each claim after room is made for it (claim-ahead), and hands
    /// every claimed batch to the deliveries. Stops early on shutdown or when a draining run
    /// failed.
    async fn claim_round(&mut self, shutdown: &CancellationToken) -> Round {
        let mut round = Round {
            started: tokio::time::Instant::now(),
            taken: 0,
            found_rows: false,
            failed: false,
            overlapped: false,
        };
        let worker = self.worker;
        for app_code in &worker.options.app_codes {
            if shutdown.is_cancelled() {
                break;
            }
            round.failed |= self.deliveries.make_room().await;
            if self.deliveries.stopped() {
                break;
            }
            round.overlapped |= !self.deliveries.is_empty();
            self.claim_app_code(app_code, &mut round).await;
            if self.deliveries.stopped() {
                break;
            }
        }
        round
    }

    /// Reads `app_code` while the deliveries go on, books the read into `round` and starts
    /// delivering what it handed out.
    async fn claim_app_code(&mut self, app_code: &'a str, round: &mut Round) {
        let worker = self.worker;
        let claim = worker.claim_batch(&self.deliveries.lane.worker_id, app_code);
        let (claimed, failed) = self.deliveries.beside(claim).await;
        round.failed |= failed;
        match claimed {
            Ok((stats, batch)) => {
                worker.outage_over();
                self.deliveries.totals.add(&stats);
                let taken = stats.claimed + stats.rejected;
                round.taken += taken;
                round.found_rows |= taken > 0;
                if let Some((batch, turn)) = batch {
                    self.deliveries.start(app_code, batch, turn);
                }
            }
            Err(e) => round.failed |= self.deliveries.settle((app_code, Err(e))),
        }
    }

    /// A round that found nothing while this loop's batches are in flight may have left
    /// partitions with due rows unread, busy with batches it may not read beside
    /// ([`super::partitions::PartitionBook::waits_for_marks`]): they are free once the batches
    /// are marked, not when a commit or the idle probe comes. So the loop finishes its
    /// deliveries and reads again at once (true), instead of sleeping meanwhile. Otherwise it
    /// waits for work, a finished delivery included ([`Slot::wait_for_work`]).
    async fn turns_freed(&mut self, round: &Round) -> bool {
        if round.failed || self.deliveries.is_empty() {
            return false;
        }
        let (worker, reader) = (self.worker, &self.deliveries.lane.worker_id);
        let waits = |app_code: &String| worker.partitions.waits_for_marks(app_code, reader);
        if !worker.options.app_codes.iter().any(waits) {
            return false;
        }
        self.deliveries.finish_all().await;
        !self.deliveries.stopped()
    }

    /// A draining run's round found nothing: whether the run is over. A delivery that ran beside
    /// the round's claims may have made rows claimable again (e.g. a retry due at once), so it is
    /// finished first and the loop looks once more.
    async fn drained(&mut self, round: &Round) -> bool {
        if !round.overlapped && self.deliveries.is_empty() {
            return true;
        }
        self.deliveries.finish_all().await;
        self.deliveries.stopped()
    }

    /// Waits, after a round that left nothing waiting (or failed), until there may be work: a
    /// commit or a wake-up, the idle probe, the poll interval, a delivery finishing (unless the
    /// round failed), or shutdown.
    ///
    /// With a commit feed a commit wakes the loop, so it may sleep the poll interval (the safety
    /// net; on PostgreSQL once its gate is armed, or it probes while the table is busy:
    /// `Wake::idle`); without one it probes sooner while rows keep arriving. The probe's wait
    /// counts from the start of the round (the claims took part of it), so a busy table is
    /// claimed at most every PROBE_MIN, not every PROBE_MIN plus a round.
    async fn wait_for_work(&mut self, round: &Round, shutdown: &CancellationToken) {
        let probe = self
            .backoff
            .after_round(round.taken > 0 || std::mem::take(&mut self.found_since_wait));
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
        let (wake_at, probe) = match idle {
            Idle::ClaimNow => return,
            Idle::UntilWoken => (
                tokio::time::Instant::now() + self.worker.options.poll_interval,
                None,
            ),
            Idle::ProbeAt(at) => (at, Some(at)),
        };
        let _waiting = self
            .worker
            .wake
            .record_wait(&self.deliveries.lane.worker_id, probe);
        // A delivery that finishes after a round that found nothing ends the wait too: its marks
        // may have freed partitions or made retries due, and a loop without a commit feed would
        // otherwise wait for its probe.
        let until_delivered = !round.failed;
        self.deliveries
            .sleep_until(wake_at, until_delivered, shutdown)
            .await;
    }
}
