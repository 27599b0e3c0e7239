//! Configuration: built-in defaults → `outboxd.toml` → `OUTBOXD_*` environment, validated once.
//!
//! Every key has a default except a sink's plugin path. Environment overrides are named
//! `OUTBOXD_<SECTION>_<KEY>` for the sections `database`, `worker`, `retry`, `plugins` and `log`
//! (`OUTBOXD_DATABASE_URL`, `OUTBOXD_WORKER_BATCH_SIZE`, `OUTBOXD_RETRY_STRATEGY`, …); list keys
//! take comma-separated values (`OUTBOXD_WORKER_APP_CODES=live,ktv`). Any mistake is reported as
//! one [`ConfigError`] naming the key (or variable) at fault.

pub mod admin;
mod byte_size;
mod deadlines;
mod options;
pub mod retention;
pub mod sink;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

pub use admin::{AdminConfig, DEFAULT_ADMIN_LISTEN};
pub use byte_size::ByteSize;
pub use deadlines::DEADLINE_MARGIN;
pub use retention::RetentionConfig;
pub use sink::{
    BreakerSettings, Publishing, RouteConfig, RouteSpec, SinkConfig, SinkLimits, SinkSpec,
};

use crate::retry::{RetryPolicy, Strategy};
use crate::store::{DeliveryOrder, TableName};

/// Environment prefix of overrides.
pub const ENV_PREFIX: &str = "OUTBOXD_";

/// Sections that take environment overrides.
const ENV_SECTIONS: [&str; 7] = [
    "database",
    "worker",
    "retry",
    "plugins",
    "log",
    "admin",
    "retention",
];

/// Keys whose environment override is a comma-separated list.
const LIST_KEYS: [&str; 2] = ["app_codes", "delays"];

/// The whole configuration, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    /// `[database]`.
    pub database: DatabaseConfig,
    /// `[worker]`.
    pub worker: WorkerConfig,
    /// `[retry]`, as a policy.
    pub retry: RetryPolicy,
    /// `[plugins]`.
    pub plugins: PluginSettings,
    /// `[log]`.
    pub log: LogConfig,
    /// `[admin]`.
    pub admin: AdminConfig,
    /// `[retention]`.
    pub retention: RetentionConfig,
    /// `[[sink]]`s (plugin paths resolved against the config file's folder) and `[[route]]`s,
    /// checked together.
    pub publishing: Publishing,
}

/// `[database]`.
#[derive(Debug, Clone, PartialEq)]
pub struct DatabaseConfig {
    /// `sqlite://…`, `mysql://…` or `postgres://…`. Default `sqlite://outboxd.db`.
    pub url: String,
    /// Outbox table. Default `room_outbox`.
    pub table: TableName,
    /// Connection pool size. Default 8.
    pub max_connections: u32,
    /// Longest wait for a new connection or a pool checkout; the database's own error ("connection
    /// refused", "access denied", …) is reported as soon as it comes. Default 5s.
    pub connect_timeout: Duration,
}

/// `[worker]`.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// Tenants this host serves. Default `["default"]`.
    pub app_codes: Vec<String>,
    /// Most rows per claim. Default 500.
    pub batch_size: u32,
    /// Wait between claims when idle. Default 1s.
    pub poll_interval: Duration,
    /// Lease length of a claim. Default 30s; at least `publish_timeout` + [`DEADLINE_MARGIN`].
    pub lease: Duration,
    /// Deadline of one batch's publish: events no sink answered by then are retryable, results
    /// already answered are kept. Default 20s; at least every sink's `limits.publish_timeout`
    /// (times its calls per batch) + [`DEADLINE_MARGIN`].
    pub publish_timeout: Duration,
    /// `none` or `per-room`. Default `none`.
    pub ordering: DeliveryOrder,
    /// Worker loops in this process (each claims one batch ahead where the database runs
    /// writers side by side: see `Worker`). Default 1.
    pub concurrency: u32,
    /// This host's name in worker ids and logs. Default `<hostname>-<pid>`.
    pub node_id: String,
}

/// `[plugins]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PluginSettings {
    /// Where precompiled plugin artifacts are cached; default: the user cache folder.
    pub cache_dir: Option<PathBuf>,
}

