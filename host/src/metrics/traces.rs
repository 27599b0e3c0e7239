//! The metrics of the host's own spans: recorded, exported, failed to export, and dropped when
//! the export queue was full.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Labels of a span count.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SpanLabels {
    /// `recorded` (sampled and queued for export), `exported` (the collector took them),
    /// `failed` (an export that did not reach or was refused by the collector), `dropped` (the
    /// queue was full).
    pub outcome: String,
}

/// The span families of one registry.
#[derive(Clone, Debug)]
pub struct TraceMetrics {
    spans: Family<SpanLabels, Counter>,
}

impl TraceMetrics {
    /// Registers the family in `registry` (`outboxd_trace_spans_total`).
    pub(super) fn register(registry: &mut Registry) -> TraceMetrics {
        let spans = Family::<SpanLabels, Counter>::default();
        registry.register(
            "trace_spans",
            "Spans of the host (tracing on): recorded, exported, failed to export, dropped with the export queue full",
            spans.clone(),
        );
        TraceMetrics { spans }
    }

    /// Counts `count` spans more with `outcome`.
    pub fn count(&self, outcome: &str, count: u64) {
        self.spans
            .get_or_create(&SpanLabels {
                outcome: outcome.to_string(),
            })
            .inc_by(count);
    }

    /// The spans counted with `outcome` so far.
    pub fn counted(&self, outcome: &str) -> u64 {
        self.spans
            .get_or_create(&SpanLabels {
                outcome: outcome.to_string(),
            })
            .get()
    }
}
