//! The suite's vocabulary, shared by every operation module: the tenants, a migrated store per
//! test ([`setup`]), partition ownership and reads ([`own_all`], [`reading`], [`read_owned`],
//! [`read_room`]), and one-line wrappers of the `OutboxStore` calls that panic with context
//! instead of returning errors the tests would only unwrap.
//!
//! Partition leases count on the database's clock, so heartbeats pass the wall clock; reads and
//! marks take the test's own `now_ms` (due retries, expired leases of old-version hosts,
//! `updated_at_ms`), which a mark's fence (owner and epoch) does not look at.

use std::sync::Arc;

use outboxd::record::{Record, now_ms};
use outboxd::store::{
    Backend, ClaimBatch, CountsParams, Disposition, FailedFilter, Lease, ListFailedParams, Mark,
    MarkParams, MarkReport, OutboxStore, Ownership, PartitionFence, PartitionRead, RebalanceParams,
    RequeueParams, StatusCounts,
};

use crate::support::TestDb;

/// Tenant used by most tests.
pub(crate) const APP: &str = "app_a";
/// The other tenant.
pub(crate) const OTHER: &str = "app_b";
/// A generous attempt budget for tests that are not about max_attempts.
pub(crate) const MANY: u32 = 100;

/// A fresh database and a migrated store on `room_outbox`; `None` when the backend is skipped.
pub(crate) async fn setup(backend: Backend) -> Option<(TestDb, Arc<dyn OutboxStore>)> {
    let db = TestDb::new(backend).await?;
    let store = db.store_default().await;
    Some((db, store))
}

/// The host of tests with one.
pub(crate) const HOST: &str = "host-1";
/// A generous partition lease, for tests that do not wait for one to end.
pub(crate) const LONG_LEASE_MS: i64 = 60_000;

/// One heartbeat of `host` for tenant `app` on the wall clock (partition leases count on the
/// database's clock; SQLite's on the one passed); panics when the store errors.
pub(crate) async fn rebalance(
    store: &Arc<dyn OutboxStore>,
    app: &str,
    host: &str,
    lease_ms: i64,
    release: &[u32],
    leaving: bool,
) -> Ownership {
    store
        .rebalance(&RebalanceParams {
            app_code: app,
            host_id: host,
            lease_ms,
            release,
            leaving,
            careful_rows: 100,
            now_ms: now_ms(),
        })
        .await
        .unwrap_or_else(|e| panic!("rebalance of {app} by {host}: {e}"))
}

/// `host`, alone, takes every partition of tenant `app` for [`LONG_LEASE_MS`].
pub(crate) async fn own_all(store: &Arc<dyn OutboxStore>, app: &str, host: &str) -> Ownership {
    let ownership = rebalance(store, app, host, LONG_LEASE_MS, &[], false).await;
    assert_eq!(
        ownership.owned.len() as u32,
        ownership.partitions,
        "{host} owns every partition of {app}: {ownership:?}"
    );
    ownership
}

/// A read of tenant `app` by `host` at `now_ms`: up to 100 rows, [`MANY`] attempts, no room
/// order. Its one fence is partition 0 at epoch 0, a placeholder: [`read_owned`] and
/// [`read_room`] put each owned partition's fence in its place.
pub(crate) fn reading(app: &str, host: &str, now_ms: i64) -> PartitionRead {
    PartitionRead {
        app_code: app.into(),
        host_id: host.into(),
        fences: vec![PartitionFence {
            partition: 0,
            epoch: 0,
        }],
        in_flight: Vec::new(),
        limit: 100,
        now_ms,
        lease_ms: LONG_LEASE_MS,
        max_attempts: MANY,
        per_room: false,
    }
}

/// Reads one partition as `read` says; panics (naming the read) when the store errors.
pub(crate) async fn read(store: &Arc<dyn OutboxStore>, read: &PartitionRead) -> ClaimBatch {
    store
        .read_partitions(read)
        .await
        .unwrap_or_else(|e| panic!("read {read:?}: {e}"))
}

/// Whether `batch` handed out or rejected a row.
fn holds_rows(batch: &ClaimBatch) -> bool {
    !batch.events.is_empty() || !batch.rejected.is_empty()
}

/// Reads each partition of `ownership` once, as `template` says with that partition's fence:
/// the batches that handed out or rejected rows, by partition.
pub(crate) async fn read_owned(
    store: &Arc<dyn OutboxStore>,
    ownership: &Ownership,
    template: &PartitionRead,
) -> Vec<ClaimBatch> {
    let mut batches = Vec::new();
    for fence in &ownership.owned {
        let batch = read(
            store,
            &PartitionRead {
                fences: vec![*fence],
                ..template.clone()
            },
        )
        .await;
        if holds_rows(&batch) {
            batches.push(batch);
        }
    }
    batches
}

/// [`read_owned`] for `APP` by `host` at `now`, up to 100 rows a partition.
pub(crate) async fn read_all(
    store: &Arc<dyn OutboxStore>,
    host: &str,
    ownership: &Ownership,
    per_room: bool,
    now: i64,
) -> Vec<ClaimBatch> {
    let template = PartitionRead {
        per_room,
        ..reading(APP, host, now)
    };
    read_owned(store, ownership, &template).await
}

