//! Spans out: a bounded queue of recorded spans that a thread of its own encodes as OTLP and
//! sends in batches (`collector.rs`), the sampler, and the count of every span recorded,
//! exported, failed or dropped.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanContext, SpanKind, TraceId};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, ShouldSample};

use super::collector::CollectorClient;
use super::otlp::{EncodedSpans, Origin};
use crate::config::TraceExport;
use crate::metrics::{Metrics, TraceMetrics};

/// Spans per export request, at least when that many are queued (about 0.8 MB of protobuf; a
/// request takes whole batches, so up to a batch more).
const EXPORT_BATCH: usize = 2048;

/// Longest wait before queued spans are exported (fewer than [`EXPORT_BATCH`] of them).
const EXPORT_DELAY: Duration = Duration::from_millis(500);

/// How long [`Exporting::shutdown`] waits for the last exports.
const SHUTDOWN_WAIT: Duration = Duration::from_secs(5);

/// Spans recorded and waiting for export, encoded as OTLP by the export thread: a batch's
/// delivery spans are encoded there, off the delivery loop.
pub(super) trait SpanBatch: Send {
    /// Spans held.
    fn len(&self) -> usize;

    /// Keeps the first `spans` spans.
    fn truncate(&mut self, spans: usize);

    /// Appends the spans, encoded, to `out`.
    fn encode_into(&self, out: &mut EncodedSpans);
}

impl SpanBatch for EncodedSpans {
    fn len(&self) -> usize {
        EncodedSpans::len(self)
    }

    fn truncate(&mut self, spans: usize) {
        EncodedSpans::truncate(self, spans);
    }

    fn encode_into(&self, out: &mut EncodedSpans) {
        out.append(self);
    }
}

/// Why tracing could not start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    /// The export thread could not be started.
    #[error("cannot start the trace export thread: {0}")]
    Thread(#[from] std::io::Error),
}

/// Tracing on: where recorded spans go.
pub(super) struct Exporting {
    shared: Arc<Shared>,
    sampler: Sampler,
    queue_size: usize,
    metrics: TraceMetrics,
    /// Signalled by the export thread when it has exported what was queued at shutdown.
    finished: Mutex<std::sync::mpsc::Receiver<()>>,
}

/// What [`Exporting`] and its thread share.
struct Shared {
    queue: Mutex<Queue>,
    /// Signalled when a full batch is queued, or at shutdown.
    ready: Condvar,
    /// Spans recorded and not yet exported or failed: at most `queue_size`.
    queued: AtomicUsize,
}

/// The spans waiting for export, as recorded (a batch's delivery spans together).
#[derive(Default)]
struct Queue {
    parts: VecDeque<Box<dyn SpanBatch>>,
    /// Spans in `parts`.
    spans: usize,
    /// Set at shutdown: the thread exports what is queued and ends; nothing more is queued.
    closing: bool,
}

impl Exporting {
    /// The exporter and its thread, as `traces` says, for the host `node_id`. Exports are sent
    /// on the current Tokio runtime.
    pub(super) fn start(
        traces: &TraceExport,
        node_id: &str,
        metrics: Metrics,
    ) -> Result<Exporting, TelemetryError> {
        let client = Arc::new(CollectorClient::new(traces));
        let mut attributes = vec![
            (
                "service.version".to_string(),
                env!("CARGO_PKG_VERSION").to_string(),
            ),
            ("host.name".to_string(), node_id.to_string()),
        ];
        attributes.extend(traces.resource.iter().cloned());
        let origin = Origin::new(&traces.service_name, &attributes);
        let shared = Arc::new(Shared {
            queue: Mutex::default(),
            ready: Condvar::new(),
            queued: AtomicUsize::new(0),
        });
        let metrics = metrics.traces().clone();
        let (done, finished) = std::sync::mpsc::channel();
        let runtime = tokio::runtime::Handle::current();
        std::thread::Builder::new()
            .name("outboxd-trace-export".into())
            .spawn({
                let (shared, metrics) = (shared.clone(), metrics.clone());
                move || {
                    while let Some(parts) = shared.next_batch() {
                        let spans = parts.iter().map(|part| part.len()).sum::<usize>();
                        let mut encoded = EncodedSpans::with_capacity(spans);
                        for part in &parts {
                            part.encode_into(&mut encoded);
                        }
                        drop(parts);
                        let body = origin.request(std::slice::from_ref(&encoded));
                        drop(encoded);
                        // Sent on the host's runtime; a runtime that has stopped drops the task, and
                        // the batch counts as failed.
                        let (sent, answer) = std::sync::mpsc::sync_channel(1);
                        let client = client.clone();
                        runtime.spawn(async move {
                            let _ = sent.send(client.export(body).await);
                        });
                        let failed = match answer.recv() {
                            Ok(Some(rejected)) => rejected.min(spans),
                            Ok(None) | Err(_) => spans,
                        };
                        shared.queued.fetch_sub(spans, Ordering::AcqRel);
                        metrics.count("exported", (spans - failed) as u64);
                        metrics.count("failed", failed as u64);
                    }
                    let _ = done.send(());
                }
            })?;
        Ok(Exporting {
            shared,
            sampler: Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
                traces.sampling_ratio,
            ))),
            queue_size: traces.queue_size,
            metrics,
            finished: Mutex::new(finished),
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

