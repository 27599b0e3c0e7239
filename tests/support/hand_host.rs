//! A host driven by hand through the store's partition calls, as the plan, schema and console
//! tests drive one ([`HandHost`]): a heartbeat, a read of owned partitions, every due row read
//! and marked delivered. (The conformance suite has its own, per scenario.)

use outboxd::record::now_ms;
use outboxd::store::{
    ClaimBatch, Mark, MarkParams, MarkReport, OutboxStore, Ownership, PartitionFence,
    PartitionRead, RebalanceParams, StoreError,
};

/// A `delivered` mark for every event of `batch`.
pub fn all_delivered(batch: &ClaimBatch) -> Vec<Mark> {
    batch
        .events
        .iter()
        .map(|e| Mark::delivered(&e.event.event_id))
        .collect()
}

/// Marks every event of `batch` delivered, now; panics when the store errors.
pub async fn mark_delivered(store: &dyn OutboxStore, batch: &ClaimBatch) -> MarkReport {
    store
        .mark(&MarkParams {
            lease: &batch.lease,
            marks: &all_delivered(batch),
            now_ms: now_ms(),
        })
        .await
        .unwrap_or_else(|e| panic!("mark of {:?}: {e}", batch.lease.partitions))
}

/// Attempts a read allows (the read's `max_attempts`).
const MAX_ATTEMPTS: u32 = 10;

/// One host of tenant `app`, named `id`, whose partitions are leased for `lease_ms`.
#[derive(Debug, Clone, Copy)]
pub struct HandHost<'a> {
    /// Tenant.
    pub app: &'a str,
    /// The host's id.
    pub id: &'a str,
    /// Lease of the host and its partitions.
    pub lease_ms: i64,
}

impl HandHost<'_> {
    /// One heartbeat: the partitions it owns after it (alone, every one), or, `leaving`, none.
    pub async fn heartbeat_or_leave(
        &self,
        store: &dyn OutboxStore,
        leaving: bool,
    ) -> Result<Ownership, StoreError> {
        store
            .rebalance(&RebalanceParams {
                app_code: self.app,
                host_id: self.id,
                lease_ms: self.lease_ms,
                release: &[],
                leaving,
                careful_rows: 100,
                now_ms: now_ms(),
            })
            .await
    }

    /// One heartbeat (panics on an error).
    pub async fn heartbeat(&self, store: &dyn OutboxStore) -> Ownership {
        self.heartbeat_or_leave(store, false)
            .await
            .unwrap_or_else(|e| panic!("heartbeat of {}: {e}", self.id))
    }

    /// A read of up to `limit` due rows of `fences` at `now_ms`.
    pub fn read(
        &self,
        fences: Vec<PartitionFence>,
        limit: u32,
        now_ms: i64,
        per_room: bool,
    ) -> PartitionRead {
        PartitionRead {
            app_code: self.app.into(),
            host_id: self.id.into(),
            fences,
            in_flight: Vec::new(),
            limit,
            now_ms,
            lease_ms: self.lease_ms,
            max_attempts: MAX_ATTEMPTS,
            per_room,
        }
    }

    /// After a heartbeat, reads each owned partition `limit` rows at a time until it has none
    /// due, marking each batch delivered (every mark applied): the rows delivered.
    pub async fn deliver_due(&self, store: &dyn OutboxStore, limit: u32) -> u64 {
        let now = now_ms();
        let mut delivered = 0;
        for fence in self.heartbeat(store).await.owned {
            loop {
                let batch = store
                    .read_partitions(&self.read(vec![fence], limit, now, false))
                    .await
                    .unwrap_or_else(|e| panic!("read of {fence:?}: {e}"));
                if batch.events.is_empty() {
                    break;
                }
                let report = mark_delivered(store, &batch).await;
                assert_eq!(report.applied, batch.events.len() as u64, "{report:?}");
                delivered += report.applied;
            }
        }
        delivered
    }
}
