//! Spans written as OTLP protobuf (`opentelemetry.proto.trace.v1.Span`, the official
//! definitions' field numbers, in prost's order) with prost's encoding functions, straight from the
//! borrowed event fields: no message struct, no string copied per span. A batch's spans are
//! bytes ready to be wrapped into one `ExportTraceServiceRequest` with the host's resource and
//! scope (encoded once, from `opentelemetry-proto`'s messages).
//!
//! Why not the messages of `opentelemetry-proto` per span (or the SDK's `SpanData`, converted
//! to them): 20-odd allocations a span, each freed on another thread, and a second walk to
//! encode; a drain spent 3–5 µs a span on it, on the cores the database shares
//! (docs/PERFORMANCE.md, "Tracing"). The tests check these bytes against the official
//! messages' encoding, byte for byte.

use std::time::{SystemTime, UNIX_EPOCH};

use opentelemetry::trace::SpanContext;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::resource::v1::Resource;
use opentelemetry_proto::tonic::trace::v1::SpanFlags;
use prost::encoding::{WireType, encode_key, encode_varint, encoded_len_varint};

pub use opentelemetry_proto::tonic::trace::v1::span::SpanKind;

/// An attribute's value.
#[derive(Debug, Clone, Copy)]
pub enum Value<'a> {
    /// A string.
    Str(&'a str),
    /// An integer.
    Int(i64),
    /// A boolean.
    Bool(bool),
    /// A floating-point number.
    Double(f64),
}

/// An attribute: key and value.
pub type Attribute<'a> = (&'a str, Value<'a>);

/// A span's final status.
#[derive(Debug, Clone, Copy)]
pub enum Status<'a> {
    /// Not set.
    Unset,
    /// Ok.
    Ok,
    /// Error, with its description.
    Error(&'a str),
}

/// A link from a span to another.
pub struct Link<'a> {
    /// The span linked to.
    pub to: &'a SpanContext,
    /// The link's attributes.
    pub attributes: &'a [Attribute<'a>],
}

/// One finished span, borrowed from what describes it.
pub struct SpanRecord<'a> {
    /// The span's own context (its trace state included).
    pub context: &'a SpanContext,
    /// The parent span (`None`: a root).
    pub parent: Option<&'a SpanContext>,
    /// Its kind.
    pub kind: SpanKind,
    /// Its name, in parts written one after the other (`["send ", sink]`).
    pub name: &'a [&'a str],
    /// Start and end (an end before the start is written as the start).
    pub times: (SystemTime, SystemTime),
    /// Its attributes.
    pub attributes: &'a [Attribute<'a>],
    /// Its links.
    pub links: &'a [Link<'a>],
    /// Its status.
    pub status: Status<'a>,
}

/// Encoded spans, each as a `spans` entry of a `ScopeSpans` message, ready to be concatenated.
#[derive(Debug, Default)]
pub struct EncodedSpans {
    bytes: Vec<u8>,
    /// Where each span's bytes end.
    ends: Vec<usize>,
}

/// `ScopeSpans.spans`.
const SCOPE_SPANS_SPANS: u32 = 2;

impl EncodedSpans {
    /// Room for about `spans` delivery spans.
    pub fn with_capacity(spans: usize) -> EncodedSpans {
        EncodedSpans {
            bytes: Vec::with_capacity(spans * 512),
            ends: Vec::with_capacity(spans),
        }
    }

    /// Appends `span`.
    pub fn push(&mut self, span: &SpanRecord<'_>) {
        nested(&mut self.bytes, SCOPE_SPANS_SPANS, |buf| {
            write_span(buf, span)
        });
        self.ends.push(self.bytes.len());
    }

    /// Appends the spans of `other`.
    pub fn append(&mut self, other: &EncodedSpans) {
        let offset = self.bytes.len();
        self.bytes.extend_from_slice(&other.bytes);
        self.ends.extend(other.ends.iter().map(|end| end + offset));
    }

    /// Spans held.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Keeps the first `spans` spans.
    pub fn truncate(&mut self, spans: usize) {
        if spans < self.ends.len() {
            self.bytes
                .truncate(if spans == 0 { 0 } else { self.ends[spans - 1] });
            self.ends.truncate(spans);
        }
    }

