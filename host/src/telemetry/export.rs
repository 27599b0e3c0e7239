//! Spans out: a bounded queue of recorded spans that a thread of its own encodes as OTLP and
//! sends in batches (`collector.rs`), the sampler, and the count of every span recorded,
//! exported, failed or dropped.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use opentelemetry::trace::{SpanContext, SpanKind, TraceId};
use opentelemetry_sdk::trace::{Sampler, SamplingDecision, ShouldSample};
use tracing::error;

use super::collector::CollectorClient;
use super::otlp::{EncodedSpans, Origin};
use crate::config::TraceExport;
use crate::metrics::{Metrics, TraceMetrics};

/// Spans per export request, at least when that many are queued (about 0.8 MB of protobuf; a
/// request takes whole batches, so up to a batch more).
const EXPORT_BATCH: usize = 2048;

/// Longest wait before queued spans are exported (fewer than [`EXPORT_BATCH`] of them).
const EXPORT_DELAY: Duration = Duration::from_millis(500);

/// Most bytes of events that recorded spans may keep alive until the export thread encodes them
/// (a batch's spans share its events): beyond it, as when the collector is slow or away, a
/// batch's spans are encoded when recorded, and its events freed at once.
const MAX_RETAINED_BYTES: usize = 16 << 20;

/// How much the export thread lowers its priority (its nice value above the host's, at most 19):
/// below the delivery loops' share of a busy machine.
const EXPORT_NICE: libc::c_int = 10;

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

    /// Bytes kept alive until the spans are encoded (the events they are encoded from).
    fn retained_bytes(&self) -> usize {
        0
    }
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
    /// Bytes the queued spans keep alive until encoded: at most [`MAX_RETAINED_BYTES`].
    retained: AtomicUsize,
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
    /// The exporter and its thread, as `traces` says, for the host `node_id`. The thread sends
    /// the exports on a runtime of its own.
    pub(super) fn start(
        traces: &TraceExport,
        node_id: &str,
        metrics: Metrics,
    ) -> Result<Exporting, TelemetryError> {
        let client = CollectorClient::new(traces);
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
            retained: AtomicUsize::new(0),
        });
        let metrics = metrics.traces().clone();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::Builder::new()
            .name("outboxd-trace-export".into())
            .spawn({
                let (shared, metrics) = (shared.clone(), metrics.clone());
                move || {
                    yield_to_delivery();
                    // The thread's own runtime sends the exports: the HTTP client never runs
                    // on (or queues behind) the delivery loops' runtime.
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .inspect_err(|e| {
                            error!(error = %e, "cannot start the trace export's runtime: every span fails");
                        })
                        .ok();
                    while let Some(parts) = shared.next_batch() {
                        let spans = parts.iter().map(|part| part.len()).sum::<usize>();
                        let retained = parts.iter().map(|part| part.retained_bytes()).sum();
                        let mut encoded = EncodedSpans::with_capacity(spans);
                        for part in &parts {
                            part.encode_into(&mut encoded);
                        }
                        drop(parts);
                        shared.retained.fetch_sub(retained, Ordering::AcqRel);
                        let body = origin.request(std::slice::from_ref(&encoded));
                        drop(encoded);
                        let answer = runtime.as_ref().and_then(|r| r.block_on(client.export(body)));
                        let failed = answer.map_or(spans, |rejected| rejected.min(spans));
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
        let mut retained = spans.retained_bytes();
        if retained > 0
            && self.shared.retained.load(Ordering::Acquire) + retained > MAX_RETAINED_BYTES
        {
            // The export thread is behind: encode now rather than keep the events alive.
            let mut encoded = EncodedSpans::with_capacity(fit);
            spans.encode_into(&mut encoded);
            spans = Box::new(encoded);
            retained = 0;
        }
        // Counted as queued: what the part holds now (an encoding may write fewer spans).
        let count = spans.len().min(fit);
        if count < fit {
            self.shared.queued.fetch_sub(fit - count, Ordering::AcqRel);
        }
        if count == 0 {
            return;
        }
        self.shared.retained.fetch_add(retained, Ordering::AcqRel);
        let was = queue.spans;
        queue.spans += count;
        queue.parts.push_back(spans);
        if was < EXPORT_BATCH && queue.spans >= EXPORT_BATCH {
            self.shared.ready.notify_one();
        }
        drop(queue);
        self.metrics.count("recorded", count as u64);
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

/// Lowers the calling thread's CPU priority by [`EXPORT_NICE`] (on Linux nice is per thread), so
/// that encoding and sending spans yield the cores to the delivery loops and the database while
/// they are busy; the export catches up when they are not (spans wait in the queue).
fn yield_to_delivery() {
    #[cfg(target_os = "linux")]
    // SAFETY: nice takes and returns a plain integer and touches no memory of ours.
    unsafe {
        let _ = libc::nice(EXPORT_NICE);
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
        queue.spans = if queue.parts.is_empty() {
            0
        } else {
            queue.spans.saturating_sub(spans)
        };
        Some(taken)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::{EncodedSpans, Exporting, MAX_RETAINED_BYTES, SpanBatch};
    use crate::config::TraceExport;
    use crate::metrics::Metrics;

    /// Spans that keep `retained` bytes alive until encoded, counting their encodings.
    struct Heavy {
        spans: usize,
        retained: usize,
        encoded: Arc<AtomicUsize>,
    }

    impl SpanBatch for Heavy {
        fn len(&self) -> usize {
            self.spans
        }

        fn truncate(&mut self, spans: usize) {
            self.spans = self.spans.min(spans);
        }

        fn encode_into(&self, _out: &mut EncodedSpans) {
            self.encoded.fetch_add(1, Ordering::SeqCst);
        }

        fn retained_bytes(&self) -> usize {
            self.retained
        }
    }

    /// An export to a collector that is away (nothing listens on port 9), with a queue of
    /// `queue_size` spans.
    fn away_collector(queue_size: usize) -> TraceExport {
        TraceExport {
            endpoint: "http://127.0.0.1:9/v1/traces".into(),
            service_name: "test".into(),
            resource: Vec::new(),
            sampling_ratio: 1.0,
            headers: Default::default(),
            timeout: Duration::from_millis(200),
            queue_size,
        }
    }

    /// A collector that is away keeps the export thread waiting: the spans queued meanwhile keep
    /// at most `MAX_RETAINED_BYTES` of events alive; the batches past it are encoded when
    /// recorded.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn queued_spans_keep_a_bounded_amount_of_events_alive() {
        let traces = away_collector(65_536);
        let exporting = Exporting::start(&traces, "node", Metrics::new()).unwrap();
        let encoded = Arc::new(AtomicUsize::new(0));
        let batch = 1 << 20;
        for _ in 0..40 {
            exporting.record(Box::new(Heavy {
                spans: 10,
                retained: batch,
                encoded: encoded.clone(),
            }));
        }
        let retained = exporting.shared.retained.load(Ordering::SeqCst);
        assert!(
            retained <= MAX_RETAINED_BYTES,
            "{retained} bytes kept alive"
        );
        // 400 spans wait for the export delay (fewer than a batch): 16 batches were kept whole,
        // the 24 past the bound encoded at once (into no span: this fake writes none, and an
        // empty part is not queued).
        assert_eq!(retained, 16 * batch);
        assert_eq!(encoded.load(Ordering::SeqCst), 24);
        assert_eq!(exporting.shared.queued.load(Ordering::SeqCst), 160);
        let started = std::time::Instant::now();
        exporting.shutdown();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(exporting.shared.retained.load(Ordering::SeqCst), 0);
        assert_eq!(exporting.shared.queued.load(Ordering::SeqCst), 0);
    }

    /// The export thread runs below the delivery loops' priority (Linux: its own nice value in
    /// `/proc`, [`super::EXPORT_NICE`] above the one of the thread that started it).
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_export_thread_yields_the_cores_to_delivery() {
        let traces = away_collector(16);
        // The nice value of each thread of this process named `comm`.
        let nice_of = |comm: &str| -> Vec<i64> {
            let mut found = Vec::new();
            for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                let name = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
                if name.trim_end() != comm {
                    continue;
                }
                found.push(nice_in(
                    &std::fs::read_to_string(task.path().join("stat")).unwrap(),
                ));
            }
            found
        };
        let this = nice_in(&std::fs::read_to_string("/proc/thread-self/stat").unwrap());
        let lowered = (this + i64::from(super::EXPORT_NICE)).min(19);
        assert!(lowered > this, "this thread's nice: {this}");
        let exporting = Exporting::start(&traces, "node", Metrics::new()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        // The thread lowers its priority as it starts: wait for it to be there and lowered.
        let mut niced = nice_of("outboxd-trace-e");
        while niced != [lowered] && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
            niced = nice_of("outboxd-trace-e");
        }
        assert_eq!(
            niced,
            [lowered],
            "the export thread's nice; this thread's: {this}"
        );
        exporting.shutdown();
    }

    /// The nice value in a thread's `/proc/…/stat`: its 19th field (the 17th after the
    /// parenthesised name).
    #[cfg(target_os = "linux")]
    fn nice_in(stat: &str) -> i64 {
        stat[stat.rfind(')').unwrap() + 2..]
            .split(' ')
            .nth(16)
            .unwrap()
            .parse()
            .unwrap()
    }
}
