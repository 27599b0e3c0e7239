//! `[[sink]]` and `[[route]]` sections: which plugin serves which event types, with what limits.
//!
//! [`SinkConfig`] and [`RouteConfig`] are the raw sections as written; [`Publishing`] checks them
//! together, once, into [`SinkSpec`]s and [`RouteSpec`]s, which only it builds. The plugin layer
//! takes those as given and checks nothing again.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use super::{AllowedOrigin, ByteSize, ConfigError, invalid};

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
    /// Deadline of one `publish` call (epoch interruption); an overrun fails the call's events as
    /// retryable. Default 15s (above the shipped plugins' own 10s request timeout).
    #[serde(with = "humantime_serde")]
    pub publish_timeout: Duration,
    /// Linear-memory cap of one plugin instance.
    pub memory: ByteSize,
    /// Most events handed to one `publish` call; larger batches are split.
    pub max_batch_size: u32,
    /// Most bytes of events handed to one `publish` call (bodies and string fields, as the
    /// plugin receives them); larger batches are split. Unset: `worker.max_batch_bytes` when
    /// that is set, else an eighth of `memory` ([`SinkLimits::batch_bytes`]).
    pub max_batch_bytes: Option<ByteSize>,
    /// Largest event this sink is handed; a larger one goes to `failed` alone, with the sizes in
    /// its `last_error`. Unset: the batch bytes ([`SinkLimits::event_size_limit`]).
    pub max_event_size: Option<ByteSize>,
    /// Longest retry-after a plugin may ask for (a rate limit, HTTP `Retry-After`); a longer one
    /// is cut to this, so a downstream cannot park a row for years. Default 1h.
    #[serde(with = "humantime_serde")]
    pub max_retry_after: Duration,
    /// Outbound HTTP allowlist (`scheme://host[:port]`); empty: no wasi:http at all.
    pub allow_hosts: Vec<String>,
    /// `[[broker]]` connections the sink's plugin may publish on (the `broker` import); empty:
    /// none, and a plugin importing `broker` is refused at start.
    pub allow_brokers: Vec<String>,
    /// Whether an allowed host name may resolve to an internal address (loopback, private,
    /// link-local, the metadata address 169.254.169.254, …). Default false: such a connection is
    /// refused unless `allow_hosts` names that IP literal.
    pub allow_private_addresses: bool,
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
            max_batch_bytes: None,
            max_event_size: None,
            max_retry_after: Duration::from_secs(3600),
            allow_hosts: Vec::new(),
            allow_brokers: Vec::new(),
            allow_private_addresses: false,
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

/// The least `limits.max_batch_bytes` / `limits.max_event_size` (and `worker.max_batch_bytes`).
pub const MIN_BATCH_BYTES: u64 = 1024;

impl SinkLimits {
    /// Most bytes of events per `publish` call: `max_batch_bytes`, else an eighth of `memory`
    /// (8MiB of the default 64MiB), which leaves the plugin room to copy and encode what it is
    /// handed several times over.
    pub fn batch_bytes(&self) -> u64 {
        self.max_batch_bytes
            .map_or(self.memory.0 / 8, |bytes| bytes.0)
    }

