//! Spans as OTLP protobuf messages (the official definitions, `opentelemetry-proto`): built once
//! when a span is recorded, and wrapped into one export request per batch.
//!
//! The SDK's path (a `SpanData` per span, converted to these same messages when exported) cost
//! about 3 µs a span on the cores the database shares; building the message directly halves
//! what tracing costs a drain (docs/PERFORMANCE.md, "Tracing").

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::{SpanContext, SpanId};
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::{
    AnyValue, InstrumentationScope, KeyValue, any_value,
};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::{
    ResourceSpans, ScopeSpans, Span, SpanFlags, Status, span, status,
};
use prost::Message;

pub use span::SpanKind;

/// A string attribute.
pub fn string(key: &str, value: impl Into<String>) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(value.into())),
        }),
        ..KeyValue::default()
    }
}

/// An integer attribute.
pub fn int(key: &str, value: i64) -> KeyValue {
    KeyValue {
        key: key.to_string(),
        value: Some(AnyValue {
            value: Some(any_value::Value::IntValue(value)),
        }),
        ..KeyValue::default()
    }
}

/// An attribute given with the OpenTelemetry API's types (arrays as their text).
pub fn from_api(attribute: opentelemetry::KeyValue) -> KeyValue {
    let value = match attribute.value {
        opentelemetry::Value::Bool(b) => any_value::Value::BoolValue(b),
        opentelemetry::Value::I64(i) => any_value::Value::IntValue(i),
        opentelemetry::Value::F64(f) => any_value::Value::DoubleValue(f),
        opentelemetry::Value::String(s) => any_value::Value::StringValue(s.to_string()),
        other => any_value::Value::StringValue(other.to_string()),
    };
    KeyValue {
        key: attribute.key.to_string(),
        value: Some(AnyValue { value: Some(value) }),
        ..KeyValue::default()
    }
}

/// Status `ok`.
pub fn ok() -> Status {
    Status {
        code: status::StatusCode::Ok as i32,
        message: String::new(),
    }
}

/// Status `error` with `message`.
pub fn error(message: impl Into<String>) -> Status {
    Status {
        code: status::StatusCode::Error as i32,
        message: message.into(),
    }
}

/// Status unset.
pub fn unset() -> Status {
    Status::default()
}

/// A link to the span `to`, with `attributes`.
pub fn link(to: &SpanContext, attributes: Vec<KeyValue>) -> span::Link {
    span::Link {
        trace_id: to.trace_id().to_bytes().to_vec(),
        span_id: to.span_id().to_bytes().to_vec(),
        trace_state: to.trace_state().header(),
        attributes,
        dropped_attributes_count: 0,
        flags: flags(u32::from(to.trace_flags().to_u8()), to.is_remote()),
    }
}

/// What a span is: its context, its parent (a remote one: the producer's span), kind and name.
pub struct Identity<'a> {
    /// The span's own context (its trace state included).
    pub context: &'a SpanContext,
    /// The parent span (`None`: a root).
    pub parent: Option<&'a SpanContext>,
    /// Its kind.
    pub kind: SpanKind,
    /// Its name.
    pub name: String,
}

/// The span `identity` from `start` to `end` (not before `start`).
pub fn span(
    identity: Identity<'_>,
    (start, end): (SystemTime, SystemTime),
    attributes: Vec<KeyValue>,
    links: Vec<span::Link>,
    status: Status,
) -> Span {
    let Identity {
        context,
        parent,
        kind,
        name,
    } = identity;
    Span {
        trace_id: context.trace_id().to_bytes().to_vec(),
        span_id: context.span_id().to_bytes().to_vec(),
        trace_state: context.trace_state().header(),
        parent_span_id: parent
            .map(|p| p.span_id())
            .filter(|id| *id != SpanId::INVALID)
            .map_or_else(Vec::new, |id| id.to_bytes().to_vec()),
        flags: flags(
            u32::from(context.trace_flags().to_u8()),
            parent.is_some_and(|p| p.is_remote()),
        ),
        name,
        kind: kind as i32,
        start_time_unix_nano: nanos(start),
        end_time_unix_nano: nanos(end.max(start)),
        attributes,
        dropped_attributes_count: 0,
        events: Vec::new(),
        dropped_events_count: 0,
        links,
        dropped_links_count: 0,
        status: Some(status),
    }
}

/// The resource and scope every span of this host is exported under.
pub struct Origin {
    resource: Resource,
    scope: InstrumentationScope,
}

impl Origin {
    /// Service `service_name` with `attributes` (`host.name`, `OTEL_RESOURCE_ATTRIBUTES`, …);
    /// scope `outboxd` at this version.
    pub fn new(service_name: &str, attributes: &[(String, String)]) -> Origin {
        let mut all = vec![string("service.name", service_name)];
        all.extend(attributes.iter().map(|(k, v)| string(k, v.clone())));
        Origin {
            resource: Resource {
                attributes: all,
                dropped_attributes_count: 0,
                entity_refs: Vec::new(),
            },
            scope: InstrumentationScope {
                name: "outboxd".to_string(),
                version: env!("CARGO_PKG_VERSION").to_string(),
                attributes: Vec::new(),
                dropped_attributes_count: 0,
            },
        }
    }

    /// One export request holding `spans`, encoded.
    pub fn request(&self, spans: Vec<Span>) -> Vec<u8> {
        ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(self.resource.clone()),
                scope_spans: vec![ScopeSpans {
                    scope: Some(self.scope.clone()),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        }
        .encode_to_vec()
    }
}

/// A span's or link's flags: the W3C trace flags and whether the context is remote (known).
fn flags(trace_flags: u32, remote: bool) -> u32 {
    let mut flags = trace_flags | SpanFlags::ContextHasIsRemoteMask as u32;
    if remote {
        flags |= SpanFlags::ContextIsRemoteMask as u32;
    }
    flags
}

/// `time` in nanoseconds since the Unix epoch (0 before it).
fn nanos(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}
