//! Leases against clocks that disagree, on the servers (SQLite has no clock apart from the
//! host's): a host whose clock runs a lease ahead would take the live leases of the others as
//! expired, publishing their events a second time and, with per-room ordering, putting a second
//! event of a room in flight. It measures its clock against the database's and claims nothing
//! while they disagree by more than a tenth of the lease; within that it claims as usual.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use outboxd::metrics::Metrics;
use outboxd::publish::{Event, Outcome, Publisher};
use outboxd::record::now_ms;
use outboxd::retry::{RetryPolicy, Strategy};
use outboxd::store::DeliveryOrder;
use outboxd::worker::{BatchStats, Worker, WorkerOptions};
use support::{Backend, TestDb, record, wait_until};

/// Delivers after `delay`, counting deliveries per event and noting a room with two events in
/// flight at once.
struct Slow {
    delay: Duration,
    delivered: Mutex<HashMap<String, usize>>,
    in_flight: Mutex<HashSet<String>>,
    second_in_flight: Mutex<Vec<String>>,
}

#[async_trait]
impl Publisher for Slow {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        for event in batch {
            if !self.in_flight.lock().unwrap().insert(event.room_id.clone()) {
                self.second_in_flight
                    .lock()
                    .unwrap()
                    .push(event.room_id.clone());
            }
        }
        // The sink's configured delay (part of the test: the batch stays live meanwhile).
        tokio::time::sleep(self.delay).await;
        let mut delivered = self.delivered.lock().unwrap();
        let mut in_flight = self.in_flight.lock().unwrap();
        for event in batch {
            *delivered.entry(event.event_id.clone()).or_default() += 1;
            in_flight.remove(&event.room_id);
        }
        vec![Outcome::Delivered; batch.len()]
    }
}

fn options(node_id: &str) -> WorkerOptions {
    WorkerOptions {
        app_codes: vec!["app".into()],
        batch_size: 100,
        poll_interval: Duration::from_millis(10),
        idle_probe: Duration::from_millis(10),
        lease: Duration::from_secs(30),
        publish_timeout: Duration::from_secs(10),
        retry: RetryPolicy {
            strategy: Strategy::FixedInterval {
                interval: Duration::from_millis(1),
            },
            max_attempts: 5,
        },
        ordering: DeliveryOrder::PerRoom,
        concurrency: 1,
        node_id: node_id.into(),
    }
}

/// Rooms with a pending head that the honest host does not hold: their rows are committed
/// after its claim, so only the host ahead can claim them (their heads, one per room).
const FREE_ROOMS: u64 = 3;

/// A host `shift_ms` ahead claims while an honest host publishes the heads of five rooms (its
/// 30 s leases live), and [`FREE_ROOMS`] more rooms, committed after the honest host's claim, have
/// two events each that no one holds; returns what the host ahead's batch did, the publisher, and
/// its metrics.
async fn claim_beside_a_live_batch(
    backend: Backend,
    shift_ms: i64,
) -> Option<(BatchStats, Arc<Slow>, Metrics)> {
    let db = TestDb::new_server_only(backend).await?;
    let store = db.store_default().await;
    let base = now_ms() - 60_000;
    let rows: Vec<_> = (0..20)
        .map(|i| {
            record(
                "app",
                &format!("e{i:02}"),
                &format!("room-{}", i % 5),
                base + i,
            )
        })
        .collect();
    store.enqueue(&rows).await.unwrap();
    let publisher = Arc::new(Slow {
        delay: Duration::from_millis(1500),
        delivered: Mutex::default(),
        in_flight: Mutex::default(),
        second_in_flight: Mutex::default(),
    });
    let honest = Worker::new(store.clone(), publisher.clone(), options("honest"));
    let metrics = Metrics::new();
    let ahead = Worker::new(store.clone(), publisher.clone(), options("ahead"))
        .with_clock(Arc::new(move || now_ms() + shift_ms))
        .with_metrics(metrics.clone());
    let live = tokio::spawn(async move { honest.process_batch("honest/0", "app").await });
    // Wait until the honest host's claim is committed (its five rows are delivering).
    wait_until(
        "the honest host's live batch",
        Duration::from_secs(10),
        || async {
            let c = support::status_counts(&store).await;
            if c.delivering == 5 { Ok(()) } else { Err(c) }
        },
    )
    .await;
    // Rows the honest host does not hold: two events in each of the free rooms.
    let free: Vec<_> = (0..2 * FREE_ROOMS as i64)
        .map(|i| {
            record(
                "app",
                &format!("f{i:02}"),
                &format!("free-{}", i % FREE_ROOMS as i64),
                base + 100 + i,
            )
        })
        .collect();
    store.enqueue(&free).await.unwrap();
    let ahead = ahead.process_batch("ahead/0", "app").await.unwrap();
    let live = live.await.unwrap().unwrap();
    assert_eq!(
        (live.delivered, live.stale),
        (5, 0),
        "the honest host's live batch: delivered, and its leases not taken over"
    );
    Some((ahead, publisher, metrics))
}

