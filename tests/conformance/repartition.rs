//! `repartition` (`outboxd migrate --partitions`): a table's partition count changes while no host
//! runs, online (producers keep writing); every partition starts over at a new epoch, so a batch
//! read under the old count is refused, and a host that started under it stops at its next
//! heartbeat. SQLite has one partition (one writer) and takes no other count; the behaviours that
//! change the count run on the two databases that have more.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use outboxd::record::now_ms;
use outboxd::store::{
    Backend, DEFAULT_PARTITIONS, OutboxStore, RebalanceParams, Repartition, StoreError,
};

use crate::conformance::helpers::{
    APP, LONG_LEASE_MS, all_delivered, all_ids, enqueue, mark, own_all, read_all, rebalance, setup,
};
use crate::support::record;

crate::support::per_backend!(
    [mysql, postgres] =>
    the_count_changes_while_no_host_runs,
    producers_keep_writing_while_the_count_changes,
);
crate::support::per_backend!([sqlite] => one_partition_takes_no_other_count);

/// Rows of `APP` in `rooms` rooms, `per_room` each, ids `<prefix>-<n>`, in write order.
fn rows(
    prefix: &str,
    rooms: usize,
    per_room: usize,
    first_ms: i64,
) -> Vec<outboxd::record::Record> {
    (0..rooms * per_room)
        .map(|n| {
            record(
                APP,
                &format!("{prefix}-{n:05}"),
                &format!("room-{}", n % rooms),
                first_ms + n as i64,
            )
        })
        .collect()
}

/// Every due row of `APP`, read by `host` owning every partition and marked delivered until
/// none is left: their ids, sorted, and the rooms each partition's reads handed out.
async fn deliver_all(
    store: &Arc<dyn OutboxStore>,
    host: &str,
) -> (Vec<String>, Vec<BTreeSet<String>>) {
    let ownership = own_all(store, APP, host).await;
    let mut delivered = Vec::new();
    let mut rooms = vec![BTreeSet::new(); ownership.partitions as usize];
    loop {
        let batches = read_all(store, host, &ownership, false, now_ms()).await;
        if batches.is_empty() {
            break;
        }
        for batch in &batches {
            let [partition] = batch.lease.partitions.as_slice() else {
                panic!("one partition per read: {:?}", batch.lease.partitions);
            };
            rooms[partition.fence.partition as usize]
                .extend(batch.events.iter().map(|e| e.event.room_id.clone()));
            let report = mark(store, &batch.lease, &all_delivered(batch), now_ms()).await;
            assert!(report.stale.is_empty(), "{host} owns them: {report:?}");
        }
        delivered.extend(all_ids(&batches));
    }
    delivered.sort();
    (delivered, rooms)
}

/// Asserts that no room's rows came from two partitions.
fn each_room_in_one_partition(rooms: &[BTreeSet<String>]) {
    let mut seen = BTreeSet::new();
    for (partition, set) in rooms.iter().enumerate() {
        for room in set {
            assert!(
                seen.insert(room.clone()),
                "{room} in two partitions ({partition})"
            );
        }
    }
}

