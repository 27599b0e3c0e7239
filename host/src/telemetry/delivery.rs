//! A batch's delivery spans ([`DeliverySpans`]): started when the batch starts publishing, each
//! event's span recorded once its outcome is marked, and encoded as OTLP on the export thread
//! (off the delivery loop: the batch's events are shared with it, not copied).
//!
//! The first attempt is a child of the producer's span (or a root when the producer traced
//! nothing); a retry is a root of its own with links to the producer's span and to the first
//! attempt. Every attempt hands its sink the first attempt's context.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};

use super::export::{Exporting, SpanBatch};
use super::ids;
use super::otlp::{EncodedSpans, Link, SpanKind, SpanRecord, Status, Value};
use crate::publish::Event;
use crate::trace_context::TraceContext;

/// What became of one attempt, as its span records it (`outboxd.outcome`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeliveryOutcome<'a> {
    /// Marked `delivered`.
    Delivered,
    /// Marked `retryable`, with the error.
    Retryable(&'a str),
    /// Marked `failed`, with the error.
    Failed(&'a str),
    /// Not marked: the partition had been taken over meanwhile (the new owner delivers again).
    Stale,
}

/// One event's attempt, as started.
struct Attempt {
    /// The producer's span, when the event carries a valid context.
    producer: Option<SpanContext>,
    /// The first attempt's span (the context every attempt's sink forwards), with the
    /// producer's trace state every span of the event keeps.
    first: SpanContext,
    /// The sink its type routes to.
    sink: Option<Arc<str>>,
    /// Whether its span is sampled.
    sampled: bool,
}

/// One attempt's end, as recorded: its span is encoded on the export thread.
struct Recorded {
    /// The event's position in the batch.
    position: usize,
    /// When its sink answered.
    answered: SystemTime,
    outcome: Ended,
}

/// [`DeliveryOutcome`], owned (an error's text copied only for an attempt that failed).
enum Ended {
    Delivered,
    Retryable(Box<str>),
    Failed(Box<str>),
    Stale,
}

/// The delivery spans of one batch (nothing when tracing is off); those recorded are queued for
/// export when it is dropped.
pub struct DeliverySpans {
    tracing: Option<Arc<Exporting>>,
    batch: DeliveryBatch,
    recorded: Mutex<Vec<Recorded>>,
}

/// A batch's attempts and the ends recorded: what the export thread encodes.
struct DeliveryBatch {
    started: SystemTime,
    attempts: Vec<Attempt>,
    events: Arc<Vec<Event>>,
    recorded: Vec<Recorded>,
    /// The bytes of `events` (their bodies and ids), kept alive until the spans are encoded.
    retained: usize,
}

impl DeliverySpans {
    /// No spans (tracing off), and `events` to share.
    pub(super) fn none(events: Vec<Event>) -> (Arc<Vec<Event>>, DeliverySpans) {
        let events = Arc::new(events);
        let spans = DeliverySpans {
            tracing: None,
            batch: DeliveryBatch {
                started: SystemTime::now(),
                attempts: Vec::new(),
                events: events.clone(),
                recorded: Vec::new(),
                retained: 0,
            },
            recorded: Mutex::default(),
        };
        (events, spans)
    }

    /// The spans of `events`, starting now; each event's `trace` becomes its first attempt's
    /// context (what its sink forwards). Returns the events, shared with the spans.
    pub(super) fn start(
        tracing: Arc<Exporting>,
        mut events: Vec<Event>,
        sink_of: impl Fn(&str) -> Option<String>,
    ) -> (Arc<Vec<Event>>, DeliverySpans) {
        let started = SystemTime::now();
        // Each event type's sink, looked up once per batch.
        let mut sinks: HashMap<String, Option<Arc<str>>> = HashMap::new();
        let attempts = events
            .iter_mut()
            .map(|event| {
                let sink = match sinks.get(event.event_type.as_str()) {
                    Some(sink) => sink.clone(),
                    None => {
                        let sink: Option<Arc<str>> = sink_of(&event.event_type).map(Arc::from);
                        sinks.insert(event.event_type.clone(), sink.clone());
                        sink
                    }
                };
                let producer = event.trace.as_ref().and_then(producer_span);
                let state = match event.trace.as_ref().map(|t| t.tracestate()) {
                    Some(state) if !state.is_empty() => state.parse().unwrap_or_default(),
                    _ => TraceState::NONE,
                };
                let (root_trace, first_span) =
                    ids::attempt_ids(&event.app_code, &event.event_id, 1);
                let first_trace = producer.as_ref().map_or(root_trace, |p| p.trace_id());
                let first_sampled = tracing.sampled(producer.as_ref(), first_trace);
                let first = SpanContext::new(
                    first_trace,
                    first_span,
                    if first_sampled {
                        TraceFlags::SAMPLED
                    } else {
                        TraceFlags::default()
                    },
                    false,
                    state,
                );
                let sampled = if event.attempt <= 1 {
                    first_sampled
                } else {
                    let (retry_trace, _) =
                        ids::attempt_ids(&event.app_code, &event.event_id, event.attempt);
                    tracing.sampled(None, retry_trace)
                };
                event.trace = Some(forwarded(&first, event.trace.as_ref()));
                Attempt {
                    producer,
                    first,
                    sink,
                    sampled,
                }
            })
            .collect::<Vec<_>>();
        let events = Arc::new(events);
        let spans = DeliverySpans {
            tracing: Some(tracing),
            recorded: Mutex::new(Vec::with_capacity(attempts.len())),
            batch: DeliveryBatch {
                started,
                attempts,
                events: events.clone(),
                recorded: Vec::new(),
                retained: 0,
            },
        };
        (events, spans)
    }

    /// Records the span of the event at `position` of the batch: it ended at `answered` with
    /// `outcome`. An event not tried (deferred) has no span: call nothing.
    pub fn record(&self, position: usize, answered: SystemTime, outcome: DeliveryOutcome<'_>) {
        let sampled = self
            .batch
            .attempts
            .get(position)
            .is_some_and(|attempt| attempt.sampled);
        if self.tracing.is_none() || !sampled {
            return;
        }
        let outcome = match outcome {
            DeliveryOutcome::Delivered => Ended::Delivered,
            DeliveryOutcome::Retryable(error) => Ended::Retryable(error.into()),
            DeliveryOutcome::Failed(error) => Ended::Failed(error.into()),
            DeliveryOutcome::Stale => Ended::Stale,
        };
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(Recorded {
                position,
                answered,
                outcome,
            });
    }
}

impl DeliveryBatch {
    /// Writes the span of one recorded attempt.
    fn encode(&self, recorded: &Recorded, out: &mut EncodedSpans) {
        let Recorded {
            position,
            answered,
            outcome,
        } = recorded;
        let (Some(attempt), Some(event)) =
            (self.attempts.get(*position), self.events.get(*position))
        else {
            return;
        };
        let outcome = match outcome {
            Ended::Delivered => DeliveryOutcome::Delivered,
            Ended::Retryable(error) => DeliveryOutcome::Retryable(error),
            Ended::Failed(error) => DeliveryOutcome::Failed(error),
            Ended::Stale => DeliveryOutcome::Stale,
        };
        let answered = *answered;
        let number = event.attempt.max(1);
        let stale = outcome == DeliveryOutcome::Stale;
        let own;
        let (context, parent) = match (number, stale) {
            (1, false) => (&attempt.first, attempt.producer.as_ref()),
            // An attempt no row kept: random ids, so the attempt that counts keeps the derived ones.
            (1, true) => {
                own = self.context(attempt.first.trace_id(), ids::random_span_id(), attempt);
                (&own, attempt.producer.as_ref())
            }
            (_, true) => {
                own = self.context(ids::random_trace_id(), ids::random_span_id(), attempt);
                (&own, None)
            }
            (n, false) => {
                let (trace, span) = ids::attempt_ids(&event.app_code, &event.event_id, n);
                own = self.context(trace, span, attempt);
                (&own, None)
            }
        };
        // A retry links to the producer's span and to the first attempt.
        let mut links = Vec::new();
        if number > 1 {
            if let Some(producer) = &attempt.producer {
                links.push(Link {
                    to: producer,
                    attributes: &[("outboxd.link", Value::Str("producer"))],
                });
            }
            links.push(Link {
                to: &attempt.first,
                attributes: &[("outboxd.link", Value::Str("first_attempt"))],
            });
        }
        let (outcome_name, status) = match outcome {
            DeliveryOutcome::Delivered => ("delivered", Status::Ok),
            DeliveryOutcome::Retryable(error) => ("retryable", Status::Error(error)),
            DeliveryOutcome::Failed(error) => ("failed", Status::Error(error)),
            DeliveryOutcome::Stale => (
                "stale",
                Status::Error(
                    "the partition was taken over before the mark; its new owner delivers it",
                ),
            ),
        };
        let sink = attempt.sink.as_deref().unwrap_or("(no route)");
        let attributes = [
            ("messaging.system", Value::Str("outboxd")),
            ("messaging.operation.type", Value::Str("send")),
            ("messaging.destination.name", Value::Str(sink)),
            ("messaging.message.id", Value::Str(&event.event_id)),
            ("outboxd.app_code", Value::Str(&event.app_code)),
            ("outboxd.room_id", Value::Str(&event.room_id)),
            ("outboxd.attempt", Value::Int(i64::from(number))),
            ("outboxd.outcome", Value::Str(outcome_name)),
        ];
        let span = SpanRecord {
            context,
            parent,
            kind: SpanKind::Producer,
            name: &["send ", sink],
            times: (self.started, answered),
            attributes: &attributes,
            links: &links,
            status,
        };
        out.push(&span);
    }

    /// A sampled span context of this event's trace state.
    fn context(&self, trace: TraceId, span: SpanId, attempt: &Attempt) -> SpanContext {
        SpanContext::new(
            trace,
            span,
            TraceFlags::SAMPLED,
            false,
            attempt.first.trace_state().clone(),
        )
    }
}

impl SpanBatch for DeliveryBatch {
    fn len(&self) -> usize {
        self.recorded.len()
    }

    fn truncate(&mut self, spans: usize) {
        self.recorded.truncate(spans);
    }

    fn encode_into(&self, out: &mut EncodedSpans) {
        for recorded in &self.recorded {
            self.encode(recorded, out);
        }
    }

    fn retained_bytes(&self) -> usize {
        self.retained
    }
}

impl Drop for DeliverySpans {
    fn drop(&mut self) {
        let Some(tracing) = &self.tracing else {
            return;
        };
        let recorded = std::mem::take(self.recorded.get_mut().unwrap_or_else(|e| e.into_inner()));
        if recorded.is_empty() {
            return;
        }
        let retained = self
            .batch
            .events
            .iter()
            .map(|e| {
                std::mem::size_of::<Event>()
                    + e.body.len()
                    + e.event_id.len()
                    + e.app_code.len()
                    + e.room_id.len()
                    + e.event_type.len()
            })
            .sum();
        tracing.record(Box::new(DeliveryBatch {
            started: self.batch.started,
            attempts: std::mem::take(&mut self.batch.attempts),
            events: self.batch.events.clone(),
            recorded,
            retained,
        }));
    }
}

/// The producer's span of a checked trace context (its flags follow the two ids in every
/// version).
fn producer_span(context: &TraceContext) -> Option<SpanContext> {
    let flags = u8::from_str_radix(context.traceparent().get(53..55)?, 16).ok()?;
    Some(SpanContext::new(
        TraceId::from_hex(context.trace_id()).ok()?,
        SpanId::from_hex(context.parent_id()).ok()?,
        TraceFlags::new(flags),
        true,
        TraceState::NONE,
    ))
}

/// The context a sink forwards: the first attempt's span, with the producer's trace state.
fn forwarded(first: &SpanContext, producer: Option<&TraceContext>) -> TraceContext {
    TraceContext::of_span(
        first.trace_id().to_bytes(),
        first.span_id().to_bytes(),
        first.trace_flags().to_u8(),
        producer.map_or("", |p| p.tracestate()),
    )
}
