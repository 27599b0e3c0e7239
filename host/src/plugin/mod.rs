//! The WebAssembly publisher-plugin host: sinks are components implementing
//! `outbox:publisher/publisher` (`wit/publisher.wit`), run by wasmtime behind the [`Publisher`]
//! seam, routed by event type.
//!
//! - [`engine`]: the one `Engine` (component model, async, epoch interruption), its epoch
//!   ticker, and compiling through the precompiled-artifact [`cache`];
//! - [`world`]: the world/version check and linking (WASI p2 granting nothing + `logging`,
//!   + wasi:http for sinks with `limits.allow_hosts`);
//! - `http`: a sink's outbound-HTTP policy: allowlist, timeouts, response-size cap, rate limit;
//! - `egress`: sending a request to a checked address (no internal address reached through an
//!   allowed name);
//! - `redact`: secret config values kept out of logs and `last_error`;
//! - `log_limit`: a sink's cap on its plugin's log lines (rate and length);
//! - `state`: per-instance store state, memory limiter, logging and stdio → `tracing`;
//! - `broker_host`: the `broker` import: a plugin's messages on the `[[broker]]` connections its
//!   sink may use, answered before the call's deadline;
//! - [`runtime`]: [`PluginRuntime`], the threads guest calls run on, apart from the host's tasks;
//! - [`sink`]: [`PluginSink`], one `[[sink]]` with its limits and instance pool, splitting
//!   batches into calls by count and bytes;
//! - `isolate`: finding the event a whole-call failure belongs to (bisection), and the sink's
//!   memory of suspects across claims;
//! - [`breaker`]: [`BreakerSink`], a sink's circuit breaker (defers events without spending an
//!   attempt while the sink is down);
//! - [`pause`]: [`PauseGate`] and [`SinkControls`], pausing a sink at runtime (its events wait
//!   without spending an attempt);
//! - [`router`]: [`RoutedPublisher`], `[[route]]` globs → sinks;
//! - [`swap`]: [`SwappablePublisher`], the set the worker holds across hot reloads;
//! - [`check`](mod@check): `outboxd plugin check|test`.

mod bindings;
pub mod breaker;
mod broker_host;
pub mod cache;
pub mod check;
pub mod compile_lock;
mod egress;
pub mod engine;
mod error;
mod http;
mod isolate;
mod log_limit;
pub mod pause;
mod redact;
pub mod router;
pub mod runtime;
pub mod sink;
mod state;
pub mod swap;
pub mod world;

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::try_join_all;

pub use breaker::{BreakerSink, BreakerState};
pub use cache::CacheOutcome;
pub use check::{
    CheckReport, TestReport, check, parse_config_pair, parse_event_json, test_plugin,
    test_plugin_with_brokers,
};
pub use engine::{CompiledPlugin, PluginEngine};
pub use error::{BoxError, PluginError};
pub use pause::{PAUSED_RETRY, PauseGate, Paused, SinkControls};
pub use redact::{REDACTED, redacted_config};
pub use router::{Route, RoutedPublisher};
pub use runtime::PluginRuntime;
pub use sink::{MAX_IDLE_INSTANCES, PluginSink, SinkStats};
pub use swap::SwappablePublisher;

use crate::broker::Brokers;
use crate::config::{PluginSettings, Publishing, SinkSpec};
use crate::metrics::Metrics;
use crate::publish::Publisher;

/// Starts every sink, each behind its circuit breaker, and the router: the production
/// [`Publisher`].
///
/// `publishing` was checked by config loading (names, routes, limits); what is checked here is
/// what only loading the plugins can tell, and the first problem is returned as one error naming
/// the sink or file: a missing file, a file that is not a component, a component of the wrong
/// world or an incompatible version, outbound HTTP without an allowlist, and any sink whose
/// plugin's `init` fails.
pub async fn load_publisher(
    publishing: &Publishing,
    settings: &PluginSettings,
) -> Result<Arc<dyn Publisher>, PluginError> {
    load_publisher_with_metrics(publishing, settings, &Metrics::default()).await
}

/// [`load_publisher`] reporting publish durations and plugin failures to `metrics`.
pub async fn load_publisher_with_metrics(
    publishing: &Publishing,
    settings: &PluginSettings,
    metrics: &Metrics,
) -> Result<Arc<dyn Publisher>, PluginError> {
    load_publisher_with(
        publishing,
        settings,
        metrics,
        &SinkControls::new(),
        &Brokers::none(),
    )
    .await
}

/// [`load_publisher_with_metrics`] with each sink behind its switch in `controls` too (router →
/// pause gate → breaker → plugin), so a paused sink's events wait.
pub async fn load_publisher_with_controls(
    publishing: &Publishing,
    settings: &PluginSettings,
    metrics: &Metrics,
    controls: &Arc<SinkControls>,
) -> Result<Arc<dyn Publisher>, PluginError> {
    load_publisher_with(publishing, settings, metrics, controls, &Brokers::none()).await
}

/// [`load_publisher_with_metrics`] whose sinks may publish on `brokers` (each on the
/// connections its `limits.allow_brokers` names).
pub async fn load_publisher_with_brokers(
    publishing: &Publishing,
    settings: &PluginSettings,
    metrics: &Metrics,
    brokers: &Brokers,
) -> Result<Arc<dyn Publisher>, PluginError> {
    load_publisher_with(publishing, settings, metrics, &SinkControls::new(), brokers).await
}

/// The production publisher: every sink behind its switch in `controls`, its breaker, and with
/// the `brokers` connections its `limits.allow_brokers` names.
pub async fn load_publisher_with(
    publishing: &Publishing,
    settings: &PluginSettings,
    metrics: &Metrics,
    controls: &Arc<SinkControls>,
    brokers: &Brokers,
) -> Result<Arc<dyn Publisher>, PluginError> {
    let engine = PluginEngine::new(settings)?;
    let started = try_join_all(
        publishing
            .sinks()
            .iter()
            .map(|sink| PluginSink::start_with_brokers(&engine, sink, brokers)),
    )
    .await?;
    let sinks: BTreeMap<String, Arc<dyn Publisher>> = started
        .into_iter()
        .zip(publishing.sinks())
        .map(|(sink, spec)| {
            let name = sink.name().to_string();
            let sink = sink.with_metrics(metrics.clone());
            let sink = match settings.batch_budget {
                Some(budget) => sink.with_batch_budget(budget),
                None => sink,
            };
            let plugin = Arc::new(sink) as Arc<dyn Publisher>;
            let guarded = BreakerSink::new(&name, plugin, spec.breaker(), metrics.clone());
            let gated = PauseGate::new(&name, Arc::new(guarded), controls.clone());
            (name, Arc::new(gated) as Arc<dyn Publisher>)
        })
        .collect();
    let routes = publishing
        .routes()
        .iter()
        .filter_map(|route| {
            // Every route names one of the sinks (`Publishing::new` checked it).
            sinks.get(route.sink()).map(|publisher| Route {
                event_type: route.event_type().to_string(),
                sink: route.sink().to_string(),
                publisher: publisher.clone(),
            })
        })
        .collect();
    Ok(Arc::new(
        RoutedPublisher::new(routes).with_metrics(metrics.clone()),
    ))
}

/// Starts every sink concurrently on `engine`.
pub async fn start_sinks(
    engine: &PluginEngine,
    sinks: &[SinkSpec],
) -> Result<Vec<PluginSink>, PluginError> {
    try_join_all(sinks.iter().map(|sink| PluginSink::start(engine, sink))).await
}
