//! Delivering one claimed batch: publish it through the publisher's parts (each sink's results
//! as that sink answers), turn every answer into a mark, mark it fenced on the lease, and count
//! and log what the marks did.

use std::time::Duration;

use futures::stream::{BoxStream, FuturesUnordered, StreamExt};
use tracing::{debug, warn};

use super::{BatchStats, Worker, WorkerError};
use crate::metrics::RowOutcome;
use crate::publish::{Answered, Event, Outcome};
use crate::retry::Decision;
use crate::store::{ClaimBatch, Disposition, Lease, Mark, MarkParams};

/// What a batch's lease must hold beyond the publish deadline: time to mark (the configured
/// `worker.publish_timeout` is at least this much shorter than `worker.lease`).
pub(super) const LEASE_MARGIN: Duration = Duration::from_secs(1);

impl Worker {
    /// Publishes a claimed batch and marks its rows: the mark counters (delivered, retried, …).
    /// `queued`: the batch was claimed ahead and waited for the one before it to be marked.
    pub(super) async fn deliver(
        &self,
        worker_id: &str,
        app_code: &str,
        batch: ClaimBatch,
        queued: bool,
    ) -> Result<BatchStats, WorkerError> {
        let ClaimBatch { lease, events, .. } = batch;
        let created_at_ms: Vec<i64> = events.iter().map(|claimed| claimed.created_at_ms).collect();
        let events: Vec<Event> = events.into_iter().map(|claimed| claimed.event).collect();
        let mut stats = BatchStats::default();
        self.publish_and_mark(
            worker_id,
            app_code,
            &lease,
            ClaimedRows {
                events: &events,
                created_at_ms: &created_at_ms,
            },
            queued,
            &mut stats,
        )
        .await?;
        Ok(stats)
    }

