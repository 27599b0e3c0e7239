//! What each console page shows, gathered once and rendered twice: as HTML (`pages/`) and as the
//! JSON of `/api/…` (`api.rs`). Table figures come from the status refresher's last counts (the
//! shared table, every host's rows); rates, latencies and sink figures from this host's
//! [`crate::metrics::Recent`] ring.

use std::time::Instant;

use prost::Message;
use serde::Serialize;

use super::Console;
use super::form::{DeadForm, EventsForm};
use crate::envelope::EventEnvelope;
use crate::glob::glob_match;
use crate::metrics::{PartitionView, Quantiles, RatePoint, SinkWindow};
use crate::plugin::redacted_config;
use crate::record::{Status, now_ms};
use crate::store::{ErrorGroup, ErrorGroupsParams, EventPage, EventSummary, StatusCounts};
use crate::trace_context::TraceContext;

/// The window of the overview's "now" figures: 5 minutes.
pub const RECENT_WINDOW_MS: i64 = 5 * 60 * 1000;
/// The hour of the chart.
pub const HOUR_MS: i64 = 60 * 60 * 1000;
/// `failed` rows the dead-letter groups are made of (the newest ones).
pub const GROUP_WINDOW: u32 = 10_000;

/// One tenant's rows in the shared table.
#[derive(Debug, Clone, Serialize)]
pub struct TableRow {
    /// Tenant.
    pub app_code: String,
    /// Rows by status and the oldest pending age.
    pub counts: StatusCounts,
}

/// One sink as this host sees it.
#[derive(Debug, Clone, Serialize)]
pub struct SinkState {
    /// Sink name.
    pub name: String,
    /// `closed`, `open`, `half-open`.
    pub breaker: &'static str,
    /// Who paused it and when, if paused.
    pub paused_by: Option<String>,
    /// Paused since, UTC ms.
    pub paused_since_ms: Option<i64>,
    /// The last 5 minutes.
    pub recent: SinkWindow,
}

/// The overview.
#[derive(Debug, Clone, Serialize)]
pub struct Overview {
    /// This host's `worker.node_id`.
    pub node_id: String,
    /// `sqlite`, `mysql`, `postgres`.
    pub database: &'static str,
    /// Shared table: rows per tenant (every host's), as of `refreshed_at_ms`.
    pub table: Vec<TableRow>,
    /// When the table counts were read, UTC ms (`None`: not yet).
    pub refreshed_at_ms: Option<i64>,
    /// This host: delivered and failed per second, per 10 s over the last hour.
    pub rates: Vec<RatePoint>,
    /// This host: commit → delivered latency over the last 5 minutes.
    pub latency_recent: Quantiles,
    /// This host: the same over the last hour.
    pub latency_hour: Quantiles,
    /// This host: rows delivered and failed over the last hour.
    pub hour_totals: (u64, u64),
    /// This host's sinks.
    pub sinks: Vec<SinkState>,
    /// This host's partitions per tenant.
    pub partitions: Vec<PartitionView>,
}

/// The events page.
#[derive(Debug, Clone, Serialize)]
pub struct EventsView {
    /// The tenant searched.
    pub app_code: String,
    /// The rows.
    pub page: EventPage,
    /// How long the search took, ms.
    pub elapsed_ms: f64,
}

/// The envelope decoded field by field.
#[derive(Debug, Clone, Serialize)]
pub struct EnvelopeView {
    /// `app_code` field.
    pub app_code: String,
    /// `event_id` field.
    pub event_id: String,
    /// `room_id` field.
    pub room_id: String,
    /// `event_type` field.
    pub event_type: String,
    /// `room_version` field.
    pub room_version: i64,
    /// `occurred_at_ms` field.
    pub occurred_at_ms: i64,
    /// Body bytes.
    pub body_bytes: usize,
    /// The body as indented JSON, when it is JSON.
    pub body_json: Option<String>,
    /// The body as text, when it is UTF-8.
    pub body_utf8: Option<String>,
    /// The body as hex (first 4 KiB).
    pub body_hex: String,
    /// The producer's trace context, as written: `traceparent` (empty: none).
    pub traceparent: String,
    /// The producer's `tracestate` (empty: none).
    pub tracestate: String,
    /// The trace id of a valid `traceparent`.
    pub trace_id: Option<String>,
    /// Why `traceparent` is not valid (the event is delivered without it).
    pub trace_error: Option<String>,
}

/// The event page.
#[derive(Debug, Clone, Serialize)]
pub struct EventView {
    /// The row's columns.
    pub row: EventSummary,
    /// Envelope bytes.
    pub envelope_bytes: usize,
    /// The decoded envelope, or why it does not decode.
    pub envelope: Result<EnvelopeView, String>,
    /// The route that takes its type now: `(glob, sink)`; `None`: no route (it would fail).
    pub route: Option<(String, String)>,
    /// The trace outboxd's delivery spans start for it when its producer traced nothing and the
    /// loaded config exports spans (`[telemetry]`): derived from the event, the same on every host.
    pub delivery_trace_id: Option<String>,
    /// Its trace in the tracing UI (`[telemetry] trace_url` with the producer's trace id, else
    /// [`EventView::delivery_trace_id`]), when both exist.
    pub trace_link: Option<String>,
}

