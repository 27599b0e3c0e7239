//! `counts`: rows per status and the age of the oldest pending row, per tenant or overall.

use outboxd::store::{Backend, DEFAULT_TABLE, StatusCounts};

use crate::conformance::helpers::{
    APP, HOST, OTHER, counts, delivered, enqueue, failed, ids, mark, own_all, read_app, retryable,
    setup, strs,
};
use crate::support::{RawInsert, record};

crate::support::per_backend!(counts_by_status_and_oldest_pending_age);

async fn counts_by_status_and_oldest_pending_age(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let empty = counts(&store, None, 10_000).await;
    assert_eq!(empty, StatusCounts::default());

    let recs: Vec<_> = (1..=3)
        .map(|i| record(APP, &format!("d{i}"), "r", i * 100))
        .collect();
    enqueue(&store, &recs).await;
    // d4: leased by an old-version host until 6000.
    let d4 = RawInsert {
        worker_id: Some("old-host".into()),
        lock_until_ms: Some(6_000),
        ..RawInsert::pending(APP, "d4", "r", 400).with_status("delivering")
    };
    db.insert_raw(DEFAULT_TABLE, &[d4]).await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 4, 5_000).await;
    assert_eq!(ids(&batch), strs(&["d1", "d2", "d3"]));
    mark(
        &store,
        &batch.lease,
        &[
            delivered("d1"),
            retryable("d2", 9_000, "x"),
            failed("d3", "y"),
        ],
        5_001,
    )
    .await;
    enqueue(
        &store,
        &[
            record(APP, "p1", "r", 1_000),
            record(APP, "p2", "r", 2_000),
            record(OTHER, "q", "r", 500),
        ],
    )
    .await;

    let a = counts(&store, Some(APP), 10_000).await;
    assert_eq!(
        a,
        StatusCounts {
            pending: 2,
            delivering: 1,
            retryable: 1,
            failed: 1,
            delivered: 1,
            oldest_pending_age_ms: Some(9_000),
        }
    );
    let all = counts(&store, None, 10_000).await;
    assert_eq!(
        (all.pending, all.delivering, all.oldest_pending_age_ms),
        (3, 1, Some(9_500))
    );
    let b = counts(&store, Some(OTHER), 10_000).await;
    assert_eq!(
        (b.pending, b.delivered, b.oldest_pending_age_ms),
        (1, 0, Some(9_500))
    );
    let nobody = counts(&store, Some("nobody"), 10_000).await;
    assert_eq!(nobody, StatusCounts::default());
}
