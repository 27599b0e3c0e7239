//! Partition chaos: real `outboxd run` processes (per-room order) deliver one table through the real webhook plugin to a real
//! HTTP receiver while a producer keeps writing, and the test, in turn: `kill -9`s a host and
//! starts another (a host dies, one joins), stops one with SIGSTOP for well over its lease and
//! resumes it (its partitions are taken over meanwhile), cuts every connection to the database,
//! restarts the database, and stops one host with SIGTERM (a host leaves). The database is a
//! private server the test starts itself (its own data dir and port), reached through a TCP proxy
//! the test controls.
//!
//! Asserts: 0 lost (every event reached the receiver, every row `delivered`), 0 stuck, 0 order
//! violations (each room's versions first arrive 1, 2, 3, …), duplicates within one batch per
//! loop per fault, and that the paused host found its partitions taken over when it resumed
//! (`partitions_lost`; the marks it then tried are fenced, which the conformance suite checks row
//! by row). Without the server binaries the test prints `SKIPPED …`, and fails when `CI=true`.

use crate::{fixtures, fleet, http, support};

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use fleet::{Host, order_violations, outboxd, start_host};
use http::WebhookReceiver;
use outboxd::record::Record;
use outboxd::store::{ConnectOptions, CountsParams, OutboxStore, StatusCounts};
use support::private_server::{Kind, PrivateServer};
use support::tcp_proxy::TcpProxy;
use support::wait_until;

/// The receiver's signing secret.
const SECRET: &str = "whsec_Y2hhb3MtdGVzdC1zZWNyZXQtMDEyMzQ1Njc4OQ==";
/// Rows per read.
const BATCH: u64 = 50;
/// Rooms the producer writes to.
const ROOMS: usize = 40;
/// The hosts' lease (heartbeats every third of it).
const LEASE: Duration = Duration::from_secs(4);

