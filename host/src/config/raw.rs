//! The file format (`Raw*`: what `outboxd.toml` may say, every key defaulted) and its validation
//! into the public [`super::Config`] types.

use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use super::*;

/// Deserializes a humantime duration string (`"1s"`, `"250ms"`, `"10m"`).
pub(super) fn duration<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Duration, D::Error> {
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
pub(super) struct RawConfig {
    database: RawDatabase,
    worker: RawWorker,
    retry: RawRetry,
    plugins: RawPlugins,
    log: RawLog,
    admin: admin::RawAdmin,
    retention: retention::RawRetention,
    telemetry: super::telemetry::RawTelemetry,
    #[serde(rename = "sink")]
    sinks: Vec<SinkConfig>,
    #[serde(rename = "route")]
    routes: Vec<RouteConfig>,
    #[serde(rename = "broker")]
    brokers: Vec<BrokerConfig>,
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
    /// `None`: the default rule ([`batch_size::default_batch_size`]).
    batch_size: Option<u32>,
    #[serde(deserialize_with = "duration")]
    poll_interval: Duration,
    #[serde(deserialize_with = "duration")]
    lease: Duration,
    #[serde(deserialize_with = "duration")]
    publish_timeout: Duration,
    ordering: DeliveryOrder,
    /// Removed (one design); `"partitioned"` is accepted, anything else refused by name.
    mode: Option<String>,
    concurrency: u32,
    node_id: Option<String>,
    /// Default of every sink's `limits.max_batch_bytes`.
    max_batch_bytes: Option<ByteSize>,
    wake: WakeMode,
    /// `None`: the default ([`DEFAULT_IDLE_PROBE`] on MySQL / MariaDB, else the poll interval).
    #[serde(with = "humantime_serde")]
    idle_probe: Option<Duration>,
}

impl Default for RawWorker {
    fn default() -> Self {
        RawWorker {
            app_codes: vec![crate::record::DEFAULT_APP_CODE.into()],
            batch_size: None,
            poll_interval: Duration::from_secs(1),
            lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(20),
            ordering: DeliveryOrder::None,
            mode: None,
            concurrency: 1,
            node_id: None,
            max_batch_bytes: None,
            wake: WakeMode::Auto,
            idle_probe: None,
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
    /// Checks every section; `env` reads the variables `[[broker]]` passwords come from.
    pub(super) fn validate(
        self,
        base_dir: &Path,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Config, ConfigError> {
        let database = self.database.validate()?;
        let mut publishing = Publishing::new(self.sinks, self.routes, base_dir)?;
        let brokers = broker::check_brokers(self.brokers, publishing.sinks(), base_dir, env)?;
        if let Some(bytes) = self.worker.max_batch_bytes {
            publishing.default_batch_bytes(bytes)?;
        }
        let worker = self.worker.validate(&publishing, &database)?;
        let retry = self.retry.validate()?;
        deadlines::check(&worker, &publishing)?;
        let admin = self.admin.validate()?;
        let retention = self.retention.validate()?;
        let telemetry = self.telemetry.validate(env)?;
        if self.log.level.trim().is_empty() {
            return Err(invalid("log.level", "must not be empty"));
        }
        let batch_budget = Some(worker.publish_timeout.saturating_sub(DEADLINE_MARGIN));
        Ok(Config {
            database,
            worker,
            retry,
            plugins: PluginSettings {
                cache_dir: self.plugins.cache_dir.map(|dir| base_dir.join(dir)),
                batch_budget,
            },
            log: LogConfig {
                format: self.log.format,
                level: self.log.level,
                summary_interval: Some(self.log.summary_interval).filter(|i| !i.is_zero()),
            },
            admin,
            retention,
            telemetry,
            publishing,
            brokers,
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
    /// Checks the keys; `publishing` decides the default batch size, `database` the default idle
    /// probe and whether `wake` applies.
    fn validate(
        self,
        publishing: &Publishing,
        database: &DatabaseConfig,
    ) -> Result<WorkerConfig, ConfigError> {
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
        if let Some(size) = self.batch_size
            && !(1..=5000).contains(&size)
        {
            return Err(invalid(
                "worker.batch_size",
                format!("must be 1..=5000, got {size}"),
            ));
        }
        if let Some(mode) = self.mode.as_deref().filter(|mode| *mode != "partitioned") {
            return Err(invalid(
                "worker.mode",
                format!(
                    "{mode:?} is no longer a mode: hosts own partitions of rooms, the one design \
                     (docs/operate/partitions.md); delete the key"
                ),
            ));
        }
        if self.poll_interval.is_zero() {
            return Err(invalid("worker.poll_interval", "must be greater than 0"));
        }
        if self.publish_timeout.is_zero() {
            return Err(invalid("worker.publish_timeout", "must be greater than 0"));
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
        let has_binlog = crate::store::Backend::from_url(&database.url)
            .is_ok_and(|b| b.commit_feed() == crate::store::CommitFeed::Binlog);
        if self.wake == WakeMode::Binlog && !has_binlog {
            return Err(invalid(
                "worker.wake",
                "\"binlog\" needs a MySQL or MariaDB database.url (PostgreSQL and SQLite use \
                 their own commit feed); use \"auto\"",
            ));
        }
        let idle_probe = match self.idle_probe {
            Some(probe) if probe.is_zero() => {
                return Err(invalid("worker.idle_probe", "must be greater than 0"));
            }
            Some(probe) if probe > self.poll_interval => {
                return Err(invalid(
                    "worker.idle_probe",
                    format!(
                        "must be at most worker.poll_interval ({}), got {}",
                        humantime::format_duration(self.poll_interval),
                        humantime::format_duration(probe)
                    ),
                ));
            }
            Some(probe) => probe,
            None if has_binlog => DEFAULT_IDLE_PROBE.min(self.poll_interval),
            None => self.poll_interval,
        };
        let batch_size = self
            .batch_size
            .unwrap_or_else(|| batch_size::default_batch_size(publishing, self.publish_timeout));
        Ok(WorkerConfig {
            app_codes: self.app_codes,
            batch_size,
            batch_size_is_default: self.batch_size.is_none(),
            poll_interval: self.poll_interval,
            lease: self.lease,
            publish_timeout: self.publish_timeout,
            ordering: self.ordering,
            concurrency: self.concurrency,
            node_id,
            wake: self.wake,
            idle_probe,
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
