//! Finding the event a whole-call failure belongs to.
//!
//! A plugin call that fails as a whole (a trap, its deadline, its memory cap, a wrong number of
//! results) says nothing about which event caused it. [`isolate`] publishes the call's events
//! again in halves, level by level, until every event is either answered by a call that
//! succeeded or has failed alone: innocent neighbours are delivered on the same claim, and only
//! the culprit spends an attempt and carries the failure's reason.
//!
//! The extra work is bounded:
//! - a poison event costs two calls per level, about 2 × log2(n) calls for a call of n events,
//!   and one call finds at most three culprits' worth (1 + 6 × log2(n) calls in all);
//! - a call where nothing ever succeeds — the whole call, both halves and all four quarters
//!   failing ([`OUTAGE_CALLS`]) — is an outage, not a poison event: its events are all
//!   retryable, which is what the sink's circuit breaker counts, and the halving stops;
//! - a level is started only when it can end before the sink's time for the batch runs out
//!   (each level's calls run side by side, so a level takes at most one call deadline). When
//!   time runs out (a guest that overruns its deadline on one event costs a whole deadline per
//!   level), the halves still unresolved are remembered as [`Suspects`] and the next claim that
//!   brings them back publishes each half in a call of its own: the search goes on one level
//!   per claim instead of starting over.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};

use crate::publish::Outcome;

/// What one call answers: an outcome per position, or why the call failed as a whole.
pub type CallResult = Result<Vec<(usize, Outcome)>, String>;

/// Calls of one halving level run at most this many at a time (each on an instance of its own).
pub const ISOLATION_PARALLELISM: usize = 4;

/// Failed calls without a single success after which a call's failure is taken for an outage:
/// the whole call, its two halves and its four quarters. Up to three poison events in a call
/// still leave one quarter that succeeds.
pub const OUTAGE_CALLS: usize = 7;

/// Most event ids a sink remembers as suspects; past it the oldest groups are forgotten (their
/// events are then published with the others again, nothing is lost).
pub const MAX_SUSPECTS: usize = 100_000;

/// What [`isolate`] found for one call's events.
#[derive(Debug, Default)]
pub struct Isolation {
    /// One outcome per event of the call, by position.
    pub outcomes: Vec<(usize, Outcome)>,
    /// Groups still unresolved when time ran out: each failed as a whole, and its events are
    /// retryable in `outcomes`. Remember their halves ([`Suspects::record`]).
    pub unresolved: Vec<Vec<usize>>,
    /// Calls made, the first one included.
    pub calls: usize,
    /// Events that failed alone (the culprits found).
    pub failed_alone: usize,
    /// The call's failure was taken for an outage ([`OUTAGE_CALLS`]).
    pub outage: bool,
}

/// Publishes the events at `group` through `call`, halving on whole-call failures.
///
/// `call` publishes the events at the positions it is given and returns one outcome per
/// position, or the reason the call failed as a whole. A level of halves is started only while
/// `now + level_time <= deadline`.
pub async fn isolate<C, F>(
    group: Vec<usize>,
    deadline: Instant,
    level_time: Duration,
    call: C,
) -> Isolation
where
    C: Fn(Vec<usize>) -> F,
    F: Future<Output = CallResult>,
{
    let max_calls = 1 + 6 * log2_ceil(group.len());
    let mut found = Isolation::default();
    let mut succeeded = 0usize;
    let mut level = vec![group];
    loop {
        let results: Vec<(Vec<usize>, CallResult)> = stream::iter(level)
            .map(|positions| {
                let called = call(positions.clone());
                async move { (positions, called.await) }
            })
            .buffered(ISOLATION_PARALLELISM)
            .collect()
            .await;
        found.calls += results.len();
        let mut failed = Vec::new();
        for (positions, result) in results {
            match result {
                Ok(outcomes) => {
                    succeeded += 1;
                    found.outcomes.extend(outcomes);
                }
                Err(reason) if positions.len() == 1 => {
                    found.failed_alone += 1;
                    found
                        .outcomes
                        .push((positions[0], Outcome::retryable(reason)));
                }
                Err(reason) => failed.push((positions, reason)),
            }
        }
        if failed.is_empty() {
            return found;
        }
        found.outage = succeeded == 0 && found.calls >= OUTAGE_CALLS;
        let next_calls = 2 * failed.len();
        let stop = found.outage
            || found.calls + next_calls > max_calls
            || Instant::now() + level_time > deadline;
        if stop {
            for (positions, reason) in failed {
                found.outcomes.extend(
                    positions
                        .iter()
                        .map(|&position| (position, Outcome::retryable(reason.clone()))),
                );
                if !found.outage {
                    found.unresolved.push(positions);
                }
            }
            return found;
        }
        level = failed
            .into_iter()
            .flat_map(|(positions, _)| {
                let (left, right) = positions.split_at(positions.len() / 2);
                [left.to_vec(), right.to_vec()]
            })
            .collect();
    }
}

/// ⌈log2(n)⌉, 0 for 0 and 1.
fn log2_ceil(n: usize) -> usize {
    n.max(1).next_power_of_two().trailing_zeros() as usize
}

/// A sink's memory of events whose call failed as a whole before the culprit was found, by
/// event id, in groups: a claim that brings them back publishes each group in a call of its own.
#[derive(Debug, Default)]
pub struct Suspects {
    groups: Mutex<HashMap<String, u64>>,
    next_group: AtomicU64,
}

impl Suspects {
    /// The suspect group of `event_id`, if it is a suspect.
    pub fn group_of(&self, event_id: &str) -> Option<u64> {
        self.groups.lock().ok()?.get(event_id).copied()
    }

