//! `outboxd run` as a service: the admin listener (with the console), the status refresher,
//! retention, the sinks, the worker and the summary line, started together and stopped by one
//! shutdown token.
//!
//! Order: the admin listener binds first (so `/healthz` answers while plugins compile and
//! `/readyz` says what is missing), then the refresher checks the database, then the sinks start
//! and readiness turns on, then the worker claims. On shutdown the worker finishes its batches in
//! flight, then the background tasks stop.

use std::net::SocketAddr;
use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{AdminListener, AdminState, BindError, Readiness};
use crate::broker::Brokers;
use crate::config::Config;
use crate::console::{Console, ConsoleParts};
use crate::metrics::Metrics;
use crate::monitor::{StatusRefresher, StatusSnapshot, log_summaries, report_brokers, report_wake};
use crate::plugin::{PluginError, SinkControls, SwappablePublisher, load_publisher_with};
use crate::reload::{ConfigSource, Loaded, ReloadFn, Reloader};
use crate::retention::Retention;
use crate::store::OutboxStore;
use crate::telemetry::{Telemetry, TelemetryError};
use crate::wake::Wake;
use crate::worker::{BatchStats, RunMode, Worker, WorkerError};

/// Why the service could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    /// The admin listener could not bind.
    #[error(transparent)]
    Admin(#[from] BindError),
    /// A sink could not start.
    #[error("cannot load sink plugins")]
    Plugins(#[from] PluginError),
    /// The worker stopped with an error (draining runs only).
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// Tracing was configured and could not start.
    #[error(transparent)]
    Telemetry(#[from] TelemetryError),
}

/// A host ready to run: configuration, store, metrics, and the bound admin listener.
pub struct Service {
    config: Config,
    store: Arc<dyn OutboxStore>,
    metrics: Metrics,
    readiness: Arc<Readiness>,
    admin: Option<AdminListener>,
    reload_source: Option<ConfigSource>,
    wake: Wake,
}

impl Service {
    /// Binds the admin listener (when `admin.listen` is set) over a connected `store`. When the
    /// default address is taken (another host on this machine: a `run --drain` beside the
    /// service, two instances of a systemd template), logs one warning and runs without the
    /// listener; an address set explicitly that cannot be bound is an error.
    pub async fn bind(
        config: Config,
        store: Arc<dyn OutboxStore>,
    ) -> Result<Service, ServiceError> {
        let admin = match config.admin.listen {
            Some(addr) => match AdminListener::bind(addr).await {
                Ok(listener) => Some(listener),
                Err(error)
                    if !config.admin.listen_is_explicit
                        && error.source.kind() == std::io::ErrorKind::AddrInUse =>
                {
                    tracing::warn!(%addr, "the default admin address is taken (another outboxd on this machine?): running without the admin listener (no /metrics, /healthz, /readyz, /reload); set [admin] listen to a free port, or \"\" to turn it off and silence this");
                    None
                }
                Err(error) => return Err(error.into()),
            },
            None => None,
        };
        Ok(Service {
            config,
            store,
            metrics: Metrics::new(),
            readiness: Readiness::new(),
            admin,
            reload_source: None,
            wake: Wake::new(),
        })
    }

    /// Enables hot reload (`SIGHUP` and `POST /reload`), re-reading the configuration from
    /// `source`.
    pub fn with_reload(mut self, source: ConfigSource) -> Service {
        self.reload_source = Some(source);
        self
    }

    /// Wakes the worker's idle loops through `wake` (fed by a commit feed,
    /// [`crate::wake::start_commit_feed`]).
    pub fn with_wake(mut self, wake: Wake) -> Service {
        self.wake = wake;
        self
    }

    /// Where the admin listener is bound, if it is on.
    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin.as_ref().and_then(|a| a.local_addr().ok())
    }

    /// The metrics this service reports to.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Runs until `shutdown` (or, in [`RunMode::Drain`], until nothing is claimable). Returns
    /// what the worker did.
    pub async fn run(
        self,
        mode: RunMode,
        shutdown: CancellationToken,
    ) -> Result<BatchStats, ServiceError> {
        let background = CancellationToken::new();
        let tracker = TaskTracker::new();
        let result = self.run_inner(mode, shutdown, &background, &tracker).await;
        background.cancel();
        tracker.close();
        tracker.wait().await;
        result
    }

    async fn run_inner(
        self,
        mode: RunMode,
        shutdown: CancellationToken,
        background: &CancellationToken,
        tracker: &TaskTracker,
    ) -> Result<BatchStats, ServiceError> {
        let Service {
            config,
            store,
            metrics,
            readiness,
            admin,
            reload_source,
            wake,
        } = self;
        // Set once the sinks have started; reload requests before that are refused.
        let reloader: Arc<OnceLock<Arc<Reloader>>> = Arc::new(OnceLock::new());
        if reload_source.is_some() {
            tracker.spawn(reload_on_sighup(reloader.clone(), background.clone()));
        }
        let snapshot = StatusSnapshot::default();
        let controls = SinkControls::new();
        let loaded = Loaded::new();
        if let Some(listener) = admin {
            let reload = reload_source.as_ref().map(|_| reload_fn(reloader.clone()));
            let console = config.admin.console.then(|| {
                Console::new(ConsoleParts {
                    store: store.clone(),
                    app_codes: config.worker.app_codes.clone(),
                    node_id: config.worker.node_id.clone(),
                    metrics: metrics.clone(),
                    snapshot: snapshot.clone(),
                    loaded: loaded.clone(),
                    controls: controls.clone(),
                    reload: reload.clone(),
                    admin: config.admin.clone(),
                })
            });
            let state = AdminState {
                metrics: metrics.clone(),
                readiness: readiness.clone(),
                reload,
                console,
            };
            tracker.spawn(listener.serve(state, background.clone()));
        }
        let refresher = StatusRefresher {
            store: store.clone(),
            app_codes: config.worker.app_codes.clone(),
            interval: config.admin.refresh_interval,
            metrics: metrics.clone(),
            readiness: readiness.clone(),
            snapshot: snapshot.clone(),
        };
        tracker.spawn(refresher.run(background.clone()));
        tracker.spawn(report_wake(
            wake.clone(),
            metrics.clone(),
            readiness.clone(),
            background.clone(),
        ));
        let retention = Retention {
            store: store.clone(),
            app_codes: config.worker.app_codes.clone(),
            config: config.retention.clone(),
            metrics: metrics.clone(),
        };
        tracker.spawn(retention.run(background.clone()));
        // Opened once for the process: reloaded sinks share them; closed when `run` ends.
        let brokers = Brokers::open(&config.brokers, &metrics);
        let _close_brokers = CloseOnDrop(brokers.clone());
        tracker.spawn(report_brokers(
            brokers.clone(),
            readiness.clone(),
            background.clone(),
        ));
        let publisher = load_publisher_with(
            &config.publishing,
            &config.plugins,
            &metrics,
            &controls,
            &brokers,
        )
        .await?;
        let publisher = Arc::new(SwappablePublisher::new(publisher));
        loaded.set(&config);
        if let Some(source) = reload_source {
            let _ = reloader.set(Arc::new(
                Reloader::new(
                    source,
                    config.clone(),
                    publisher.clone(),
                    metrics.clone(),
                    controls,
                    loaded,
                )
                .with_brokers(brokers.clone()),
            ));
        }
        readiness.set_sinks_started(true);
        if let Some(interval) = config.log.summary_interval {
            tracker.spawn(log_summaries(
                metrics.clone(),
                config.worker.app_codes.clone(),
                snapshot,
                interval,
                background.clone(),
            ));
        }
        if mode == RunMode::Drain {
            tracker.spawn(crate::progress::drain_progress(
                store.clone(),
                config.worker.app_codes.clone(),
                metrics.clone(),
                background.clone(),
            ));
        }
        let telemetry = Telemetry::start(
            config.telemetry.traces.as_ref(),
            &config.worker.node_id,
            &metrics,
        )?;
        let worker = Worker::new(store, publisher, config.worker_options())
            .with_metrics(metrics)
            .with_wake(wake)
            .with_telemetry(telemetry.clone());
        let result = worker.run(mode, shutdown).await;
        // The last spans go out before the process does (at most a few seconds).
        telemetry.shutdown().await;
        Ok(result?)
    }
}

/// Closes the broker connections when `run` ends, however it ends.
struct CloseOnDrop(Brokers);

impl Drop for CloseOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// `POST /reload`: runs the reloader once it exists.
fn reload_fn(reloader: Arc<OnceLock<Arc<Reloader>>>) -> ReloadFn {
    Arc::new(move || {
        let reloader = reloader.clone();
        Box::pin(async move {
            match reloader.get() {
                Some(reloader) => reloader.reload().await,
                None => Err("the sinks are still starting; try again".to_string()),
            }
        })
    })
}

/// Reloads on every `SIGHUP` until `shutdown` (installed before the sinks start, so a `SIGHUP`
/// never kills the process).
async fn reload_on_sighup(reloader: Arc<OnceLock<Arc<Reloader>>>, shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut hangup) = signal(SignalKind::hangup()) else {
        tracing::warn!("cannot install the SIGHUP handler; use POST /reload");
        return;
    };
    loop {
        tokio::select! {
            _ = shutdown.cancelled() => return,
            received = hangup.recv() => if received.is_none() { return },
        }
        tracing::info!("SIGHUP: reloading the configuration and plugins");
        match reloader.get() {
            Some(reloader) => {
                let _ = reloader.reload().await; // logged either way
            }
            None => tracing::warn!("SIGHUP ignored: the sinks are still starting"),
        }
    }
}
