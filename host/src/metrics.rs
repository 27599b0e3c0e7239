//! The Prometheus metrics of a running host: one [`Metrics`] registry, cheap to clone, handed to
//! the worker, the sinks and the status refresher, and encoded by the admin listener.
//!
//! Exposition is `prometheus-client`'s OpenMetrics text format (Prometheus scrapes it as is).
//! Every metric is listed, with its meaning, in `docs/operate/watch.md`.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use crate::record::now_ms;
use crate::store::{StatusCounts, StoreError};

mod broker;
mod labels;
mod partitions;
mod recent;
mod traces;

pub use broker::BrokerMetrics;
pub use labels::{
    ActionLabels, AppLabels, BreakerGauge, DatabaseOpLabels, FeedLabels, PluginFailure,
    PluginFailureLabels, RowLabels, RowOutcome, SinkLabels, SinkOutcome, SinkOutcomeLabels,
    StatusLabels,
};
pub use partitions::{PartitionChangeLabels, PartitionLabels, PartitionMetrics, PartitionView};
pub use recent::{
    LogHistogram, Quantiles, RatePoint, Recent, SLOT_MS, SLOTS, SinkAnswers, SinkWindow,
};
pub use traces::{SpanLabels, TraceMetrics};

/// `Content-Type` of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The registry and every metric family. Clones share the same series.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    rows_by_status: Family<StatusLabels, Gauge>,
    oldest_pending_age: Family<AppLabels, Gauge<f64, AtomicU64>>,
    rows: Family<RowLabels, Counter>,
    publish_duration: Family<SinkLabels, Histogram>,
    delivery_latency: Family<AppLabels, Histogram>,
    plugin_failures: Family<PluginFailureLabels, Counter>,
    instance_rebuilds: Family<SinkLabels, Counter>,
    database_errors: Family<DatabaseOpLabels, Counter>,
    breaker_state: Family<SinkLabels, Gauge>,
    breaker_opened: Family<SinkLabels, Counter>,
    purged: Family<StatusLabels, Counter>,
    clock_offset: Gauge<f64, AtomicU64>,
    clock_refusing: Gauge,
    commit_feed: Family<FeedLabels, Gauge>,
    sink_events: Family<SinkOutcomeLabels, Counter>,
    console_actions: Family<ActionLabels, Counter>,
    recent: Arc<Recent>,
    brokers: BrokerMetrics,
    partitions: PartitionMetrics,
    traces: TraceMetrics,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

/// Publish-duration buckets: 1 ms … ~33 s.
fn publish_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Commit → delivered buckets: 5 ms … ~3 h.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 22))
}

