//! Reading due rows the way a worker does, without its loops: for the benchmarks that time a
//! read and its mark by hand (`history.rs`, `console.rs`).

use outboxd::store::{ClaimBatch, OutboxStore, PartitionRead, RebalanceParams, StoreError};

/// Reads up to `limit` due rows of `app_code` as host `host`, as a worker does without its loops:
/// one heartbeat (taking every free partition, lease 60 s), then each owned partition in turn
/// until `limit` rows are read. The non-empty batches, each to be marked under its own lease.
pub async fn read_due(
    store: &dyn OutboxStore,
    app_code: &str,
    host: &str,
    limit: u32,
    now_ms: i64,
) -> Result<Vec<ClaimBatch>, StoreError> {
    const LEASE_MS: i64 = 60_000;
    let ownership = store
        .rebalance(&RebalanceParams {
            app_code,
            host_id: host,
            lease_ms: LEASE_MS,
            release: &[],
            leaving: false,
            careful_rows: 100,
            now_ms,
        })
        .await?;
    let mut batches = Vec::new();
    let mut left = limit;
    for fence in ownership.owned {
        if left == 0 {
            break;
        }
        let batch = store
            .read_partitions(&PartitionRead {
                app_code: app_code.to_string(),
                host_id: host.to_string(),
                fences: vec![fence],
                in_flight: Vec::new(),
                limit: left,
                now_ms,
                lease_ms: LEASE_MS,
                max_attempts: 20,
                per_room: false,
            })
            .await?;
        left -= batch.events.len() as u32;
        if !batch.events.is_empty() {
            batches.push(batch);
        }
    }
    Ok(batches)
}
