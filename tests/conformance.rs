//! The `OutboxStore` conformance suite: one set of behaviours, written once, run against SQLite, MariaDB
//! and PostgreSQL.
//!
//! Each behaviour is an `async fn(Backend)` below; the [`conformance!`] macro at the bottom turns
//! the list into one `#[tokio::test]` per backend, named `<backend>::<method>_<behaviour>`
//! (`cargo test --test conformance mysql::` runs one backend, `… claim_` one method). Every test
//! gets its own database (see `support`), so they all run in parallel. Time is explicit (`now_ms`
//! in every call), so leases and retries are tested without sleeping.
//!
//! Test bodies never branch on the backend: a behaviour that differs between databases is a bug
//! in a store, not a case for the suite.

mod support;

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;

use outboxd::record::{LAST_ERROR_MAX_BYTES, truncate_error};
use outboxd::store::{
    Backend, ClaimBatch, ClaimParams, CountsParams, DEFAULT_TABLE, DeliveryOrder, Disposition,
    FailedFilter, Lease, ListFailedParams, Mark, MarkParams, MarkReport, OutboxStore, PurgeParams,
    PurgeStatus, RequeueParams, StatusCounts, StoreError, TableName,
};
use prost::Message;
use support::{RawInsert, TestDb, record, typed_record};

/// Tenant used by most tests.
const APP: &str = "app_a";
/// The other tenant.
const OTHER: &str = "app_b";
/// A generous attempt budget for tests that are not about max_attempts.
const MANY: u32 = 100;

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// A fresh database and a migrated store on `room_outbox`; `None` when the backend is skipped.
async fn setup(backend: Backend) -> Option<(TestDb, Arc<dyn OutboxStore>)> {
    let db = TestDb::new(backend).await?;
    let store = db.store_default().await;
    Some((db, store))
}

fn params(app: &str, worker: &str, limit: u32, now_ms: i64, lease_ms: i64) -> ClaimParams {
    ClaimParams {
        app_code: app.into(),
        worker_id: worker.into(),
        limit,
        lease_ms,
        now_ms,
        max_attempts: MANY,
        ordering: DeliveryOrder::None,
    }
}

async fn claim(store: &Arc<dyn OutboxStore>, p: ClaimParams) -> ClaimBatch {
    store
        .claim(&p)
        .await
        .unwrap_or_else(|e| panic!("claim {p:?}: {e}"))
}

/// Claims for `APP` without ordering.
async fn claim_app(
    store: &Arc<dyn OutboxStore>,
    worker: &str,
    limit: u32,
    now_ms: i64,
    lease_ms: i64,
) -> ClaimBatch {
    claim(store, params(APP, worker, limit, now_ms, lease_ms)).await
}

/// Claims for `APP` with per-room ordering.
async fn claim_ordered(
    store: &Arc<dyn OutboxStore>,
    worker: &str,
    limit: u32,
    now_ms: i64,
) -> ClaimBatch {
    let mut p = params(APP, worker, limit, now_ms, 100);
    p.ordering = DeliveryOrder::PerRoom;
    claim(store, p).await
}

fn ids(batch: &ClaimBatch) -> Vec<String> {
    batch
        .events
        .iter()
        .map(|e| e.event.event_id.clone())
        .collect()
}

fn rejected_ids(batch: &ClaimBatch) -> Vec<String> {
    batch.rejected.iter().map(|r| r.event_id.clone()).collect()
}

