//! `outboxd-bench --rate N --seconds S`: commit → delivered latency with the configured worker.
//!
//! Producers on connections of their own (a separate pool, like services writing the outbox)
//! commit one row per transaction at `N` rows/s for `S` seconds; the worker runs with the loaded
//! configuration (batch size, poll interval, concurrency: the defaults unless a config file says
//! otherwise) and the commit feed of the database ([`outboxd::wake`]), as `outboxd run` does. An
//! event's latency is from the moment its producer's `COMMIT` returned to the moment the mark
//! that set it `delivered` returned, both read from the same monotonic clock in this process.
//! Producers do not wake the worker themselves: the database's feed (or adaptive probing) must.
//!
//! The rows of the first second ([`WARM_UP`]) are delivered but not counted when the run is
//! longer than that: they measure the step from idle to busy (without a commit feed, an idle
//! worker probes only every `worker.idle_probe`), not the steady rate asked for. Two patterns
//! count every row instead: `--every D` (one row every `D`, a quiet room) and `--quiet-first D`
//! (the worker idles `D` before the producers start: a burst after a quiet spell).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use async_trait::async_trait;
use tokio_util::sync::CancellationToken;

use crate::args::BenchArgs;
use crate::harness::Harness;
use crate::trace::{ClaimSpan, RowWait, SlowRows, caught_up};
use outboxd::publish::Publisher;
use outboxd::record::Record;
use outboxd::store::{
    Backend, ClaimBatch, CountsParams, Disposition, FailedRow, ListFailedParams, MarkParams,
    MarkReport, OutboxStore, Ownership, PartitionRead, PurgeParams, RebalanceParams, Repartition,
    RequeueParams, StatusCounts, StoreError, TableName,
};
use outboxd::wake::{self, Wake};
use outboxd::worker::{RunMode, Worker, WorkerError};

use crate::latency_report::RowTimes;
pub use crate::latency_report::{LatencyReport, Phases, RoundTimes};

/// Rows committed during this first part of a run are not counted in the percentiles.
pub const WARM_UP: Duration = Duration::from_secs(1);

/// What to measure.
#[derive(Debug, Clone)]
pub struct LatencyOptions {
    /// Rows committed per second, all producers together (unless `every` is set).
    pub rate: u32,
    /// One row every this long instead of `rate` rows a second (a quiet room).
    pub every: Option<Duration>,
    /// How long the worker idles before the producers start (a burst after a quiet spell).
    pub quiet_first: Duration,
    /// How long the producers write.
    pub seconds: u32,
    /// Producer tasks, each on its own connection.
    pub producers: u32,
    /// Print the claims that ran while this many of the slowest rows waited for theirs
    /// ([`crate::trace`]); 0: none.
    pub trace_slowest: usize,
}

impl LatencyOptions {
    /// The latency options of `args` (`--rate` or `--every`, `--seconds`, …).
    pub fn new(args: &BenchArgs) -> LatencyOptions {
        LatencyOptions {
            rate: args.rate.unwrap_or(1).max(1),
            every: args.every.filter(|every| !every.is_zero()),
            quiet_first: args.quiet_first.unwrap_or_default(),
            seconds: args.seconds.unwrap_or(1),
            producers: args.producers,
            trace_slowest: args.trace_slowest,
        }
    }
}

/// Errors of a latency run.
#[derive(Debug, thiserror::Error)]
pub enum LatencyError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// The commit feed could not start (`worker.wake = "binlog"` without a binlog).
    #[error(transparent)]
    Feed(#[from] wake::FeedError),
    /// The worker failed.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// Rows were still undelivered long after the producers stopped.
    #[error("{undelivered} of {events} events were not delivered 30 s after the producers stopped")]
    Incomplete {
        /// Rows not delivered.
        undelivered: usize,
        /// Rows committed.
        events: usize,
    },
}