    /// The encoded bytes.
    fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The resource and scope every span of this host is exported under, encoded once.
pub struct Origin {
    /// `ResourceSpans.resource`, encoded with its key.
    resource: Vec<u8>,
    /// `ScopeSpans.scope`, encoded with its key.
    scope: Vec<u8>,
}

impl Origin {
    /// Service `service_name` with `attributes` (`host.name`, `OTEL_RESOURCE_ATTRIBUTES`, …);
    /// scope `outboxd` at this version.
    pub fn new(service_name: &str, attributes: &[(String, String)]) -> Origin {
        let string = |key: &str, value: &str| KeyValue {
            key: key.to_string(),
            value: Some(AnyValue {
                value: Some(any_value::Value::StringValue(value.to_string())),
            }),
            ..KeyValue::default()
        };
        let mut all = vec![string("service.name", service_name)];
        all.extend(attributes.iter().map(|(k, v)| string(k, v)));
        let resource = Resource {
            attributes: all,
            ..Resource::default()
        };
        let scope = InstrumentationScope {
            name: "outboxd".to_string(),
            version: env!("CARGO_PKG_VERSION").to_string(),
            ..InstrumentationScope::default()
        };
        let mut origin = Origin {
            resource: Vec::new(),
            scope: Vec::new(),
        };
        prost::encoding::message::encode(1, &resource, &mut origin.resource);
        prost::encoding::message::encode(1, &scope, &mut origin.scope);
        origin
    }

