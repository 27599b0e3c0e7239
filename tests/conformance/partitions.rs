//! Partition ownership: `rebalance` shares a tenant's partitions
//! among live hosts (fair shares, disjoint, taken over when a host's lease ends or it leaves),
//! `read_partitions` hands out due rows without writing them, and marks are fenced on the
//! partition's owner and epoch: a host that lost a partition changes nothing.
//!
//! Leases count on the database's clock (SQLite: the host's), so these tests pass the wall clock
//! and wait out short leases instead of shifting `now_ms`.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use outboxd::record::now_ms;
use outboxd::store::internals::{MarkAt, mark_statements};
use outboxd::store::{
    Backend, Careful, DEFAULT_TABLE, Lease, Mark, OutboxStore, Ownership, RejectedRow, TableName,
};

use outboxd::store::PartitionRead;

use crate::conformance::helpers::{
    APP, LONG_LEASE_MS, all_delivered, all_ids, deferred, delivered, enqueue, ids, mark, own_all,
    read, read_all, reading, rebalance, retryable, setup, status_of, strs,
};
use crate::support::{Bind, RawInsert, record, wait_until};

crate::support::per_backend!(
    one_host_takes_every_partition,
    two_hosts_share_the_partitions,
    hosts_joining_together_leave_no_partition_unowned,
    a_read_writes_nothing_and_each_row_is_read_once,
    a_host_that_lost_its_partition_changes_nothing,
    a_host_that_lost_its_partition_rejects_nothing,
    a_leaving_host_hands_its_partitions_on,
    per_room_reads_hold_back_a_room_behind_its_retry,
    leased_hosts_stop_partition_reads,
    live_partitions_are_those_holding_live_rows,
    one_read_takes_many_partitions_and_the_mark_fences_each_row,
    a_read_of_many_partitions_misses_no_row_while_another_changes,
    heartbeats_and_marks_of_many_partitions_do_not_wait_for_each_other,
    a_takeover_waits_for_a_mark_in_flight,
    a_partition_taken_from_a_dead_host_is_in_the_crash_guards_care,
);

/// The partition numbers of `ownership`.
fn numbers(ownership: &Ownership) -> BTreeSet<u32> {
    ownership.owned.iter().map(|f| f.partition).collect()
}

/// `host` takes every partition of `APP` once the lease of the host that owned them ended
/// (waits up to 10 s): its ownership.
async fn take_over(store: &Arc<dyn OutboxStore>, host: &str) -> Ownership {
    take_over_for(store, host, LONG_LEASE_MS).await
}

/// [`take_over`], `host` leasing them for `lease_ms`; the crash guard's state of every
/// partition taken by any of its heartbeats (a host's book keeps it from each).
async fn take_over_for(store: &Arc<dyn OutboxStore>, host: &str, lease_ms: i64) -> Ownership {
    let careful = std::sync::Mutex::new(Vec::new());
    let mut ownership: Ownership = wait_until(
        &format!("{host} takes every partition once the owner's lease ends"),
        Duration::from_secs(10),
        || async {
            let ownership = rebalance(store, APP, host, lease_ms, &[], false).await;
            careful
                .lock()
                .unwrap()
                .extend(ownership.careful.iter().cloned());
            if ownership.owned.len() as u32 == ownership.partitions {
                Ok(ownership)
            } else {
                Err(ownership.owned.len())
            }
        },
    )
    .await;
    ownership.careful = careful.into_inner().unwrap();
    ownership
}

async fn one_host_takes_every_partition(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let count = store.partitions();
    let ownership = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
    assert_eq!(ownership.partitions, count);
    assert_eq!((ownership.hosts, ownership.share), (1, count));
    assert_eq!(numbers(&ownership), (0..count).collect());
    assert!(
        ownership.owned.iter().all(|f| f.epoch == 1),
        "first owner: epoch 1"
    );
    assert!(!ownership.leased_hosts_active);
    let again = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
    assert_eq!(again.owned, ownership.owned, "a renewal keeps the epochs");
}

