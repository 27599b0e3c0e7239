//! `claim` without ordering: which rows a claim takes and in which order (pending, due retryable,
//! expired leases), the lease it writes, and rows it must isolate or never share.

use std::collections::BTreeMap;
use std::sync::Arc;

use outboxd::record::truncate_error;
use outboxd::store::internals::HEAD_SCAN_EVERY_MS;
use outboxd::store::{
    Backend, ClaimBatch, ClaimParams, DEFAULT_TABLE, FailedFilter, Lease, MarkReport, OutboxStore,
};

use crate::helpers::{
    APP, OTHER, claim, claim_app, counts, delivered, enqueue, ids, list_failed, mark, params,
    retryable, setup, status_of, strs,
};
use crate::support::{RawInsert, record};

crate::support::per_backend!(
    claim_orders_pending_by_created_at_then_event_id,
    claim_takes_a_burst_of_one_timestamp_in_the_order_it_was_built,
    claim_takes_pending_then_due_retryable_then_expired_leases,
    claim_limit_takes_branches_in_order,
    claim_without_scan_due_reads_due_rows_only_when_nothing_is_pending,
    claim_honours_limit,
    claim_writes_the_lease,
    claim_skips_live_leases,
    claim_reclaims_an_expired_lease_as_an_attempt,
    claim_fails_an_expired_lease_at_max_attempts,
    claim_isolates_a_corrupt_envelope,
    claim_rejects_an_envelope_of_another_tenant,
    claim_rejects_an_envelope_disagreeing_with_its_row,
    claim_concurrent_claims_never_share_a_row,
    claim_never_comes_back_short_while_an_older_row_waits,
    claim_reads_the_head_again_within_a_second_of_a_full_backlog,
    claim_hands_out_a_one_millisecond_backlog_in_order_and_a_late_row_of_it,
);

/// The event ids a claim rejected (undecodable or foreign envelopes), in claim order.
fn rejected_ids(batch: &ClaimBatch) -> Vec<String> {
    batch.rejected.iter().map(|r| r.event_id.clone()).collect()
}

/// Bytes that no protobuf decoder accepts: a varint tag that never ends.
fn corrupt_envelope() -> Vec<u8> {
    vec![0xff; 12]
}

async fn claim_orders_pending_by_created_at_then_event_id(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[
            record(APP, "e-b", "r1", 200),
            record(APP, "e-0", "r2", 300),
            record(APP, "e-a", "r3", 200),
            record(APP, "e-c", "r4", 100),
        ],
    )
    .await;
    enqueue(&store, &[record(APP, "e-00", "r5", 200)]).await;
    let batch = claim_app(&store, "w1", 10, 1_000, 1_000).await;
    assert_eq!(ids(&batch), strs(&["e-c", "e-00", "e-a", "e-b", "e-0"]));
    let created: Vec<i64> = batch.events.iter().map(|e| e.created_at_ms).collect();
    assert_eq!(created, vec![100, 200, 200, 200, 300]);
}

/// A burst built with one timestamp (`Record::build`, as `outboxd-bench` enqueues its backlog) is
/// claimed in the order it was built and inserted: its ids count up within the millisecond, so a
/// claimed batch is a run of neighbouring rows (on SQLite, neighbouring pages of the table).
async fn claim_takes_a_burst_of_one_timestamp_in_the_order_it_was_built(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let at = std::time::SystemTime::now();
    let burst: Vec<_> = (0..300)
        .map(|i| {
            outboxd::record::Record::build(format!("r{}", i % 7), "Burst", i, at, &())
                .with_app_code(APP)
        })
        .collect();
    enqueue(&store, &burst).await;
    let now_ms = burst[0].created_at_ms + 1_000;
    let mut claimed = Vec::new();
    for worker in ["w1", "w2", "w3"] {
        claimed.extend(ids(&claim_app(&store, worker, 100, now_ms, 60_000).await));
    }
    let built: Vec<String> = burst.iter().map(|r| r.event_id.clone()).collect();
    assert_eq!(claimed, built);
}

