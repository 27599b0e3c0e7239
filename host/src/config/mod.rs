//! Configuration: built-in defaults → `outboxd.toml` → `OUTBOXD_*` environment, validated once.
//!
//! Every key has a default except a sink's plugin path. Environment overrides are named
//! `OUTBOXD_<SECTION>_<KEY>` for the sections `database`, `worker`, `retry`, `plugins`, `log`,
//! `admin`, `retention` and `telemetry`
//! (`OUTBOXD_DATABASE_URL`, `OUTBOXD_WORKER_BATCH_SIZE`, `OUTBOXD_RETRY_STRATEGY`, …); list keys
//! take comma-separated values (`OUTBOXD_WORKER_APP_CODES=live,ktv`). Any mistake is reported as
//! one [`ConfigError`] naming the key (or variable) at fault.

pub mod admin;
mod batch_size;
pub mod broker;
mod byte_size;
mod deadlines;
mod env;
mod options;
mod origin;
mod raw;
pub mod retention;
pub mod sink;
pub mod telemetry;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use env::apply_env;
use raw::{RawConfig, duration};

pub use admin::{AdminConfig, AdminToken, DEFAULT_ADMIN_LISTEN};
pub use batch_size::{DEFAULT_BATCH_SIZE, LEAST_DEFAULT_BATCH_SIZE};
pub use broker::{BrokerConfig, BrokerKind, BrokerLimits, BrokerSpec, BrokerTls, Secret};
pub use byte_size::ByteSize;
pub use deadlines::DEADLINE_MARGIN;
pub use origin::AllowedOrigin;
pub use retention::RetentionConfig;
pub use sink::{
    BreakerSettings, Publishing, RouteConfig, RouteSpec, SinkConfig, SinkLimits, SinkSpec,
};
pub use telemetry::{TelemetryConfig, TraceExport};

use crate::retry::{RetryPolicy, Strategy};
use crate::store::{DeliveryOrder, TableName};
use crate::wake::WakeMode;

/// Default `worker.idle_probe` on MySQL / MariaDB: an idle loop without a commit feed claims at
/// least this often (one index probe each).
pub const DEFAULT_IDLE_PROBE: Duration = Duration::from_millis(50);

/// Environment prefix of overrides.
pub const ENV_PREFIX: &str = "OUTBOXD_";

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
    /// `[telemetry]`: the host's spans over OTLP (with the `OTEL_*` environment) and the
    /// console's trace links.
    pub telemetry: TelemetryConfig,
    /// `[[sink]]`s (plugin paths resolved against the config file's folder) and `[[route]]`s,
    /// checked together.
    pub publishing: Publishing,
    /// `[[broker]]` connections, each sink's `limits.allow_brokers` checked against them.
    pub brokers: Vec<BrokerSpec>,
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
    /// Most rows per claim. Default [`DEFAULT_BATCH_SIZE`] (1000), lowered to what every sink's
    /// publish calls for one batch fit in `publish_timeout` (never below
    /// [`LEAST_DEFAULT_BATCH_SIZE`], 500).
    pub batch_size: u32,
    /// `batch_size` came from the default rule (not set in the file or the environment): a reload
    /// whose new sinks would change it keeps the running value as long as it still fits them.
    pub batch_size_is_default: bool,
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
    /// What may wake idle loops on MySQL / MariaDB: `auto` (the binlog where it can be followed,
    /// else the probe), `binlog` (refuse to start without it) or `probe`. Default `auto`.
    pub wake: WakeMode,
    /// Longest idle wait of a loop without a commit feed (the bound of its adaptive probe).
    /// Default [`DEFAULT_IDLE_PROBE`] (50 ms) on MySQL / MariaDB, the poll interval elsewhere;
    /// more than 0 and at most `poll_interval`.
    pub idle_probe: Duration,
}