async fn two_hosts_share_the_partitions(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let count = store.partitions();
    let a = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
    assert_eq!(a.owned.len() as u32, count);
    // B joins: every partition is owned and live, so it takes none yet; A sees its share drop.
    let b = rebalance(&store, APP, "host-b", LONG_LEASE_MS, &[], false).await;
    assert!(b.owned.is_empty(), "live partitions are never stolen");
    assert_eq!((b.hosts, b.share), (2, count / 2));
    let a = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
    assert_eq!((a.hosts, a.share), (2, count - count / 2));
    // A gives up what it owns above its share; B takes it at its next heartbeat.
    let excess: Vec<u32> = numbers(&a)
        .into_iter()
        .rev()
        .take(a.owned.len() - a.share as usize)
        .collect();
    let a = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &excess, false).await;
    assert_eq!(a.owned.len() as u32, a.share);
    let b = rebalance(&store, APP, "host-b", LONG_LEASE_MS, &[], false).await;
    assert_eq!(b.owned.len() as u32, b.share);
    let (a_set, b_set) = (numbers(&a), numbers(&b));
    assert!(a_set.is_disjoint(&b_set), "no partition has two owners");
    assert_eq!(
        a_set.union(&b_set).copied().collect::<BTreeSet<u32>>(),
        (0..count).collect()
    );
    assert!(
        b.owned.iter().all(|f| f.epoch == 2),
        "taken from A: a new epoch"
    );
}

/// Hosts whose first heartbeats run at once read the same free partitions and race to take
/// them: a host that loses a race takes the next free one, so after one heartbeat each every
/// partition has exactly one owner (a partition left unowned is read by nobody until the next
/// heartbeat: a draining fleet would leave it behind). Eight tenants, three hosts each.
async fn hosts_joining_together_leave_no_partition_unowned(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let count = store.partitions();
    for tenant in 0..8 {
        let app = format!("join-{tenant}");
        let beats: Vec<_> = (0..3)
            .map(|host| {
                let (store, app) = (store.clone(), app.clone());
                tokio::spawn(async move {
                    let host = format!("host-{host}");
                    rebalance(&store, &app, &host, LONG_LEASE_MS, &[], false).await
                })
            })
            .collect();
        let mut owners = BTreeSet::new();
        let mut owned = 0;
        for beat in beats {
            let ownership = beat.await.expect("a heartbeat");
            owned += ownership.owned.len();
            owners.extend(numbers(&ownership));
        }
        assert_eq!(owned, owners.len(), "{app}: a partition with two owners");
        assert_eq!(
            owners,
            (0..count).collect(),
            "{app}: a partition left unowned"
        );
    }
}

async fn a_read_writes_nothing_and_each_row_is_read_once(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let records: Vec<_> = (0..40)
        .map(|i| {
            record(
                APP,
                &format!("e{i:02}"),
                &format!("room-{}", i % 13),
                100 + i,
            )
        })
        .collect();
    enqueue(&store, &records).await;
    let owner = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
    let now = now_ms();
    let batches = read_all(&store, "host-a", &owner, false, now).await;
    let expected: Vec<String> = (0..40).map(|i| format!("e{i:02}")).collect();
    assert_eq!(
        all_ids(&batches),
        expected,
        "every row in exactly one partition"
    );
    for batch in &batches {
        let created: Vec<i64> = batch.events.iter().map(|e| e.created_at_ms).collect();
        assert!(created.is_sorted(), "a partition's rows in write order");
        let rooms: BTreeSet<&str> = batch
            .events
            .iter()
            .map(|e| e.event.room_id.as_str())
            .collect();
        for room in rooms {
            assert!(
                batches
                    .iter()
                    .filter(|b| b.events.iter().any(|e| e.event.room_id == room))
                    .count()
                    == 1,
                "room {room} lives in one partition"
            );
        }
    }
    for id in &expected {
        let row = db.row(APP, id).await.unwrap();
        assert_eq!(
            (row.status.as_str(), row.worker_id),
            ("pending", None),
            "{id}: read, not written"
        );
    }
    for batch in &batches {
        let marks = all_delivered(batch);
        let report = mark(&store, &batch.lease, &marks, now + 1).await;
        assert_eq!(
            (report.applied, report.stale.len()),
            (marks.len() as u64, 0)
        );
    }
    for id in &expected {
        let row = db.row(APP, id).await.unwrap();
        assert_eq!(
            (row.status.as_str(), row.worker_id.as_deref()),
            ("delivered", None),
            "{id}: one write; a delivered row names no host"
        );
    }
    assert!(
        read_all(&store, "host-a", &owner, false, now_ms())
            .await
            .is_empty()
    );
}

