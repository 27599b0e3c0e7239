//! Reading for the worker's loops: the clock check, the read of the owned partitions in turn,
//! and the read booked: rejected rows logged, rows counted.

use tracing::warn;

use std::collections::BTreeSet;

use super::partitions::PartitionTurn;
use super::{BatchStats, Worker, WorkerError};
use crate::metrics::RowOutcome;
use crate::store::{ClaimBatch, PartitionRead, RejectedRow, StoreError};

/// Empty partition reads in a row after which a partitioned read asks which partitions hold live
/// rows at all ([`crate::store::OutboxStore::live_partitions`]) and reads only those: a host
/// that has caught up does not read each of its partitions to find the one new row.
const EMPTY_READS_BEFORE_PROBE: usize = 3;

/// A batch to deliver, with the turn of the partition it was read from: the partition is read
/// again once the batch is marked and the turn dropped.
pub(super) type Claimed = (ClaimBatch, PartitionTurn);

impl Worker {
    /// Reads a batch of `app_code` from an owned partition: the read's counters, and the rows to
    /// publish with the partition's turn (`None` when no owned partition had due rows).
    pub(super) async fn claim_batch(
        &self,
        worker_id: &str,
        app_code: &str,
    ) -> Result<(BatchStats, Option<Claimed>), WorkerError> {
        if !self
            .clock_guard
            .allows_claims(&*self.store, &self.clock, &self.metrics)
            .await
        {
            // This host's clock is off the database's (logged once): claim nothing.
            return Ok((BatchStats::default(), None));
        }
        self.read_owned(worker_id, app_code).await
    }

    /// Reads the owned partitions of `app_code` in turn until one has due rows (or each was
    /// read once): the read's counters, and the batch with its partition's turn. Nothing is
    /// written but the rows whose envelope does not decode.
    async fn read_owned(
        &self,
        worker_id: &str,
        app_code: &str,
    ) -> Result<(BatchStats, Option<Claimed>), WorkerError> {
        let mut tried = BTreeSet::new();
        let mut stats = BatchStats::default();
        let mut empty_reads = 0;
        while let Some(turn) = self.partitions.take_turn(app_code, &tried) {
            if empty_reads == EMPTY_READS_BEFORE_PROBE {
                // Caught up, most likely: skip the partitions that hold no live row. The turn
                // taken is read if its partition has some (the round-robin has moved past it:
                // dropping it unread would let a busy partition starve it).
                empty_reads += 1;
                let live = self
                    .store
                    .live_partitions(app_code)
                    .await
                    .inspect_err(|e| self.metrics.count_database_error(e))?;
                if let Some(live) = live {
                    let live: BTreeSet<u32> = live.into_iter().collect();
                    tried.extend(self.partitions.owned_partitions(app_code).difference(&live));
                    if !live.contains(&turn.fence.partition) {
                        continue;
                    }
                }
            }
            tried.insert(turn.fence.partition);
            let now_ms = self.now_ms();
            let read = self
                .store
                .read_partition(&PartitionRead {
                    app_code: app_code.to_string(),
                    host_id: self.partitions.host_id.clone(),
                    fence: turn.fence,
                    limit: self.options.batch_size,
                    now_ms,
                    lease_ms: self.options.lease.as_millis() as i64,
                    max_attempts: self.options.retry.max_attempts,
                    per_room: self.options.ordering == crate::store::DeliveryOrder::PerRoom,
                })
                .await;
            let (read_stats, batch) = self.booked(worker_id, app_code, read)?;
            stats.claimed += read_stats.claimed;
            stats.rejected += read_stats.rejected;
            let lag_ms = batch
                .as_ref()
                .and_then(|b| b.events.first())
                .map_or(0, |first| now_ms - first.created_at_ms);
            self.metrics
                .partitions()
                .set_lag(app_code, turn.fence.partition, lag_ms);
            if let Some(batch) = batch {
                return Ok((stats, Some((batch, turn))));
            }
            empty_reads += 1;
        }
        Ok((stats, None))
    }

    /// A read's outcome booked: a database error counted, the rejected rows logged and
    /// the claim counted ([`Worker::book_claim`]), the rows to publish (`None` when none).
    pub(super) fn booked(
        &self,
        worker_id: &str,
        app_code: &str,
        claimed: Result<ClaimBatch, StoreError>,
    ) -> Result<(BatchStats, Option<ClaimBatch>), WorkerError> {
        let batch = claimed.inspect_err(|e| self.metrics.count_database_error(e))?;
        let stats = self.book_claim(worker_id, app_code, batch.events.len(), &batch.rejected);
        Ok((stats, (!batch.events.is_empty()).then_some(batch)))
    }

    /// Logs the rows a claim rejected and counts the claim: its first [`BatchStats`].
    pub(super) fn book_claim(
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
