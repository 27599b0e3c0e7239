//! Marking what a publish answered: each outcome turned into the row's new state (the retry
//! policy, breaker deferrals), marked fenced on the lease, and what the mark did counted and
//! logged (the held round marks its whole batch at once and reports through the same code).

use std::time::SystemTime;

use opentelemetry::KeyValue;
use tracing::{debug, warn};

use super::{BatchStats, Worker, WorkerError};
use crate::metrics::RowOutcome;
use crate::publish::{Answered, Event, Outcome};
use crate::store::{Disposition, Lease, Mark, MarkParams};
use crate::telemetry::{DeliveryOutcome, DeliverySpans};

impl Worker {
    /// The marks of one answered part (each position in range and answered once:
    /// [`Worker::publish_within_deadline`]), with their positions.
    pub(super) fn marks_for(&self, events: &[Event], part: Answered) -> (Vec<usize>, Vec<Mark>) {
        let now = self.now_ms();
        part.into_iter()
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
        let answered = SystemTime::now();
        let span = self
            .telemetry
            .batch_span("mark", self.store.table().as_str());
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
        let attributes = vec![
            KeyValue::new("outboxd.app_code", app_code.to_string()),
            KeyValue::new(
                "outboxd.stale",
                marked.as_ref().map_or(0, |r| r.stale.len() as i64),
            ),
        ];
        span.end(
            marks.len(),
            attributes,
            marked.as_ref().err().map(|e| e as _),
        );
        let report = marked?;
        Ok(self.report_marks(
            worker_id,
            app_code,
            rows,
            (positions, answered),
            &marks,
            &report,
        ))
    }

    /// Counts, logs and reports to the metrics what one mark did to each row of a part.
    pub(super) fn report_marks(
        &self,
        worker_id: &str,
        app_code: &str,
        rows: ClaimedRows<'_>,
        (positions, answered): (Vec<usize>, SystemTime),
        marks: &[Mark],
        report: &crate::store::MarkReport,
    ) -> BatchStats {
        let ClaimedRows {
            events,
            created_at_ms,
            spans,
        } = rows;
        let options = &*self.options;
        let marked_at = self.now_ms();
        let mut stats = BatchStats::default();
        let mut latencies = Vec::new();
        for (position, mark) in positions.into_iter().zip(marks) {
            let event = &events[position];
            let stale = report.stale.contains(&mark.event_id);
            let (fate, error) = match (&mark.disposition, stale) {
                (_, true) => (RowOutcome::stale, None),
                (Disposition::Delivered, _) => (RowOutcome::delivered, None),
                (Disposition::Retryable { error, .. }, _) => {
                    (RowOutcome::retried, Some(error.as_str()))
                }
                (Disposition::Deferred { error, .. }, _) => {
                    (RowOutcome::deferred, Some(error.as_str()))
                }
                (Disposition::Failed { error }, _) => (RowOutcome::failed, Some(error.as_str())),
            };
            stats.count(fate, 1);
            let attempt = match fate {
                RowOutcome::delivered => Some(DeliveryOutcome::Delivered),
                RowOutcome::retried => Some(DeliveryOutcome::Retryable(error.unwrap_or(""))),
                RowOutcome::failed => Some(DeliveryOutcome::Failed(error.unwrap_or(""))),
                RowOutcome::stale => Some(DeliveryOutcome::Stale),
                _ => None, // deferred: not tried, no attempt spent, no span
            };
            if let Some(attempt) = attempt {
                spans.record(position, answered, attempt);
            }
            let status = status_logged(fate);
            // The producer's trace id, when the event carries one: its log lines join its trace.
            let trace_id = event.trace.as_ref().map(|t| t.trace_id());
            match fate {
                RowOutcome::delivered => {
                    latencies.push(marked_at - created_at_ms[position]);
                    debug!(worker = %worker_id, node_id = %options.node_id, app_code = %app_code, event_id = %event.event_id,
                        event_type = %event.event_type, room_id = %event.room_id, retry_count = event.attempt - 1, trace_id,
                        status, "event delivered");
                }
                RowOutcome::deferred => {
                    // The breaker logs the outage once; one line per deferred event would flood.
                    debug!(worker = %worker_id, node_id = %options.node_id, app_code = %app_code, event_id = %event.event_id,
                        event_type = %event.event_type, room_id = %event.room_id, retry_count = event.attempt - 1, trace_id,
                        status, error = error.unwrap_or(""), "event deferred");
                }
                _ => {
                    warn!(worker = %worker_id, node_id = %options.node_id, app_code = %app_code, event_id = %event.event_id,
                        event_type = %event.event_type, room_id = %event.room_id, retry_count = event.attempt - 1, trace_id,
                        status, error = error.unwrap_or("lease taken over by another worker; left untouched"),
                        "event not delivered");
                }
            }
        }
        self.metrics
            .observe_delivery_latencies(app_code, &latencies);
        for fate in RowOutcome::MARKED {
            self.metrics.count_rows(app_code, fate, stats.of(fate));
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
            } => self
                .options
                .retry
                .after_failure(attempt, message, retry_after, now),
        }
    }
}

/// The `status` a row's log line carries for what its mark did.
fn status_logged(fate: RowOutcome) -> &'static str {
    match fate {
        RowOutcome::claimed => "claimed",
        RowOutcome::rejected => "rejected",
        RowOutcome::delivered => "delivered",
        RowOutcome::retried => "retryable",
        RowOutcome::deferred => "deferred",
        RowOutcome::failed => "failed",
        RowOutcome::stale => "stale",
    }
}

/// The events of a claimed batch, their rows' `created_at_ms` (for the delivery latency) and
/// their delivery spans, by position.
#[derive(Clone, Copy)]
pub(super) struct ClaimedRows<'a> {
    pub(super) events: &'a [Event],
    pub(super) created_at_ms: &'a [i64],
    pub(super) spans: &'a DeliverySpans,
}
