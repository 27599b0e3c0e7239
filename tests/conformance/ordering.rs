//! `read_partitions` with per-room order (`per_room: true`): a room's events are handed out in
//! write order, and a room with a `retryable` or `delivering` event hands out none of its
//! `pending` ones (a due retry waits while an earlier one of its room is not due, or delivering),
//! so a room's events are delivered in order across failures; a `failed` event does not hold its
//! room. Rooms are a tenant's own. (A room waiting behind its retry: `partitions.rs`.)

use std::collections::BTreeMap;
use std::sync::Arc;

use outboxd::store::{Backend, ClaimBatch, DEFAULT_TABLE, OutboxStore, Ownership, PartitionRead};

use crate::conformance::helpers::{
    APP, HOST, OTHER, all_delivered, counts, deferred, delivered, enqueue, failed, ids, mark,
    own_all, read_owned, reading, retryable, setup, strs,
};
use crate::support::{RawInsert, record};

crate::support::per_backend!(
    per_room_read_passes_a_failed_event_by,
    per_room_rooms_are_per_tenant,
    per_room_keeps_room_order_under_failures,
    per_room_reads_an_expired_delivering_event_before_its_room,
);

/// Reads every partition of `ownership` of tenant `app` with per-room order at `now_ms`, up to
/// 100 rows a partition: the batches that hold rows.
async fn read_rooms(
    store: &Arc<dyn OutboxStore>,
    app: &str,
    ownership: &Ownership,
    now_ms: i64,
) -> Vec<ClaimBatch> {
    read_rooms_up_to(store, app, ownership, 100, now_ms).await
}

/// [`read_rooms`] up to `limit` rows a partition.
async fn read_rooms_up_to(
    store: &Arc<dyn OutboxStore>,
    app: &str,
    ownership: &Ownership,
    limit: u32,
    now_ms: i64,
) -> Vec<ClaimBatch> {
    let template = PartitionRead {
        per_room: true,
        limit,
        ..reading(app, HOST, now_ms)
    };
    read_owned(store, ownership, &template).await
}

/// The event ids `batches` handed out of `room`, in their order.
fn of_room(batches: &[ClaimBatch], room: &str) -> Vec<String> {
    batches
        .iter()
        .flat_map(|b| b.events.iter())
        .filter(|e| e.event.room_id == room)
        .map(|e| e.event.event_id.clone())
        .collect()
}

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

/// A failed event does not hold its room: the events after it are read; a retryable one holds
/// its room.
async fn per_room_read_passes_a_failed_event_by(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    rooms_setup(&store).await;
    let own = own_all(&store, APP, HOST).await;
    let batches = read_rooms(&store, APP, &own, 1_000).await;
    assert_eq!(of_room(&batches, "A"), strs(&["e1", "e2", "e3"]));
    assert_eq!(of_room(&batches, "B"), strs(&["f1", "f2"]));
    // e1 fails for good, f1 is retried later; the events behind them are not marked (not tried).
    for batch in &batches {
        let marks: Vec<_> = ids(batch)
            .iter()
            .filter_map(|id| match id.as_str() {
                "e1" => Some(failed("e1", "poison")),
                "f1" => Some(retryable("f1", 5_000, "later")),
                _ => None,
            })
            .collect();
        mark(&store, &batch.lease, &marks, 1_010).await;
    }
    let next = read_rooms(&store, APP, &own, 2_000).await;
    assert_eq!(
        of_room(&next, "A"),
        strs(&["e2", "e3"]),
        "failed e1 does not hold e2"
    );
    assert!(
        of_room(&next, "B").is_empty(),
        "retryable f1 holds f2: {:?}",
        of_room(&next, "B")
    );
}

/// A room is a tenant's: another tenant's room of the same name, held behind its retry, holds
/// nothing of this one's.
async fn per_room_rooms_are_per_tenant(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(OTHER, "z1", "A", 50)]).await;
    let other = own_all(&store, OTHER, HOST).await;
    let batches = read_rooms(&store, OTHER, &other, 1_000).await;
    assert_eq!(of_room(&batches, "A"), strs(&["z1"]));
    for batch in &batches {
        mark(
            &store,
            &batch.lease,
            &[retryable("z1", 9_000, "later")],
            1_000,
        )
        .await;
    }
    rooms_setup(&store).await;
    enqueue(&store, &[record(OTHER, "z2", "A", 60)]).await;
    let own = own_all(&store, APP, HOST).await;
    let batches = read_rooms(&store, APP, &own, 2_000).await;
    assert_eq!(
        of_room(&batches, "A"),
        strs(&["e1", "e2", "e3"]),
        "another tenant's room A does not hold this one's"
    );
    assert!(
        batches
            .iter()
            .flat_map(|b| b.events.iter())
            .all(|e| e.event.app_code == APP)
    );
    let held = read_rooms(&store, OTHER, &other, 2_000).await;
    assert!(
        held.is_empty(),
        "z2 waits behind z1 in its own tenant's room A: {:?}",
        held.iter().map(ids).collect::<Vec<_>>()
    );
}

