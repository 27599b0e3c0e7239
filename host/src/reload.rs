//! Hot reload (`SIGHUP`, `POST /reload`): re-read the config file and the plugin files, start
//! the new sink set beside the running one, and swap it in atomically.
//!
//! Sinks (plugins, their config, limits and breakers) and routes may change. Every other setting
//! needs a restart; a reload that changes one is refused naming the keys. A config that does not
//! validate, or a plugin that does not load or whose `init` fails, is refused with one error line
//! and the running set keeps serving. Batches in flight finish on the set they started with
//! ([`SwappablePublisher`]). Breaker state starts afresh with the new set; a paused sink stays
//! paused ([`SinkControls`]). [`Loaded`] holds the set serving now, for the console.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use sha2::{Digest, Sha256};
use tokio::sync::Mutex;
use tracing::{error, info};

use crate::broker::Brokers;
use crate::config::Config;
use crate::metrics::Metrics;
use crate::plugin::{SinkControls, SwappablePublisher, load_publisher_with};
use crate::record::now_ms;

/// What `POST /reload` (and the console's Reload button) runs: `Ok(summary)` when the new set is
/// serving, `Err(reason)` when it was refused (the running set keeps serving).
pub type ReloadFn =
    Arc<dyn Fn() -> futures::future::BoxFuture<'static, Result<String, String>> + Send + Sync>;

/// Reads the configuration again (file, environment, command-line overrides), or says why not.
pub type ConfigSource = Arc<dyn Fn() -> Result<Config, String> + Send + Sync>;

/// The configuration the running sinks were started from, with each plugin file's sha256 as read
/// right after they started: what the console's Sinks page shows.
#[derive(Debug, Clone)]
pub struct LoadedSet {
    /// The configuration (sinks, routes and the rest).
    pub config: Config,
    /// Hex sha256 of each sink's plugin file, by sink name (absent: the file could not be read).
    pub plugin_sha256: BTreeMap<String, String>,
    /// When the set started serving, UTC ms.
    pub loaded_at_ms: i64,
}

/// The sink set serving now ([`LoadedSet`]), replaced by every reload that succeeds.
#[derive(Debug, Default)]
pub struct Loaded {
    current: RwLock<Option<Arc<LoadedSet>>>,
}

impl Loaded {
    /// Nothing loaded yet.
    pub fn new() -> Arc<Loaded> {
        Arc::new(Loaded::default())
    }

    /// Records that the sinks of `config` serve from now on.
    pub fn set(&self, config: &Config) {
        let plugin_sha256 = config
            .publishing
            .sinks()
            .iter()
            .filter_map(|sink| {
                let bytes = std::fs::read(sink.plugin()).ok()?;
                Some((sink.name().to_string(), hex::encode(Sha256::digest(&bytes))))
            })
            .collect();
        let set = LoadedSet {
            config: config.clone(),
            plugin_sha256,
            loaded_at_ms: now_ms(),
        };
        if let Ok(mut current) = self.current.write() {
            *current = Some(Arc::new(set));
        }
    }

    /// The set serving now; `None` while the sinks start.
    pub fn get(&self) -> Option<Arc<LoadedSet>> {
        self.current.read().ok()?.clone()
    }
}

/// Reloads the sinks of one running service.
pub struct Reloader {
    source: ConfigSource,
    running: Mutex<Config>,
    publisher: Arc<SwappablePublisher>,
    metrics: Metrics,
    controls: Arc<SinkControls>,
    loaded: Arc<Loaded>,
    brokers: Brokers,
}

impl Reloader {
    /// A reloader for a service running `config` through `publisher`, its sinks switched by
    /// `controls` (kept across reloads), recording each new set in `loaded`.
    pub fn new(
        source: ConfigSource,
        config: Config,
        publisher: Arc<SwappablePublisher>,
        metrics: Metrics,
        controls: Arc<SinkControls>,
        loaded: Arc<Loaded>,
    ) -> Reloader {
        Reloader {
            source,
            running: Mutex::new(config),
            publisher,
            metrics,
            controls,
            loaded,
            brokers: Brokers::none(),
        }
    }

    /// The same reloader starting new sinks on the running `brokers` (a `[[broker]]` change
    /// itself needs a restart).
    pub fn with_brokers(mut self, brokers: Brokers) -> Reloader {
        self.brokers = brokers;
        self
    }

