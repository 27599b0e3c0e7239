//! The worker's options derived from a loaded [`Config`]: `[worker]` and `[retry]`. Here, beside
//! the worker, so that the configuration does not depend on the worker.

use super::WorkerOptions;
use crate::config::Config;

impl Config {
    /// The worker's options: `[worker]` and `[retry]`.
    pub fn worker_options(&self) -> WorkerOptions {
        let worker = &self.worker;
        WorkerOptions {
            app_codes: worker.app_codes.clone(),
            batch_size: worker.batch_size,
            poll_interval: worker.poll_interval,
            idle_probe: worker.idle_probe,
            lease: worker.lease,
            publish_timeout: worker.publish_timeout,
            retry: self.retry.clone(),
            ordering: worker.ordering,
            concurrency: worker.concurrency,
            node_id: worker.node_id.clone(),
        }
    }
}
