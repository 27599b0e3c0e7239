//! Delivering one leased batch: publish it within the deadline ([`Worker::publish_within_deadline`])
//! and mark each part of the answer, fenced on the lease, as soon as it comes (each sink's
//! events when that sink answers), while the other sinks go on.

use std::time::Duration;

use futures::stream::{self, BoxStream, FuturesUnordered, StreamExt};
use tokio::sync::SemaphorePermit;

use super::mark::ClaimedRows;
use super::{BatchStats, Worker, WorkerError};
use crate::config::DEADLINE_MARGIN;
use crate::publish::{Answered, Event, Outcome};
use crate::store::{ClaimBatch, DeliveryOrder, Lease};

impl Worker {
    /// Publishes a claimed batch and marks its rows: the mark counters (delivered, retried, …).
    /// `queued`: the batch was claimed ahead and waited for the one before it to be marked.
    ///
    /// Each part of the answer is marked as soon as the publisher hands it back; when the
    /// publish deadline passes, the events not answered yet are marked retryable, and the parts
    /// already answered (and marked) are kept.
    ///
    /// `publishing`: the loop's publishing turn, held until the batch is marked — or, for a
    /// partition's batch (whose marks need no lease), only until it is published, so the loop's
    /// next batch publishes while this one's marks are written.
    pub(super) async fn deliver(
        &self,
        worker_id: &str,
        app_code: &str,
        batch: ClaimBatch,
        queued: bool,
        mut publishing: Option<SemaphorePermit<'_>>,
    ) -> Result<BatchStats, WorkerError> {
        let pipelined = batch.lease.partition.is_some();
        if pipelined
            && self.options.ordering == DeliveryOrder::PerRoom
            && waves_of_more_than_one(&batch)
        {
            return self
                .deliver_in_waves(worker_id, app_code, batch, publishing)
                .await;
        }
        let ClaimBatch { lease, events, .. } = batch;
        let created_at_ms: Vec<i64> = events.iter().map(|claimed| claimed.created_at_ms).collect();
        let events: Vec<Event> = events.into_iter().map(|claimed| claimed.event).collect();
        let rows = ClaimedRows {
            events: &events,
            created_at_ms: &created_at_ms,
        };
        // A partition's batch needs no lease of its own: the heartbeat keeps the partition.
        let mut parts =
            if queued && lease.partition.is_none() && !self.lease_holds_a_publish(&lease) {
                untried(events.len())
            } else {
                self.publish_within_deadline(&events)
            };
        let mut marking = FuturesUnordered::new();
        let mut stats = BatchStats::default();
        let mut published = false;
        loop {
            tokio::select! {
                part = parts.next(), if !published => {
                    let Some(part) = part else {
                        published = true;
                        if pipelined {
                            publishing.take(); // the next batch may publish while this one marks
                        }
                        continue;
                    };
                    let (positions, marks) = self.marks_for(&events, part);
                    if !marks.is_empty() {
                        marking.push(self.mark_and_log(worker_id, app_code, &lease, rows, positions, marks));
                    }
                },
                Some(marked) = marking.next() => stats.add_marks(&marked?),
                else => break,
            }
        }
        Ok(stats)
    }

    /// Whether what is left of `lease` holds a whole publish and the mark after it. A batch
    /// claimed ahead that waited for the one before it and falls short goes back untried, no
    /// attempt spent, to be claimed again with a fresh lease. (A batch that did not wait has the
    /// lease config checked: publish_timeout + [`DEADLINE_MARGIN`] <= lease; the margin is the
    /// time the lease must hold beyond the publish deadline to mark.)
    fn lease_holds_a_publish(&self, lease: &Lease) -> bool {
        let lease_left = Duration::from_millis(
            u64::try_from(lease.lock_until_ms.saturating_sub(self.now_ms())).unwrap_or(0),
        );
        lease_left >= self.options.publish_timeout + DEADLINE_MARGIN
    }
}

/// The answer for a batch of `len` events put back untried (deferred, no attempt spent): one
/// part.
fn untried(len: usize) -> BoxStream<'static, Answered> {
    let reason = "claimed ahead, and too little of its lease was left to publish after the batch before it; not tried";
    let part = (0..len)
        .map(|position| (position, Outcome::deferred(reason, Duration::ZERO)))
        .collect();
    stream::iter([part]).boxed()
}

/// Whether some room has more than one event in `batch` (then per-room order publishes it in
/// waves: `waves.rs`).
fn waves_of_more_than_one(batch: &ClaimBatch) -> bool {
    let mut rooms = std::collections::HashSet::with_capacity(batch.events.len());
    !batch
        .events
        .iter()
        .all(|claimed| rooms.insert(claimed.event.room_id.as_str()))
}