/// Rows a(100) x(150) b(200) c(300) d2(350) d(400) claimed by w1 at 1000 (lease 100), then: a
/// and x retryable due 1500 (within a branch the order is the due time, then created_at: equal
/// due times leave created_at to decide), b retryable due 5000, c delivered, d2/d left
/// delivering (lease expired at 1100); then p2(950), p1(900) enqueued pending.
async fn mixed_claim_setup(store: &Arc<dyn OutboxStore>) {
    let names = [
        ("a", 100),
        ("x", 150),
        ("b", 200),
        ("c", 300),
        ("d2", 350),
        ("d", 400),
    ];
    let recs: Vec<_> = names
        .iter()
        .map(|(id, t)| record(APP, id, id, *t))
        .collect();
    enqueue(store, &recs).await;
    let first = claim_app(store, "w1", 6, 1_000, 100).await;
    assert_eq!(ids(&first), strs(&["a", "x", "b", "c", "d2", "d"]));
    let report = mark(
        store,
        &first.lease,
        &[
            retryable("a", 1_500, "a failed"),
            retryable("x", 1_500, "x failed"),
            retryable("b", 5_000, "b failed"),
            delivered("c"),
        ],
        1_001,
    )
    .await;
    assert_eq!(
        report,
        MarkReport {
            applied: 4,
            stale: vec![]
        }
    );
    enqueue(
        store,
        &[record(APP, "p2", "p2", 950), record(APP, "p1", "p1", 900)],
    )
    .await;
}

async fn claim_takes_pending_then_due_retryable_then_expired_leases(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    mixed_claim_setup(&store).await;
    let batch = claim_app(&store, "w2", 10, 2_000, 100).await;
    assert_eq!(
        ids(&batch),
        strs(&["p1", "p2", "a", "x", "d2", "d"]),
        "pending, then due retryable, then expired leases, each by created_at; b is not due"
    );
    let retries: Vec<u32> = batch.events.iter().map(|e| e.retry_count).collect();
    assert_eq!(retries, vec![0, 0, 1, 1, 1, 1]);
    let attempts: Vec<u32> = batch.events.iter().map(|e| e.event.attempt).collect();
    assert_eq!(attempts, vec![1, 1, 2, 2, 2, 2]);
    assert_eq!(status_of(&db, APP, "b").await, "retryable");
    assert_eq!(status_of(&db, APP, "c").await, "delivered");
}

async fn claim_limit_takes_branches_in_order(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    mixed_claim_setup(&store).await;
    let mut seen = Vec::new();
    for i in 0..6 {
        let batch = claim_app(&store, &format!("w{i}"), 1, 2_000, 100_000).await;
        assert_eq!(batch.events.len(), 1, "limit 1, claim {i}");
        seen.extend(ids(&batch));
    }
    assert_eq!(seen, strs(&["p1", "p2", "a", "x", "d2", "d"]));
    assert!(
        claim_app(&store, "w9", 10, 2_000, 100)
            .await
            .events
            .is_empty()
    );
    // b becomes due later.
    assert_eq!(
        ids(&claim_app(&store, "w9", 10, 5_000, 100).await),
        strs(&["b"])
    );
}

/// A claim with `scan_due = false` (a busy worker loop between two scans) hands out the pending
/// rows alone, leaving due retryable rows and expired leases untouched; the next claim that finds
/// nothing pending takes them, the reclaimed leases as an attempt; and one with `scan_due = true`
/// reads every branch as before.
async fn claim_without_scan_due_reads_due_rows_only_when_nothing_is_pending(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    mixed_claim_setup(&store).await;
    let busy = |worker: &str| ClaimParams {
        scan_due: false,
        ..params(APP, worker, 10, 2_000, 100)
    };
    let pending_only = claim(&store, busy("w2")).await;
    assert_eq!(
        ids(&pending_only),
        strs(&["p1", "p2"]),
        "pending rows were handed out: the due branches are not read"
    );
    assert_eq!(status_of(&db, APP, "a").await, "retryable");
    let row = db.row(APP, "d").await.unwrap();
    assert_eq!(
        (
            row.status.as_str(),
            row.worker_id.as_deref(),
            row.retry_count
        ),
        ("delivering", Some("w1"), 0),
        "the expired lease is left as it was"
    );
    let due = claim(&store, busy("w3")).await;
    assert_eq!(
        ids(&due),
        strs(&["a", "x", "d2", "d"]),
        "nothing pending: due retryable rows, then expired leases"
    );
    let attempts: Vec<u32> = due.events.iter().map(|e| e.event.attempt).collect();
    assert_eq!(attempts, vec![2, 2, 2, 2]);

    // The same table state again, read by a scanning claim: every branch at once.
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    mixed_claim_setup(&store).await;
    let all = claim(&store, params(APP, "w2", 10, 2_000, 100)).await;
    assert_eq!(ids(&all), strs(&["p1", "p2", "a", "x", "d2", "d"]));
}

