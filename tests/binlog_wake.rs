//! The MySQL / MariaDB wake-ups (`worker.wake`, `worker.idle_probe`): on a private MariaDB that
//! writes a ROW-format binlog (started by the test, its own data dir and port: never the shared
//! server), a commit to the outbox table wakes an idle worker at once, also after the binlog
//! connection was killed from the server's side, and a rolled-back transaction or the hosts' own
//! marks wake no one; a user without the REPLICATION privileges probes (`auto`) or is refused
//! (`binlog`). On the shared MariaDB (no binlog) `auto` falls back to the bounded probe
//! and says so, and `binlog` refuses to start naming the key.
//!
//! Every worker here polls every second and, in the binlog tests, probes no sooner than that
//! (`idle_probe` = `poll_interval` = 1 s), so a row delivered within [`PROMPT`] of its commit
//! was delivered by the binlog wake (without the feed these rows waited ~780 ms each: the
//! loop's probe had backed off to the second). The burst after a quiet spell starts right after
//! the loop's poll round (seen through its store, [`ClaimWatch`]), so every row delivered before
//! a poll after that round was read after a binlog wake.
//! Without MariaDB's binaries or the shared server the tests print `SKIPPED …`; under `CI=true`
//! they fail instead.

use crate::support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use outboxd::admin::Readiness;
use outboxd::metrics::Metrics;
use outboxd::record::{Record, now_ms};
use outboxd::retry::RetryPolicy;
use outboxd::store::{
    Backend as StoreBackend, ClaimBatch, ConnectOptions, CountsParams, DeliveryOrder, FailedRow,
    ListFailedParams, MarkParams, MarkReport, OutboxStore, Ownership, PartitionRead, PurgeParams,
    RebalanceParams, Repartition, RequeueParams, StatusCounts, StoreError, TableName,
};
use outboxd::wake::{self, FeedError, Wake, WakeMode};
use outboxd::worker::WorkerOptions;
use sqlx::{AssertSqlSafe, Connection, Executor, MySqlConnection};
use support::private_server::{Kind, PrivateServer};
use support::{Backend, Running, TestDb, record, until_loops_wait, wait_for, wait_until};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// The safety net of every worker here: a delivery sooner than this came from a wake-up.
const POLL: Duration = Duration::from_secs(1);
/// Commit → delivered bound of a woken row (loose for a loaded machine; the poll is 1 s).
const PROMPT: Duration = Duration::from_millis(200);
/// Longest wait for anything that should happen.
const DEADLINE: Duration = Duration::from_secs(10);
/// The quiet spell before the burst: no commit for this long.
const QUIET: Duration = Duration::from_secs(2);
/// The most of a server stall (the longest producer commit) the burst's p99 bound allows for:
/// however long the stall, the bound stays under half the poll, so a burst that waited for the
/// poll can never pass it.
const MAX_STALL_ALLOWANCE: Duration = Duration::from_millis(250);
const _: () = assert!(PROMPT.as_millis() + MAX_STALL_ALLOWANCE.as_millis() < POLL.as_millis() / 2);

fn options(idle_probe: Duration) -> WorkerOptions {
    WorkerOptions {
        app_codes: vec!["app".into()],
        batch_size: 100,
        poll_interval: POLL,
        idle_probe,
        lease: Duration::from_secs(60),
        publish_timeout: Duration::from_secs(10),
        retry: RetryPolicy::default(),
        ordering: DeliveryOrder::None,
        concurrency: 1,
        node_id: "binlog-test".into(),
    }
}

/// A worker over `store` woken by `wake`, polling every [`POLL`] and probing every `idle_probe`.
fn start(store: Arc<dyn OutboxStore>, wake: Wake, idle_probe: Duration) -> Running {
    Running::start(store, wake, options(idle_probe))
}