async fn a_host_that_lost_its_partition_changes_nothing(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r1", 100), record(APP, "e2", "r1", 200)],
    )
    .await;
    let a = rebalance(&store, APP, "host-a", 300, &[], false).await;
    let now = now_ms();
    let stale = read_all(&store, "host-a", &a, false, now).await;
    assert_eq!(all_ids(&stale), strs(&["e1", "e2"]));
    // A stops renewing (paused, cut off); once its lease ends, B takes its partitions over.
    let b = take_over(&store, "host-b").await;
    assert_eq!(b.hosts, 1, "A's host row expired too");
    // A comes back and marks what it published: refused, the rows untouched.
    for batch in &stale {
        let marks = all_delivered(batch);
        let report = mark(&store, &batch.lease, &marks, now_ms()).await;
        assert_eq!(report.applied, 0, "a lost partition's mark changes nothing");
        assert_eq!(report.stale.len(), marks.len());
    }
    for id in ["e1", "e2"] {
        assert_eq!(db.row(APP, id).await.unwrap().status, "pending", "{id}");
    }
    // A's next heartbeat learns it owns nothing.
    let a = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
    assert!(
        a.owned.is_empty(),
        "B's partitions are live: A gets none back"
    );
    let batches = read_all(&store, "host-b", &b, false, now_ms()).await;
    assert_eq!(
        all_ids(&batches),
        strs(&["e1", "e2"]),
        "the new owner reads them again"
    );
    for batch in &batches {
        let marks = all_delivered(batch);
        assert_eq!(
            mark(&store, &batch.lease, &marks, now_ms()).await.applied,
            marks.len() as u64
        );
    }
}

/// A row whose envelope does not decode is put in `failed` by the read that finds it, fenced
/// as a mark is: a host that lost the partition (its read still sees the row: reads write
/// nothing and check no ownership) changes nothing and reports no rejection; the new owner
/// rejects it.
async fn a_host_that_lost_its_partition_rejects_nothing(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(APP, "e1", "r1", 100)]).await;
    db.insert_raw(
        DEFAULT_TABLE,
        &[RawInsert::pending(APP, "bad", "r1", 150).with_envelope(vec![0xff, 0xff, 0xff])],
    )
    .await;
    let a = rebalance(&store, APP, "host-a", 300, &[], false).await;
    let b = take_over(&store, "host-b").await;
    // A, paused meanwhile, reads with the fences it had.
    let stale = read_all(&store, "host-a", &a, false, now_ms()).await;
    assert_eq!(
        all_ids(&stale),
        strs(&["e1"]),
        "the read itself sees the rows"
    );
    assert!(
        stale.iter().all(|batch| batch.rejected.is_empty()),
        "a lost partition's rejection is refused and not reported"
    );
    assert_eq!(db.row(APP, "bad").await.unwrap().status, "pending");
    // The owner rejects it.
    let batches = read_all(&store, "host-b", &b, false, now_ms()).await;
    let rejected: Vec<&str> = batches
        .iter()
        .flat_map(|batch| batch.rejected.iter().map(|r| r.event_id.as_str()))
        .collect();
    assert_eq!(rejected, ["bad"]);
    let row = db.row(APP, "bad").await.unwrap();
    assert_eq!(row.status, "failed");
    assert!(
        row.last_error
            .unwrap_or_default()
            .starts_with("envelope does not decode"),
        "the reason is kept"
    );
}

async fn a_leaving_host_hands_its_partitions_on(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let a = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
    assert_eq!(a.owned.len() as u32, a.partitions);
    let left = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], true).await;
    assert!(left.owned.is_empty());
    let b = rebalance(&store, APP, "host-b", LONG_LEASE_MS, &[], false).await;
    assert_eq!(
        (b.hosts, b.owned.len() as u32),
        (1, b.partitions),
        "at once, no lease to wait out"
    );
}

