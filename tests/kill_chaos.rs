//! Kill chaos: several real `outboxd run` processes deliver one table (with per-room ordering in
//! the bounded form) through the real webhook plugin to a real HTTP receiver (recording every delivery), while the
//! test `kill -9`s hosts (starting a replacement each time), restarts the database once, and
//! breaks the network between the hosts and the database twice through a TCP proxy it controls:
//! once every connection is cut, once every connection stalls (open, no byte moving) for longer
//! than the hosts' connect timeout. The database is a private server the test starts itself — its
//! own data dir under a temp dir and its own free port, never the shared servers: PostgreSQL
//! (`initdb` + `postgres`) and MariaDB (`mariadb-install-db` + `mariadbd`).
//!
//! Asserts: 0 lost (every event reached the receiver and its row is `delivered`), 0 stuck
//! (nothing left pending, delivering, retryable or failed), 0 order violations with per-room
//! ordering (each room's events first reached the receiver in the order they were written),
//! duplicates ≤ (kills +
//! faults) × batch size (only batches in flight when a host died or its database went away are
//! delivered twice) and, in the full form, duplicates > 0, and that the hosts logged the database
//! outage when it began and when it ended (one extra host serves a tenant with no rows, so some
//! host is claiming while the outage lasts).
//!
//! Each kill picks a host at random; a victim's partitions pass to the others once its lease
//! runs out, and what it had published but not marked is read and delivered again (no attempt
//! spent). In the full form some kill must hit a batch in flight (duplicates > 0).
//!
//! Bounded by default (the form `make test` runs: 3,000 events over 50 rooms, per-room
//! ordering); `OUTBOXD_CHAOS=full` (`make chaos`) runs 1,000,000 events over 500 rooms with 4
//! hosts and 40 kills, unordered. Without the server binaries the test prints
//! `SKIPPED …`, and fails when `CI=true`. `OUTBOXD_CHAOS_PG_BIN` overrides the PostgreSQL
//! binaries' folder. The private servers are `tests/support/private_server.rs`, the proxy
//! `tests/support/tcp_proxy.rs`.

use crate::{fixtures, fleet, http, support};

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fleet::{Host, order_violations, outboxd, start_host};
use http::WebhookReceiver;
use outboxd::record::Record;
use outboxd::store::{ConnectOptions, CountsParams, OutboxStore, StatusCounts};
use rand::Rng;
use support::private_server::{Kind, PrivateServer};
use support::tcp_proxy::TcpProxy;

/// The receiver's signing secret.
const SECRET: &str = "whsec_Y2hhb3MtdGVzdC1zZWNyZXQtMDEyMzQ1Njc4OQ==";

/// How big a run is.
#[derive(Debug, Clone, Copy)]
struct Scale {
    events: u32,
    rooms: u32,
    hosts: usize,
    kills: usize,
    batch_size: u32,
    /// Longest the whole delivery may take.
    bound: Duration,
    /// Whether the run must show duplicates (kills that hit batches in flight).
    expect_duplicates: bool,
    /// `worker.ordering = "per-room"`, and each room's events checked to arrive in order.
    per_room: bool,
    /// How often the chaos driver reads the row counts (each read counts the whole table).
    tick: Duration,
}

fn scale() -> Scale {
    if std::env::var("OUTBOXD_CHAOS").is_ok_and(|v| v == "full") {
        Scale {
            events: 1_000_000,
            rooms: 500,
            hosts: 4,
            kills: 40,
            batch_size: 200,
            bound: Duration::from_secs(540),
            expect_duplicates: true,
            per_room: true,
            // Counting a million rows takes a core for ~0.5 s: read them twice a second.
            tick: Duration::from_millis(500),
        }
    } else {
        Scale {
            events: 3_000,
            rooms: 50,
            hosts: 3,
            kills: 3,
            batch_size: 50,
            bound: Duration::from_secs(120),
            expect_duplicates: false,
            per_room: true,
            tick: Duration::from_millis(20),
        }
    }
}

