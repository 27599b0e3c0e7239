//! `claim_held`: rows claimed with their locks held in an open transaction (`worker.mode =
//! "held"`), marked and committed in one go. What the mode keeps (marks land with the leased
//! mark's dispositions, concurrent claims never share a row, bad rows are isolated, a dead lease
//! is left to a leased claim whose reclaim counts an attempt, a batch marks only its own rows)
//! and the one thing it relaxes
//! as documented (a batch given up — released, dropped — costs no attempt: its rows are claimable
//! again at once, unchanged).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use outboxd::record::{LAST_ERROR_MAX_BYTES, truncate_error};
use outboxd::store::{Backend, DEFAULT_TABLE, HeldBatch, OutboxStore, StoreError};

use crate::helpers::{
    APP, claim_app, deferred, delivered, enqueue, failed, mark, params, retryable, setup,
    status_of, strs,
};
use crate::support::{RawInsert, record, wait_until};

crate::support::per_backend!(
    held_claim_writes_nothing_until_marked,
    held_marks_land_like_leased_marks,
    held_release_leaves_rows_claimable_without_an_attempt,
    held_drop_rolls_back,
    held_concurrent_claims_never_share_a_row,
    held_claim_isolates_a_corrupt_envelope,
    held_claim_leaves_a_dead_lease_to_a_leased_reclaim,
    reclaim_expired_takes_dead_leases_alone,
    held_batch_marks_only_its_own_rows,
);

/// Claims held for `APP`; panics (naming the worker) when the store errors.
async fn claim_held(
    store: &Arc<dyn OutboxStore>,
    worker: &str,
    limit: u32,
    now_ms: i64,
) -> HeldBatch {
    store
        .claim_held(&params(APP, worker, limit, now_ms, 30_000))
        .await
        .unwrap_or_else(|e| panic!("claim_held by {worker}: {e}"))
}

/// The event ids a held claim handed out, in claim order.
fn held_ids(batch: &HeldBatch) -> Vec<String> {
    batch
        .events
        .iter()
        .map(|e| e.event.event_id.clone())
        .collect()
}

async fn held_claim_writes_nothing_until_marked(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e2", "r1", 200), record(APP, "e1", "r1", 100)],
    )
    .await;
    let batch = claim_held(&store, "w1", 10, 1_000).await;
    assert_eq!(held_ids(&batch), strs(&["e1", "e2"]), "claim order");
    assert!(batch.events.iter().all(|e| e.event.attempt == 1));
    for id in ["e1", "e2"] {
        let row = db.row(APP, id).await.unwrap();
        assert_eq!(
            (row.status.as_str(), row.worker_id, row.lock_until_ms),
            ("pending", None, None),
            "{id}: a held claim writes no lease"
        );
    }
    let report = batch
        .mark(&[delivered("e1"), delivered("e2")], 2_000)
        .await
        .expect("mark held");
    assert_eq!((report.applied, report.stale.len()), (2, 0));
}

async fn held_marks_land_like_leased_marks(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[
            record(APP, "d", "r1", 100),
            record(APP, "r", "r1", 200),
            record(APP, "s", "r1", 300),
            record(APP, "f", "r1", 400),
            record(APP, "u", "r1", 500),
        ],
    )
    .await;
    let long = "é".repeat(LAST_ERROR_MAX_BYTES); // 2 bytes each: must be cut
    let batch = claim_held(&store, "w1", 10, 1_000).await;
    let report = batch
        .mark(
            &[
                delivered("d"),
                retryable("r", 5_000, "sink said later"),
                deferred("s", 6_000, "breaker open"),
                failed("f", &long),
            ],
            2_000,
        )
        .await
        .expect("mark held");
    assert_eq!((report.applied, report.stale.len()), (4, 0));
    let d = db.row(APP, "d").await.unwrap();
    assert_eq!(
        (
            d.status.as_str(),
            d.retry_count,
            d.last_error,
            d.lock_until_ms
        ),
        ("delivered", 0, None, None)
    );
    assert_eq!(d.updated_at_ms, 2_000);
    assert_eq!(
        d.worker_id.as_deref(),
        Some("w1"),
        "worker_id: who handled it"
    );
    let r = db.row(APP, "r").await.unwrap();
    assert_eq!(
        (r.status.as_str(), r.retry_count, r.next_retry_at_ms),
        ("retryable", 1, Some(5_000))
    );
    assert_eq!(r.last_error.as_deref(), Some("sink said later"));
    let s = db.row(APP, "s").await.unwrap();
    assert_eq!(
        (s.status.as_str(), s.retry_count, s.next_retry_at_ms),
        ("retryable", 0, Some(6_000)),
        "deferred spends no attempt"
    );
    let f = db.row(APP, "f").await.unwrap();
    assert_eq!((f.status.as_str(), f.retry_count), ("failed", 1));
    assert_eq!(f.last_error, Some(truncate_error(&long)));
    assert!(f.last_error.unwrap().len() <= LAST_ERROR_MAX_BYTES);
    let u = db.row(APP, "u").await.unwrap();
    assert_eq!(
        (u.status.as_str(), u.retry_count, u.updated_at_ms),
        ("pending", 0, 500),
        "a row of the batch without a mark is left as it was"
    );
    // The retryable row comes back when due, its attempt counted.
    let again = claim_held(&store, "w2", 10, 5_000).await;
    let attempts: Vec<(String, u32)> = again
        .events
        .iter()
        .map(|e| (e.event.event_id.clone(), e.event.attempt))
        .collect();
    assert_eq!(attempts, vec![("u".to_string(), 1), ("r".to_string(), 2)]);
    again.release().await.expect("release");
}

