//! `mark`: deliveries, retries and failures of a read batch applied in one call, each row once,
//! fenced on the batch's partition (its owner and epoch) and on the row being live (`pending`,
//! `retryable`, `delivering`): a row finished meanwhile, or an id the table does not hold, is
//! reported stale and left as it is. (A host that lost its partition: `partitions.rs`.)

use std::collections::BTreeSet;

use outboxd::record::{LAST_ERROR_MAX_BYTES, truncate_error};
use outboxd::store::internals::{MarkAt, mark_statements};
use outboxd::store::{
    Backend, DEFAULT_TABLE, FailedFilter, MarkParams, MarkReport, PartitionRead, StoreError,
    TableName,
};

use crate::conformance::helpers::{
    APP, HOST, counts, deferred, delivered, enqueue, failed, ids, mark, own_all, read_app,
    read_room, reading, requeue, retryable, setup, status_of, strs,
};
use crate::support::{Bind, RawInsert, record};

crate::support::per_backend!(
    mark_applies_a_mix_in_one_call,
    mark_deferred_spends_no_attempt,
    mark_reports_only_the_stale_rows,
    mark_is_fenced_against_a_finished_row,
    mark_cuts_last_error_at_a_utf8_boundary,
    mark_rejects_duplicate_ids,
    status_changes_keep_retry_time_and_lease_to_their_states,
    a_mark_run_again_after_a_lost_reply_counts_no_second_attempt,
);

/// A deferred row (its sink's breaker was open) goes back to `retryable` at its time without
/// spending an attempt, beside a retried row that does spend one, in the same statement.
async fn mark_deferred_spends_no_attempt(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r", 100), record(APP, "e2", "r", 200)],
    )
    .await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_000).await;
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
    let early = read_app(&store, &own, 10, 4_999).await;
    assert_eq!(ids(&early), strs(&["e1"]));
    mark(&store, &early.lease, &[delivered("e1")], 4_999).await;
    let due = read_app(&store, &own, 10, 5_000).await;
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
        let one_attempt = PartitionRead {
            max_attempts: 1,
            ..reading(APP, HOST, now)
        };
        let again = read_room(&store, &own, &one_attempt).await;
        assert_eq!(
            ids(&again),
            strs(&["e2"]),
            "deferred row not handed out at {now}"
        );
        assert!(again.rejected.is_empty());
        assert_eq!(again.events[0].event.attempt, 1);
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
            record(APP, "e1", "r", 100),
            record(APP, "e2", "r", 200),
            record(APP, "e3", "r", 300),
        ],
    )
    .await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_000).await;
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
    assert_eq!(e1.worker_id, None, "a delivered row names no host");

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
    assert_eq!(
        (e2.worker_id.as_deref(), e3.worker_id.as_deref()),
        (Some(HOST), Some(HOST)),
        "a row not delivered names the host that tried it"
    );

    let c = counts(&store, Some(APP), 1_100).await;
    assert_eq!(
        (c.pending, c.delivering, c.retryable, c.failed, c.delivered),
        (0, 0, 1, 1, 1)
    );

    // A retried row that is then delivered clears its error.
    let again = read_app(&store, &own, 10, 6_000).await;
    assert_eq!(ids(&again), strs(&["e2"]));
    assert_eq!(again.events[0].event.attempt, 2);
    mark(&store, &again.lease, &[delivered("e2")], 6_001).await;
    let e2 = db.row(APP, "e2").await.unwrap();
    assert_eq!(
        (
            e2.status.as_str(),
            e2.last_error.as_deref(),
            e2.worker_id.as_deref()
        ),
        ("delivered", None, None)
    );
    assert_eq!(e2.retry_count, 1);
}

/// A batch marked in parts (each sink's results as it answers): a row already marked by an
/// earlier part, and an id the table does not hold, are the stale ones; the rest applies.
async fn mark_reports_only_the_stale_rows(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "a", "r", 100), record(APP, "b", "r", 200)],
    )
    .await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_000).await;
    assert_eq!(ids(&batch), strs(&["a", "b"]));
    let part = mark(&store, &batch.lease, &[failed("a", "bad")], 1_100).await;
    assert_eq!(part.applied, 1);
    let report = mark(
        &store,
        &batch.lease,
        &[delivered("a"), delivered("b"), delivered("nope")],
        1_200,
    )
    .await;
    assert_eq!(report.applied, 1);
    let stale: BTreeSet<String> = report.stale.into_iter().collect();
    assert_eq!(stale, ["a", "nope"].iter().map(|s| s.to_string()).collect());
    let a = db.row(APP, "a").await.unwrap();
    assert_eq!(
        (a.status.as_str(), a.updated_at_ms),
        ("failed", 1_100),
        "marked once"
    );
    assert_eq!(status_of(&db, APP, "b").await, "delivered");
}