async fn per_room_reads_hold_back_a_room_behind_its_retry(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[
            record(APP, "e1", "r1", 100),
            record(APP, "e2", "r1", 200),
            record(APP, "e3", "r2", 300),
        ],
    )
    .await;
    let owner = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
    let now = now_ms();
    let batches = read_all(&store, "host-a", &owner, true, now).await;
    assert_eq!(
        all_ids(&batches),
        strs(&["e1", "e2", "e3"]),
        "a room's events in one batch"
    );
    let retry_at = now + 60_000;
    for batch in &batches {
        let marks: Vec<_> = batch
            .events
            .iter()
            .map(|e| match e.event.event_id.as_str() {
                "e3" => delivered("e3"),
                "e1" => retryable("e1", retry_at, "down"),
                // Put back behind e1 and due at once: still waits for e1.
                id => deferred(id, now, "behind e1"),
            })
            .collect();
        mark(&store, &batch.lease, &marks, now).await;
    }
    enqueue(
        &store,
        &[record(APP, "e4", "r1", 400), record(APP, "e5", "r2", 500)],
    )
    .await;
    let batches = read_all(&store, "host-a", &owner, true, now + 1).await;
    assert_eq!(
        all_ids(&batches),
        strs(&["e5"]),
        "r1 waits behind its retry; r2 goes on"
    );
    let batches = read_all(&store, "host-a", &owner, true, retry_at).await;
    let r1: Vec<String> = batches
        .iter()
        .flat_map(|b| b.events.iter())
        .filter(|e| e.event.room_id == "r1")
        .map(|e| e.event.event_id.clone())
        .collect();
    assert_eq!(
        r1,
        strs(&["e1", "e2"]),
        "due retries in order; e4 waits until they are marked"
    );
}

async fn leased_hosts_stop_partition_reads(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(
        &store,
        &[record(APP, "e1", "r1", 100), record(APP, "e2", "r2", 200)],
    )
    .await;
    // Rows a host of the leased design leased (on its own clock) until `lock_until_ms`.
    let leased = |id: &str, lock_until_ms: i64| RawInsert {
        worker_id: Some("old-host/0".into()),
        lock_until_ms: Some(lock_until_ms),
        ..RawInsert::pending(APP, id, "r1", 50).with_status("delivering")
    };
    db.insert_raw(DEFAULT_TABLE, &[leased("ended", 1_100)])
        .await;
    let before = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
    assert!(!before.leased_hosts_active, "an ended lease is nobody's");
    db.insert_raw(DEFAULT_TABLE, &[leased("live", now_ms() + 30_000)])
        .await;
    let after = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
    assert!(after.leased_hosts_active, "a live lease is seen");
}

async fn live_partitions_are_those_holding_live_rows(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let records: Vec<_> = (0..30)
        .map(|i| {
            record(
                APP,
                &format!("e{i:02}"),
                &format!("room-{}", i % 7),
                100 + i,
            )
        })
        .collect();
    enqueue(&store, &records).await;
    let owner = rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
    let batches = read_all(&store, "host-a", &owner, false, now_ms()).await;
    let holding: BTreeSet<u32> = batches
        .iter()
        .flat_map(|b| b.lease.partitions.iter().map(|p| p.fence.partition))
        .collect();
    let live = store.live_partitions(APP).await.expect("live partitions");
    // `None`: one partition (the store reads it instead of asking).
    if let Some(live) = live {
        assert_eq!(live.into_iter().collect::<BTreeSet<u32>>(), holding);
    }
    for batch in &batches {
        let marks = all_delivered(batch);
        mark(&store, &batch.lease, &marks, now_ms()).await;
    }
    let live = store.live_partitions(APP).await.expect("live partitions");
    assert!(
        live.is_none_or(|l| l.is_empty()),
        "delivered rows are not live"
    );
}