async fn claim_honours_limit(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let recs: Vec<_> = (0..10)
        .map(|i| record(APP, &format!("e{i:02}"), "r", 100 + i))
        .collect();
    enqueue(&store, &recs).await;
    let mut all = Vec::new();
    for (i, expect) in [3usize, 3, 3, 1, 0].into_iter().enumerate() {
        let batch = claim_app(&store, &format!("w{i}"), 3, 1_000, 10_000).await;
        assert_eq!(batch.events.len(), expect, "claim {i}");
        all.extend(ids(&batch));
    }
    let expected: Vec<String> = (0..10).map(|i| format!("e{i:02}")).collect();
    assert_eq!(all, expected);
}

async fn claim_writes_the_lease(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(APP, "e1", "r1", 100)]).await;
    let batch = claim_app(&store, "worker-1", 10, 1_000, 30_000).await;
    assert_eq!(
        batch.lease,
        Lease {
            app_code: APP.into(),
            worker_id: "worker-1".into(),
            lock_until_ms: 31_000,
            partition: None,
        }
    );
    assert!(batch.rejected.is_empty());
    let row = db.row(APP, "e1").await.unwrap();
    assert_eq!(row.status, "delivering");
    assert_eq!(row.worker_id.as_deref(), Some("worker-1"));
    assert_eq!(row.lock_until_ms, Some(31_000));
    assert_eq!(row.retry_count, 0);
    assert_eq!(batch.events[0].event.attempt, 1);
    let c = counts(&store, Some(APP), 1_000).await;
    assert_eq!((c.pending, c.delivering), (0, 1));
}

async fn claim_skips_live_leases(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r1", 100), record(APP, "e2", "r2", 200)],
    )
    .await;
    let first = claim_app(&store, "w1", 1, 1_000, 1_000).await;
    assert_eq!(ids(&first), strs(&["e1"]));
    let second = claim_app(&store, "w2", 10, 1_500, 1_000).await;
    assert_eq!(ids(&second), strs(&["e2"]), "e1's lease runs until 2000");
    assert!(
        claim_app(&store, "w3", 10, 1_600, 1_000)
            .await
            .events
            .is_empty()
    );
    let row = db.row(APP, "e1").await.unwrap();
    assert_eq!(
        (row.worker_id.as_deref(), row.lock_until_ms),
        (Some("w1"), Some(2_000))
    );
}

async fn claim_reclaims_an_expired_lease_as_an_attempt(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(APP, "e1", "r1", 100)]).await;
    let first = claim_app(&store, "w1", 10, 1_000, 100).await;
    assert_eq!(first.events[0].event.attempt, 1);
    let second = claim_app(&store, "w2", 10, 2_000, 500).await;
    assert_eq!(ids(&second), strs(&["e1"]));
    assert_eq!(second.events[0].retry_count, 1);
    assert_eq!(second.events[0].event.attempt, 2);
    let row = db.row(APP, "e1").await.unwrap();
    assert_eq!(row.status, "delivering");
    assert_eq!(row.retry_count, 1);
    assert_eq!(row.worker_id.as_deref(), Some("w2"));
    assert_eq!(row.lock_until_ms, Some(2_500));
    let third = claim_app(&store, "w3", 10, 3_000, 500).await;
    assert_eq!(third.events[0].event.attempt, 3);
}