/// `[log]`.
#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    /// `text` or `json`. Default `text`.
    pub format: LogFormat,
    /// A tracing filter (`info`, `outboxd=debug`, …); `RUST_LOG` wins when set. Default `info`.
    pub level: String,
    /// Interval of `run`'s summary line (delivered, retried, failed, events/s, backlog, oldest
    /// pending age); `None` (`"0s"`) turns it off. Default 1m.
    pub summary_interval: Option<Duration>,
}

/// Log line format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// A configuration mistake, naming the key, variable or file at fault.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The config file could not be read.
    #[error("cannot read config file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The TOML (file or merged overrides) does not fit the schema.
    #[error("invalid config {origin}: {message}")]
    Parse {
        /// The file, or "environment".
        origin: String,
        /// The parser's message (names the key).
        message: String,
    },
    /// A value is out of range or inconsistent.
    #[error("invalid config key `{key}`: {message}")]
    Invalid {
        /// Dotted key, e.g. `worker.batch_size`.
        key: String,
        /// What is wrong.
        message: String,
    },
}

fn invalid(key: &str, message: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.to_string(),
        message: message.into(),
    }
}

impl Config {
    /// Loads `path` (if given) over the defaults, then applies `OUTBOXD_*` variables from `env`.
    pub fn load(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        let (mut table, origin) = match path {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                let table: toml::Table = toml::from_str(&text).map_err(|e| ConfigError::Parse {
                    origin: path.display().to_string(),
                    message: e.to_string(),
                })?;
                (table, path.display().to_string())
            }
            None => (toml::Table::new(), "defaults".to_string()),
        };
        let applied = apply_env(&mut table, env)?;
        let origin = if applied.is_empty() {
            origin
        } else {
            format!("{origin} + environment ({})", applied.join(", "))
        };
        let raw =
            RawConfig::deserialize(toml::Value::Table(table)).map_err(|e| ConfigError::Parse {
                origin,
                message: e.to_string(),
            })?;
        let base_dir = path.and_then(Path::parent).unwrap_or(Path::new(""));
        raw.validate(base_dir)
    }

    /// Checks that `outboxd run` has somewhere to deliver: at least one `[[sink]]` and one
    /// `[[route]]`. Without them every claimed row would go to `failed` with "no route", so `run`
    /// refuses to start with one line saying what to configure.
    pub fn check_deliverable(&self) -> Result<(), ConfigError> {
        let Some(first) = self.publishing.sinks().first() else {
            return Err(invalid(
                "sink",
                "no [[sink]] configured: nothing to deliver to; add a [[sink]] (name, plugin) and \
                 a [[route]] (event_type, sink) to the config file (--config, or ./outboxd.toml)",
            ));
        };
        if self.publishing.routes().is_empty() {
            return Err(invalid(
                "route",
                format!(
                    "no [[route]] configured: every event would fail with \"no route\"; add e.g. \
                     [[route]] event_type = \"*\" sink = \"{}\"",
                    first.name()
                ),
            ));
        }
        Ok(())
    }

    /// Defaults only (no file, no environment).
    pub fn defaults() -> Config {
        Config::load(None, std::iter::empty()).expect("built-in defaults are valid")
    }
}

/// Applies `OUTBOXD_<SECTION>_<KEY>` variables to `table`; returns the variable names used.
fn apply_env(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Result<Vec<String>, ConfigError> {
    let mut applied = Vec::new();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let rest = rest.to_ascii_lowercase();
        let Some((section, key)) = ENV_SECTIONS.iter().find_map(|s| {
            rest.strip_prefix(s)
                .and_then(|k| k.strip_prefix('_'))
                .map(|k| (*s, k))
        }) else {
            continue; // OUTBOXD_TEST_*, OUTBOXD_PLUGIN_DIR, … belong to other tools
        };
        let entry = table
            .entry(section)
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        let Some(section_table) = entry.as_table_mut() else {
            return Err(invalid(section, "must be a table"));
        };
        section_table.insert(key.to_string(), env_value(key, &value));
        applied.push(name);
    }
    applied.sort();
    Ok(applied)
}

/// Interprets an environment value: a list for list keys, else a TOML scalar when it parses as
/// one (`500`, `true`), else the text itself.
fn env_value(key: &str, value: &str) -> toml::Value {
    if LIST_KEYS.contains(&key) && !value.trim_start().starts_with('[') {
        return toml::Value::Array(
            value
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| toml::Value::String(s.to_string()))
                .collect(),
        );
    }
    match toml::from_str::<toml::Table>(&format!("v = {value}")) {
        Ok(mut parsed) => parsed
            .remove("v")
            .unwrap_or_else(|| toml::Value::String(value.into())),
        Err(_) => toml::Value::String(value.to_string()),
    }
}