    /// Remembers the two halves of every unresolved group (event ids by position through
    /// `event_id`) as groups of their own.
    pub fn record<'a>(&self, unresolved: &[Vec<usize>], event_id: impl Fn(usize) -> &'a str) {
        let Ok(mut groups) = self.groups.lock() else {
            return;
        };
        for positions in unresolved {
            if groups.len() + positions.len() > MAX_SUSPECTS {
                groups.clear();
            }
            let (left, right) = positions.split_at(positions.len() / 2);
            for half in [left, right] {
                let id = self.next_group.fetch_add(1, Ordering::Relaxed);
                for &position in half {
                    groups.insert(event_id(position).to_string(), id);
                }
            }
        }
    }

    /// Forgets `event_ids` (answered by a call that succeeded, or failed alone).
    pub fn forget<'a>(&self, event_ids: impl IntoIterator<Item = &'a str>) {
        let Ok(mut groups) = self.groups.lock() else {
            return;
        };
        if groups.is_empty() {
            return;
        }
        for id in event_ids {
            groups.remove(id);
        }
    }

    /// How many events are suspects.
    pub fn len(&self) -> usize {
        self.groups.lock().map_or(0, |groups| groups.len())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A call failing whenever one of `poison` is among its positions; counts its calls.
    fn sink<'a>(
        poison: &'static [usize],
        calls: &'a AtomicUsize,
    ) -> impl Fn(Vec<usize>) -> futures::future::Ready<CallResult> + 'a {
        move |positions: Vec<usize>| {
            calls.fetch_add(1, Ordering::Relaxed);
            futures::future::ready(if positions.iter().any(|p| poison.contains(p)) {
                Err("trapped".to_string())
            } else {
                Ok(positions
                    .into_iter()
                    .map(|p| (p, Outcome::Delivered))
                    .collect())
            })
        }
    }

    fn far() -> Instant {
        Instant::now() + Duration::from_secs(60)
    }

    fn delivered(found: &Isolation) -> usize {
        found
            .outcomes
            .iter()
            .filter(|(_, o)| *o == Outcome::Delivered)
            .count()
    }

    #[tokio::test]
    async fn one_poison_among_a_thousand_costs_only_itself() {
        let calls = AtomicUsize::new(0);
        let found = isolate(
            (0..1000).collect(),
            far(),
            Duration::ZERO,
            sink(&[637], &calls),
        )
        .await;
        assert_eq!(found.outcomes.len(), 1000);
        assert_eq!(delivered(&found), 999);
        assert_eq!(found.failed_alone, 1);
        let poison = found.outcomes.iter().find(|(p, _)| *p == 637).unwrap();
        assert_eq!(poison.1, Outcome::retryable("trapped"));
        // Two calls per level, ten levels, plus the first.
        assert!(found.calls <= 1 + 2 * 10, "{} calls", found.calls);
        assert!(!found.outage && found.unresolved.is_empty());
    }

    #[tokio::test]
    async fn two_and_three_poisons_are_found_each() {
        for poison in [&[3usize, 900][..], &[0, 499, 999][..]] {
            let poison: &'static [usize] = Box::leak(poison.to_vec().into_boxed_slice());
            let calls = AtomicUsize::new(0);
            let found = isolate(
                (0..1000).collect(),
                far(),
                Duration::ZERO,
                sink(poison, &calls),
            )
            .await;
            assert_eq!(delivered(&found), 1000 - poison.len());
            assert_eq!(found.failed_alone, poison.len());
            assert!(!found.outage);
        }
    }

    #[tokio::test]
    async fn a_sink_that_always_fails_is_an_outage_after_seven_calls() {
        let calls = AtomicUsize::new(0);
        let all: Vec<usize> = (0..1000).collect();
        let poison: &'static [usize] = Box::leak(all.clone().into_boxed_slice());
        let found = isolate(all, far(), Duration::ZERO, sink(poison, &calls)).await;
        assert!(found.outage);
        assert_eq!(found.calls, OUTAGE_CALLS);
        assert_eq!(found.outcomes.len(), 1000);
        assert!(
            found
                .outcomes
                .iter()
                .all(|(_, o)| matches!(o, Outcome::Retryable { .. }))
        );
        assert!(found.unresolved.is_empty());
    }

    #[tokio::test]
    async fn no_time_for_a_level_leaves_the_group_unresolved() {
        let calls = AtomicUsize::new(0);
        let found = isolate(
            (0..8).collect(),
            Instant::now() + Duration::from_secs(1),
            Duration::from_secs(5),
            sink(&[5], &calls),
        )
        .await;
        assert_eq!(found.calls, 1);
        assert_eq!(found.unresolved, vec![(0..8).collect::<Vec<_>>()]);
        let suspects = Suspects::default();
        let ids: Vec<String> = (0..8).map(|p| format!("e{p}")).collect();
        suspects.record(&found.unresolved, |p| ids[p].as_str());
        assert_eq!(suspects.len(), 8);
        assert_eq!(suspects.group_of("e0"), suspects.group_of("e3"));
        assert_ne!(suspects.group_of("e3"), suspects.group_of("e4"));
        suspects.forget(["e0", "e1"]);
        assert_eq!(suspects.len(), 6);
    }

    #[tokio::test]
    async fn a_lone_event_that_fails_is_its_own_culprit() {
        let calls = AtomicUsize::new(0);
        let found = isolate(vec![0], far(), Duration::ZERO, sink(&[0], &calls)).await;
        assert_eq!(found.calls, 1);
        assert_eq!(found.failed_alone, 1);
        assert!(!found.outage);
    }
}
