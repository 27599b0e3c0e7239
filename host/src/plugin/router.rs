//! Routing: `[[route]]` globs on the event type pick a sink (first match wins); the
//! [`RoutedPublisher`] splits a batch by sink, publishes the groups concurrently, and hands each
//! sink's outcomes back (by batch position) as soon as that sink answers.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use futures::FutureExt;
use futures::future::BoxFuture;
use futures::stream::{self, BoxStream, FuturesUnordered, StreamExt};
use tokio_util::task::AbortOnDropHandle;

pub use crate::glob::glob_match;
use crate::metrics::{Metrics, SinkAnswers};
use crate::publish::{Answered, Event, Outcome, Publisher, waves};

/// One route: events whose type matches `event_type` go to `publisher`, the sink named `sink`.
#[derive(Clone)]
pub struct Route {
    /// Glob on the event type: `*` matches any run of characters, `?` one character.
    pub event_type: String,
    /// The sink's name.
    pub sink: String,
    /// The sink.
    pub publisher: Arc<dyn Publisher>,
}

/// A [`Publisher`] that dispatches each event to the sink its route names.
pub struct RoutedPublisher {
    /// `(glob, index into sinks)`, in route order.
    routes: Vec<(String, usize)>,
    /// `(name, publisher)` of every sink a route names.
    sinks: Vec<(String, Arc<dyn Publisher>)>,
    /// Publish durations per sink go here.
    metrics: Metrics,
}

impl RoutedPublisher {
    /// The router over `routes`, in order (first match wins). An event type no route matches is
    /// answered `Permanent("no route for event type …")`; a catch-all route `event_type = "*"`
    /// placed last acts as the default sink. Routes naming the same sink share its publisher.
    pub fn new(routes: Vec<Route>) -> RoutedPublisher {
        let mut sinks: Vec<(String, Arc<dyn Publisher>)> = Vec::new();
        let routes = routes
            .into_iter()
            .map(|route| {
                let index = match sinks.iter().position(|(name, _)| *name == route.sink) {
                    Some(index) => index,
                    None => {
                        sinks.push((route.sink, route.publisher));
                        sinks.len() - 1
                    }
                };
                (route.event_type, index)
            })
            .collect();
        RoutedPublisher {
            routes,
            sinks,
            metrics: Metrics::default(),
        }
    }

    /// The same router timing each sink's publishes into `metrics`.
    pub fn with_metrics(mut self, metrics: Metrics) -> RoutedPublisher {
        self.metrics = metrics;
        self
    }

    /// The name of the sink `event_type` routes to, if any.
    pub fn route(&self, event_type: &str) -> Option<&str> {
        self.sink_index(event_type)
            .map(|index| self.sinks[index].0.as_str())
    }

    fn sink_index(&self, event_type: &str) -> Option<usize> {
        self.routes
            .iter()
            .find(|(glob, _)| glob_match(glob, event_type))
            .map(|(_, index)| *index)
    }
}

#[async_trait]
impl Publisher for RoutedPublisher {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        gathered(batch.len(), self.publish_parts(batch)).await
    }

    fn sink_for(&self, event_type: &str) -> Option<String> {
        self.route(event_type).map(str::to_string)
    }

    /// One part for the events no route takes (at once), then one part per sink as soon as that
    /// sink answers: a slow sink never holds up the others' results.
    fn publish_parts<'a>(&'a self, batch: &'a [Event]) -> BoxStream<'a, Answered> {
        self.parts(batch, self.groups(batch), None)
    }

    /// Each sink runs the waves of its own events, side by side with the other sinks. A batch
    /// where a room has events for two sinks is published in waves across the sinks instead
    /// (each wave split by sink), so a room's later event waits for its earlier ones whichever
    /// sink they go to.
    async fn publish_in_waves(&self, batch: &[Event], timeout: Duration) -> Vec<Outcome> {
        let groups = self.groups(batch);
        if a_room_spans_sinks(batch, &groups.0) {
            return waves::publish_each_wave(self, batch, timeout).await;
        }
        gathered(batch.len(), self.parts(batch, groups, Some(timeout))).await
    }
}

impl RoutedPublisher {
    /// The positions of `batch` per sink (by sink index, in batch order), and the events no
    /// route takes, failed.
    fn groups(&self, batch: &[Event]) -> (BTreeMap<usize, Vec<usize>>, Answered) {
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        let mut unrouted = Vec::new();
        for (position, event) in batch.iter().enumerate() {
            match self.sink_index(&event.event_type) {
                Some(sink) => groups.entry(sink).or_default().push(position),
                None => unrouted.push((
                    position,
                    Outcome::permanent(format!("no route for event type `{}`", event.event_type)),
                )),
            }
        }
        (groups, unrouted)
    }