/// One read of every owned partition is one batch: the first `limit` rows of them all by write
/// order, each partition's span in the lease, the partitions flagged `full` when the read was
/// cut. Its mark is fenced row by row: once another host took one of the partitions over, the
/// mark changes the rows of the others and reports that one's stale (SQLite: one partition,
/// taken over whole).
async fn one_read_takes_many_partitions_and_the_mark_fences_each_row(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let records: Vec<_> = (0..60)
        .flat_map(|room| {
            (0..2).map(move |n| {
                record(
                    APP,
                    &format!("e{room:02}-{n}"),
                    &format!("room-{room:02}"),
                    1_000 + n * 100 + room,
                )
            })
        })
        .collect();
    enqueue(&store, &records).await;
    let a = own_all(&store, APP, "host-a").await;
    let every = PartitionRead {
        fences: a.owned.clone(),
        ..reading(APP, "host-a", now_ms())
    };

    let mut expected: Vec<(i64, String)> = records
        .iter()
        .map(|r| (r.created_at_ms, r.event_id.clone()))
        .collect();
    expected.sort();
    let expected: Vec<String> = expected.into_iter().map(|(_, id)| id).collect();

    // Ten rows: the first ten of them all by write order; the read was cut, so every partition
    // it took rows of may hold more.
    let ten = read(
        &store,
        &PartitionRead {
            limit: 10,
            ..every.clone()
        },
    )
    .await;
    assert_eq!(ids(&ten), expected[..10]);
    assert!(ten.lease.partitions.iter().all(|p| p.full));

    // Enough for all: every row, in write order, each partition's span around its rows.
    let batch = read(
        &store,
        &PartitionRead {
            limit: 1_000,
            ..every.clone()
        },
    )
    .await;
    assert_eq!(ids(&batch), expected, "all rows, merged by write order");
    let spans = &batch.lease.partitions;
    assert!(spans.iter().all(|p| !p.full), "{spans:?}");
    let first = spans.iter().map(|p| p.first_created_ms).min();
    let last = spans.iter().map(|p| p.last_created_ms).max();
    assert_eq!((first, last), (Some(1_000), Some(1_159)));
    if let Some(live) = store.live_partitions(APP).await.expect("live partitions") {
        let read_from: BTreeSet<u32> = spans.iter().map(|p| p.fence.partition).collect();
        assert_eq!(
            read_from,
            live.into_iter().collect(),
            "one span a partition"
        );
    }

    // A gives one partition up and B takes it: A's mark changes the other partitions' rows only.
    // (Where A owns the tenant's one partition, A leaves: B's share of one among two is none.)
    let lost = spans[0].fence.partition;
    let leaves = a.owned.len() == 1;
    rebalance(&store, APP, "host-a", LONG_LEASE_MS, &[lost], leaves).await;
    let b = rebalance(&store, APP, "host-b", LONG_LEASE_MS, &[], false).await;
    assert_eq!(numbers(&b), BTreeSet::from([lost]), "B takes the free one");
    let by_b = PartitionRead {
        fences: b.owned.clone(),
        limit: 1_000,
        ..reading(APP, "host-b", now_ms())
    };
    let mut lost_ids = ids(&read(&store, &by_b).await);
    lost_ids.sort();
    assert!(!lost_ids.is_empty());
    let marks = all_delivered(&batch);
    let report = mark(&store, &batch.lease, &marks, now_ms()).await;
    let mut stale = report.stale.clone();
    stale.sort();
    assert_eq!(stale, lost_ids, "the lost partition's rows are stale");
    assert_eq!(report.applied as usize, records.len() - lost_ids.len());
    for id in &expected {
        let status = db.row(APP, id).await.unwrap().status;
        let want = if lost_ids.contains(id) {
            "pending"
        } else {
            "delivered"
        };
        assert_eq!(status, want, "{id}");
    }
}