    /// Queues `spans` for export; drops those that do not fit the queue (counted), and all of
    /// them after shutdown.
    pub(super) fn record(&self, mut spans: Box<dyn SpanBatch>) {
        if spans.len() == 0 {
            return;
        }
        let count = spans.len();
        let before = self.shared.queued.fetch_add(count, Ordering::AcqRel);
        let fit = self.queue_size.saturating_sub(before).min(count);
        if fit < count {
            self.shared.queued.fetch_sub(count - fit, Ordering::AcqRel);
            self.metrics.count("dropped", (count - fit) as u64);
        }
        if fit == 0 {
            return;
        }
        let mut queue = self.shared.lock();
        if queue.closing {
            drop(queue);
            self.shared.queued.fetch_sub(fit, Ordering::AcqRel);
            self.metrics.count("dropped", fit as u64);
            return;
        }
        spans.truncate(fit);
        let was = queue.spans;
        queue.spans += fit;
        queue.parts.push_back(spans);
        if was < EXPORT_BATCH && queue.spans >= EXPORT_BATCH {
            self.shared.ready.notify_one();
        }
        drop(queue);
        self.metrics.count("recorded", fit as u64);
    }

    /// Exports what is queued and stops the export thread (blocking: at most [`SHUTDOWN_WAIT`]
    /// and an export's timeout). Spans recorded afterwards are dropped.
    pub(super) fn shutdown(&self) {
        self.shared.close();
        if let Ok(finished) = self.finished.lock() {
            let _ = finished.recv_timeout(SHUTDOWN_WAIT);
        }
    }
}

impl Drop for Exporting {
    fn drop(&mut self) {
        // The thread exports what is left and ends; nobody waits for it.
        self.shared.close();
    }
}

impl Shared {
    /// The queue (a thread that panicked holding it left it whole: spans are only pushed and
    /// drained).
    fn lock(&self) -> MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Closes the queue and wakes the thread.
    fn close(&self) {
        self.lock().closing = true;
        self.ready.notify_one();
    }

    /// The next spans to export: [`EXPORT_BATCH`] as soon as they are queued, else what is
    /// queued when [`EXPORT_DELAY`] has passed; `None` once the queue is closed and empty.
    fn next_batch(&self) -> Option<Vec<Box<dyn SpanBatch>>> {
        let mut queue = self.lock();
        let mut deadline = Instant::now() + EXPORT_DELAY;
        loop {
            if queue.spans >= EXPORT_BATCH || (queue.closing && queue.spans > 0) {
                break;
            }
            if queue.closing {
                return None;
            }
            let now = Instant::now();
            if now >= deadline {
                if queue.spans > 0 {
                    break;
                }
                deadline = now + EXPORT_DELAY;
            }
            queue = self
                .ready
                .wait_timeout(queue, deadline - now)
                .map_or_else(|e| e.into_inner().0, |(q, _)| q);
        }
        let mut taken = Vec::new();
        let mut spans = 0;
        while spans < EXPORT_BATCH
            && let Some(part) = queue.parts.pop_front()
        {
            spans += part.len();
            taken.push(part);
        }
        queue.spans -= spans;
        Some(taken)
    }
}