/// Events of six rooms read a few at a time and marked round after round as a host does: an
/// event failing once is marked retryable (due four reads later) and the events behind it in its
/// batch deferred (due at once), two events fail for good. The reads in between find the room's
/// later events pending or due and hold them all back, so each room's delivered events come out
/// in write order, every attempt counted.
async fn per_room_keeps_room_order_under_failures(backend: Backend) {
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
    let own = own_all(&store, APP, HOST).await;
    let mut attempts: BTreeMap<String, u32> = BTreeMap::new();
    let mut delivered_order: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    let mut now = 1_000;
    let mut rounds = 0;
    loop {
        rounds += 1;
        assert!(rounds < 500, "did not drain");
        now += 10;
        let c = counts(&store, Some(APP), now).await;
        if c.pending + c.retryable + c.delivering == 0 {
            break;
        }
        let batches = read_rooms_up_to(&store, APP, &own, 3, now).await;
        for batch in &batches {
            let created: Vec<(i64, &str)> = batch
                .events
                .iter()
                .map(|e| (e.created_at_ms, e.event.event_id.as_str()))
                .collect();
            assert!(created.is_sorted(), "out of write order: {created:?}");
            // Rooms held in this batch: an event of theirs was put back.
            let mut held: Vec<String> = Vec::new();
            let mut marks = Vec::new();
            for e in &batch.events {
                let id = &e.event.event_id;
                let (room, k) = id.split_once('-').unwrap();
                let k: usize = k.parse().unwrap();
                if held.iter().any(|h| h == room) {
                    marks.push(deferred(id, now, "held behind"));
                    continue;
                }
                let n = attempts.entry(id.clone()).or_default();
                *n += 1;
                assert_eq!(e.event.attempt, *n, "{id}");
                // Inject failures: every third event fails once (its retry due four reads
                // later), r2-3 and r4-0 fail for good; the rest is delivered.
                if id == "r2-3" || id == "r4-0" {
                    marks.push(failed(id, "poison"));
                } else if (k + room.len()).is_multiple_of(3) && *n == 1 {
                    marks.push(retryable(id, now + 45, "flaky"));
                    held.push(room.to_string());
                } else {
                    marks.push(delivered(id));
                    delivered_order.entry(room.to_string()).or_default().push(k);
                }
            }
            let report = mark(&store, &batch.lease, &marks, now).await;
            assert_eq!(report.applied as usize, marks.len(), "{report:?}");
        }
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

/// A `delivering` event of an old-version host holds its room: while its lease runs nothing of
/// the room is read; once it expired it is read alone (as an attempt), and the room's later
/// events follow when it is marked. Other rooms flow meanwhile.
async fn per_room_reads_an_expired_delivering_event_before_its_room(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let leased = |id: &str, room: &str, created_at_ms: i64, lock_until_ms: i64| RawInsert {
        worker_id: Some("old-host".into()),
        lock_until_ms: Some(lock_until_ms),
        ..RawInsert::pending(APP, id, room, created_at_ms).with_status("delivering")
    };
    db.insert_raw(
        DEFAULT_TABLE,
        &[
            leased("e1", "A", 100, 1_100),
            RawInsert::pending(APP, "e2", "A", 200),
            RawInsert::pending(APP, "e3", "A", 300),
            leased("g1", "C", 120, 50_000),
            RawInsert::pending(APP, "g2", "C", 220),
            RawInsert::pending(APP, "f1", "B", 150),
        ],
    )
    .await;
    let own = own_all(&store, APP, HOST).await;
    let first = read_rooms(&store, APP, &own, 1_000).await;
    assert!(
        of_room(&first, "A").is_empty(),
        "e1's lease runs until 1100"
    );
    assert!(of_room(&first, "C").is_empty(), "g1's lease runs");
    assert_eq!(of_room(&first, "B"), strs(&["f1"]));
    let batches = read_rooms(&store, APP, &own, 2_000).await;
    assert_eq!(
        of_room(&batches, "A"),
        strs(&["e1"]),
        "the expired event alone"
    );
    assert!(of_room(&batches, "C").is_empty(), "g1's lease runs");
    let e1 = batches
        .iter()
        .flat_map(|b| b.events.iter())
        .find(|e| e.event.event_id == "e1")
        .unwrap();
    assert_eq!(e1.retry_count, 1, "an expired lease is an attempt");
    for batch in &batches {
        mark(&store, &batch.lease, &all_delivered(batch), 2_000).await;
    }
    let next = read_rooms(&store, APP, &own, 2_010).await;
    assert_eq!(of_room(&next, "A"), strs(&["e2", "e3"]));
    assert!(of_room(&next, "C").is_empty(), "g1's lease runs");
}