    /// Largest event handed to the plugin: `max_event_size`, else [`SinkLimits::batch_bytes`].
    pub fn event_size_limit(&self) -> u64 {
        self.max_event_size
            .map_or(self.batch_bytes(), |bytes| bytes.0)
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

/// A `[[sink]]` checked by [`Publishing::new`]: a non-empty name unique among the sinks, a plugin
/// path (resolved against the config file's folder), limits a sink can run with
/// (`publish_timeout` > 0, `max_batch_size` ≥ 1, `memory` ≥ 1MiB, `max_concurrent_requests` ≥ 1,
/// `log_lines_per_second` ≥ 1, `log_line_max` ≥ 16 bytes). Built only by those checks
/// ([`Publishing::new`], [`SinkSpec::new`]).
#[derive(Debug, Clone, PartialEq)]
pub struct SinkSpec {
    name: String,
    plugin: PathBuf,
    config: BTreeMap<String, String>,
    limits: SinkLimits,
    /// `limits.allow_hosts`, parsed.
    allowed_origins: Vec<AllowedOrigin>,
    breaker: BreakerSettings,
}

impl SinkSpec {
    /// Checks one sink outside a configuration (`outboxd plugin test`, tests, benchmarks): the
    /// checks of [`Publishing::new`] but uniqueness, errors keyed `sink.…`, the path as given.
    pub fn new(sink: SinkConfig) -> Result<SinkSpec, ConfigError> {
        SinkSpec::check(sink, "sink", Path::new(""))
    }

    /// Checks one sink section; `key` names it in errors (`sink[2]`).
    fn check(mut sink: SinkConfig, key: &str, base_dir: &Path) -> Result<SinkSpec, ConfigError> {
        if sink.name.trim().is_empty() {
            return Err(invalid(&format!("{key}.name"), "must not be empty"));
        }
        if sink.plugin.as_os_str().is_empty() {
            return Err(invalid(&format!("{key}.plugin"), "must name a .wasm file"));
        }
        sink.plugin = base_dir.join(&sink.plugin);
        let limits = &sink.limits;
        if limits.publish_timeout.is_zero() {
            return Err(invalid(
                &format!("{key}.limits.publish_timeout"),
                "must be greater than 0",
            ));
        }
        if limits.max_batch_size == 0 {
            return Err(invalid(
                &format!("{key}.limits.max_batch_size"),
                "must be at least 1",
            ));
        }
        if limits.memory.0 < 1 << 20 {
            return Err(invalid(
                &format!("{key}.limits.memory"),
                "must be at least 1MiB",
            ));
        }
        if limits.max_retry_after.is_zero() {
            return Err(invalid(
                &format!("{key}.limits.max_retry_after"),
                "must be greater than 0",
            ));
        }
        let bytes_key = format!("{key}.limits.max_batch_bytes");
        if let Some(bytes) = limits.max_batch_bytes {
            if bytes.0 < MIN_BATCH_BYTES {
                return Err(invalid(&bytes_key, "must be at least 1KiB"));
            }
            if bytes.0 > limits.memory.0 {
                return Err(invalid(
                    &bytes_key,
                    format!(
                        "{} bytes do not fit in {key}.limits.memory ({} bytes)",
                        bytes.0, limits.memory.0
                    ),
                ));
            }
        }
        if let Some(size) = limits.max_event_size {
            let size_key = format!("{key}.limits.max_event_size");
            if size.0 < MIN_BATCH_BYTES {
                return Err(invalid(&size_key, "must be at least 1KiB"));
            }
            if size.0 > limits.batch_bytes() {
                return Err(invalid(
                    &size_key,
                    format!(
                        "{} bytes exceed the sink's batch bytes ({}, {key}.limits.max_batch_bytes \
                         or an eighth of limits.memory): such an event could never be sent",
                        size.0,
                        limits.batch_bytes()
                    ),
                ));
            }
        }
        if limits.max_concurrent_requests == 0 {
            return Err(invalid(
                &format!("{key}.limits.max_concurrent_requests"),
                "must be at least 1",
            ));
        }
        let allowed_origins = check_http_limits(limits, key)?;
        if limits.log_lines_per_second == 0 {
            return Err(invalid(
                &format!("{key}.limits.log_lines_per_second"),
                "must be at least 1",
            ));
        }
        if limits.log_line_max.0 < 16 {
            return Err(invalid(
                &format!("{key}.limits.log_line_max"),
                "must be at least 16 bytes",
            ));
        }
        if sink.breaker.failures > 0 && sink.breaker.cool_down.is_zero() {
            return Err(invalid(
                &format!("{key}.breaker.cool_down"),
                "must be greater than 0 (set breaker.failures = 0 to turn the breaker off)",
            ));
        }
        Ok(SinkSpec {
            name: sink.name,
            plugin: sink.plugin,
            config: sink.config,
            limits: sink.limits,
            allowed_origins,
            breaker: sink.breaker,
        })
    }

    /// The origins the sink's plugin may send requests to (`limits.allow_hosts`, parsed); empty
    /// when it may send none (wasi:http is then not linked).
    pub fn allowed_origins(&self) -> &[AllowedOrigin] {
        &self.allowed_origins
    }

    /// Name routes refer to; also tags the plugin's log lines.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Path to the plugin's `.wasm` component.
    pub fn plugin(&self) -> &Path {
        &self.plugin
    }

    /// Settings passed to the plugin's `init`.
    pub fn config(&self) -> &BTreeMap<String, String> {
        &self.config
    }

    /// The sink's circuit breaker settings.
    pub fn breaker(&self) -> BreakerSettings {
        self.breaker
    }

    /// Resource limits of this sink.
    pub fn limits(&self) -> &SinkLimits {
        &self.limits
    }
}

/// A `[[route]]` checked by [`Publishing::new`]: a non-empty glob naming a sink that exists. Only
/// [`Publishing`] builds one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouteSpec {
    event_type: String,
    sink: String,
}

impl RouteSpec {
    /// Glob on the event type: `*` matches any run of characters, `?` one character.
    pub fn event_type(&self) -> &str {
        &self.event_type
    }

