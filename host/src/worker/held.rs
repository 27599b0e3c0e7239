//! The worker's held mode (`worker.mode = "held"`): one round claims a batch whose rows stay
//! locked by an open transaction ([`OutboxStore::claim_held`](crate::store::OutboxStore::claim_held)),
//! publishes it, and marks every row in one go when the whole batch is answered (or the publish
//! deadline passes), committing the transaction. Each row is written once instead of twice (no
//! lease), at the cost documented in docs/OPERATIONS.md ("Held mode"): a host that dies or hangs
//! mid-publish spends no attempt, and a slow sink holds the marks of the other sinks' rows of the
//! same batch until it answers or the deadline passes.

use serde::Deserialize;
use tracing::warn;

use super::deliver::{ClaimedRows, next_part, unanswered};
use super::{BatchStats, Worker, WorkerError};
use crate::publish::Event;
use crate::record::now_ms;
use crate::store::{HeldBatch, Mark};

/// How a worker claims and marks a batch. In config: `worker.mode = "leased" | "held"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerMode {
    /// The claim leases its rows (`delivering`, `worker_id`, `lock_until_ms`) and commits; each
    /// sink's results are marked as it answers, fenced on the lease. A host that dies mid-publish
    /// spends an attempt when its rows are reclaimed after the lease.
    #[default]
    Leased,
    /// The claim's `SELECT … FOR UPDATE SKIP LOCKED` keeps its rows locked in an open
    /// transaction while they publish; one UPDATE (per 1000 rows) writes every result, then
    /// commit. A host that dies or hangs mid-publish rolls back: its rows are claimable again at
    /// once **without** an attempt counted. Refused on SQLite (config check).
    Held,
}

impl WorkerMode {
    /// The config value (`leased`, `held`).
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerMode::Leased => "leased",
            WorkerMode::Held => "held",
        }
    }
}

impl Worker {
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
        let marked = mark_held(batch, &marks).await;
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

    /// Publishes `events` and gathers one mark per event: every part the publisher answers, and
    /// when the publish deadline passes (or the publisher ends without answering some), the
    /// events left unanswered as retryable. Returns positions and marks in the same order.
    async fn publish_all(&self, events: &[Event]) -> (Vec<usize>, Vec<Mark>) {
        let timeout = self.options.publish_timeout;
        let mut parts = Some(self.publisher.publish_parts(events));
        let mut answered = vec![false; events.len()];
        let (mut positions, mut marks) = (Vec::new(), Vec::new());
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        while parts.is_some() {
            let part = tokio::select! {
                part = next_part(&mut parts) => match part {
                    Some(part) => part,
                    None => {
                        parts = None;
                        unanswered(&answered, "the publisher gave no result for this event")
                    }
                },
                _ = &mut deadline => {
                    parts = None; // drops what is still publishing
                    let reason = format!(
                        "publish timed out after {} (worker.publish_timeout)",
                        humantime::format_duration(timeout)
                    );
                    unanswered(&answered, &reason)
                },
            };
            let (part_positions, part_marks) = self.marks_for(events, part, &mut answered);
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
) -> Result<crate::store::MarkReport, crate::store::StoreError> {
    batch.mark(marks, now_ms()).await
}
