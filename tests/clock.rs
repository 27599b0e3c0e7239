//! Clocks that disagree, on the servers (SQLite has no clock apart from the host's). Partition
//! leases count on the database's clock, but a host reads with its own: a host whose clock runs
//! a lease ahead would read the `delivering` rows of a host of an earlier version as expired
//! leases (publishing them a second time) and retries before they are due. It measures its
//! clock against the database's and reads nothing while they disagree by more than a tenth of
//! the lease; within that it reads as usual.

use crate::support;

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
use support::{Backend, TestDb, record};

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

/// Rows of the test: two events in each of five rooms.
const ROWS: u64 = 10;

/// A host `shift_ms` ahead runs one round over [`ROWS`] pending rows (and one row an earlier
/// version's host holds `delivering` under a lease that ends 20 s from now, by the host's clock);
/// returns what its round did, the publisher, its metrics and the database.
async fn round_of_a_host_ahead(
    backend: Backend,
    shift_ms: i64,
) -> Option<(BatchStats, Arc<Slow>, Metrics, TestDb)> {
    let db = TestDb::new_server_only(backend).await?;
    let store = db.store_default().await;
    let base = now_ms() - 60_000;
    let rows: Vec<_> = (0..ROWS as i64)
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
        delay: Duration::from_millis(10),
        delivered: Mutex::default(),
        in_flight: Mutex::default(),
        second_in_flight: Mutex::default(),
    });
    let metrics = Metrics::new();
    let ahead = Worker::new(store.clone(), publisher.clone(), options("ahead"))
        .with_clock(Arc::new(move || now_ms() + shift_ms))
        .with_metrics(metrics.clone());
    let mut stats = BatchStats::default();
    // Rounds until nothing more is read (a per-room batch of two events a room is one read).
    for _ in 0..5 {
        let round = ahead.process_batch("ahead/0", "app").await.unwrap();
        let read = round.claimed;
        stats.claimed += round.claimed;
        stats.delivered += round.delivered;
        if read == 0 {
            break;
        }
    }
    Some((stats, publisher, metrics, db))
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

async fn a_host_a_lease_ahead_reads_nothing(backend: Backend) {
    // 40 s ahead: past a 30 s lease.
    let Some((ahead, publisher, metrics, db)) = round_of_a_host_ahead(backend, 40_000).await else {
        return;
    };
    assert_eq!(ahead.claimed, 0, "the host whose clock is off read");
    assert!(publisher.delivered.lock().unwrap().is_empty());
    let text = metrics.encode();
    assert!(
        metric(&text, "outboxd_clock_claims_refused") >= 1.0,
        "reads refused:\n{text}"
    );
    let offset = metric(&text, "outboxd_clock_offset_seconds");
    assert!((-41.0..-39.0).contains(&offset), "offset {offset}");
    db.cleanup().await;
}

async fn a_host_within_a_tenth_of_the_lease_reads(backend: Backend) {
    // 1 s ahead, the bound is 3 s: it reads and delivers every row, each once, one event of a
    // room at a time.
    let Some((ahead, publisher, metrics, db)) = round_of_a_host_ahead(backend, 1_000).await else {
        return;
    };
    assert_eq!(
        (ahead.claimed, ahead.delivered),
        (ROWS, ROWS),
        "the host 1 s ahead reads and delivers"
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
    db.cleanup().await;
}

support::per_backend!([mysql, postgres] => a_host_a_lease_ahead_reads_nothing, a_host_within_a_tenth_of_the_lease_reads);