/// The same batch marked again after its rows were finished (a mark retried after it committed):
/// a row failed and a row delivered stay as the first mark left them.
async fn mark_is_fenced_against_a_finished_row(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r", 100), record(APP, "e2", "r", 200)],
    )
    .await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_000).await;
    let report = mark(
        &store,
        &batch.lease,
        &[failed("e1", "no"), delivered("e2")],
        1_100,
    )
    .await;
    assert_eq!(report.applied, 2);
    let before = db.all_rows(DEFAULT_TABLE).await;

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
    assert_eq!(
        db.all_rows(DEFAULT_TABLE).await,
        before,
        "a finished row changed"
    );
}

async fn mark_cuts_last_error_at_a_utf8_boundary(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r", 100), record(APP, "e2", "r", 200)],
    )
    .await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_000).await;
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
    enqueue(&store, &[record(APP, "e1", "r", 100)]).await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_000).await;
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
    for row in db.all_rows(DEFAULT_TABLE).await {
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

/// Through every status change outboxd makes (delivered, retryable, deferred, failed, a retried
/// row read and marked again, the expired leases of an old-version host marked or rejected at
/// their last attempt, a requeue), a row has a retry time only while `retryable` and a lease
/// only while `delivering`.
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
    // Two rows an old-version host leased, whose leases ended: one at its last attempt.
    let leased = |id: &str, retry_count: i64| RawInsert {
        worker_id: Some("old-host".into()),
        lock_until_ms: Some(500),
        retry_count: Some(retry_count),
        ..RawInsert::pending(APP, id, "r", 2).with_status("delivering")
    };
    db.insert_raw(DEFAULT_TABLE, &[leased("x", 0), leased("y", 2)])
        .await;
    assert_rule(&db, "enqueued").await;
    let own = own_all(&store, APP, HOST).await;
    let three = |now_ms: i64| PartitionRead {
        max_attempts: 3,
        ..reading(APP, HOST, now_ms)
    };
    let first = read_room(&store, &own, &three(1_000)).await;
    assert_eq!(ids(&first), strs(&["a", "b", "c", "d", "e", "x"]));
    assert_eq!(first.rejected.len(), 1, "y at its last attempt");
    assert_eq!(status_of(&db, APP, "y").await, "failed");
    assert_rule(&db, "read").await;
    let marks = [
        delivered("a"),
        retryable("b", 5_000, "later"),
        failed("c", "never"),
        deferred("d", 5_000, "breaker open"),
        retryable("e", 5_000, "later"),
        retryable("x", 5_000, "later"),
    ];
    mark(&store, &first.lease, &marks, 1_010).await;
    assert_rule(&db, "marked").await;
    // b, d, e and x are due: read again, and marked.
    let second = read_room(&store, &own, &three(6_000)).await;
    assert_eq!(ids(&second), strs(&["b", "d", "e", "x"]));
    mark(
        &store,
        &second.lease,
        &[
            delivered("b"),
            failed("d", "gave up"),
            retryable("e", 7_000, "again"),
            delivered("x"),
        ],
        6_010,
    )
    .await;
    assert_rule(&db, "marked again").await;
    let every_failed = FailedFilter {
        app_code: Some(APP.into()),
        ..FailedFilter::default()
    };
    assert_eq!(requeue(&store, every_failed, false, 9_000).await, 3);
    assert_rule(&db, "requeued").await;
}

/// A mark whose reply was lost (the connection broke after the database committed it) runs
/// again with the same time: the run again leaves the rows the first run changed alone, so a
/// `retryable` row counts one failed attempt, not two, and keeps the first run's retry time.
/// Without the guard the same statement matches the row again (it is still live): the control.
async fn a_mark_run_again_after_a_lost_reply_counts_no_second_attempt(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(APP, "e1", "r", 100)]).await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_000).await;
    let marks = [retryable("e1", 2_000, "boom")];
    let report = mark(&store, &batch.lease, &marks, 1_100).await;
    assert_eq!(report.applied, 1);
    let first = db.row(APP, "e1").await.unwrap();
    assert_eq!(
        (first.retry_count, first.next_retry_at_ms),
        (1, Some(2_000))
    );

    let table = TableName::new(DEFAULT_TABLE).expect("table name");
    // The statement each database runs first: one UPDATE (MySQL lists the rows it changed after).
    let statement = |again| {
        let at = MarkAt {
            now_ms: 1_100,
            again,
        };
        let (_, update) = mark_statements(backend, &table, &batch.lease, &marks, at)
            .into_iter()
            .next()
            .expect("a mark statement");
        let binds: Vec<Bind> = update.args.iter().map(Bind::from_arg).collect();
        (update.sql, binds)
    };
    let (sql, binds) = statement(true);
    assert_eq!(
        db.execute(&sql, &binds).await,
        0,
        "the run again changed the row: {sql}"
    );
    let after = db.row(APP, "e1").await.unwrap();
    assert_eq!(
        (after.retry_count, after.next_retry_at_ms),
        (1, Some(2_000))
    );

    // The control: the first run's statement again (no guard) counts a second attempt.
    let (sql, binds) = statement(false);
    assert_eq!(db.execute(&sql, &binds).await, 1, "{sql}");
    assert_eq!(db.row(APP, "e1").await.unwrap().retry_count, 2);
}