/// A read of every partition returns every due row while rows of one partition change beside it
/// (two rows of room `r` flipped between `pending` and `delivered`, 300 times). On MariaDB 10.11
/// an `ORDER BY … LIMIT` over several ranges of the index on the virtual partition column now and
/// then ended the scan at the changing partition, and the rows of the partitions after it were
/// missing from the read.
async fn a_read_of_many_partitions_misses_no_row_while_another_changes(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    let steady: Vec<_> = (0..64)
        .map(|room| {
            record(
                APP,
                &format!("s{room:02}"),
                &format!("room{room}"),
                10_000 + room,
            )
        })
        .collect();
    enqueue(&store, &steady).await;
    enqueue(
        &store,
        &[record(APP, "fa", "r", 100), record(APP, "fb", "r", 200)],
    )
    .await;
    let owned = own_all(&store, APP, "host-a").await;
    let every = PartitionRead {
        fences: owned.owned.clone(),
        ..reading(APP, "host-a", now_ms())
    };
    let flipping = async {
        for _ in 0..300 {
            db.execute(
                "UPDATE room_outbox SET status = CASE status WHEN 'pending' THEN 'delivered' \
                 ELSE 'pending' END WHERE event_id IN ('fa', 'fb')",
                &[],
            )
            .await;
        }
    };
    let reading_all = async {
        let mut short = Vec::new();
        for i in 0..300 {
            let read = ids(&read(&store, &every).await);
            let missing: Vec<&str> = steady
                .iter()
                .map(|r| r.event_id.as_str())
                .filter(|id| !read.iter().any(|r| r == id))
                .collect();
            if !missing.is_empty() {
                short.push(format!("read {i}: {missing:?}"));
            }
        }
        short
    };
    let ((), short) = futures::join!(flipping, reading_all);
    assert!(short.is_empty(), "reads missing rows: {short:#?}");
}

/// A heartbeat (renewing every lease of its host in one statement) and a mark of many partitions
/// at once go on side by side for 3 s: each takes milliseconds, none waits a second. On
/// PostgreSQL the renewal and a mark's fence once locked the same partition rows in different
/// orders and deadlocked, which the database breaks only after `deadlock_timeout` (1 s).
async fn heartbeats_and_marks_of_many_partitions_do_not_wait_for_each_other(backend: Backend) {
    let Some((_db, store)) = setup(backend).await else {
        return;
    };
    let records: Vec<_> = (0..400)
        .map(|n| record(APP, &format!("e{n:03}"), &format!("room-{n:03}"), 1_000 + n))
        .collect();
    enqueue(&store, &records).await;
    let a = own_all(&store, APP, "host-a").await;
    let batch = read(
        &store,
        &PartitionRead {
            fences: a.owned.clone(),
            limit: 1_000,
            ..reading(APP, "host-a", now_ms())
        },
    )
    .await;
    assert_eq!(batch.events.len(), records.len());
    // Every row, spread over every partition, deferred (still due, so the next round marks
    // them again).
    let marks: Vec<Mark> = batch
        .events
        .iter()
        .map(|e| deferred(&e.event.event_id, 1, "again"))
        .collect();
    let until = Instant::now() + Duration::from_secs(3);
    let (marked, beats) = tokio::join!(
        mark_until(&store, &batch.lease, &marks, until),
        heartbeat_until(&store, &a, until),
    );
    for (what, (slowest, rounds)) in [("mark", marked), ("heartbeat", beats)] {
        assert!(rounds > 0, "no {what} ran");
        assert!(
            slowest < Duration::from_millis(900),
            "a {what} took {slowest:?} (of {rounds}): it waited for the other side"
        );
    }
}

