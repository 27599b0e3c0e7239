//! Spans out: the SDK's batch span processor draining a bounded queue into the OTLP exporter
//! (http/protobuf, sent by `collector.rs`), the sampler, and the count of every span recorded,
//! exported, failed or dropped.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use opentelemetry::KeyValue;
use opentelemetry::trace::{SpanContext, SpanKind, TraceId};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::error::OTelSdkResult;
use opentelemetry_sdk::trace::{
    BatchConfigBuilder, BatchSpanProcessor, Sampler, SamplingDecision, ShouldSample, SpanData,
    SpanExporter, SpanProcessor,
};

use super::collector::CollectorClient;
use crate::config::TraceExport;
use crate::metrics::{Metrics, TraceMetrics};

/// Spans per export request (about 1 MB of protobuf).
const EXPORT_BATCH: usize = 2048;

/// Longest wait before queued spans are exported (fewer than [`EXPORT_BATCH`] of them).
const EXPORT_DELAY: Duration = Duration::from_millis(500);

/// How long [`Exporting::shutdown`] waits for the last export.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The OTLP exporter refused its configuration (an endpoint from the environment that is
    /// not a URL, …).
    #[error("cannot start the OTLP trace exporter: {0}")]
    Exporter(String),
}

/// Tracing on: where recorded spans go.
pub(super) struct Exporting {
    processor: BatchSpanProcessor,
    sampler: Sampler,
    /// Spans recorded and not yet exported or failed: at most `queue_size`.
    queued: Arc<AtomicUsize>,
    queue_size: usize,
    metrics: TraceMetrics,
}

impl Exporting {
    /// The exporter and its processor, as `traces` says, for the host `node_id`.
    pub(super) fn start(
        traces: &TraceExport,
        node_id: &str,
        metrics: Metrics,
    ) -> Result<Exporting, TelemetryError> {
        let client = CollectorClient::new(tokio::runtime::Handle::current(), traces.timeout);
        let mut builder = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(client)
            .with_protocol(Protocol::HttpBinary)
            .with_headers(traces.headers.clone().into_iter().collect());
        if let Some(endpoint) = &traces.endpoint {
            builder = builder.with_endpoint(endpoint.clone());
        }
        if let Some(timeout) = traces.timeout {
            builder = builder.with_timeout(timeout);
        }
        let exporter = builder
            .build()
            .map_err(|e| TelemetryError::Exporter(e.to_string()))?;
        let queued = Arc::new(AtomicUsize::new(0));
        let metrics = metrics.traces().clone();
        let counting = CountingExporter {
            inner: exporter,
            queued: queued.clone(),
            metrics: metrics.clone(),
        };
        let config = BatchConfigBuilder::default()
            // The processor's own queue never fills: `record` drops first, and counts it.
            .with_max_queue_size(traces.queue_size + EXPORT_BATCH)
            .with_max_export_batch_size(EXPORT_BATCH)
            .with_scheduled_delay(EXPORT_DELAY)
            .build();
        let mut processor = BatchSpanProcessor::builder(counting)
            .with_batch_config(config)
            .build();
        let mut attributes = vec![
            KeyValue::new("service.version", env!("CARGO_PKG_VERSION")),
            KeyValue::new("host.name", node_id.to_string()),
        ];
        attributes.extend(
            traces
                .resource
                .iter()
                .map(|(k, v)| KeyValue::new(k.clone(), v.clone())),
        );
        let resource = Resource::builder_empty()
            .with_service_name(traces.service_name.clone())
            .with_attributes(attributes)
            .build();
        processor.set_resource(&resource);
        Ok(Exporting {
            processor,
            sampler: Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                traces.sampling_ratio,
            ))),
            queued,
            queue_size: traces.queue_size,
            metrics,
        })
    }

    /// Whether a span of trace `trace_id` under `parent` (a producer's span; `None`: a root) is
    /// sampled: the parent's sampled flag, else the ratio on the trace id.
    pub(super) fn sampled(&self, parent: Option<&SpanContext>, trace_id: TraceId) -> bool {
        // A remote parent decides (what `ParentBased` does with one), without building a Context.
        if let Some(parent) = parent {
            return parent.is_sampled();
        }
        let result = self
            .sampler
            .should_sample(None, trace_id, "", &SpanKind::Producer, &[], &[]);
        result.decision == SamplingDecision::RecordAndSample
    }

    /// Queues `span` for export; drops it (counted) when the queue is full.
    pub(super) fn record(&self, span: SpanData) {
        if self.queued.fetch_add(1, Ordering::AcqRel) >= self.queue_size {
            self.queued.fetch_sub(1, Ordering::AcqRel);
            self.metrics.count("dropped", 1);
            return;
        }
        self.metrics.count("recorded", 1);
        self.processor.on_end(span);
    }

    /// Exports what is queued and stops the export thread (blocking: at most [`SHUTDOWN_WAIT`]
    /// and an export's timeout).
    pub(super) fn shutdown(&self) {
        let _ = self.processor.shutdown_with_timeout(SHUTDOWN_WAIT);
    }
}

/// The OTLP exporter, counting what each export did with its spans.
#[derive(Debug)]
struct CountingExporter<E> {
    inner: E,
    queued: Arc<AtomicUsize>,
    metrics: TraceMetrics,
}

impl<E: SpanExporter> SpanExporter for CountingExporter<E> {
    async fn export(&self, batch: Vec<SpanData>) -> OTelSdkResult {
        let spans = batch.len();
        let result = self.inner.export(batch).await;
        self.queued.fetch_sub(spans, Ordering::AcqRel);
        let outcome = if result.is_ok() { "exported" } else { "failed" };
        self.metrics.count(outcome, spans as u64);
        result
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> OTelSdkResult {
        self.inner.shutdown_with_timeout(timeout)
    }

    fn force_flush(&self) -> OTelSdkResult {
        self.inner.force_flush()
    }

    fn set_resource(&mut self, resource: &Resource) {
        self.inner.set_resource(resource);
    }
}
