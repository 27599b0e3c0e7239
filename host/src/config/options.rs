//! The library's options types derived from a loaded [`Config`], each in one function: what the
//! store connects with and what the worker runs with.

use super::Config;
use crate::store::ConnectOptions;
use crate::worker::WorkerOptions;

impl Config {
    /// The store's connection options: `[database]`.
    pub fn connect_options(&self) -> ConnectOptions {
        ConnectOptions {
            url: self.database.url.clone(),
            table: self.database.table.clone(),
            max_connections: self.database.max_connections,
            connect_timeout: self.database.connect_timeout,
        }
    }

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
            mode: worker.mode,
            concurrency: worker.concurrency,
            node_id: worker.node_id.clone(),
        }
    }
}
