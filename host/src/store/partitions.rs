//! Partition ownership's params and results: which host owns which partition of a tenant's rooms
//! ([`OutboxStore::rebalance`](super::OutboxStore::rebalance)), and one partition's due rows read
//! without writing them ([`OutboxStore::read_partitions`](super::OutboxStore::read_partitions)).
//!
//! Every row belongs to one partition, which the database derives from its `room_id` (a
//! PostgreSQL expression index, a MariaDB/MySQL indexed virtual column: `outboxd migrate` adds
//! them), so rows written by any producer need no change. A room lives in one partition, so the
//! host owning it sees all of a room's events, in write order.
//!
//! Ownership lives in two small tables beside the outbox table, on the database's clock:
//! `<table>_partitions (app_code, partition_id, owner, epoch, lease_until_ms)` and
//! `<table>_hosts (app_code, host_id, alive_until_ms)`. A partition taken by a host gets a new
//! epoch; marks are fenced on (owner, epoch), so a host that lost a partition (paused, cut off,
//! its clock jumped) changes none of its rows.

use super::Backend;

/// Partitions per tenant on MariaDB/MySQL and PostgreSQL: fixed by the migration's expression
/// (`room_id`'s hash, its low 6 bits). SQLite has one ([`partition_count`]).
pub const PARTITIONS: u32 = 64;

/// The partitions of a tenant on `backend`: [`PARTITIONS`], or 1 on SQLite (one writer: a
/// second host would only wait for the first).
pub fn partition_count(backend: Backend) -> u32 {
    if backend.dialect().partition_of_row().is_some() {
        PARTITIONS
    } else {
        1
    }
}

/// One partition as a host owns it: the fence of what it reads from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionFence {
    /// The partition, `0..partition_count`.
    pub partition: u32,
    /// Bumped each time a host takes the partition.
    pub epoch: i64,
}

/// The fence of a batch's rows from one partition ([`Lease::partitions`](super::Lease::partitions)):
/// the partition and epoch it was owned at, and the write-order span of those rows (the mark reads
/// them through the partition index within that span, a plan that needs no statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PartitionBatch {
    /// The partition and the epoch the batch was read at.
    pub fence: PartitionFence,
    /// The smallest `created_at_ms` of the batch's rows from the partition.
    pub first_created_ms: i64,
    /// The largest `created_at_ms` of the batch's rows from the partition.
    pub last_created_ms: i64,
    /// The partition may hold more due rows than the batch took (the read was cut at its limit):
    /// it is best read alone next time.
    pub full: bool,
}

/// Arguments of [`OutboxStore::rebalance`](super::OutboxStore::rebalance).
#[derive(Debug, Clone)]
pub struct RebalanceParams<'a> {
    /// Tenant whose partitions are shared.
    pub app_code: &'a str,
    /// This host, unique per process (two processes never share it).
    pub host_id: &'a str,
    /// Lease of a host and of its partitions, counted on the database's clock.
    pub lease_ms: i64,
    /// Partitions this host gives up now (their batches are marked).
    pub release: &'a [u32],
    /// The host leaves: every partition released, its host row deleted; nothing taken.
    pub leaving: bool,
    /// The host's own clock (SQLite, which has no other; the others use their own).
    pub now_ms: i64,
}

/// Result of [`OutboxStore::rebalance`](super::OutboxStore::rebalance).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Ownership {
    /// The partitions this host owns now, with their epochs.
    pub owned: Vec<PartitionFence>,
    /// How many partitions this host should own: its fair share of the live hosts.
    pub share: u32,
    /// Live hosts serving the tenant (this one included).
    pub hosts: u32,
    /// Partitions of the tenant.
    pub partitions: u32,
    /// Whether rows of the tenant are `delivering` under a live lease: a host of the leased
    /// design is claiming. A partition owner reads nothing until they are gone, so no row is
    /// ever in flight on two hosts.
    pub leased_hosts_active: bool,
}

/// Arguments of [`OutboxStore::read_partitions`](super::OutboxStore::read_partitions).
#[derive(Debug, Clone)]
pub struct PartitionRead {
    /// Tenant.
    pub app_code: String,
    /// The owning host (the fences' owner; also written to `worker_id` by the mark).
    pub host_id: String,
    /// The partitions read, distinct, each with the epoch this host owns it at. One statement
    /// reads them all: a host that has caught up reads many partitions holding a few rows each
    /// at the cost of one, and marks them with one statement too.
    pub fences: Vec<PartitionFence>,
    /// Most rows in all, the first by write order (each partition's in its own order).
    pub limit: u32,
    /// The current time (due retries; the batch's `lock_until_ms`).
    pub now_ms: i64,
    /// The partition lease, for the batch's `lock_until_ms` (how long its marks are retried).
    pub lease_ms: i64,
    /// Attempts allowed (a reclaimed lease of the leased design at this count goes to `failed`).
    pub max_attempts: u32,
    /// Per-room order: a room with a `retryable` or `delivering` event hands out none of its
    /// `pending` ones.
    pub per_room: bool,
}
