//! The worker's held mode (`worker.mode = "held"`): one round claims a batch whose rows stay
//! locked by an open transaction ([`OutboxStore::claim_held`](crate::store::OutboxStore::claim_held)),
//! publishes it, and marks every row in one go when the whole batch is answered (or the publish
//! deadline passes), committing the transaction. Each row is written once instead of twice (no
//! lease), at the cost documented in docs/operate/held-mode.md: a host that dies or hangs
//! mid-publish spends no attempt, and a slow sink holds the marks of the other sinks' rows of the
//! same batch until it answers or the deadline passes.
//!
//! **Crash guard ([`HeldSchedule`]).** Because a held batch that dies with its host spends no
//! attempt, a row that crashes the host process itself would be handed out forever. So a
//! held-mode worker claims *leased* (the lease and any reclaim attempt committed before the
//! publish, exactly as in leased mode) where a crash must count:
//! - **after a start**, its first `concurrency` claims that hand out rows: the rows a crashed
//!   run held went back to `pending` at the head of the queue, and the restarted host publishes
//!   them under a lease, so the next crash they cause leaves them leased and the reclaim after
//!   the lease counts an attempt;
//! - **expired leases** are never held (the store's held claim skips them): when a held claim
//!   comes back with fewer rows than asked, a leased claim of expired leases alone
//!   ([`OutboxStore::reclaim_expired`](crate::store::OutboxStore::reclaim_expired)) follows in
//!   the same round (at most once per `poll_interval` while such claims find nothing),
//!   reclaiming them with the attempt counted; rows committed since the held claim read are left
//!   to the next held claim. A row that keeps killing its host therefore ends `failed` after
//!   `retry.max_attempts`, as in leased mode.

use std::sync::atomic::{AtomicI64, AtomicU32, Ordering};
use std::time::Duration;

use futures::stream::StreamExt;
use tracing::warn;

use super::mark::ClaimedRows;
use super::{BatchStats, Worker, WorkerError};
use crate::publish::Event;
use crate::store::{ClaimBatch, HeldBatch, Mark};

/// Which claims of a held-mode worker are leased: the crash guard (module docs). Shared by the
/// worker's loops.
#[derive(Debug)]
pub(super) struct HeldSchedule {
    /// Leased claims that hand out rows still to run before the first held claim (one per loop).
    warmup_left: AtomicU32,
    /// When the last leased claim that handed out nothing ran (UTC ms; `i64::MIN` when the last
    /// leased claim found rows, or none ran yet).
    last_empty_leased_ms: AtomicI64,
}

impl HeldSchedule {
    /// The schedule of a worker with `concurrency` loops, just started.
    pub(super) fn new(concurrency: u32) -> HeldSchedule {
        HeldSchedule {
            warmup_left: AtomicU32::new(concurrency.max(1)),
            last_empty_leased_ms: AtomicI64::new(i64::MIN),
        }
    }

    /// Whether claims are still leased because the worker has just started.
    fn warming_up(&self) -> bool {
        self.warmup_left.load(Ordering::Acquire) > 0
    }

    /// Whether a held claim that came back short is followed by a leased claim (to reclaim
    /// expired leases): unless a leased claim found nothing within `poll_interval`.
    fn reclaim_due(&self, now_ms: i64, poll_interval: Duration) -> bool {
        let last = self.last_empty_leased_ms.load(Ordering::Acquire);
        now_ms.saturating_sub(last) >= poll_interval.as_millis() as i64
    }

    /// Records a leased claim that handed out (or rejected) `taken` rows at `now_ms`.
    fn leased_claimed(&self, taken: u64, now_ms: i64) {
        if taken == 0 {
            self.last_empty_leased_ms.store(now_ms, Ordering::Release);
            return;
        }
        self.last_empty_leased_ms.store(i64::MIN, Ordering::Release);
        // Saturating: loops racing at the end of the warm-up must not wrap it around.
        let _ = self
            .warmup_left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }
}

impl Worker {
    /// One round of a held-mode worker for one app code: a held round, or a leased one where
    /// the crash guard ([`HeldSchedule`]) says so — right after the start, and after a held
    /// claim that came back short (expired leases are reclaimed leased only). Leased rounds here
    /// publish and mark before returning, like held ones: nothing is claimed ahead.
    pub(super) async fn held_mode_round(
        &self,
        worker_id: &str,
        app_code: &str,
    ) -> Result<BatchStats, WorkerError> {
        let schedule = &self.held_schedule;
        let mut stats = BatchStats::default();
        let warming_up = schedule.warming_up();
        if !warming_up {
            stats = self.process_held_batch(worker_id, app_code).await?;
            let taken = stats.claimed + stats.rejected;
            if taken >= u64::from(self.options.batch_size)
                || !schedule.reclaim_due(self.now_ms(), self.options.poll_interval)
            {
                return Ok(stats);
            }
        }
        let (leased, batch) = if warming_up {
            self.claim_leased(worker_id, app_code, true).await?
        } else {
            self.reclaim_expired(worker_id, app_code).await?
        };
        schedule.leased_claimed(leased.claimed + leased.rejected, self.now_ms());
        stats.claimed += leased.claimed;
        stats.rejected += leased.rejected;
        if let Some(batch) = batch {
            stats.add_marks(
                &self
                    .deliver(worker_id, app_code, batch, false, None)
                    .await?,
            );
        }
        Ok(stats)
    }

