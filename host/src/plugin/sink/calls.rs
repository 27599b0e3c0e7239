//! A claimed batch published as calls: events over `limits.max_event_size` failed alone, the
//! rest packed into calls by count and bytes, suspects in calls of their own group, each call
//! bisected when it fails as a whole (`isolate`), and each plugin result turned into an
//! [`Outcome`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::{self, StreamExt};

use super::super::bindings::outbox::publisher::trace::TraceContext as WitTraceContext;
use super::super::bindings::outbox::publisher::types::{Event as WitEvent, PublishError};
use super::super::error::PluginError;
use super::super::isolate::{CallResult, ISOLATION_PARALLELISM, isolate};
use super::super::redact::Redactor;
use super::{SinkCore, event_size};
use crate::metrics::PluginFailure;
use crate::publish::{Event, Outcome, waves};

impl SinkCore {
    /// Publishes a claimed batch ([`SinkCore::publish_events`]). Runs on the plugin runtime.
    pub(super) async fn publish_batch(self: Arc<Self>, batch: Vec<Event>) -> Vec<Outcome> {
        let events: Vec<&Event> = batch.iter().collect();
        self.publish_events(&events).await
    }

    /// Publishes a claimed batch in per-room waves within `timeout` (`publish::waves`), each
    /// wave as [`SinkCore::publish_events`] publishes a batch. Runs on the plugin runtime.
    pub(super) async fn publish_batch_in_waves(
        self: Arc<Self>,
        batch: Vec<Event>,
        timeout: Duration,
    ) -> Vec<Outcome> {
        let this = &self;
        let batch = &batch;
        waves::publish_in_waves(batch, timeout, |positions| async move {
            let events: Vec<&Event> = positions.iter().map(|&p| &batch[p]).collect();
            this.publish_events(&events).await
        })
        .await
    }

    /// Publishes `batch`: events over `max_event_size` fail alone; the others go out in calls of
    /// at most `max_batch_size` events and `max_batch_bytes` bytes, one after the other, and
    /// suspects in calls of their own group beside them; each call is isolated when it fails as
    /// a whole.
    async fn publish_events(&self, batch: &[&Event]) -> Vec<Outcome> {
        let deadline = Instant::now() + self.batch_budget;
        let mut outcomes: Vec<Option<Outcome>> = vec![None; batch.len()];
        let mut plain = Vec::with_capacity(batch.len());
        let mut suspect_groups: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
        for (position, event) in batch.iter().enumerate() {
            let size = event_size(event);
            if size > self.max_event_size {
                outcomes[position] = Some(Outcome::permanent(format!(
                    "event of {size} bytes exceeds sink `{}`'s limits.max_event_size ({} bytes)",
                    self.name, self.max_event_size
                )));
            } else if let Some(group) = self.suspects.group_of(&event.event_id) {
                suspect_groups.entry(group).or_default().push(position);
            } else {
                plain.push(position);
            }
        }
        let plain = self.pack(batch, plain);
        let suspects: Vec<Vec<usize>> = suspect_groups
            .into_values()
            .flat_map(|group| self.pack(batch, group))
            .collect();
        let this = self;
        let calls = |calls: Vec<Vec<usize>>, at_once: usize| {
            stream::iter(calls)
                .map(move |positions| {
                    isolate(
                        positions,
                        deadline,
                        this.publish_timeout,
                        move |positions| this.call(batch, positions),
                    )
                })
                .buffered(at_once)
                .collect::<Vec<_>>()
        };
        // The batch's calls one after the other, as the deadlines are configured; the suspect
        // groups side by side with them, so that a group that runs into its deadline again
        // costs the others no time.
        let (plain, suspects) =
            futures::join!(calls(plain, 1), calls(suspects, ISOLATION_PARALLELISM));
        for found in plain.into_iter().chain(suspects) {
            if found.calls > 1 {
                tracing::warn!(sink = %self.name, calls = found.calls, failed_alone = found.failed_alone,
                    outage = found.outage, unresolved = found.unresolved.iter().map(Vec::len).sum::<usize>(),
                    "plugin call failed as a whole; published its events again in halves to find the culprit");
            }
            // Answered events are suspects no more; the groups left unresolved are halved.
            self.suspects.forget(
                found
                    .outcomes
                    .iter()
                    .map(|(p, _)| batch[*p].event_id.as_str()),
            );
            self.suspects
                .record(&found.unresolved, |p| batch[p].event_id.as_str());
            for (position, outcome) in found.outcomes {
                outcomes[position] = Some(outcome);
            }
        }
        outcomes
            .into_iter()
            .map(|outcome| outcome.unwrap_or_else(|| Outcome::retryable("the sink gave no result")))
            .collect()
    }