/// The hosts' config: partitioned, per-room order, a short lease.
fn write_config(dir: &Path, url: &str, receiver: &WebhookReceiver) -> PathBuf {
    let path = dir.join("outboxd.toml");
    let text = format!(
        r#"
[database]
url = "{url}"
max_connections = 4
connect_timeout = "2s"

[worker]
ordering = "per-room"
batch_size = {BATCH}
poll_interval = "100ms"
lease = "{lease}s"
publish_timeout = "3s"

[retry]
strategy = "fixed_interval"
interval = "200ms"
max_attempts = 1000

[plugins]
cache_dir = "{cache}"

[[route]]
event_type = "*"
sink = "hook"

[[sink]]
name = "hook"
plugin = "{plugin}"
config = {{ url = "{hook}", secret = "{SECRET}", timeout_ms = "1000" }}
limits = {{ publish_timeout = "2s", allow_hosts = ["http://{addr}"], max_concurrent_requests = 16 }}
"#,
        lease = LEASE.as_secs(),
        cache = dir.join("cache").display(),
        plugin = fixtures::plugin("webhook").display(),
        hook = receiver.url(),
        addr = receiver.addr(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// Sends `signal` (`-STOP`, `-CONT`, `-TERM`) to `host`.
fn signal(host: &Host, signal: &str) {
    let status = Command::new("kill")
        .args([signal, &host.child.id().to_string()])
        .status()
        .expect("kill");
    assert!(status.success(), "kill {signal}");
}

/// How many partitions `host` owns by its log: `owned=N` of its last `partitions rebalanced`
/// line (logged whenever it takes or releases one); `None` before the first.
fn owned_now(host: &Host) -> Option<u64> {
    let log = std::fs::read_to_string(&host.log).ok()?;
    let line = log
        .lines()
        .rev()
        .find(|l| l.contains("partitions rebalanced"))?;
    let owned = line.split("owned=").nth(1)?;
    owned
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

async fn counts(store: &Arc<dyn OutboxStore>) -> Option<StatusCounts> {
    store
        .counts(&CountsParams {
            app_code: None,
            now_ms: outboxd::record::now_ms(),
        })
        .await
        .ok()
}

/// Writes 20 events every 50 ms over [`ROOMS`] rooms, each room's `room_version` counting up,
/// until `stop`; a chunk the database refuses (it is restarting) is written again. Returns the
/// events written.
async fn produce(store: Arc<dyn OutboxStore>, stop: Arc<AtomicBool>, written: Arc<AtomicU64>) {
    let mut versions = [0i64; ROOMS];
    let mut n = 0usize;
    while !stop.load(Ordering::Relaxed) {
        let now = std::time::SystemTime::now();
        let records: Vec<Record> = (0..20)
            .map(|i| {
                let room = (n + i) % ROOMS;
                versions[room] += 1;
                Record::build(
                    format!("room-{room}"),
                    "RoomGiftSent",
                    versions[room],
                    now,
                    &(),
                )
            })
            .collect();
        // A refused chunk is written again as it is: its ids keep it idempotent.
        while store.enqueue(&records).await.is_err() {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        n += records.len();
        written.store(n as u64, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn partition_chaos(kind: Kind) {
    let Some(mut server) = PrivateServer::start(kind).await else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let receiver = WebhookReceiver::start(&[SECRET]).await;
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port).parse().unwrap()).await;
    let url = server.url();
    let proxied = url.replace(
        &format!(":{}/", server.port),
        &format!(":{}/", proxy.port()),
    );
    let config = write_config(work.path(), &proxied, &receiver);
    let migrated = outboxd(&config).arg("migrate").output().expect("migrate");
    assert!(
        migrated.status.success(),
        "{}",
        String::from_utf8_lossy(&migrated.stderr)
    );

    let store = outboxd::store::connect(&ConnectOptions {
        connect_timeout: Duration::from_secs(1),
        max_connections: 2,
        ..ConnectOptions::new(url.clone())
    })
    .await
    .expect("connect to the private server");
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicU64::new(0));
    let producer = tokio::spawn(produce(store.clone(), stop.clone(), written.clone()));
    let mut hosts: Vec<Host> = (0..3)
        .map(|i| start_host(&config, work.path(), &format!("host{i}")))
        .collect();
    let pause = Duration::from_secs(2);
    // The chaos, step by step; the producer writes throughout (each sleep is part of the test).
    tokio::time::sleep(pause).await;
    hosts[0].child.kill().expect("kill -9 host0");
    let _ = hosts[0].child.wait();
    hosts.push(start_host(&config, work.path(), "host3"));
    // The host to pause must own partitions when it stops (a host that joined beside one that
    // took every partition gets its share only once that one releases it, or its lease ends).
    wait_until("host1 owns partitions", Duration::from_secs(30), || async {
        match owned_now(&hosts[1]) {
            Some(n) if n > 0 => Ok(()),
            other => Err(other),
        }
    })
    .await;
    signal(&hosts[1], "-STOP");
    tokio::time::sleep(LEASE * 5 / 2).await;
    signal(&hosts[1], "-CONT");
    let resumed_at = outboxd::record::now_ms();
    tokio::time::sleep(pause).await;
    proxy.cut();
    tokio::time::sleep(pause).await;
    server.stop();
    tokio::time::sleep(Duration::from_secs(3)).await;
    server.spawn();
    server.wait_ready().await;
    tokio::time::sleep(pause).await;
    signal(&hosts[2], "-TERM");
    let left = hosts[2].child.wait().unwrap();
    assert!(left.success(), "host2 left with {left:?}");
    tokio::time::sleep(pause).await;
    stop.store(true, Ordering::Relaxed);
    producer.await.unwrap();
    let total = written.load(Ordering::Relaxed);

    let started = Instant::now();
    let mut last = StatusCounts::default();
    while last.delivered != total {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "not done: {last:?} of {total}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
        last = counts(&store).await.unwrap_or(last);
    }
    for host in [&hosts[1], &hosts[3]] {
        signal(host, "-TERM");
    }
    for i in [1, 3] {
        let status = hosts[i].child.wait().unwrap();
        assert!(
            status.success(),
            "host{i}: {:?}",
            std::fs::read_to_string(&hosts[i].log)
        );
    }

    let c = counts(&store).await.expect("counts");
    assert_eq!(
        (c.pending, c.delivering, c.retryable, c.failed, c.delivered),
        (0, 0, 0, 0, total),
        "0 stuck: {c:?}"
    );
    let mut per_id: HashMap<String, u64> = HashMap::new();
    let mut first_arrivals = Vec::new();
    for delivery in receiver.deliveries() {
        if !(200..300).contains(&delivery.status) {
            continue;
        }
        let count = per_id.entry(delivery.id.clone()).or_default();
        *count += 1;
        if *count == 1 {
            let event: serde_json::Value = serde_json::from_slice(&delivery.body).unwrap();
            first_arrivals.push((
                event["room_id"].as_str().unwrap().to_string(),
                event["room_version"].as_i64().unwrap(),
            ));
        }
    }
    assert_eq!(per_id.len() as u64, total, "0 lost");
    let violations = order_violations(&first_arrivals);
    assert!(violations.is_empty(), "order violations: {violations:#?}");
    let duplicates = per_id.values().sum::<u64>() - total;
    // Per fault, at most the batches a loop had published and not marked (two) on each host.
    let bound = 5 * 2 * 3 * BATCH;
    assert!(duplicates <= bound, "{duplicates} duplicates > {bound}");

    let paused = std::fs::read_to_string(&hosts[1].log).unwrap();
    assert!(
        paused.contains("partitions_lost"),
        "the paused host did not find its partitions taken over"
    );
    // Its late marks, if a batch was in flight when it stopped, show as stale.
    let stale = paused
        .lines()
        .filter(|l| l.contains("status=\"stale\""))
        .count();
    eprintln!(
        "partition chaos {kind:?}: {total} events over {ROOMS} rooms, per-room order: 0 \
         violations; kill -9, SIGSTOP for {:?} (resumed at {resumed_at}), connection cut, \
         database restart, a host leaving: 0 lost, 0 stuck, {duplicates} duplicates (bound \
         {bound}); the paused host's late marks refused: {stale}",
        LEASE * 5 / 2
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_partitions_survive_kills_pauses_and_a_restart() {
    partition_chaos(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_partitions_survive_kills_pauses_and_a_restart() {
    partition_chaos(Kind::MariaDb).await;
}
