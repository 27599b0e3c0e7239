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

use super::StoreError;

/// Partitions per tenant that `outboxd migrate` creates on MariaDB/MySQL and PostgreSQL (SQLite
/// has one: one writer, a second host would only wait for the first).
pub const DEFAULT_PARTITIONS: u32 = 64;

/// The most partitions a tenant can have (`outboxd migrate --partitions`).
pub const MAX_PARTITIONS: u32 = 1024;

/// Checks a partition count asked of `outboxd migrate --partitions`: a power of two (a room's
/// partition is the low bits of its hash) from 1 to [`MAX_PARTITIONS`].
pub fn check_partition_count(partitions: u32) -> Result<(), StoreError> {
    if partitions.is_power_of_two() && partitions <= MAX_PARTITIONS {
        Ok(())
    } else {
        Err(StoreError::Invalid(format!(
            "partitions = {partitions}: use a power of two from 1 to {MAX_PARTITIONS} (1, 2, 4, \
             … 64, 128, …)"
        )))
    }
}

/// The partition count a partition expression masks with: `… & 63` is 64 partitions. `None`
/// when the expression ends in no such mask, or the mask is not one less than a power of two.
pub(crate) fn partitions_of_expression(expression: &str) -> Option<u32> {
    let (_, after) = expression.rsplit_once('&')?;
    let digits: String = after
        .trim_start_matches(|c: char| c.is_whitespace() || c == '(')
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    let partitions = digits.parse::<u32>().ok()?.checked_add(1)?;
    partitions.is_power_of_two().then_some(partitions)
}

/// Result of [`OutboxStore::repartition`](super::OutboxStore::repartition).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Repartition {
    /// Partitions per tenant before.
    pub from: u32,
    /// Partitions per tenant now.
    pub to: u32,
}

/// One partition as a host owns it: the fence of what it reads from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionFence {
    /// The partition, `0..` the table's partition count.
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
    /// The crash guard's window: how many rows of a partition taken over from a host whose lease
    /// ran out are delivered carefully ([`Careful`]); the taking host's batch size.
    pub careful_rows: u32,
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
    /// The owned partitions in the crash guard's care ([`Careful`]), as this heartbeat took them
    /// (a partition owned before keeps the state its owner keeps).
    pub careful: Vec<(u32, Careful)>,
}

/// The crash guard of one partition. A host that dies mid-publish leaves no trace in the rows it
/// read (reading writes nothing), so the partition's next owner cannot tell which row killed it.
/// So a partition taken over from a host whose lease ran out delivers its next `left` rows (the
/// window: what the dead host can have had in flight) in batches of `size`, each announced before
/// it publishes (`suspect`: its first row). An owner that dies with an announced batch leaves the
/// next owner a batch size halved; with an announced batch of one row, that row, which the next
/// owner fails instead of publishing. A row that crashes the host *process* thus costs at most
/// about log2(batch size) + 1 crashes, not a crash per host forever; the other rows are delivered, a
/// few batches smaller, and a host that dies with no batch of the window in flight changes
/// nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Careful {
    /// Rows per batch while in care; 0: not in care.
    pub size: u32,
    /// Rows still to deliver in care.
    pub left: u32,
    /// The first row of the batch in flight, announced before it publishes: its owner died
    /// publishing it when the partition is taken over with it set.
    pub suspect: Option<String>,
}

impl Careful {
    /// Whether the partition is in care.
    pub fn active(&self) -> bool {
        self.size > 0 && self.left > 0
    }

    /// The state after a host takes the partition over: from a host whose lease ran out
    /// (`expired`) a window of `window` rows in batches of half of it; already in care, with a
    /// batch in flight, its batch size halved, or with a one-row batch in flight, that row
    /// suspect; taken free (released by its owner, which did not die publishing), the same
    /// care with nothing suspect; with no batch in flight, unchanged.
    pub fn after_takeover(&self, expired: bool, window: u32) -> Careful {
        match (expired, self.active(), &self.suspect) {
            (false, _, _) => Careful {
                suspect: None,
                ..self.clone()
            },
            (true, false, _) => Careful {
                size: (window / 2).max(1),
                left: window.max(1),
                suspect: None,
            },
            (true, true, None) => self.clone(),
            (true, true, Some(_)) if self.size == 1 => self.clone(),
            (true, true, Some(_)) => Careful {
                size: self.size / 2,
                left: self.left,
                suspect: None,
            },
        }
    }

