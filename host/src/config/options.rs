//! The store's connection options derived from a loaded [`Config`] (the worker's are in
//! `worker/options.rs`, beside the worker).

use super::Config;
use crate::store::ConnectOptions;

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
}
