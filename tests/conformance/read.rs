//! `read_partitions`: what a partition read hands out. An owned partition's due rows — `pending`
//! rows, `retryable` rows whose retry is due, and `delivering` rows whose lease expired (left by
//! an old-version host or the Go service, read as an attempt) — merged by write order
//! `(created_at_ms, event_id)` up to `limit`, without writing them: a row is handed out again by
//! every read until it is marked. A row it must not hand out (an envelope that does not decode or
//! disagrees with its row, an expired lease at its last attempt) goes to `failed` and is reported
//! in the batch's `rejected`, and the rest of the batch flows.
//!
//! The order holds within a partition, so tests asserting one put their rows in one room (a room
//! lives in one partition).

use std::sync::Arc;

use outboxd::record::{Record, truncate_error};
use outboxd::store::{
    Backend, ClaimBatch, DEFAULT_TABLE, FailedFilter, MarkReport, OutboxStore, Ownership,
    PartitionRead,
};

use crate::conformance::helpers::{
    APP, HOST, LONG_LEASE_MS, OTHER, all_delivered, counts, delivered, enqueue, ids, list_failed,
    mark, own_all, read_app, read_room, reading, retryable, setup, status_of, strs,
};
use crate::support::{RawInsert, TestDb, record};

crate::support::per_backend!(
    read_orders_rows_by_created_at_then_event_id,
    read_takes_a_burst_of_one_timestamp_in_the_order_it_was_built,
    read_takes_pending_due_retryable_and_expired_leases_in_write_order,
    read_limit_takes_the_earliest_due_rows_of_every_kind,
    read_honours_limit_and_hands_out_a_row_until_it_is_marked,
    read_skips_live_leases_of_old_hosts,
    read_takes_an_expired_lease_as_an_attempt,
    read_fails_an_expired_lease_at_max_attempts,
    read_isolates_a_corrupt_envelope,
    read_rejects_an_envelope_of_another_tenant,
    read_rejects_an_envelope_disagreeing_with_its_row,
    read_hands_out_late_rows_in_order_ahead_of_a_backlog,
    read_leaves_out_the_rows_in_flight,
);

/// The event ids a read rejected (undecodable or foreign envelopes, spent leases), in order.
fn rejected_ids(batch: &ClaimBatch) -> Vec<String> {
    batch.rejected.iter().map(|r| r.event_id.clone()).collect()
}

/// Bytes that no protobuf decoder accepts: a varint tag that never ends.
fn corrupt_envelope() -> Vec<u8> {
    vec![0xff; 12]
}

/// A `delivering` row of tenant `APP` in `room`, left by an old-version host (`old-host`) whose
/// lease ends at `lock_until_ms`, after `retry_count` failed attempts.
fn leased_by_an_old_host(
    event_id: &str,
    room: &str,
    created_at_ms: i64,
    lock_until_ms: i64,
    retry_count: i64,
) -> RawInsert {
    RawInsert {
        worker_id: Some("old-host".into()),
        lock_until_ms: Some(lock_until_ms),
        retry_count: Some(retry_count),
        ..RawInsert::pending(APP, event_id, room, created_at_ms).with_status("delivering")
    }
}

/// Marks every event of `batch` delivered at `now_ms`, asserting each mark applied.
async fn deliver(store: &Arc<dyn OutboxStore>, batch: &ClaimBatch, now_ms: i64) {
    let marks = all_delivered(batch);
    let report = mark(store, &batch.lease, &marks, now_ms).await;
    assert_eq!(
        report,
        MarkReport {
            applied: marks.len() as u64,
            stale: vec![]
        }
    );
}

async fn read_orders_rows_by_created_at_then_event_id(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[
            record(APP, "e-b", "r", 200),
            record(APP, "e-0", "r", 300),
            record(APP, "e-a", "r", 200),
            record(APP, "e-c", "r", 100),
        ],
    )
    .await;
    enqueue(&store, &[record(APP, "e-00", "r", 200)]).await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_000).await;
    assert_eq!(ids(&batch), strs(&["e-c", "e-00", "e-a", "e-b", "e-0"]));
    let created: Vec<i64> = batch.events.iter().map(|e| e.created_at_ms).collect();
    assert_eq!(created, vec![100, 200, 200, 200, 300]);
    // The batch's fence: this host, the partition at the epoch it owns it at, the rows' span.
    let lease = &batch.lease;
    assert_eq!(
        (
            lease.app_code.as_str(),
            lease.worker_id.as_str(),
            lease.lock_until_ms
        ),
        (APP, HOST, 1_000 + LONG_LEASE_MS)
    );
    let [fenced] = lease.partitions[..] else {
        panic!("one partition's rows: {lease:?}")
    };
    assert!(own.owned.contains(&fenced.fence), "{fenced:?} not owned");
    assert_eq!(
        (fenced.first_created_ms, fenced.last_created_ms),
        (100, 300)
    );
}

