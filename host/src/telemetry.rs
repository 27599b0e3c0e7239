//! The host's own spans, exported over OTLP (`[telemetry]`, or the `OTEL_*` environment):
//! a delivery span per event and attempt, and a read span and a mark span per batch.
//!
//! Following the OpenTelemetry messaging conventions (awa, River and graphile-worker do the
//! same for jobs): an event's first attempt is a child of the producer's span (the context it
//! wrote with the event), and each retry starts a new trace with links to the producer's span
//! and to the first attempt. The sink gets the first attempt's context for every attempt (as a
//! broker redelivers a message with its headers unchanged), so the consumer's spans join the
//! producer's trace under outboxd's span.
//!
//! A delivery span is recorded once its outcome is known, with ids derived from the event and
//! its attempt (`ids.rs`): a retry can name the first attempt's span without storing anything,
//! and the context handed to the sink is known before the publish. So spans are not made by a
//! `Tracer` (which draws ids itself): each is built, finished, as the OTLP protobuf message it is
//! exported as (`otlp.rs`, on the official definitions of `opentelemetry-proto`).
//!
//! Export never holds up delivery: spans wait in a bounded queue (`telemetry.queue_size`) that
//! a thread of its own drains, 2,048 spans a request; when it is full (the collector down or
//! slow), spans are dropped and counted (`outboxd_trace_spans_total`), and an unreachable
//! collector is logged once when it goes away and once when it comes back.
//!
//! # Layout
//! - `otlp.rs`: spans, attributes, links and export requests as OTLP messages.
//! - `collector.rs`: the HTTP client export requests are sent with (hyper, rustls).
//! - `export.rs`: the bounded queue and its export thread, the sampler, the span counts.
//! - `ids.rs`: span and trace ids derived from an event and its attempt.
//! - `delivery.rs`: a batch's delivery spans: the context each event's sink gets, and the span
//!   recorded with its outcome.

use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, TraceFlags, TraceState};

use crate::config::TraceExport;
use crate::metrics::Metrics;
use otlp::{Attribute, EncodedSpans, SpanKind, SpanRecord, Status, Value};

mod collector;
mod delivery;
mod export;
mod ids;
mod otlp;

pub use delivery::{DeliveryOutcome, DeliverySpans};
pub use export::TelemetryError;

/// The host's tracing: off (nothing recorded, nothing changed) or exporting. Cheap to clone.
#[derive(Clone, Default)]
pub struct Telemetry {
    tracing: Option<Arc<export::Exporting>>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry")
            .field("on", &self.tracing.is_some())
            .finish()
    }
}

impl Telemetry {
    /// Tracing off.
    pub fn off() -> Telemetry {
        Telemetry::default()
    }

    /// Tracing as `traces` says (`None`: off), for the host `node_id` (the resource's
    /// `host.name`), counting spans into `metrics`. Must run inside a Tokio runtime (exports
    /// are sent on it). Nothing is contacted yet: a collector that is down costs dropped spans,
    /// never a failed start.
    pub fn start(
        traces: Option<&TraceExport>,
        node_id: &str,
        metrics: &Metrics,
    ) -> Result<Telemetry, TelemetryError> {
        let Some(traces) = traces else {
            return Ok(Telemetry::off());
        };
        let exporting = export::Exporting::start(traces, node_id, metrics.clone())?;
        Ok(Telemetry {
            tracing: Some(Arc::new(exporting)),
        })
    }

    /// Exports what is queued (waiting at most 5 s) and stops the export thread. Spans recorded
    /// afterwards are dropped.
    pub async fn shutdown(&self) {
        if let Some(tracing) = &self.tracing {
            let tracing = tracing.clone();
            // Waits synchronously for the export thread, whose requests run on this runtime.
            let _ = tokio::task::spawn_blocking(move || tracing.shutdown()).await;
        }
    }

