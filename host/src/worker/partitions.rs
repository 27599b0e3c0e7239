//! Partition ownership on the worker's side: the partitions this
//! host owns ([`PartitionBook`]), handed to the loops in turns ([`PartitionTurn`]: one turn
//! reads a partition at a time, and leaves out the rows of its batches still in flight, so no
//! row is read twice), and the heartbeat that keeps them and rebalances
//! ([`Worker::run_heartbeat`]).
//!
//! A turn is one partition that may hold a backlog (just taken, or its last read was cut at the
//! limit: read alone, a full batch of it), or the free partitions of a run of owned partitions
//! that keep up (their last read was not cut, or they hold no live row): one statement reads
//! them all, the first rows of them all by write order, and one marks them. A host that keeps up
//! reads all its free partitions in one statement, so a row waits for the next read, not for its
//! partition's turn in a cycle of reads (at 2,000 rows/s, PostgreSQL, against reads of 16 at a
//! time: p50 6.0 → 5.0 ms with 64 partitions, 154 → 9 ms with 1,024; docs/PERFORMANCE.md).
//!
//! The heartbeat runs every third of `worker.lease`: it renews this host and its partitions on the
//! database's clock, takes free or expired partitions up to its fair share, and releases what it
//! owns above it once those partitions' batches are marked. A joining host gets its share, and a
//! dead one's partitions are taken over, within two lease periods. When heartbeats have failed
//! for 0.9 of a lease (the database cut off), the host stops reading: another may own its
//! partitions soon, and its marks would be refused anyway (they are fenced on the partition's
//! epoch).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

use super::Worker;
use crate::store::{Careful, Ownership, PartitionFence, RebalanceParams, StoreError};

/// One tenant's partitions as this host holds them.
#[derive(Debug, Default)]
struct Tenant {
    /// Owned partitions and their epochs.
    owned: BTreeMap<u32, i64>,
    /// Partitions being read: no other turn reads them until the read's batch is booked.
    reading: BTreeSet<u32>,
    /// The batches being published or marked, by turn: their partitions and their rows.
    delivering: HashMap<u64, InFlight>,
    /// Partitions that may hold a backlog (just taken, or the last read was cut at the limit):
    /// read alone next.
    backlogged: BTreeSet<u32>,
    /// The last pass over the partitions found no row: the next one asks first which
    /// partitions hold live rows (cheaper than reading them all to find none).
    idle: bool,
    /// Owned above the fair share: read no more, released by the next heartbeat once not busy.
    releasing: BTreeSet<u32>,
    /// Partitions in the crash guard's care ([`Careful`]): read alone, in its smaller batches.
    careful: BTreeMap<u32, Careful>,
    /// Where the next turn starts looking (round robin).
    next: u32,
    /// A host of the leased design is claiming: read nothing.
    leased_hosts_active: bool,
    /// The partitions the last probe found without live rows, and when it stands until
    /// ([`PartitionBook::standing_dry`]).
    dry: Option<(BTreeSet<u32>, Instant)>,
}

/// A batch being published or marked: the loop delivering it, the partitions it was read from,
/// how many rows it holds, and their ids while they are few enough to read beside
/// ([`SHARED_AT_MOST_ROWS`]; else none).
#[derive(Debug)]
struct InFlight {
    reader: String,
    partitions: BTreeSet<u32>,
    count: usize,
    rows: Vec<String>,
}

impl Tenant {
    /// Whether a batch of partition `p` is being read, published or marked.
    fn busy(&self, p: u32) -> bool {
        self.reading.contains(&p) || self.delivering.values().any(|b| b.partitions.contains(&p))
    }

    /// The turns whose batches of partition `p` are in flight, when loop `reader` may read it
    /// beside them (leaving their rows out): it is not being read, it keeps up (not read alone),
    /// they are `reader`'s own (it publishes them first), and they hold at most
    /// [`SHARED_AT_MOST_ROWS`] rows. Empty when none is in flight.
    fn shareable(&self, p: u32, reader: &str) -> Option<Vec<u64>> {
        if self.reading.contains(&p) {
            return None;
        }
        let (mut turns, mut rows) = (Vec::new(), 0);
        for (turn, batch) in &self.delivering {
            if batch.partitions.contains(&p) {
                if batch.reader != reader {
                    return None;
                }
                turns.push(*turn);
                rows += batch.count;
            }
        }
        let alone = self.backlogged.contains(&p) || self.careful.contains_key(&p);
        (turns.is_empty() || (!alone && rows <= SHARED_AT_MOST_ROWS)).then_some(turns)
    }
}