/// A burst built with one timestamp (`Record::build`, as `outboxd-bench` enqueues its backlog) is
/// read in the order it was built and inserted: its ids count up within the millisecond.
async fn read_takes_a_burst_of_one_timestamp_in_the_order_it_was_built(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let at = std::time::SystemTime::now();
    let burst: Vec<_> = (0..300)
        .map(|i| Record::build("burst", "Burst", i, at, &()).with_app_code(APP))
        .collect();
    enqueue(&store, &burst).await;
    let own = own_all(&store, APP, HOST).await;
    let now_ms = burst[0].created_at_ms + 1_000;
    let mut read = Vec::new();
    for _ in 0..3 {
        let batch = read_app(&store, &own, 100, now_ms).await;
        read.extend(ids(&batch));
        deliver(&store, &batch, now_ms).await;
    }
    let built: Vec<String> = burst.iter().map(|r| r.event_id.clone()).collect();
    assert_eq!(read, built);
}

/// Rows of one room a(100) x(150) b(200) c(300), read and marked at 1000: a and x retryable due
/// 1500, b retryable due 5000, c delivered; d2(350) and d(400) `delivering`, an old host's lease
/// ended at 1100; then p2(950), p1(900) enqueued pending. Returns the host's ownership.
async fn mixed_setup(db: &TestDb, store: &Arc<dyn OutboxStore>) -> Ownership {
    let recs: Vec<_> = [("a", 100), ("x", 150), ("b", 200), ("c", 300)]
        .iter()
        .map(|(id, t)| record(APP, id, "r", *t))
        .collect();
    enqueue(store, &recs).await;
    let own = own_all(store, APP, HOST).await;
    let first = read_app(store, &own, 10, 1_000).await;
    assert_eq!(ids(&first), strs(&["a", "x", "b", "c"]));
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
    assert_eq!(report.applied, 4);
    db.insert_raw(
        DEFAULT_TABLE,
        &[
            leased_by_an_old_host("d2", "r", 350, 1_100, 0),
            leased_by_an_old_host("d", "r", 400, 1_100, 0),
        ],
    )
    .await;
    enqueue(
        store,
        &[record(APP, "p2", "r", 950), record(APP, "p1", "r", 900)],
    )
    .await;
    own
}

async fn read_takes_pending_due_retryable_and_expired_leases_in_write_order(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let own = mixed_setup(&db, &store).await;
    let batch = read_app(&store, &own, 10, 2_000).await;
    assert_eq!(
        ids(&batch),
        strs(&["a", "x", "d2", "d", "p1", "p2"]),
        "due retries, expired leases and pending rows by created_at; b is not due"
    );
    let retries: Vec<u32> = batch.events.iter().map(|e| e.retry_count).collect();
    assert_eq!(retries, vec![1, 1, 1, 1, 0, 0]);
    let attempts: Vec<u32> = batch.events.iter().map(|e| e.event.attempt).collect();
    assert_eq!(attempts, vec![2, 2, 2, 2, 1, 1]);
    assert_eq!(status_of(&db, APP, "b").await, "retryable");
    assert_eq!(status_of(&db, APP, "c").await, "delivered");
    let d = db.row(APP, "d").await.unwrap();
    assert_eq!(
        (
            d.status.as_str(),
            d.worker_id.as_deref(),
            d.lock_until_ms,
            d.retry_count
        ),
        ("delivering", Some("old-host"), Some(1_100), 0),
        "read, not written"
    );
}

/// A read leaves out the rows its host's earlier batches are delivering (`in_flight`): pending,
/// due to retry, or an expired lease's; the limit counts the others.
async fn read_leaves_out_the_rows_in_flight(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let own = mixed_setup(&db, &store).await;
    let in_flight = strs(&["a", "d", "p1"]);
    let one = PartitionRead {
        in_flight: in_flight.clone(),
        ..reading(APP, HOST, 2_000)
    };
    assert_eq!(
        ids(&read_room(&store, &own, &one).await),
        strs(&["x", "d2", "p2"]),
        "a due retry, an expired lease and a pending row in flight"
    );
    let cut = PartitionRead { limit: 2, ..one };
    assert_eq!(
        ids(&read_room(&store, &own, &cut).await),
        strs(&["x", "d2"])
    );
}