    /// One reload: `Ok(summary)` once the new set serves, `Err(reason)` (one line, logged) when
    /// refused. Reloads run one at a time.
    pub async fn reload(&self) -> Result<String, String> {
        let mut running = self.running.lock().await;
        let outcome = self.try_reload(&running).await;
        match outcome {
            Ok(next) => {
                let summary = format!(
                    "reloaded: {} sinks ({}), {} routes",
                    next.publishing.sinks().len(),
                    next.publishing
                        .sinks()
                        .iter()
                        .map(|s| s.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                    next.publishing.routes().len()
                );
                info!("{summary}");
                *running = next;
                Ok(summary)
            }
            Err(reason) => {
                error!(error = %reason, "reload refused; the running sinks keep serving");
                Err(reason)
            }
        }
    }

    async fn try_reload(&self, running: &Config) -> Result<Config, String> {
        let mut next = (self.source)()?;
        next.keep_running_default_batch(running);
        let changed = restart_only_changes(running, &next);
        if !changed.is_empty() {
            return Err(format!(
                "settings that need a restart changed: {} (restart outboxd to apply them)",
                changed.join(", ")
            ));
        }
        let publisher = load_publisher_with(
            &next.publishing,
            &next.plugins,
            &self.metrics,
            &self.controls,
            &self.brokers,
        )
        .await
        .map_err(|e| one_line(&e))?;
        self.publisher.swap(publisher);
        self.loaded.set(&next);
        Ok(next)
    }
}

/// The error and its sources on one line.
fn one_line(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text.replace('\n', " ")
}

/// The keys (or sections) outside `[[sink]]` and `[[route]]` that differ.
pub fn restart_only_changes(running: &Config, next: &Config) -> Vec<&'static str> {
    let (a, b) = (running, next);
    let checks: [(&'static str, bool); 18] = [
        ("database.url", a.database.url != b.database.url),
        ("database.table", a.database.table != b.database.table),
        (
            "database.max_connections",
            a.database.max_connections != b.database.max_connections,
        ),
        ("worker.app_codes", a.worker.app_codes != b.worker.app_codes),
        (
            if b.worker.batch_size_is_default {
                "worker.batch_size (not set: its default follows the sinks' limits)"
            } else {
                "worker.batch_size"
            },
            a.worker.batch_size != b.worker.batch_size,
        ),
        (
            "worker.poll_interval",
            a.worker.poll_interval != b.worker.poll_interval,
        ),
        ("worker.lease", a.worker.lease != b.worker.lease),
        (
            "worker.publish_timeout",
            a.worker.publish_timeout != b.worker.publish_timeout,
        ),
        ("worker.ordering", a.worker.ordering != b.worker.ordering),
        (
            "worker.concurrency",
            a.worker.concurrency != b.worker.concurrency,
        ),
        ("worker.node_id", a.worker.node_id != b.worker.node_id),
        ("retry", a.retry != b.retry),
        (
            "plugins.cache_dir",
            a.plugins.cache_dir != b.plugins.cache_dir,
        ),
        ("log", a.log != b.log),
        ("admin", a.admin != b.admin),
        ("retention", a.retention != b.retention),
        ("broker", a.brokers != b.brokers),
        // The exporter starts with the worker; the console's `trace_url` reloads.
        ("telemetry", a.telemetry.traces != b.telemetry.traces),
    ];
    let mut changed: Vec<&'static str> = checks
        .into_iter()
        .filter(|(_, changed)| *changed)
        .map(|(key, _)| key)
        .collect();
    // Whether the batch size was set or defaulted is no change in itself: only its value is.
    let same_origin = crate::config::WorkerConfig {
        batch_size_is_default: a.worker.batch_size_is_default,
        ..b.worker.clone()
    };
    // A key not named above (e.g. database.connect_timeout, or one added later) is still never
    // applied silently: its section is named instead.
    let sections = [
        ("database", a.database != b.database),
        ("worker", a.worker != same_origin),
    ];
    for (section, differs) in sections {
        let named = changed.iter().any(|key| {
            key.strip_prefix(section)
                .is_some_and(|k| k.starts_with('.'))
        });
        if differs && !named {
            changed.push(section);
        }
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_only_settings_are_named() {
        let running = Config::defaults();
        let mut next = running.clone();
        assert!(restart_only_changes(&running, &next).is_empty());
        next.publishing =
            crate::config::Publishing::new(Vec::new(), Vec::new(), std::path::Path::new(""))
                .expect("an empty publishing section is valid");
        assert!(restart_only_changes(&running, &next).is_empty());
        next.database.url = "postgres://db/x".into();
        next.worker.app_codes = vec!["other".into()];
        assert_eq!(
            restart_only_changes(&running, &next),
            vec!["database.url", "worker.app_codes"]
        );
        let mut tracing = running.clone();
        tracing.telemetry.trace_url = Some("http://ui/{trace_id}".into());
        assert!(
            restart_only_changes(&running, &tracing).is_empty(),
            "trace_url reloads"
        );
        tracing.telemetry.traces = Some(crate::config::TraceExport {
            endpoint: "http://collector:4318/v1/traces".into(),
            service_name: "outboxd".into(),
            resource: Vec::new(),
            sampling_ratio: 1.0,
            headers: Default::default(),
            timeout: std::time::Duration::from_secs(10),
            queue_size: 65_536,
        });
        assert_eq!(restart_only_changes(&running, &tracing), vec!["telemetry"]);
        let mut timeout_only = running.clone();
        timeout_only.database.connect_timeout += std::time::Duration::from_secs(1);
        assert_eq!(
            restart_only_changes(&running, &timeout_only),
            vec!["database"],
            "a key without its own check is refused by its section"
        );
    }

    #[test]
    fn a_batch_size_is_named_by_its_value_not_by_where_it_came_from() {
        let running = Config::defaults();
        let mut set_to_the_default = running.clone();
        set_to_the_default.worker.batch_size_is_default = false;
        assert!(restart_only_changes(&running, &set_to_the_default).is_empty());
        let mut moved = running.clone();
        moved.worker.batch_size = 600;
        assert_eq!(
            restart_only_changes(&running, &moved),
            vec!["worker.batch_size (not set: its default follows the sinks' limits)"]
        );
        set_to_the_default.worker.batch_size = 600;
        assert_eq!(
            restart_only_changes(&running, &set_to_the_default),
            vec!["worker.batch_size"]
        );
    }
}