/// Runs the producers and a worker publishing through `publisher`; returns the latencies.
pub async fn run(
    harness: &Harness<'_>,
    options: &LatencyOptions,
    publisher: Arc<dyn Publisher>,
) -> Result<LatencyReport, LatencyError> {
    let config = harness.config;
    // The config's worker options drive the worker (its batch size, loops and ordering).
    let inner = harness.store(0).await?;
    let producers = options.producers.max(1);
    let producer_store = harness.pool(producers).await?;
    let timed = Arc::new(TimedStore {
        inner,
        delivered_at: Mutex::new(HashMap::new()),
        claimed_at: Mutex::new(HashMap::new()),
        last_claim_end: Mutex::new(None),
        rounds: Mutex::new(RoundTimes::default()),
        claim_log: Mutex::new(Vec::new()),
        mark_log: Mutex::new(Vec::new()),
    });
    let app_code = Harness::app_code("latency");

    let shutdown = CancellationToken::new();
    let wake = Wake::new();
    let feed = wake::start_commit_feed_with(
        &config.database.url,
        &harness.table,
        config.worker.wake,
        &wake,
        shutdown.child_token(),
    )
    .await?;
    // The PostgreSQL listener connects in the background: give it a moment before measuring.
    let feed_deadline = Instant::now() + Duration::from_secs(2);
    while feed.is_some() && !wake.has_commit_feed() && Instant::now() < feed_deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let commit_feed = wake.has_commit_feed();
    let wake_kind = wake.kind();
    let mut worker_options = config.worker_options();
    worker_options.app_codes = vec![app_code.clone()];
    worker_options.node_id = "bench-latency".into();
    let store: Arc<dyn OutboxStore> = timed.clone();
    let worker = Worker::new(store, publisher, worker_options).with_wake(wake);
    let worker_run = {
        let shutdown = shutdown.clone();
        tokio::spawn(async move { worker.run(RunMode::Forever, shutdown).await })
    };

    tokio::time::sleep(options.quiet_first).await;
    let started = Instant::now();
    let committed = produce(&*producer_store, &app_code, options).await?;
    // The producers' real span (first scheduled row to last commit), not the `--seconds` asked:
    // producers that fell behind show a lower rate.
    let produce_secs = committed
        .iter()
        .map(|(_, at)| at.saturating_duration_since(started))
        .max()
        .unwrap_or_default()
        .as_secs_f64()
        .max(1e-9);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let delivered = timed.delivered_at.lock().expect("poisoned").len();
        if delivered >= committed.len() {
            break;
        }
        if Instant::now() > deadline {
            shutdown.cancel();
            return Err(LatencyError::Incomplete {
                undelivered: committed.len() - delivered,
                events: committed.len(),
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    shutdown.cancel();
    worker_run.await.expect("worker task panicked")?;
    if let Some(feed) = feed {
        let _ = feed.await;
    }
    producer_store.close().await;
    timed.inner.close().await;

    let rounds = timed.rounds.lock().expect("poisoned").clone();
    let delivered_at = timed.delivered_at.lock().expect("poisoned");
    let warm_up = if options.seconds > 1 && options.every.is_none() && options.quiet_first.is_zero()
    {
        WARM_UP
    } else {
        Duration::ZERO
    };
    let claimed_at = timed.claimed_at.lock().expect("poisoned");
    let mut phases = Phases::default();
    let mut waits = Vec::new();
    let claim_log = timed.claim_log.lock().expect("poisoned");
    let steady_from = caught_up(&claim_log, started + warm_up).filter(|_| !warm_up.is_zero());
    let mut steady = Vec::new();
    let mut latencies: Vec<Duration> = committed
        .iter()
        .filter(|(_, committed_at)| committed_at.duration_since(started) >= warm_up)
        .filter_map(|(event_id, committed_at)| {
            let mark = delivered_at.get(event_id)?;
            if let Some(claim) = claimed_at.get(event_id) {
                waits.push(RowWait {
                    committed: *committed_at,
                    claimed: claim.0,
                });
                phases.push(
                    *committed_at,
                    &RowTimes {
                        claim: *claim,
                        mark: *mark,
                    },
                );
            }
            let latency = mark.1.saturating_duration_since(*committed_at);
            if steady_from.is_some_and(|from| *committed_at >= from) {
                steady.push(latency);
            }
            Some(latency)
        })
        .collect();
    latencies.sort();
    steady.sort();
    phases.sort();
    let slow_rows = SlowRows::find(
        &waits,
        &claim_log,
        &timed.mark_log.lock().expect("poisoned"),
        started,
        options.trace_slowest,
    );
    Ok(LatencyReport {
        database: harness.database(),
        rate: options.rate,
        every: options.every,
        quiet_first: options.quiet_first,
        wake: wake_kind,
        events: committed.len(),
        counted: latencies.len(),
        achieved_rate: committed.len() as f64 / produce_secs,
        poll_interval: config.worker.poll_interval,
        commit_feed,
        latencies,
        rounds,
        phases,
        slow_rows,
        steady: steady_from.map(|from| (from.saturating_duration_since(started), steady)),
    })
}

/// When each of `total` rows is due, from the start: row `i` at a random moment of its own slot
/// `[i × interval, (i + 1) × interval)` (the same moments every run: a fixed seed). The mean rate
/// is the asked one and the rows stay in order, but the commits do not keep step with anything
/// periodic in the host: at 200 rows/s an exact 5 ms schedule would meet SQLite's 5 ms
/// `data_version` watch (and the 5 ms probe) at one fixed phase, and measure that phase's luck,
/// not the wake.
fn schedule(total: u64, interval: Duration) -> Vec<Duration> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x0b0c_5eed);
    (0..total)
        .map(|i| interval.mul_f64(i as f64 + rng.random::<f64>()))
        .collect()
}

/// Commits `rate × seconds` rows, one per transaction, spread over the producer tasks on the
/// [`schedule`]; returns each row's id and commit time.
async fn produce(
    store: &dyn OutboxStore,
    app_code: &str,
    options: &LatencyOptions,
) -> Result<Vec<(String, Instant)>, StoreError> {
    let (total, interval) = match options.every {
        Some(every) => (
            (f64::from(options.seconds) / every.as_secs_f64()).ceil() as u64,
            every,
        ),
        None => (
            u64::from(options.rate) * u64::from(options.seconds),
            Duration::from_secs_f64(1.0 / f64::from(options.rate.max(1))),
        ),
    };
    let producers = u64::from(options.producers.max(1));
    let due = schedule(total, interval);
    let due = &due;
    let started = tokio::time::Instant::now();
    let tasks = (0..producers).map(|producer| async move {
        let mut committed = Vec::new();
        let mut i = producer;
        while i < total {
            tokio::time::sleep_until(started + due[i as usize]).await;
            let record = Record::build(
                format!("room-{}", i % 100),
                "RoomGiftSent",
                i as i64,
                SystemTime::now(),
                &(),
            )
            .with_app_code(app_code);
            let event_id = record.event_id.clone();
            store.enqueue(std::slice::from_ref(&record)).await?;
            committed.push((event_id, Instant::now()));
            i += producers;
        }
        Ok::<_, StoreError>(committed)
    });
    let mut all = Vec::with_capacity(total as usize);
    for result in futures::future::join_all(tasks).await {
        all.extend(result?);
    }
    Ok(all)
}

/// The store the worker uses, noting when each row's claim and `delivered` mark started and
/// returned, and how long each claim and mark took.
struct TimedStore {
    inner: Arc<dyn OutboxStore>,
    /// Event id → its `delivered` mark's start and return.
    delivered_at: Mutex<HashMap<String, (Instant, Instant)>>,
    /// Event id → the start and return of the (last) claim that handed it out.
    claimed_at: Mutex<HashMap<String, (Instant, Instant)>>,
    /// When the last claim returned (the worker runs one loop in the default config; with more,
    /// the gaps interleave the loops' claims).
    last_claim_end: Mutex<Option<Instant>>,
    rounds: Mutex<RoundTimes>,
    /// Every claim, for `--trace-slowest`.
    claim_log: Mutex<Vec<ClaimSpan>>,
    /// Every mark's start and return, for `--trace-slowest`.
    mark_log: Mutex<Vec<(Instant, Instant)>>,
}

#[async_trait]
impl OutboxStore for TimedStore {
    fn backend(&self) -> Backend {
        self.inner.backend()
    }

    fn table(&self) -> &TableName {
        self.inner.table()
    }

    async fn migrate(&self) -> Result<Vec<i64>, StoreError> {
        self.inner.migrate().await
    }

    fn partitions(&self) -> u32 {
        self.inner.partitions()
    }

    async fn repartition(&self, partitions: u32) -> Result<Repartition, StoreError> {
        self.inner.repartition(partitions).await
    }

    async fn rebalance(&self, params: &RebalanceParams<'_>) -> Result<Ownership, StoreError> {
        self.inner.rebalance(params).await
    }

    async fn live_partitions(&self, app_code: &str) -> Result<Option<Vec<u32>>, StoreError> {
        self.inner.live_partitions(app_code).await
    }
    async fn set_careful(
        &self,
        owner: (&str, &str),
        fence: &outboxd::store::PartitionFence,
        careful: &outboxd::store::Careful,
    ) -> Result<bool, StoreError> {
        self.inner.set_careful(owner, fence, careful).await
    }
    async fn reject(
        &self,
        owner: (&str, &str),
        fence: &outboxd::store::PartitionFence,
        now_ms: i64,
        rows: &[outboxd::store::RejectedRow],
    ) -> Result<u64, StoreError> {
        self.inner.reject(owner, fence, now_ms, rows).await
    }

    async fn clock_ms(&self) -> Result<Option<i64>, StoreError> {
        self.inner.clock_ms().await
    }

    async fn enqueue(&self, records: &[Record]) -> Result<u64, StoreError> {
        self.inner.enqueue(records).await
    }

    async fn read_partitions(&self, params: &PartitionRead) -> Result<ClaimBatch, StoreError> {
        let started = Instant::now();
        let batch = self.inner.read_partitions(params).await?;
        let now = Instant::now();
        let took = now - started;
        let rows = batch.events.len() + batch.rejected.len();
        let mut claimed_at = self.claimed_at.lock().expect("poisoned");
        for claimed in &batch.events {
            claimed_at.insert(claimed.event.event_id.clone(), (started, now));
        }
        drop(claimed_at);
        let mut rounds = self.rounds.lock().expect("poisoned");
        let mut last_claim_end = self.last_claim_end.lock().expect("poisoned");
        if let Some(end) = last_claim_end.replace(now) {
            rounds.gaps.push(started.saturating_duration_since(end));
        }
        rounds.claims.push((took, rows));
        self.claim_log.lock().expect("poisoned").push(ClaimSpan {
            start: started,
            end: now,
            rows,
            limit: params.limit,
        });
        Ok(batch)
    }

    async fn mark(&self, params: &MarkParams<'_>) -> Result<MarkReport, StoreError> {
        let started = Instant::now();
        let report = self.inner.mark(params).await?;
        let now = Instant::now();
        self.rounds
            .lock()
            .expect("poisoned")
            .marks
            .push(now - started);
        self.mark_log.lock().expect("poisoned").push((started, now));
        let mut delivered_at = self.delivered_at.lock().expect("poisoned");
        for mark in params.marks {
            if mark.disposition == Disposition::Delivered && !report.stale.contains(&mark.event_id)
            {
                delivered_at.insert(mark.event_id.clone(), (started, now));
            }
        }
        Ok(report)
    }

    async fn counts(&self, params: &CountsParams) -> Result<StatusCounts, StoreError> {
        self.inner.counts(params).await
    }

    async fn list_failed(&self, params: &ListFailedParams) -> Result<Vec<FailedRow>, StoreError> {
        self.inner.list_failed(params).await
    }

    async fn requeue(&self, params: &RequeueParams) -> Result<u64, StoreError> {
        self.inner.requeue(params).await
    }

    async fn purge(&self, params: &PurgeParams) -> Result<u64, StoreError> {
        self.inner.purge(params).await
    }

    async fn close(&self) {
        self.inner.close().await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each row is due inside its own slot, in order, and at 200 rows/s the moments fall on
    /// every phase of a 5 ms period (the SQLite watch), not on one.
    #[test]
    fn schedule_keeps_the_rate_and_order_but_no_fixed_phase() {
        let interval = Duration::from_millis(5);
        let due = schedule(2_000, interval);
        assert_eq!(due.len(), 2_000);
        for (i, at) in due.iter().enumerate() {
            assert!(
                *at >= interval * i as u32 && *at < interval * (i as u32 + 1),
                "row {i}: {at:?}"
            );
        }
        assert!(due.windows(2).all(|w| w[0] < w[1]));
        let mut phases = [0u32; 5];
        for at in &due {
            phases[(at.as_micros() % 5_000 / 1_000) as usize] += 1;
        }
        assert!(
            phases.iter().all(|&n| n > 300),
            "phases per ms of 5: {phases:?}"
        );
        assert_eq!(due, schedule(2_000, interval), "the same moments every run");
    }

    #[test]
    fn percentiles_by_nearest_rank() {
        let report = LatencyReport {
            database: "x".into(),
            rate: 1,
            every: None,
            quiet_first: Duration::ZERO,
            wake: "probe".into(),
            events: 100,
            counted: 100,
            achieved_rate: 1.0,
            poll_interval: Duration::from_secs(1),
            commit_feed: true,
            latencies: (1..=100).map(Duration::from_millis).collect(),
            rounds: RoundTimes {
                claims: vec![(Duration::from_millis(2), 4), (Duration::from_millis(1), 0)],
                marks: vec![Duration::from_millis(3)],
                gaps: vec![Duration::from_millis(1)],
            },
            phases: Phases::default(),
            slow_rows: SlowRows::default(),
            steady: None,
        };
        assert_eq!(report.percentile(50.0), Duration::from_millis(50));
        assert_eq!(report.percentile(99.0), Duration::from_millis(99));
        assert_eq!(report.percentile(100.0), Duration::from_millis(100));
        let text = report.to_string();
        assert!(text.contains("p99 ms"));
        assert!(
            text.contains("claims: 2 (1 found rows, 4.0 rows each)"),
            "{text}"
        );
    }
}
