//! The database contract: one [`OutboxStore`] trait, its params and results, [`StoreError`].
//!
//! What each database does is in its folder ([`sqlite`], [`mysql`], [`postgres`]); the
//! operations are written once over them (`exec*.rs`, over `driver.rs`), their statements in
//! `statement/`; docs/ARCHITECTURE.md maps every file. Every backend passes the same conformance
//! suite (`tests/conformance/`). Methods take one params struct and an explicit `now_ms`, so
//! behaviour that depends on time is tested without sleeping.
//!
//! # Partitions
//! Every row belongs to one partition of its tenant, derived by the database from `room_id`.
//! Hosts lease partitions ([`OutboxStore::rebalance`]; `partitions.rs` tells how) and read owned
//! partitions' due rows without writing them ([`OutboxStore::read_partitions`]), merged by
//! `(created_at_ms, event_id)`: `pending` rows (with per-room order, of rooms with nothing
//! retryable or delivering), `retryable` rows whose retry is due, and `delivering` rows whose
//! lease expired (an earlier version's host), read as an attempt (`retry_count + 1`; at
//! `max_attempts`, `failed`). A row whose envelope is empty, does not decode, or disagrees with
//! its row (app_code, event_id, event_type, room_id) goes to `failed`
//! ([`ClaimBatch::rejected`]); the rest of the batch flows.
//!
//! # Mark
//! One statement per call, fenced on each row's partition: a row changes only while the reading
//! host still owns its partition at the epoch it read it with, and the row is still live; the
//! others are reported as stale. The worker marks a batch in parts (each sink's results as that
//! sink answers), so one batch may take several mark calls.
//!
//! # Who retries what
//! Transient database errors ([`StoreError::is_transient`]) are retried by the store and only
//! there (`driver.rs`): a mark while the partition's lease holds, also when the database cannot
//! be reached ([`StoreError::is_unreachable`]), since its results exist nowhere else; each write
//! of a heartbeat for up to 2 s. The worker never retries a store call: an error ends the round,
//! and the rows of a batch whose mark failed are still due: read again, no attempt spent.

mod backend;
mod browse;
mod connect;
mod driver;
mod error;
mod exec;
mod exec_browse;
mod exec_mark;
mod exec_partitions;
mod impl_store;
pub mod internals;
mod judge;
mod maintenance;
mod migration;
pub mod mysql;
mod partitions;
pub mod postgres;
mod row;
pub(crate) mod schema;
mod session;
pub mod sqlite;
pub(crate) mod statement;
mod table_name;

use async_trait::async_trait;
use serde::Deserialize;

use crate::publish::Event;
use crate::record::Record;

pub use backend::connect;
pub use browse::{
    DeleteFailedParams, ErrorGroup, ErrorGroupsParams, EventCursor, EventDetail, EventPage,
    EventQuery, EventSummary,
};
pub use connect::{ConnectOptions, DEFAULT_CONNECT_TIMEOUT, redact_url};
pub use error::StoreError;
pub use maintenance::{
    CountsParams, FailedFilter, FailedRow, ListFailedParams, PurgeParams, PurgeStatus,
    RequeueParams, StatusCounts,
};
pub use partitions::{
    Careful, DEFAULT_PARTITIONS, MAX_PARTITIONS, Ownership, PartitionBatch, PartitionFence,
    PartitionRead, RebalanceParams, Repartition, check_partition_count,
};
pub use table_name::TableName;

/// Default name of the outbox table.
pub const DEFAULT_TABLE: &str = "room_outbox";

/// Which database a store talks to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// SQLite (embedded), `sqlite://path`.
    Sqlite,
    /// MariaDB ≥ 10.6 / MySQL ≥ 8.0, `mysql://…`.
    MySql,
    /// PostgreSQL, `postgres://…`.
    Postgres,
}

/// What wakes idle worker loops when rows are committed, by database ([`Backend::commit_feed`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CommitFeed {
    /// `LISTEN` on the channel the outbox table's triggers notify (PostgreSQL).
    Listen,
    /// `PRAGMA data_version` watched on a connection of its own (SQLite).
    DataVersion,
    /// The binary log followed as a replica would, where the server writes one and the user may
    /// read it (MySQL / MariaDB).
    Binlog,
}

/// Whether a read keeps per-room order. In config: `worker.ordering = "none" | "per-room"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryOrder {
    /// Any claimable row may be handed out.
    #[default]
    None,
    /// An event is handed out only while no earlier event of the same (app_code, room_id) is
    /// retryable or delivering (a `failed` one does not block); a batch may carry many events of
    /// a room, published in waves of one event per room (no plugin call holds two of a room).
    PerRoom,
}

