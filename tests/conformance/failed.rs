//! `list_failed` and `requeue`: finding failed rows by filter and sending them back to pending.

use std::sync::Arc;

use outboxd::store::{
    Backend, DEFAULT_TABLE, FailedFilter, ListFailedParams, Mark, OutboxStore, RequeueParams,
};

use crate::conformance::helpers::{
    APP, HOST, OTHER, all_ids, enqueue, failed, ids, list_failed, mark, own_all, read_owned,
    reading, requeue, setup, status_of, strs,
};
use crate::support::typed_record;

crate::support::per_backend!(
    list_failed_filters,
    requeue_by_filters,
    requeue_by_created_at_range,
    requeue_dry_run_changes_nothing,
    requeue_in_chunks_moves_the_oldest_first,
);

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
        let own = own_all(store, app, HOST).await;
        for batch in read_owned(store, &own, &reading(app, HOST, 900)).await {
            let marks: Vec<Mark> = ids(&batch)
                .iter()
                .map(|id| failed(id, &format!("err-{id}")))
                .collect();
            assert_eq!(
                mark(store, &batch.lease, &marks, 1_000).await.applied as usize,
                marks.len()
            );
        }
    }
    enqueue(store, &[typed_record(APP, "pa", "r1", "T1", 50)]).await;
}

/// An empty filter (every failed row), to narrow with `..filter()`.
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

    // Requeued rows are read again as first attempts.
    let own = own_all(&store, APP, HOST).await;
    let batches = read_owned(&store, &own, &reading(APP, HOST, 3_000)).await;
    assert_eq!(all_ids(&batches), strs(&["fa1", "fa2", "fa3", "fa4", "pa"]));
    assert!(
        batches
            .iter()
            .flat_map(|b| b.events.iter())
            .all(|e| e.retry_count == 0 && e.event.attempt == 1)
    );
    let own = own_all(&store, OTHER, HOST).await;
    let other = read_owned(&store, &own, &reading(OTHER, HOST, 3_000)).await;
    assert_eq!(all_ids(&other), strs(&["fb1"]));
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

async fn requeue_in_chunks_moves_the_oldest_first(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    failed_rows_setup(&store).await;
    let chunk = |filter: FailedFilter| RequeueParams {
        filter,
        dry_run: false,
        now_ms: 2_000,
        limit: Some(2),
    };
    // Across tenants: fa1(100), fb1(150) first, by created_at_ms.
    assert_eq!(store.requeue(&chunk(filter())).await.expect("chunk"), 2);
    assert_eq!(status_of(&db, APP, "fa1").await, "pending");
    assert_eq!(status_of(&db, OTHER, "fb1").await, "pending");
    assert_eq!(
        list_failed(&store, filter(), 100).await,
        strs(&["fa2", "fa3", "fa4"])
    );
    // One tenant: its oldest two, then the last one, then nothing.
    let app = FailedFilter {
        app_code: Some(APP.into()),
        ..filter()
    };
    assert_eq!(store.requeue(&chunk(app.clone())).await.expect("chunk"), 2);
    assert_eq!(list_failed(&store, filter(), 100).await, strs(&["fa4"]));
    assert_eq!(store.requeue(&chunk(app.clone())).await.expect("chunk"), 1);
    assert_eq!(store.requeue(&chunk(app)).await.expect("chunk"), 0);
    assert!(list_failed(&store, filter(), 100).await.is_empty());
    // A requeued row starts over: no attempts, no lease, read again.
    let own = own_all(&store, APP, HOST).await;
    let batches = read_owned(&store, &own, &reading(APP, HOST, 3_000)).await;
    assert_eq!(all_ids(&batches), strs(&["fa1", "fa2", "fa3", "fa4", "pa"]));
    assert!(
        batches
            .iter()
            .flat_map(|b| b.events.iter())
            .all(|e| e.retry_count == 0)
    );
}