async fn the_count_changes_while_no_host_runs(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    assert_eq!(store.partitions(), DEFAULT_PARTITIONS, "a new table");
    let written = rows("e", 40, 10, 1_000);
    enqueue(&store, &written).await;
    for bad in [0, 3, 2048] {
        let refused = store
            .repartition(bad)
            .await
            .expect_err("not a power of two up to 1024");
        assert!(refused.to_string().contains("power of two"), "{refused}");
    }
    // Host A owns every partition and has a batch in flight: a change is refused, naming it.
    let a = own_all(&store, APP, "host-a").await;
    let in_flight = read_all(&store, "host-a", &a, false, now_ms()).await;
    assert!(!in_flight.is_empty());
    let refused = store.repartition(16).await.expect_err("host-a runs");
    assert!(
        refused.to_string().contains("host-a") && refused.to_string().contains("stop every host"),
        "{refused}"
    );
    assert_eq!(store.partitions(), DEFAULT_PARTITIONS, "nothing changed");
    // A host started before the change (its store read the count), not running right now.
    let earlier = db.store_default().await;
    assert_eq!(earlier.partitions(), DEFAULT_PARTITIONS);
    // A stops (it leaves without marking its batch); the change goes through.
    rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], true).await;
    let change = store.repartition(16).await.expect("no host runs");
    assert_eq!(
        change,
        Repartition {
            from: DEFAULT_PARTITIONS,
            to: 16
        }
    );
    assert_eq!(store.partitions(), 16);
    assert_eq!(
        store.repartition(16).await.expect("the same count"),
        Repartition { from: 16, to: 16 },
        "asking for the count the table has changes nothing"
    );
    // The batch read under 64 partitions is refused: every partition is at a new epoch.
    for batch in &in_flight {
        let report = mark(&store, &batch.lease, &all_delivered(batch), now_ms()).await;
        assert_eq!(
            report.applied, 0,
            "a mark under the old count changes nothing"
        );
        assert_eq!(report.stale.len(), batch.events.len());
    }
    // The host that started under 64 refuses to go on at its next heartbeat.
    let beat = earlier
        .rebalance(&RebalanceParams {
            app_code: APP,
            host_id: "host-earlier",
            lease_ms: LONG_LEASE_MS,
            release: &[],
            leaving: false,
            careful_rows: 100,
            now_ms: now_ms(),
        })
        .await;
    match beat {
        Err(StoreError::PartitionsChanged { was, now, .. }) => assert_eq!((was, now), (64, 16)),
        other => panic!("a host started under 64 partitions must stop: {other:?}"),
    }
    // Host B owns the 16 partitions; every row is delivered once, each room from one partition.
    let (delivered, rooms) = deliver_all(&store, "host-b").await;
    let mut expected: Vec<String> = written.iter().map(|r| r.event_id.clone()).collect();
    expected.sort();
    assert_eq!(delivered, expected);
    assert_eq!(rooms.len(), 16);
    each_room_in_one_partition(&rooms);
    assert!(
        rooms.iter().filter(|set| !set.is_empty()).count() > 8,
        "40 rooms spread over the 16 partitions: {rooms:?}"
    );
}

/// Producers write throughout two changes (64 → 128 → 4): every row written is delivered once
/// afterwards, and each room's rows are in one partition.
async fn producers_keep_writing_while_the_count_changes(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    // Enough rows that building an index takes a while (~0.1 s) for the producer to write into.
    for chunk in rows("before", 500, 40, 1_000).chunks(2_000) {
        enqueue(&store, chunk).await;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(20_000));
    let producer = tokio::spawn({
        let (producer, stop, written) = (db.store_default().await, stop.clone(), written.clone());
        async move {
            let mut round = 0;
            while !stop.load(Ordering::Relaxed) {
                let batch = rows(&format!("during-{round:04}"), 50, 1, 10_000 + round * 100);
                // MariaDB may fail a transaction with a deadlock at the moment a column is added
                // or swapped: a producer retries it, as it retries any deadlock.
                match producer.enqueue(&batch).await {
                    Ok(n) => {
                        written.fetch_add(n, Ordering::Relaxed);
                        round += 1;
                    }
                    Err(e) if e.is_transient() => {}
                    Err(e) => panic!("enqueue: {e}"),
                }
            }
            round
        }
    });
    for partitions in [128, 4] {
        let change = store.repartition(partitions).await.expect("no host runs");
        assert_eq!(change.to, partitions);
    }
    stop.store(true, Ordering::Relaxed);
    let rounds = producer.await.expect("producer");
    assert!(rounds > 0, "the producer wrote during the changes");
    let (delivered, rooms) = deliver_all(&store, "host-a").await;
    assert_eq!(delivered.len() as u64, written.load(Ordering::Relaxed));
    assert_eq!(
        delivered.iter().collect::<BTreeSet<_>>().len(),
        delivered.len(),
        "each row once"
    );
    assert_eq!(rooms.len(), 4);
    each_room_in_one_partition(&rooms);
}

async fn one_partition_takes_no_other_count(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    assert_eq!(store.partitions(), 1);
    assert_eq!(
        store.repartition(1).await.expect("the count it has"),
        Repartition { from: 1, to: 1 }
    );
    let refused = store.repartition(16).await.expect_err("one partition");
    assert!(refused.to_string().contains("one partition"), "{refused}");
}