/// The fence of a read batch: its marks change a row only while `worker_id` still owns the
/// batch's partitions at the epochs it read them with ([`PartitionBatch`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// Tenant of the batch.
    pub app_code: String,
    /// The reading host (its host id), written to `worker_id` by the mark.
    pub worker_id: String,
    /// Until when this host's lease on the partition held when it read (renewed by its
    /// heartbeat): a mark that cannot reach the database is retried until then.
    pub lock_until_ms: i64,
    /// The partitions of the batch's rows, each with its epoch and the span of those rows'
    /// write times (empty when the read found nothing).
    pub partitions: Vec<PartitionBatch>,
    /// The table's partitions per tenant when the batch was read: the mark names the same
    /// partition expression as the read.
    pub partition_count: u32,
}

/// One row handed out by a read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedEvent {
    /// The event, decoded from the envelope; `attempt = retry_count + 1`.
    pub event: Event,
    /// Failed attempts before this one (including reclaimed leases).
    pub retry_count: u32,
    /// Claim order key.
    pub created_at_ms: i64,
}

/// A row a read put in `failed` instead of handing it out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejectedRow {
    /// The row's event id.
    pub event_id: String,
    /// Event type column.
    pub event_type: String,
    /// Room column.
    pub room_id: String,
    /// Why (also written to `last_error`): a decode error, or too many expired leases.
    pub reason: String,
}

/// Result of [`OutboxStore::read_partitions`]: a batch.
#[derive(Debug, Clone)]
pub struct ClaimBatch {
    /// The fence for marking this batch.
    pub lease: Lease,
    /// Rows handed out, in write order.
    pub events: Vec<ClaimedEvent>,
    /// Rows moved to `failed` by the read.
    pub rejected: Vec<RejectedRow>,
}

/// The new state of one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Disposition {
    /// → `delivered`; clears the lease and `last_error`.
    Delivered,
    /// → `retryable` at `next_retry_at_ms`; `retry_count + 1`.
    Retryable {
        /// When the row becomes claimable again.
        next_retry_at_ms: i64,
        /// Stored in `last_error` (cut to 512 bytes).
        error: String,
    },
    /// → `retryable` at `next_retry_at_ms` **without** spending an attempt (`retry_count`
    /// unchanged): the event was not tried (its sink's circuit breaker is open).
    Deferred {
        /// When the row becomes claimable again.
        next_retry_at_ms: i64,
        /// Stored in `last_error` (cut to 512 bytes).
        error: String,
    },
    /// → `failed`; `retry_count + 1`.
    Failed {
        /// Stored in `last_error` (cut to 512 bytes).
        error: String,
    },
}

/// One row's mark.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mark {
    /// The row.
    pub event_id: String,
    /// Its new state.
    pub disposition: Disposition,
}

impl Mark {
    /// The mark of `event_id` as delivered.
    pub fn delivered(event_id: impl Into<String>) -> Mark {
        Mark {
            event_id: event_id.into(),
            disposition: Disposition::Delivered,
        }
    }
}

/// Arguments of [`OutboxStore::mark`].
#[derive(Debug, Clone)]
pub struct MarkParams<'a> {
    /// The batch's fence.
    pub lease: &'a Lease,
    /// Rows of that batch and their new states (any mix, one statement).
    pub marks: &'a [Mark],
    /// The current time (`updated_at_ms`).
    pub now_ms: i64,
}

/// Result of [`OutboxStore::mark`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MarkReport {
    /// Rows changed.
    pub applied: u64,
    /// Event ids whose lease no longer matched (reclaimed by another worker, requeued, …); they
    /// were left untouched.
    pub stale: Vec<String>,
}

/// Why `store`, without the console's operations (a wrapper in a benchmark), refuses `what`.
fn cannot<S: OutboxStore + ?Sized>(store: &S, what: &str) -> StoreError {
    StoreError::Invalid(format!(
        "this {} store cannot {what}",
        store.backend().name()
    ))
}

