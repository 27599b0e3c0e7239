//! `outboxd run` as a service: the admin listener, the status refresher, retention, the sinks,
//! the worker and the summary line, started together and stopped by one shutdown token.
//!
//! Order: the admin listener binds first (so `/healthz` answers while plugins compile and
//! `/readyz` says what is missing), then the refresher checks the database, then the sinks start
//! and readiness turns on, then the worker claims. On shutdown the worker finishes its batches in
//! flight, then the background tasks stop.

use std::net::SocketAddr;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::admin::{AdminListener, AdminState, BindError, Readiness};
use crate::config::Config;
use crate::metrics::Metrics;
use crate::monitor::{StatusRefresher, StatusSnapshot, log_summaries};
use crate::plugin::{PluginError, load_publisher_with_metrics};
use crate::retention::Retention;
use crate::store::OutboxStore;
use crate::worker::{BatchStats, RunMode, Worker, WorkerError, WorkerOptions};

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
}

/// A host ready to run: configuration, store, metrics, and the bound admin listener.
pub struct Service {
    config: Config,
    store: Arc<dyn OutboxStore>,
    metrics: Metrics,
    readiness: Arc<Readiness>,
    admin: Option<AdminListener>,
}

impl Service {
    /// Binds the admin listener (when `admin.listen` is set) over a connected `store`.
    pub async fn bind(
        config: Config,
        store: Arc<dyn OutboxStore>,
    ) -> Result<Service, ServiceError> {
        let admin = match config.admin.listen {
            Some(addr) => Some(AdminListener::bind(addr).await?),
            None => None,
        };
        Ok(Service {
            config,
            store,
            metrics: Metrics::new(),
            readiness: Readiness::new(),
            admin,
        })
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
        } = self;
        if let Some(listener) = admin {
            let state = AdminState {
                metrics: metrics.clone(),
                readiness: readiness.clone(),
                reload: None,
            };
            tracker.spawn(listener.serve(state, background.clone()));
        }
        let snapshot = StatusSnapshot::default();
        let refresher = StatusRefresher {
            store: store.clone(),
            app_codes: config.worker.app_codes.clone(),
            interval: config.admin.refresh_interval,
            metrics: metrics.clone(),
            readiness: readiness.clone(),
            snapshot: snapshot.clone(),
        };
        tracker.spawn(refresher.run(background.clone()));
        let retention = Retention {
            store: store.clone(),
            app_codes: config.worker.app_codes.clone(),
            config: config.retention.clone(),
            metrics: metrics.clone(),
        };
        tracker.spawn(retention.run(background.clone()));
        let publisher =
            load_publisher_with_metrics(&config.sinks, &config.routes, &config.plugins, &metrics)
                .await?;
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
        let worker = Worker::new(store, publisher, WorkerOptions::from_config(&config))
            .with_metrics(metrics);
        Ok(worker.run(mode, shutdown).await?)
    }
}