/// The worker's store, noting how many of its reads (of a partition, or of which partitions hold
/// live rows: a round's reads) have returned and when the last one did: the burst starts right
/// after the loop's poll round, so the test knows the earliest its next poll can come.
struct ClaimWatch {
    inner: Arc<dyn OutboxStore>,
    /// Reads returned so far, and when the last one returned.
    claims: watch::Sender<(u64, Option<Instant>)>,
}

impl ClaimWatch {
    fn new(inner: Arc<dyn OutboxStore>) -> ClaimWatch {
        ClaimWatch {
            inner,
            claims: watch::Sender::new((0, None)),
        }
    }

    /// A read returned now.
    fn returned(&self) {
        self.claims.send_modify(|(count, last)| {
            *count += 1;
            *last = Some(Instant::now());
        });
    }
}

#[async_trait]
impl OutboxStore for ClaimWatch {
    fn backend(&self) -> StoreBackend {
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
    async fn enqueue(&self, records: &[Record]) -> Result<u64, StoreError> {
        self.inner.enqueue(records).await
    }
    async fn rebalance(&self, params: &RebalanceParams<'_>) -> Result<Ownership, StoreError> {
        self.inner.rebalance(params).await
    }
    async fn read_partitions(&self, read: &PartitionRead) -> Result<ClaimBatch, StoreError> {
        let read = self.inner.read_partitions(read).await;
        self.returned();
        read
    }
    async fn live_partitions(&self, app_code: &str) -> Result<Option<Vec<u32>>, StoreError> {
        let live = self.inner.live_partitions(app_code).await;
        self.returned();
        live
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
    async fn mark(&self, params: &MarkParams<'_>) -> Result<MarkReport, StoreError> {
        self.inner.mark(params).await
    }
    async fn counts(&self, params: &CountsParams) -> Result<StatusCounts, StoreError> {
        self.inner.counts(params).await
    }
    async fn clock_ms(&self) -> Result<Option<i64>, StoreError> {
        self.inner.clock_ms().await
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

/// Commits `event_id` through `producer`, waits for `worker` to deliver it and returns its
/// commit → delivered latency.
async fn commit_and_time(
    worker: &mut Running,
    producer: &dyn OutboxStore,
    event_id: &str,
) -> Duration {
    producer
        .enqueue(&[record("app", event_id, "room-1", now_ms())])
        .await
        .expect("enqueue");
    let committed = Instant::now();
    let (id, at) = worker.next_within(DEADLINE, event_id).await;
    assert_eq!(id, event_id);
    at.saturating_duration_since(committed)
}

/// A store on `url` (migrated).
async fn store(url: &str) -> Arc<dyn OutboxStore> {
    let store = outboxd::store::connect(&ConnectOptions {
        url: url.to_string(),
        table: TableName::default(),
        max_connections: 4,
        connect_timeout: Duration::from_secs(5),
    })
    .await
    .expect("connect");
    store.migrate().await.expect("migrate");
    store
}

/// Waits until `wake`'s feed is `connected` (or not).
async fn feed_is(wake: &Wake, connected: bool) {
    wait_for(
        &format!("the commit feed connected = {connected}"),
        DEADLINE,
        || async { wake.has_commit_feed() == connected },
    )
    .await;
}

/// Waits until the worker's loop sleeps until woken (no probe planned): the row committed next
/// is found by a wake-up.
async fn asleep(wake: &Wake) {
    until_loops_wait(wake, 1, "the loop asleep until woken", DEADLINE, |p| {
        p.is_none()
    })
    .await;
}

/// Whether `wake` is woken within `within` (taking that wake).
async fn woken_within(wake: &Wake, within: Duration) -> bool {
    tokio::time::timeout(within, wake.woken()).await.is_ok()
}

/// Takes the wakes already given (a (re)connect's, a commit's second look): a quiet spell, since
/// a wake that is still coming shows nowhere before it comes.
async fn drain_wakes(wake: &Wake) {
    tokio::time::sleep(Duration::from_millis(50)).await;
    while woken_within(wake, Duration::from_millis(20)).await {}
}

/// The connection ids of the server's binlog dump threads.
async fn dump_threads(admin: &mut MySqlConnection) -> Vec<i64> {
    sqlx::query_scalar(
        "SELECT ID FROM information_schema.PROCESSLIST WHERE COMMAND LIKE 'Binlog Dump%'",
    )
    .fetch_all(admin)
    .await
    .expect("read the process list")
}

/// Asserts that every latency is within [`PROMPT`].
fn assert_prompt(what: &str, latencies: &[Duration]) {
    eprintln!("{what}: commit → delivered {latencies:?}");
    assert!(
        latencies.iter().all(|l| *l < PROMPT),
        "{what}: every commit → delivered must be under {PROMPT:?} (the poll is {POLL:?}): {latencies:?}"
    );
}

/// Sparse commits, a burst after a quiet spell, the binlog connection killed and restored, a
/// rolled-back transaction and the hosts' own marks, on one private server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binlog_wakes_idle_loops_at_commit_and_survives_a_killed_stream() {
    let Some(server) = PrivateServer::start_with(Kind::MariaDb, true).await else {
        return;
    };
    let url = server.url();
    let store = store(&url).await;
    let producer = store_unmigrated(&url).await;
    let mut admin = MySqlConnection::connect(&server.admin_url())
        .await
        .expect("admin connection");

    // A user who may write the table but not read the binlog: `auto` probes and says why,
    // `binlog` refuses.
    for sql in [
        "CREATE USER 'plain'@'%'",
        "GRANT ALL ON outbox.* TO 'plain'@'%'",
    ] {
        admin.execute(sql).await.expect(sql);
    }
    let plain_url = url.replacen("root@", "plain@", 1);
    let plain = Wake::new();
    let feed = wake::start_commit_feed_with(
        &plain_url,
        &TableName::default(),
        WakeMode::Auto,
        &plain,
        CancellationToken::new(),
    )
    .await
    .expect("auto starts without the privilege");
    assert!(feed.is_none());
    assert!(
        plain
            .kind()
            .starts_with("probe (no REPLICATION privilege: "),
        "{}",
        plain.kind()
    );
    let refused = wake::start_commit_feed_with(
        &plain_url,
        &TableName::default(),
        WakeMode::Binlog,
        &Wake::new(),
        CancellationToken::new(),
    )
    .await
    .expect_err("binlog without the privilege");
    assert!(
        refused.to_string().contains("worker.wake") && refused.to_string().contains("REPLICATION"),
        "{refused}"
    );

    let wake = Wake::new();
    let shutdown = CancellationToken::new();
    let feed = wake::start_commit_feed_with(
        &url,
        &TableName::default(),
        WakeMode::Binlog,
        &wake,
        shutdown.clone(),
    )
    .await
    .expect("the binlog can be followed")
    .expect("a binlog feed");
    assert_eq!(wake.kind(), "binlog");
    feed_is(&wake, true).await;

    // Rollbacks and marks first, with no worker taking the wakes.
    drain_wakes(&wake).await;
    let mut conn = MySqlConnection::connect(&url).await.expect("connect");
    conn.execute("BEGIN").await.unwrap();
    conn.execute(AssertSqlSafe(insert_sql("rolled-back")))
        .await
        .unwrap();
    conn.execute("ROLLBACK").await.unwrap();
    assert!(
        !woken_within(&wake, Duration::from_millis(500)).await,
        "a rolled-back transaction woke the loops"
    );
    conn.execute(AssertSqlSafe(insert_sql("committed")))
        .await
        .unwrap();
    assert!(
        woken_within(&wake, PROMPT).await,
        "a committed insert did not wake"
    );
    drain_wakes(&wake).await;
    conn.execute("UPDATE room_outbox SET status = 'delivered' WHERE event_id = 'committed'")
        .await
        .unwrap();
    assert!(
        !woken_within(&wake, Duration::from_millis(500)).await,
        "a mark (status delivered) woke the loops"
    );
    conn.execute("UPDATE room_outbox SET status = 'pending' WHERE event_id = 'committed'")
        .await
        .unwrap();
    assert!(
        woken_within(&wake, PROMPT).await,
        "a requeue (status back to pending) did not wake"
    );
    conn.execute("DELETE FROM room_outbox").await.unwrap();
    drain_wakes(&wake).await;

    // Sparse commits: each delivered at once, though the loop probes only every second.
    let claims = Arc::new(ClaimWatch::new(store.clone()));
    let mut worker = start(claims.clone(), wake.clone(), POLL);
    // The commits' pace is part of these tests; before the first, the loop sleeps until woken
    // (the poll is a second away), so only the binlog delivers a row within PROMPT.
    asleep(&wake).await;
    let mut sparse = Vec::new();
    let mut quiet_from = Instant::now();
    for i in 0..4 {
        sparse.push(commit_and_time(&mut worker, &*producer, &format!("sparse-{i}")).await);
        quiet_from = Instant::now();
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert_prompt("sparse commits", &sparse);

    // A burst after a quiet spell (no commit for QUIET, part of the test): 200 rows paced at
    // ~2,000/s, the first right after the loop's first poll round past the quiet spell. The loop
    // sleeps until woken after that round (only the binlog follower wakes it), so its next poll
    // comes POLL after the round at the earliest: a row delivered before then was claimed after
    // a binlog wake.
    let mut seen = claims.claims.subscribe();
    let (claims_before, poll_round) = *tokio::time::timeout(
        DEADLINE,
        seen.wait_for(|(_, last)| last.is_some_and(|at| at >= quiet_from + QUIET)),
    )
    .await
    .expect("the loop's poll round after the quiet spell")
    .expect("claims noted");
    let poll_round = poll_round.expect("a claim returned");
    let burst_started = Instant::now();
    let mut committed = Vec::new();
    // The longest a producer's own commit took: a stall of the server (its log's fsync behind the
    // machine's disk writeback) delays the rows committed around it for as long, wake or not.
    let mut server_stall = Duration::ZERO;
    for i in 0..200u32 {
        let due = burst_started + Duration::from_micros(500) * i;
        tokio::time::sleep_until(due.into()).await;
        let id = format!("burst-{i}");
        let started = Instant::now();
        producer
            .enqueue(&[record("app", &id, "room-1", now_ms())])
            .await
            .unwrap();
        server_stall = server_stall.max(started.elapsed());
        committed.push((id, Instant::now()));
    }
    let committed: std::collections::HashMap<String, Instant> = committed.into_iter().collect();
    // Per row: commit → delivered, when it was committed and delivered (after the poll round), id.
    let mut burst = Vec::new();
    for _ in 0..committed.len() {
        let (id, delivered_at) = worker.next_within(DEADLINE, "the burst").await;
        let at = committed[&id];
        burst.push((
            delivered_at.saturating_duration_since(at),
            at.duration_since(poll_round),
            delivered_at.duration_since(poll_round),
            id,
        ));
    }
    let claims_during = claims.claims.borrow().0 - claims_before;
    burst.sort();
    let p99 = burst[burst.len() * 99 / 100 - 1].0;
    eprintln!(
        "burst after a quiet spell: started {:?} after the loop's poll round, commit → delivered \
         p50 {:?} p99 {p99:?}, longest producer commit {server_stall:?}, last delivered {:?} \
         after the poll round, {claims_during} claims",
        burst_started.duration_since(poll_round),
        burst[burst.len() / 2].0,
        burst.iter().map(|row| row.2).max(),
    );
    // The binlog delivered the burst: every row committed more than PROMPT before the loop's
    // next poll could come was delivered before it (without a wake all of them wait for it).
    let woken: Vec<_> = burst.iter().filter(|row| row.1 + PROMPT < POLL).collect();
    assert!(
        !woken.is_empty(),
        "burst after a quiet spell: no row committed more than {PROMPT:?} before the loop's next \
         poll (the first {:?} after its round)",
        burst.iter().map(|row| row.1).min()
    );
    let waited: Vec<_> = woken
        .iter()
        .filter(|row| row.2 >= POLL)
        .map(|(_, committed, delivered, id)| {
            format!("{id} committed {committed:?}, delivered {delivered:?}")
        })
        .collect();
    assert!(
        waited.is_empty(),
        "burst after a quiet spell: {} of {} rows committed well before the loop's next poll \
         ({POLL:?} after its round) were delivered only at or after it: no binlog wake \
         delivered them ({claims_during} claims; times after the poll round): {:?}",
        waited.len(),
        woken.len(),
        &waited[..waited.len().min(5)]
    );
    // And promptly: a server stall widens the bound by at most MAX_STALL_ALLOWANCE, so it stays
    // under half the poll.
    let bound = PROMPT + server_stall.min(MAX_STALL_ALLOWANCE);
    assert!(
        p99 < bound,
        "burst after a quiet spell: p99 {p99:?} not under {bound:?} (max {:?}, longest producer \
         commit {server_stall:?}, {claims_during} claims)",
        burst.last().map(|row| row.0)
    );

    // The binlog connection killed from the server's side: the follower reconnects (a new dump
    // thread), and commits after that wake at once again.
    let before = dump_threads(&mut admin).await;
    assert_eq!(before.len(), 1, "one binlog dump thread: {before:?}");
    admin
        .execute(AssertSqlSafe(format!("KILL {}", before[0])))
        .await
        .expect("kill the binlog dump thread");
    let admin = &tokio::sync::Mutex::new(admin);
    wait_until(
        "the follower reconnected with a new dump thread",
        DEADLINE,
        || async {
            let now = dump_threads(&mut *admin.lock().await).await;
            if now.len() == 1 && now != before && wake.has_commit_feed() {
                Ok(())
            } else {
                Err((now, wake.has_commit_feed()))
            }
        },
    )
    .await;
    // Quiet again: the loop sleeps until woken before the next commit.
    asleep(&wake).await;
    let mut after_kill = Vec::new();
    for i in 0..3 {
        after_kill.push(commit_and_time(&mut worker, &*producer, &format!("after-kill-{i}")).await);
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
    assert_prompt("commits after the reconnect", &after_kill);

    worker.stop().await;
    shutdown.cancel();
    feed.await.expect("feed task");
    assert!(!wake.has_commit_feed());
    producer.close().await;
    store.close().await;
    drop(server);
}

/// A producer store on `url` (the table already exists).
async fn store_unmigrated(url: &str) -> Arc<dyn OutboxStore> {
    outboxd::store::connect(&ConnectOptions {
        url: url.to_string(),
        table: TableName::default(),
        max_connections: 2,
        connect_timeout: Duration::from_secs(5),
    })
    .await
    .expect("connect the producer")
}

/// One producer row into the default table.
fn insert_sql(event_id: &str) -> String {
    format!(
        "INSERT INTO room_outbox (app_code, event_id, event_type, room_id, envelope, created_at_ms, updated_at_ms) \
         VALUES ('app', '{event_id}', 'T', 'room-1', x'00', {now}, {now})",
        now = now_ms()
    )
}

/// On the shared server (no binlog): `auto` probes, bounded by the default idle probe, and
/// reports so; `binlog` refuses to start naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_binlog_auto_probes_every_idle_probe_and_binlog_refuses() {
    let Some(db) = TestDb::new(Backend::MySql).await else {
        return;
    };
    let store = db.store_default().await;
    let log_bin: i64 = {
        let mut conn = MySqlConnection::connect(&db.url).await.unwrap();
        sqlx::query_scalar("SELECT @@log_bin")
            .fetch_one(&mut conn)
            .await
            .unwrap()
    };
    assert_eq!(
        log_bin, 0,
        "the shared server is expected to write no binlog"
    );

    let err = wake::start_commit_feed_with(
        &db.url,
        &TableName::default(),
        WakeMode::Binlog,
        &Wake::new(),
        CancellationToken::new(),
    )
    .await
    .expect_err("wake = binlog without a binlog");
    assert!(matches!(err, FeedError::BinlogUnavailable(_)), "{err:?}");
    let message = err.to_string();
    assert!(
        message.contains("worker.wake") && message.contains("log_bin is OFF"),
        "{message}"
    );

    let wake = Wake::new();
    let feed = wake::start_commit_feed_with(
        &db.url,
        &TableName::default(),
        WakeMode::Auto,
        &wake,
        CancellationToken::new(),
    )
    .await
    .expect("auto starts without a binlog");
    assert!(feed.is_none(), "no feed without a binlog");
    assert_eq!(wake.kind(), "probe (log_bin is OFF)");
    let metrics = Metrics::new();
    let readiness = Readiness::new();
    let reporting = CancellationToken::new();
    let reporter = tokio::spawn(outboxd::monitor::report_wake(
        wake.clone(),
        metrics.clone(),
        readiness.clone(),
        reporting.clone(),
    ));
    wait_until("the wake reported", DEADLINE, || async {
        let text = metrics.encode();
        match readiness.wake() {
            Some(_) if text.contains("outboxd_commit_feed_connected{feed=\"probe\"}") => Ok(()),
            wake => Err(wake),
        }
    })
    .await;
    reporting.cancel();
    reporter.await.unwrap();
    assert_eq!(readiness.wake().as_deref(), Some("probe (log_bin is OFF)"));
    let text = metrics.encode();
    assert!(
        text.contains("outboxd_commit_feed_connected{feed=\"probe\"} 0"),
        "{text}"
    );

    // The default bound on MySQL / MariaDB: an idle loop claims every 50 ms, so a sparse commit
    // waits for one probe at most, not for the 1 s poll.
    let idle_probe = outboxd::config::DEFAULT_IDLE_PROBE;
    let mut worker = start(store.clone(), wake.clone(), idle_probe);
    // Sparse commits, part of the test, to a loop whose probe has backed off to its bound.
    until_loops_wait(
        &wake,
        1,
        "the probe backed off to its bound",
        DEADLINE,
        |probe| probe.is_some_and(|p| p > idle_probe / 2),
    )
    .await;
    let mut sparse = Vec::new();
    for i in 0..4 {
        sparse.push(commit_and_time(&mut worker, &*store, &format!("probe-{i}")).await);
        tokio::time::sleep(Duration::from_millis(1100)).await;
    }
    assert_prompt("sparse commits, bounded probe", &sparse);
    worker.stop().await;
    db.cleanup().await;
}

/// `outboxd run` with `worker.wake = "binlog"` on a server without a binlog refuses to start,
/// naming the key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_with_wake_binlog_refuses_to_start_without_a_binlog() {
    let Some(db) = TestDb::new(Backend::MySql).await else {
        return;
    };
    db.store_default().await;
    let dir = tempfile::tempdir().unwrap();
    let plugin = dir.path().join("log.wasm");
    std::fs::write(&plugin, b"not loaded: the feed fails first").unwrap();
    let config = dir.path().join("outboxd.toml");
    std::fs::write(
        &config,
        format!(
            "[database]\nurl = \"{}\"\n[worker]\nwake = \"binlog\"\n[admin]\nlisten = \"\"\n\
             [[sink]]\nname = \"log\"\nplugin = \"{}\"\n[[route]]\nevent_type = \"*\"\nsink = \"log\"\n",
            db.url,
            plugin.display()
        ),
    )
    .unwrap();
    let output = tokio::time::timeout(
        Duration::from_secs(30),
        tokio::process::Command::new(env!("CARGO_BIN_EXE_outboxd"))
            .arg("--config")
            .arg(&config)
            .arg("run")
            .env_remove("OUTBOXD_DATABASE_URL")
            .output(),
    )
    .await
    .expect("outboxd run exits")
    .expect("run outboxd");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "run started: {stderr}");
    assert!(
        stderr.contains("worker.wake") && stderr.contains("log_bin is OFF"),
        "{stderr}"
    );
    db.cleanup().await;
}