    /// [`Publisher::publish_parts`] of `batch` split into its sinks' `groups` (and the events no
    /// route takes), each sink publishing in per-room waves within `waves` when given.
    fn parts<'a>(
        &'a self,
        batch: &'a [Event],
        (groups, unrouted): (BTreeMap<usize, Vec<usize>>, Answered),
        waves: Option<Duration>,
    ) -> BoxStream<'a, Answered> {
        let sinks = self.publish_groups(batch, groups, unrouted.is_empty(), waves);
        let first = (!unrouted.is_empty()).then_some(unrouted);
        stream::iter(first).chain(sinks).boxed()
    }

    /// Each sink's group published (in per-room waves within `waves`, when given), answered as
    /// the sinks finish. `alone`: the groups hold the whole batch.
    fn publish_groups<'a>(
        &'a self,
        batch: &'a [Event],
        groups: BTreeMap<usize, Vec<usize>>,
        alone: bool,
        waves: Option<Duration>,
    ) -> FuturesUnordered<BoxFuture<'a, Answered>> {
        if groups.len() == 1 && alone {
            // One sink takes the whole batch: publish it in place, no copy, no task.
            return groups
                .into_iter()
                .map(|(sink, positions)| {
                    let (name, publisher) = &self.sinks[sink];
                    async move {
                        let started = Instant::now();
                        let results = publish_to(publisher.as_ref(), batch, waves).await;
                        self.metrics
                            .observe_sink_publish(name, started.elapsed(), tally(&results));
                        answered(name, positions, results)
                    }
                    .boxed()
                })
                .collect();
        }
        // Several sinks: each publishes in a task of its own, so a sink that keeps its thread
        // busy (a looping plugin until its deadline) never slows another one down. Dropping the
        // stream (the worker's deadline) aborts the tasks still running.
        groups
            .into_iter()
            .map(|(sink, positions)| {
                let (name, publisher) = &self.sinks[sink];
                let publisher = publisher.clone();
                let events: Vec<Event> = positions.iter().map(|&p| batch[p].clone()).collect();
                let (metrics, sink_name) = (self.metrics.clone(), name.clone());
                let task = AbortOnDropHandle::new(tokio::spawn(async move {
                    let started = Instant::now();
                    let results = publish_to(publisher.as_ref(), &events, waves).await;
                    metrics.observe_sink_publish(&sink_name, started.elapsed(), tally(&results));
                    results
                }));
                async move {
                    let results = match task.await {
                        Ok(results) => results,
                        Err(join) => {
                            let message = format!("sink `{name}` failed: {join}");
                            vec![Outcome::retryable(message); positions.len()]
                        }
                    };
                    answered(name, positions, results)
                }
                .boxed()
            })
            .collect()
    }
}

/// `events` published by `publisher`, in per-room waves within `waves` when given.
async fn publish_to(
    publisher: &dyn Publisher,
    events: &[Event],
    waves: Option<Duration>,
) -> Vec<Outcome> {
    match waves {
        Some(timeout) => publisher.publish_in_waves(events, timeout).await,
        None => publisher.publish(events).await,
    }
}

/// Whether a room of `batch` has events in two of the sinks' `groups`.
fn a_room_spans_sinks(batch: &[Event], groups: &BTreeMap<usize, Vec<usize>>) -> bool {
    if groups.len() < 2 {
        return false;
    }
    let mut sink_of_room: HashMap<&str, usize> = HashMap::new();
    groups.iter().any(|(&sink, positions)| {
        positions.iter().any(|&p| {
            *sink_of_room
                .entry(batch[p].room_id.as_str())
                .or_insert(sink)
                != sink
        })
    })
}

/// The parts of a batch of `len` events gathered into one outcome per position (a position no
/// part answered is retryable).
async fn gathered(len: usize, mut parts: BoxStream<'_, Answered>) -> Vec<Outcome> {
    let mut outcomes: Vec<Option<Outcome>> = vec![None; len];
    while let Some(part) = parts.next().await {
        for (position, outcome) in part {
            if let Some(slot) = outcomes.get_mut(position) {
                *slot = Some(outcome);
            }
        }
    }
    outcomes
        .into_iter()
        .map(|outcome| {
            outcome.unwrap_or_else(|| Outcome::retryable("its sink returned no outcome for it"))
        })
        .collect()
}