/// The most rows in flight in a partition that a read of it may leave out: a partition whose
/// batches in flight hold more (a backlog being drained) is read again once they are marked.
const SHARED_AT_MOST_ROWS: usize = 64;

/// A probe's answer stands (its partitions without live rows are not read) for this many times
/// the probe's own duration while a partition holds a backlog ([`PartitionBook::note_probe`]):
/// a host catching up spends at most about a tenth of its time probing.
const PROBE_STANDS_FOR: u32 = 10;

/// The longest a probe's answer stands: a row written to a partition the probe found without
/// live rows waits at most this much longer while the host catches up elsewhere.
pub(super) const PROBE_STANDS_AT_MOST: Duration = Duration::from_millis(100);

/// The partitions this host owns, per tenant, shared by its loops and its heartbeat.
#[derive(Debug)]
pub(super) struct PartitionBook {
    /// This host's owner id: `<node_id>#<random>`, unique per process.
    pub(super) host_id: String,
    tenants: Mutex<HashMap<String, Tenant>>,
    /// Until when the last successful heartbeat vouches for the partitions (local clock).
    valid_until: Mutex<Option<Instant>>,
    /// A draining run keeps what it owns above its share until it is drained: a host that
    /// found its partitions empty has already left, so nobody might take them over.
    keeps_excess: std::sync::atomic::AtomicBool,
    /// A partition with batches in flight may be read again beside them (without per-room
    /// order: a room's later event may then publish before its earlier one is marked).
    shares_busy: bool,
    /// The id of the next turn.
    next_turn: std::sync::atomic::AtomicU64,
}

/// Partitions lent to one loop: read them (leaving out [`PartitionTurn::in_flight`]), deliver
/// the batch ([`PartitionTurn::delivering`]); dropping the turn frees them.
#[derive(Debug)]
pub(super) struct PartitionTurn {
    book: Arc<PartitionBook>,
    app_code: String,
    id: u64,
    /// The loop reading it.
    reader: String,
    /// The partitions and the epochs they were owned at, distinct.
    pub(super) fences: Vec<PartitionFence>,
    /// The crash guard's state of the turn's one partition, when it is in its care.
    pub(super) careful: Option<Careful>,
    /// Rows of the turn's partitions that earlier batches are delivering: the read leaves them
    /// out.
    pub(super) in_flight: Vec<String>,
}

impl PartitionTurn {
    /// Keeps the partitions `keep` says yes to and frees the others at once.
    pub(super) fn retain(&mut self, mut keep: impl FnMut(u32) -> bool) {
        let (kept, freed): (Vec<_>, Vec<_>) = self.fences.iter().partition(|f| keep(f.partition));
        self.fences = kept;
        if let Some(tenant) = self.book.lock().get_mut(&self.app_code) {
            for fence in freed {
                tenant.reading.remove(&fence.partition);
                if let Some(batch) = tenant.delivering.get_mut(&self.id) {
                    batch.partitions.remove(&fence.partition);
                }
            }
        }
    }

    /// The turn's read handed out `rows`: they are in flight until the turn is dropped, and
    /// another turn may read the partitions beside them ([`PartitionBook::new`]).
    pub(super) fn delivering(
        &self,
        rows: impl IntoIterator<Item = String, IntoIter: ExactSizeIterator>,
    ) {
        let mut tenants = self.book.lock();
        let Some(tenant) = tenants.get_mut(&self.app_code) else {
            return;
        };
        if !self.book.shares_busy {
            return; // read again once the batch is marked: the partitions stay being read
        }
        let partitions: BTreeSet<u32> = self.fences.iter().map(|f| f.partition).collect();
        tenant.reading.retain(|p| !partitions.contains(p));
        // A batch too large to read beside keeps its count only: no ids copied on a drain.
        let rows = rows.into_iter();
        let count = rows.len();
        let rows = if count <= SHARED_AT_MOST_ROWS {
            rows.collect()
        } else {
            Vec::new()
        };
        tenant.delivering.insert(
            self.id,
            InFlight {
                reader: self.reader.clone(),
                partitions,
                count,
                rows,
            },
        );
    }