async fn claim_fails_an_expired_lease_at_max_attempts(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(APP, "killer", "r1", 100)]).await;
    let mut p = params(APP, "w1", 10, 1_000, 100);
    p.max_attempts = 2;
    assert_eq!(claim(&store, p.clone()).await.events[0].event.attempt, 1);
    p.worker_id = "w2".into();
    p.now_ms = 2_000;
    assert_eq!(claim(&store, p.clone()).await.events[0].event.attempt, 2);

    // Its second lease expires too: no third attempt.
    enqueue(&store, &[record(APP, "next", "r2", 200)]).await;
    p.worker_id = "w3".into();
    p.now_ms = 3_000;
    let batch = claim(&store, p).await;
    assert_eq!(ids(&batch), strs(&["next"]), "the rest of the batch flows");
    assert_eq!(rejected_ids(&batch), strs(&["killer"]));
    let rejected = &batch.rejected[0];
    assert_eq!(
        (rejected.event_type.as_str(), rejected.room_id.as_str()),
        ("T.r1", "r1")
    );
    assert!(!rejected.reason.is_empty());
    let row = db.row(APP, "killer").await.unwrap();
    assert_eq!(row.status, "failed");
    assert_eq!(
        row.last_error.as_deref(),
        Some(truncate_error(&rejected.reason).as_str())
    );
    assert!(
        row.lock_until_ms.is_none(),
        "a failed row keeps no lease: {row:?}"
    );
    assert_eq!(
        list_failed(&store, FailedFilter::default(), 10).await,
        strs(&["killer"])
    );
    assert!(
        claim_app(&store, "w4", 10, 9_000, 100)
            .await
            .events
            .iter()
            .all(|e| e.event.event_id != "killer")
    );
}

async fn claim_isolates_a_corrupt_envelope(backend: Backend) {
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
        &[RawInsert::pending(APP, "bad", "r3", 200).with_envelope(corrupt_envelope())],
    )
    .await;
    let batch = claim_app(&store, "w1", 10, 1_000, 1_000).await;
    assert_eq!(ids(&batch), strs(&["g1", "g2"]));
    assert_eq!(rejected_ids(&batch), strs(&["bad"]));
    let rejected = &batch.rejected[0];
    assert_eq!(
        (rejected.event_type.as_str(), rejected.room_id.as_str()),
        ("T.r3", "r3")
    );
    assert!(!rejected.reason.is_empty());
    let row = db.row(APP, "bad").await.unwrap();
    assert_eq!(row.status, "failed");
    let last_error = row.last_error.expect("decode error in last_error");
    assert_eq!(last_error, truncate_error(&rejected.reason));
    let c = counts(&store, Some(APP), 1_000).await;
    assert_eq!((c.delivering, c.failed, c.pending), (2, 1, 0));
}

async fn claim_rejects_an_envelope_of_another_tenant(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let foreign = record(OTHER, "e1", "r1", 100).encoded_envelope();
    let other_event = record(APP, "e9", "r1", 300).encoded_envelope();
    db.insert_raw(
        DEFAULT_TABLE,
        &[
            RawInsert::pending(APP, "e1", "r1", 100).with_envelope(foreign),
            RawInsert::pending(APP, "e2", "r1", 200),
            RawInsert::pending(APP, "e3", "r1", 300).with_envelope(other_event),
        ],
    )
    .await;
    let batch = claim_app(&store, "w1", 10, 1_000, 1_000).await;
    assert_eq!(ids(&batch), strs(&["e2"]));
    assert_eq!(
        rejected_ids(&batch),
        strs(&["e1", "e3"]),
        "another tenant's / another event's envelope"
    );
    assert_eq!(status_of(&db, APP, "e1").await, "failed");
    assert!(db.row(APP, "e1").await.unwrap().last_error.is_some());
}

