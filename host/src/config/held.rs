//! `worker.mode` ([`WorkerMode`]) and what `"held"` needs, checked once by config loading: a
//! database with row locks (PostgreSQL, MariaDB/MySQL, not SQLite) and a spare pooled connection
//! beside the one each worker loop keeps for the whole publish.

use serde::Deserialize;

use super::{ConfigError, DatabaseConfig, WorkerConfig, invalid};
use crate::store::Backend;

/// How a worker claims and marks a batch. In config: `worker.mode = "leased" | "held" |
/// "partitioned"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum WorkerMode {
    /// The claim leases its rows (`delivering`, `worker_id`, `lock_until_ms`) and commits; each
    /// sink's results are marked as it answers, fenced on the lease. A host that dies mid-publish
    /// spends an attempt when its rows are reclaimed after the lease.
    #[default]
    Leased,
    /// The claim's `SELECT … FOR UPDATE SKIP LOCKED` keeps its rows locked in an open
    /// transaction while they publish; one UPDATE (per 1000 rows) writes every result, then
    /// commit. A host that dies or hangs mid-publish rolls back: its rows are claimable again at
    /// once **without** an attempt counted. Refused on SQLite (config check).
    Held,
    /// Hosts own partitions of the tenant's rooms (leased on the database's clock, rebalanced by
    /// heartbeat) and read their partitions' due rows without writing them; each row is written
    /// once, with its outcome, fenced on the partition's owner and epoch. With per-room order a
    /// batch carries many events of a room, published in waves of one event per room. A host
    /// that dies mid-publish spends no attempt: the partition's next owner reads its rows again.
    Partitioned,
}

impl WorkerMode {
    /// The config value (`leased`, `held`, `partitioned`).
    pub fn as_str(self) -> &'static str {
        match self {
            WorkerMode::Leased => "leased",
            WorkerMode::Held => "held",
            WorkerMode::Partitioned => "partitioned",
        }
    }
}

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
