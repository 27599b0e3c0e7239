//! The plugin author's loop behind `outboxd plugin check FILE` and `outboxd plugin test FILE`:
//! load and inspect a plugin, or run `init` and `publish` on sample events without a database,
//! plus the parsing and printing those commands need.

use std::fmt;
use std::path::{Path, PathBuf};

use base64::Engine as _;
use serde::Deserialize;

use super::cache::CacheOutcome;
use super::engine::PluginEngine;
use super::error::PluginError;
use super::sink::{PluginSink, prepare};
use super::world::{SUPPORTED_VERSIONS, WIT_PACKAGE, WorldInfo};
use crate::broker::Brokers;
use crate::config::{PluginSettings, SinkConfig, SinkLimits, SinkSpec};
use crate::publish::{Event, Outcome, Publisher};
use crate::record::DEFAULT_APP_CODE;
use crate::trace_context::TraceContext;

/// What `outboxd plugin check` found; `Display` prints it for humans.
#[derive(Debug, Clone)]
pub struct CheckReport {
    /// The plugin file.
    pub path: PathBuf,
    /// Its size in bytes.
    pub size: u64,
    /// Hex sha256 of the file.
    pub sha256: String,
    /// Imports, exports and the `outbox:publisher` version it was built against.
    pub world: WorldInfo,
    /// Whether compiling was skipped thanks to the artifact cache.
    pub cache: CacheOutcome,
}

impl fmt::Display for CheckReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "plugin:  {} ({} bytes, sha256 {})",
            self.path.display(),
            self.size,
            self.sha256
        )?;
        let version = self.world.version.as_deref().unwrap_or("unversioned");
        writeln!(
            f,
            "world:   {WIT_PACKAGE}/publisher@{version}: ok (this host loads {SUPPORTED_VERSIONS})"
        )?;
        writeln!(f, "exports: {}", self.world.exports.join(", "))?;
        writeln!(f, "imports:")?;
        for import in &self.world.imports {
            writeln!(f, "  {import}")?;
        }
        let cache = match self.cache {
            CacheOutcome::Hit => "precompiled artifact loaded from the cache",
            CacheOutcome::Stored => "compiled; artifact stored in the cache",
            CacheOutcome::Disabled => "compiled; no cache",
        };
        write!(f, "compile: {cache}")
    }
}

/// Loads the plugin at `path`, checks its world and version, links it, and lists its imports.
/// Uses (and fills) the artifact cache of `settings`.
pub async fn check(path: &Path, settings: &PluginSettings) -> Result<CheckReport, PluginError> {
    let engine = PluginEngine::new(settings)?;
    let plugin = engine.compile(path).await?;
    let (world, _pre) = prepare(&engine, path, &plugin.component)?;
    Ok(CheckReport {
        path: path.to_path_buf(),
        size: plugin.size,
        sha256: plugin.sha256,
        world,
        cache: plugin.cache,
    })
}

/// Runs the plugin at `path` as a sink named `test` with default limits, except that outbound
/// HTTP (wasi:http) is allowed to `allow_hosts` (`scheme://host[:port]`): `init(config)`, then one
/// `publish` of `events` (split by the default `max_batch_size`). Returns one outcome per event.
pub async fn test_plugin(
    path: &Path,
    config: Vec<(String, String)>,
    events: Vec<Event>,
    allow_hosts: Vec<String>,
    settings: &PluginSettings,
) -> Result<Vec<Outcome>, PluginError> {
    test_plugin_with_brokers(
        path,
        config,
        events,
        allow_hosts,
        &Brokers::none(),
        settings,
    )
    .await
}

/// [`test_plugin`] on a sink that may also publish on every connection of `brokers` (its
/// `limits.allow_brokers` names them all), e.g. a [`crate::broker::StandInBroker`]'s.
pub async fn test_plugin_with_brokers(
    path: &Path,
    config: Vec<(String, String)>,
    events: Vec<Event>,
    allow_hosts: Vec<String>,
    brokers: &Brokers,
    settings: &PluginSettings,
) -> Result<Vec<Outcome>, PluginError> {
    let engine = PluginEngine::new(settings)?;
    let sink = SinkConfig {
        breaker: Default::default(),
        name: "test".to_string(),
        plugin: path.to_path_buf(),
        config: config.into_iter().collect(),
        limits: SinkLimits {
            allow_hosts,
            allow_brokers: brokers.names(),
            ..SinkLimits::default()
        },
    };
    let sink = SinkSpec::new(sink).map_err(|e| PluginError::InvalidLimits {
        sink: "test".to_string(),
        reason: e.to_string(),
    })?;
    let sink = PluginSink::start_with_brokers(&engine, &sink, brokers).await?;
    Ok(sink.publish(&events).await)
}