/// The dead-letter page.
#[derive(Debug, Clone, Serialize)]
pub struct DeadView {
    /// The tenant.
    pub app_code: String,
    /// `failed` rows in the shared table at the last refresh.
    pub failed_total: Option<u64>,
    /// The newest failed rows grouped by error.
    pub groups: Vec<ErrorGroup>,
    /// Rows the groups are made of.
    pub grouped_rows: u64,
    /// The failed rows matching the form, newest first.
    pub page: EventPage,
}

/// One sink as loaded.
#[derive(Debug, Clone, Serialize)]
pub struct SinkView {
    /// Name.
    pub name: String,
    /// The plugin file.
    pub plugin: String,
    /// Its sha256 when the set started.
    pub sha256: Option<String>,
    /// Its config, secrets as `***`.
    pub config: Vec<(String, String)>,
    /// Its limits.
    pub limits: Vec<(&'static str, String)>,
    /// Breaker: failures in a row that open it.
    pub breaker_failures: u32,
    /// Breaker: cool-down.
    pub breaker_cool_down: String,
    /// Now.
    pub state: SinkState,
}

/// The sinks page.
#[derive(Debug, Clone, Serialize)]
pub struct SinksView {
    /// When this set started serving, UTC ms.
    pub loaded_at_ms: Option<i64>,
    /// Sinks.
    pub sinks: Vec<SinkView>,
    /// Routes in order: `(event type glob, sink)`.
    pub routes: Vec<(String, String)>,
    /// Whether Reload is available (the host re-reads its config file).
    pub reload: bool,
}

fn breaker_name(state: Option<i64>) -> &'static str {
    match state {
        Some(1) => "open",
        Some(2) => "half-open",
        _ => "closed",
    }
}

fn bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}KiB", n >> 10),
        n => format!("{n}B"),
    }
}

fn duration(d: std::time::Duration) -> String {
    humantime::format_duration(d).to_string()
}

impl Console {
    fn sink_state(&self, name: &str, now: i64) -> SinkState {
        let paused = self.controls.paused(name);
        SinkState {
            name: name.to_string(),
            breaker: breaker_name(self.metrics.breaker_state(name)),
            paused_since_ms: paused.as_ref().map(|p| p.since_ms),
            paused_by: paused.map(|p| p.by),
            recent: self.metrics.recent().sink(now, name, RECENT_WINDOW_MS),
        }
    }