async fn held_release_leaves_rows_claimable_without_an_attempt(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r1", 100), record(APP, "e2", "r2", 200)],
    )
    .await;
    let first = claim_held(&store, "w1", 10, 1_000).await;
    assert_eq!(held_ids(&first), strs(&["e1", "e2"]));
    first.release().await.expect("release");
    for id in ["e1", "e2"] {
        let row = db.row(APP, id).await.unwrap();
        assert_eq!(
            (row.status.as_str(), row.retry_count),
            ("pending", 0),
            "{id}"
        );
    }
    let second = claim_held(&store, "w2", 10, 1_001).await;
    assert_eq!(held_ids(&second), strs(&["e1", "e2"]), "claimable at once");
    assert!(
        second.events.iter().all(|e| e.event.attempt == 1),
        "giving a held batch up costs no attempt"
    );
    second
        .mark(&[delivered("e1"), delivered("e2")], 1_002)
        .await
        .expect("mark");
    assert_eq!(status_of(&db, APP, "e2").await, "delivered");
}

async fn held_drop_rolls_back(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(APP, "e1", "r1", 100)]).await;
    db.insert_raw(
        DEFAULT_TABLE,
        &[RawInsert {
            retry_count: Some(3),
            next_retry_at_ms: Some(500),
            last_error: Some("earlier".into()),
            ..RawInsert::pending(APP, "e2", "r2", 200).with_status("retryable")
        }],
    )
    .await;
    let batch = claim_held(&store, "w1", 10, 1_000).await;
    assert_eq!(held_ids(&batch), strs(&["e1", "e2"]));
    drop(batch); // a host that dies mid-publish: the database rolls back
    // The rollback reaches the database when the pool takes the connection back (at once, in
    // the background): wait for the rows, but not forever.
    let again = held_again(&store, 1_001).await;
    let attempts: Vec<(String, u32)> = again
        .events
        .iter()
        .map(|e| (e.event.event_id.clone(), e.event.attempt))
        .collect();
    assert_eq!(
        attempts,
        vec![("e1".to_string(), 1), ("e2".to_string(), 4)],
        "rows back unchanged, no attempt spent by the dropped batch"
    );
    again.release().await.expect("release");
    let e2 = db.row(APP, "e2").await.unwrap();
    assert_eq!((e2.status.as_str(), e2.retry_count), ("retryable", 3));
}

/// Polls held claims (worker `w2`, at `now_ms`) until one holds the two rows a dropped or
/// refused batch gave back: the rollback reaches the database when the pool takes the
/// connection back (at once, in the background).
async fn held_again(store: &Arc<dyn OutboxStore>, now_ms: i64) -> HeldBatch {
    wait_until(
        "the two rows claimable again",
        Duration::from_secs(10),
        || async {
            let again = claim_held(store, "w2", 10, now_ms).await;
            if again.events.len() == 2 {
                return Ok(again);
            }
            let ids = held_ids(&again);
            again.release().await.expect("release");
            Err(ids)
        },
    )
    .await
}