    /// The delivery spans of a batch about to be published: each event's `trace` becomes the
    /// context its sink forwards (the first attempt's span); `sink_of` names the sink an event
    /// type goes to (`messaging.destination.name`). Nothing when tracing is off. Returns the
    /// events, shared with the spans (their spans are encoded on the export thread).
    pub fn deliveries(
        &self,
        events: Vec<crate::publish::Event>,
        sink_of: impl Fn(&str) -> Option<String>,
    ) -> (std::sync::Arc<Vec<crate::publish::Event>>, DeliverySpans) {
        match &self.tracing {
            Some(tracing) => DeliverySpans::start(tracing.clone(), events, sink_of),
            None => DeliverySpans::none(events),
        }
    }

    /// A span over one batch operation (`read`, `mark`) of `table`, started now; record it with
    /// [`BatchSpan::end`].
    pub fn batch_span(&self, operation: &'static str, table: &str) -> BatchSpan {
        BatchSpan {
            // Off: nothing kept, nothing allocated.
            tracing: self.tracing.clone().map(|t| (t, table.to_string())),
            operation,
            started: SystemTime::now(),
        }
    }
}

/// The trace outboxd's delivery spans start for an event whose producer traced nothing (its first
/// attempt's trace, in hex): every host derives the same from the event, so the console can name
/// it without asking the collector. It holds spans only when tracing is on and the trace was
/// sampled.
pub fn delivery_trace_id(app_code: &str, event_id: &str) -> String {
    ids::attempt_ids(app_code, event_id, 1).0.to_string()
}

/// A read or mark of a batch being timed; recorded by [`BatchSpan::end`] (dropped unrecorded
/// otherwise).
pub struct BatchSpan {
    /// The exporter and the table, when tracing is on.
    tracing: Option<(Arc<export::Exporting>, String)>,
    operation: &'static str,
    started: SystemTime,
}

impl BatchSpan {
    /// Records the span: `rows` rows, `attributes` more, an error when the operation failed.
    pub fn end(
        self,
        rows: usize,
        attributes: Vec<KeyValue>,
        error: Option<&dyn std::fmt::Display>,
    ) {
        let Some((tracing, table)) = self.tracing else {
            return;
        };
        let trace_id = ids::random_trace_id();
        if !tracing.sampled(None, trace_id) {
            return;
        }
        // The callers' attributes, borrowed as the encoder takes them.
        let texts: Vec<String> = attributes
            .iter()
            .filter(|a| matches!(a.value, opentelemetry::Value::Array(_)))
            .map(|a| a.value.to_string())
            .collect();
        let mut texts = texts.iter();
        let mut all: Vec<Attribute<'_>> = vec![
            ("messaging.system", Value::Str("outboxd")),
            (
                "messaging.operation.type",
                Value::Str(if self.operation == "read" {
                    "receive"
                } else {
                    "settle"
                }),
            ),
            ("messaging.operation.name", Value::Str(self.operation)),
            ("messaging.destination.name", Value::Str(&table)),
            ("messaging.batch.message_count", Value::Int(rows as i64)),
        ];
        all.extend(attributes.iter().map(|a| {
            let value = match &a.value {
                opentelemetry::Value::Bool(b) => Value::Bool(*b),
                opentelemetry::Value::I64(i) => Value::Int(*i),
                opentelemetry::Value::F64(f) => Value::Double(*f),
                opentelemetry::Value::String(s) => Value::Str(s.as_str()),
                _ => Value::Str(texts.next().map_or("", String::as_str)),
            };
            (a.key.as_str(), value)
        }));
        let error = error.map(|e| e.to_string());
        let context = SpanContext::new(
            trace_id,
            ids::random_span_id(),
            TraceFlags::SAMPLED,
            false,
            TraceState::NONE,
        );
        let name = [self.operation, " ", table.as_str()];
        let mut span = EncodedSpans::with_capacity(1);
        span.push(&SpanRecord {
            context: &context,
            parent: None,
            kind: SpanKind::Client,
            name: &name,
            times: (self.started, SystemTime::now()),
            attributes: &all,
            links: &[],
            status: error.as_deref().map_or(Status::Unset, Status::Error),
        });
        tracing.record(Box::new(span));
    }
}
