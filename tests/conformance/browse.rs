//! The console's reads and dead-letter deletes: `search_events` (newest first, keyset pages,
//! status and time ranges, filters on top of a bounded window), `event`, `error_groups`,
//! `delete_failed`.

use std::sync::Arc;

use outboxd::record::Status;
use outboxd::store::{
    Backend, DeleteFailedParams, ErrorGroupsParams, EventPage, EventQuery, FailedFilter, Mark,
    OutboxStore,
};

use crate::conformance::helpers::{
    APP, HOST, OTHER, all_ids, enqueue, failed, mark, own_all, read_all, setup,
};
use crate::support::typed_record;

crate::support::per_backend!(
    search_pages_newest_first_without_offset,
    search_ranges_by_status_time_and_id,
    filters_on_top_read_a_bounded_window,
    one_event_with_its_envelope,
    failed_rows_group_by_error,
    delete_failed_takes_failed_rows_only_in_chunks,
);

/// 30 rows of APP, e00..e29 created at 100, 110, … 390; types A (even) / B (odd); rooms r0..r2;
/// e00..e09 failed ("boom" for even, "bust" for odd), e10..e14 delivered, the rest pending. One
/// OTHER row at 1000 (newer than all).
async fn rows_setup(store: &Arc<dyn OutboxStore>) {
    let records: Vec<_> = (0..30)
        .map(|i| {
            typed_record(
                APP,
                &format!("e{i:02}"),
                &format!("r{}", i % 3),
                if i % 2 == 0 { "A" } else { "B" },
                100 + 10 * i,
            )
        })
        .collect();
    enqueue(store, &records).await;
    let own = own_all(store, APP, HOST).await;
    let batches = read_all(store, HOST, &own, false, 5_000).await;
    assert_eq!(all_ids(&batches).len(), 30);
    for batch in &batches {
        let marks: Vec<Mark> = batch
            .events
            .iter()
            .map(|e| e.event.event_id.as_str())
            .filter_map(|id| match id[1..].parse::<usize>().expect("e<nn>") {
                i @ 0..10 => Some(failed(id, if i % 2 == 0 { "boom" } else { "bust" })),
                10..15 => Some(Mark::delivered(id)),
                _ => None,
            })
            .collect();
        mark(store, &batch.lease, &marks, 6_000).await;
    }
    enqueue(store, &[typed_record(OTHER, "o1", "r0", "A", 1_000)]).await;
}

fn query() -> EventQuery {
    EventQuery {
        app_code: APP.into(),
        limit: 7,
        scan_limit: 100,
        ..EventQuery::default()
    }
}

fn event_ids(page: &EventPage) -> Vec<String> {
    page.events.iter().map(|e| e.event_id.clone()).collect()
}

fn range(from: usize, to_exclusive: usize) -> Vec<String> {
    (from..to_exclusive)
        .rev()
        .map(|i| format!("e{i:02}"))
        .collect()
}

async fn search(store: &Arc<dyn OutboxStore>, q: &EventQuery) -> EventPage {
    store
        .search_events(q)
        .await
        .unwrap_or_else(|e| panic!("search {q:?}: {e}"))
}

async fn search_pages_newest_first_without_offset(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    rows_setup(&store).await;
    let mut q = query();
    let mut seen = Vec::new();
    let mut pages = 0;
    loop {
        let page = search(&store, &q).await;
        assert!(!page.filtered_on_top);
        assert!(page.events.len() <= 7);
        seen.extend(event_ids(&page));
        pages += 1;
        match page.next {
            Some(next) => q.before = Some(next),
            None => break,
        }
        assert!(pages < 10, "pagination does not end");
    }
    assert_eq!(
        seen,
        range(0, 30),
        "every row once, newest first, the tenant's only"
    );
    assert_eq!(pages, 5);
    let first = search(&store, &query()).await;
    assert_eq!(first.events[0].status, "pending");
    assert_eq!(first.events[0].created_at_ms, 390);
}

async fn search_ranges_by_status_time_and_id(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    rows_setup(&store).await;
    let failed_only = EventQuery {
        statuses: vec![Status::Failed],
        limit: 50,
        ..query()
    };
    let page = search(&store, &failed_only).await;
    assert_eq!(event_ids(&page), range(0, 10));
    assert_eq!(page.events[0].last_error.as_deref(), Some("bust"));
    assert_eq!(page.events[0].retry_count, 1);
    assert_eq!(page.next, None);
    let two = EventQuery {
        statuses: vec![Status::Delivered, Status::Pending],
        since_ms: Some(200),
        until_ms: Some(260),
        limit: 50,
        ..query()
    };
    assert_eq!(
        event_ids(&search(&store, &two).await),
        range(10, 16),
        "since inclusive, until exclusive, across two statuses"
    );
    let by_id = EventQuery {
        event_id: Some("e03".into()),
        ..query()
    };
    let page = search(&store, &by_id).await;
    assert_eq!(event_ids(&page), ["e03"]);
    let wrong_status = EventQuery {
        statuses: vec![Status::Pending],
        ..by_id.clone()
    };
    assert!(search(&store, &wrong_status).await.events.is_empty());
    let other_tenant = EventQuery {
        app_code: OTHER.into(),
        ..by_id
    };
    assert!(search(&store, &other_tenant).await.events.is_empty());
}