    /// Publishes `events` and marks each part of the results as soon as the publisher hands it
    /// back (the router: each sink's events when that sink answers), while the other sinks go on.
    /// When the publish deadline passes, the events not answered yet are marked retryable; the
    /// parts already answered (and marked) are kept.
    pub(super) async fn publish_and_mark(
        &self,
        worker_id: &str,
        app_code: &str,
        lease: &Lease,
        rows: ClaimedRows<'_>,
        queued: bool,
        stats: &mut BatchStats,
    ) -> Result<(), WorkerError> {
        let ClaimedRows {
            events,
            created_at_ms,
        } = rows;
        let mut answered = vec![false; events.len()];
        let mut marking = FuturesUnordered::new();
        // A batch claimed ahead that waited for the one before it: if what is left of its lease
        // cannot hold a whole publish (and the mark after it), it goes back untried, no attempt
        // spent, to be claimed again with a fresh lease. (A batch that did not wait has the
        // lease config checked: publish_timeout + margin <= lease.)
        let timeout = self.options.publish_timeout;
        let lease_left = Duration::from_millis(
            u64::try_from(lease.lock_until_ms.saturating_sub(self.now_ms())).unwrap_or(0),
        );
        let mut parts = if !queued || lease_left >= timeout + LEASE_MARGIN {
            Some(self.publisher.publish_parts(events))
        } else {
            let back = events
                .iter()
                .enumerate()
                .map(|(position, _)| {
                    let reason = "claimed ahead, and too little of its lease was left to publish after the batch before it; not tried";
                    (position, Outcome::deferred(reason, Duration::ZERO))
                })
                .collect();
            let (positions, marks) = self.marks_for(events, back, &mut answered);
            marking.push(self.mark_and_log(
                worker_id,
                app_code,
                lease,
                ClaimedRows {
                    events,
                    created_at_ms,
                },
                positions,
                marks,
            ));
            None
        };
        let deadline = tokio::time::sleep(timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                part = next_part(&mut parts), if parts.is_some() => {
                    let part = match part {
                        Some(part) => part,
                        None => {
                            parts = None;
                            unanswered(&answered, "the publisher gave no result for this event")
                        }
                    };
                    let (positions, marks) = self.marks_for(events, part, &mut answered);
                    if !marks.is_empty() {
                        marking.push(self.mark_and_log(worker_id, app_code, lease, ClaimedRows { events, created_at_ms }, positions, marks));
                    }
                },
                _ = &mut deadline, if parts.is_some() => {
                    parts = None; // drops what is still publishing
                    let reason = format!(
                        "publish timed out after {} (worker.publish_timeout)",
                        humantime::format_duration(timeout)
                    );
                    let (positions, marks) =
                        self.marks_for(events, unanswered(&answered, &reason), &mut answered);
                    if !marks.is_empty() {
                        marking.push(self.mark_and_log(worker_id, app_code, lease, ClaimedRows { events, created_at_ms }, positions, marks));
                    }
                },
                Some(marked) = marking.next() => stats.add_marks(&marked?),
                else => break,
            }
        }
        Ok(())
    }

    /// The marks of one answered part, skipping positions out of range or answered before.
    pub(super) fn marks_for(
        &self,
        events: &[Event],
        part: Answered,
        answered: &mut [bool],
    ) -> (Vec<usize>, Vec<Mark>) {
        let now = self.now_ms();
        part.into_iter()
            .filter(|(position, _)| {
                answered
                    .get_mut(*position)
                    .is_some_and(|seen| !std::mem::replace(seen, true))
            })
            .map(|(position, outcome)| {
                let event = &events[position];
                let mark = Mark {
                    event_id: event.event_id.clone(),
                    disposition: self.disposition(event.attempt, outcome, now),
                };
                (position, mark)
            })
            .unzip()
    }

    /// Marks one part (fenced on the lease) and logs every event that was not delivered.
    pub(super) async fn mark_and_log(
        &self,
        worker_id: &str,
        app_code: &str,
        lease: &Lease,
        rows: ClaimedRows<'_>,
        positions: Vec<usize>,
        marks: Vec<Mark>,
    ) -> Result<BatchStats, WorkerError> {
        // The store retries a transient or unreachable database while the lease holds; any error
        // left ends the round, and the rows come back when the lease expires (an attempt).
        let marked = self
            .store
            .mark(&MarkParams {
                lease,
                marks: &marks,
                now_ms: self.now_ms(),
            })
            .await;
        match &marked {
            Ok(_) => self.outage_over(),
            Err(e) if e.is_unreachable() => self.outage_began(e),
            Err(_) => {}
        }
        if let Err(e) = &marked {
            self.metrics.count_database_error(e);
        }
        let report = marked?;
        Ok(self.report_marks(worker_id, app_code, rows, positions, &marks, &report))
    }

    /// Counts, logs and reports to the metrics what one mark did to each row of a part.
    pub(super) fn report_marks(
        &self,
        worker_id: &str,
        app_code: &str,
        rows: ClaimedRows<'_>,
        positions: Vec<usize>,
        marks: &[Mark],
        report: &crate::store::MarkReport,
    ) -> BatchStats {
        let ClaimedRows {
            events,
            created_at_ms,
        } = rows;
        let options = &*self.options;
        let marked_at = self.now_ms();
        let mut stats = BatchStats::default();
        for (position, mark) in positions.into_iter().zip(marks) {
            let event = &events[position];
            let stale = report.stale.contains(&mark.event_id);
            let (status, error) = match (&mark.disposition, stale) {
                (_, true) => ("stale", None),
                (Disposition::Delivered, _) => ("delivered", None),
                (Disposition::Retryable { error, .. }, _) => ("retryable", Some(error.as_str())),
                (Disposition::Deferred { error, .. }, _) => ("deferred", Some(error.as_str())),
                (Disposition::Failed { error }, _) => ("failed", Some(error.as_str())),
            };
            match status {
                "delivered" => stats.delivered += 1,
                "retryable" => stats.retried += 1,
                "deferred" => stats.deferred += 1,
                "failed" => stats.failed += 1,
                _ => stats.stale += 1,
            }
            if status == "delivered" {
                self.metrics
                    .observe_delivery_latency(app_code, marked_at - created_at_ms[position]);
                debug!(worker = %worker_id, node_id = %options.node_id, app_code = %app_code, event_id = %event.event_id,
                    event_type = %event.event_type, room_id = %event.room_id, retry_count = event.attempt - 1,
                    status, "event delivered");
            } else if status == "deferred" {
                // The breaker logs the outage once; one line per deferred event would flood.
                debug!(worker = %worker_id, node_id = %options.node_id, app_code = %app_code, event_id = %event.event_id,
                    event_type = %event.event_type, room_id = %event.room_id, retry_count = event.attempt - 1,
                    status, error = error.unwrap_or(""), "event deferred");
            } else {
                warn!(worker = %worker_id, node_id = %options.node_id, app_code = %app_code, event_id = %event.event_id,
                    event_type = %event.event_type, room_id = %event.room_id, retry_count = event.attempt - 1,
                    status, error = error.unwrap_or("lease taken over by another worker; left untouched"),
                    "event not delivered");
            }
        }
        for (outcome, count) in [
            (RowOutcome::delivered, stats.delivered),
            (RowOutcome::retried, stats.retried),
            (RowOutcome::deferred, stats.deferred),
            (RowOutcome::failed, stats.failed),
            (RowOutcome::stale, stats.stale),
        ] {
            self.metrics.count_rows(app_code, outcome, count);
        }
        stats
    }

    /// Maps a publish outcome of attempt `attempt` to the row's new state via the retry policy.
    pub(super) fn disposition(&self, attempt: u32, outcome: Outcome, now: i64) -> Disposition {
        match outcome {
            Outcome::Delivered => Disposition::Delivered,
            Outcome::Permanent { message } => Disposition::Failed { error: message },
            Outcome::Deferred { message, wait } => Disposition::Deferred {
                next_retry_at_ms: now
                    .saturating_add(i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)),
                error: message,
            },
            Outcome::Retryable {
                message,
                retry_after,
            } => match self.options.retry.decide(attempt, retry_after, now) {
                Decision::RetryAt(next_retry_at_ms) => Disposition::Retryable {
                    next_retry_at_ms,
                    error: message,
                },
                Decision::GiveUp => Disposition::Failed {
                    error: format!("gave up after {attempt} attempts: {message}"),
                },
            },
        }
    }
}

/// The next part of a publish, or `None` when the publisher is done.
pub(super) async fn next_part(parts: &mut Option<BoxStream<'_, Answered>>) -> Option<Answered> {
    match parts {
        Some(parts) => parts.next().await,
        None => std::future::pending().await,
    }
}

/// A retryable outcome with `reason` for every position not answered yet.
pub(super) fn unanswered(answered: &[bool], reason: &str) -> Answered {
    answered
        .iter()
        .enumerate()
        .filter(|(_, seen)| !**seen)
        .map(|(position, _)| (position, Outcome::retryable(reason)))
        .collect()
}

/// The events of a claimed batch and their rows' `created_at_ms` (for the delivery latency),
/// by position.
#[derive(Clone, Copy)]
pub(super) struct ClaimedRows<'a> {
    pub(super) events: &'a [Event],
    pub(super) created_at_ms: &'a [i64],
}