async fn held_concurrent_claims_never_share_a_row(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let all: Vec<String> = (0..6).map(|i| format!("e{i}")).collect();
    let records: Vec<_> = all
        .iter()
        .enumerate()
        .map(|(i, id)| record(APP, id, "r1", 100 + i as i64))
        .collect();
    enqueue(&store, &records).await;
    let a = claim_held(&store, "a", 4, 1_000).await;
    assert_eq!(held_ids(&a).len(), 4);
    // While A holds its rows, a second held claim and a leased claim run. With row locks they
    // skip A's rows at once; on SQLite they wait for A's write lock. Either way no row is shared.
    let b = {
        let store = store.clone();
        tokio::spawn(async move { claim_held(&store, "b", 6, 1_000).await })
    };
    let leased = {
        let store = store.clone();
        tokio::spawn(async move { claim_app(&store, "c", 6, 1_000, 30_000).await })
    };
    // Part of the test, not a wait: B and the leased claim run for 200 ms while A holds its rows
    // (they skip them at once, or wait for A's write lock on SQLite: nothing to poll for).
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A marks in a task of its own: on MariaDB its UPDATE may wait for B's open transaction
    // (B's scan passed A's rows), so B must be able to finish meanwhile.
    let a_ids = held_ids(&a);
    let marks: Vec<_> = a_ids.iter().map(|id| delivered(id)).collect();
    let a_marked = tokio::spawn(async move { a.mark(&marks, 1_100).await });
    let b = b.await.expect("claim B");
    let b_ids = held_ids(&b);
    let marks: Vec<_> = b_ids.iter().map(|id| delivered(id)).collect();
    b.mark(&marks, 1_200).await.expect("mark B");
    a_marked.await.expect("task A").expect("mark A");
    let c = leased.await.expect("leased claim C");
    let c_ids: Vec<String> = c.events.iter().map(|e| e.event.event_id.clone()).collect();
    mark(
        &store,
        &c.lease,
        &c_ids.iter().map(|id| delivered(id)).collect::<Vec<_>>(),
        1_300,
    )
    .await;
    let mut seen = BTreeSet::new();
    for id in a_ids.iter().chain(&b_ids).chain(&c_ids) {
        assert!(
            seen.insert(id.clone()),
            "{id} handed out twice: A {a_ids:?} B {b_ids:?} C {c_ids:?}"
        );
    }
    assert_eq!(seen, all.into_iter().collect(), "every row handed out once");
}

async fn held_claim_isolates_a_corrupt_envelope(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "g1", "r1", 100), record(APP, "g2", "r2", 300)],
    )
    .await;
    db.insert_raw(
        DEFAULT_TABLE,
        &[RawInsert::pending(APP, "bad", "r3", 200).with_envelope(vec![0xff; 12])],
    )
    .await;
    let batch = claim_held(&store, "w1", 10, 1_000).await;
    assert_eq!(held_ids(&batch), strs(&["g1", "g2"]));
    let rejected: Vec<&str> = batch.rejected.iter().map(|r| r.event_id.as_str()).collect();
    assert_eq!(rejected, ["bad"]);
    let reason = batch.rejected[0].reason.clone();
    // Given up (released), the batch still commits the rejection: a corrupt row is never
    // handed out again.
    batch.release().await.expect("release");
    let bad = db.row(APP, "bad").await.unwrap();
    assert_eq!(bad.status, "failed");
    assert_eq!(bad.last_error, Some(truncate_error(&reason)));
    let again = claim_held(&store, "w2", 10, 1_001).await;
    assert_eq!(held_ids(&again), strs(&["g1", "g2"]));
    assert!(
        again.rejected.is_empty(),
        "the corrupt row is not read again"
    );
    again
        .mark(&[delivered("g1"), delivered("g2")], 1_002)
        .await
        .expect("mark");
    assert_eq!(status_of(&db, APP, "g1").await, "delivered");
}

/// A dead lease may be a row that killed the host publishing it: a held claim never takes it
/// (a second crash would roll the reclaim back, spending no attempt). A leased claim reclaims it
/// with the attempt committed before the publish; the dead worker's late mark is fenced out.
async fn held_claim_leaves_a_dead_lease_to_a_leased_reclaim(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r1", 100), record(APP, "e2", "r1", 200)],
    )
    .await;
    // A leased worker claims e1 and dies; its lease ends at 1_100.
    let dead = claim_app(&store, "dead", 1, 1_000, 100).await;
    assert_eq!(crate::helpers::ids(&dead), strs(&["e1"]));
    let held = claim_held(&store, "w1", 10, 2_000).await;
    assert_eq!(
        held_ids(&held),
        strs(&["e2"]),
        "the expired lease is not held"
    );
    held.mark(&[delivered("e2")], 2_100).await.expect("mark");
    let row = db.row(APP, "e1").await.unwrap();
    assert_eq!(
        (row.status.as_str(), row.retry_count),
        ("delivering", 0),
        "untouched by the held claim"
    );
    let reclaim = claim_app(&store, "w2", 10, 2_200, 30_000).await;
    assert_eq!(crate::helpers::ids(&reclaim), strs(&["e1"]));
    assert_eq!(
        reclaim.events[0].event.attempt, 2,
        "the dead lease was an attempt"
    );
    let row = db.row(APP, "e1").await.unwrap();
    assert_eq!(
        (row.status.as_str(), row.retry_count),
        ("delivering", 1),
        "the reclaim's attempt is committed before the publish"
    );
    // The dead worker's late mark is fenced out.
    let late = mark(
        &store,
        &dead.lease,
        &[retryable("e1", 9_000, "late")],
        2_300,
    )
    .await;
    assert_eq!((late.applied, late.stale), (0, strs(&["e1"])));
    assert_eq!(status_of(&db, APP, "e1").await, "delivering");
}