/// Every identity field of the envelope must agree with its row (or be empty: then the row's
/// value fills it); a disagreement or a zero-byte envelope fails the row naming the field, and the
/// CLI filters (which read the columns) find it.
async fn claim_rejects_an_envelope_disagreeing_with_its_row(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let with = |event_id: &str, change: &dyn Fn(&mut outboxd::record::Record)| {
        let mut r = record(APP, event_id, "r1", 100);
        change(&mut r);
        r.encoded_envelope()
    };
    let other_type = with("e1", &|r| r.envelope.event_type = "OtherType".into());
    let other_room = with("e2", &|r| r.envelope.room_id = "r9".into());
    let blank_identity = with("e5", &|r| {
        r.envelope.event_type.clear();
        r.envelope.room_id.clear();
    });
    db.insert_raw(
        DEFAULT_TABLE,
        &[
            RawInsert::pending(APP, "e1", "r1", 100).with_envelope(other_type),
            RawInsert::pending(APP, "e2", "r1", 200).with_envelope(other_room),
            RawInsert::pending(APP, "e3", "r1", 300).with_envelope(Vec::new()),
            RawInsert::pending(APP, "e4", "r1", 400),
            RawInsert::pending(APP, "e5", "r1", 500).with_envelope(blank_identity),
        ],
    )
    .await;
    let batch = claim_app(&store, "w1", 10, 1_000, 1_000).await;
    assert_eq!(ids(&batch), strs(&["e4", "e5"]));
    let e5 = &batch.events[1].event;
    assert_eq!(
        (e5.event_type.as_str(), e5.room_id.as_str()),
        ("T.r1", "r1"),
        "empty envelope fields take the row's values"
    );
    assert_eq!(rejected_ids(&batch), strs(&["e1", "e2", "e3"]));
    for (event_id, expected) in [
        (
            "e1",
            "envelope event_type \"OtherType\" does not match the row's event_type \"T.r1\"",
        ),
        (
            "e2",
            "envelope room_id \"r9\" does not match the row's room_id \"r1\"",
        ),
        ("e3", "envelope is empty"),
    ] {
        let row = db.row(APP, event_id).await.unwrap();
        assert_eq!(row.status, "failed", "{event_id}");
        let last_error = row.last_error.unwrap_or_default();
        assert!(last_error.contains(expected), "{event_id}: {last_error}");
    }
    let by_type = FailedFilter {
        event_type: Some("T.r1".into()),
        ..FailedFilter::default()
    };
    assert_eq!(
        list_failed(&store, by_type, 10).await,
        strs(&["e1", "e2", "e3"]),
        "the row's event_type is the one filters see"
    );
}

async fn claim_concurrent_claims_never_share_a_row(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let recs: Vec<_> = (0..1_000)
        .map(|i| {
            record(
                APP,
                &format!("e{i:04}"),
                &format!("r{}", i % 7),
                1_000 + i / 3,
            )
        })
        .collect();
    assert_eq!(enqueue(&store, &recs).await, 1_000);
    let second = db.store_default().await;
    let now = outboxd::record::now_ms();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let store = if i % 2 == 0 {
            store.clone()
        } else {
            second.clone()
        };
        tasks.push(tokio::spawn(async move {
            let worker = format!("w{i}");
            let mut got = Vec::new();
            loop {
                let batch = store
                    .claim(&params(APP, &worker, 50, now, 600_000))
                    .await
                    .unwrap_or_else(|e| panic!("{worker}: {e}"));
                assert!(batch.events.len() <= 50);
                if batch.events.is_empty() {
                    return (worker, got);
                }
                got.extend(ids(&batch));
            }
        }));
    }
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    for task in tasks {
        let (worker, got) = task.await.expect("claim task");
        for id in got {
            if let Some(prev) = owner.insert(id.clone(), worker.clone()) {
                panic!("{id} handed to both {prev} and {worker}");
            }
        }
    }
    assert_eq!(owner.len(), 1_000, "every row claimed exactly once");
    for row in db.all_rows(DEFAULT_TABLE).await {
        assert_eq!(row.status, "delivering");
        assert_eq!(row.worker_id.as_ref(), owner.get(&row.event_id), "{row:?}");
    }
}

