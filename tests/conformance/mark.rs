//! `mark`: deliveries, retries and failures applied in one call, fenced on the claim's lease.

use std::collections::BTreeSet;

use outboxd::record::{LAST_ERROR_MAX_BYTES, truncate_error};
use outboxd::store::{Backend, ClaimParams, FailedFilter, MarkParams, MarkReport, StoreError};

use crate::helpers::{
    APP, claim, claim_app, counts, deferred, delivered, enqueue, failed, ids, mark, params,
    requeue, retryable, setup, status_of, strs,
};
use crate::support::record;

crate::support::per_backend!(
    mark_applies_a_mix_in_one_call,
    mark_deferred_spends_no_attempt,
    mark_is_fenced_against_a_reclaimed_row,
    mark_reports_only_the_stale_rows,
    mark_is_fenced_against_a_requeued_or_finished_row,
    mark_cuts_last_error_at_a_utf8_boundary,
    mark_rejects_duplicate_ids,
    status_changes_keep_retry_time_and_lease_to_their_states,
);

/// A deferred row (its sink's breaker was open) goes back to `retryable` at its time without
/// spending an attempt, beside a retried row that does spend one, in the same statement.
async fn mark_deferred_spends_no_attempt(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r1", 100), record(APP, "e2", "r2", 200)],
    )
    .await;
    let batch = claim_app(&store, "w1", 10, 1_000, 1_000).await;
    let report = mark(
        &store,
        &batch.lease,
        &[
            retryable("e1", 2_000, "boom"),
            deferred("e2", 5_000, "breaker open"),
        ],
        1_100,
    )
    .await;
    assert_eq!(report.applied, 2);
    let e2 = db.row(APP, "e2").await.unwrap();
    assert_eq!(e2.status, "retryable");
    assert_eq!(e2.retry_count, 0);
    assert_eq!(e2.next_retry_at_ms, Some(5_000));
    assert_eq!(e2.last_error.as_deref(), Some("breaker open"));
    assert!(e2.lease_cleared(), "{e2:?}");
    assert_eq!(db.row(APP, "e1").await.unwrap().retry_count, 1);

    // Not due before its time; handed out at it as the same (first) attempt.
    let early = claim_app(&store, "w2", 10, 4_999, 1_000).await;
    assert_eq!(ids(&early), strs(&["e1"]));
    let due = claim_app(&store, "w3", 10, 5_000, 1_000).await;
    assert_eq!(ids(&due), strs(&["e2"]));
    assert_eq!(due.events[0].retry_count, 0);
    assert_eq!(due.events[0].event.attempt, 1);

    // Deferring again and again never moves it towards max_attempts.
    let mut now = 5_000;
    let mut lease = due.lease;
    for _ in 0..5 {
        mark(
            &store,
            &lease,
            &[deferred("e2", now + 10, "still open")],
            now,
        )
        .await;
        now += 10;
        let again = claim(
            &store,
            ClaimParams {
                max_attempts: 1,
                ..params(APP, "w4", 10, now, 1_000)
            },
        )
        .await;
        assert_eq!(
            ids(&again),
            strs(&["e2"]),
            "deferred row not handed out at {now}"
        );
        assert!(again.rejected.is_empty());
        lease = again.lease;
    }
    assert_eq!(db.row(APP, "e2").await.unwrap().retry_count, 0);
}

async fn mark_applies_a_mix_in_one_call(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[
            record(APP, "e1", "r1", 100),
            record(APP, "e2", "r2", 200),
            record(APP, "e3", "r3", 300),
        ],
    )
    .await;
    let batch = claim_app(&store, "w1", 10, 1_000, 1_000).await;
    let report = mark(
        &store,
        &batch.lease,
        &[
            delivered("e1"),
            retryable("e2", 5_000, "boom"),
            failed("e3", "bad"),
        ],
        1_100,
    )
    .await;
    assert_eq!(
        report,
        MarkReport {
            applied: 3,
            stale: vec![]
        }
    );

    let e1 = db.row(APP, "e1").await.unwrap();
    assert_eq!(e1.status, "delivered");
    assert_eq!(e1.retry_count, 0);
    assert_eq!(e1.last_error, None);
    assert!(e1.lease_cleared(), "{e1:?}");
    assert_eq!(e1.updated_at_ms, 1_100);

    let e2 = db.row(APP, "e2").await.unwrap();
    assert_eq!(e2.status, "retryable");
    assert_eq!(e2.retry_count, 1);
    assert_eq!(e2.next_retry_at_ms, Some(5_000));
    assert_eq!(e2.last_error.as_deref(), Some("boom"));
    assert!(e2.lease_cleared(), "{e2:?}");
    assert_eq!(e2.updated_at_ms, 1_100);

    let e3 = db.row(APP, "e3").await.unwrap();
    assert_eq!(e3.status, "failed");
    assert_eq!(e3.retry_count, 1);
    assert_eq!(e3.last_error.as_deref(), Some("bad"));
    assert!(e3.lease_cleared(), "{e3:?}");

    let c = counts(&store, Some(APP), 1_100).await;
    assert_eq!(
        (c.pending, c.delivering, c.retryable, c.failed, c.delivered),
        (0, 0, 1, 1, 1)
    );

    // A retried row that is then delivered clears its error.
    let again = claim_app(&store, "w2", 10, 6_000, 1_000).await;
    assert_eq!(ids(&again), strs(&["e2"]));
    assert_eq!(again.events[0].event.attempt, 2);
    mark(&store, &again.lease, &[delivered("e2")], 6_001).await;
    let e2 = db.row(APP, "e2").await.unwrap();
    assert_eq!(
        (e2.status.as_str(), e2.last_error.as_deref()),
        ("delivered", None)
    );
    assert_eq!(e2.retry_count, 1);
}

