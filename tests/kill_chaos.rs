//! Kill chaos: several real `outboxd run` processes deliver one table through the real webhook
//! plugin to a real HTTP receiver (counting deliveries per event id), while the test `kill -9`s
//! hosts at random (starting a replacement each time) and restarts the database once. The
//! database is a private server the test starts itself — its own data dir under a temp dir and
//! its own free port, never the shared servers: PostgreSQL 15 (`initdb` + `postgres`) and
//! MariaDB (`mariadb-install-db` + `mariadbd`).
//!
//! Asserts: 0 lost (every event reached the receiver and its row is `delivered`), 0 stuck
//! (nothing left pending, delivering, retryable or failed), duplicates ≤ kills × batch size
//! (only the batches of killed hosts are delivered twice), and that the hosts logged the
//! database outage when it began and when it ended (one extra host serves a tenant with no rows,
//! so some host is claiming while the outage lasts).
//!
//! Bounded by default (the form `make test` runs); `OUTBOXD_CHAOS=full` (`make chaos`) runs the
//! bigger form. Without the server binaries the test prints `SKIPPED …`, and fails when
//! `CI=true`. `OUTBOXD_CHAOS_PG_BIN` overrides the PostgreSQL binaries' folder. The private
//! servers are `tests/support/private_server.rs`.

mod fixtures;
mod http;
mod support;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use http::WebhookReceiver;
use outboxd::store::{ConnectOptions, CountsParams, OutboxStore, StatusCounts};
use rand::Rng;
use support::private_server::{Kind, PrivateServer};

/// The receiver's signing secret.
const SECRET: &str = "whsec_Y2hhb3MtdGVzdC1zZWNyZXQtMDEyMzQ1Njc4OQ==";

/// How big a run is.
#[derive(Debug, Clone, Copy)]
struct Scale {
    events: u32,
    hosts: usize,
    kills: usize,
    batch_size: u32,
    /// Longest the whole delivery may take.
    bound: Duration,
}

fn scale() -> Scale {
    if std::env::var("OUTBOXD_CHAOS").is_ok_and(|v| v == "full") {
        Scale {
            events: 20_000,
            hosts: 4,
            kills: 8,
            batch_size: 200,
            bound: Duration::from_secs(300),
        }
    } else {
        Scale {
            events: 3_000,
            hosts: 3,
            kills: 3,
            batch_size: 50,
            bound: Duration::from_secs(90),
        }
    }
}

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
        cache = dir.join("cache").display(),
        plugin = fixtures::plugin("webhook").display(),
        hook = receiver.url(),
        addr = receiver.addr(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// One `outboxd run` process, logging to its own file.
struct Host {
    child: Child,
    log: PathBuf,
}

fn outboxd(config: &Path) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outboxd"));
    command
        .env_remove("OUTBOXD_DATABASE_URL")
        // Several hosts at once: no admin listener on the fixed default port.
        .env("OUTBOXD_ADMIN_LISTEN", "")
        .env("RUST_LOG", "info")
        .arg("--config")
        .arg(config);
    command
}

fn start_host(config: &Path, dir: &Path, name: &str) -> Host {
    let log = dir.join(format!("{name}.log"));
    let child = outboxd(config)
        .args(["run"])
        .env("OUTBOXD_WORKER_NODE_ID", name)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start outboxd run");
    Host { child, log }
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

async fn kill_chaos(kind: Kind) {
    let Some(mut server) = PrivateServer::start(kind).await else {
        return;
    };
    let scale = scale();
    let work = tempfile::tempdir().unwrap();
    let receiver = WebhookReceiver::start(&[SECRET]).await;
    let url = server.url();
    let config = write_config(work.path(), &url, &receiver, scale);
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
    run_ok(outboxd(&config).args([
        "enqueue",
        "--room",
        "room-1",
        "--type",
        "RoomGiftSent",
        "--count",
        &scale.events.to_string(),
    ]));

    let store = outboxd::store::connect(&ConnectOptions {
        connect_timeout: Duration::from_secs(1),
        ..ConnectOptions::new(url.clone())
    })
    .await
    .expect("connect to the private server");
    let started = Instant::now();
    let total = u64::from(scale.events);
    // Kill k happens once (k / (kills + 2)) of the events are delivered; the database restarts
    // after the first half of the kills.
    let steps = scale.kills as u64 + 2;
    let mut kills = 0;
    let mut supervisor_restarts = 0;
    let mut restarted = false;
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
            "not done after {:?}: {last:?} (kills {kills}, restarted {restarted})",
            scale.bound
        );
        if kills < scale.kills && last.delivered * steps >= total * (kills as u64 + 1) {
            let victim = rng.random_range(0..hosts.len());
            let host = &mut hosts[victim];
            host.child.kill().expect("kill -9 a host");
            let _ = host.child.wait();
            kills += 1;
            let replacement = start_host(&config, work.path(), &format!("host{victim}-{kills}"));
            all_logs.push(replacement.log.clone());
            hosts[victim] = replacement;
        }
        // A host that started while the database was down exits 1 ("cannot open database …:
        // Connection refused"); start it again, as a supervisor would.
        for (slot, host) in hosts.iter_mut().enumerate() {
            if let Ok(Some(status)) = host.child.try_wait() {
                let log = std::fs::read_to_string(&host.log).unwrap_or_default();
                assert!(
                    status.code() == Some(1) && log.contains("error: cannot open database"),
                    "host {slot} exited with {status:?}: {log}"
                );
                supervisor_restarts += 1;
                let name = format!("host{slot}-r{supervisor_restarts}");
                *host = start_host(&config, work.path(), &name);
                all_logs.push(host.log.clone());
            }
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
        // The chaos driver's tick: it reads the counts and acts on them (part of the test).
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let elapsed = started.elapsed();
    assert_eq!(kills, scale.kills, "every kill happened before the end");
    assert!(restarted);

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
    for delivery in receiver.deliveries() {
        if (200..300).contains(&delivery.status) {
            *per_id.entry(delivery.id).or_default() += 1;
        }
    }
    assert_eq!(
        per_id.len() as u64,
        total,
        "0 lost: every event reached the receiver"
    );
    let deliveries: u64 = per_id.values().sum();
    let duplicates = deliveries - total;
    let bound = kills as u64 * u64::from(scale.batch_size);
    assert!(
        duplicates <= bound,
        "{duplicates} duplicates > kills × batch size = {bound}"
    );
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
        "kill chaos {kind:?}: {total} events, {} hosts, {kills} kill -9s, 1 database restart, \
         {elapsed:.1?}: 0 lost, 0 stuck, {duplicates} duplicates (bound {bound}); \
         {supervisor_restarts} hosts restarted after failing to connect during the outage",
        scale.hosts
    );
    store.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_survives_kills_and_a_restart() {
    kill_chaos(Kind::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mariadb_survives_kills_and_a_restart() {
    kill_chaos(Kind::MariaDb).await;
}
