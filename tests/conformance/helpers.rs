//! The suite's vocabulary, shared by every operation module: the tenants, a migrated store per
//! test ([`setup`]), and one-line wrappers of the `OutboxStore` calls that panic with context
//! instead of returning errors the tests would only unwrap.

use std::sync::Arc;

use outboxd::record::Record;
use outboxd::store::{
    Backend, ClaimBatch, ClaimParams, CountsParams, DeliveryOrder, Disposition, FailedFilter,
    Lease, ListFailedParams, Mark, MarkParams, MarkReport, OutboxStore, RequeueParams,
    StatusCounts,
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

/// Claim parameters for tenant `app`: `limit` rows, a `lease_ms` lease from `now_ms`, a generous
/// attempt budget ([`MANY`]) and no ordering.
pub(crate) fn params(
    app: &str,
    worker: &str,
    limit: u32,
    now_ms: i64,
    lease_ms: i64,
) -> ClaimParams {
    ClaimParams {
        app_code: app.into(),
        worker_id: worker.into(),
        limit,
        lease_ms,
        now_ms,
        max_attempts: MANY,
        ordering: DeliveryOrder::None,
        scan_due: true,
    }
}

/// Claims with `p`; panics (naming the params) when the store errors.
pub(crate) async fn claim(store: &Arc<dyn OutboxStore>, p: ClaimParams) -> ClaimBatch {
    store
        .claim(&p)
        .await
        .unwrap_or_else(|e| panic!("claim {p:?}: {e}"))
}

/// Claims for `APP` without ordering.
pub(crate) async fn claim_app(
    store: &Arc<dyn OutboxStore>,
    worker: &str,
    limit: u32,
    now_ms: i64,
    lease_ms: i64,
) -> ClaimBatch {
    claim(store, params(APP, worker, limit, now_ms, lease_ms)).await
}

/// The event ids a claim handed out, in claim order.
pub(crate) fn ids(batch: &ClaimBatch) -> Vec<String> {
    batch
        .events
        .iter()
        .map(|e| e.event.event_id.clone())
        .collect()
}

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