    /// Notes what the read of each partition found: `full` ones (the read was cut at its limit
    /// and they may hold more) are read alone next time, the others together.
    pub(super) fn note_read(&self, full: &BTreeSet<u32>) {
        if let Some(tenant) = self.book.lock().get_mut(&self.app_code) {
            for fence in &self.fences {
                if full.contains(&fence.partition) {
                    tenant.backlogged.insert(fence.partition);
                } else {
                    tenant.backlogged.remove(&fence.partition);
                }
            }
        }
    }
}

impl PartitionTurn {
    /// The most rows this turn's read takes: `batch_size`, or the crash guard's smaller batch.
    pub(super) fn limit(&self, batch_size: u32) -> u32 {
        match &self.careful {
            Some(careful) => batch_size.min(careful.size).min(careful.left).max(1),
            None => batch_size,
        }
    }

    /// Notes the crash guard's new state of the turn's partition (as written to the database).
    pub(super) fn set_careful(&mut self, careful: Careful) {
        let Some(fence) = self.fences.first() else {
            return;
        };
        if let Some(tenant) = self.book.lock().get_mut(&self.app_code) {
            if careful.active() {
                tenant.careful.insert(fence.partition, careful.clone());
            } else {
                tenant.careful.remove(&fence.partition);
            }
        }
        self.careful = careful.active().then_some(careful);
    }
}

impl Drop for PartitionTurn {
    fn drop(&mut self) {
        if let Some(tenant) = self.book.lock().get_mut(&self.app_code)
            && tenant.delivering.remove(&self.id).is_none()
        {
            for fence in &self.fences {
                tenant.reading.remove(&fence.partition);
            }
        }
    }
}

