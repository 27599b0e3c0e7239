//! A real OTLP/HTTP trace receiver on loopback: takes `POST /v1/traces` in http/protobuf,
//! decodes each request with the official OpenTelemetry protobuf definitions
//! (`opentelemetry-proto`), and keeps every span with its resource's `service.name`.
//!
//! ```ignore
//! let collector = OtlpCollector::start().await;
//! // … [telemetry] endpoint = collector.endpoint() …
//! let spans = collector.spans();
//! ```

use std::sync::{Arc, Mutex};

use http_body_util::Full;
use hyper::Response;
use hyper::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;

use super::{Server, serve};

/// One exported span, decoded, with the `service.name` of its resource.
#[derive(Clone, Debug)]
pub struct ExportedSpan {
    /// `service.name` of the resource the span came with.
    pub service: String,
    /// The span as the protobuf carries it.
    pub span: Span,
}

impl ExportedSpan {
    /// The span's trace id in W3C form (32 hex digits).
    pub fn trace_id(&self) -> String {
        hex::encode(&self.span.trace_id)
    }

    /// The span's id (16 hex digits).
    pub fn span_id(&self) -> String {
        hex::encode(&self.span.span_id)
    }

    /// The parent's span id (empty for a root).
    pub fn parent_id(&self) -> String {
        hex::encode(&self.span.parent_span_id)
    }

    /// The string or integer attribute `key`, as text.
    pub fn attribute(&self, key: &str) -> Option<String> {
        attribute(&self.span.attributes, key)
    }

    /// `(trace id, span id)` of each link.
    pub fn links(&self) -> Vec<(String, String)> {
        self.span
            .links
            .iter()
            .map(|l| (hex::encode(&l.trace_id), hex::encode(&l.span_id)))
            .collect()
    }
}

/// `key`'s value among `attributes`, as text.
fn attribute(attributes: &[KeyValue], key: &str) -> Option<String> {
    let value = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    match value.value.as_ref()? {
        AnyValue::StringValue(s) => Some(s.clone()),
        AnyValue::IntValue(i) => Some(i.to_string()),
        AnyValue::BoolValue(b) => Some(b.to_string()),
        AnyValue::DoubleValue(d) => Some(d.to_string()),
        _ => None,
    }
}

/// The receiver; stops when dropped.
pub struct OtlpCollector {
    server: Server,
    spans: Arc<Mutex<Vec<ExportedSpan>>>,
}

impl OtlpCollector {
    /// Listens on a loopback port.
    pub async fn start() -> OtlpCollector {
        let spans: Arc<Mutex<Vec<ExportedSpan>>> = Arc::default();
        let server = serve({
            let spans = spans.clone();
            move |parts, body: Bytes| {
                let spans = spans.clone();
                async move {
                    let content_type = parts
                        .headers
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("")
                        .to_string();
                    if parts.uri.path() != "/v1/traces" || content_type != "application/x-protobuf"
                    {
                        return status(404);
                    }
                    let Ok(request) = ExportTraceServiceRequest::decode(body) else {
                        return status(400);
                    };
                    let mut kept = spans.lock().unwrap();
                    for resource_spans in request.resource_spans {
                        let service = resource_spans
                            .resource
                            .as_ref()
                            .and_then(|r| attribute(&r.attributes, "service.name"))
                            .unwrap_or_default();
                        for scope in resource_spans.scope_spans {
                            for span in scope.spans {
                                kept.push(ExportedSpan {
                                    service: service.clone(),
                                    span,
                                });
                            }
                        }
                    }
                    let answer = ExportTraceServiceResponse::default().encode_to_vec();
                    Response::builder()
                        .status(200)
                        .header("content-type", "application/x-protobuf")
                        .body(Full::new(Bytes::from(answer)))
                        .expect("valid response")
                }
            }
        })
        .await;
        OtlpCollector { server, spans }
    }

    /// The base URL to configure (`telemetry.endpoint`, or `OTEL_EXPORTER_OTLP_ENDPOINT`).
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.server.addr)
    }

    /// Every span received so far.
    pub fn spans(&self) -> Vec<ExportedSpan> {
        self.spans.lock().unwrap().clone()
    }
}

fn status(code: u16) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .body(Full::new(Bytes::new()))
        .expect("valid response")
}