    /// One `ExportTraceServiceRequest` holding `batches`' spans, encoded.
    pub fn request(&self, batches: &[EncodedSpans]) -> Vec<u8> {
        let spans: usize = batches.iter().map(|b| b.bytes().len()).sum();
        let scope_spans = self.scope.len() + spans;
        let resource_spans = self.resource.len() + field_len(2, scope_spans);
        let mut buf = Vec::with_capacity(field_len(1, resource_spans));
        length_key(&mut buf, 1, resource_spans); // ExportTraceServiceRequest.resource_spans
        buf.extend_from_slice(&self.resource);
        length_key(&mut buf, 2, scope_spans); // ResourceSpans.scope_spans
        buf.extend_from_slice(&self.scope);
        for batch in batches {
            buf.extend_from_slice(batch.bytes());
        }
        buf
    }
}

/// The encoded length of a length-delimited field `tag` of `len` bytes.
fn field_len(tag: u32, len: usize) -> usize {
    prost::encoding::key_len(tag) + encoded_len_varint(len as u64) + len
}

/// The key and length of a length-delimited field `tag` of `len` bytes.
fn length_key(buf: &mut Vec<u8>, tag: u32, len: usize) {
    encode_key(tag, WireType::LengthDelimited, buf);
    encode_varint(len as u64, buf);
}

/// A length-delimited field `tag` whose body `write` appends: written first, then its length
/// moved in front of it.
fn nested(buf: &mut Vec<u8>, tag: u32, write: impl FnOnce(&mut Vec<u8>)) {
    encode_key(tag, WireType::LengthDelimited, buf);
    let start = buf.len();
    write(buf);
    let len = buf.len() - start;
    encode_varint(len as u64, buf);
    buf[start..].rotate_right(encoded_len_varint(len as u64));
}

/// A string or bytes field (omitted when empty, as proto3 does).
fn bytes_field(buf: &mut Vec<u8>, tag: u32, value: &[u8]) {
    if !value.is_empty() {
        length_key(buf, tag, value.len());
        buf.extend_from_slice(value);
    }
}

/// A varint field (omitted when 0).
fn varint_field(buf: &mut Vec<u8>, tag: u32, value: u64) {
    if value != 0 {
        encode_key(tag, WireType::Varint, buf);
        encode_varint(value, buf);
    }
}

/// A fixed64 field (omitted when 0).
fn fixed64_field(buf: &mut Vec<u8>, tag: u32, value: u64) {
    if value != 0 {
        encode_key(tag, WireType::SixtyFourBit, buf);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

/// A fixed32 field (omitted when 0).
fn fixed32_field(buf: &mut Vec<u8>, tag: u32, value: u32) {
    if value != 0 {
        encode_key(tag, WireType::ThirtyTwoBit, buf);
        buf.extend_from_slice(&value.to_le_bytes());
    }
}

/// The fields of a `Span`, in the order prost writes them (by field number).
fn write_span(buf: &mut Vec<u8>, span: &SpanRecord<'_>) {
    let context = span.context;
    bytes_field(buf, 1, &context.trace_id().to_bytes());
    bytes_field(buf, 2, &context.span_id().to_bytes());
    let state = context.trace_state().header();
    bytes_field(buf, 3, state.as_bytes());
    if let Some(parent) = span.parent {
        bytes_field(buf, 4, &parent.span_id().to_bytes());
    }
    let name_len: usize = span.name.iter().map(|part| part.len()).sum();
    if name_len > 0 {
        length_key(buf, 5, name_len);
        for part in span.name {
            buf.extend_from_slice(part.as_bytes());
        }
    }
    varint_field(buf, 6, span.kind as i32 as u64);
    let (start, end) = span.times;
    fixed64_field(buf, 7, nanos(start));
    fixed64_field(buf, 8, nanos(end.max(start)));
    for attribute in span.attributes {
        nested(buf, 9, |buf| write_attribute(buf, attribute));
    }
    for link in span.links {
        nested(buf, 13, |buf| {
            let to = link.to;
            bytes_field(buf, 1, &to.trace_id().to_bytes());
            bytes_field(buf, 2, &to.span_id().to_bytes());
            bytes_field(buf, 3, to.trace_state().header().as_bytes());
            for attribute in link.attributes {
                nested(buf, 4, |buf| write_attribute(buf, attribute));
            }
            fixed32_field(buf, 6, flags(to.trace_flags().to_u8(), to.is_remote()));
        });
    }
    nested(buf, 15, |buf| match span.status {
        Status::Unset => {}
        Status::Ok => varint_field(buf, 3, 1),
        Status::Error(message) => {
            bytes_field(buf, 2, message.as_bytes());
            varint_field(buf, 3, 2);
        }
    });
    fixed32_field(
        buf,
        16,
        flags(
            context.trace_flags().to_u8(),
            span.parent.is_some_and(|p| p.is_remote()),
        ),
    );
}

/// A `KeyValue`'s fields.
fn write_attribute(buf: &mut Vec<u8>, (key, value): &Attribute<'_>) {
    bytes_field(buf, 1, key.as_bytes());
    nested(buf, 2, |buf| match *value {
        // A oneof member is written even when it holds its type's default.
        Value::Str(s) => {
            length_key(buf, 1, s.len());
            buf.extend_from_slice(s.as_bytes());
        }
        Value::Bool(b) => {
            encode_key(2, WireType::Varint, buf);
            encode_varint(u64::from(b), buf);
        }
        Value::Int(i) => {
            encode_key(3, WireType::Varint, buf);
            encode_varint(i as u64, buf);
        }
        Value::Double(d) => {
            encode_key(4, WireType::SixtyFourBit, buf);
            buf.extend_from_slice(&d.to_bits().to_le_bytes());
        }
    });
}

/// A span's or link's flags: the W3C trace flags and whether the context is remote (known).
fn flags(trace_flags: u8, remote: bool) -> u32 {
    let mut flags = u32::from(trace_flags) | SpanFlags::ContextHasIsRemoteMask as u32;
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

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use opentelemetry::trace::{SpanId, TraceFlags, TraceId, TraceState};
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::trace::v1::{ResourceSpans, ScopeSpans, Span, span, status};
    use prost::Message;

    use super::*;

    fn context(trace: u8, span: u8, remote: bool, state: &str) -> SpanContext {
        SpanContext::new(
            TraceId::from_bytes([trace; 16]),
            SpanId::from_bytes([span; 8]),
            TraceFlags::SAMPLED,
            remote,
            state.parse::<TraceState>().unwrap(),
        )
    }

    fn official(key: &str, value: any_value::Value) -> KeyValue {
        KeyValue {
            key: key.to_string(),
            value: Some(AnyValue { value: Some(value) }),
            ..KeyValue::default()
        }
    }

    #[test]
    fn spans_encode_as_the_official_messages_do() {
        let start = UNIX_EPOCH + Duration::from_nanos(1_733_000_000_123_456_789);
        let end = start + Duration::from_micros(1500);
        let own = context(7, 9, false, "vendor=a,other=b");
        let parent = context(7, 3, true, "");
        let first = context(8, 4, false, "");
        let long_error = "e".repeat(300); // a length of two varint bytes
        let attributes = [
            ("messaging.system", Value::Str("outboxd")),
            ("empty", Value::Str("")),
            ("outboxd.attempt", Value::Int(2)),
            ("zero", Value::Int(0)),
            ("negative", Value::Int(-5)),
            ("flag", Value::Bool(false)),
            ("ratio", Value::Double(0.25)),
        ];
        let link_attributes = [("outboxd.link", Value::Str("first_attempt"))];
        let links = [
            Link {
                to: &parent,
                attributes: &[],
            },
            Link {
                to: &first,
                attributes: &link_attributes,
            },
        ];
        let records = [
            SpanRecord {
                context: &own,
                parent: Some(&parent),
                kind: SpanKind::Producer,
                name: &["send ", "webhook"],
                times: (start, end),
                attributes: &attributes,
                links: &links,
                status: Status::Error(&long_error),
            },
            SpanRecord {
                context: &first,
                parent: None,
                kind: SpanKind::Client,
                name: &["read outbox"],
                times: (end, start), // ends before it starts: written as the start
                attributes: &[],
                links: &[],
                status: Status::Unset,
            },
            SpanRecord {
                context: &first,
                parent: None,
                kind: SpanKind::Producer,
                name: &[],
                times: (start, end),
                attributes: &attributes[..1],
                links: &[],
                status: Status::Ok,
            },
        ];
        let mut first_part = EncodedSpans::default();
        first_part.push(&records[0]);
        let mut second_part = EncodedSpans::with_capacity(2);
        for record in &records[1..] {
            second_part.push(record);
        }
        second_part.push(&records[0]);
        second_part.truncate(2);
        assert_eq!(second_part.len(), 2);
        let origin = Origin::new("relay", &[("host.name".into(), "a".into())]);
        let ours = origin.request(&[first_part, second_part]);

        let string = |s: &str| any_value::Value::StringValue(s.to_string());
        let official_link = |to: &SpanContext, attributes: Vec<KeyValue>| span::Link {
            trace_id: to.trace_id().to_bytes().to_vec(),
            span_id: to.span_id().to_bytes().to_vec(),
            trace_state: to.trace_state().header(),
            attributes,
            dropped_attributes_count: 0,
            flags: flags(1, to.is_remote()),
        };
        let all_attributes = vec![
            official("messaging.system", string("outboxd")),
            official("empty", string("")),
            official("outboxd.attempt", any_value::Value::IntValue(2)),
            official("zero", any_value::Value::IntValue(0)),
            official("negative", any_value::Value::IntValue(-5)),
            official("flag", any_value::Value::BoolValue(false)),
            official("ratio", any_value::Value::DoubleValue(0.25)),
        ];
        let nanos = |t: SystemTime| t.duration_since(UNIX_EPOCH).unwrap().as_nanos() as u64;
        let spans = vec![
            Span {
                trace_id: vec![7; 16],
                span_id: vec![9; 8],
                trace_state: "vendor=a,other=b".into(),
                parent_span_id: vec![3; 8],
                flags: 0x301,
                name: "send webhook".into(),
                kind: SpanKind::Producer as i32,
                start_time_unix_nano: nanos(start),
                end_time_unix_nano: nanos(end),
                attributes: all_attributes.clone(),
                links: vec![
                    official_link(&parent, vec![]),
                    official_link(
                        &first,
                        vec![official("outboxd.link", string("first_attempt"))],
                    ),
                ],
                status: Some(opentelemetry_proto::tonic::trace::v1::Status {
                    message: long_error.clone(),
                    code: status::StatusCode::Error as i32,
                }),
                ..Span::default()
            },
            Span {
                trace_id: vec![8; 16],
                span_id: vec![4; 8],
                flags: 0x101,
                name: "read outbox".into(),
                kind: SpanKind::Client as i32,
                start_time_unix_nano: nanos(end),
                end_time_unix_nano: nanos(end),
                status: Some(Default::default()),
                ..Span::default()
            },
            Span {
                trace_id: vec![8; 16],
                span_id: vec![4; 8],
                flags: 0x101,
                kind: SpanKind::Producer as i32,
                start_time_unix_nano: nanos(start),
                end_time_unix_nano: nanos(end),
                attributes: all_attributes[..1].to_vec(),
                status: Some(opentelemetry_proto::tonic::trace::v1::Status {
                    message: String::new(),
                    code: status::StatusCode::Ok as i32,
                }),
                ..Span::default()
            },
        ];
        let expected = ExportTraceServiceRequest {
            resource_spans: vec![ResourceSpans {
                resource: Some(Resource {
                    attributes: vec![
                        official("service.name", string("relay")),
                        official("host.name", string("a")),
                    ],
                    ..Resource::default()
                }),
                scope_spans: vec![ScopeSpans {
                    scope: Some(InstrumentationScope {
                        name: "outboxd".into(),
                        version: env!("CARGO_PKG_VERSION").into(),
                        ..InstrumentationScope::default()
                    }),
                    spans,
                    schema_url: String::new(),
                }],
                schema_url: String::new(),
            }],
        };
        assert_eq!(
            ExportTraceServiceRequest::decode(&ours[..]).unwrap(),
            expected
        );
        assert_eq!(ours, expected.encode_to_vec(), "byte for byte");
    }
}
