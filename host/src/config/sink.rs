//! `[[sink]]` and `[[route]]` sections: which plugin serves which event types, with what limits.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::ByteSize;

/// One `[[sink]]`: a publisher plugin and its settings.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SinkConfig {
    /// Name routes refer to; also tags the plugin's log lines.
    pub name: String,
    /// Path to the plugin's `.wasm` component (relative paths are relative to the config file).
    pub plugin: PathBuf,
    /// Settings passed to the plugin's `init`, as strings.
    #[serde(default)]
    pub config: BTreeMap<String, String>,
    /// Resource limits of this sink.
    #[serde(default)]
    pub limits: SinkLimits,
    /// Circuit breaker of this sink.
    #[serde(default)]
    pub breaker: BreakerSettings,
}

/// Per-sink circuit breaker (`breaker = { failures = 5, cool_down = "30s" }` in a `[[sink]]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct BreakerSettings {
    /// Batches failing as retryable (or timing out) in a row that open the breaker; 0 turns it
    /// off. Default 5.
    pub failures: u32,
    /// How long an open breaker defers the sink's events before one probe batch. Default 30s.
    #[serde(with = "humantime_serde")]
    pub cool_down: Duration,
}

impl Default for BreakerSettings {
    fn default() -> Self {
        BreakerSettings {
            failures: 5,
            cool_down: Duration::from_secs(30),
        }
    }
}

/// Per-sink limits (`limits = { … }` in a `[[sink]]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SinkLimits {
    /// Deadline of one `publish` call (epoch interruption); an overrun fails the batch as retryable.
    #[serde(with = "humantime_serde")]
    pub publish_timeout: Duration,
    /// Linear-memory cap of one plugin instance.
    pub memory: ByteSize,
    /// Most events handed to one `publish` call; larger batches are split.
    pub max_batch_size: u32,
    /// Outbound HTTP allowlist (`scheme://host[:port]`); empty: no wasi:http at all.
    pub allow_hosts: Vec<String>,
    /// Token-bucket rate limit on outbound requests; 0 = unlimited.
    pub max_requests_per_second: u32,
    /// Connect timeout of one outbound request.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// First-byte timeout of one outbound request.
    #[serde(with = "humantime_serde")]
    pub first_byte_timeout: Duration,
    /// Largest response body a plugin may read.
    pub max_response_size: ByteSize,
}

impl Default for SinkLimits {
    fn default() -> Self {
        SinkLimits {
            publish_timeout: Duration::from_secs(10),
            memory: ByteSize(64 * 1024 * 1024),
            max_batch_size: 1000,
            allow_hosts: Vec::new(),
            max_requests_per_second: 0,
            connect_timeout: Duration::from_secs(5),
            first_byte_timeout: Duration::from_secs(10),
            max_response_size: ByteSize(1024 * 1024),
        }
    }
}

/// One `[[route]]`: events whose type matches the glob go to the sink. First match wins.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteConfig {
    /// Glob on the event type: `*` matches any run of characters, `?` one character.
    pub event_type: String,
    /// Name of a `[[sink]]`.
    pub sink: String,
}
