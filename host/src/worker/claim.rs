//! Reading for the worker's loops: the clock check, the read of the owned partitions in turn,
//! and the read booked: rejected rows logged, rows counted.

use opentelemetry::KeyValue;
use tracing::warn;

use std::collections::BTreeSet;

use super::partitions::PartitionTurn;
use super::{BatchStats, Worker, WorkerError};
use crate::metrics::RowOutcome;
use crate::store::{ClaimBatch, PartitionRead, RejectedRow, StoreError};

/// Empty reads in a row (each of a run of partitions: [`super::partitions::PartitionBook::take_turn`])
/// after which a read asks which partitions hold live rows at all
/// ([`crate::store::OutboxStore::live_partitions`]) and reads only those: a host that has caught
/// up does not read each of its partitions to find the one new row.
const EMPTY_READS_BEFORE_PROBE: usize = 1;

/// The most owned partitions a host with a commit feed reads at once after an idle pass, without
/// asking first which hold live rows: a read of 64 empty partitions costs about what that
/// question does (PostgreSQL, p50 1.0 against 1.1 ms), a read of 1,024 three times as much
/// (3.2 against 1.2 ms), which at one row every 2 s put p90 at 19 ms against 8.
const READ_AT_ONCE_MAX_PARTITIONS: usize = 64;

/// A batch to deliver, with the turn of the partitions it was read from: no other loop reads
/// them until the batch is marked and the turn dropped.
pub(super) type Claimed = (ClaimBatch, PartitionTurn);

impl Worker {
    /// Reads a batch of `app_code` from owned partitions: the read's counters, and the rows to
    /// publish with the turn of their partitions (`None` when no owned partition had due rows).
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

    /// Reads the owned partitions of `app_code` in turns
    /// ([`super::partitions::PartitionBook::take_turn`]) until one has due rows (or each was read
    /// once): the read's counters, and the batch with the turn of the partitions it holds rows of. Nothing is written but the rows whose
    /// envelope does not decode.
    async fn read_owned(
        &self,
        worker_id: &str,
        app_code: &str,
    ) -> Result<(BatchStats, Option<Claimed>), WorkerError> {
        let mut stats = BatchStats::default();
        // After a pass that found nothing (an idle table), a loop asks which partitions hold
        // live rows first: an empty read of many partitions costs more than that probe. With a
        // commit feed, a round starts on a commit (or the poll interval), so a host owning up
        // to READ_AT_ONCE_MAX_PARTITIONS reads at once: asking first cost a round trip, and a row
        // committed between the question and the read a round more (docs/PERFORMANCE.md,
        // "Reading at once after a commit"). While catching up, the partitions a recent probe
        // found without live rows are passed over, as long as there is something else to read:
        // a pass finds nothing only after a probe of its own.
        let probe_first = self.partitions.idle(app_code)
            && (!self.wake.has_commit_feed()
                || self.partitions.owned(app_code) > READ_AT_ONCE_MAX_PARTITIONS);
        let (mut passed_over, mut empty_reads) = if probe_first {
            (BTreeSet::new(), EMPTY_READS_BEFORE_PROBE)
        } else {
            (self.partitions.standing_dry(app_code), 0)
        };
        let mut tried = passed_over.clone();
        loop {
            let Some(mut turn) = self.partitions.take_turn(app_code, worker_id, &tried) else {
                if passed_over.is_empty() {
                    break;
                }
                tried.retain(|p| !passed_over.contains(p));
                passed_over.clear();
                empty_reads = EMPTY_READS_BEFORE_PROBE;
                continue;
            };
            if empty_reads == EMPTY_READS_BEFORE_PROBE {
                // Caught up, most likely: skip the partitions that hold no live row. The turn's
                // partitions that have some are read (the round-robin has moved past them:
                // dropping them unread would let a busy partition starve them).
                empty_reads += 1;
                let began = std::time::Instant::now();
                let live = self
                    .store
                    .live_partitions(app_code)
                    .await
                    .inspect_err(|e| self.metrics.count_database_error(e))?;
                let took = began.elapsed();
                if let Some(live) = live {
                    let live: BTreeSet<u32> = live.into_iter().collect();
                    // A partition with no live row holds no backlog: it joins the runs again.
                    let empty: BTreeSet<u32> = self
                        .partitions
                        .owned_partitions(app_code)
                        .difference(&live)
                        .copied()
                        .collect();
                    self.partitions.no_backlog(app_code, &empty);
                    // This answer replaces the standing one.
                    tried.retain(|p| !passed_over.contains(p));
                    passed_over.clear();
                    tried.extend(empty.iter().copied());
                    self.partitions.note_probe(app_code, empty, took);
                    turn.retain(|p| live.contains(&p));
                    if turn.fences.is_empty() {
                        continue;
                    }
                }
            }
            tried.extend(turn.fences.iter().map(|f| f.partition));
            let now_ms = self.now_ms();
            let span = self
                .telemetry
                .batch_span("read", self.store.table().as_str());
            let read = self
                .store
                .read_partitions(&PartitionRead {
                    app_code: app_code.to_string(),
                    host_id: self.partitions.host_id.clone(),
                    fences: turn.fences.clone(),
                    in_flight: turn.in_flight.clone(),
                    limit: turn.limit(self.options.batch_size),
                    now_ms,
                    lease_ms: self.options.lease.as_millis() as i64,
                    max_attempts: self.options.retry.max_attempts,
                    per_room: self.options.ordering == crate::store::DeliveryOrder::PerRoom,
                })
                .await;
            // Empty reads (an idle host probing) are not worth a span each.
            let empty = read
                .as_ref()
                .is_ok_and(|b| b.events.is_empty() && b.rejected.is_empty());
            if !empty {
                span.end(
                    read.as_ref().map_or(0, |b| b.events.len()),
                    vec![
                        KeyValue::new("outboxd.app_code", app_code.to_string()),
                        KeyValue::new("outboxd.partitions", turn.fences.len() as i64),
                        KeyValue::new(
                            "outboxd.rejected",
                            read.as_ref().map_or(0, |b| b.rejected.len() as i64),
                        ),
                    ],
                    read.as_ref().err().map(|e| e as _),
                );
            }
            let (read_stats, mut batch) = self.booked(worker_id, app_code, read)?;
            stats.claimed += read_stats.claimed;
            stats.rejected += read_stats.rejected;
            if let Some(read) = batch.take() {
                let (guard_stats, guarded) = self.guard_read(worker_id, &mut turn, read).await?;
                stats.rejected += guard_stats.rejected;
                batch = guarded;
            }
            let read_from = batch.as_ref().map_or(&[][..], |b| &b.lease.partitions[..]);
            let full: BTreeSet<u32> = read_from
                .iter()
                .filter(|p| p.full)
                .map(|p| p.fence.partition)
                .collect();
            turn.note_read(&full);
            let lags = self.metrics.partitions();
            for fence in &turn.fences {
                let first = read_from.iter().find(|p| p.fence == *fence);
                let lag_ms = first.map_or(0, |p| now_ms - p.first_created_ms);
                lags.set_lag(app_code, fence.partition, lag_ms);
            }
            let holding: BTreeSet<u32> = read_from.iter().map(|p| p.fence.partition).collect();
            turn.retain(|p| holding.contains(&p));
            if let Some(batch) = batch {
                turn.delivering(batch.events.iter().map(|e| e.event.event_id.clone()));
                self.partitions.set_idle(app_code, false);
                return Ok((stats, Some((batch, turn))));
            }
            empty_reads += 1;
        }
        self.partitions
            .set_idle(app_code, stats.claimed + stats.rejected == 0);
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
