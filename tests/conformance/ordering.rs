//! `claim` with `DeliveryOrder::PerRoom`: only the head of each room is handed out, so one event
//! per room is in flight and a room's events are delivered in order, even across failures and
//! workers.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use outboxd::store::{
    Backend, ClaimBatch, DeliveryOrder, Mark, MarkParams, OutboxStore, StoreError,
};

use crate::helpers::{
    APP, OTHER, claim, claim_app, counts, delivered, enqueue, failed, ids, mark, params, retryable,
    strs,
};
use crate::support::{TestDb, record};

crate::support::per_backend!(
    per_room_ordering_is_refused_without_the_room_index,
    claim_per_room_hands_out_only_room_heads,
    claim_per_room_blocks_behind_a_retryable_head,
    claim_per_room_failed_head_does_not_block,
    claim_per_room_reclaims_an_expired_head_first,
    claim_per_room_rooms_are_per_tenant,
    claim_per_room_keeps_room_order_under_failures,
    claim_per_room_concurrent_workers_keep_one_event_per_room_in_flight,
    claim_per_room_goes_round_the_rooms,
    claim_per_room_reads_heads_not_the_backlog_behind_them,
    held_claim_per_room_hands_out_room_heads,
);

/// A fresh database and a store on `room_outbox` migrated with the room index that per-room
/// claims need; `None` when the backend is skipped.
async fn setup_per_room(backend: Backend) -> Option<(TestDb, Arc<dyn OutboxStore>)> {
    let db = TestDb::new(backend).await?;
    let store = db.store_per_room().await;
    Some((db, store))
}