    /// A held-mode worker's reclaim of expired leases alone
    /// ([`OutboxStore::reclaim_expired`](crate::store::OutboxStore::reclaim_expired)), returned
    /// as [`Worker::claim_leased`] returns a claim.
    async fn reclaim_expired(
        &self,
        worker_id: &str,
        app_code: &str,
    ) -> Result<(BatchStats, Option<ClaimBatch>), WorkerError> {
        let claimed = self
            .store
            .reclaim_expired(&self.claim_params(worker_id, app_code, true))
            .await;
        self.booked(worker_id, app_code, claimed)
    }

    /// One held round for one app code: claim (rows locked, nothing written but rejections),
    /// publish within `publish_timeout`, then mark every row and commit.
    pub(super) async fn process_held_batch(
        &self,
        worker_id: &str,
        app_code: &str,
    ) -> Result<BatchStats, WorkerError> {
        let batch = self
            .store
            .claim_held(&self.claim_params(worker_id, app_code, true))
            .await
            .inspect_err(|e| self.metrics.count_database_error(e))?;
        let mut stats = self.book_claim(worker_id, app_code, batch.events.len(), &batch.rejected);
        if batch.events.is_empty() {
            batch.release().await?;
            return Ok(stats);
        }
        let created_at_ms: Vec<i64> = batch.events.iter().map(|c| c.created_at_ms).collect();
        let events: Vec<Event> = batch.events.iter().map(|c| c.event.clone()).collect();
        let (positions, marks) = self.publish_all(&events).await;
        let marked = mark_held(batch, &marks, self.now_ms()).await;
        match &marked {
            Ok(_) => self.outage_over(),
            Err(e) if e.is_unreachable() => self.outage_began(e),
            Err(_) => {}
        }
        if let Err(e) = &marked {
            self.metrics.count_database_error(e);
            if e.is_transient() {
                // A deadlock victim or serialization failure: the database rolled the whole
                // transaction back. Nothing was written; the rows are claimable again at once
                // (published once more: at least once), no attempt spent. Not a round failure.
                warn!(worker = %worker_id, node_id = %self.options.node_id, app_code = %app_code,
                    rows = events.len(), status = "rolled_back", error = %e,
                    "held batch rolled back by the database; its rows will be delivered again");
                return Ok(stats);
            }
        }
        let report = marked?;
        let rows = ClaimedRows {
            events: &events,
            created_at_ms: &created_at_ms,
        };
        stats.add_marks(&self.report_marks(worker_id, app_code, rows, positions, &marks, &report));
        Ok(stats)
    }

    /// Publishes `events` within the deadline ([`Worker::publish_within_deadline`]) and gathers
    /// one mark per event: every part the publisher answers, and the events left unanswered as
    /// retryable. Returns positions and marks in the same order.
    async fn publish_all(&self, events: &[Event]) -> (Vec<usize>, Vec<Mark>) {
        let mut parts = self.publish_within_deadline(events);
        let (mut positions, mut marks) = (Vec::new(), Vec::new());
        while let Some(part) = parts.next().await {
            let (part_positions, part_marks) = self.marks_for(events, part);
            positions.extend(part_positions);
            marks.extend(part_marks);
        }
        (positions, marks)
    }
}

/// Marks the held batch and commits (the store does not retry: a lost transaction leaves its
/// rows claimable again, unchanged).
async fn mark_held(
    batch: HeldBatch,
    marks: &[Mark],
    now_ms: i64,
) -> Result<crate::store::MarkReport, crate::store::StoreError> {
    batch.mark(marks, now_ms).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warm_up_ends_after_one_claim_with_rows_per_loop() {
        let schedule = HeldSchedule::new(2);
        assert!(schedule.warming_up());
        schedule.leased_claimed(0, 1_000); // an empty claim does not count
        assert!(schedule.warming_up());
        schedule.leased_claimed(5, 1_001);
        assert!(schedule.warming_up(), "one loop of two warmed up");
        schedule.leased_claimed(1, 1_002);
        assert!(!schedule.warming_up());
        schedule.leased_claimed(1, 1_003); // never wraps around
        assert!(!schedule.warming_up());
    }

    #[test]
    fn a_short_held_claim_reclaims_leased_unless_one_found_nothing_within_the_poll_interval() {
        let poll = Duration::from_millis(500);
        let schedule = HeldSchedule::new(1);
        assert!(schedule.reclaim_due(1_000, poll), "no leased claim ran yet");
        schedule.leased_claimed(0, 1_000);
        assert!(!schedule.reclaim_due(1_499, poll));
        assert!(schedule.reclaim_due(1_500, poll));
        schedule.leased_claimed(3, 1_600); // it found rows: the next short claim looks again
        assert!(schedule.reclaim_due(1_601, poll));
    }
}