fn strs(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

fn delivered(id: &str) -> Mark {
    Mark {
        event_id: id.into(),
        disposition: Disposition::Delivered,
    }
}

fn retryable(id: &str, next_retry_at_ms: i64, error: &str) -> Mark {
    Mark {
        event_id: id.into(),
        disposition: Disposition::Retryable {
            next_retry_at_ms,
            error: error.into(),
        },
    }
}

fn deferred(id: &str, next_retry_at_ms: i64, error: &str) -> Mark {
    Mark {
        event_id: id.into(),
        disposition: Disposition::Deferred {
            next_retry_at_ms,
            error: error.into(),
        },
    }
}

fn failed(id: &str, error: &str) -> Mark {
    Mark {
        event_id: id.into(),
        disposition: Disposition::Failed {
            error: error.into(),
        },
    }
}

async fn mark(
    store: &Arc<dyn OutboxStore>,
    lease: &Lease,
    marks: &[Mark],
    now_ms: i64,
) -> MarkReport {
    store
        .mark(&MarkParams {
            lease,
            marks,
            now_ms,
        })
        .await
        .unwrap_or_else(|e| panic!("mark {marks:?}: {e}"))
}

async fn enqueue(store: &Arc<dyn OutboxStore>, records: &[outboxd::record::Record]) -> u64 {
    store.enqueue(records).await.expect("enqueue")
}

async fn counts(store: &Arc<dyn OutboxStore>, app: Option<&str>, now_ms: i64) -> StatusCounts {
    store
        .counts(&CountsParams {
            app_code: app.map(str::to_string),
            now_ms,
        })
        .await
        .expect("counts")
}

async fn status_of(db: &TestDb, app: &str, id: &str) -> String {
    db.row(app, id)
        .await
        .unwrap_or_else(|| panic!("row {app}/{id} missing"))
        .status
}

async fn list_failed(
    store: &Arc<dyn OutboxStore>,
    filter: FailedFilter,
    limit: u32,
) -> Vec<String> {
    store
        .list_failed(&ListFailedParams { filter, limit })
        .await
        .expect("list_failed")
        .into_iter()
        .map(|r| r.event_id)
        .collect()
}

async fn requeue(
    store: &Arc<dyn OutboxStore>,
    filter: FailedFilter,
    dry_run: bool,
    now_ms: i64,
) -> u64 {
    store
        .requeue(&RequeueParams {
            filter,
            dry_run,
            now_ms,
        })
        .await
        .expect("requeue")
}

/// Bytes that no protobuf decoder accepts: a varint tag that never ends.
fn corrupt_envelope() -> Vec<u8> {
    vec![0xff; 12]
}

// ---------------------------------------------------------------------------------------------
// enqueue / save
// ---------------------------------------------------------------------------------------------

async fn enqueue_inserts_pending_rows(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    assert_eq!(enqueue(&store, &[]).await, 0, "empty batch");
    let recs = vec![
        record(APP, "e1", "r1", 1_000),
        record(APP, "e2", "r2", 1_001),
    ];
    assert_eq!(enqueue(&store, &recs).await, 2);

    let row = db.row(APP, "e1").await.expect("row e1");
    assert_eq!(row.status, "pending");
    assert_eq!(row.event_type, "T.r1");
    assert_eq!(row.room_id, "r1");
    assert_eq!(row.created_at_ms, 1_000);
    assert_eq!(row.retry_count, 0);
    assert_eq!(row.last_error, None);
    assert!(row.lease_cleared(), "{row:?}");
    let envelope = outboxd::envelope::EventEnvelope::decode(row.envelope.as_slice())
        .expect("envelope decodes");
    assert_eq!(envelope, recs[0].envelope);

    let c = counts(&store, Some(APP), 2_000).await;
    assert_eq!((c.pending, c.delivering, c.delivered), (2, 0, 0));

    let batch = claim_app(&store, "w1", 10, 2_000, 1_000).await;
    assert_eq!(ids(&batch), strs(&["e1", "e2"]));
    let e = &batch.events[0];
    assert_eq!(e.retry_count, 0);
    assert_eq!(e.created_at_ms, 1_000);
    assert_eq!(
        e.event,
        outboxd::publish::Event {
            app_code: APP.into(),
            event_id: "e1".into(),
            event_type: "T.r1".into(),
            room_id: "r1".into(),
            room_version: 1_000,
            occurred_at_ms: 1_000,
            body: "e1".to_string().encode_to_vec(),
            attempt: 1,
        }
    );
}

async fn enqueue_is_idempotent_on_app_and_event_id(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let first = record(APP, "e1", "r1", 1_000);
    assert_eq!(enqueue(&store, std::slice::from_ref(&first)).await, 1);
    let before = db.row(APP, "e1").await.unwrap();

    let mut again = record(APP, "e1", "other-room", 5_000);
    again.envelope.body = b"different".to_vec();
    assert_eq!(
        enqueue(&store, &[again.clone()]).await,
        0,
        "second enqueue of e1 inserts nothing"
    );
    assert_eq!(db.row(APP, "e1").await.unwrap(), before, "row unchanged");

    // A batch mixing a known id with a new one inserts only the new one.
    assert_eq!(
        enqueue(&store, &[again, record(APP, "e2", "r1", 2_000)]).await,
        1
    );
    // Duplicates inside one batch count once.
    let dup = record(APP, "e3", "r1", 3_000);
    assert_eq!(enqueue(&store, &[dup.clone(), dup]).await, 1);
    assert_eq!(db.all_rows(DEFAULT_TABLE).await.len(), 3);

    // Even after the row moved on (delivered), enqueueing it again does not revive it.
    let batch = claim_app(&store, "w1", 10, 10_000, 1_000).await;
    assert_eq!(ids(&batch), strs(&["e1", "e2", "e3"]));
    mark(&store, &batch.lease, &[delivered("e1")], 10_001).await;
    assert_eq!(enqueue(&store, &[first]).await, 0);
    assert_eq!(status_of(&db, APP, "e1").await, "delivered");
}

async fn enqueue_is_all_or_nothing(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let too_long = "x".repeat(1_000);
    let batch = vec![
        record(APP, "ok1", "r1", 1_000),
        record(APP, "ok2", "r1", 1_001),
        record(APP, &too_long, "r1", 1_002),
    ];
    let result = store.enqueue(&batch).await;
    assert!(
        result.is_err(),
        "a 1000-byte event_id must be refused, got {result:?}"
    );
    assert!(
        db.all_rows(DEFAULT_TABLE).await.is_empty(),
        "a failed batch leaves nothing"
    );

    // The valid part alone goes in.
    assert_eq!(enqueue(&store, &batch[..2]).await, 2);
}

async fn save_in_rolled_back_transaction_leaves_nothing(backend: Backend) {
    let Some((db, _store)) = setup(backend).await else {
        return;
    };
    let r1 = record(APP, "e1", "r1", 1_000);
    let r2 = record(APP, "e2", "r1", 1_001);
    let results = db
        .save_in_transaction(DEFAULT_TABLE, &[vec![r1.clone(), r2], vec![r1]], false)
        .await;
    assert_eq!(results[0].as_ref().ok(), Some(&2), "{results:?}");
    assert_eq!(
        results[1].as_ref().ok(),
        Some(&0),
        "duplicate inside the transaction: {results:?}"
    );
    assert!(
        db.all_rows(DEFAULT_TABLE).await.is_empty(),
        "rollback leaves nothing"
    );

    // A save whose batch has an invalid record fails, and the caller's rollback leaves nothing.
    let results = db
        .save_in_transaction(
            DEFAULT_TABLE,
            &[
                vec![record(APP, "e3", "r1", 1_000)],
                vec![
                    record(APP, "e4", "r1", 1_000),
                    record(APP, &"y".repeat(1_000), "r1", 1_000),
                ],
            ],
            false,
        )
        .await;
    assert!(results[1].is_err(), "{results:?}");
    assert!(db.all_rows(DEFAULT_TABLE).await.is_empty());
}

async fn save_commits_with_the_callers_transaction(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let r1 = record(APP, "e1", "r1", 1_000);
    let results = db
        .save_in_transaction(
            DEFAULT_TABLE,
            &[vec![r1.clone(), record(APP, "e2", "r1", 1_001)]],
            true,
        )
        .await;
    assert_eq!(results[0].as_ref().ok(), Some(&2), "{results:?}");
    assert_eq!(status_of(&db, APP, "e1").await, "pending");
    // save and enqueue share the idempotency key.
    assert_eq!(enqueue(&store, &[r1]).await, 0);
    let batch = claim_app(&store, "w1", 10, 2_000, 1_000).await;
    assert_eq!(ids(&batch), strs(&["e1", "e2"]));
}

async fn enqueue_keeps_tenants_apart(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[
            record(APP, "e1", "room", 1_000),
            record(OTHER, "e1", "room", 900),
            record(OTHER, "e2", "room", 1_100),
        ],
    )
    .await;
    assert!(db.row(APP, "e1").await.is_some());
    assert!(
        db.row(OTHER, "e1").await.is_some(),
        "same event_id in two apps is two rows"
    );
    assert_eq!(counts(&store, Some(APP), 2_000).await.pending, 1);
    assert_eq!(counts(&store, Some(OTHER), 2_000).await.pending, 2);
    assert_eq!(counts(&store, None, 2_000).await.pending, 3);

    let a = claim_app(&store, "wa", 10, 2_000, 1_000).await;
    assert_eq!(ids(&a), strs(&["e1"]));
    assert!(a.events.iter().all(|e| e.event.app_code == APP));
    assert_eq!(a.lease.app_code, APP);
    assert_eq!(
        status_of(&db, OTHER, "e1").await,
        "pending",
        "claim for A touched B's row"
    );

    let b = claim(&store, params(OTHER, "wb", 10, 2_000, 1_000)).await;
    assert_eq!(ids(&b), strs(&["e1", "e2"]));
    assert!(b.events.iter().all(|e| e.event.app_code == OTHER));

    // A's lease cannot mark B's rows, even with the same event id.
    let report = mark(&store, &a.lease, &[delivered("e2")], 2_001).await;
    assert_eq!(report.applied, 0);
    assert_eq!(report.stale, strs(&["e2"]));
    assert_eq!(status_of(&db, OTHER, "e2").await, "delivering");
    let report = mark(&store, &a.lease, &[delivered("e1")], 2_001).await;
    assert_eq!(report.applied, 1);
    assert_eq!(status_of(&db, APP, "e1").await, "delivered");
    assert_eq!(status_of(&db, OTHER, "e1").await, "delivering");
}