/// `check_ordering` (what a worker asks once at start): without the room index per-room ordering
/// is refused with the index and the fix named, no ordering is fine. An index of its columns
/// under another name serves where the claims leave the choice to the planner; where they name
/// `idx_<table>_room` (a dialect's index hint) it is refused with both names, and `migrate` with
/// the room index then creates the named one. Once `migrate` ran with it, per-room ordering is
/// accepted and per-room claims run.
async fn per_room_ordering_is_refused_without_the_room_index(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let store = db.store_default().await;
    store
        .check_ordering(DeliveryOrder::None)
        .await
        .expect("no ordering needs no room index");
    let err = store
        .check_ordering(DeliveryOrder::PerRoom)
        .await
        .expect_err("per-room ordering without the room index");
    assert!(matches!(err, StoreError::Schema(_)), "{err:?}");
    let missing = "outbox table schema: table room_outbox has no index idx_room_outbox_room \
                   (app_code, status, room_id, created_at_ms, event_id), which worker.ordering = \
                   \"per-room\" needs (without it every per-room claim scans the tenant's backlog): \
                   run `outboxd migrate` with worker.ordering = \"per-room\" (or `outboxd migrate \
                   --room-index`) first";
    assert_eq!(err.to_string(), missing);

    db.execute(
        "CREATE INDEX by_room ON room_outbox (app_code, status, room_id, created_at_ms, event_id)",
        &[],
    )
    .await;
    let refused = match store.check_ordering(DeliveryOrder::PerRoom).await {
        Ok(()) => false,
        Err(err) => {
            assert!(matches!(err, StoreError::Schema(_)), "{err:?}");
            assert_eq!(
                err.to_string(),
                format!(
                    "{missing}; index by_room has its columns, but the per-room claims name \
                     idx_room_outbox_room on this database (drop by_room once \
                     idx_room_outbox_room exists)"
                )
            );
            true
        }
    };
    let other = db.store_per_room().await;
    let indexes = db.index_columns("room_outbox").await;
    assert_eq!(
        indexes.contains_key("idx_room_outbox_room"),
        refused,
        "migrate creates the named index exactly where the other name was refused: {indexes:?}"
    );
    assert!(
        indexes.contains_key("by_room"),
        "never dropped: {indexes:?}"
    );
    for store in [&store, &other] {
        store
            .check_ordering(DeliveryOrder::PerRoom)
            .await
            .expect("after migrate with the room index");
    }
    rooms_setup(&store).await;
    let batch = claim_ordered(&store, "w1", 10, 1_000).await;
    assert_eq!(ids(&batch), strs(&["e1", "f1"]), "the rooms' heads");
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
    let Some((_db, store)) = setup_per_room(backend).await else {
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
    let Some((_db, store)) = setup_per_room(backend).await else {
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
    let Some((_db, store)) = setup_per_room(backend).await else {
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
    let Some((_db, store)) = setup_per_room(backend).await else {
        return;
    };
    rooms_setup(&store).await;
    claim_ordered(&store, "w1", 10, 1_000).await; // lease 100: expires at 1100
    let again = claim_ordered(&store, "w2", 10, 2_000).await;
    assert_eq!(ids(&again), strs(&["e1", "f1"]));
    assert!(again.events.iter().all(|e| e.retry_count == 1));
}

async fn claim_per_room_rooms_are_per_tenant(backend: Backend) {
    let Some((_db, store)) = setup_per_room(backend).await else {
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
    let Some((_db, store)) = setup_per_room(backend).await else {
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
    let Some((db, store)) = setup_per_room(backend).await else {
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
    let second = db.store_per_room().await;
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
                    // The claimers' pace when idle (part of the race; they stop after 50 empty
                    // claims).
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

/// A room with a deep backlog does not hold up the others: claims go round the rooms from where
/// the last one stopped (the room cursor) and wrap around, so a room's head waits at most one
/// round of claims, not until older rooms' backlogs drain (oldest-first would hand out a00, a01,
/// a02 … before b0).
async fn claim_per_room_goes_round_the_rooms(backend: Backend) {
    let Some((_db, store)) = setup_per_room(backend).await else {
        return;
    };
    let mut recs: Vec<_> = (0..30)
        .map(|i| record(APP, &format!("a{i:02}"), "A", 100 + i))
        .collect();
    recs.push(record(APP, "b0", "B", 1_000));
    recs.push(record(APP, "c0", "C", 1_001));
    enqueue(&store, &recs).await;
    let mut handed_out = Vec::new();
    for round in 0..5 {
        let now_ms = 2_000 + round;
        let batch = claim_ordered(&store, "w1", 1, now_ms).await;
        assert_eq!(batch.events.len(), 1, "round {round}: {:?}", ids(&batch));
        handed_out.extend(ids(&batch));
        let marks: Vec<Mark> = ids(&batch).iter().map(|id| delivered(id)).collect();
        mark(&store, &batch.lease, &marks, now_ms).await;
    }
    assert_eq!(handed_out, strs(&["a00", "b0", "c0", "a01", "a02"]));
}

/// A claim hands out every room's head however deep the backlog behind each (2,000 events over
/// 5 rooms: the heads are the 5 oldest events of their rooms, not the 5 oldest of the table),
/// and with every head in flight the next claim finds nothing to hand out; once the heads are
/// delivered, the next ones follow.
async fn claim_per_room_reads_heads_not_the_backlog_behind_them(backend: Backend) {
    let Some((_db, store)) = setup_per_room(backend).await else {
        return;
    };
    // Room r<k>'s events are created after every event of room r<k-1>.
    let recs: Vec<_> = (0..2_000)
        .map(|i| record(APP, &format!("e{i:04}"), &format!("r{}", i / 400), i))
        .collect();
    enqueue(&store, &recs).await;
    let mut heads = ids(&claim_ordered(&store, "w1", 100, 5_000).await);
    heads.sort();
    assert_eq!(heads, strs(&["e0000", "e0400", "e0800", "e1200", "e1600"]));
    let blocked = claim_ordered(&store, "w2", 100, 5_001).await;
    assert!(blocked.events.is_empty(), "{:?}", ids(&blocked));
}

/// Held claims (`worker.mode = "held"`) with per-room ordering hand out room heads like leased
/// ones: the rows stay `pending` while held, the next events of their rooms wait until the batch
/// is marked, and then follow.
async fn held_claim_per_room_hands_out_room_heads(backend: Backend) {
    let Some((db, store)) = setup_per_room(backend).await else {
        return;
    };
    rooms_setup(&store).await;
    let mut p = params(APP, "h1", 10, 1_000, 30_000);
    p.ordering = DeliveryOrder::PerRoom;
    let batch = store.claim_held(&p).await.expect("held claim");
    let mut held: Vec<String> = batch
        .events
        .iter()
        .map(|e| e.event.event_id.clone())
        .collect();
    held.sort();
    assert_eq!(held, strs(&["e1", "f1"]));
    assert_eq!(
        db.row(APP, "e1").await.unwrap().status,
        "pending",
        "held, not leased"
    );
    let marks: Vec<Mark> = held.iter().map(|id| delivered(id)).collect();
    let report = batch.mark(&marks, 1_100).await.expect("mark held");
    assert_eq!(report.applied, 2);
    p.now_ms = 1_200;
    let next = store.claim_held(&p).await.expect("held claim");
    let mut next_ids: Vec<String> = next
        .events
        .iter()
        .map(|e| e.event.event_id.clone())
        .collect();
    next_ids.sort();
    assert_eq!(next_ids, strs(&["e2", "f2"]));
    next.release().await.expect("release");
}