impl Metrics {
    /// A fresh registry with every family registered under the `outboxd_` prefix.
    pub fn new() -> Metrics {
        let mut registry = Registry::with_prefix("outboxd");
        let rows_by_status = Family::<StatusLabels, Gauge>::default();
        registry.register(
            "table_rows",
            "Rows in the outbox table by app code and status (refreshed every admin.refresh_interval)",
            rows_by_status.clone(),
        );
        let oldest_pending_age = Family::<AppLabels, Gauge<f64, AtomicU64>>::default();
        registry.register(
            "oldest_pending_age_seconds",
            "Age of the oldest pending row by app code, 0 when none (refreshed every admin.refresh_interval)",
            oldest_pending_age.clone(),
        );
        let rows = Family::<RowLabels, Counter>::default();
        registry.register(
            "rows",
            "Rows handled by this process, by app code and outcome (claimed, delivered, retried, deferred, failed, rejected, stale)",
            rows.clone(),
        );
        let publish_duration =
            Family::<SinkLabels, Histogram>::new_with_constructor(publish_histogram as fn() -> _);
        registry.register(
            "publish_duration_seconds",
            "Duration of one publish of a batch (or sub-batch) to a sink",
            publish_duration.clone(),
        );
        let delivery_latency =
            Family::<AppLabels, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        registry.register(
            "delivery_latency_seconds",
            "Time from a row's created_at_ms (the producer's commit) to its delivered mark",
            delivery_latency.clone(),
        );
        let plugin_failures = Family::<PluginFailureLabels, Counter>::default();
        registry.register(
            "plugin_failures",
            "Failed plugin calls by sink and kind (trap, deadline, memory_limit)",
            plugin_failures.clone(),
        );
        let instance_rebuilds = Family::<SinkLabels, Counter>::default();
        registry.register(
            "plugin_instance_rebuilds",
            "Plugin instances discarded after a failed call (a fresh one is built for the next batch)",
            instance_rebuilds.clone(),
        );
        let database_errors = Family::<DatabaseOpLabels, Counter>::default();
        registry.register(
            "database_errors",
            "Failed database operations by store operation",
            database_errors.clone(),
        );
        let breaker_state = Family::<SinkLabels, Gauge>::default();
        registry.register(
            "breaker_state",
            "Circuit breaker state per sink: 0 closed, 1 open, 2 half-open",
            breaker_state.clone(),
        );
        let breaker_opened = Family::<SinkLabels, Counter>::default();
        registry.register(
            "breaker_opened",
            "Times a sink's circuit breaker opened",
            breaker_opened.clone(),
        );
        let purged = Family::<StatusLabels, Counter>::default();
        registry.register(
            "purged_rows",
            "Finished rows deleted by retention, by app code and status (delivered, failed)",
            purged.clone(),
        );
        let clock_offset = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "clock_offset_seconds",
            "The database's clock minus this host's, as last measured (0 where the database has no clock of its own: SQLite)",
            clock_offset.clone(),
        );
        let clock_refusing = Gauge::default();
        registry.register(
            "clock_claims_refused",
            "1 while this host refuses to claim because its clock is off the database's by more than a tenth of worker.lease",
            clock_refusing.clone(),
        );
        let commit_feed = Family::<FeedLabels, Gauge>::default();
        registry.register(
            "commit_feed_connected",
            "Whether the commit feed that wakes idle loops is connected (1) or they probe (0), by feed: binlog (MySQL / MariaDB), listen (PostgreSQL), data_version (SQLite), probe (none)",
            commit_feed.clone(),
        );
        let sink_events = Family::<SinkOutcomeLabels, Counter>::default();
        registry.register(
            "sink_events",
            "Events answered by each sink, by outcome (delivered, retryable, permanent, deferred: not tried while its breaker is open or it is paused)",
            sink_events.clone(),
        );
        let console_actions = Family::<ActionLabels, Counter>::default();
        registry.register(
            "console_actions",
            "Actions asked of the console (requeue, purge, pause, resume, reload) by result (done, refused, failed)",
            console_actions.clone(),
        );
        let brokers = BrokerMetrics::register(&mut registry);
        let partitions = PartitionMetrics::register(&mut registry);
        let traces = TraceMetrics::register(&mut registry);
        Metrics {
            registry: Arc::new(registry),
            rows_by_status,
            oldest_pending_age,
            rows,
            publish_duration,
            delivery_latency,
            plugin_failures,
            instance_rebuilds,
            database_errors,
            breaker_state,
            breaker_opened,
            purged,
            clock_offset,
            clock_refusing,
            commit_feed,
            sink_events,
            console_actions,
            recent: Arc::new(Recent::default()),
            brokers,
            partitions,
            traces,
        }
    }

    /// The partition ownership series.
    pub fn partitions(&self) -> &PartitionMetrics {
        &self.partitions
    }

    /// The host's span counts (tracing on).
    pub fn traces(&self) -> &TraceMetrics {
        &self.traces
    }

    /// The `[[broker]]` connections' series.
    pub fn brokers(&self) -> &BrokerMetrics {
        &self.brokers
    }

    /// The last hour of this process's work, slot by slot (the console's charts and windows).
    pub fn recent(&self) -> &Recent {
        &self.recent
    }

    /// Counts one console action of `action` with `result` (`done`, `refused`, `failed`).
    pub fn count_console_action(&self, action: &str, result: &str) {
        self.console_actions
            .get_or_create(&ActionLabels {
                action: action.to_string(),
                result: result.to_string(),
            })
            .inc();
    }

    /// Console actions of `action` with `result` counted so far.
    pub fn console_actions(&self, action: &str, result: &str) -> u64 {
        self.console_actions
            .get(&ActionLabels {
                action: action.to_string(),
                result: result.to_string(),
            })
            .map_or(0, |counter| counter.get())
    }

    /// Records the last clock measurement: the database's clock minus the host's, and whether
    /// claims are refused for it.
    pub fn set_clock(&self, offset_ms: i64, refusing: bool) {
        self.clock_offset.set(offset_ms as f64 / 1000.0);
        self.clock_refusing.set(i64::from(refusing));
    }

    /// Records what wakes idle loops (`feed`: the first word of [`crate::wake::Wake::kind`]) and
    /// whether its feed is connected.
    pub fn set_commit_feed(&self, feed: &str, connected: bool) {
        self.commit_feed
            .get_or_create(&FeedLabels {
                feed: feed.to_string(),
            })
            .set(i64::from(connected));
    }

    /// Counts `count` rows of `app_code` with `status` deleted by retention.
    pub fn count_purged(&self, app_code: &str, status: &'static str, count: u64) {
        if count > 0 {
            self.purged
                .get_or_create(&StatusLabels {
                    app_code: app_code.to_string(),
                    status,
                })
                .inc_by(count);
        }
    }

    /// Every series in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &self.registry)
            .expect("writing to a String cannot fail");
        text
    }

    /// Adds `count` rows of `app_code` with `outcome`.
    pub fn count_rows(&self, app_code: &str, outcome: RowOutcome, count: u64) {
        match outcome {
            RowOutcome::delivered => self.recent.count_rows(now_ms(), count, 0),
            RowOutcome::failed | RowOutcome::rejected => self.recent.count_rows(now_ms(), 0, count),
            _ => {}
        }
        if count > 0 {
            self.rows
                .get_or_create(&RowLabels {
                    app_code: app_code.to_string(),
                    outcome,
                })
                .inc_by(count);
        }
    }

    /// Rows of `app_code` with `outcome` counted so far.
    pub fn rows_counted(&self, app_code: &str, outcome: RowOutcome) -> u64 {
        self.rows
            .get(&RowLabels {
                app_code: app_code.to_string(),
                outcome,
            })
            .map_or(0, |counter| counter.get())
    }

    /// Records the commit → delivered latency of one row.
    pub fn observe_delivery_latency(&self, app_code: &str, latency_ms: i64) {
        self.observe_delivery_latencies(app_code, &[latency_ms]);
    }

    /// Records the commit → delivered latencies of rows of `app_code` marked together.
    pub fn observe_delivery_latencies(&self, app_code: &str, latencies_ms: &[i64]) {
        if latencies_ms.is_empty() {
            return;
        }
        let histogram = self.delivery_latency.get_or_create(&AppLabels {
            app_code: app_code.to_string(),
        });
        for latency_ms in latencies_ms {
            histogram.observe((*latency_ms).max(0) as f64 / 1000.0);
        }
        self.recent.observe_latencies(now_ms(), latencies_ms);
    }

    /// Records one publish to `sink` that took `elapsed`.
    pub fn observe_publish(&self, sink: &str, elapsed: Duration) {
        self.observe_sink_publish(sink, elapsed, SinkAnswers::default());
    }

    /// Records one publish to `sink` that took `elapsed` and what it answered.
    pub fn observe_sink_publish(&self, sink: &str, elapsed: Duration, answers: SinkAnswers) {
        self.publish_duration
            .get_or_create(&SinkLabels {
                sink: sink.to_string(),
            })
            .observe(elapsed.as_secs_f64());
        for (outcome, count) in [
            (SinkOutcome::delivered, answers.delivered),
            (SinkOutcome::retryable, answers.retryable),
            (SinkOutcome::permanent, answers.permanent),
            (SinkOutcome::deferred, answers.deferred),
        ] {
            if count > 0 {
                self.sink_events
                    .get_or_create(&SinkOutcomeLabels {
                        sink: sink.to_string(),
                        outcome,
                    })
                    .inc_by(count);
            }
        }
        self.recent
            .observe_publish(now_ms(), sink, elapsed.as_secs_f64() * 1000.0, answers);
    }

    /// Counts a failed plugin call of `sink` and the rebuild of its instance.
    pub fn count_plugin_failure(&self, sink: &str, kind: PluginFailure) {
        self.plugin_failures
            .get_or_create(&PluginFailureLabels {
                sink: sink.to_string(),
                kind,
            })
            .inc();
        self.instance_rebuilds
            .get_or_create(&SinkLabels {
                sink: sink.to_string(),
            })
            .inc();
    }

    /// Counts a failed store operation (errors other than database errors are not counted).
    pub fn count_database_error(&self, error: &StoreError) {
        if let StoreError::Database { op, .. } = error {
            self.database_errors
                .get_or_create(&DatabaseOpLabels {
                    op: (*op).to_string(),
                })
                .inc();
        }
    }

    /// Database errors of `op` counted so far.
    pub fn database_errors(&self, op: &str) -> u64 {
        self.database_errors
            .get(&DatabaseOpLabels { op: op.to_string() })
            .map_or(0, |counter| counter.get())
    }

    /// Sets the breaker state gauge of `sink`; `opened` also counts an opening.
    pub fn set_breaker_state(&self, sink: &str, state: BreakerGauge) {
        let labels = SinkLabels {
            sink: sink.to_string(),
        };
        let previous = self.breaker_state.get_or_create(&labels).set(state as i64);
        if state == BreakerGauge::Open && previous != BreakerGauge::Open as i64 {
            self.breaker_opened.get_or_create(&labels).inc();
        }
    }

    /// The breaker state gauge of `sink` (0 closed, 1 open, 2 half-open), if it was ever set.
    pub fn breaker_state(&self, sink: &str) -> Option<i64> {
        self.breaker_state
            .get(&SinkLabels {
                sink: sink.to_string(),
            })
            .map(|gauge| gauge.get())
    }

    /// Publishes a status refresh of `app_code`.
    pub fn set_status_counts(&self, app_code: &str, counts: &StatusCounts) {
        for (status, value) in [
            ("pending", counts.pending),
            ("delivering", counts.delivering),
            ("retryable", counts.retryable),
            ("failed", counts.failed),
            ("delivered", counts.delivered),
        ] {
            self.rows_by_status
                .get_or_create(&StatusLabels {
                    app_code: app_code.to_string(),
                    status,
                })
                .set(i64::try_from(value).unwrap_or(i64::MAX));
        }
        self.oldest_pending_age
            .get_or_create(&AppLabels {
                app_code: app_code.to_string(),
            })
            .set(counts.oldest_pending_age_ms.unwrap_or(0).max(0) as f64 / 1000.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exposition_names_every_family_with_labels() {
        let metrics = Metrics::new();
        metrics.count_rows("live", RowOutcome::delivered, 3);
        metrics.observe_publish("webhook", Duration::from_millis(20));
        metrics.observe_delivery_latency("live", 1500);
        metrics.count_plugin_failure("webhook", PluginFailure::deadline);
        metrics.set_breaker_state("webhook", BreakerGauge::Open);
        metrics.set_status_counts(
            "live",
            &StatusCounts {
                pending: 7,
                oldest_pending_age_ms: Some(2500),
                ..StatusCounts::default()
            },
        );
        let text = metrics.encode();
        for line in [
            r#"outboxd_rows_total{app_code="live",outcome="delivered"} 3"#,
            r#"outboxd_publish_duration_seconds_count{sink="webhook"} 1"#,
            r#"outboxd_delivery_latency_seconds_sum{app_code="live"} 1.5"#,
            r#"outboxd_plugin_failures_total{sink="webhook",kind="deadline"} 1"#,
            r#"outboxd_plugin_instance_rebuilds_total{sink="webhook"} 1"#,
            r#"outboxd_breaker_state{sink="webhook"} 1"#,
            r#"outboxd_breaker_opened_total{sink="webhook"} 1"#,
            r#"outboxd_table_rows{app_code="live",status="pending"} 7"#,
            r#"outboxd_oldest_pending_age_seconds{app_code="live"} 2.5"#,
        ] {
            assert!(text.contains(line), "missing {line} in\n{text}");
        }
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn breaker_openings_count_transitions_only() {
        let metrics = Metrics::new();
        metrics.set_breaker_state("s", BreakerGauge::Open);
        metrics.set_breaker_state("s", BreakerGauge::Open);
        metrics.set_breaker_state("s", BreakerGauge::HalfOpen);
        metrics.set_breaker_state("s", BreakerGauge::Open);
        assert!(
            metrics
                .encode()
                .contains(r#"outboxd_breaker_opened_total{sink="s"} 2"#)
        );
    }
}