    /// `positions` split, in order, into calls of at most `max_batch_size` events and
    /// `max_batch_bytes` bytes (an event alone may reach `max_event_size`).
    fn pack(&self, batch: &[&Event], positions: Vec<usize>) -> Vec<Vec<usize>> {
        let mut calls = Vec::new();
        let mut call = Vec::new();
        let mut bytes = 0u64;
        for position in positions {
            let size = event_size(batch[position]);
            if !call.is_empty()
                && (call.len() >= self.max_batch_size || bytes + size > self.max_batch_bytes)
            {
                calls.push(std::mem::take(&mut call));
                bytes = 0;
            }
            call.push(position);
            bytes += size;
        }
        if !call.is_empty() {
            calls.push(call);
        }
        calls
    }

    /// One `publish` call with the events at `positions`: their outcomes, or why the call failed
    /// as a whole (the instance is then discarded and the failure counted).
    async fn call(&self, batch: &[&Event], positions: Vec<usize>) -> CallResult {
        let wit_events: Vec<WitEvent> = positions.iter().map(|&p| to_wit(batch[p])).collect();
        // The contexts `trace.context-of` answers from; a plugin that does not import it gets none.
        let asks = self.world.imports_trace();
        let traces = positions
            .iter()
            .filter(|_| asks)
            .filter_map(|&p| {
                let event = &batch[p];
                let context = event.trace.as_ref()?;
                let context = WitTraceContext {
                    traceparent: context.traceparent().to_string(),
                    tracestate: context.tracestate().to_string(),
                };
                Some((event.event_id.clone(), context))
            })
            .collect();
        let called = match self.check_out().await {
            Ok(mut instance) => {
                let results = self.call_publish(&mut instance, &wit_events, traces).await;
                if results.is_ok() {
                    self.check_in(instance);
                }
                results
            }
            Err(error) => Err(error),
        };
        match called {
            Ok(results) => Ok(positions
                .into_iter()
                .zip(results)
                .map(|(position, result)| {
                    let outcome = to_outcome(result, &self.shared.redactor, self.max_retry_after);
                    (position, outcome)
                })
                .collect()),
            Err(error) => {
                let kind = match error {
                    PluginError::Deadline { .. } => PluginFailure::deadline,
                    PluginError::MemoryCap { .. } => PluginFailure::memory_limit,
                    _ => PluginFailure::trap,
                };
                self.metrics.count_plugin_failure(&self.name, kind);
                tracing::debug!(sink = %self.name, error = %error, events = positions.len(), "plugin call failed; instance discarded");
                Err(error.to_string())
            }
        }
    }
}

fn to_wit(event: &Event) -> WitEvent {
    WitEvent {
        app_code: event.app_code.clone(),
        event_id: event.event_id.clone(),
        event_type: event.event_type.clone(),
        room_id: event.room_id.clone(),
        room_version: event.room_version,
        occurred_at_ms: event.occurred_at_ms,
        body: event.body.clone(),
        attempt: event.attempt,
    }
}

/// Maps one plugin result onto the worker's outcome, secrets redacted from its message and a
/// retry-after cut to `max_retry_after` (the message then says so).
fn to_outcome(
    result: Result<(), PublishError>,
    redactor: &Redactor,
    max_retry_after: Duration,
) -> Outcome {
    let clean = |message: String| redactor.redact(&message).into_owned();
    match result {
        Ok(()) => Outcome::Delivered,
        Err(PublishError::Retryable(message)) => Outcome::retryable(clean(message)),
        Err(PublishError::Permanent(message)) => Outcome::permanent(clean(message)),
        Err(PublishError::RateLimited(limit)) => {
            let asked = Duration::from_millis(limit.retry_after_ms);
            let mut message = clean(limit.message);
            if asked > max_retry_after {
                message = format!(
                    "{message} (retry-after {} cut to limits.max_retry_after {})",
                    humantime::format_duration(asked),
                    humantime::format_duration(max_retry_after)
                );
            }
            Outcome::Retryable {
                message,
                retry_after: Some(asked.min(max_retry_after)),
            }
        }
    }
}