/// A mark in flight (its transaction open, the fence read) holds off a host taking the partition
/// over until it commits: the mark lands at the epoch it read, and the new owner reads after it.
/// (A takeover that did not wait would let the old owner's mark land after the new epoch.)
async fn a_takeover_waits_for_a_mark_in_flight(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(APP, "e1", "room-1", 1_000)]).await;
    let lease_ms = 300;
    let a = rebalance(&store, APP, "host-a", lease_ms, &[], false).await;
    let batch = read(
        &store,
        &PartitionRead {
            fences: a.owned.clone(),
            ..reading(APP, "host-a", now_ms())
        },
    )
    .await;
    assert_eq!(ids(&batch), ["e1"]);
    // Host A stalls past its lease, then marks: the mark's statement, run as the store runs it,
    // in a transaction held open for a while.
    tokio::time::sleep(Duration::from_millis(lease_ms as u64 + 200)).await;
    let table = TableName::new(DEFAULT_TABLE).expect("table name");
    let marks = [delivered("e1")];
    let (_, statement) = mark_statements(
        backend,
        &table,
        &batch.lease,
        &marks,
        MarkAt::first(now_ms()),
    )
    .into_iter()
    .next()
    .expect("a mark statement");
    let binds: Vec<Bind> = statement.args.iter().map(Bind::from_arg).collect();
    let hold = Duration::from_millis(600);
    let (ran, has_run) = tokio::sync::oneshot::channel();
    let marking = db.run_holding(&statement.sql, &binds, ran, hold);
    let taking_over = async {
        has_run.await.expect("the mark ran");
        let started = Instant::now();
        let b = take_over(&store, "host-b").await;
        (b, started.elapsed())
    };
    let (marked, (b, waited)) = tokio::join!(marking, taking_over);
    assert_eq!(marked, 1, "the mark matched at the epoch it read");
    assert!(
        waited >= hold.mul_f64(0.7),
        "the takeover took {waited:?}: it did not wait for the mark in flight ({hold:?})"
    );
    let epochs: Vec<i64> = b.owned.iter().map(|f| f.epoch).collect();
    assert!(
        a.owned
            .iter()
            .zip(&epochs)
            .all(|(old, new)| *new == old.epoch + 1),
        "a new epoch: {epochs:?}"
    );
    assert_eq!(status_of(&db, APP, "e1").await, "delivered");
    let after = read_all(&store, "host-b", &b, false, now_ms()).await;
    assert!(
        all_ids(&after).is_empty(),
        "the new owner reads after the mark"
    );
}