/// Parses a `--config key=value` argument.
pub fn parse_config_pair(arg: &str) -> Result<(String, String), PluginError> {
    match arg.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() => {
            Ok((key.trim().to_string(), value.to_string()))
        }
        _ => Err(PluginError::ConfigPair(arg.to_string())),
    }
}

/// An `--event` argument: every field optional.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct EventArg {
    event_type: Option<String>,
    app_code: Option<String>,
    event_id: Option<String>,
    room_id: Option<String>,
    room_version: Option<i64>,
    occurred_at_ms: Option<i64>,
    attempt: Option<u32>,
    body: Option<String>,
    body_base64: Option<String>,
    traceparent: Option<String>,
    tracestate: Option<String>,
}

/// Parses the `index`-th (0-based) `--event` JSON argument, e.g.
/// `{"event_type":"RoomGiftSent","room_id":"r1","body":"hi"}`. Every field is optional:
/// `app_code` defaults to the default app code, `event_id` to `evt_sample_<index>`,
/// `event_type` to `RoomGiftSent`, `room_id` to `room-1`, `room_version` and `attempt` to 1,
/// `occurred_at_ms` to now, the body to empty. `body` is UTF-8 text; `body_base64` gives a
/// binary body instead; `traceparent` (and `tracestate`) a W3C trace context for the plugin's
/// `trace` import.
pub fn parse_event_json(index: usize, json: &str) -> Result<Event, PluginError> {
    let invalid = |reason: String| PluginError::EventJson { index, reason };
    let arg: EventArg = serde_json::from_str(json).map_err(|e| invalid(e.to_string()))?;
    let body = match (arg.body, arg.body_base64) {
        (Some(_), Some(_)) => return Err(invalid("give `body` or `body_base64`, not both".into())),
        (Some(text), None) => text.into_bytes(),
        (None, Some(b64)) => base64::engine::general_purpose::STANDARD
            .decode(b64)
            .map_err(|e| invalid(format!("body_base64: {e}")))?,
        (None, None) => Vec::new(),
    };
    let trace = match (arg.traceparent, arg.tracestate) {
        (Some(parent), state) => Some(
            TraceContext::new(parent, state.unwrap_or_default())
                .map_err(|e| invalid(e.to_string()))?,
        ),
        (None, Some(_)) => return Err(invalid("`tracestate` needs a `traceparent`".into())),
        (None, None) => None,
    };
    Ok(Event {
        app_code: arg.app_code.unwrap_or_else(|| DEFAULT_APP_CODE.to_string()),
        event_id: arg
            .event_id
            .unwrap_or_else(|| format!("evt_sample_{index}")),
        event_type: arg.event_type.unwrap_or_else(|| "RoomGiftSent".to_string()),
        room_id: arg.room_id.unwrap_or_else(|| "room-1".to_string()),
        room_version: arg.room_version.unwrap_or(1),
        occurred_at_ms: arg.occurred_at_ms.unwrap_or_else(crate::record::now_ms),
        body,
        attempt: arg.attempt.unwrap_or(1),
        trace,
    })
}

/// `outboxd plugin test`'s output: one line per event with its outcome.
pub struct TestReport<'a> {
    /// The events published.
    pub events: &'a [Event],
    /// Their outcomes, in order.
    pub outcomes: &'a [Outcome],
}

impl fmt::Display for TestReport<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (event, outcome)) in self.events.iter().zip(self.outcomes).enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{}\t{}\t", event.event_id, event.event_type)?;
            match outcome {
                Outcome::Delivered => write!(f, "delivered")?,
                Outcome::Retryable {
                    message,
                    retry_after: None,
                } => write!(f, "retryable: {message}")?,
                Outcome::Retryable {
                    message,
                    retry_after: Some(after),
                } => write!(
                    f,
                    "retryable after {}: {message}",
                    humantime::format_duration(*after)
                )?,
                Outcome::Permanent { message } => write!(f, "failed (permanent): {message}")?,
                Outcome::Deferred { message, wait } => write!(
                    f,
                    "deferred for {}: {message}",
                    humantime::format_duration(*wait)
                )?,
            }
        }
        Ok(())
    }
}