/// What a sink answered, counted per outcome.
fn tally(results: &[Outcome]) -> SinkAnswers {
    let mut answers = SinkAnswers::default();
    for outcome in results {
        match outcome {
            Outcome::Delivered => answers.delivered += 1,
            Outcome::Retryable { .. } => answers.retryable += 1,
            Outcome::Permanent { .. } => answers.permanent += 1,
            Outcome::Deferred { .. } => answers.deferred += 1,
        }
    }
    answers
}

/// A sink's results by batch position; a list of the wrong length fails all of them as retryable.
fn answered(name: &str, positions: Vec<usize>, results: Vec<Outcome>) -> Answered {
    if results.len() == positions.len() {
        return positions.into_iter().zip(results).collect();
    }
    let message = format!(
        "sink `{name}` returned {} results for {} events",
        results.len(),
        positions.len()
    );
    positions
        .into_iter()
        .map(|position| (position, Outcome::retryable(message.clone())))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::publish::test_event;
    use crate::publish::waves::HELD_BEHIND;

    /// Records each call's event ids; fails `fail` as retryable.
    struct Recording {
        fail: &'static str,
        calls: Mutex<Vec<Vec<String>>>,
    }

    #[async_trait]
    impl Publisher for Recording {
        async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
            let ids = batch.iter().map(|e| e.event_id.clone()).collect();
            self.calls.lock().unwrap().push(ids);
            batch
                .iter()
                .map(|e| match e.event_id == self.fail {
                    true => Outcome::retryable("down"),
                    false => Outcome::Delivered,
                })
                .collect()
        }
    }

    /// `batch` (id, type, room) published in waves through two sinks, `a.*` and `b.*`, each
    /// failing `x1`: the outcomes, and each sink's calls (event ids).
    async fn in_waves(
        batch: &[(&str, &str, &str)],
    ) -> (Vec<Outcome>, Vec<Vec<String>>, Vec<Vec<String>>) {
        let recording = || {
            Arc::new(Recording {
                fail: "x1",
                calls: Mutex::new(Vec::new()),
            })
        };
        let (a, b) = (recording(), recording());
        let route = |glob: &str, sink: &str, publisher: &Arc<Recording>| Route {
            event_type: glob.into(),
            sink: sink.into(),
            publisher: publisher.clone(),
        };
        let router = RoutedPublisher::new(vec![route("a.*", "a", &a), route("b.*", "b", &b)]);
        let batch: Vec<Event> = batch
            .iter()
            .map(|(id, event_type, room)| test_event(id, event_type, room))
            .collect();
        let outcomes = router
            .publish_in_waves(&batch, Duration::from_secs(5))
            .await;
        let calls = |sink: Arc<Recording>| std::mem::take(&mut *sink.calls.lock().unwrap());
        (outcomes, calls(a), calls(b))
    }

    #[tokio::test]
    async fn each_sink_runs_the_waves_of_its_own_rooms() {
        let (outcomes, a, b) = in_waves(&[
            ("x1", "a.gift", "x"),
            ("y1", "b.rank", "y"),
            ("x2", "a.gift", "x"),
            ("y2", "b.rank", "y"),
            ("z1", "c.other", "z"),
        ])
        .await;
        assert_eq!(a, vec![vec!["x1"]]);
        assert_eq!(b, vec![vec!["y1"], vec!["y2"]]);
        assert_eq!(outcomes[0], Outcome::retryable("down"));
        assert_eq!(outcomes[2], Outcome::deferred(HELD_BEHIND, Duration::ZERO));
        assert_eq!(outcomes[1], Outcome::Delivered);
        assert_eq!(outcomes[3], Outcome::Delivered);
        assert!(matches!(outcomes[4], Outcome::Permanent { .. }));
    }

    #[tokio::test]
    async fn a_room_with_events_for_two_sinks_is_held_across_them() {
        let (outcomes, a, b) = in_waves(&[
            ("x1", "a.gift", "x"),
            ("y1", "a.gift", "y"),
            ("x2", "b.rank", "x"),
            ("y2", "b.rank", "y"),
        ])
        .await;
        // x2 goes to another sink than x1, and still waits behind it.
        assert_eq!(a, vec![vec!["x1", "y1"]]);
        assert_eq!(b, vec![vec!["y2"]]);
        assert_eq!(outcomes[2], Outcome::deferred(HELD_BEHIND, Duration::ZERO));
        assert_eq!(outcomes[3], Outcome::Delivered);
    }
}
