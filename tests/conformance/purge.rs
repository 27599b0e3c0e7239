//! `purge` (retention): deleting old finished rows of one tenant and status, oldest first, in
//! bounded batches; live rows and rows changed lately stay.

use std::collections::BTreeSet;
use std::sync::Arc;

use outboxd::store::{Backend, DEFAULT_TABLE, OutboxStore, PurgeParams, PurgeStatus};

use crate::conformance::helpers::{APP, OTHER, setup};
use crate::support::RawInsert;

crate::support::per_backend!(purge_deletes_only_old_finished_rows_oldest_first);

/// A row of `app` with `status`, created at `created_at_ms` and last changed at `updated_at_ms`.
fn aged(app: &str, id: &str, status: &str, created_at_ms: i64, updated_at_ms: i64) -> RawInsert {
    RawInsert {
        updated_at_ms: Some(updated_at_ms),
        ..RawInsert::pending(app, id, "r", created_at_ms).with_status(status)
    }
}

/// Purges `APP`'s rows of `status` last changed before `before_ms`, at most `limit`; returns how
/// many (would be) deleted.
async fn purge(
    store: &Arc<dyn OutboxStore>,
    status: PurgeStatus,
    before_ms: i64,
    limit: u32,
    dry_run: bool,
) -> u64 {
    store
        .purge(&PurgeParams {
            app_code: APP.into(),
            status,
            before_ms,
            limit,
            dry_run,
        })
        .await
        .unwrap_or_else(|e| panic!("purge {status:?}: {e}"))
}

/// Retention deletes old finished rows of one tenant and status, oldest first, at most `limit`
/// per call; rows changed lately, live rows however old, and other tenants stay.
async fn purge_deletes_only_old_finished_rows_oldest_first(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let mut rows: Vec<RawInsert> = (1..=5)
        .map(|i| aged(APP, &format!("d{i}"), "delivered", i * 100, i * 100 + 50))
        .collect();
    rows.extend([
        aged(APP, "d6", "delivered", 600, 5_000), // delivered lately after long retries
        aged(APP, "f1", "failed", 100, 150),
        aged(APP, "f2", "failed", 200, 9_000), // requeued and failed again lately
        aged(APP, "p1", "pending", 50, 50),
        aged(APP, "r1", "retryable", 60, 60),
        aged(APP, "l1", "delivering", 70, 70),
        aged(OTHER, "o1", "delivered", 100, 150),
    ]);
    db.insert_raw(DEFAULT_TABLE, &rows).await;

    assert_eq!(
        purge(&store, PurgeStatus::Delivered, 2_000, 2, false).await,
        2
    );
    assert!(db.row(APP, "d1").await.is_none() && db.row(APP, "d2").await.is_none());
    assert!(db.row(APP, "d3").await.is_some());
    assert_eq!(
        purge(&store, PurgeStatus::Delivered, 2_000, 2, true).await,
        3
    );
    assert!(db.row(APP, "d3").await.is_some(), "a dry run deleted");
    assert_eq!(
        purge(&store, PurgeStatus::Delivered, 2_000, 10, false).await,
        3
    );
    assert_eq!(
        purge(&store, PurgeStatus::Delivered, 2_000, 10, false).await,
        0
    );
    assert_eq!(
        purge(&store, PurgeStatus::Failed, 2_000, 10, false).await,
        1
    );
    assert_eq!(
        purge(&store, PurgeStatus::Failed, 2_000, 10, false).await,
        0
    );

    let left: BTreeSet<String> = db
        .all_rows(DEFAULT_TABLE)
        .await
        .into_iter()
        .map(|row| row.event_id)
        .collect();
    assert_eq!(
        left,
        ["d6", "f2", "p1", "r1", "l1", "o1"]
            .into_iter()
            .map(String::from)
            .collect()
    );
}
