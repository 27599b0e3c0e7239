//! The leased claim's helpers, kept only for `migrate.rs` (converted by its own owners): no other
//! module uses them. Delete this file, its `mod` in `main.rs` and the re-export in `helpers.rs`
//! with the leased claim (`OutboxStore::claim`, `ClaimParams`, `DeliveryOrder`).

use std::sync::Arc;

use outboxd::store::{ClaimBatch, ClaimParams, DeliveryOrder, OutboxStore};

use crate::helpers::{APP, MANY};

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
