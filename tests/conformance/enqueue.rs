//! `enqueue` and `save` (the producer's insert inside its own transaction): pending rows,
//! idempotent on (app_code, event_id), all or nothing, tenants apart.

use outboxd::store::{Backend, DEFAULT_TABLE};
use prost::Message;

use crate::conformance::helpers::{
    APP, HOST, OTHER, all_ids, counts, delivered, enqueue, ids, mark, own_all, read_all, read_app,
    read_owned, reading, setup, status_of, strs,
};
use crate::support::record;

crate::support::per_backend!(
    enqueue_inserts_pending_rows,
    enqueue_is_idempotent_on_app_and_event_id,
    enqueue_is_all_or_nothing,
    save_in_rolled_back_transaction_leaves_nothing,
    save_commits_with_the_callers_transaction,
    a_duplicate_save_keeps_the_callers_transaction,
    enqueue_keeps_tenants_apart,
);

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

    let own = own_all(&store, APP, HOST).await;
    let batches = read_all(&store, HOST, &own, false, 2_000).await;
    assert_eq!(all_ids(&batches), strs(&["e1", "e2"]));
    let e = batches
        .iter()
        .flat_map(|b| b.events.iter())
        .find(|e| e.event.event_id == "e1")
        .unwrap();
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
            trace: None,
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
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 10_000).await;
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
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 2_000).await;
    assert_eq!(ids(&batch), strs(&["e1", "e2"]));
}

/// A one-record save of an id already present (MySQL: a plain INSERT refused on the duplicate
/// key) counts 0 and leaves the caller's transaction going: its earlier and later saves commit.
async fn a_duplicate_save_keeps_the_callers_transaction(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let r1 = record(APP, "e1", "r1", 1_000);
    let mut again = record(APP, "e1", "r2", 2_000);
    again.envelope.body = b"different".to_vec();
    let batches = [
        vec![r1],
        vec![again.clone()],
        vec![record(APP, "e2", "r1", 1_001)],
    ];
    let results = db.save_in_transaction(DEFAULT_TABLE, &batches, true).await;
    let counts: Vec<Option<&u64>> = results.iter().map(|r| r.as_ref().ok()).collect();
    assert_eq!(counts, [Some(&1), Some(&0), Some(&1)], "{results:?}");
    let row = db.row(APP, "e1").await.expect("row e1");
    assert_eq!((row.room_id.as_str(), row.created_at_ms), ("r1", 1_000));
    // After the commit, the same id enqueued alone in a transaction of its own counts 0 too.
    assert_eq!(enqueue(&store, &[again]).await, 0);
    let own = own_all(&store, APP, HOST).await;
    let batch = read_app(&store, &own, 10, 3_000).await;
    assert_eq!(ids(&batch), strs(&["e1", "e2"]));
}

async fn enqueue_keeps_tenants_apart(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[
            // One room and one millisecond: B's rows lie in the partition and the span of A's
            // batch, so only the tenant keeps A's marks off them.
            record(APP, "e1", "room", 1_000),
            record(OTHER, "e1", "room", 1_000),
            record(OTHER, "e2", "room", 1_000),
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

    let own_a = own_all(&store, APP, HOST).await;
    let a = read_app(&store, &own_a, 10, 2_000).await;
    assert_eq!(ids(&a), strs(&["e1"]));
    assert!(a.events.iter().all(|e| e.event.app_code == APP));
    assert_eq!(a.lease.app_code, APP);

    let own_b = own_all(&store, OTHER, HOST).await;
    let b = read_owned(&store, &own_b, &reading(OTHER, HOST, 2_000)).await;
    assert_eq!(all_ids(&b), strs(&["e1", "e2"]));
    assert!(
        b.iter()
            .flat_map(|b| b.events.iter())
            .all(|e| e.event.app_code == OTHER)
    );

    // A's batch cannot mark B's rows, even with the same event id.
    let report = mark(&store, &a.lease, &[delivered("e2")], 2_001).await;
    assert_eq!(report.applied, 0);
    assert_eq!(report.stale, strs(&["e2"]));
    assert_eq!(status_of(&db, OTHER, "e2").await, "pending");
    let report = mark(&store, &a.lease, &[delivered("e1")], 2_001).await;
    assert_eq!(report.applied, 1);
    assert_eq!(status_of(&db, APP, "e1").await, "delivered");
    assert_eq!(status_of(&db, OTHER, "e1").await, "pending");
}
