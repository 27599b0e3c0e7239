//! The held claim's batch: rows claimed with `SELECT … FOR UPDATE SKIP LOCKED` in a transaction
//! that stays open while they are published, then marked and committed in one go
//! ([`crate::store::OutboxStore::claim_held`]; the worker's `mode = "held"`).
//!
//! # What a held batch guarantees, and what it does not
//! - **Fencing** is the transaction: every row of the batch stays locked by it (SQLite: the
//!   database's single write lock) until [`HeldBatch::mark`] commits or the batch is released, so
//!   no other claim (leased or held) hands it out and no other statement changes it meanwhile. A
//!   batch can be marked only once ([`HeldBatch::mark`] takes it by value); a batch released or
//!   dropped cannot mark at all.
//! - **Nothing is written until the mark.** The claim writes no lease (`worker_id`,
//!   `lock_until_ms` stay as they were, `status` stays `pending`/`retryable`); the mark writes
//!   each row once, to its final state, with the same dispositions and `last_error` cut as the
//!   leased mark, plus `worker_id`.
//! - **A batch given up costs no attempt.** Released, dropped, its connection lost, its host
//!   killed, or ended by the database's idle limit: the transaction rolls back and its rows are
//!   claimable again at once with `retry_count` unchanged. This is the one guarantee of the
//!   leased claim the held claim relaxes: under a lease, a host that dies mid-publish spends an
//!   attempt when its rows are reclaimed, so an event that kills every host that publishes it
//!   ends in `failed` after `max_attempts`; held, it is handed out again and again (see
//!   docs/operate/held-mode.md for what guards against that).
//! - **Bad rows stay alone**, as in the leased claim: a row whose envelope is empty, does not
//!   decode or disagrees with the row is failed inside the held transaction and listed in
//!   [`HeldBatch::rejected`]; it is committed with the mark (or with [`HeldBatch::release`]:
//!   rejected rows are committed as failed even when the batch is given up, so a corrupt row is
//!   never handed out forever).
//! - **Dead leased workers' rows** (`delivering`, lease expired) are never held: a leased claim
//!   reclaims them, committing the attempt before they publish, so a row that killed its host
//!   cannot kill the next one for free.

use async_trait::async_trait;

use super::{ClaimedEvent, Mark, MarkReport, RejectedRow, StoreError};

/// The open transaction behind a [`HeldBatch`] (implemented once, by the shared executor).
#[async_trait]
pub(crate) trait HeldTransaction: Send {
    /// Writes `marks` (ids of this batch, distinct) and commits; returns the rows changed.
    async fn mark_and_commit(
        self: Box<Self>,
        app_code: &str,
        worker_id: &str,
        marks: &[Mark],
        now_ms: i64,
    ) -> Result<u64, StoreError>;

    /// Commits the claim's own writes (rejected rows) without marking anything else, releasing
    /// every lock: the rows handed out are unchanged.
    async fn release(self: Box<Self>) -> Result<(), StoreError>;
}

/// Rows claimed by [`crate::store::OutboxStore::claim_held`], locked by an open transaction that
/// this value owns. Mark them with [`HeldBatch::mark`]; dropping the batch rolls the transaction
/// back (its rows stay `pending`/`retryable`, no attempt spent; rows rejected by the claim are
/// then left as they were and are rejected again by the next claim).
pub struct HeldBatch {
    /// Tenant of the batch.
    pub app_code: String,
    /// The claiming worker, written to `worker_id` by the mark.
    pub worker_id: String,
    /// Rows handed out, in claim order (`attempt = retry_count + 1`, a reclaimed dead lease
    /// included).
    pub events: Vec<ClaimedEvent>,
    /// Rows failed by the claim (corrupt envelope, reclaimed lease at `max_attempts`); written in
    /// the held transaction, committed by [`HeldBatch::mark`] or [`HeldBatch::release`].
    pub rejected: Vec<RejectedRow>,
    transaction: Option<Box<dyn HeldTransaction>>,
}

impl std::fmt::Debug for HeldBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HeldBatch")
            .field("app_code", &self.app_code)
            .field("worker_id", &self.worker_id)
            .field("events", &self.events.len())
            .field("rejected", &self.rejected)
            .finish_non_exhaustive()
    }
}

impl HeldBatch {
    /// A batch owning `transaction` (`None`: nothing was claimed, nothing is held).
    pub(crate) fn new(
        app_code: String,
        worker_id: String,
        events: Vec<ClaimedEvent>,
        rejected: Vec<RejectedRow>,
        transaction: Option<Box<dyn HeldTransaction>>,
    ) -> HeldBatch {
        HeldBatch {
            app_code,
            worker_id,
            events,
            rejected,
            transaction,
        }
    }

    /// Applies `marks` to rows of this batch (any mix of dispositions, one UPDATE per 1000 rows,
    /// the same transaction) and commits, releasing every row. Rows of the batch without a mark
    /// are left as they were (no attempt spent). An id twice, or an id this batch did not hand
    /// out, is [`StoreError::Invalid`] and the batch is rolled back. A failed commit (the
    /// connection was lost, the database ended the transaction) is not retried: the transaction
    /// is gone and its rows are claimable again, unchanged.
    pub async fn mark(mut self, marks: &[Mark], now_ms: i64) -> Result<MarkReport, StoreError> {
        let mut seen = std::collections::HashSet::with_capacity(marks.len());
        for mark in marks {
            if !seen.insert(mark.event_id.as_str()) {
                return Err(StoreError::Invalid(format!(
                    "event id {:?} is marked twice in one held batch",
                    mark.event_id
                )));
            }
        }
        let handed_out: std::collections::HashSet<&str> = self
            .events
            .iter()
            .map(|e| e.event.event_id.as_str())
            .collect();
        if let Some(foreign) = marks
            .iter()
            .find(|m| !handed_out.contains(m.event_id.as_str()))
        {
            return Err(StoreError::Invalid(format!(
                "event id {:?} is not a row of this held batch (app code {:?})",
                foreign.event_id, self.app_code
            )));
        }
        let Some(transaction) = self.transaction.take() else {
            return Ok(MarkReport::default());
        };
        let applied = transaction
            .mark_and_commit(&self.app_code, &self.worker_id, marks, now_ms)
            .await?;
        Ok(MarkReport {
            applied,
            stale: Vec::new(),
        })
    }

    /// Gives the batch up without marking: commits the claim's rejections and releases every
    /// row unchanged (no attempt spent), waiting for the database to confirm.
    pub async fn release(mut self) -> Result<(), StoreError> {
        match self.transaction.take() {
            Some(transaction) => transaction.release().await,
            None => Ok(()),
        }
    }
}