impl PartitionBook {
    /// An empty book for a host of `node_id`. `shares_busy`: a partition whose batches are in
    /// flight may be read again beside them, leaving their rows out (without per-room order), so
    /// a row written to it meanwhile need not wait for their marks; else it is read again once
    /// they are marked.
    pub(super) fn new(node_id: &str, shares_busy: bool) -> PartitionBook {
        PartitionBook {
            host_id: format!("{node_id}#{:016x}", rand::random::<u64>()),
            tenants: Mutex::new(HashMap::new()),
            valid_until: Mutex::new(None),
            keeps_excess: std::sync::atomic::AtomicBool::new(false),
            shares_busy,
            next_turn: std::sync::atomic::AtomicU64::new(0),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Tenant>> {
        self.tenants.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The next turn of loop `reader` over `app_code`'s owned partitions that no loop is reading
    /// and that are not being released, in turn after the last one handed out; `skip`
    /// partitions already tried this round are passed over. A partition with batches in flight
    /// is in a turn only where the book shares busy partitions ([`PartitionBook::new`]), and
    /// they are the reader's own and small ([`Tenant::shareable`]); their rows are the turn's
    /// [`PartitionTurn::in_flight`]. The
    /// first such partition, alone if it may hold a backlog (or is in the crash guard's care);
    /// else with the free partitions of the run of owned numbers from it on that keep up
    /// (neither alone nor being released; busy and skipped ones are in the run, not in the
    /// turn). `None` when there is none, when heartbeats have not vouched for ownership within
    /// a lease, or while a host of the leased design claims.
    pub(super) fn take_turn(
        self: &Arc<Self>,
        app_code: &str,
        reader: &str,
        skip: &BTreeSet<u32>,
    ) -> Option<PartitionTurn> {
        let valid = self
            .valid_until
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some_and(|until| Instant::now() < until);
        if !valid {
            return None;
        }
        let mut tenants = self.lock();
        let tenant = tenants.get_mut(app_code)?;
        if tenant.leased_hosts_active {
            return None;
        }
        let start = tenant.next;
        // The turns with batches of a partition in flight, when this turn may read it.
        let free = |p: &u32| {
            if tenant.releasing.contains(p) || skip.contains(p) {
                return None;
            }
            let in_flight = tenant.shareable(*p, reader)?;
            (self.shares_busy || in_flight.is_empty()).then_some(in_flight)
        };
        let mut beside: BTreeSet<u64> = BTreeSet::new();
        let mut take = |p: &u32, turns: Vec<u64>| {
            beside.extend(turns);
            *p
        };
        let (first, first_rows) = tenant
            .owned
            .range(start..)
            .chain(tenant.owned.range(..start))
            .find_map(|(p, e)| free(p).map(|rows| ((*p, *e), rows)))?;
        let mut fences = vec![PartitionFence {
            partition: take(&first.0, first_rows),
            epoch: first.1,
        }];
        let alone = |p: &u32| tenant.backlogged.contains(p) || tenant.careful.contains_key(p);
        let careful = tenant.careful.get(&first.0).cloned();
        let mut last = first.0;
        if !alone(&first.0) {
            // The run of owned partition numbers from the first on that keep up (not alone, not
            // being released): its free ones are read together, and the round-robin moves on
            // past it (so each partition still gets its turn: a backlogged one is read alone
            // when the round-robin comes to it, and a partition after it waits for its turn
            // as well). A run of numbers, so the read seeks one range of the partition index
            // and no backlog is in it: the busy partitions inside it keep up too (their batches
            // are small). Once the round-robin wraps around, a host that keeps up reads all its
            // free partitions at once.
            let keeps_up = |p: &u32| !alone(p) && !tenant.releasing.contains(p);
            for (partition, epoch) in tenant.owned.range(first.0 + 1..) {
                if *partition != last + 1 || !keeps_up(partition) {
                    break;
                }
                if let Some(rows) = free(partition) {
                    fences.push(PartitionFence {
                        partition: take(partition, rows),
                        epoch: *epoch,
                    });
                }
                last = *partition;
            }
        }
        for fence in &fences {
            tenant.reading.insert(fence.partition);
        }
        tenant.next = last + 1;
        let in_flight = beside
            .iter()
            .flat_map(|turn| tenant.delivering[turn].rows.iter().cloned())
            .collect();
        Some(PartitionTurn {
            book: self.clone(),
            app_code: app_code.to_string(),
            id: self
                .next_turn
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            reader: reader.to_string(),
            fences,
            careful,
            in_flight,
        })
    }

    /// Whether a partition of `app_code` that loop `reader` may read waits for batches of its in
    /// flight to be marked first (another loop's, large or backlogged ones, or any where the
    /// book does not share busy partitions: [`PartitionBook::take_turn`]).
    pub(super) fn waits_for_marks(&self, app_code: &str, reader: &str) -> bool {
        self.lock().get(app_code).is_some_and(|t| {
            t.owned.keys().any(|p| {
                !t.releasing.contains(p)
                    && t.busy(*p)
                    && !(self.shares_busy && t.shareable(*p, reader).is_some())
            })
        })
    }

    /// Notes that `partitions` of `app_code` hold no live row: no backlog either.
    pub(super) fn no_backlog(&self, app_code: &str, partitions: &BTreeSet<u32>) {
        if let Some(tenant) = self.lock().get_mut(app_code) {
            tenant.backlogged.retain(|p| !partitions.contains(p));
        }
    }

    /// Notes a probe of `app_code` that took `took` and found `dry` (owned partitions) without
    /// live rows: while another partition holds a backlog, they are left unread for
    /// [`PROBE_STANDS_FOR`] times `took` (at most [`PROBE_STANDS_AT_MOST`]). In a large drain the
    /// partitions run dry one by one; without this, each read after the first ran dry found
    /// one of them empty and probed again (a probe walks the index entries every delivered row
    /// left behind until a vacuum: ~10 ms after 200k rows on PostgreSQL, a probe per batch).
    pub(super) fn note_probe(&self, app_code: &str, dry: BTreeSet<u32>, took: Duration) {
        let stands = took
            .saturating_mul(PROBE_STANDS_FOR)
            .min(PROBE_STANDS_AT_MOST);
        if let Some(tenant) = self.lock().get_mut(app_code) {
            tenant.dry = Some((dry, Instant::now() + stands));
        }
    }

    /// The partitions of `app_code` the last probe found without live rows, while its answer
    /// stands ([`PartitionBook::note_probe`]) and another partition holds a backlog; else none.
    pub(super) fn standing_dry(&self, app_code: &str) -> BTreeSet<u32> {
        let tenants = self.lock();
        match tenants.get(app_code) {
            Some(Tenant {
                dry: Some((dry, until)),
                backlogged,
                ..
            }) if Instant::now() < *until && !backlogged.is_empty() => dry.clone(),
            _ => BTreeSet::new(),
        }
    }

    /// Whether the last pass over `app_code`'s partitions found no row.
    pub(super) fn idle(&self, app_code: &str) -> bool {
        self.lock().get(app_code).is_some_and(|t| t.idle)
    }

    /// Notes whether a pass over `app_code`'s partitions found no row.
    pub(super) fn set_idle(&self, app_code: &str, idle: bool) {
        if let Some(tenant) = self.lock().get_mut(app_code) {
            tenant.idle = idle;
        }
    }

    /// The partitions of `app_code` this host owns.
    pub(super) fn owned_partitions(&self, app_code: &str) -> BTreeSet<u32> {
        self.lock()
            .get(app_code)
            .map_or_else(BTreeSet::new, |t| t.owned.keys().copied().collect())
    }

    /// How many partitions of `app_code` this host owns.
    pub(super) fn owned(&self, app_code: &str) -> usize {
        self.lock().get(app_code).map_or(0, |t| t.owned.len())
    }

    /// The partitions of `app_code` to release now: being released and not busy.
    fn releasable(&self, app_code: &str) -> Vec<u32> {
        self.lock().get(app_code).map_or_else(Vec::new, |t| {
            t.releasing
                .iter()
                .filter(|p| !t.busy(**p))
                .copied()
                .collect()
        })
    }

    /// Takes in a heartbeat's result for `app_code`: the partitions owned now, and those above
    /// the share put up for release (the highest numbers, the idle ones first). Returns the
    /// partitions taken and lost since the last heartbeat.
    fn update(&self, app_code: &str, ownership: &Ownership) -> (Vec<u32>, Vec<u32>) {
        let mut tenants = self.lock();
        let tenant = tenants.entry(app_code.to_string()).or_default();
        if ownership.owned.is_empty() && ownership.share == 0 && ownership.hosts == 0 {
            // This host left: it gave every partition up.
            tenant.owned.clear();
            tenant.releasing.clear();
            tenant.careful.clear();
            return (Vec::new(), Vec::new());
        }
        let now: BTreeMap<u32, i64> = ownership
            .owned
            .iter()
            .map(|f| (f.partition, f.epoch))
            .collect();
        let lost: Vec<u32> = tenant
            .owned
            .iter()
            .filter(|(p, e)| now.get(p) != Some(e) && !tenant.releasing.contains(p))
            .map(|(p, _)| *p)
            .collect();
        let taken: Vec<u32> = now
            .iter()
            .filter(|(p, e)| tenant.owned.get(p) != Some(e))
            .map(|(p, _)| *p)
            .collect();
        // A partition just taken may hold a backlog: read alone until a read comes back uncut
        // (a read of several partitions reads all their live rows before it keeps the first).
        tenant.backlogged.extend(taken.iter().copied());
        if let Some((dry, _)) = &mut tenant.dry {
            dry.retain(|p| !taken.contains(p));
        }
        tenant.owned = now;
        tenant.releasing.retain(|p| tenant.owned.contains_key(p));
        tenant.backlogged.retain(|p| tenant.owned.contains_key(p));
        // The crash guard's state of a partition taken comes with it; one lost goes with it.
        for partition in &taken {
            tenant.careful.remove(partition);
        }
        tenant.careful.retain(|p, _| tenant.owned.contains_key(p));
        for (partition, careful) in &ownership.careful {
            if careful.active() && tenant.owned.contains_key(partition) {
                tenant.careful.insert(*partition, careful.clone());
            }
        }
        tenant.leased_hosts_active = ownership.leased_hosts_active;
        let excess = if self.keeps_excess.load(std::sync::atomic::Ordering::Relaxed) {
            0
        } else {
            tenant.owned.len().saturating_sub(ownership.share as usize)
        };
        let already = tenant.releasing.len();
        if excess > already {
            let mut candidates: Vec<u32> = tenant
                .owned
                .keys()
                .filter(|p| !tenant.releasing.contains(p))
                .copied()
                .collect();
            candidates.sort_by_key(|p| (tenant.busy(*p), std::cmp::Reverse(*p)));
            tenant
                .releasing
                .extend(candidates.into_iter().take(excess - already));
        }
        (taken, lost)
    }

    /// Whether the partitions above the fair share are kept (a draining run) or released.
    pub(super) fn keep_excess(&self, keep: bool) {
        self.keeps_excess
            .store(keep, std::sync::atomic::Ordering::Relaxed);
    }

    /// Vouches for the partitions until `until` (a heartbeat succeeded).
    fn vouch_until(&self, until: Instant) {
        *self.valid_until.lock().unwrap_or_else(|e| e.into_inner()) = Some(until);
    }
}

impl Worker {
    /// One heartbeat for every app code: ownership renewed and rebalanced, the book updated,
    /// changes logged and counted. `leaving`: every partition released.
    pub(super) async fn heartbeat(&self, leaving: bool) -> Result<(), StoreError> {
        let book = &self.partitions;
        let started = Instant::now();
        let lease_ms = self.options.lease.as_millis() as i64;
        let metrics = self.metrics.partitions();
        for app_code in &self.options.app_codes {
            let release = book.releasable(app_code);
            let ownership = self
                .store
                .rebalance(&RebalanceParams {
                    app_code,
                    host_id: &book.host_id,
                    lease_ms,
                    release: &release,
                    leaving,
                    careful_rows: self.options.batch_size,
                    now_ms: self.now_ms(),
                })
                .await
                .inspect_err(|e| self.metrics.count_database_error(e))?;
            let released = if leaving {
                book.owned(app_code)
            } else {
                release.len()
            };
            let (taken, lost) = book.update(app_code, &ownership);
            for partition in release.iter().chain(&lost) {
                metrics.forget_lag(app_code, *partition);
            }
            metrics.set_ownership(
                app_code,
                ownership.owned.len(),
                ownership.share,
                ownership.hosts,
            );
            metrics.count_change(app_code, "taken", taken.len());
            if !taken.is_empty() {
                self.wake.wake(); // loops waiting for work may have some now
            }
            metrics.count_change(app_code, "released", released);
            metrics.count_change(app_code, "lost", lost.len());
            metrics.count_change(app_code, "guarded", ownership.careful.len());
            let node_id = &self.options.node_id;
            if !lost.is_empty() {
                warn!(node_id = %node_id, host_id = %book.host_id, app_code = %app_code, lost = ?lost,
                    status = "partitions_lost",
                    "partitions taken over by another host (this one was paused or cut off); their marks were refused");
            }
            if !taken.is_empty() || released > 0 {
                info!(node_id = %node_id, host_id = %book.host_id, app_code = %app_code, taken = ?taken,
                    released, owned = ownership.owned.len(), share = ownership.share, hosts = ownership.hosts,
                    status = "rebalanced", "partitions rebalanced");
            }
            if !ownership.careful.is_empty() {
                let careful: Vec<u32> = ownership.careful.iter().map(|(p, _)| *p).collect();
                info!(node_id = %node_id, host_id = %book.host_id, app_code = %app_code, careful = ?careful,
                    status = "crash_guard",
                    "partitions taken over from a host whose lease ran out: their first rows go out in smaller batches, in case one of them killed it");
            }
            if ownership.leased_hosts_active {
                warn!(node_id = %node_id, app_code = %app_code, status = "leased_hosts_active",
                    "rows are delivering under a live lease: a host of an earlier version is claiming; reading nothing until it stops");
            }
        }
        // Ownership holds for a lease from the heartbeat's start (the database's leases began
        // no earlier); a tenth is kept in hand for the clocks' drift.
        book.vouch_until(started + self.options.lease.mul_f64(0.9));
        Ok(())
    }

    /// Heartbeats every third of the lease until `shutdown`; a failed one is logged (once per
    /// outage) and tried again at the next beat. Once the table's partition count changed under
    /// the host (`outboxd migrate --partitions`), it stops the run (`run`: the loops finish what
    /// is in flight, whose marks the new epochs refuse) and returns the error.
    pub(super) async fn run_heartbeat(
        &self,
        shutdown: CancellationToken,
        run: CancellationToken,
    ) -> Result<(), StoreError> {
        let every = (self.options.lease / 3).max(Duration::from_millis(100));
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                _ = tokio::time::sleep(every) => {}
            }
            match self.heartbeat(false).await {
                Ok(()) => self.outage_over(),
                Err(e @ StoreError::PartitionsChanged { .. }) => {
                    error!(node_id = %self.options.node_id, status = "partitions_changed", error = %e,
                        "the table's partition count changed; this host stops");
                    run.cancel();
                    return Err(e);
                }
                Err(e) if e.is_unreachable() => self.outage_began(&e),
                Err(e) => {
                    warn!(node_id = %self.options.node_id, status = "heartbeat_failed", error = %e,
                        "partition heartbeat failed; trying again at the next beat");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::{PROBE_STANDS_AT_MOST, PartitionBook, PartitionTurn, SHARED_AT_MOST_ROWS};
    use crate::store::{Ownership, PartitionFence};

    /// A book owning partitions `0..owned` of tenant `a`, vouched for, with per-room order.
    fn book(owned: u32) -> Arc<PartitionBook> {
        let book = Arc::new(PartitionBook::new("node", false));
        book.update("a", &book_of(owned));
        book.vouch_until(Instant::now() + Duration::from_secs(60));
        book
    }

    /// One host owning partitions `0..owned` of `owned`, at epoch 1.
    fn book_of(owned: u32) -> Ownership {
        Ownership {
            owned: (0..owned)
                .map(|partition| PartitionFence {
                    partition,
                    epoch: 1,
                })
                .collect(),
            share: owned,
            hosts: 1,
            partitions: owned,
            leased_hosts_active: false,
            careful: Vec::new(),
        }
    }

    fn partitions(turn: &PartitionTurn) -> Vec<u32> {
        turn.fences.iter().map(|f| f.partition).collect()
    }

    #[test]
    fn turns_take_partitions_together_and_a_backlogged_one_alone() {
        let book = book(20);
        let none = BTreeSet::new();
        // Partitions just taken may hold a backlog: each is read alone until a read is not cut.
        for partition in 0..20 {
            let turn = book.take_turn("a", "loop", &none).expect("a turn");
            assert_eq!(partitions(&turn), [partition]);
            turn.note_read(&BTreeSet::new());
        }
        let all = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(partitions(&all), (0..20).collect::<Vec<_>>(), "one run");
        // The read of partition 3 was cut at the limit: it is read alone from now on, and it
        // ends the runs that reach it.
        all.note_read(&BTreeSet::from([3]));
        drop(all);
        let below = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(partitions(&below), [0, 1, 2], "up to the backlogged one");
        let alone = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(partitions(&alone), [3], "a backlogged partition alone");
        let mut above = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(partitions(&above), (4..20).collect::<Vec<_>>());
        assert!(
            book.take_turn("a", "loop", &none).is_none(),
            "every partition busy"
        );
        // A turn keeping only the partitions its batch holds rows of frees the others at once.
        // Busy partitions that keep up do not end a run: they are in it, not in the turn.
        above.retain(|p| !(9..12).contains(&p));
        let freed = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(partitions(&freed), [9, 10, 11], "0..=8 and 12.. busy");
        drop((below, freed));
        // Partitions skipped this round are in the run, not in the turn.
        let skipping = book
            .take_turn("a", "loop", &BTreeSet::from([1]))
            .expect("a turn");
        assert_eq!(partitions(&skipping), [0, 2], "up to the backlogged one");
        drop((skipping, alone, above));
        // A partition with no live row holds no backlog: it joins the runs again, and once the
        // round-robin wraps around, one turn is every partition.
        book.no_backlog("a", &BTreeSet::from([3]));
        let rest = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(partitions(&rest), (3..20).collect::<Vec<_>>());
        drop(rest);
        let all = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(partitions(&all), (0..20).collect::<Vec<_>>());
    }

    #[test]
    fn a_partition_in_flight_is_read_beside_its_small_batches_without_per_room_order() {
        let sharing = |shares: bool| {
            let book = Arc::new(PartitionBook::new("node", shares));
            book.update("a", &book_of(4));
            book.vouch_until(Instant::now() + Duration::from_secs(60));
            book.no_backlog("a", &(0..4).collect());
            book
        };
        let none = BTreeSet::new();
        let rows = |n: usize, tag: &str| (0..n).map(|i| format!("{tag}{i}")).collect::<Vec<_>>();

        let book = sharing(true);
        let mut first = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(partitions(&first), [0, 1, 2, 3]);
        assert!(first.in_flight.is_empty());
        // While the read runs, no other turn reads its partitions.
        assert!(book.take_turn("a", "loop", &none).is_none(), "being read");
        first.retain(|p| p == 1 || p == 2);
        first.delivering(rows(3, "a"));
        // Its batch delivering: a turn reads every partition, leaving its rows out.
        let second = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(partitions(&second), [0, 1, 2, 3]);
        assert_eq!(second.in_flight, ["a0", "a1", "a2"]);
        assert!(book.take_turn("a", "loop", &none).is_none(), "being read");
        second.delivering(rows(2, "b"));
        let third = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(
            third.in_flight,
            ["a0", "a1", "a2", "b0", "b1"],
            "both batches' rows"
        );
        drop(third);
        // A marked batch's rows are no longer left out.
        drop(first);
        let fourth = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(fourth.in_flight, ["b0", "b1"]);
        drop(fourth);
        // Another loop reads it once those batches are marked: it would publish beside them.
        assert!(
            book.take_turn("a", "other", &none).is_none(),
            "in flight in another loop"
        );
        drop(second);
        assert!(book.take_turn("a", "other", &none).is_some(), "marked");

        // More rows in flight than SHARED_AT_MOST_ROWS, or a backlog: read once they are marked.
        let big = book.take_turn("a", "loop", &none).expect("a turn");
        big.delivering(rows(SHARED_AT_MOST_ROWS + 1, "c"));
        assert!(
            book.take_turn("a", "loop", &none).is_none(),
            "a large batch in flight"
        );
        drop(big);
        let cut = book.take_turn("a", "loop", &none).expect("a turn");
        cut.note_read(&BTreeSet::from([0, 1, 2, 3]));
        cut.delivering(rows(1, "d"));
        assert!(
            book.take_turn("a", "loop", &none).is_none(),
            "backlogged partitions in flight"
        );
        drop(cut);

        // With per-room order a partition is read again only once its batch is marked.
        let book = sharing(false);
        let first = book.take_turn("a", "loop", &none).expect("a turn");
        first.delivering(rows(1, "a"));
        assert!(
            book.take_turn("a", "loop", &none).is_none(),
            "per-room order"
        );
        drop(first);
        assert!(book.take_turn("a", "loop", &none).is_some(), "marked");
    }

    #[test]
    fn a_run_ends_where_the_owned_numbers_do() {
        // Partitions 0..4 and 8..12 owned: two runs, whatever keeps up.
        let book = Arc::new(PartitionBook::new("node", false));
        let owned = [0, 1, 2, 3, 8, 9, 10, 11];
        book.update(
            "a",
            &Ownership {
                owned: owned
                    .iter()
                    .map(|&partition| PartitionFence {
                        partition,
                        epoch: 1,
                    })
                    .collect(),
                share: 8,
                hosts: 2,
                partitions: 16,
                leased_hosts_active: false,
                careful: Vec::new(),
            },
        );
        book.vouch_until(Instant::now() + Duration::from_secs(60));
        book.no_backlog("a", &owned.into_iter().collect());
        let none = BTreeSet::new();
        let first = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(partitions(&first), [0, 1, 2, 3]);
        let second = book.take_turn("a", "loop", &none).expect("a turn");
        assert_eq!(partitions(&second), [8, 9, 10, 11]);
        assert!(book.take_turn("a", "loop", &none).is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn a_probe_answer_stands_only_while_a_backlog_remains_and_not_for_long() {
        let book = book(8); // every partition just taken: backlogged
        let dry = BTreeSet::from([2, 5]);
        book.note_probe("a", dry.clone(), Duration::from_millis(3));
        assert_eq!(book.standing_dry("a"), dry, "10 × 3 ms: it stands");
        tokio::time::advance(Duration::from_millis(31)).await;
        assert!(
            book.standing_dry("a").is_empty(),
            "past 10 × the probe's time"
        );

        // A slow probe stands for the bound at most.
        book.note_probe("a", dry.clone(), Duration::from_secs(1));
        tokio::time::advance(PROBE_STANDS_AT_MOST - Duration::from_millis(1)).await;
        assert_eq!(book.standing_dry("a"), dry);
        tokio::time::advance(Duration::from_millis(2)).await;
        assert!(book.standing_dry("a").is_empty(), "past the bound");

        // Without a backlog (a host keeping up) every read looks at every partition.
        book.note_probe("a", dry.clone(), Duration::from_millis(5));
        book.no_backlog("a", &(0..8).collect());
        assert!(book.standing_dry("a").is_empty(), "no backlog");
    }

    #[test]
    fn a_partition_taken_again_leaves_the_probe_answer() {
        let book = book(4);
        book.note_probe("a", BTreeSet::from([1, 3]), Duration::from_millis(5));
        // Partition 3 lost and taken again (a new epoch): its rows were not looked at.
        let ownership = |epoch_of_3| Ownership {
            owned: (0..4)
                .map(|partition| PartitionFence {
                    partition,
                    epoch: if partition == 3 { epoch_of_3 } else { 1 },
                })
                .collect(),
            share: 4,
            hosts: 1,
            partitions: 4,
            leased_hosts_active: false,
            careful: Vec::new(),
        };
        book.update("a", &ownership(2));
        assert_eq!(book.standing_dry("a"), BTreeSet::from([1]));
    }
}