/// Rows `e00..` (created 100, 101, …) enqueued, the first `limit` claimed (a full claim), then a
/// row created earlier than all of them ("late": a long producer transaction, a requeue)
/// committed.
async fn backlog_then_a_late_row(
    store: &Arc<dyn OutboxStore>,
    rows: i64,
    limit: u32,
) -> Vec<String> {
    let recs: Vec<_> = (0..rows)
        .map(|i| record(APP, &format!("e{i:02}"), "r", 100 + i))
        .collect();
    enqueue(store, &recs).await;
    let first = claim_app(store, "w0", limit, 1_000, 100_000).await;
    assert_eq!(
        first.events.len(),
        limit as usize,
        "the first claim is full"
    );
    enqueue(store, &[record(APP, "late", "r", 50)]).await;
    ids(&first)
}

/// A claim may read a backlog from where the last full claim stopped (a store remembering its
/// position), but a claim that comes back with fewer rows than it asked for has read the older
/// rows too: the late row is handed out by the first claim that is not full, at the latest.
async fn claim_never_comes_back_short_while_an_older_row_waits(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let mut seen = backlog_then_a_late_row(&store, 10, 3).await;
    for i in 1.. {
        let batch = claim_app(&store, &format!("w{i}"), 3, 1_000, 100_000).await;
        seen.extend(ids(&batch));
        if batch.events.len() < 3 {
            assert!(
                seen.iter().any(|id| id == "late"),
                "claim {i} came back with {} rows while the late row waits: {seen:?}",
                batch.events.len()
            );
            break;
        }
    }
    let mut all = seen.clone();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), seen.len(), "a row handed out twice: {seen:?}");
    assert_eq!(seen.len(), 11, "{seen:?}");
}

/// While a backlog keeps every claim full, a row below where the claims read is reached within
/// [`HEAD_SCAN_EVERY_MS`] of the claims' clock: the claim that late hands it out first.
async fn claim_reads_the_head_again_within_a_second_of_a_full_backlog(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    backlog_then_a_late_row(&store, 20, 3).await;
    let later = 1_000 + HEAD_SCAN_EVERY_MS;
    let batch = claim_app(&store, "w1", 3, later, 100_000).await;
    assert_eq!(
        ids(&batch).first().map(String::as_str),
        Some("late"),
        "{:?}",
        ids(&batch)
    );
    assert_eq!(batch.events.len(), 3);
}

/// A backlog written in one millisecond (a burst; `outboxd-bench`'s backlog) drains in claim order
/// however a store reads it (a claim position is on both columns of the order,
/// `(created_at_ms, event_id)`): each claim's rows in order, the burst's rows across claims in
/// order, none twice, no claim short while rows wait; a row of the same millisecond with a
/// smaller id, committed after the first claim, is still handed out.
async fn claim_hands_out_a_one_millisecond_backlog_in_order_and_a_late_row_of_it(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let burst: Vec<String> = (10..30).map(|i| format!("e{i}")).collect();
    let recs: Vec<_> = burst.iter().map(|id| record(APP, id, "r", 100)).collect();
    enqueue(&store, &recs).await;
    let first = claim_app(&store, "w0", 3, 1_000, 100_000).await;
    assert_eq!(ids(&first), burst[..3].to_vec());
    enqueue(&store, &[record(APP, "e00", "r", 100)]).await;
    let mut seen = ids(&first);
    for i in 1..=10 {
        let batch = ids(&claim_app(&store, &format!("w{i}"), 3, 1_000, 100_000).await);
        let mut sorted = batch.clone();
        sorted.sort();
        assert_eq!(batch, sorted, "claim {i} is not in claim order");
        let waiting = 21 - seen.len();
        assert_eq!(
            batch.len(),
            waiting.min(3),
            "claim {i}: {batch:?} after {seen:?}"
        );
        seen.extend(batch);
        if waiting <= 3 {
            break;
        }
    }
    let of_burst: Vec<&String> = seen.iter().filter(|id| *id != "e00").collect();
    let burst: Vec<&String> = burst.iter().collect();
    assert_eq!(of_burst, burst, "the burst out of order: {seen:?}");
    assert!(seen.iter().any(|id| id == "e00"), "the late row: {seen:?}");
    assert_eq!(seen.len(), 21, "{seen:?}");
}