/// `[plugins]`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PluginSettings {
    /// Where precompiled plugin artifacts are cached; default: the user cache folder.
    pub cache_dir: Option<PathBuf>,
    /// How long a sink may spend on one claimed batch, the search for a failing call's culprit
    /// included: `worker.publish_timeout` less [`DEADLINE_MARGIN`] (set by config loading;
    /// `None`: the plugin host's default, 19s).
    pub batch_budget: Option<Duration>,
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
        Config::load_with_database_url(path, env, None)
    }

    /// [`Config::load`], then `database_url` (the command line's `--database-url`, the top
    /// layer) over `database.url` when given, before validation: checks that depend on the
    /// database (`worker.wake`, the idle probe) see the URL outboxd will use.
    pub fn load_with_database_url(
        path: Option<&Path>,
        env: impl IntoIterator<Item = (String, String)>,
        database_url: Option<&str>,
    ) -> Result<Config, ConfigError> {
        let text = path
            .map(|path| {
                std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            })
            .transpose()?;
        let file = path.zip(text.as_deref());
        Config::from_parts(file, env, database_url)
    }

    /// [`Config::load`] of a file whose contents are `text`, without the file: the same parsing,
    /// environment overrides and validation, relative plugin paths taken as given (a file in the
    /// current folder). Errors name the origin `<text>`. For tools and tests that hold the TOML
    /// in memory, e.g. the config loader's fuzz target (`host/fuzz`, `make fuzz`).
    pub fn from_toml_str(
        text: &str,
        env: impl IntoIterator<Item = (String, String)>,
    ) -> Result<Config, ConfigError> {
        Config::from_parts(Some((Path::new("<text>"), text)), env, None)
    }

    /// The loading after the file is read: `file` is its path and contents (`None`: defaults).
    fn from_parts(
        file: Option<(&Path, &str)>,
        env: impl IntoIterator<Item = (String, String)>,
        database_url: Option<&str>,
    ) -> Result<Config, ConfigError> {
        let path = file.map(|(path, _)| path);
        let (mut table, origin) = match file {
            Some((path, text)) => {
                let table: toml::Table = toml::from_str(text).map_err(|e| ConfigError::Parse {
                    origin: path.display().to_string(),
                    message: e.to_string(),
                })?;
                (table, path.display().to_string())
            }
            None => (toml::Table::new(), "defaults".to_string()),
        };
        let env: Vec<(String, String)> = env.into_iter().collect();
        let applied = apply_env(&mut table, env.iter().cloned())?;
        if let Some(url) = database_url {
            let database = table
                .entry("database")
                .or_insert_with(|| toml::Value::Table(toml::Table::new()));
            match database {
                toml::Value::Table(database) => {
                    database.insert("url".into(), toml::Value::String(url.to_string()));
                }
                _ => return Err(invalid("database", "must be a table")),
            }
        }
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
        let lookup = |name: &str| {
            env.iter()
                .find(|(key, _)| key == name)
                .map(|(_, value)| value.clone())
        };
        raw.validate(base_dir, &lookup)
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

    /// What is valid but likely a mistake, one line each naming the keys; `outboxd run` logs
    /// them as warnings at start. Today: a sink whose breaker cannot open before a downstream
    /// outage dead-letters the events (`retry.max_attempts` ≤ its `breaker.failures`: every
    /// event of a few-events-at-a-time stream spends all its attempts in fewer failing batches
    /// than open the breaker).
    pub fn warnings(&self) -> Vec<String> {
        let attempts = self.retry.max_attempts;
        self.publishing
            .sinks()
            .iter()
            .enumerate()
            .filter(|(_, sink)| {
                let failures = sink.breaker().failures;
                failures > 0 && attempts <= failures
            })
            .map(|(index, sink)| {
                format!(
                    "retry.max_attempts ({attempts}) is not above sink[{index}].breaker.failures \
                     ({}) of sink `{}`: during a downstream outage an event can spend all its \
                     attempts and go to `failed` before the breaker opens; raise \
                     retry.max_attempts or lower breaker.failures",
                    sink.breaker().failures,
                    sink.name()
                )
            })
            .collect()
    }

    /// Defaults only (no file, no environment).
    pub fn defaults() -> Config {
        Config::load(None, std::iter::empty()).expect("built-in defaults are valid")
    }
}

#[cfg(test)]
mod fuzz_regressions;
#[cfg(test)]
mod tests;