/// The held-mode worker's reclaim: expired leases alone, each an attempt committed before the
/// publish, one at `max_attempts` failed; pending, due retryable and live leased rows untouched
/// (a row committed between a held claim and this reclaim stays for the next held claim).
async fn reclaim_expired_takes_dead_leases_alone(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[
            record(APP, "dead-1", "r1", 100),
            record(APP, "dead-2", "r2", 110),
            record(APP, "due", "r3", 120),
            record(APP, "live", "r4", 130),
        ],
    )
    .await;
    // Two dead workers' leases end at 1_100; a failed attempt makes "due" retryable at 1_500.
    let dead = claim_app(&store, "dead", 2, 1_000, 100).await;
    assert_eq!(crate::helpers::ids(&dead), strs(&["dead-1", "dead-2"]));
    let first = claim_app(&store, "w0", 1, 1_000, 100).await;
    mark(
        &store,
        &first.lease,
        &[retryable("due", 1_500, "down")],
        1_001,
    )
    .await;
    let live = claim_app(&store, "alive", 1, 1_000, 60_000).await;
    assert_eq!(crate::helpers::ids(&live), strs(&["live"]));
    enqueue(&store, &[record(APP, "new", "r5", 50)]).await;

    let reclaim = store
        .reclaim_expired(&params(APP, "w1", 10, 2_000, 30_000))
        .await
        .expect("reclaim");
    assert_eq!(
        crate::helpers::ids(&reclaim),
        strs(&["dead-1", "dead-2"]),
        "expired leases alone, in lease order"
    );
    assert!(reclaim.events.iter().all(|e| e.event.attempt == 2));
    assert_eq!(reclaim.lease.lock_until_ms, 32_000);
    for id in ["dead-1", "dead-2"] {
        let row = db.row(APP, id).await.unwrap();
        assert_eq!(
            (
                row.status.as_str(),
                row.worker_id.as_deref(),
                row.retry_count
            ),
            ("delivering", Some("w1"), 1),
            "{id}: the reclaim and its attempt are committed"
        );
    }
    assert_eq!(status_of(&db, APP, "new").await, "pending");
    assert_eq!(status_of(&db, APP, "due").await, "retryable");
    let row = db.row(APP, "live").await.unwrap();
    assert_eq!(
        (row.status.as_str(), row.worker_id.as_deref()),
        ("delivering", Some("alive"))
    );

    // A dead lease at max_attempts is failed, not handed out.
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(APP, "spent", "r1", 100)]).await;
    claim_app(&store, "dead", 1, 1_000, 100).await;
    let last = store
        .reclaim_expired(&outboxd::store::ClaimParams {
            max_attempts: 1,
            ..params(APP, "w1", 10, 2_000, 30_000)
        })
        .await
        .expect("reclaim");
    assert!(last.events.is_empty(), "{last:?}");
    assert_eq!(last.rejected.len(), 1, "{last:?}");
    assert_eq!(status_of(&db, APP, "spent").await, "failed");
}

async fn held_batch_marks_only_its_own_rows(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r1", 100), record(APP, "e2", "r2", 200)],
    )
    .await;
    let batch = claim_held(&store, "w1", 1, 1_000).await;
    assert_eq!(held_ids(&batch), strs(&["e1"]));
    let err = batch
        .mark(&[delivered("e1"), delivered("e2")], 1_100)
        .await
        .expect_err("e2 is not in the batch");
    assert!(
        matches!(&err, StoreError::Invalid(m) if m.contains("\"e2\"")),
        "names the row: {err}"
    );
    // Refused as a whole: the batch is given up, nothing written, no attempt spent.
    let again = held_again(&store, 1_200).await;
    assert_eq!(held_ids(&again), strs(&["e1", "e2"]));
    assert!(again.events.iter().all(|e| e.event.attempt == 1));
    again.release().await.expect("release");
    for id in ["e1", "e2"] {
        assert_eq!(status_of(&db, APP, id).await, "pending");
    }
}
