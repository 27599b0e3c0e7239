//! Many dead letters at once: `failed` rows matching a filter requeued (back to `pending`) or
//! deleted in chunks, one short transaction each, so a large requeue runs beside live traffic.
//! `outboxd requeue` and the console's dead-letter actions both run these.
//!
//! Chunks go tenant by tenant (each chunk a range of the tenant's `(app_code, status,
//! created_at_ms, event_id)` index), then one last pass over whatever the filter matches outside
//! those tenants (rows of tenants this host does not serve, rows that failed meanwhile).

use crate::store::{DeleteFailedParams, FailedFilter, OutboxStore, RequeueParams, StoreError};

/// What to do with the matching rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DeadLetterAction {
    /// Back to `pending` (retry count 0, lease cleared, `last_error` kept).
    Requeue,
    /// Deleted.
    Delete,
}

impl DeadLetterAction {
    /// `requeue` or `purge`, as logs and metrics name it.
    pub fn name(self) -> &'static str {
        match self {
            DeadLetterAction::Requeue => "requeue",
            DeadLetterAction::Delete => "purge",
        }
    }
}

/// How many `failed` rows match `filter` (the dry run before an action).
pub async fn count(store: &dyn OutboxStore, filter: &FailedFilter) -> Result<u64, StoreError> {
    store
        .requeue(&RequeueParams {
            filter: filter.clone(),
            dry_run: true,
            now_ms: 0,
            limit: None,
        })
        .await
}

/// Runs `action` on every `failed` row matching `filter`, `chunk` rows per transaction, over
/// `tenants` first (the filter's own tenant alone when it names one), then the rest. Calls
/// `progress` with the rows of each chunk; returns the total.
pub async fn run_in_chunks(
    store: &dyn OutboxStore,
    action: DeadLetterAction,
    filter: &FailedFilter,
    tenants: &[String],
    chunk: u32,
    now_ms: i64,
    mut progress: impl FnMut(u64),
) -> Result<u64, StoreError> {
    let chunk = chunk.max(1);
    let tenants = match &filter.app_code {
        Some(app_code) => vec![app_code.clone()],
        None => tenants.to_vec(),
    };
    let mut total = 0;
    let mut filters: Vec<FailedFilter> = tenants
        .into_iter()
        .map(|app_code| FailedFilter {
            app_code: Some(app_code),
            ..filter.clone()
        })
        .collect();
    if filter.app_code.is_none() {
        filters.push(filter.clone());
    }
    for filter in filters {
        loop {
            let moved = one_chunk(store, action, &filter, chunk, now_ms).await?;
            progress(moved);
            total += moved;
            if moved < u64::from(chunk) {
                break;
            }
        }
    }
    Ok(total)
}

async fn one_chunk(
    store: &dyn OutboxStore,
    action: DeadLetterAction,
    filter: &FailedFilter,
    chunk: u32,
    now_ms: i64,
) -> Result<u64, StoreError> {
    match action {
        DeadLetterAction::Requeue => {
            store
                .requeue(&RequeueParams {
                    filter: filter.clone(),
                    dry_run: false,
                    now_ms,
                    limit: Some(chunk),
                })
                .await
        }
        DeadLetterAction::Delete => {
            store
                .delete_failed(&DeleteFailedParams {
                    filter: filter.clone(),
                    dry_run: false,
                    limit: chunk,
                })
                .await
        }
    }
}