async fn filters_on_top_read_a_bounded_window(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    rows_setup(&store).await;
    // Type B (odd ids) with a window of 6 rows per status: pages end where each window ends,
    // and following `next` finds every match exactly once.
    let mut q = EventQuery {
        event_type: Some("B".into()),
        scan_limit: 6,
        limit: 50,
        ..query()
    };
    let mut seen = Vec::new();
    for _ in 0..20 {
        let page = search(&store, &q).await;
        assert!(page.filtered_on_top);
        assert!(page.scanned <= 6 * 5, "read {} rows", page.scanned);
        seen.extend(event_ids(&page));
        match page.next {
            Some(next) => q.before = Some(next),
            None => break,
        }
    }
    let odd: Vec<String> = (0..30)
        .rev()
        .filter(|i| i % 2 == 1)
        .map(|i| format!("e{i:02}"))
        .collect();
    assert_eq!(seen, odd);
    let glob = EventQuery {
        event_type: Some("?".into()),
        error_contains: Some("BOO".into()),
        ..query()
    };
    let page = search(&store, &glob).await;
    assert_eq!(
        event_ids(&page),
        ["e08", "e06", "e04", "e02", "e00"],
        "case-insensitive error text"
    );
    let exact = EventQuery {
        last_error: Some("bust".into()),
        ..query()
    };
    assert_eq!(search(&store, &exact).await.events.len(), 5);
    let room = EventQuery {
        room_id: Some("r1".into()),
        limit: 50,
        ..query()
    };
    let page = search(&store, &room).await;
    assert!(
        page.filtered_on_top,
        "no room index: the room is applied on top"
    );
    assert_eq!(page.events.len(), 10);
    assert!(page.events.iter().all(|e| e.room_id == "r1"));
}

async fn one_event_with_its_envelope(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let record = typed_record(APP, "x1", "room-9", "<script>alert(1)</script>", 500);
    enqueue(&store, std::slice::from_ref(&record)).await;
    let detail = store.event(APP, "x1").await.unwrap().expect("the row");
    assert_eq!(detail.summary.event_type, "<script>alert(1)</script>");
    assert_eq!(detail.summary.status, "pending");
    assert_eq!(detail.summary.lock_until_ms, None);
    assert_eq!(detail.envelope, record.encoded_envelope());
    assert!(store.event(APP, "nope").await.unwrap().is_none());
    assert!(store.event(OTHER, "x1").await.unwrap().is_none());
}

async fn failed_rows_group_by_error(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    rows_setup(&store).await;
    let groups = store
        .error_groups(&ErrorGroupsParams {
            app_code: APP.into(),
            window: 100,
        })
        .await
        .unwrap();
    assert_eq!(groups.len(), 2);
    assert_eq!(groups.iter().map(|g| g.count).sum::<u64>(), 10);
    assert!(
        groups
            .iter()
            .all(|g| g.first_seen_ms == 6_000 && g.last_seen_ms == 6_000)
    );
    let window = store
        .error_groups(&ErrorGroupsParams {
            app_code: APP.into(),
            window: 3,
        })
        .await
        .unwrap();
    // The newest 3 failed rows: e09 (bust), e08 (boom), e07 (bust).
    assert_eq!(window[0].last_error.as_deref(), Some("bust"));
    assert_eq!((window[0].count, window[1].count), (2, 1));
}

async fn delete_failed_takes_failed_rows_only_in_chunks(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    rows_setup(&store).await;
    let boom = FailedFilter {
        app_code: Some(APP.into()),
        last_error: Some("boom".into()),
        ..FailedFilter::default()
    };
    let dry = DeleteFailedParams {
        filter: boom.clone(),
        dry_run: true,
        limit: 1,
    };
    assert_eq!(store.delete_failed(&dry).await.unwrap(), 5);
    let chunk = DeleteFailedParams {
        dry_run: false,
        limit: 2,
        ..dry
    };
    assert_eq!(store.delete_failed(&chunk).await.unwrap(), 2);
    assert!(db.row(APP, "e00").await.is_none(), "the oldest go first");
    assert!(db.row(APP, "e02").await.is_none());
    assert!(db.row(APP, "e04").await.is_some());
    let everything = DeleteFailedParams {
        filter: FailedFilter {
            event_ids: vec!["e20".into(), "e05".into()],
            ..FailedFilter::default()
        },
        dry_run: false,
        limit: 100,
    };
    assert_eq!(
        store.delete_failed(&everything).await.unwrap(),
        1,
        "e20 is pending"
    );
    assert!(db.row(APP, "e20").await.is_some());
    assert!(db.row(APP, "e05").await.is_none());
}
