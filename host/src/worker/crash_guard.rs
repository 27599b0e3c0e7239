//! The crash guard on the worker's side ([`Careful`]): a partition taken over from a host whose
//! lease ran out is read in the guard's smaller batches ([`PartitionTurn::limit`]); each batch is
//! announced before it publishes, so that when its host dies publishing it the next owner halves
//! the batches, or, for a batch of one row, fails that row instead ([`Worker::guard_read`]); a
//! batch published and marked shrinks the guard's window ([`Worker::guard_delivered`]).

use tracing::warn;

use super::partitions::PartitionTurn;
use super::{BatchStats, Worker, WorkerError};
use crate::store::{Careful, ClaimBatch, RejectedRow};

/// The `last_error` of a row the crash guard failed.
pub(super) const KILLED_ITS_HOST: &str = "crash guard: the host process died while publishing this event alone, after \
     dying with every batch that held it; not published again (requeue it once the cause is fixed)";

impl Worker {
    /// Applies the crash guard to a batch read in `turn` (a partition in its care): the row the
    /// partition's last owner died publishing alone (the suspect it was taken over with) goes to
    /// `failed` instead of out; the batch left is announced before it publishes. Returns the
    /// read's extra counters and the batch left to publish (`None`: nothing, or the partition
    /// was lost).
    pub(super) async fn guard_read(
        &self,
        worker_id: &str,
        turn: &mut PartitionTurn,
        mut batch: ClaimBatch,
    ) -> Result<(BatchStats, Option<ClaimBatch>), WorkerError> {
        let (Some(careful), Some(fence)) = (turn.careful.clone(), turn.fences.first().copied())
        else {
            return Ok((BatchStats::default(), Some(batch)));
        };
        let app_code = batch.lease.app_code.clone();
        let owner = (app_code.as_str(), self.partitions.host_id.as_str());
        let suspect = careful.suspect.as_deref().and_then(|id| {
            batch
                .events
                .iter()
                .position(|claimed| claimed.event.event_id == id)
        });
        if let Some(position) = suspect {
            let claimed = batch.events.remove(position);
            let row = RejectedRow {
                event_id: claimed.event.event_id,
                event_type: claimed.event.event_type,
                room_id: claimed.event.room_id,
                reason: KILLED_ITS_HOST.to_string(),
            };
            let failed = self
                .store
                .reject(owner, &fence, self.now_ms(), std::slice::from_ref(&row))
                .await
                .inspect_err(|e| self.metrics.count_database_error(e))?;
            // The row is out of the way: the partition leaves the guard's care.
            let cleared = Careful::default();
            self.store
                .set_careful(owner, &fence, &cleared)
                .await
                .inspect_err(|e| self.metrics.count_database_error(e))?;
            turn.set_careful(cleared);
            let stats = if failed == 1 {
                self.book_claim(worker_id, &app_code, 0, &[row])
            } else {
                BatchStats::default()
            };
            // Read with a limit of one row: nothing is left; the next read takes a full batch.
            let left = (!batch.events.is_empty()).then_some(batch);
            return Ok((stats, left));
        }
        let Some(first) = batch.events.first() else {
            return Ok((BatchStats::default(), None));
        };
        // The suspect was not read (delivered or not due meanwhile): only this batch is now.
        let announced = Careful {
            suspect: Some(first.event.event_id.clone()),
            ..careful
        };
        let still_owned = self
            .store
            .set_careful(owner, &fence, &announced)
            .await
            .inspect_err(|e| self.metrics.count_database_error(e))?;
        if !still_owned {
            // Taken over meanwhile: its marks would be refused; the new owner reads it.
            warn!(worker = %worker_id, app_code = %app_code, partition = fence.partition,
                status = "partitions_lost", "partition taken over by another host before its batch published");
            return Ok((BatchStats::default(), None));
        }
        // This host's own announcement is no suspect to it (a failed delivery is not a crash).
        turn.set_careful(Careful {
            suspect: None,
            ..announced
        });
        Ok((BatchStats::default(), Some(batch)))
    }

    /// A batch of `rows` rows read in `turn` was published and marked with this host alive: the
    /// crash guard's window of its partition shrinks by them (and ends when they cover it), and
    /// nothing is in flight.
    pub(super) async fn guard_delivered(
        &self,
        turn: &mut PartitionTurn,
        app_code: &str,
        rows: u32,
    ) {
        let (Some(careful), Some(fence)) = (turn.careful.clone(), turn.fences.first().copied())
        else {
            return;
        };
        let after = careful.after_batch(rows);
        let owner = (app_code, self.partitions.host_id.as_str());
        match self.store.set_careful(owner, &fence, &after).await {
            Ok(_) => turn.set_careful(after),
            Err(e) => {
                // The guard's window stays as it was: the next batch is as small, no row lost.
                self.metrics.count_database_error(&e);
                warn!(app_code = %app_code, partition = fence.partition, status = "crash_guard", error = %e,
                    "the crash guard's state could not be written; the partition stays in its care");
            }
        }
    }
}