/// Marks `marks` under `lease` every few milliseconds until `until`, each applying to every row:
/// the slowest mark and how many ran.
async fn mark_until(
    store: &Arc<dyn OutboxStore>,
    lease: &Lease,
    marks: &[Mark],
    until: Instant,
) -> (Duration, u32) {
    let (mut slowest, mut rounds) = (Duration::ZERO, 0);
    while Instant::now() < until {
        let started = Instant::now();
        let report = mark(store, lease, marks, now_ms()).await;
        slowest = slowest.max(started.elapsed());
        assert_eq!(report.applied as usize, marks.len(), "{:?}", report.stale);
        rounds += 1;
        // A host reads between two marks; SQLite's writers take turns at one lock, and marks
        // back to back would starve the heartbeat there.
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    (slowest, rounds)
}

/// Heartbeats of `host-a`, which keeps `owned`'s partitions, every few milliseconds until
/// `until`: the slowest and how many ran.
async fn heartbeat_until(
    store: &Arc<dyn OutboxStore>,
    owned: &Ownership,
    until: Instant,
) -> (Duration, u32) {
    let (mut slowest, mut rounds) = (Duration::ZERO, 0);
    while Instant::now() < until {
        let started = Instant::now();
        let ownership = rebalance(store, APP, "host-a", LONG_LEASE_MS, &[], false).await;
        slowest = slowest.max(started.elapsed());
        assert_eq!(ownership.owned, owned.owned, "host-a keeps its partitions");
        rounds += 1;
        // Beats far more often than a host's (every third of a lease), but not back to back.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    (slowest, rounds)
}

/// The crash guard's state: a partition taken over from a host whose lease ran out comes in its
/// care (a window of the taker's batch size, batches of half of it), halved at each such
/// takeover within the window, the suspect kept; a partition released, or taken the first time,
/// does not. Its writes are fenced on the epoch, as the rejection of a suspect is.
async fn a_partition_taken_from_a_dead_host_is_in_the_crash_guards_care(backend: Backend) {
    let Some((db, store)) = setup(backend).await else {
        return;
    };
    enqueue(&store, &[record(APP, "e1", "r1", 100)]).await;
    let a = rebalance(&store, APP, "host-a", 300, &[], false).await;
    assert!(a.careful.is_empty(), "partitions taken free: {a:?}");
    // A dies; B takes its partitions over once A's lease ends: every one in the guard's care.
    let b = take_over_for(&store, "host-b", 300).await;
    let window = Careful {
        size: 50,
        left: 100,
        suspect: None,
    };
    assert_eq!(b.careful.len(), b.owned.len(), "{b:?}");
    assert!(b.careful.iter().all(|(_, c)| *c == window), "{b:?}");
    // B reads the first row alone and announces it; A, whose lease is over, can write nothing.
    let fence = b.owned[0];
    let suspect = Careful {
        size: 1,
        left: 100,
        suspect: Some("e1".into()),
    };
    let set = |host: &'static str, careful: Careful| {
        let store = store.clone();
        async move {
            store
                .set_careful((APP, host), &fence, &careful)
                .await
                .unwrap_or_else(|e| panic!("set_careful by {host}: {e}"))
        }
    };
    assert!(set("host-b", suspect.clone()).await);
    // On another partition B announces a batch of 50.
    let other_fence = b.owned.get(1).copied();
    if let Some(other) = other_fence {
        let batch = Careful {
            suspect: Some("e9".into()),
            ..window.clone()
        };
        assert!(
            store
                .set_careful((APP, "host-b"), &other, &batch)
                .await
                .unwrap()
        );
    }
    let stale_fence = a.owned[0];
    assert!(
        !store
            .set_careful(("app_a", "host-a"), &stale_fence, &window)
            .await
            .unwrap(),
        "a host that lost the partition writes nothing"
    );
    // B dies publishing them: C takes over with B's one-row batch suspect, the batch of 50
    // halved, and the partitions B had no batch in flight in as they were.
    let c = take_over_for(&store, "host-c", LONG_LEASE_MS).await;
    let careful_of = |ownership: &Ownership, partition: u32| {
        ownership
            .careful
            .iter()
            .find(|(p, _)| *p == partition)
            .map(|(_, c)| c.clone())
    };
    assert_eq!(careful_of(&c, fence.partition), Some(suspect.clone()));
    if let Some(other) = other_fence {
        let halved = Careful {
            size: 25,
            ..window.clone()
        };
        assert_eq!(careful_of(&c, other.partition), Some(halved));
    }
    if let Some(third) = c.owned.get(2) {
        assert_eq!(careful_of(&c, third.partition), Some(window.clone()));
    }
    // C fails the suspect; B, gone, cannot.
    let row = RejectedRow {
        event_id: "e1".into(),
        event_type: "gift".into(),
        room_id: "r1".into(),
        reason: "killed its host".into(),
    };
    let by_b = store
        .reject(
            ("app_a", "host-b"),
            &fence,
            now_ms(),
            std::slice::from_ref(&row),
        )
        .await
        .unwrap();
    assert_eq!(by_b, 0, "a host that lost the partition fails nothing");
    assert_eq!(db.row(APP, "e1").await.unwrap().status, "pending");
    let c_fence = c.owned[0];
    let by_c = store
        .reject(
            (APP, "host-c"),
            &c_fence,
            now_ms(),
            std::slice::from_ref(&row),
        )
        .await
        .unwrap();
    assert_eq!(by_c, 1);
    let failed = db.row(APP, "e1").await.unwrap();
    assert_eq!(failed.status, "failed");
    assert_eq!(failed.last_error.as_deref(), Some("killed its host"));
    // Out of care, C releases it: the next owner takes it free, out of care.
    assert!(
        store
            .set_careful((APP, "host-c"), &c_fence, &Careful::default())
            .await
            .unwrap()
    );
    let c = rebalance(&store, APP, "host-c", LONG_LEASE_MS, &[], true).await;
    assert!(c.owned.is_empty());
    let d = rebalance(&store, APP, "host-d", LONG_LEASE_MS, &[], false).await;
    assert_eq!(d.owned.len() as u32, d.partitions);
    assert_eq!(
        careful_of(&d, fence.partition),
        None,
        "released out of care: taken free"
    );
    if let Some(other) = other_fence {
        assert_eq!(
            careful_of(&d, other.partition),
            Some(Careful { size: 25, ..window }),
            "released in care: the care goes on"
        );
    }
}