/// The outbox table in one database.
///
/// Implemented by [`sqlite::SqliteStore`], [`mysql::MySqlStore`] and [`postgres::PostgresStore`].
/// Producers write with the backend's `save` function inside their own transaction; the trait's
/// [`OutboxStore::enqueue`] is the same insert in a transaction of its own (CLI, benchmarks, tests).
#[async_trait]
pub trait OutboxStore: Send + Sync + 'static {
    /// Which database this is.
    fn backend(&self) -> Backend;

    /// The outbox table.
    fn table(&self) -> &TableName;

    /// Creates or upgrades the outbox table, its indexes and the partition tables; idempotent,
    /// safe while producers write and other hosts run. Returns the migrations applied now.
    async fn migrate(&self) -> Result<Vec<i64>, StoreError>;

    /// The table's partitions per tenant, as the catalog had them when last read (by
    /// [`OutboxStore::migrate`], [`OutboxStore::repartition`] or a heartbeat); before any read,
    /// [`DEFAULT_PARTITIONS`]. SQLite: 1.
    fn partitions(&self) -> u32;

    /// Makes the table's partition count `partitions` per tenant, a power of two up to
    /// [`MAX_PARTITIONS`] (`outboxd migrate --partitions`): refused while any host runs; the
    /// partition index rebuilt online while producers write; every partition row freed at a new
    /// epoch. Nothing changes when the table has that count already. SQLite accepts 1 only.
    async fn repartition(&self, partitions: u32) -> Result<Repartition, StoreError>;

    /// Inserts records all-or-nothing, ignoring ids already present. Returns rows inserted.
    async fn enqueue(&self, records: &[Record]) -> Result<u64, StoreError>;

    /// One heartbeat of partition ownership for `params.host_id` (see [`Ownership`]): the host
    /// and its partitions renewed, `params.release` given up, free or expired partitions taken
    /// up to its fair share, all on the database's clock.
    async fn rebalance(&self, params: &RebalanceParams<'_>) -> Result<Ownership, StoreError>;

    /// Owned partitions' due rows, read in one statement without writing them (the module docs,
    /// "Partitions"), as one batch whose marks are fenced on each row's partition's owner and
    /// epoch.
    async fn read_partitions(&self, read: &PartitionRead) -> Result<ClaimBatch, StoreError>;

    /// The partitions of tenant `app_code` that hold live rows (pending, retryable,
    /// delivering), found by a skip scan of the partition index (a few index entries per
    /// partition, never the backlog); `None` where the tenant has one partition (SQLite).
    async fn live_partitions(&self, app_code: &str) -> Result<Option<Vec<u32>>, StoreError>;

    /// Writes the crash guard's state ([`Careful`]) of partition `fence` that `owner.1` owns
    /// for tenant `owner.0`, fenced on its epoch: whether it still owned it.
    async fn set_careful(
        &self,
        owner: (&str, &str),
        fence: &PartitionFence,
        careful: &Careful,
    ) -> Result<bool, StoreError>;

    /// Moves `rows` of partition `fence` (owned by `owner.1` for tenant `owner.0`) to `failed`
    /// with their reasons, fenced as a mark is and only while live: the rows changed.
    async fn reject(
        &self,
        owner: (&str, &str),
        fence: &PartitionFence,
        now_ms: i64,
        rows: &[RejectedRow],
    ) -> Result<u64, StoreError>;

    /// Applies the marks of one read batch in one statement, fenced on each row's partition's
    /// owner and epoch.
    async fn mark(&self, params: &MarkParams<'_>) -> Result<MarkReport, StoreError>;

    /// Row counts by status and the oldest pending row's age.
    async fn counts(&self, params: &CountsParams) -> Result<StatusCounts, StoreError>;

    /// The database's clock, UTC milliseconds, read in one query; `None` where the database has
    /// no clock apart from the host's (SQLite). The worker compares it with its own to refuse
    /// claiming while they disagree by more than a tenth of the lease.
    async fn clock_ms(&self) -> Result<Option<i64>, StoreError> {
        Ok(None)
    }

    /// `failed` rows matching the filter, oldest first.
    async fn list_failed(&self, params: &ListFailedParams) -> Result<Vec<FailedRow>, StoreError>;

    /// Moves matching `failed` rows back to `pending`; returns how many (would) move.
    async fn requeue(&self, params: &RequeueParams) -> Result<u64, StoreError>;

    /// Deletes up to `limit` old finished rows of one status, oldest first, by primary key after
    /// reading their ids from the tenant's status index (never a table scan); returns how many
    /// went (a dry run: how many match in all). Safe with many hosts purging at once: a row
    /// deleted by another host (or requeued meanwhile) is simply not counted.
    async fn purge(&self, params: &PurgeParams) -> Result<u64, StoreError>;

    /// One page of a tenant's rows newest first, matching `query` (read as `browse.rs` tells).
    /// The default refuses, on a wrapper store that does not forward it.
    async fn search_events(&self, query: &EventQuery) -> Result<EventPage, StoreError> {
        let _ = query;
        Err(cannot(self, "search events"))
    }

    /// One row with its envelope, by primary key; `None` when there is none.
    async fn event(
        &self,
        app_code: &str,
        event_id: &str,
    ) -> Result<Option<EventDetail>, StoreError> {
        let _ = (app_code, event_id);
        Err(cannot(self, "read one event"))
    }

    /// The newest `params.window` `failed` rows of a tenant grouped by `last_error`, the largest
    /// group first.
    async fn error_groups(
        &self,
        params: &ErrorGroupsParams,
    ) -> Result<Vec<ErrorGroup>, StoreError> {
        let _ = params;
        Err(cannot(self, "group failed rows"))
    }

    /// Deletes the oldest `params.limit` `failed` rows matching the filter, by primary key in one
    /// short transaction (a dry run: counts every match); returns how many went (would go).
    async fn delete_failed(&self, params: &DeleteFailedParams) -> Result<u64, StoreError> {
        let _ = params;
        Err(cannot(self, "delete failed rows"))
    }

    /// Closes the connection pool.
    async fn close(&self);
}