/// For rows that all live in one partition (one room): reads each partition of `ownership` as
/// `template` says and returns the one batch that handed out or rejected rows, or an empty
/// batch when none did. Panics when two partitions held rows.
pub(crate) async fn read_room(
    store: &Arc<dyn OutboxStore>,
    ownership: &Ownership,
    template: &PartitionRead,
) -> ClaimBatch {
    let mut batches = read_owned(store, ownership, template).await;
    assert!(
        batches.len() <= 1,
        "rows in two partitions: {:?}",
        batches.iter().map(ids).collect::<Vec<_>>()
    );
    match batches.pop() {
        Some(batch) => batch,
        None => {
            let fence = *ownership.owned.first().expect("no partition owned");
            read(
                store,
                &PartitionRead {
                    fences: vec![fence],
                    ..template.clone()
                },
            )
            .await
        }
    }
}

/// [`read_room`] of `APP` by [`HOST`] at `now`, up to `limit` rows.
pub(crate) async fn read_app(
    store: &Arc<dyn OutboxStore>,
    ownership: &Ownership,
    limit: u32,
    now: i64,
) -> ClaimBatch {
    let template = PartitionRead {
        limit,
        ..reading(APP, HOST, now)
    };
    read_room(store, ownership, &template).await
}

/// The event ids a read (or claim) handed out, in its order.
pub(crate) fn ids(batch: &ClaimBatch) -> Vec<String> {
    batch
        .events
        .iter()
        .map(|e| e.event.event_id.clone())
        .collect()
}

/// The event ids `batches` handed out, sorted.
pub(crate) fn all_ids(batches: &[ClaimBatch]) -> Vec<String> {
    let mut ids: Vec<String> = batches.iter().flat_map(ids).collect();
    ids.sort();
    ids
}

/// A `delivered` mark for every event of `batch`.
pub(crate) use crate::support::all_delivered;

/// `&str`s as owned `String`s, to compare with [`ids`].
pub(crate) fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Mark `id` delivered.
pub(crate) fn delivered(id: &str) -> Mark {
    Mark {
        event_id: id.into(),
        disposition: Disposition::Delivered,
    }
}

/// Mark `id` retryable at `next_retry_at_ms` with `error`.
pub(crate) fn retryable(id: &str, next_retry_at_ms: i64, error: &str) -> Mark {
    Mark {
        event_id: id.into(),
        disposition: Disposition::Retryable {
            next_retry_at_ms,
            error: error.into(),
        },
    }
}

/// Mark `id` deferred to `next_retry_at_ms` with `error` (its sink's breaker was open: no attempt
/// spent).
pub(crate) fn deferred(id: &str, next_retry_at_ms: i64, error: &str) -> Mark {
    Mark {
        event_id: id.into(),
        disposition: Disposition::Deferred {
            next_retry_at_ms,
            error: error.into(),
        },
    }
}

/// Mark `id` failed with `error`.
pub(crate) fn failed(id: &str, error: &str) -> Mark {
    Mark {
        event_id: id.into(),
        disposition: Disposition::Failed {
            error: error.into(),
        },
    }
}

/// Marks `marks` under `lease` at `now_ms`; panics when the store errors.
pub(crate) async fn mark(
    store: &Arc<dyn OutboxStore>,
    lease: &Lease,
    marks: &[Mark],
    now_ms: i64,
) -> MarkReport {
    store
        .mark(&MarkParams {
            lease,
            marks,
            now_ms,
        })
        .await
        .unwrap_or_else(|e| panic!("mark {marks:?}: {e}"))
}

/// Enqueues `records`; returns the rows inserted (duplicates are not counted).
pub(crate) async fn enqueue(store: &Arc<dyn OutboxStore>, records: &[Record]) -> u64 {
    store.enqueue(records).await.expect("enqueue")
}

/// Status counts of tenant `app` (all tenants for `None`) at `now_ms`.
pub(crate) async fn counts(
    store: &Arc<dyn OutboxStore>,
    app: Option<&str>,
    now_ms: i64,
) -> StatusCounts {
    store
        .counts(&CountsParams {
            app_code: app.map(str::to_string),
            now_ms,
        })
        .await
        .expect("counts")
}

/// The stored `status` of row `app`/`id`; panics when the row is missing.
pub(crate) async fn status_of(db: &TestDb, app: &str, id: &str) -> String {
    db.row(app, id)
        .await
        .unwrap_or_else(|| panic!("row {app}/{id} missing"))
        .status
}

/// The event ids of the failed rows matching `filter`, at most `limit`.
pub(crate) async fn list_failed(
    store: &Arc<dyn OutboxStore>,
    filter: FailedFilter,
    limit: u32,
) -> Vec<String> {
    store
        .list_failed(&ListFailedParams { filter, limit })
        .await
        .expect("list_failed")
        .into_iter()
        .map(|r| r.event_id)
        .collect()
}

/// Requeues the failed rows matching `filter` (or counts them, `dry_run`); returns how many.
pub(crate) async fn requeue(
    store: &Arc<dyn OutboxStore>,
    filter: FailedFilter,
    dry_run: bool,
    now_ms: i64,
) -> u64 {
    store
        .requeue(&RequeueParams {
            filter,
            dry_run,
            now_ms,
            limit: None,
        })
        .await
        .expect("requeue")
}