/// `limit` takes the earliest due rows by write order, whatever their kind.
async fn read_limit_takes_the_earliest_due_rows_of_every_kind(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let own = mixed_setup(&db, &store).await;
    let mut seen = Vec::new();
    for i in 0..6 {
        let batch = read_app(&store, &own, 1, 2_000).await;
        assert_eq!(batch.events.len(), 1, "limit 1, read {i}");
        seen.extend(ids(&batch));
        deliver(&store, &batch, 2_000).await;
    }
    assert_eq!(seen, strs(&["a", "x", "d2", "d", "p1", "p2"]));
    assert!(read_app(&store, &own, 10, 2_000).await.events.is_empty());
    // b becomes due later.
    assert_eq!(ids(&read_app(&store, &own, 10, 5_000).await), strs(&["b"]));
}

/// At most `limit` rows a read; an unmarked row is handed out again by the next read (a read
/// writes nothing), a marked one never.
async fn read_honours_limit_and_hands_out_a_row_until_it_is_marked(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let recs: Vec<_> = (0..10)
        .map(|i| record(APP, &format!("e{i:02}"), "r", 100 + i))
        .collect();
    enqueue(&store, &recs).await;
    let own = own_all(&store, APP, HOST).await;
    let first = read_app(&store, &own, 3, 1_000).await;
    assert_eq!(ids(&first), strs(&["e00", "e01", "e02"]));
    assert_eq!(
        ids(&read_app(&store, &own, 3, 1_000).await),
        ids(&first),
        "not marked: read again"
    );
    let mut all = Vec::new();
    for (i, expect) in [3usize, 3, 3, 1, 0].into_iter().enumerate() {
        let batch = read_app(&store, &own, 3, 1_000).await;
        assert_eq!(batch.events.len(), expect, "read {i}");
        all.extend(ids(&batch));
        deliver(&store, &batch, 1_000).await;
    }
    let expected: Vec<String> = (0..10).map(|i| format!("e{i:02}")).collect();
    assert_eq!(all, expected);
}

/// A row an old-version host leased is not read while its lease runs, and left as it is; from
/// the moment the lease ends it is read.
async fn read_skips_live_leases_of_old_hosts(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    db.insert_raw(
        DEFAULT_TABLE,
        &[
            leased_by_an_old_host("e1", "r", 100, 2_000, 0),
            RawInsert::pending(APP, "e2", "r", 200),
        ],
    )
    .await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_500).await;
    assert_eq!(ids(&batch), strs(&["e2"]), "e1's lease runs until 2000");
    deliver(&store, &batch, 1_500).await;
    assert!(read_app(&store, &own, 10, 1_999).await.events.is_empty());
    let row = db.row(APP, "e1").await.unwrap();
    assert_eq!(
        (
            row.status.as_str(),
            row.worker_id.as_deref(),
            row.lock_until_ms
        ),
        ("delivering", Some("old-host"), Some(2_000))
    );
    assert_eq!(ids(&read_app(&store, &own, 10, 2_000).await), strs(&["e1"]));
}

/// An expired lease is read as the attempt it was: `retry_count + 1`, without writing the row;
/// marked, it is the host's like any row.
async fn read_takes_an_expired_lease_as_an_attempt(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    db.insert_raw(
        DEFAULT_TABLE,
        &[leased_by_an_old_host("e1", "r", 100, 1_100, 0)],
    )
    .await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 2_000).await;
    assert_eq!(ids(&batch), strs(&["e1"]));
    assert_eq!(
        (batch.events[0].retry_count, batch.events[0].event.attempt),
        (1, 2)
    );
    let row = db.row(APP, "e1").await.unwrap();
    assert_eq!(
        (row.status.as_str(), row.retry_count, row.lock_until_ms),
        ("delivering", 0, Some(1_100)),
        "read, not written"
    );
    let again = read_app(&store, &own, 10, 2_500).await;
    assert_eq!(
        (ids(&again), again.events[0].event.attempt),
        (strs(&["e1"]), 2),
        "not marked: the same attempt again"
    );
    deliver(&store, &again, 2_600).await;
    let row = db.row(APP, "e1").await.unwrap();
    assert_eq!(
        (row.status.as_str(), row.worker_id.as_deref()),
        ("delivered", None),
        "delivered: the old host's lease no longer named"
    );
    assert!(row.lease_cleared(), "{row:?}");
}

