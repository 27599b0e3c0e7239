//! Delivering one batch: publish it within the deadline ([`Worker::publish_within_deadline`])
//! and mark each part of the answer, fenced on the partition, as soon as it comes (each sink's
//! events when that sink answers), while the other sinks go on.

use std::sync::Arc;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::SemaphorePermit;

use super::mark::ClaimedRows;
use super::{BatchStats, Worker, WorkerError};
use crate::publish::{Event, whole_batch};
use crate::store::{ClaimBatch, DeliveryOrder};
use crate::telemetry::DeliverySpans;

impl Worker {
    /// Publishes a batch and marks its rows: the mark counters (delivered, retried, …).
    ///
    /// Each part of the answer is marked as soon as the publisher hands it back; when the
    /// publish deadline passes, the events not answered yet are marked retryable, and the parts
    /// already answered (and marked) are kept.
    ///
    /// `publishing`: the loop's publishing turn, held only until the batch is published, so the
    /// loop's next batch publishes while this one's marks are written (a partition's batch needs
    /// no lease of its own: the heartbeat keeps the partition).
    pub(super) async fn deliver(
        &self,
        worker_id: &str,
        app_code: &str,
        batch: ClaimBatch,
        mut publishing: Option<SemaphorePermit<'_>>,
    ) -> Result<BatchStats, WorkerError> {
        if self.options.ordering == DeliveryOrder::PerRoom && waves_of_more_than_one(&batch) {
            return self
                .deliver_in_waves(worker_id, app_code, batch, publishing)
                .await;
        }
        let ClaimBatch { lease, events, .. } = batch;
        let created_at_ms: Vec<i64> = events.iter().map(|claimed| claimed.created_at_ms).collect();
        let events: Vec<Event> = events.into_iter().map(|claimed| claimed.event).collect();
        let (events, spans) = self.start_spans(events);
        let rows = ClaimedRows {
            events: &events,
            created_at_ms: &created_at_ms,
            spans: &spans,
        };
        let mut parts = self.publish_within_deadline(&events);
        let mut marking = FuturesUnordered::new();
        let mut stats = BatchStats::default();
        let mut published = false;
        loop {
            tokio::select! {
                part = parts.next(), if !published => {
                    let Some(part) = part else {
                        published = true;
                        publishing.take(); // the next batch may publish while this one marks
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
}

impl Worker {
    /// Publishes a partition's batch in per-room waves (`publish::waves`) within one
    /// `worker.publish_timeout`, then marks every row in one fenced statement (`publishing`, the
    /// loop's publishing turn, is given back before the mark).
    async fn deliver_in_waves(
        &self,
        worker_id: &str,
        app_code: &str,
        batch: ClaimBatch,
        publishing: Option<SemaphorePermit<'_>>,
    ) -> Result<BatchStats, WorkerError> {
        let ClaimBatch { lease, events, .. } = batch;
        let created_at_ms: Vec<i64> = events.iter().map(|claimed| claimed.created_at_ms).collect();
        let events: Vec<Event> = events.into_iter().map(|claimed| claimed.event).collect();
        let (events, spans) = self.start_spans(events);
        let outcomes = self
            .publisher
            .publish_in_waves(&events, self.options.publish_timeout)
            .await;
        drop(publishing); // published: the loop's next batch may publish while this one marks
        let (positions, marks) =
            self.marks_for(&events, whole_batch(events.len(), outcomes, "publisher"));
        let rows = ClaimedRows {
            events: &events,
            created_at_ms: &created_at_ms,
            spans: &spans,
        };
        self.mark_and_log(worker_id, app_code, &lease, rows, positions, marks)
            .await
    }

    /// The delivery spans of a batch about to publish, and its events (shared with them); each
    /// event then carries the context its sink forwards (tracing on).
    pub(super) fn start_spans(&self, events: Vec<Event>) -> (Arc<Vec<Event>>, DeliverySpans) {
        self.telemetry
            .deliveries(events, |event_type| self.publisher.sink_for(event_type))
    }
}

/// Whether some room has more than one event in `batch` (then per-room order publishes it in
/// waves: `publish::waves`).
fn waves_of_more_than_one(batch: &ClaimBatch) -> bool {
    let mut rooms = std::collections::HashSet::with_capacity(batch.events.len());
    !batch
        .events
        .iter()
        .all(|claimed| rooms.insert(claimed.event.room_id.as_str()))
}