/// Deserializes a humantime duration string (`"1s"`, `"250ms"`, `"10m"`).
fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
    humantime_serde::deserialize(deserializer)
}

/// Deserializes a list of humantime durations (`["1s", "10s", "1m"]`).
fn durations<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<Duration>, D::Error> {
    Vec::<String>::deserialize(deserializer)?
        .iter()
        .map(|text| {
            humantime::parse_duration(text)
                .map_err(|e| serde::de::Error::custom(format!("{text:?}: {e}")))
        })
        .collect()
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawConfig {
    database: RawDatabase,
    worker: RawWorker,
    retry: RawRetry,
    plugins: RawPlugins,
    log: RawLog,
    admin: admin::RawAdmin,
    retention: retention::RawRetention,
    #[serde(rename = "sink")]
    sinks: Vec<SinkConfig>,
    #[serde(rename = "route")]
    routes: Vec<RouteConfig>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawDatabase {
    url: String,
    table: String,
    max_connections: u32,
    #[serde(deserialize_with = "duration")]
    connect_timeout: Duration,
}

impl Default for RawDatabase {
    fn default() -> Self {
        RawDatabase {
            url: "sqlite://outboxd.db".into(),
            table: crate::store::DEFAULT_TABLE.into(),
            max_connections: 8,
            connect_timeout: crate::store::DEFAULT_CONNECT_TIMEOUT,
        }
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawWorker {
    app_codes: Vec<String>,
    batch_size: u32,
    #[serde(deserialize_with = "duration")]
    poll_interval: Duration,
    #[serde(deserialize_with = "duration")]
    lease: Duration,
    #[serde(deserialize_with = "duration")]
    publish_timeout: Duration,
    ordering: DeliveryOrder,
    concurrency: u32,
    node_id: Option<String>,
}

impl Default for RawWorker {
    fn default() -> Self {
        RawWorker {
            app_codes: vec![crate::record::DEFAULT_APP_CODE.into()],
            batch_size: 500,
            poll_interval: Duration::from_secs(1),
            lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(20),
            ordering: DeliveryOrder::None,
            concurrency: 1,
            node_id: None,
        }
    }
}

#[derive(Debug, Deserialize, Clone, Copy)]
#[serde(rename_all = "snake_case")]
enum RawStrategy {
    FixedInterval,
    Exponential,
    Schedule,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawRetry {
    strategy: RawStrategy,
    #[serde(deserialize_with = "duration")]
    interval: Duration,
    #[serde(deserialize_with = "duration")]
    base: Duration,
    #[serde(deserialize_with = "duration")]
    cap: Duration,
    #[serde(deserialize_with = "durations")]
    delays: Vec<Duration>,
    max_attempts: u32,
}

impl Default for RawRetry {
    fn default() -> Self {
        RawRetry {
            strategy: RawStrategy::Exponential,
            interval: Duration::from_secs(5),
            base: Duration::from_secs(1),
            cap: Duration::from_secs(600),
            delays: Vec::new(),
            max_attempts: 20,
        }
    }
}

#[derive(Debug, Deserialize, Default)]
#[serde(deny_unknown_fields, default)]
struct RawPlugins {
    cache_dir: Option<PathBuf>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, default)]
struct RawLog {
    format: LogFormat,
    level: String,
    #[serde(deserialize_with = "duration")]
    summary_interval: Duration,
}

impl Default for RawLog {
    fn default() -> Self {
        RawLog {
            format: LogFormat::Text,
            level: "info".into(),
            summary_interval: Duration::from_secs(60),
        }
    }
}

impl RawConfig {
    fn validate(self, base_dir: &Path) -> Result<Config, ConfigError> {
        let database = self.database.validate()?;
        let worker = self.worker.validate()?;
        let retry = self.retry.validate()?;
        let publishing = Publishing::new(self.sinks, self.routes, base_dir)?;
        deadlines::check(&worker, &publishing)?;
        let admin = self.admin.validate()?;
        let retention = self.retention.validate()?;
        if self.log.level.trim().is_empty() {
            return Err(invalid("log.level", "must not be empty"));
        }
        Ok(Config {
            database,
            worker,
            retry,
            plugins: PluginSettings {
                cache_dir: self.plugins.cache_dir.map(|dir| base_dir.join(dir)),
            },
            log: LogConfig {
                format: self.log.format,
                level: self.log.level,
                summary_interval: Some(self.log.summary_interval).filter(|i| !i.is_zero()),
            },
            admin,
            retention,
            publishing,
        })
    }
}

impl RawDatabase {
    fn validate(self) -> Result<DatabaseConfig, ConfigError> {
        crate::store::Backend::from_url(&self.url)
            .map_err(|e| invalid("database.url", e.to_string()))?;
        let table =
            TableName::new(&self.table).map_err(|e| invalid("database.table", e.to_string()))?;
        if !(1..=1000).contains(&self.max_connections) {
            return Err(invalid(
                "database.max_connections",
                format!("must be 1..=1000, got {}", self.max_connections),
            ));
        }
        if self.connect_timeout.is_zero() {
            return Err(invalid(
                "database.connect_timeout",
                "must be greater than 0",
            ));
        }
        Ok(DatabaseConfig {
            url: self.url,
            table,
            max_connections: self.max_connections,
            connect_timeout: self.connect_timeout,
        })
    }
}

impl RawWorker {
    fn validate(self) -> Result<WorkerConfig, ConfigError> {
        if self.app_codes.is_empty() {
            return Err(invalid(
                "worker.app_codes",
                "must name at least one app code",
            ));
        }
        for code in &self.app_codes {
            if code.is_empty() || code.len() > 64 || code.chars().any(char::is_whitespace) {
                return Err(invalid(
                    "worker.app_codes",
                    format!("{code:?} is not a valid app code (1–64 bytes, no spaces)"),
                ));
            }
        }
        if !(1..=5000).contains(&self.batch_size) {
            return Err(invalid(
                "worker.batch_size",
                format!("must be 1..=5000, got {}", self.batch_size),
            ));
        }
        if self.poll_interval.is_zero() {
            return Err(invalid("worker.poll_interval", "must be greater than 0"));
        }
        if self.publish_timeout.is_zero() {
            return Err(invalid("worker.publish_timeout", "must be greater than 0"));
        }
        if self.lease < self.publish_timeout + DEADLINE_MARGIN {
            return Err(invalid(
                "worker.lease",
                format!(
                    "must be at least worker.publish_timeout ({}) + {}, got {}",
                    humantime::format_duration(self.publish_timeout),
                    humantime::format_duration(DEADLINE_MARGIN),
                    humantime::format_duration(self.lease)
                ),
            ));
        }
        if !(1..=256).contains(&self.concurrency) {
            return Err(invalid(
                "worker.concurrency",
                format!("must be 1..=256, got {}", self.concurrency),
            ));
        }
        let node_id = match self.node_id {
            Some(id) if id.trim().is_empty() || id.len() > 100 => {
                return Err(invalid("worker.node_id", "must be 1–100 bytes"));
            }
            Some(id) => id,
            None => default_node_id(),
        };
        Ok(WorkerConfig {
            app_codes: self.app_codes,
            batch_size: self.batch_size,
            poll_interval: self.poll_interval,
            lease: self.lease,
            publish_timeout: self.publish_timeout,
            ordering: self.ordering,
            concurrency: self.concurrency,
            node_id,
        })
    }
}

impl RawRetry {
    fn validate(self) -> Result<RetryPolicy, ConfigError> {
        if self.max_attempts == 0 {
            return Err(invalid("retry.max_attempts", "must be at least 1"));
        }
        let strategy = match self.strategy {
            RawStrategy::FixedInterval => Strategy::FixedInterval {
                interval: self.interval,
            },
            RawStrategy::Exponential => {
                if self.base.is_zero() {
                    return Err(invalid("retry.base", "must be greater than 0"));
                }
                if self.cap < self.base {
                    return Err(invalid("retry.cap", "must be at least retry.base"));
                }
                Strategy::Exponential {
                    base: self.base,
                    cap: self.cap,
                }
            }
            RawStrategy::Schedule => {
                if self.delays.is_empty() {
                    return Err(invalid(
                        "retry.delays",
                        "strategy \"schedule\" needs at least one delay",
                    ));
                }
                Strategy::Schedule {
                    delays: self.delays,
                }
            }
        };
        Ok(RetryPolicy {
            strategy,
            max_attempts: self.max_attempts,
        })
    }
}

/// `<hostname>-<pid>`, the default node id.
fn default_node_id() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "outboxd".into());
    format!("{host}-{}", std::process::id())
}

#[cfg(test)]
mod tests;