async fn mark_is_fenced_against_a_reclaimed_row(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(APP, "e1", "r1", 100)]).await;
    let old = claim_app(&store, "w1", 10, 1_000, 100).await;
    let new = claim_app(&store, "w2", 10, 2_000, 1_000).await;
    assert_eq!(ids(&new), strs(&["e1"]));
    let before = db.row(APP, "e1").await.unwrap();

    for m in [
        delivered("e1"),
        retryable("e1", 9_999, "late"),
        failed("e1", "late"),
    ] {
        let report = mark(&store, &old.lease, &[m], 2_100).await;
        assert_eq!(
            report,
            MarkReport {
                applied: 0,
                stale: strs(&["e1"])
            }
        );
        assert_eq!(
            db.row(APP, "e1").await.unwrap(),
            before,
            "stale mark changed the row"
        );
    }
    let report = mark(&store, &new.lease, &[delivered("e1")], 2_200).await;
    assert_eq!(
        report,
        MarkReport {
            applied: 1,
            stale: vec![]
        }
    );
    assert_eq!(status_of(&db, APP, "e1").await, "delivered");
}

async fn mark_reports_only_the_stale_rows(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "a", "r1", 100), record(APP, "b", "r2", 200)],
    )
    .await;
    let first = claim_app(&store, "w1", 1, 1_000, 100).await;
    let second = claim_app(&store, "w1", 1, 1_000, 100).await;
    assert_eq!(first.lease, second.lease);
    // w2 reclaims a (the older), not b.
    let taken = claim_app(&store, "w2", 1, 2_000, 1_000).await;
    assert_eq!(ids(&taken), strs(&["a"]));
    // w1's lease on b expired but nobody took it: the fence still matches.
    let report = mark(
        &store,
        &first.lease,
        &[delivered("a"), delivered("b"), delivered("nope")],
        2_100,
    )
    .await;
    assert_eq!(report.applied, 1);
    let stale: BTreeSet<String> = report.stale.into_iter().collect();
    assert_eq!(stale, ["a", "nope"].iter().map(|s| s.to_string()).collect());
    assert_eq!(status_of(&db, APP, "a").await, "delivering");
    assert_eq!(status_of(&db, APP, "b").await, "delivered");
}

async fn mark_is_fenced_against_a_requeued_or_finished_row(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r1", 100), record(APP, "e2", "r2", 200)],
    )
    .await;
    let batch = claim_app(&store, "w1", 10, 1_000, 10_000).await;
    let report = mark(
        &store,
        &batch.lease,
        &[failed("e1", "no"), delivered("e2")],
        1_100,
    )
    .await;
    assert_eq!(report.applied, 2);
    let filter = FailedFilter {
        event_ids: strs(&["e1"]),
        ..FailedFilter::default()
    };
    assert_eq!(requeue(&store, filter, false, 1_200).await, 1);

    // The same lease again: e1 was requeued (pending), e2 already delivered.
    let report = mark(
        &store,
        &batch.lease,
        &[delivered("e1"), failed("e2", "x")],
        1_300,
    )
    .await;
    assert_eq!(report.applied, 0);
    let stale: BTreeSet<String> = report.stale.into_iter().collect();
    assert_eq!(stale, ["e1", "e2"].iter().map(|s| s.to_string()).collect());
    assert_eq!(status_of(&db, APP, "e1").await, "pending");
    let e2 = db.row(APP, "e2").await.unwrap();
    assert_eq!((e2.status.as_str(), e2.last_error), ("delivered", None));
}

