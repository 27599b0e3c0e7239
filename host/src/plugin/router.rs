//! Routing: `[[route]]` globs on the event type pick a sink (first match wins); the
//! [`RoutedPublisher`] splits a batch by sink, publishes the groups concurrently, and hands each
//! sink's outcomes back (by batch position) as soon as that sink answers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use futures::FutureExt;
use futures::stream::{self, BoxStream, FuturesUnordered, StreamExt};
use tokio_util::task::AbortOnDropHandle;

pub use crate::glob::glob_match;
use crate::metrics::{Metrics, SinkAnswers};
use crate::publish::{Answered, Event, Outcome, Publisher};

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
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut parts = self.publish_parts(batch);
        while let Some(part) = parts.next().await {
            for (position, outcome) in part {
                outcomes[position] = Some(outcome);
            }
        }
        outcomes
            .into_iter()
            .map(|outcome| {
                outcome.unwrap_or_else(|| Outcome::retryable("its sink returned no outcome for it"))
            })
            .collect()
    }

    fn sink_for(&self, event_type: &str) -> Option<String> {
        self.route(event_type).map(str::to_string)
    }

    /// One part for the events no route takes (at once), then one part per sink as soon as that
    /// sink answers: a slow sink never holds up the others' results.
    fn publish_parts<'a>(&'a self, batch: &'a [Event]) -> BoxStream<'a, Answered> {
        // Event positions per sink, in batch order.
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
        let sinks: FuturesUnordered<_> = if groups.len() == 1 && unrouted.is_empty() {
            // One sink takes the whole batch: publish it in place, no copy, no task.
            groups
                .into_iter()
                .map(|(sink, positions)| {
                    let (name, publisher) = &self.sinks[sink];
                    async move {
                        let started = Instant::now();
                        let results = publisher.publish(batch).await;
                        self.metrics
                            .observe_sink_publish(name, started.elapsed(), tally(&results));
                        answered(name, positions, results)
                    }
                    .boxed()
                })
                .collect()
        } else {
            // Several sinks: each publishes in a task of its own, so a sink that keeps its
            // thread busy (a looping plugin until its deadline) never slows another one down.
            // Dropping the stream (the worker's deadline) aborts the tasks still running.
            groups
                .into_iter()
                .map(|(sink, positions)| {
                    let (name, publisher) = &self.sinks[sink];
                    let publisher = publisher.clone();
                    let events: Vec<Event> = positions.iter().map(|&p| batch[p].clone()).collect();
                    let (metrics, sink_name) = (self.metrics.clone(), name.clone());
                    let task = AbortOnDropHandle::new(tokio::spawn(async move {
                        let started = Instant::now();
                        let results = publisher.publish(&events).await;
                        metrics.observe_sink_publish(
                            &sink_name,
                            started.elapsed(),
                            tally(&results),
                        );
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
        };
        let first = (!unrouted.is_empty()).then_some(unrouted);
        stream::iter(first).chain(sinks).boxed()
    }
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