// ---------------------------------------------------------------------------------------------
// claim
// ---------------------------------------------------------------------------------------------

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
            lock_until_ms: 31_000
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

// ---------------------------------------------------------------------------------------------
// mark
// ---------------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------------
// claim with DeliveryOrder::PerRoom
// ---------------------------------------------------------------------------------------------

/// Room A: e1(100) e2(200) e3(300); room B: f1(150) f2(250).
async fn rooms_setup(store: &Arc<dyn OutboxStore>) {
    enqueue(
        store,
        &[
            record(APP, "e1", "A", 100),
            record(APP, "f1", "B", 150),
            record(APP, "e2", "A", 200),
            record(APP, "f2", "B", 250),
            record(APP, "e3", "A", 300),
        ],
    )
    .await;
}

async fn claim_per_room_hands_out_only_room_heads(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    rooms_setup(&store).await;
    let batch = claim_ordered(&store, "w1", 10, 1_000).await;
    assert_eq!(ids(&batch), strs(&["e1", "f1"]));
    let blocked = claim_ordered(&store, "w2", 10, 1_010).await;
    assert!(
        blocked.events.is_empty(),
        "heads in flight block their rooms: {:?}",
        ids(&blocked)
    );
    // Without ordering the rest is claimable (the option is off by default).
    let free = claim_app(&store, "w3", 10, 1_020, 1_000).await;
    assert_eq!(ids(&free), strs(&["e2", "f2", "e3"]));
}

async fn claim_per_room_blocks_behind_a_retryable_head(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    rooms_setup(&store).await;
    let batch = claim_ordered(&store, "w1", 10, 1_000).await;
    mark(
        &store,
        &batch.lease,
        &[retryable("e1", 5_000, "later"), delivered("f1")],
        1_010,
    )
    .await;
    let next = claim_ordered(&store, "w2", 10, 2_000).await;
    assert_eq!(
        ids(&next),
        strs(&["f2"]),
        "e2 waits for e1 (retryable, not due); delivered f1 unblocks f2"
    );
    mark(&store, &next.lease, &[delivered("f2")], 2_010).await;
    assert!(
        claim_ordered(&store, "w3", 10, 3_000)
            .await
            .events
            .is_empty()
    );
    let due = claim_ordered(&store, "w4", 10, 6_000).await;
    assert_eq!(ids(&due), strs(&["e1"]), "e1 is due and still the head");
    mark(&store, &due.lease, &[delivered("e1")], 6_010).await;
    assert_eq!(
        ids(&claim_ordered(&store, "w5", 10, 6_020).await),
        strs(&["e2"])
    );
}

async fn claim_per_room_failed_head_does_not_block(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    rooms_setup(&store).await;
    let batch = claim_ordered(&store, "w1", 10, 1_000).await;
    mark(
        &store,
        &batch.lease,
        &[failed("e1", "poison"), retryable("f1", 5_000, "later")],
        1_010,
    )
    .await;
    let next = claim_ordered(&store, "w2", 10, 2_000).await;
    assert_eq!(
        ids(&next),
        strs(&["e2"]),
        "failed e1 does not block e2; retryable f1 blocks f2"
    );
}