/// The value of the unlabelled metric `name` in `text` (its whole line, `name value`).
fn metric(text: &str, name: &str) -> f64 {
    let lines: Vec<_> = text
        .lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix(' '))
        .collect();
    assert_eq!(lines.len(), 1, "one line of {name}:\n{text}");
    lines[0]
        .parse()
        .unwrap_or_else(|e| panic!("{name} {}: {e}", lines[0]))
}

/// The events the publisher delivered more than once.
fn delivered_twice(publisher: &Slow) -> Vec<String> {
    publisher
        .delivered
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(id, _)| id.clone())
        .collect()
}

/// No event delivered twice and no room with a second event in flight, whatever the clocks.
fn assert_each_delivered_once_alone(publisher: &Slow) {
    let twice = delivered_twice(publisher);
    assert!(twice.is_empty(), "delivered twice: {twice:?}");
    assert!(
        publisher.second_in_flight.lock().unwrap().is_empty(),
        "a second event of a room in flight"
    );
}

async fn a_host_a_lease_ahead_takes_no_live_lease(backend: Backend) {
    // 40 s ahead: past the honest host's 30 s leases.
    let Some((ahead, publisher, metrics)) = claim_beside_a_live_batch(backend, 40_000).await else {
        return;
    };
    // Not even the free rooms' heads: it claims nothing at all while its clock is off.
    assert_eq!(ahead.claimed, 0, "the host whose clock is off claimed");
    assert_each_delivered_once_alone(&publisher);
    let text = metrics.encode();
    assert_eq!(
        metric(&text, "outboxd_clock_claims_refused"),
        1.0,
        "claims refused"
    );
    let offset = metric(&text, "outboxd_clock_offset_seconds");
    assert!((-41.0..-39.0).contains(&offset), "offset {offset}");
}

async fn a_host_within_a_tenth_of_the_lease_claims(backend: Backend) {
    // 1 s ahead, the bound is 3 s: it claims, and the live leases are not expired by its clock.
    let Some((ahead, publisher, metrics)) = claim_beside_a_live_batch(backend, 1_000).await else {
        return;
    };
    // The head of each free room, nothing of the five rooms whose heads are in flight (taking
    // their live leases would claim 5 more) and no second event of a free room.
    assert_eq!(
        (ahead.claimed, ahead.delivered),
        (FREE_ROOMS, FREE_ROOMS),
        "the host 1 s ahead claims and delivers the free rooms' heads"
    );
    let mut delivered: Vec<_> = publisher
        .delivered
        .lock()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    delivered.sort();
    assert_eq!(
        delivered,
        ["e00", "e01", "e02", "e03", "e04", "f00", "f01", "f02"],
        "the honest host's five heads and the free rooms' heads"
    );
    assert_each_delivered_once_alone(&publisher);
    let text = metrics.encode();
    assert_eq!(
        metric(&text, "outboxd_clock_claims_refused"),
        0.0,
        "a small offset is no reason to refuse"
    );
    // Measured (not the gauge's initial 0): about the second it runs ahead.
    let offset = metric(&text, "outboxd_clock_offset_seconds");
    assert!((-1.5..-0.5).contains(&offset), "offset {offset}");
}

support::per_backend!([mysql, postgres] => a_host_a_lease_ahead_takes_no_live_lease, a_host_within_a_tenth_of_the_lease_claims);