    /// The state after a batch of `delivered` rows of the partition was published and marked
    /// with its host alive: the window shrinks by it, and no row is suspect.
    pub fn after_batch(&self, delivered: u32) -> Careful {
        let left = self.left.saturating_sub(delivered.max(1));
        Careful {
            size: if left == 0 { 0 } else { self.size },
            left,
            suspect: None,
        }
    }
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
    /// Event ids of the partitions' rows that this host's earlier batches are delivering (read,
    /// not marked yet): not read again.
    pub in_flight: Vec<String>,
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

#[cfg(test)]
mod tests {
    use super::{Careful, check_partition_count, partitions_of_expression};

    #[test]
    fn the_partition_count_is_read_off_the_catalogs_expression() {
        // As PostgreSQL's `pg_get_indexdef` and MariaDB's generation expression print them.
        let postgres = "CREATE INDEX idx_t_part ON public.t USING btree (app_code, \
             ((hashtextextended((room_id)::text, (0)::bigint) & (127)::bigint)), status) \
             WHERE (status)::text = ANY (ARRAY['pending'::text])";
        assert_eq!(partitions_of_expression(postgres), Some(128));
        assert_eq!(partitions_of_expression("crc32(`room_id`) & 63"), Some(64));
        assert_eq!(partitions_of_expression("crc32(`room_id`) & 0"), Some(1));
        assert_eq!(partitions_of_expression("crc32(`room_id`) & 62"), None);
        assert_eq!(partitions_of_expression("crc32(`room_id`)"), None);
    }

    #[test]
    fn a_partition_count_is_a_power_of_two_up_to_the_maximum() {
        for ok in [1, 2, 64, 1024] {
            assert!(check_partition_count(ok).is_ok(), "{ok}");
        }
        for bad in [0, 3, 100, 2048] {
            let message = check_partition_count(bad).expect_err("refused").to_string();
            assert!(
                message.contains(&format!("partitions = {bad}")),
                "{message}"
            );
        }
    }

    fn careful(size: u32, left: u32, suspect: Option<&str>) -> Careful {
        Careful {
            size,
            left,
            suspect: suspect.map(str::to_string),
        }
    }

    #[test]
    fn the_guard_halves_its_batches_at_each_crash_and_ends_with_its_window() {
        let none = Careful::default();
        assert!(!none.active());
        assert_eq!(none.after_takeover(false, 1000), none, "taken free");
        let first = none.after_takeover(true, 1000);
        assert_eq!(first, careful(500, 1000, None));
        assert_eq!(
            first.after_takeover(true, 1000),
            first,
            "its owner died with no batch in flight: nothing learned"
        );
        // Each owner dying with an announced batch halves the batch, down to one row.
        let mut state = first.clone();
        let mut crashes = 1;
        while state.size > 1 {
            state.suspect = Some("e1".into());
            state = state.after_takeover(true, 1000);
            crashes += 1;
        }
        assert_eq!(state, careful(1, 1000, None));
        assert_eq!(
            crashes, 9,
            "the first crash, then 500 → 1; the tenth fails the row"
        );
        // One row announced and its host dead too: the next owner gets the suspect.
        let announced = careful(1, 1000, Some("e7"));
        assert_eq!(announced.after_takeover(true, 1000), announced);
        assert_eq!(
            announced.after_takeover(false, 1000),
            careful(1, 1000, None),
            "released: its owner did not die publishing it"
        );
        assert_eq!(
            careful(2, 1000, Some("e7")).after_takeover(true, 1000),
            careful(1, 1000, None)
        );
        // Batches published with the host alive use the window up.
        let mut state = first;
        state.suspect = Some("e1".into());
        state = state.after_batch(500);
        assert_eq!(state, careful(500, 500, None));
        state = state.after_batch(499);
        assert_eq!(state, careful(500, 1, None));
        assert_eq!(state.after_batch(0), careful(0, 0, None), "counted as one");
        assert!(!careful(1, 1, Some("e")).after_batch(1).active());
        // Boundaries: a window of one row, and of zero (taken as one).
        assert_eq!(none.after_takeover(true, 1), careful(1, 1, None));
        assert_eq!(none.after_takeover(true, 0), careful(1, 1, None));
    }
}
