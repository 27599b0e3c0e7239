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
}

/// Per-sink limits (`limits = { … }` in a `[[sink]]`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SinkLimits {
    /// Deadline of one `publish` call (epoch interruption); an overrun fails the call's events as
    /// retryable. Default 15s (above the shipped plugins' own 10s request timeout).
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
    /// Most outbound requests of this sink (all its instances and batches together) between
    /// sending and the response head; more wait for a slot. Default 16, at least 1.
    pub max_concurrent_requests: u32,
    /// Connect timeout of one outbound request.
    #[serde(with = "humantime_serde")]
    pub connect_timeout: Duration,
    /// First-byte timeout of one outbound request.
    #[serde(with = "humantime_serde")]
    pub first_byte_timeout: Duration,
    /// Largest response body a plugin may read.
    pub max_response_size: ByteSize,
    /// Most lines per second the plugin may write to the host log (stdout, stderr and the
    /// `logging` import together; burst = the rate); the rest are counted and reported as
    /// "N plugin log lines suppressed". Default 100.
    pub log_lines_per_second: u32,
    /// Longest plugin log line kept; the rest of a longer line is dropped. Default 2KiB.
    pub log_line_max: ByteSize,
}

impl Default for SinkLimits {
    fn default() -> Self {
        SinkLimits {
            publish_timeout: Duration::from_secs(15),
            memory: ByteSize(64 * 1024 * 1024),
            max_batch_size: 1000,
            allow_hosts: Vec::new(),
            max_requests_per_second: 0,
            max_concurrent_requests: 16,
            connect_timeout: Duration::from_secs(5),
            first_byte_timeout: Duration::from_secs(10),
            max_response_size: ByteSize(1024 * 1024),
            log_lines_per_second: 100,
            log_line_max: ByteSize(2048),
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
