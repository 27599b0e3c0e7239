//! Routing: `[[route]]` globs on the event type pick a sink (first match wins); the
//! [`RoutedPublisher`] splits a batch by sink, publishes the groups concurrently and puts the
//! outcomes back in batch order.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::join_all;

use crate::publish::{Event, Outcome, Publisher};

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
        RoutedPublisher { routes, sinks }
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
        // Event positions per sink, in batch order.
        let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
        for (position, event) in batch.iter().enumerate() {
            match self.sink_index(&event.event_type) {
                Some(sink) => groups.entry(sink).or_default().push(position),
                None => {
                    outcomes[position] = Some(Outcome::permanent(format!(
                        "no route for event type `{}`",
                        event.event_type
                    )))
                }
            }
        }
        let whole_batch = groups.len() == 1 && groups.values().all(|p| p.len() == batch.len());
        // Each sink answers one outcome per event (the `Publisher` contract; `PluginSink` checks its
        // plugin's answer); the worker checks the whole batch's count. A position left without an
        // outcome is retried.
        let published = join_all(groups.into_iter().map(|(sink, positions)| async move {
            let (_, publisher) = &self.sinks[sink];
            let results = if whole_batch {
                publisher.publish(batch).await
            } else {
                let events: Vec<Event> = positions.iter().map(|&p| batch[p].clone()).collect();
                publisher.publish(&events).await
            };
            (positions, results)
        }))
        .await;
        for (positions, results) in published {
            for (position, outcome) in positions.into_iter().zip(results) {
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
}

/// Whether `text` matches `glob`: `*` matches any run of characters (including none), `?`
/// exactly one character, anything else itself.
pub fn glob_match(glob: &str, text: &str) -> bool {
    let glob: Vec<char> = glob.chars().collect();
    let text: Vec<char> = text.chars().collect();
    let (mut g, mut t) = (0, 0);
    // Position after the last `*` seen, and the text position it is currently matched up to.
    let mut star: Option<(usize, usize)> = None;
    while t < text.len() {
        match glob.get(g) {
            Some('*') => {
                star = Some((g + 1, t));
                g += 1;
            }
            Some(&c) if c == '?' || c == text[t] => {
                g += 1;
                t += 1;
            }
            _ => match star {
                Some((after, matched)) => {
                    g = after;
                    t = matched + 1;
                    star = Some((after, matched + 1));
                }
                None => return false,
            },
        }
    }
    glob[g..].iter().all(|&c| c == '*')
}

#[cfg(test)]
mod tests {
    use super::glob_match;

    #[test]
    fn globs() {
        assert!(glob_match("*", ""));
        assert!(glob_match("*", "room.created"));
        assert!(glob_match("room.*", "room.created"));
        assert!(!glob_match("room.*", "user.created"));
        assert!(glob_match("room.?reated", "room.created"));
        assert!(!glob_match("room.?", "room.ab"));
        assert!(glob_match("*.member.*", "room.member.joined"));
        assert!(glob_match("a*b*c", "aXXbYYbZc"));
        assert!(!glob_match("a*b*c", "aXXbYYbZ"));
        assert!(glob_match("exact", "exact"));
        assert!(!glob_match("exact", "exactly"));
    }
}