/// An expired lease that used the last attempt goes to `failed` instead of being handed out; the
/// rest of the batch flows, and the row is never read again.
async fn read_fails_an_expired_lease_at_max_attempts(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    // One failed attempt, then a lease that ended without a result: the second attempt.
    db.insert_raw(
        DEFAULT_TABLE,
        &[leased_by_an_old_host("killer", "r1", 100, 2_100, 1)],
    )
    .await;
    enqueue(&store, &[record(APP, "next", "r1", 200)]).await;
    let own = own_all(&store, APP, HOST).await;
    let allowing = |max_attempts: u32| PartitionRead {
        max_attempts,
        ..reading(APP, HOST, 3_000)
    };
    let third_allowed = read_room(&store, &own, &allowing(3)).await;
    assert_eq!(ids(&third_allowed), strs(&["killer", "next"]));
    assert_eq!(third_allowed.events[0].event.attempt, 3);
    assert!(third_allowed.rejected.is_empty());

    let batch = read_room(&store, &own, &allowing(2)).await;
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
        row.retry_count, 2,
        "the expired lease counted as the attempt it was"
    );
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
    deliver(&store, &batch, 3_000).await;
    let later = read_room(&store, &own, &reading(APP, HOST, 9_000)).await;
    assert!(
        later.events.is_empty() && later.rejected.is_empty(),
        "{:?}",
        ids(&later)
    );
}

async fn read_isolates_a_corrupt_envelope(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "g1", "r", 100), record(APP, "g2", "r", 300)],
    )
    .await;
    db.insert_raw(
        DEFAULT_TABLE,
        &[RawInsert::pending(APP, "bad", "r", 200).with_envelope(corrupt_envelope())],
    )
    .await;
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_000).await;
    assert_eq!(ids(&batch), strs(&["g1", "g2"]));
    assert_eq!(rejected_ids(&batch), strs(&["bad"]));
    let rejected = &batch.rejected[0];
    assert_eq!(
        (rejected.event_type.as_str(), rejected.room_id.as_str()),
        ("T.r", "r")
    );
    assert!(!rejected.reason.is_empty());
    let row = db.row(APP, "bad").await.unwrap();
    assert_eq!(row.status, "failed");
    let last_error = row.last_error.expect("decode error in last_error");
    assert_eq!(last_error, truncate_error(&rejected.reason));
    let c = counts(&store, Some(APP), 1_000).await;
    assert_eq!((c.pending, c.failed, c.delivering), (2, 1, 0));
    let again = read_app(&store, &own, 10, 1_000).await;
    assert_eq!(
        (ids(&again), rejected_ids(&again)),
        (strs(&["g1", "g2"]), vec![]),
        "rejected once, then failed"
    );
}

async fn read_rejects_an_envelope_of_another_tenant(backend: Backend) {
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
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_000).await;
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
async fn read_rejects_an_envelope_disagreeing_with_its_row(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let with = |event_id: &str, change: &dyn Fn(&mut Record)| {
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
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 1_000).await;
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

/// A backlog written in one millisecond (a burst; `outboxd-bench`'s backlog), read a few rows at
/// a time and each batch marked, while rows written earlier commit late (a long producer
/// transaction, a requeue): one older than the backlog, and one of its millisecond with a smaller
/// id. Every read starts at the partition's oldest due row, so the late rows come first in the
/// next read; each read is in order, none is short while rows wait, no row comes twice.
async fn read_hands_out_late_rows_in_order_ahead_of_a_backlog(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let burst: Vec<String> = (10..30).map(|i| format!("e{i}")).collect();
    let recs: Vec<_> = burst.iter().map(|id| record(APP, id, "r", 100)).collect();
    enqueue(&store, &recs).await;
    let own = own_all(&store, APP, HOST).await;
    let first = read_app(&store, &own, 3, 1_000).await;
    assert_eq!(ids(&first), burst[..3].to_vec());
    deliver(&store, &first, 1_000).await;
    enqueue(
        &store,
        &[record(APP, "late", "r", 50), record(APP, "e00", "r", 100)],
    )
    .await;
    let next = read_app(&store, &own, 3, 1_000).await;
    assert_eq!(ids(&next), strs(&["late", "e00", "e13"]));
    deliver(&store, &next, 1_000).await;
    let mut seen = [ids(&first), ids(&next)].concat();
    for i in 1..=10 {
        let batch = read_app(&store, &own, 3, 1_000).await;
        let got = ids(&batch);
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(got, sorted, "read {i} is not in write order");
        let waiting = 22 - seen.len();
        assert_eq!(
            got.len(),
            waiting.min(3),
            "read {i}: {got:?} after {seen:?}"
        );
        deliver(&store, &batch, 1_000).await;
        seen.extend(got);
        if waiting <= 3 {
            break;
        }
    }
    let mut all = seen.clone();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), 22, "a row twice or missing: {seen:?}");
}