    fn sink_names(&self) -> Vec<String> {
        self.loaded
            .get()
            .map(|set| {
                set.config
                    .publishing
                    .sinks()
                    .iter()
                    .map(|s| s.name().to_string())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The overview.
    pub fn overview(&self) -> Overview {
        let now = now_ms();
        let (counts, refreshed_at_ms) = self.snapshot.latest();
        let recent = self.metrics.recent();
        Overview {
            node_id: self.node_id.clone(),
            database: self.store.backend().name(),
            table: self
                .app_codes
                .iter()
                .map(|app| TableRow {
                    app_code: app.clone(),
                    counts: counts.get(app).cloned().unwrap_or_default(),
                })
                .collect(),
            refreshed_at_ms,
            rates: recent.rates(now),
            latency_recent: recent.latency(now, RECENT_WINDOW_MS),
            latency_hour: recent.latency(now, HOUR_MS),
            hour_totals: recent.totals(now, HOUR_MS),
            sinks: self
                .sink_names()
                .iter()
                .map(|name| self.sink_state(name, now))
                .collect(),
            partitions: self.metrics.partitions().view(),
        }
    }

    /// The events page's search.
    pub async fn events(&self, form: &EventsForm) -> Result<EventsView, String> {
        let query = form.query(self.default_app())?;
        let started = Instant::now();
        let page = self
            .store
            .search_events(&query)
            .await
            .map_err(|e| e.to_string())?;
        Ok(EventsView {
            app_code: query.app_code,
            page,
            elapsed_ms: started.elapsed().as_secs_f64() * 1000.0,
        })
    }

    /// One event.
    pub async fn event(&self, app_code: &str, event_id: &str) -> Result<Option<EventView>, String> {
        let Some(detail) = self
            .store
            .event(app_code, event_id)
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(None);
        };
        let envelope = EventEnvelope::decode(detail.envelope.as_slice())
            .map(|e| envelope_view(&e))
            .map_err(|e| format!("the envelope does not decode: {e}"));
        let route = self.loaded.get().and_then(|set| {
            set.config
                .publishing
                .routes()
                .iter()
                .find(|r| glob_match(r.event_type(), &detail.summary.event_type))
                .map(|r| (r.event_type().to_string(), r.sink().to_string()))
        });
        let loaded = self.loaded.get();
        let telemetry = loaded.as_ref().map(|set| &set.config.telemetry);
        let trace_url = telemetry.and_then(|t| t.trace_url.clone());
        let exporting = telemetry.is_some_and(|t| t.traces.is_some());
        let delivery_trace_id = envelope
            .as_ref()
            .ok()
            .filter(|e| exporting && e.trace_id.is_none())
            .map(|e| crate::telemetry::delivery_trace_id(&e.app_code, &e.event_id));
        let trace_link = envelope
            .as_ref()
            .ok()
            .and_then(|e| e.trace_id.as_deref())
            .or(delivery_trace_id.as_deref())
            .zip(trace_url)
            .map(|(id, url)| url.replace("{trace_id}", id));
        Ok(Some(EventView {
            envelope_bytes: detail.envelope.len(),
            row: detail.summary,
            envelope,
            route,
            delivery_trace_id,
            trace_link,
        }))
    }

    /// The dead-letter page.
    pub async fn dead(&self, form: &DeadForm) -> Result<DeadView, String> {
        let app_code = form.app_or(self.default_app());
        let groups = self
            .store
            .error_groups(&ErrorGroupsParams {
                app_code: app_code.clone(),
                window: GROUP_WINDOW,
            })
            .await
            .map_err(|e| e.to_string())?;
        let mut query = form.events.query(self.default_app())?;
        query.statuses = vec![Status::Failed];
        let page = self
            .store
            .search_events(&query)
            .await
            .map_err(|e| e.to_string())?;
        let (counts, _) = self.snapshot.latest();
        Ok(DeadView {
            failed_total: counts.get(&app_code).map(|c| c.failed),
            grouped_rows: groups.iter().map(|g| g.count).sum(),
            groups,
            app_code,
            page,
        })
    }

    /// The sinks page.
    pub fn sinks(&self) -> SinksView {
        let now = now_ms();
        let Some(set) = self.loaded.get() else {
            return SinksView {
                loaded_at_ms: None,
                sinks: Vec::new(),
                routes: Vec::new(),
                reload: self.reload.is_some(),
            };
        };
        let publishing = &set.config.publishing;
        SinksView {
            loaded_at_ms: Some(set.loaded_at_ms),
            sinks: publishing
                .sinks()
                .iter()
                .map(|spec| {
                    let l = spec.limits();
                    let breaker = spec.breaker();
                    SinkView {
                        name: spec.name().to_string(),
                        plugin: spec.plugin().display().to_string(),
                        sha256: set.plugin_sha256.get(spec.name()).cloned(),
                        config: redacted_config(spec.config()).into_iter().collect(),
                        limits: vec![
                            ("publish_timeout", duration(l.publish_timeout)),
                            ("memory", bytes(l.memory.0)),
                            ("max_batch_size", l.max_batch_size.to_string()),
                            ("max_batch_bytes", bytes(l.batch_bytes())),
                            ("max_event_size", bytes(l.event_size_limit())),
                            ("max_retry_after", duration(l.max_retry_after)),
                            ("allow_hosts", l.allow_hosts.join(", ")),
                            (
                                "max_requests_per_second",
                                l.max_requests_per_second.to_string(),
                            ),
                            (
                                "max_concurrent_requests",
                                l.max_concurrent_requests.to_string(),
                            ),
                        ],
                        breaker_failures: breaker.failures,
                        breaker_cool_down: duration(breaker.cool_down),
                        state: self.sink_state(spec.name(), now),
                    }
                })
                .collect(),
            routes: publishing
                .routes()
                .iter()
                .map(|r| (r.event_type().to_string(), r.sink().to_string()))
                .collect(),
            reload: self.reload.is_some(),
        }
    }

    /// The tenant pages default to: the first of `worker.app_codes`.
    pub fn default_app(&self) -> &str {
        self.app_codes.first().map_or("default", String::as_str)
    }
}

fn envelope_view(envelope: &EventEnvelope) -> EnvelopeView {
    let body = &envelope.body;
    let body_utf8 = std::str::from_utf8(body).ok().map(str::to_string);
    let body_json = body_utf8
        .as_deref()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        .and_then(|value| serde_json::to_string_pretty(&value).ok());
    let shown = &body[..body.len().min(4096)];
    let body_hex = shown
        .chunks(16)
        .enumerate()
        .map(|(i, line)| {
            let hex: Vec<String> = line.iter().map(|b| format!("{b:02x}")).collect();
            format!("{:08x}  {}", i * 16, hex.join(" "))
        })
        .collect::<Vec<_>>()
        .join("\n");
    let trace = (!envelope.traceparent.is_empty())
        .then(|| TraceContext::new(envelope.traceparent.clone(), envelope.tracestate.clone()));
    let (trace_id, trace_error) = match trace {
        Some(Ok(context)) => (Some(context.trace_id().to_string()), None),
        Some(Err(error)) => (None, Some(error.to_string())),
        None => (None, None),
    };
    EnvelopeView {
        app_code: envelope.app_code.clone(),
        event_id: envelope.event_id.clone(),
        room_id: envelope.room_id.clone(),
        event_type: envelope.event_type.clone(),
        room_version: envelope.room_version,
        occurred_at_ms: envelope.occurred_at_ms,
        body_bytes: body.len(),
        body_json,
        body_utf8,
        body_hex,
        traceparent: envelope.traceparent.clone(),
        tracestate: envelope.tracestate.clone(),
        trace_id,
        trace_error,
    }
}
