//! Per-room order within a batch (partitioned mode): a partition's batch may hold many events of
//! a room, and a sink may publish a call's events side by side (the webhook plugin sends them at
//! once). So the batch is published in waves: wave *n* holds the *n*-th event of each room, and
//! a wave is published once the one before it has answered. A room whose event was not delivered
//! (retryable, or deferred by an open breaker) sends none of its later events: they go back
//! `retryable` untried (no attempt spent), behind it. Every row is then marked at once, fenced
//! on the partition.
//!
//! A plugin thus never sees two events of one room in one call, with per-room order on: the sink
//! contract asks nothing more of it (docs/plugins/contract.md).

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use futures::StreamExt;
use tokio::sync::SemaphorePermit;

use super::mark::ClaimedRows;
use super::{BatchStats, Worker, WorkerError};
use crate::publish::{Answered, Event, Outcome};
use crate::store::ClaimBatch;

/// Why a room's later event was not tried.
const HELD_BEHIND: &str = "not tried: an earlier event of its room was not delivered";
/// Why an event was not tried when the batch ran out of time.
const OUT_OF_TIME: &str =
    "not tried: the batch's publish deadline (worker.publish_timeout) passed before its turn";

/// The waves of `events`: for each, the positions of the `n`-th event of every room, in batch
/// order (a room's events keep their order across waves).
pub(super) fn waves_of(events: &[Event]) -> Vec<Vec<usize>> {
    let mut seen: HashMap<&str, usize> = HashMap::new();
    let mut waves: Vec<Vec<usize>> = Vec::new();
    for (position, event) in events.iter().enumerate() {
        let n = seen.entry(event.room_id.as_str()).or_insert(0);
        if waves.len() <= *n {
            waves.push(Vec::new());
        }
        waves[*n].push(position);
        *n += 1;
    }
    waves
}

impl Worker {
    /// Publishes a partition's batch in per-room waves (see the module docs) within one
    /// `worker.publish_timeout`, then marks every row in one fenced statement (`publishing`, the
    /// loop's publishing turn, is given back before the mark).
    pub(super) async fn deliver_in_waves(
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
        let started = Instant::now();
        let mut outcomes: Vec<Option<Outcome>> = vec![None; events.len()];
        let mut held: HashSet<&str> = HashSet::new();
        for wave in waves_of(&events) {
            let (send, behind): (Vec<usize>, Vec<usize>) = wave
                .into_iter()
                .partition(|p| !held.contains(events[*p].room_id.as_str()));
            for p in behind {
                outcomes[p] = Some(Outcome::deferred(HELD_BEHIND, Duration::ZERO));
            }
            let left = self
                .options
                .publish_timeout
                .saturating_sub(started.elapsed());
            if left.is_zero() {
                for p in send {
                    held.insert(events[p].room_id.as_str());
                    outcomes[p] = Some(Outcome::deferred(OUT_OF_TIME, Duration::ZERO));
                }
                continue;
            }
            let subset: Vec<Event> = send.iter().map(|p| events[*p].clone()).collect();
            let mut parts = self.publish_within(&subset, left);
            while let Some(part) = parts.next().await {
                for (i, outcome) in part {
                    let p = send[i];
                    if matches!(
                        outcome,
                        Outcome::Retryable { .. } | Outcome::Deferred { .. }
                    ) {
                        held.insert(events[p].room_id.as_str());
                    }
                    outcomes[p] = Some(outcome);
                }
            }
        }
        drop(publishing); // published: the loop's next batch may publish while this one marks
        let answered: Answered = outcomes
            .into_iter()
            .enumerate()
            .map(|(p, outcome)| {
                (
                    p,
                    outcome.unwrap_or_else(|| {
                        Outcome::retryable("the publisher gave no result for this event")
                    }),
                )
            })
            .collect();
        let (positions, marks) = self.marks_for(&events, answered);
        let rows = ClaimedRows {
            events: &events,
            created_at_ms: &created_at_ms,
            spans: &spans,
        };
        self.mark_and_log(worker_id, app_code, &lease, rows, positions, marks)
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::waves_of;
    use crate::publish::Event;

    fn event(id: &str, room: &str) -> Event {
        Event {
            app_code: "app".into(),
            event_id: id.into(),
            event_type: "t".into(),
            room_id: room.into(),
            room_version: 0,
            occurred_at_ms: 0,
            body: Vec::new(),
            attempt: 1,
            trace: None,
        }
    }

    #[test]
    fn each_wave_holds_one_event_per_room_in_order() {
        let events = [
            event("a1", "a"),
            event("b1", "b"),
            event("a2", "a"),
            event("a3", "a"),
            event("c1", "c"),
            event("b2", "b"),
        ];
        assert_eq!(waves_of(&events), vec![vec![0, 1, 4], vec![2, 5], vec![3]]);
        assert!(waves_of(&[]).is_empty());
    }
}