/// The network faults of a run, each once: every connection cut, then every connection stalled.
const FAULTS: u64 = 2;

/// How long the stall lasts: past the hosts' 2 s connect timeout, inside their 8 s lease.
const STALL: Duration = Duration::from_secs(4);

/// The hosts' config: short lease so killed batches come back soon, deadlines nested with the
/// required margins, the webhook plugin POSTing to the receiver.
fn write_config(dir: &Path, url: &str, receiver: &WebhookReceiver, scale: Scale) -> PathBuf {
    let path = dir.join("outboxd.toml");
    let text = format!(
        r#"
[database]
url = "{url}"
max_connections = 4
connect_timeout = "2s"

[worker]
ordering = "{ordering}"
batch_size = {batch}
poll_interval = "100ms"
lease = "8s"
publish_timeout = "3s"
concurrency = 1

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
        batch = scale.batch_size,
        ordering = if scale.per_room { "per-room" } else { "none" },
        cache = dir.join("cache").display(),
        plugin = fixtures::plugin("webhook").display(),
        hook = receiver.url(),
        addr = receiver.addr(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

fn run_ok(command: &mut Command) {
    let output = command.output().expect("spawn outboxd");
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
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

/// Writes `scale.events` events spread over `scale.rooms` rooms, each room's `room_version`
/// counting up in the order its events are written (and claimed: one build time per chunk, ids
/// of one millisecond counting up), in chunks of 1000 rows.
async fn enqueue(store: &Arc<dyn OutboxStore>, scale: Scale) {
    let mut versions = vec![0i64; scale.rooms as usize];
    for chunk in (0..scale.events).collect::<Vec<_>>().chunks(1000) {
        let now = std::time::SystemTime::now();
        let records: Vec<Record> = chunk
            .iter()
            .map(|i| {
                let room = (i % scale.rooms) as usize;
                versions[room] += 1;
                let mut record = Record::build(
                    format!("room-{room}"),
                    "RoomGiftSent",
                    versions[room],
                    now,
                    &(),
                );
                record.envelope.body = format!("gift {i}").into_bytes();
                record
            })
            .collect();
        store.enqueue(&records).await.expect("enqueue a chunk");
    }
}

async fn kill_chaos(kind: Kind) {
    let scale = scale();
    // The full form's million rows need the table in memory, as production would size it.
    let server = if scale.events > 100_000 {
        PrivateServer::large(kind).await
    } else {
        PrivateServer::start(kind).await
    };
    let Some(mut server) = server else {
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let receiver = WebhookReceiver::start(&[SECRET]).await;
    // The hosts reach the database through the proxy; the test's own connection goes direct.
    let proxy = TcpProxy::start(format!("127.0.0.1:{}", server.port).parse().unwrap()).await;
    let url = server.url();
    let proxied_url = url.replace(
        &format!(":{}/", server.port),
        &format!(":{}/", proxy.port()),
    );
    assert_ne!(url, proxied_url);
    let config = write_config(work.path(), &proxied_url, &receiver, scale);
    run_ok(outboxd(&config).arg("migrate"));

    let mut hosts: Vec<Host> = (0..scale.hosts)
        .map(|i| start_host(&config, work.path(), &format!("host{i}-0")))
        .collect();
    // One more host serving a tenant with no rows: it claims every poll interval, so it sees the
    // outage however busy the others are (a host stuck marking retries inside the store).
    let mut observer = {
        let log = work.path().join("observer.log");
        let child = outboxd(&config)
            .arg("run")
            .env("OUTBOXD_WORKER_NODE_ID", "observer")
            .env("OUTBOXD_WORKER_APP_CODES", "quiet-tenant")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start the observer host");
        Host { child, log }
    };
    let mut all_logs: Vec<PathBuf> = hosts.iter().map(|h| h.log.clone()).collect();
    all_logs.push(observer.log.clone());

    let store = outboxd::store::connect(&ConnectOptions {
        connect_timeout: Duration::from_secs(1),
        max_connections: 2,
        ..ConnectOptions::new(url.clone())
    })
    .await
    .expect("connect to the private server");
    let enqueue_started = Instant::now();
    enqueue(&store, scale).await;
    let enqueued = enqueue_started.elapsed();

    let started = Instant::now();
    let total = u64::from(scale.events);
    // Kill k happens once (k / (kills + 2)) of the events are delivered; the connections are cut
    // after a quarter of the kills, the database restarts after half of them, and the connections
    // stall after three quarters.
    let steps = scale.kills as u64 + 2;
    let mut kills = 0;
    let mut supervisor_restarts = 0;
    let (mut cut, mut restarted, mut stalled) = (false, false, false);
    let mut rng = rand::rng();
    let mut last = StatusCounts::default();
    loop {
        if let Some(now) = counts(&store).await {
            last = now;
        }
        if last.delivered == total {
            break;
        }
        assert!(
            started.elapsed() < scale.bound,
            "not done after {:?}: {last:?} (kills {kills}, cut {cut}, restarted {restarted}, \
             stalled {stalled})",
            scale.bound
        );
        let due = kills < scale.kills && last.delivered * steps >= total * (kills as u64 + 1);
        if due {
            let victim = rng.random_range(0..hosts.len());
            let host = &mut hosts[victim];
            host.child.kill().expect("kill -9 a host");
            let _ = host.child.wait();
            kills += 1;
            let name = format!("host{victim}-{kills}");
            let replacement = start_host(&config, work.path(), &name);
            all_logs.push(replacement.log.clone());
            hosts[victim] = replacement;
        }
        // A host that started while the database was down exits 1 at start-up: it cannot open
        // the database ("cannot open database …: Connection refused"), or the connection it
        // opened broke under its first statement ("error communicating with database"). Start
        // it again, as a supervisor would; any other exit fails the test.
        for (slot, host) in hosts.iter_mut().enumerate() {
            if let Ok(Some(status)) = host.child.try_wait() {
                let log = std::fs::read_to_string(&host.log).unwrap_or_default();
                let database_gone = log.contains("error: cannot open database")
                    || log.contains("error communicating with database");
                assert!(
                    status.code() == Some(1) && database_gone,
                    "host {slot} exited with {status:?}: {log}"
                );
                supervisor_restarts += 1;
                let name = format!("host{slot}-r{supervisor_restarts}");
                *host = start_host(&config, work.path(), &name);
                all_logs.push(host.log.clone());
            }
        }
        if !cut && kills * 4 >= scale.kills {
            cut = true;
            proxy.cut();
        }
        if !restarted && kills * 2 >= scale.kills {
            restarted = true;
            server.stop();
            // The outage is part of the test: down for 3 s, long enough for every host to meet
            // it (its pool's connect timeout is 2 s).
            tokio::time::sleep(Duration::from_secs(3)).await;
            server.spawn();
            server.wait_ready().await;
        }
        if !stalled && kills * 4 >= scale.kills * 3 {
            stalled = true;
            proxy.stall(true);
            // The stall is the fault under test: connections stay open and silent this long.
            tokio::time::sleep(STALL).await;
            proxy.stall(false);
        }
        // The chaos driver's tick: it reads the counts and acts on them (part of the test).
        tokio::time::sleep(scale.tick).await;
    }
    let elapsed = started.elapsed();
    assert_eq!(kills, scale.kills, "every kill happened before the end");
    assert!(
        cut && restarted && stalled,
        "every fault happened before the end"
    );

    // Stop the hosts cleanly: SIGTERM, exit status 0.
    for host in hosts.iter().chain([&observer]) {
        let _ = Command::new("kill")
            .args(["-TERM", &host.child.id().to_string()])
            .status();
    }
    for host in hosts.iter_mut().chain([&mut observer]) {
        let status = host.child.wait().unwrap();
        assert!(
            status.success(),
            "host exited with {status:?}: {}",
            std::fs::read_to_string(&host.log).unwrap_or_default()
        );
    }

    let c = counts(&store).await.expect("counts");
    assert_eq!(
        (c.pending, c.delivering, c.retryable, c.failed, c.delivered),
        (0, 0, 0, 0, total),
        "0 stuck: {c:?}"
    );
    let mut per_id: HashMap<String, u64> = HashMap::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut first_arrivals: Vec<(String, i64)> = Vec::with_capacity(scale.events as usize);
    for delivery in receiver.deliveries() {
        if !(200..300).contains(&delivery.status) {
            continue;
        }
        *per_id.entry(delivery.id.clone()).or_default() += 1;
        if seen.insert(delivery.id) {
            let event: serde_json::Value =
                serde_json::from_slice(&delivery.body).expect("a JSON webhook body");
            first_arrivals.push((
                event["room_id"].as_str().expect("room_id").to_string(),
                event["room_version"].as_i64().expect("room_version"),
            ));
        }
    }
    assert_eq!(
        per_id.len() as u64,
        total,
        "0 lost: every event reached the receiver"
    );
    if scale.per_room {
        let violations = order_violations(&first_arrivals);
        assert!(violations.is_empty(), "order violations: {violations:#?}");
    }
    let deliveries: u64 = per_id.values().sum();
    let duplicates = deliveries - total;
    let bound = (kills as u64 + FAULTS + 1) * u64::from(scale.batch_size);
    assert!(
        duplicates <= bound,
        "{duplicates} duplicates > (kills + faults + restart) × batch size = {bound}"
    );
    if scale.expect_duplicates {
        assert!(
            duplicates > 0,
            "no duplicates: the kills hit no batch in flight"
        );
    }
    assert!(receiver.rejected().is_empty(), "{:?}", receiver.rejected());
    let logs: String = all_logs
        .iter()
        .map(|path| std::fs::read_to_string(path).unwrap_or_default())
        .collect();
    let errors: Vec<&str> = logs
        .lines()
        .filter(|line| line.contains("ERROR") || line.contains("WARN"))
        .take(20)
        .collect();
    assert!(
        logs.contains("database unreachable"),
        "no host logged the outage's start; errors logged: {errors:#?}"
    );
    assert!(
        logs.contains("database reachable again"),
        "no host logged the outage's end"
    );
    eprintln!(
        "kill chaos {kind:?}: {total} events over {} rooms ({}), {} hosts, \
         {kills} kill -9s, 1 connection cut, 1 stall of {STALL:?}, 1 database restart; \
         enqueued in {enqueued:.1?}, delivered in {elapsed:.1?} ({:.0} events/s): 0 lost, \
         0 stuck, {duplicates} duplicates (bound {bound}); \
         {supervisor_restarts} hosts restarted after failing to connect during the outage; \
         {} connections through the proxy",
        scale.rooms,
        if scale.per_room {
            "per-room order: 0 violations"
        } else {
            "unordered"
        },
        scale.hosts,
        total as f64 / elapsed.as_secs_f64(),
        proxy.accepted()
    );
    store.close().await;
}

#[test]
fn order_violations_are_found_per_room() {
    let arrivals = |list: &[(&str, i64)]| -> Vec<(String, i64)> {
        list.iter().map(|(r, v)| (r.to_string(), *v)).collect()
    };
    assert!(order_violations(&arrivals(&[("a", 1), ("b", 1), ("a", 2), ("b", 2)])).is_empty());
    assert_eq!(order_violations(&arrivals(&[("a", 2), ("a", 1)])).len(), 2);
    assert_eq!(order_violations(&arrivals(&[("a", 1), ("a", 3)])).len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_survives_kills_and_a_restart() {
    kill_chaos(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_survives_kills_and_a_restart() {
    kill_chaos(Kind::MariaDb).await;
}
