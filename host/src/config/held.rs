//! `worker.mode = "held"` needs, checked once by config loading: a database with row locks
//! (PostgreSQL, MariaDB/MySQL, not SQLite) and a spare pooled connection beside the one each
//! worker loop keeps for the whole publish.

use super::{ConfigError, DatabaseConfig, WorkerConfig, invalid};
use crate::store::Backend;
use crate::worker::WorkerMode;

/// Refuses held mode on SQLite (its open transaction would hold the database's only write lock
/// while plugins publish, stopping every producer for up to `worker.publish_timeout`) and when
/// `database.max_connections` does not exceed `worker.concurrency` (each loop holds a connection
/// while its batch publishes; the status refresher, retention and `counts` need one more).
pub(super) fn check(worker: &WorkerConfig, database: &DatabaseConfig) -> Result<(), ConfigError> {
    if worker.mode != WorkerMode::Held {
        return Ok(());
    }
    if Backend::from_url(&database.url).is_ok_and(|backend| !backend.holds_claims()) {
        return Err(invalid(
            "worker.mode",
            "\"held\" needs row locks (PostgreSQL, MariaDB/MySQL); on SQLite its open transaction \
             would hold the database's only write lock while plugins publish, stopping every \
             producer: use \"leased\"",
        ));
    }
    if database.max_connections <= worker.concurrency {
        return Err(invalid(
            "worker.mode",
            format!(
                "\"held\" keeps one connection per worker loop while its batch publishes: \
                 database.max_connections ({}) must exceed worker.concurrency ({})",
                database.max_connections, worker.concurrency
            ),
        ));
    }
    Ok(())
}