    /// Name of one of the [`Publishing::sinks`].
    pub fn sink(&self) -> &str {
        &self.sink
    }
}

/// The sinks and routes of a configuration, checked together once: every [`SinkSpec`] valid and
/// uniquely named, every [`RouteSpec`] naming one of them.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Publishing {
    sinks: Vec<SinkSpec>,
    routes: Vec<RouteSpec>,
}

impl Publishing {
    /// Checks `sinks` and `routes`, resolving plugin paths against `base_dir` (the config file's
    /// folder; `Path::new("")` keeps them as given). The error names the key at fault
    /// (`sink[1].name`, `route[0].sink`, …).
    pub fn new(
        sinks: Vec<SinkConfig>,
        routes: Vec<RouteConfig>,
        base_dir: &Path,
    ) -> Result<Publishing, ConfigError> {
        let mut names = BTreeSet::new();
        let mut specs = Vec::with_capacity(sinks.len());
        for (index, sink) in sinks.into_iter().enumerate() {
            let key = format!("sink[{index}]");
            let spec = SinkSpec::check(sink, &key, base_dir)?;
            if !names.insert(spec.name.clone()) {
                return Err(invalid(
                    &format!("{key}.name"),
                    format!("sink `{}` is defined twice", spec.name),
                ));
            }
            specs.push(spec);
        }
        let mut checked = Vec::with_capacity(routes.len());
        for (index, route) in routes.into_iter().enumerate() {
            if route.event_type.is_empty() {
                return Err(invalid(
                    &format!("route[{index}].event_type"),
                    "must not be empty (use \"*\" for all)",
                ));
            }
            if !names.contains(&route.sink) {
                return Err(invalid(
                    &format!("route[{index}].sink"),
                    format!("unknown sink `{}` (no [[sink]] with that name)", route.sink),
                ));
            }
            checked.push(RouteSpec {
                event_type: route.event_type,
                sink: route.sink,
            });
        }
        Ok(Publishing {
            sinks: specs,
            routes: checked,
        })
    }

    /// Gives every sink that does not set `limits.max_batch_bytes` the `worker.max_batch_bytes`
    /// of the configuration, checked against the sink's memory and event size.
    pub(super) fn default_batch_bytes(&mut self, bytes: ByteSize) -> Result<(), ConfigError> {
        if bytes.0 < MIN_BATCH_BYTES {
            return Err(invalid("worker.max_batch_bytes", "must be at least 1KiB"));
        }
        for (index, sink) in self.sinks.iter_mut().enumerate() {
            let limits = &mut sink.limits;
            if limits.max_batch_bytes.is_some() {
                continue;
            }
            let too_small = limits.max_event_size.filter(|size| size.0 > bytes.0);
            if bytes.0 > limits.memory.0 || too_small.is_some() {
                return Err(invalid(
                    "worker.max_batch_bytes",
                    format!(
                        "{} bytes do not fit sink[{index}] `{}` (limits.memory {} bytes, \
                         limits.max_event_size {} bytes): set its limits.max_batch_bytes",
                        bytes.0,
                        sink.name,
                        limits.memory.0,
                        limits.event_size_limit()
                    ),
                ));
            }
            limits.max_batch_bytes = Some(bytes);
        }
        Ok(())
    }

    /// The sinks, in config order.
    pub fn sinks(&self) -> &[SinkSpec] {
        &self.sinks
    }

    /// The routes, in config order (first match wins).
    pub fn routes(&self) -> &[RouteSpec] {
        &self.routes
    }
}

/// The outbound-HTTP limits of sink `key`: every `allow_hosts` entry an origin, and, when hosts
/// are allowed, timeouts and the response cap above zero. Returns the parsed origins.
fn check_http_limits(limits: &SinkLimits, key: &str) -> Result<Vec<AllowedOrigin>, ConfigError> {
    let origins = limits
        .allow_hosts
        .iter()
        .map(|entry| AllowedOrigin::parse(entry))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|why| invalid(&format!("{key}.limits.allow_hosts"), why))?;
    if !origins.is_empty() {
        let positive = [
            ("connect_timeout", !limits.connect_timeout.is_zero()),
            ("first_byte_timeout", !limits.first_byte_timeout.is_zero()),
            ("max_response_size", limits.max_response_size.0 > 0),
        ];
        if let Some((name, _)) = positive.iter().find(|(_, ok)| !ok) {
            return Err(invalid(
                &format!("{key}.limits.{name}"),
                "must be greater than 0 when limits.allow_hosts lists hosts",
            ));
        }
    }
    Ok(origins)
}