async fn claim_per_room_reclaims_an_expired_head_first(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    rooms_setup(&store).await;
    claim_ordered(&store, "w1", 10, 1_000).await; // lease 100: expires at 1100
    let again = claim_ordered(&store, "w2", 10, 2_000).await;
    assert_eq!(ids(&again), strs(&["e1", "f1"]));
    assert!(again.events.iter().all(|e| e.retry_count == 1));
}

async fn claim_per_room_rooms_are_per_tenant(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    rooms_setup(&store).await;
    enqueue(&store, &[record(OTHER, "z1", "A", 50)]).await;
    let a = claim_ordered(&store, "w1", 10, 1_000).await;
    assert_eq!(
        ids(&a),
        strs(&["e1", "f1"]),
        "another tenant's room A does not block"
    );
    let mut p = params(OTHER, "w2", 10, 1_000, 100);
    p.ordering = DeliveryOrder::PerRoom;
    assert_eq!(ids(&claim(&store, p).await), strs(&["z1"]));
}

async fn claim_per_room_keeps_room_order_under_failures(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let rooms = 6;
    let per_room = 8;
    let mut recs = Vec::new();
    for k in 0..per_room {
        for r in 0..rooms {
            // Interleave rooms; created_at ties across rooms on purpose.
            recs.push(record(
                APP,
                &format!("r{r}-{k}"),
                &format!("room{r}"),
                100 + (k * 10 + (r % 3)) as i64,
            ));
        }
    }
    enqueue(&store, &recs).await;
    let mut attempts: BTreeMap<String, u32> = BTreeMap::new();
    let mut delivered_order: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut now = 1_000;
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 500, "did not drain");
        now += 10;
        let batch = claim_ordered(&store, "w", 100, now).await;
        if batch.events.is_empty() {
            break;
        }
        let rooms_in_batch: HashSet<&str> = batch
            .events
            .iter()
            .map(|e| e.event.room_id.as_str())
            .collect();
        assert_eq!(
            rooms_in_batch.len(),
            batch.events.len(),
            "two events of one room in a batch: {:?}",
            ids(&batch)
        );
        let mut marks = Vec::new();
        for e in &batch.events {
            let id = &e.event.event_id;
            let (room, k) = id.split_once('-').unwrap();
            let k: usize = k.parse().unwrap();
            let n = attempts.entry(id.clone()).or_default();
            *n += 1;
            assert_eq!(e.event.attempt, *n, "{id}");
            // Inject failures: every third event fails once (retry due at once), r2-3 and r4-0
            // fail for good; the rest is delivered.
            if id == "r2-3" || id == "r4-0" {
                marks.push(failed(id, "poison"));
            } else if (k + room.len()).is_multiple_of(3) && *n == 1 {
                marks.push(retryable(id, now + 1, "flaky"));
            } else {
                marks.push(delivered(id));
                delivered_order.entry(room.to_string()).or_default().push(k);
            }
        }
        let report = mark(&store, &batch.lease, &marks, now).await;
        assert_eq!(report.applied as usize, marks.len());
    }
    for r in 0..rooms {
        let room = format!("r{r}");
        let got = delivered_order.get(&room).cloned().unwrap_or_default();
        let expected: Vec<usize> = (0..per_room)
            .filter(|k| !((room == "r2" && *k == 3) || (room == "r4" && *k == 0)))
            .collect();
        assert_eq!(got, expected, "room {room} delivered out of order");
    }
    let c = counts(&store, Some(APP), now).await;
    assert_eq!(
        (c.pending, c.delivering, c.retryable, c.failed),
        (0, 0, 0, 2)
    );
}

async fn claim_per_room_concurrent_workers_keep_one_event_per_room_in_flight(backend: Backend) {
    use std::collections::HashMap;
    use std::sync::Mutex;
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let (rooms, per_room) = (5, 40);
    let mut recs = Vec::new();
    for k in 0..per_room {
        for r in 0..rooms {
            recs.push(record(
                APP,
                &format!("r{r}-{k:02}"),
                &format!("room{r}"),
                1_000 + k as i64,
            ));
        }
    }
    enqueue(&store, &recs).await;
    let second = db.store_default().await;
    // Rooms whose event is claimed and not yet marked, and the delivery order per room. A worker
    // takes its event out of `in_flight` *before* its mark commits (the row is still delivering,
    // so no other claim can take the room's next event before then).
    let in_flight: Arc<Mutex<HashMap<String, String>>> = Arc::default();
    let order: Arc<Mutex<BTreeMap<String, Vec<String>>>> = Arc::default();
    let mut tasks = Vec::new();
    for i in 0..4 {
        let store = if i % 2 == 0 {
            store.clone()
        } else {
            second.clone()
        };
        let (in_flight, order) = (in_flight.clone(), order.clone());
        tasks.push(tokio::spawn(async move {
            let worker = format!("w{i}");
            let mut idle = 0;
            while idle < 50 {
                let mut p = params(APP, &worker, 3, outboxd::record::now_ms(), 600_000);
                p.ordering = DeliveryOrder::PerRoom;
                let batch = store
                    .claim(&p)
                    .await
                    .unwrap_or_else(|e| panic!("{worker}: {e}"));
                if batch.events.is_empty() {
                    idle += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                    continue;
                }
                idle = 0;
                for e in &batch.events {
                    let mut map = in_flight.lock().unwrap();
                    if let Some(other) =
                        map.insert(e.event.room_id.clone(), e.event.event_id.clone())
                    {
                        panic!(
                            "{worker} got {} while {other} of the same room is in flight",
                            e.event.event_id
                        );
                    }
                }
                tokio::task::yield_now().await;
                let marks: Vec<Mark> = batch
                    .events
                    .iter()
                    .map(|e| delivered(&e.event.event_id))
                    .collect();
                for e in &batch.events {
                    in_flight.lock().unwrap().remove(&e.event.room_id);
                    order
                        .lock()
                        .unwrap()
                        .entry(e.event.room_id.clone())
                        .or_default()
                        .push(e.event.event_id.clone());
                }
                let report = store
                    .mark(&MarkParams {
                        lease: &batch.lease,
                        marks: &marks,
                        now_ms: outboxd::record::now_ms(),
                    })
                    .await
                    .unwrap_or_else(|e| panic!("{worker}: {e}"));
                assert_eq!(report.applied as usize, marks.len(), "{worker}: {report:?}");
            }
        }));
    }
    for task in tasks {
        task.await.expect("worker task");
    }
    let order = order.lock().unwrap().clone();
    for r in 0..rooms {
        let expected: Vec<String> = (0..per_room).map(|k| format!("r{r}-{k:02}")).collect();
        assert_eq!(
            order.get(&format!("room{r}")),
            Some(&expected),
            "room{r} out of order"
        );
    }
    assert_eq!(
        counts(&store, Some(APP), outboxd::record::now_ms())
            .await
            .delivered,
        (rooms * per_room) as u64
    );
}