async fn mark_cuts_last_error_at_a_utf8_boundary(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r1", 100), record(APP, "e2", "r2", 200)],
    )
    .await;
    let batch = claim_app(&store, "w1", 10, 1_000, 1_000).await;
    let two_byte = format!("x{}", "é".repeat(400)); // 801 bytes; the cut falls inside an 'é'
    let four_byte = format!("ab{}", "😀".repeat(200)); // 802 bytes; the cut falls inside a '😀'
    mark(
        &store,
        &batch.lease,
        &[retryable("e1", 5_000, &two_byte), failed("e2", &four_byte)],
        1_100,
    )
    .await;
    for (id, long) in [("e1", &two_byte), ("e2", &four_byte)] {
        let stored = db
            .row(APP, id)
            .await
            .unwrap()
            .last_error
            .expect("last_error");
        assert!(
            stored.len() <= LAST_ERROR_MAX_BYTES,
            "{id}: {} bytes",
            stored.len()
        );
        assert!(long.starts_with(&stored), "{id}: not a prefix");
        assert_eq!(stored, truncate_error(long), "{id}");
    }
    assert_eq!(
        db.row(APP, "e1").await.unwrap().last_error.unwrap().len(),
        511
    );
    assert_eq!(
        db.row(APP, "e2").await.unwrap().last_error.unwrap().len(),
        510
    );
}

async fn mark_rejects_duplicate_ids(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(APP, "e1", "r1", 100)]).await;
    let batch = claim_app(&store, "w1", 10, 1_000, 1_000).await;
    let before = db.row(APP, "e1").await.unwrap();
    let result = store
        .mark(&MarkParams {
            lease: &batch.lease,
            marks: &[delivered("e1"), failed("e1", "twice")],
            now_ms: 1_100,
        })
        .await;
    assert!(matches!(result, Err(StoreError::Invalid(_))), "{result:?}");
    assert_eq!(db.row(APP, "e1").await.unwrap(), before);
    assert_eq!(
        mark(&store, &batch.lease, &[], 1_100).await,
        MarkReport::default()
    );
    assert_eq!(
        mark(&store, &batch.lease, &[delivered("e1")], 1_100)
            .await
            .applied,
        1
    );
}

/// Asserts the rule every status change keeps (the claim statements' module docs): a retry time
/// (above 0) only on `retryable` rows, a lease only on `delivering` ones. MySQL's / MariaDB's
/// retry and lease indexes rely on it to stay untouched by other status changes.
async fn assert_rule(db: &crate::support::TestDb, when: &str) {
    for row in db.all_rows(outboxd::store::DEFAULT_TABLE).await {
        let retry = row.next_retry_at_ms.unwrap_or(0);
        assert_eq!(
            retry > 0,
            row.status == "retryable",
            "{when}: {} is {} with next_retry_at_ms {retry}",
            row.event_id,
            row.status
        );
        assert_eq!(
            row.lock_until_ms.is_some(),
            row.status == "delivering",
            "{when}: {} is {} with lock_until_ms {:?}",
            row.event_id,
            row.status,
            row.lock_until_ms
        );
    }
}

/// Through every status change outboxd makes (lease, delivered, retryable, deferred, failed, a
/// reclaim of a retried row, a retry at its last attempt rejected by the claim, a requeue), a row
/// has a retry time only while `retryable` and a lease only while `delivering`.
async fn status_changes_keep_retry_time_and_lease_to_their_states(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let ids_of = |n: &[&str]| {
        n.iter()
            .map(|id| record(APP, id, "r", 1))
            .collect::<Vec<_>>()
    };
    enqueue(&store, &ids_of(&["a", "b", "c", "d", "e"])).await;
    assert_rule(&db, "enqueued").await;
    let first = claim_app(&store, "w1", 10, 1_000, 1_000).await;
    assert_eq!(first.events.len(), 5);
    assert_rule(&db, "leased").await;
    let marks = [
        delivered("a"),
        retryable("b", 5_000, "later"),
        failed("c", "never"),
        deferred("d", 5_000, "breaker open"),
        retryable("e", 5_000, "later"),
    ];
    mark(&store, &first.lease, &marks, 1_010).await;
    assert_rule(&db, "marked").await;
    // b, d and e are due: leased again (their retry time back to 0).
    let second = claim_app(&store, "w1", 10, 6_000, 1_000).await;
    assert_eq!(second.events.len(), 3);
    assert_rule(&db, "reclaimed").await;
    mark(
        &store,
        &second.lease,
        &[
            delivered("b"),
            failed("d", "gave up"),
            retryable("e", 7_000, "again"),
        ],
        6_010,
    )
    .await;
    assert_rule(&db, "marked again").await;
    // e leased once more and its worker gone: reclaimed at its last attempt, the claim rejects it.
    assert_eq!(
        ids(&claim_app(&store, "w1", 10, 8_000, 1_000).await),
        strs(&["e"])
    );
    assert_rule(&db, "leased again").await;
    let mut last = params(APP, "w2", 10, 10_000, 1_000);
    last.max_attempts = 3;
    let rejected = claim(&store, last).await;
    assert!(rejected.events.is_empty(), "{:?}", ids(&rejected));
    assert_eq!(status_of(&db, APP, "e").await, "failed");
    assert_rule(&db, "rejected").await;
    let every_failed = FailedFilter {
        app_code: Some(APP.into()),
        ..FailedFilter::default()
    };
    assert_eq!(requeue(&store, every_failed, false, 9_000).await, 3);
    assert_rule(&db, "requeued").await;
}
