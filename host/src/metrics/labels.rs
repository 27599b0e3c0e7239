//! The label sets and label values of the metric families (`outboxd_rows{app_code, outcome}`,
//! `outboxd_breaker_state{sink}`, …).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};

/// Labels of a per-tenant series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AppLabels {
    /// Tenant.
    pub app_code: String,
}

/// Labels of the row-count gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    /// Tenant.
    pub app_code: String,
    /// Row status (`pending`, `delivering`, `retryable`, `failed`, `delivered`).
    pub status: &'static str,
}

/// What the worker did with a row (the `outcome` label of `outboxd_rows`).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)] // label values are written as Prometheus spells them
pub enum RowOutcome {
    /// Handed out by a claim.
    claimed,
    /// Marked `delivered`.
    delivered,
    /// Marked `retryable` (an attempt spent).
    retried,
    /// Put back `retryable` by an open circuit breaker (no attempt spent).
    deferred,
    /// Marked `failed`.
    failed,
    /// Moved to `failed` by the claim itself (corrupt envelope, lease expired too often).
    rejected,
    /// Left untouched because another worker had taken the lease over.
    stale,
}

impl RowOutcome {
    /// Every outcome, claim's and mark's.
    pub const ALL: [RowOutcome; 7] = [
        RowOutcome::claimed,
        RowOutcome::rejected,
        RowOutcome::delivered,
        RowOutcome::retried,
        RowOutcome::deferred,
        RowOutcome::failed,
        RowOutcome::stale,
    ];

    /// What a mark can do to a row (the rest happen at the claim).
    pub const MARKED: [RowOutcome; 5] = [
        RowOutcome::delivered,
        RowOutcome::retried,
        RowOutcome::deferred,
        RowOutcome::failed,
        RowOutcome::stale,
    ];
}

/// Labels of the commit feed gauge.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FeedLabels {
    /// What wakes idle loops: `binlog`, `listen`, `data_version`, or `probe`.
    pub feed: String,
}

/// Labels of the row counters.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RowLabels {
    /// Tenant.
    pub app_code: String,
    /// What happened to the rows.
    pub outcome: RowOutcome,
}

/// Labels of a per-sink series.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkLabels {
    /// Sink name.
    pub sink: String,
}

/// How a plugin call failed (the `kind` label of `outboxd_plugin_failures`).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum PluginFailure {
    /// The guest trapped (panic, unreachable, bad result count, …).
    trap,
    /// The call ran past the sink's `limits.publish_timeout`.
    deadline,
    /// The instance hit `limits.memory`.
    memory_limit,
}

/// Labels of the plugin-failure counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginFailureLabels {
    /// Sink name.
    pub sink: String,
    /// Failure kind.
    pub kind: PluginFailure,
}

/// Labels of the database-error counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DatabaseOpLabels {
    /// Store operation (`claim`, `mark`, `counts`, …).
    pub op: String,
}

/// State of a sink's circuit breaker, as the `outboxd_breaker_state` gauge reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BreakerGauge {
    /// Publishing normally (0).
    Closed = 0,
    /// Cooling down: events are put back without an attempt (1).
    Open = 1,
    /// One probe batch is being published (2).
    HalfOpen = 2,
}

/// What a sink answered for an event (the `outcome` label of `outboxd_sink_events`).
#[derive(Debug, Clone, Copy, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum SinkOutcome {
    /// Accepted.
    delivered,
    /// Failed, to be retried.
    retryable,
    /// Refused for good.
    permanent,
    /// Not tried: the breaker is open or the sink is paused.
    deferred,
}

/// Labels of the per-sink event counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SinkOutcomeLabels {
    /// Sink name.
    pub sink: String,
    /// What it answered.
    pub outcome: SinkOutcome,
}

/// Labels of the console's action counter.
#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    /// `requeue`, `purge`, `pause`, `resume`, `reload`.
    pub action: String,
    /// `done`, `refused` (no or a wrong token, a bad form) or `failed`.
    pub result: String,
}