// ---------------------------------------------------------------------------------------------
// counts, list_failed, requeue
// ---------------------------------------------------------------------------------------------

async fn counts_by_status_and_oldest_pending_age(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let empty = counts(&store, None, 10_000).await;
    assert_eq!(empty, StatusCounts::default());

    let recs: Vec<_> = (1..=4)
        .map(|i| record(APP, &format!("d{i}"), "r", i * 100))
        .collect();
    enqueue(&store, &recs).await;
    let batch = claim_app(&store, "w1", 4, 5_000, 1_000).await;
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

/// Failed rows: fa1(T1,r1,100) fa2(T2,r1,200) fa3(T1,r2,300) fa4(T2,r2,400) in APP, fb1(T1,r1,150)
/// in OTHER, each with last_error `err-<id>` (marked at 1000); plus pending pa(T1,r1,50) in APP.
async fn failed_rows_setup(store: &Arc<dyn OutboxStore>) {
    let a = [
        ("fa1", "T1", "r1", 100),
        ("fa2", "T2", "r1", 200),
        ("fa3", "T1", "r2", 300),
        ("fa4", "T2", "r2", 400),
    ];
    let recs: Vec<_> = a
        .iter()
        .map(|(id, t, r, c)| typed_record(APP, id, r, t, *c))
        .collect();
    enqueue(store, &recs).await;
    enqueue(store, &[typed_record(OTHER, "fb1", "r1", "T1", 150)]).await;
    for app in [APP, OTHER] {
        let batch = claim(store, params(app, "w1", 10, 900, 1_000)).await;
        let marks: Vec<Mark> = ids(&batch)
            .iter()
            .map(|id| failed(id, &format!("err-{id}")))
            .collect();
        assert_eq!(
            mark(store, &batch.lease, &marks, 1_000).await.applied as usize,
            marks.len()
        );
    }
    enqueue(store, &[typed_record(APP, "pa", "r1", "T1", 50)]).await;
}

fn filter() -> FailedFilter {
    FailedFilter::default()
}

async fn list_failed_filters(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    failed_rows_setup(&store).await;
    let all = store
        .list_failed(&ListFailedParams {
            filter: filter(),
            limit: 100,
        })
        .await
        .unwrap();
    let all_ids: Vec<&str> = all.iter().map(|r| r.event_id.as_str()).collect();
    assert_eq!(
        all_ids,
        ["fa1", "fb1", "fa2", "fa3", "fa4"],
        "oldest first, failed only"
    );
    let fa1 = &all[0];
    assert_eq!(
        *fa1,
        outboxd::store::FailedRow {
            app_code: APP.into(),
            event_id: "fa1".into(),
            event_type: "T1".into(),
            room_id: "r1".into(),
            retry_count: 1,
            last_error: Some("err-fa1".into()),
            created_at_ms: 100,
            updated_at_ms: 1_000,
        }
    );
    let app = |a: &str| FailedFilter {
        app_code: Some(a.into()),
        ..filter()
    };
    assert_eq!(
        list_failed(&store, app(APP), 100).await,
        strs(&["fa1", "fa2", "fa3", "fa4"])
    );
    assert_eq!(list_failed(&store, app(OTHER), 100).await, strs(&["fb1"]));
    let by_type = FailedFilter {
        event_type: Some("T1".into()),
        ..filter()
    };
    assert_eq!(
        list_failed(&store, by_type, 100).await,
        strs(&["fa1", "fb1", "fa3"])
    );
    let by_room = FailedFilter {
        room_id: Some("r2".into()),
        ..filter()
    };
    assert_eq!(
        list_failed(&store, by_room, 100).await,
        strs(&["fa3", "fa4"])
    );
    let range = FailedFilter {
        since_ms: Some(200),
        until_ms: Some(400),
        ..filter()
    };
    assert_eq!(
        list_failed(&store, range, 100).await,
        strs(&["fa2", "fa3"]),
        "since inclusive, until exclusive"
    );
    let by_ids = FailedFilter {
        event_ids: strs(&["fa4", "fa2", "pa", "nope"]),
        ..filter()
    };
    assert_eq!(
        list_failed(&store, by_ids, 100).await,
        strs(&["fa2", "fa4"])
    );
    let all_of = FailedFilter {
        app_code: Some(APP.into()),
        event_type: Some("T1".into()),
        room_id: Some("r1".into()),
        ..filter()
    };
    assert_eq!(list_failed(&store, all_of, 100).await, strs(&["fa1"]));
    assert_eq!(
        list_failed(&store, filter(), 2).await,
        strs(&["fa1", "fb1"]),
        "limit"
    );
}

async fn requeue_by_filters(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    failed_rows_setup(&store).await;
    let by_ids = FailedFilter {
        event_ids: strs(&["fa1", "pa"]),
        ..filter()
    };
    assert_eq!(
        requeue(&store, by_ids, false, 2_000).await,
        1,
        "pa is not failed"
    );
    assert_eq!(
        list_failed(&store, filter(), 100).await,
        strs(&["fb1", "fa2", "fa3", "fa4"])
    );
    let fa1 = db.row(APP, "fa1").await.unwrap();
    assert_eq!(
        (fa1.status.as_str(), fa1.retry_count, fa1.updated_at_ms),
        ("pending", 0, 2_000)
    );
    assert!(fa1.lease_cleared(), "{fa1:?}");
    assert_eq!(status_of(&db, APP, "pa").await, "pending");

    let by_type = FailedFilter {
        app_code: Some(APP.into()),
        event_type: Some("T2".into()),
        ..filter()
    };
    assert_eq!(requeue(&store, by_type, false, 2_001).await, 2);
    assert_eq!(
        list_failed(&store, filter(), 100).await,
        strs(&["fb1", "fa3"])
    );

    let by_room = FailedFilter {
        room_id: Some("r2".into()),
        ..filter()
    };
    assert_eq!(requeue(&store, by_room, false, 2_002).await, 1);
    assert_eq!(list_failed(&store, filter(), 100).await, strs(&["fb1"]));

    let by_app = FailedFilter {
        app_code: Some(OTHER.into()),
        ..filter()
    };
    assert_eq!(requeue(&store, by_app, false, 2_003).await, 1);
    assert!(list_failed(&store, filter(), 100).await.is_empty());
    assert_eq!(
        requeue(&store, filter(), false, 2_004).await,
        0,
        "nothing left to requeue"
    );

    // Requeued rows are claimable again as first attempts.
    let batch = claim_app(&store, "w2", 10, 3_000, 1_000).await;
    assert_eq!(ids(&batch), strs(&["pa", "fa1", "fa2", "fa3", "fa4"]));
    assert!(
        batch
            .events
            .iter()
            .all(|e| e.retry_count == 0 && e.event.attempt == 1)
    );
    let other = claim(&store, params(OTHER, "w2", 10, 3_000, 1_000)).await;
    assert_eq!(ids(&other), strs(&["fb1"]));
}

async fn requeue_by_created_at_range(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    failed_rows_setup(&store).await;
    let range = FailedFilter {
        since_ms: Some(150),
        until_ms: Some(300),
        ..filter()
    };
    assert_eq!(requeue(&store, range, false, 2_000).await, 2, "fb1 and fa2");
    assert_eq!(status_of(&db, OTHER, "fb1").await, "pending");
    assert_eq!(status_of(&db, APP, "fa2").await, "pending");
    assert_eq!(
        list_failed(&store, filter(), 100).await,
        strs(&["fa1", "fa3", "fa4"])
    );
    let since = FailedFilter {
        since_ms: Some(300),
        ..filter()
    };
    assert_eq!(requeue(&store, since, false, 2_001).await, 2);
    assert_eq!(list_failed(&store, filter(), 100).await, strs(&["fa1"]));
}

/// A row of `app` with `status`, created at `created_at_ms` and last changed at `updated_at_ms`.
fn aged(app: &str, id: &str, status: &str, created_at_ms: i64, updated_at_ms: i64) -> RawInsert {
    RawInsert {
        updated_at_ms: Some(updated_at_ms),
        ..RawInsert::pending(app, id, "r", created_at_ms).with_status(status)
    }
}

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

async fn requeue_dry_run_changes_nothing(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    failed_rows_setup(&store).await;
    let before = db.all_rows(DEFAULT_TABLE).await;
    assert_eq!(requeue(&store, filter(), true, 2_000).await, 5);
    let by_type = FailedFilter {
        event_type: Some("T1".into()),
        ..filter()
    };
    assert_eq!(requeue(&store, by_type, true, 2_000).await, 3);
    assert_eq!(
        db.all_rows(DEFAULT_TABLE).await,
        before,
        "dry run changed rows"
    );
    assert_eq!(requeue(&store, filter(), false, 2_000).await, 5);
    assert!(list_failed(&store, filter(), 100).await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// migrate
// ---------------------------------------------------------------------------------------------

async fn migrate_is_idempotent(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    let applied = store.migrate().await.expect("first migrate");
    assert!(!applied.is_empty(), "a fresh database needs migrations");
    assert!(db.table_exists(DEFAULT_TABLE).await);
    assert_eq!(
        store.migrate().await.expect("second migrate"),
        Vec::<i64>::new()
    );
    let other = db.store_unmigrated(DEFAULT_TABLE).await;
    assert_eq!(
        other.migrate().await.expect("migrate from another pool"),
        Vec::<i64>::new()
    );
    assert_eq!(
        enqueue(&other, &[record(APP, "e1", "r", 1)]).await,
        1,
        "table usable"
    );
    assert_eq!(store.backend(), backend);
    assert_eq!(store.table().as_str(), DEFAULT_TABLE);
}

async fn migrate_rejects_invalid_table_names(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    for bad in [
        "",
        "9lives",
        "room-outbox",
        "room outbox",
        "x;drop table y",
        "t`",
        "t\"q",
        "ünï",
    ] {
        let err = TableName::new(bad).expect_err(bad);
        assert!(
            matches!(err, StoreError::InvalidTableName(_)),
            "{bad}: {err:?}"
        );
    }
    assert!(
        TableName::new(&"t".repeat(49)).is_err(),
        "longer than 48 bytes"
    );
    for reserved in ["select", "ORDER", "Table", "where", "group"] {
        assert!(
            TableName::new(reserved).is_err(),
            "reserved word {reserved:?} accepted"
        );
    }
    // Every name that is accepted must work: reserved words are either refused or usable.
    for word in ["select", "order", "user", "table"] {
        if TableName::new(word).is_ok() {
            let store = db.store_unmigrated(word).await;
            let result = store.migrate().await;
            assert!(
                result.is_ok(),
                "TableName accepted {word:?} but migrate failed: {result:?}"
            );
        }
    }
    // A URL the store does not know is refused, not guessed.
    let bad_url = outboxd::store::ConnectOptions::new("redis://127.0.0.1/0");
    assert!(matches!(
        outboxd::store::connect(&bad_url).await,
        Err(StoreError::UnsupportedUrl(_))
    ));
}

async fn migrate_custom_table_names_work(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let longest = format!("t{}", "x".repeat(47));
    assert_eq!(longest.len(), 48);
    let default = db.store_default().await;
    enqueue(&default, &[record(APP, "e1", "r", 1)]).await;
    for table in ["custom_outbox", longest.as_str()] {
        let store = db.store(table).await;
        assert_eq!(store.table().as_str(), table);
        assert!(
            store.migrate().await.unwrap().is_empty(),
            "{table}: second migrate"
        );
        assert_eq!(
            enqueue(
                &store,
                &[record(APP, "e1", "r", 1), record(APP, "e2", "r", 2)]
            )
            .await,
            2,
            "{table}"
        );
        let saved = db
            .save_in_transaction(table, &[vec![record(APP, "e3", "r", 3)]], true)
            .await;
        assert_eq!(saved[0].as_ref().ok(), Some(&1), "{table}: {saved:?}");
        let batch = claim_app(&store, "w1", 10, 1_000, 1_000).await;
        assert_eq!(ids(&batch), strs(&["e1", "e2", "e3"]), "{table}");
        assert_eq!(
            mark(&store, &batch.lease, &[delivered("e1")], 1_001)
                .await
                .applied,
            1
        );
        assert_eq!(
            db.row_in(table, APP, "e1").await.unwrap().status,
            "delivered"
        );
        assert_eq!(db.all_rows(table).await.len(), 3);
    }
    // The default table saw none of it.
    assert_eq!(db.all_rows(DEFAULT_TABLE).await.len(), 1);
    assert_eq!(status_of(&db, APP, "e1").await, "pending");
}

/// The key columns of outboxd's claim indexes (migration 0001).
const CLAIM_INDEX_COLUMNS: [&str; 4] = [
    "app_code,status,created_at_ms,event_id",
    "app_code,status,next_retry_at_ms,created_at_ms,event_id",
    "app_code,status,lock_until_ms,created_at_ms,event_id",
    "app_code,room_id,status,created_at_ms,event_id",
];

/// Whether `table` has every claim index (under any name).
async fn has_claim_indexes(db: &TestDb, table: &str) -> bool {
    let indexes = db.index_columns(table).await;
    CLAIM_INDEX_COLUMNS
        .iter()
        .all(|wanted| indexes.values().any(|columns| columns.join(",") == *wanted))
}

/// The versions of every embedded migration of `backend`, oldest first.
fn all_migrations(backend: Backend) -> Vec<i64> {
    outboxd::store::schema::migrations(backend)
        .iter()
        .map(|m| m.version)
        .collect()
}

async fn migrate_adopts_a_foreign_table(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    // The Go room-service's table: same columns, its own indexes, none of outboxd's.
    db.create_foreign_table(
        DEFAULT_TABLE,
        &[],
        &[("idx_go_legacy", "room_id, created_at_ms")],
    )
    .await;
    db.insert_raw(DEFAULT_TABLE, &[RawInsert::pending(APP, "e1", "r", 1)])
        .await;
    assert!(!has_claim_indexes(&db, DEFAULT_TABLE).await);
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    assert_eq!(
        store.migrate().await.expect("adopting migrate"),
        all_migrations(backend),
        "every migration, from 1"
    );
    let indexes = db.index_columns(DEFAULT_TABLE).await;
    assert!(has_claim_indexes(&db, DEFAULT_TABLE).await, "{indexes:?}");
    assert_eq!(
        indexes.get("idx_go_legacy"),
        Some(&strs(&["room_id", "created_at_ms"])),
        "unrelated index kept"
    );
    assert_eq!(
        store.migrate().await.expect("second migrate"),
        Vec::<i64>::new()
    );
    assert_eq!(
        db.index_columns(DEFAULT_TABLE).await,
        indexes,
        "second migrate changed the indexes"
    );
    assert_eq!(
        ids(&claim_app(&store, "w1", 10, 1_000, 1_000).await),
        strs(&["e1"])
    );

    // Already recorded as migrated (an earlier outboxd version) but without the indexes: the next
    // migrate still creates them, under any name the columns are not already indexed by.
    let table = "adopted_outbox";
    db.create_foreign_table(
        table,
        &[],
        &[("go_claim", "app_code, status, created_at_ms, event_id")],
    )
    .await;
    db.execute(
        &format!(
            "INSERT INTO outboxd_migrations (table_name, version, applied_at_ms) VALUES ({}, 1, 0)",
            db.placeholder(1)
        ),
        &[support::Bind::Str(table.into())],
    )
    .await;
    let adopted = db.store_unmigrated(table).await;
    assert_eq!(
        adopted.migrate().await.expect("verify-only migrate"),
        all_migrations(backend)[1..].to_vec(),
        "only the migrations after the recorded one"
    );
    let indexes = db.index_columns(table).await;
    assert!(has_claim_indexes(&db, table).await, "{indexes:?}");
    assert!(
        !indexes.contains_key("idx_adopted_outbox_pending"),
        "pending columns were indexed already: {indexes:?}"
    );
}

async fn migrate_refuses_a_claim_index_name_with_other_columns(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    db.create_foreign_table(
        DEFAULT_TABLE,
        &[],
        &[(
            "idx_room_outbox_pending",
            "app_code, status, next_retry_at_ms",
        )],
    )
    .await;
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    let err = store
        .migrate()
        .await
        .expect_err("same-named index of other columns");
    assert!(matches!(err, StoreError::Schema(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(
            "index idx_room_outbox_pending on room_outbox has columns (app_code, status, next_retry_at_ms) \
             but outboxd needs (app_code, status, created_at_ms, event_id)"
        ),
        "{message}"
    );
    assert!(message.contains("run `outboxd migrate` again"), "{message}");
    // Nothing was recorded; the DROP the message names clears the way.
    let drop = message
        .split_once("drop it (")
        .and_then(|(_, rest)| rest.split_once(')'))
        .map(|(drop, _)| drop.to_string())
        .unwrap_or_else(|| panic!("no DROP INDEX in {message}"));
    assert!(
        drop.starts_with("DROP INDEX idx_room_outbox_pending"),
        "{drop}"
    );
    db.execute(&drop, &[]).await;
    assert_eq!(
        store.migrate().await.expect("migrate after the drop"),
        all_migrations(backend)
    );
    assert!(has_claim_indexes(&db, DEFAULT_TABLE).await);
}

async fn migrate_refuses_a_table_missing_columns(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    db.create_foreign_table(DEFAULT_TABLE, &["worker_id", "lock_until_ms"], &[])
        .await;
    let store = db.store_unmigrated(DEFAULT_TABLE).await;
    let err = store.migrate().await.expect_err("table missing columns");
    assert!(matches!(err, StoreError::Schema(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains(
            "table room_outbox lacks the column(s) worker_id, lock_until_ms that outboxd needs"
        ),
        "{message}"
    );
    assert!(
        !has_claim_indexes(&db, DEFAULT_TABLE).await,
        "nothing created"
    );
}

// ---------------------------------------------------------------------------------------------
// One test per (backend, behaviour)
// ---------------------------------------------------------------------------------------------

/// Expands to `mod $module { #[tokio::test] async fn <behaviour>() … }` for every behaviour above.
/// A behaviour missing from the list shows up as an unused-function warning.
macro_rules! conformance {
    ($module:ident, $backend:expr) => {
        conformance!(@expand $module, $backend;
            enqueue_inserts_pending_rows,
            enqueue_is_idempotent_on_app_and_event_id,
            enqueue_is_all_or_nothing,
            save_in_rolled_back_transaction_leaves_nothing,
            save_commits_with_the_callers_transaction,
            enqueue_keeps_tenants_apart,
            claim_orders_pending_by_created_at_then_event_id,
            claim_takes_pending_then_due_retryable_then_expired_leases,
            claim_limit_takes_branches_in_order,
            claim_honours_limit,
            claim_writes_the_lease,
            claim_skips_live_leases,
            claim_reclaims_an_expired_lease_as_an_attempt,
            claim_fails_an_expired_lease_at_max_attempts,
            claim_isolates_a_corrupt_envelope,
            claim_rejects_an_envelope_of_another_tenant,
            claim_rejects_an_envelope_disagreeing_with_its_row,
            claim_concurrent_claims_never_share_a_row,
            mark_applies_a_mix_in_one_call,
            mark_deferred_spends_no_attempt,
            mark_is_fenced_against_a_reclaimed_row,
            mark_reports_only_the_stale_rows,
            mark_is_fenced_against_a_requeued_or_finished_row,
            mark_cuts_last_error_at_a_utf8_boundary,
            mark_rejects_duplicate_ids,
            claim_per_room_hands_out_only_room_heads,
            claim_per_room_blocks_behind_a_retryable_head,
            claim_per_room_failed_head_does_not_block,
            claim_per_room_reclaims_an_expired_head_first,
            claim_per_room_rooms_are_per_tenant,
            claim_per_room_keeps_room_order_under_failures,
            claim_per_room_concurrent_workers_keep_one_event_per_room_in_flight,
            counts_by_status_and_oldest_pending_age,
            list_failed_filters,
            requeue_by_filters,
            requeue_by_created_at_range,
            requeue_dry_run_changes_nothing,
            purge_deletes_only_old_finished_rows_oldest_first,
            migrate_is_idempotent,
            migrate_rejects_invalid_table_names,
            migrate_custom_table_names_work,
            migrate_adopts_a_foreign_table,
            migrate_refuses_a_claim_index_name_with_other_columns,
            migrate_refuses_a_table_missing_columns,
        );
    };
    (@expand $module:ident, $backend:expr; $($name:ident),* $(,)?) => {
        mod $module {
            use outboxd::store::Backend;
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $name() {
                    super::$name($backend).await
                }
            )*
        }
    };
}

conformance!(sqlite, Backend::Sqlite);
conformance!(mysql, Backend::MySql);
conformance!(postgres, Backend::Postgres);
