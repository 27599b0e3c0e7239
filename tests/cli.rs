//! End-to-end tests of the `outboxd` binary on SQLite, MariaDB and PostgreSQL: migrate, enqueue,
//! `run --drain` through the real log plugin, status, failed/requeue, SIGTERM, and config errors.

use crate::{fixtures, http, support};

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Output, Stdio};
use std::time::Duration;

use support::{Backend, TestDb, wait_until_blocking};

fn outboxd() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outboxd"));
    command
        .env_remove("OUTBOXD_DATABASE_URL")
        // Tests run in parallel: no admin listener on the fixed default port.
        .env("OUTBOXD_ADMIN_LISTEN", "")
        .env("RUST_LOG", "info");
    command
}

/// A config file routing everything to the log plugin (JSON lines).
fn write_config(dir: &Path, extra: &str) -> PathBuf {
    let path = dir.join("outboxd.toml");
    let text = format!(
        r#"
[worker]
app_codes = ["default"]
batch_size = 500
poll_interval = "50ms"
concurrency = 2
{extra}

[plugins]
cache_dir = "{cache}"

[[route]]
event_type = "*"
sink = "log"

[[sink]]
name = "log"
plugin = "{plugin}"
config = {{ format = "json" }}
limits = {{ log_lines_per_second = 1000000 }}
"#,
        cache = fixtures::settings().cache_dir.expect("cache dir").display(),
        plugin = fixtures::plugin("log").display(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// `slow.toml` in `dir`: app `default`, every event to one sink `slow` of the chaos guest, with
/// `worker` lines added to `[worker]` and `sink` lines (its `config`, `limits`) to the sink.
fn chaos_config(dir: &Path, worker: &str, sink: &str) -> PathBuf {
    let path = dir.join("slow.toml");
    let text = format!(
        r#"
[worker]
app_codes = ["default"]
poll_interval = "50ms"
{worker}

[plugins]
cache_dir = "{cache}"

[[route]]
event_type = "*"
sink = "slow"

[[sink]]
name = "slow"
plugin = "{plugin}"
{sink}
"#,
        cache = fixtures::settings().cache_dir.expect("cache dir").display(),
        plugin = fixtures::plugin("chaos").display(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// `outboxd --config CONFIG --database-url URL`, ready for a subcommand.
fn with(config: &Path, url: &str) -> Command {
    let mut command = outboxd();
    command
        .arg("--config")
        .arg(config)
        .args(["--database-url", url]);
    command
}

fn run_ok(command: &mut Command) -> Output {
    let output = command.output().expect("spawn outboxd");
    assert!(
        output.status.success(),
        "{command:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn status(config: &Path, url: &str) -> serde_json::Value {
    let output = run_ok(with(config, url).args(["status", "--json"]));
    serde_json::from_slice(&output.stdout).expect("status --json prints JSON")
}

/// The count of `key` (`pending`, `delivering`, …) in `status`; a panic if it is missing.
fn count(status: &serde_json::Value, key: &str) -> u64 {
    status[key]
        .as_u64()
        .unwrap_or_else(|| panic!("no count {key:?} in the status: {status}"))
}

/// `command` (an `outboxd … run`) started with stdout discarded and stderr written to `log`;
/// killed when dropped.
fn spawn_logging(command: &mut Command, log: &Path) -> KillOnDrop {
    KillOnDrop(
        command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap(),
    )
}

/// Waits (up to 30 s) until a batch is in flight: the chaos sink was called (its `chaos call N
/// with M events` line is in `log`; a read writes nothing, so the rows do not show it). Returns
/// the log so far.
fn until_a_batch_is_in_flight(log: &Path) -> String {
    wait_until_blocking("a batch in flight", Duration::from_secs(30), || {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if events_published(&text) > 0 {
            Ok(text)
        } else {
            Err(text)
        }
    })
}

/// The events the chaos sink was handed in the host log `text`: the `M` of its `chaos call N
/// with M events` lines, summed.
fn events_published(text: &str) -> u64 {
    text.lines()
        .filter_map(|line| {
            let call = &line[line.find("chaos call ")? + "chaos call ".len()..];
            let events = &call[call.find(" with ")? + " with ".len()..];
            events.split(' ').next()?.parse::<u64>().ok()
        })
        .sum()
}

/// Waits (up to `timeout`) for `child` to exit, and returns its exit status.
fn exit_within(child: &mut std::process::Child, timeout: Duration, what: &str) -> ExitStatus {
    wait_until_blocking(what, timeout, || match child.try_wait().unwrap() {
        Some(status) => Ok(status),
        None => Err("still running"),
    })
}

/// Sends `signal` (`-TERM`, `-QUIT`, …) to `pid` (a process, or `-PGID` for a process group).
fn kill(signal: &str, pid: &str) {
    assert!(
        Command::new("kill")
            .args([signal, "--", pid])
            .status()
            .unwrap()
            .success(),
        "kill {signal} {pid}"
    );
}

/// migrate → enqueue 10k → run --drain with the log plugin → every event delivered and logged.
async fn drain_10k_through_the_log_plugin(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let url = db.url.as_str();
    let base = || with(&config, url);
    run_ok(base().arg("migrate"));
    let again = run_ok(base().arg("migrate"));
    let again = String::from_utf8_lossy(&again.stdout);
    assert!(again.contains("up to date"), "{again}");
    // It says how many partitions the table has (64 on a new table; SQLite: 1).
    let partitions: u32 = again
        .split_once(" has ")
        .and_then(|(_, rest)| rest.split_once(" partitions per tenant"))
        .and_then(|(count, _)| count.parse().ok())
        .unwrap_or_else(|| panic!("migrate names the partition count: {again}"));
    assert!(
        [1, outboxd::store::DEFAULT_PARTITIONS].contains(&partitions),
        "{again}"
    );
    run_ok(base().args([
        "enqueue",
        "--room",
        "room-1",
        "--type",
        "RoomGiftSent",
        "--count",
        "6000",
        "--body-json",
        r#"{"gift":"rose"}"#,
    ]));
    run_ok(base().args([
        "enqueue",
        "--room",
        "room-2",
        "--type",
        "RoomMicChanged",
        "--count",
        "4000",
    ]));
    assert_eq!(status(&config, url)["pending"], 10_000);
    let output = run_ok(base().args(["run", "--drain"]));
    let log = String::from_utf8_lossy(&output.stderr);
    assert!(
        !log.contains('\u{1b}'),
        "text logs to a pipe carry no ANSI colour codes"
    );
    // The start says what this host took: every partition, one host.
    assert!(
        log.lines().any(|l| l.contains("partitions rebalanced")
            && l.contains(&format!("owned={partitions} share={partitions} hosts=1"))),
        "the host says it took every partition: {log:.2000}"
    );
    assert!(log.contains("worker started"), "{log:.2000}");
    let gift_lines = log.lines().filter(|l| l.contains("RoomGiftSent")).count();
    let mic_lines = log.lines().filter(|l| l.contains("RoomMicChanged")).count();
    assert_eq!(
        (gift_lines, mic_lines),
        (6_000, 4_000),
        "one log line per event"
    );
    let s = status(&config, url);
    assert_eq!(s["delivered"], 10_000, "{s}");
    assert_eq!(s["pending"], 0);
    assert_eq!(s["delivering"], 0);
    assert!(s["oldest_pending_age_ms"].is_null());
}

/// An event type no route takes goes to failed; after fixing the config, requeue delivers it.
async fn no_route_fails_then_requeue_delivers(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = db.url.as_str();
    let narrow = dir.path().join("narrow.toml");
    std::fs::write(
        &narrow,
        std::fs::read_to_string(write_config(dir.path(), ""))
            .unwrap()
            .replace(r#"event_type = "*""#, r#"event_type = "RoomGift*""#),
    )
    .unwrap();
    let wide = write_config(dir.path(), "");
    run_ok(with(&narrow, url).arg("migrate"));
    run_ok(with(&narrow, url).args([
        "enqueue",
        "--room",
        "r",
        "--type",
        "RoomGiftSent",
        "--count",
        "3",
    ]));
    run_ok(with(&narrow, url).args([
        "enqueue",
        "--room",
        "r",
        "--type",
        "RoomRankChanged",
        "--count",
        "5",
    ]));
    run_ok(with(&narrow, url).args(["run", "--drain"]));
    let s = status(&narrow, url);
    assert_eq!(
        (s["delivered"].as_u64(), s["failed"].as_u64()),
        (Some(3), Some(5)),
        "{s}"
    );
    let listed = run_ok(with(&narrow, url).args(["failed", "list", "--json"]));
    let rows: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(rows.as_array().unwrap().len(), 5);
    assert!(
        rows[0]["last_error"]
            .as_str()
            .unwrap()
            .contains("no route for event type"),
        "{rows}"
    );
    let dry = run_ok(with(&wide, url).args(["requeue", "--type", "RoomRankChanged", "--dry-run"]));
    assert!(String::from_utf8_lossy(&dry.stdout).contains("5 failed rows would be requeued"));
    assert_eq!(status(&wide, url)["failed"], 5);
    let refused = with(&wide, url).arg("requeue").output().unwrap();
    assert!(
        !refused.status.success(),
        "requeue without a filter needs --all"
    );
    // In chunks of 2 (three transactions), with a progress line when stderr is not a terminal.
    let requeued =
        run_ok(with(&wide, url).args(["requeue", "--type", "RoomRankChanged", "--chunk", "2"]));
    assert!(
        String::from_utf8_lossy(&requeued.stdout).contains("requeued 5 failed rows"),
        "{requeued:?}"
    );
    assert!(
        String::from_utf8_lossy(&requeued.stderr).contains("requeue progress"),
        "{requeued:?}"
    );
    run_ok(with(&wide, url).args(["run", "--drain"]));
    let s = status(&wide, url);
    assert_eq!(
        (s["delivered"].as_u64(), s["failed"].as_u64()),
        (Some(8), Some(0)),
        "{s}"
    );
}

/// SIGTERM during a run, sent while a batch is in flight (its sink takes 1.5 s a call): the
/// batches in flight are finished and marked (every event the sink was handed is delivered),
/// exit status 0, nothing left delivering, nothing lost.
async fn sigterm_finishes_in_flight_and_exits_zero(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = chaos_config(
        dir.path(),
        "batch_size = 500",
        r#"config = { delay_ms = "1500" }"#,
    );
    let url = db.url.as_str();
    let base = || with(&config, url);
    run_ok(base().arg("migrate"));
    run_ok(base().args([
        "enqueue",
        "--room",
        "r",
        "--type",
        "RoomGiftSent",
        "--count",
        "3000",
    ]));
    let log = dir.path().join("stderr.log");
    let mut child = spawn_logging(base().arg("run").env("OUTBOXD_ADMIN_LISTEN", ""), &log);
    let in_flight = events_published(&until_a_batch_is_in_flight(&log));
    let child = &mut child.0;
    kill("-TERM", &child.id().to_string());
    let exit = exit_within(
        child,
        Duration::from_secs(30),
        "outboxd stops after SIGTERM",
    );
    assert!(exit.success(), "exit status {exit:?}");
    let s = status(&config, url);
    assert_eq!(count(&s, "delivering"), 0, "{s}");
    let delivered = count(&s, "delivered");
    // Every event handed to the sink (the batch in flight at the SIGTERM among them) was marked
    // delivered.
    let published = events_published(&std::fs::read_to_string(&log).unwrap());
    assert!(
        published >= in_flight,
        "{published} events published, {in_flight} at the SIGTERM"
    );
    assert_eq!(
        delivered, published,
        "a batch in flight was not finished: {in_flight} events published at the SIGTERM, after {s}"
    );
    assert_eq!(delivered + count(&s, "pending"), 3000, "{s}");
}

/// The signing secret of the crash guard's webhook receiver.
const GUARD_SECRET: &str = "whsec_Y3Jhc2gtZ3VhcmQtdGVzdC1zZWNyZXQtMDEyMzQ1Njc=";

/// A row that kills every host publishing it: the test `kill -9`s the host the moment its
/// webhook request for `poison` arrives (the receiver holds it), and starts another, as a
/// supervisor restarts a crashed service. The crash guard finds the row within log2(batch) + 1
/// kills (batches of 4, 2, then 1 row of the dead hosts' window) and puts it in `failed` without
/// publishing it again; every other row is delivered.
async fn a_row_that_kills_its_host_ends_failed_by_the_crash_guard(backend: Backend) {
    const BATCH: u32 = 8;
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let receiver = http::WebhookReceiver::start(&[GUARD_SECRET]).await;
    receiver.hold("poison");
    let config = dir.path().join("guard.toml");
    std::fs::write(
        &config,
        format!(
            r#"
[worker]
app_codes = ["default"]
batch_size = {BATCH}
concurrency = 1
poll_interval = "50ms"
lease = "4s"
publish_timeout = "3s"

[plugins]
cache_dir = "{cache}"

[[route]]
event_type = "*"
sink = "hook"

[[sink]]
name = "hook"
plugin = "{plugin}"
config = {{ url = "{hook}", secret = "{GUARD_SECRET}", timeout_ms = "1000" }}
limits = {{ publish_timeout = "2s", allow_hosts = ["http://{addr}"] }}
"#,
            cache = fixtures::settings().cache_dir.expect("cache dir").display(),
            plugin = fixtures::plugin("webhook").display(),
            hook = receiver.url(),
            addr = receiver.addr(),
        ),
    )
    .unwrap();
    let url = db.url.as_str();
    run_ok(with(&config, url).arg("migrate"));
    // 24 events of one room (one partition), the poison the 14th by write order: the first
    // batch goes out, the second holds it.
    let ids: Vec<String> = (0..24)
        .map(|n| {
            if n == 13 {
                "poison".to_string()
            } else {
                format!("e{n:02}")
            }
        })
        .collect();
    let records: Vec<_> = ids
        .iter()
        .enumerate()
        .map(|(n, id)| support::record("default", id, "room-1", 1_000 + n as i64))
        .collect();
    db.store_default().await.enqueue(&records).await.unwrap();
    let mut kills = 0;
    let host = loop {
        let log = dir.path().join(format!("host-{kills}.log"));
        let mut host = spawn_logging(with(&config, url).arg("run"), &log);
        let held_before = receiver.held();
        // The poison's request held (then the host dies), or the row failed (the guard).
        let poisoned = wait_until_blocking(
            "the poison's request, or its row failed",
            Duration::from_secs(30),
            || {
                if receiver.held() > held_before {
                    return Ok(true);
                }
                let failed = std::fs::read_to_string(&log)
                    .unwrap_or_default()
                    .contains("crash guard:");
                if failed {
                    Ok(false)
                } else {
                    Err(receiver.held())
                }
            },
        );
        if !poisoned {
            break host;
        }
        host.0.kill().unwrap();
        host.0.wait().unwrap();
        kills += 1;
        assert!(
            kills <= 4,
            "the guard should have found the row after log2({BATCH}) + 1 kills; log: {}",
            std::fs::read_to_string(&log).unwrap_or_default()
        );
    };
    // The guard's host delivers the rest.
    wait_until_blocking("every other row delivered", Duration::from_secs(30), || {
        let delivered = receiver.delivered_ids();
        if delivered.len() == ids.len() - 1 {
            Ok(())
        } else {
            Err(delivered.len())
        }
    });
    let s = wait_until_blocking("every row marked", Duration::from_secs(30), || {
        let s = status(&config, url);
        if count(&s, "delivered") == ids.len() as u64 - 1 {
            Ok(s)
        } else {
            Err(s)
        }
    });
    assert_eq!(count(&s, "failed"), 1, "{s}");
    drop(host);
    let row = db.row("default", "poison").await.unwrap();
    assert_eq!(row.status, "failed");
    assert!(
        row.last_error
            .as_deref()
            .unwrap_or_default()
            .starts_with("crash guard:"),
        "{:?}",
        row.last_error
    );
    assert_eq!(receiver.delivered_count("poison"), 0);
    assert_eq!(
        receiver.held(),
        kills,
        "each kill hit the poison; none after the guard"
    );
    assert!(
        kills >= 2,
        "the first kill put the partition in the guard's care: {kills}"
    );
    let logs: String = (0..=kills)
        .map(|n| std::fs::read_to_string(dir.path().join(format!("host-{n}.log"))).unwrap())
        .collect();
    assert!(
        logs.contains("status=\"crash_guard\""),
        "the takeovers are logged: {logs}"
    );
}

/// `run` with no `[[sink]]` (no config file at all, or one without sinks) refuses to start with
/// one line saying what to configure, and leaves every row pending.
async fn run_without_a_sink_refuses_and_loses_nothing(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let url = db.url.as_str();
    let config = write_config(dir.path(), "");
    run_ok(with(&config, url).arg("migrate"));
    run_ok(with(&config, url).args([
        "enqueue",
        "--room",
        "r",
        "--type",
        "RoomGiftSent",
        "--count",
        "5",
    ]));
    let no_sink = dir.path().join("no-sink.toml");
    std::fs::write(&no_sink, "[worker]\npoll_interval = \"50ms\"\n").unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    let no_file = || {
        let mut command = outboxd();
        command.current_dir(&empty).args(["--database-url", url]);
        command
    };
    for (mut command, expected) in [
        (no_file(), "no [[sink]] configured"),
        (with(&no_sink, url), "no [[sink]] configured"),
    ] {
        let output = command.args(["run", "--drain"]).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(1), "{stderr}");
        assert!(stderr.contains(expected), "{stderr}");
        assert_eq!(
            stderr.lines().filter(|l| l.starts_with("error:")).count(),
            1,
            "{stderr}"
        );
    }
    let s = status(&config, url);
    assert_eq!(
        (s["pending"].as_u64(), s["failed"].as_u64()),
        (Some(5), Some(0)),
        "{s}"
    );
}

/// GNU `timeout` signals outboxd and then its process group: the two SIGTERMs, sent while a batch
/// is in flight, are one shutdown request: the batch is finished and marked, exit status 0.
/// SIGQUIT exits at once (131), a batch in flight or not; so does a second SIGTERM more than 2 s
/// after the first (130). Each part on its own database, so that no part sees the rows (or the
/// partitions) another left behind.
async fn a_repeated_sigterm_is_one_request(backend: Backend) {
    /// A fresh database with `rows` pending rows, and its URL.
    async fn database(backend: Backend, config: &Path, rows: &str) -> Option<TestDb> {
        let db = TestDb::new(backend).await?;
        run_ok(with(config, &db.url).arg("migrate"));
        run_ok(with(config, &db.url).args([
            "enqueue",
            "--room",
            "r",
            "--type",
            "RoomGiftSent",
            "--count",
            rows,
        ]));
        Some(db)
    }
    /// A host on `config` and `url` that never answers its sink: each publish loops until its
    /// 8 s deadline.
    fn looping(dir: &Path) -> PathBuf {
        chaos_config(
            dir,
            "",
            "config = { behaviour = \"loop\" }\nlimits = { publish_timeout = \"8s\" }",
        )
    }

    // GNU `timeout`, told to stop (SIGTERM to it), forwards the signal to outboxd and then to
    // its process group, as when its time runs out: outboxd gets two SIGTERMs.
    let slow_dir = tempfile::tempdir().unwrap();
    let slow = chaos_config(
        slow_dir.path(),
        "batch_size = 500",
        r#"config = { delay_ms = "1500" }"#,
    );
    let Some(db) = database(backend, &slow, "3000").await else {
        return;
    };
    let url = db.url.as_str();
    let log = slow_dir.path().join("stderr.log");
    let mut timeout = spawn_logging(
        Command::new("timeout")
            .args(["--preserve-status", "-s", "TERM", "120"])
            .arg(env!("CARGO_BIN_EXE_outboxd"))
            .env_remove("OUTBOXD_DATABASE_URL")
            .env("OUTBOXD_ADMIN_LISTEN", "")
            .env("RUST_LOG", "info")
            .arg("--config")
            .arg(&slow)
            .args(["--database-url", url, "run"]),
        &log,
    );
    let in_flight = events_published(&until_a_batch_is_in_flight(&log));
    kill("-TERM", &timeout.0.id().to_string());
    let exit = exit_within(
        &mut timeout.0,
        Duration::from_secs(30),
        "outboxd stops after the SIGTERMs",
    );
    assert_eq!(exit.code(), Some(0), "{exit:?}");
    let s = status(&slow, url);
    assert_eq!(count(&s, "delivering"), 0, "{s}");
    let published = events_published(&std::fs::read_to_string(&log).unwrap());
    assert!(
        published >= in_flight,
        "{published} events published, {in_flight} at the SIGTERM"
    );
    assert_eq!(
        count(&s, "delivered"),
        published,
        "a batch in flight was not finished: {in_flight} events published at the SIGTERM, after {s}"
    );

    // SIGQUIT while a batch is in flight (for 8 s): outboxd exits at once.
    let quit_dir = tempfile::tempdir().unwrap();
    let quit = looping(quit_dir.path());
    let Some(db) = database(backend, &quit, "1").await else {
        return;
    };
    let url = db.url.as_str();
    let log = quit_dir.path().join("stderr.log");
    let mut child = spawn_logging(with(&quit, url).arg("run"), &log);
    until_a_batch_is_in_flight(&log);
    kill("-QUIT", &child.0.id().to_string());
    let exit = exit_within(
        &mut child.0,
        Duration::from_secs(3),
        "outboxd exits at once on SIGQUIT",
    );
    assert_eq!(exit.code(), Some(131), "{exit:?}");

    // A second SIGTERM more than 2 s after the first, while a batch is still in flight (its
    // plugin loops until its 8 s deadline): outboxd exits at once with 130.
    let term_dir = tempfile::tempdir().unwrap();
    let term = looping(term_dir.path());
    let Some(db) = database(backend, &term, "1").await else {
        return;
    };
    let url = db.url.as_str();
    let log = term_dir.path().join("stderr.log");
    let mut child = spawn_logging(with(&term, url).arg("run"), &log);
    until_a_batch_is_in_flight(&log);
    let pid = child.0.id().to_string();
    kill("-TERM", &pid);
    // The 2.5 s between the two SIGTERMs is part of the test (more than 2 s apart).
    std::thread::sleep(Duration::from_millis(2500));
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "still finishing the looping batch"
    );
    kill("-TERM", &pid);
    let exit = exit_within(
        &mut child.0,
        Duration::from_secs(3),
        "outboxd exits at once on a second SIGTERM",
    );
    assert_eq!(exit.code(), Some(130), "{exit:?}");
}

/// An unreachable database fails every command within the connect timeout, saying why once:
/// a closed port is "Connection refused", a server that never answers is "no answer within 1s
/// (database.connect_timeout)", a missing database or an unknown user is the server's own
/// "does not exist" / "Unknown database" / "Access denied".
async fn database_errors_are_fast_and_say_why(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let closed_port = closed.local_addr().unwrap().port();
    drop(closed);
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let silent_port = silent.local_addr().unwrap().port();
    let (scheme, missing) = match backend {
        Backend::Sqlite => ("sqlite", None),
        Backend::MySql => (
            "mysql",
            Some((
                support::with_database(&db.url, "outboxd_no_such_db"),
                "Unknown database",
            )),
        ),
        Backend::Postgres => (
            "postgres",
            Some((
                support::with_database(&db.url, "outboxd_no_such_db"),
                "does not exist",
            )),
        ),
    };
    let mut cases = vec![];
    if backend == Backend::Sqlite {
        let missing_dir = "sqlite:///nonexistent-outboxd-dir/x.db".to_string();
        cases.push((missing_dir, "unable to open database file".to_string()));
    } else {
        cases.push((
            format!("{scheme}://root@127.0.0.1:{closed_port}/x"),
            "Connection refused".to_string(),
        ));
        cases.push((
            format!("{scheme}://root@127.0.0.1:{silent_port}/x"),
            "no answer within 1s (database.connect_timeout)".to_string(),
        ));
    }
    if let Some((url, expected)) = missing {
        cases.push((url, expected.to_string()));
    }
    // A user the server does not know: the server's own refusal.
    match backend {
        Backend::MySql => cases.push((
            db.url
                .replacen("://root@", "://outboxd_no_such_user:wrong@", 1),
            "Access denied".to_string(),
        )),
        Backend::Postgres => cases.push((
            db.url
                .replacen("://postgres@", "://outboxd_no_such_role@", 1),
            "role \"outboxd_no_such_role\" does not exist".to_string(),
        )),
        Backend::Sqlite => {}
    }
    for (url, expected) in cases {
        for command in ["status", "migrate"] {
            let started = std::time::Instant::now();
            let output = outboxd()
                .env("OUTBOXD_DATABASE_CONNECT_TIMEOUT", "1s")
                .args(["--database-url", &url, command])
                .output()
                .unwrap();
            let elapsed = started.elapsed();
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert_eq!(output.status.code(), Some(1), "{url} {command}: {stderr}");
            assert_eq!(
                stderr.matches(expected.as_str()).count(),
                1,
                "{url} {command}: {stderr}"
            );
            assert!(!stderr.contains("pool timed out"), "{stderr}");
            assert!(
                elapsed < Duration::from_secs(10),
                "{url} {command} took {elapsed:?}"
            );
        }
    }
    drop(silent);
}

support::per_backend!(
    drain_10k_through_the_log_plugin,
    no_route_fails_then_requeue_delivers,
    run_without_a_sink_refuses_and_loses_nothing,
    a_repeated_sigterm_is_one_request,
    database_errors_are_fast_and_say_why,
    sigterm_finishes_in_flight_and_exits_zero,
    a_row_that_kills_its_host_ends_failed_by_the_crash_guard,
);

/// A child process killed when dropped (a failing test leaves no `outboxd run` behind).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// SIGHUP reloads the sinks (one `reloaded` line) and the process keeps running; a broken
/// config on the next SIGHUP is refused with one line; SIGTERM then stops it with exit 0.
#[test]
fn sighup_reloads_and_keeps_running() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("x.db").display());
    run_ok(with(&config, &url).arg("migrate"));
    let log = dir.path().join("stderr.log");
    let child = with(&config, &url)
        .arg("run")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    // Killed if an assertion fails before the SIGTERM below.
    let mut child = KillOnDrop(child);
    let pid = child.0.id().to_string();
    let wait_for = |text: &str| {
        wait_until_blocking(
            &format!("{text:?} in stderr"),
            Duration::from_secs(30),
            || {
                let stderr = std::fs::read_to_string(&log).unwrap_or_default();
                if stderr.contains(text) {
                    Ok(stderr)
                } else {
                    Err(stderr)
                }
            },
        )
    };
    let signal = |name: &str| {
        assert!(
            Command::new("kill")
                .args([name, &pid])
                .status()
                .unwrap()
                .success()
        );
    };
    wait_for("worker started");
    signal("-HUP");
    wait_for("reloaded: 1 sinks (log), 1 routes");
    std::fs::write(&config, "[worker]\nbatch_sise = 1\n").unwrap();
    signal("-HUP");
    let stderr = wait_for("reload refused");
    assert!(stderr.contains("batch_sise"), "{stderr}");
    assert!(
        child.0.try_wait().unwrap().is_none(),
        "SIGHUP stopped outboxd"
    );
    signal("-TERM");
    let exit = exit_within(&mut child.0, Duration::from_secs(30), "exit after SIGTERM");
    assert!(exit.success(), "{exit:?}");
}

/// `OTEL_*` variables alone turn tracing on, as in every OpenTelemetry SDK: `run --drain`
/// exports a delivery span per event to the collector `OTEL_EXPORTER_OTLP_ENDPOINT` names, as
/// `OTEL_SERVICE_NAME`, before it exits; a protocol outboxd does not speak is refused by name.
#[tokio::test(flavor = "multi_thread")]
async fn the_otel_environment_alone_turns_tracing_on() {
    let collector = http::OtlpCollector::start().await;
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path(), "");
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("t.db").display());
    let endpoint = collector.endpoint();
    let output = tokio::task::spawn_blocking(move || {
        let base = || {
            let mut command = with(&config, &url);
            command
                .env("OTEL_TRACES_EXPORTER", "otlp")
                .env("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint)
                .env("OTEL_SERVICE_NAME", "relay-from-env");
            command
        };
        run_ok(base().arg("migrate"));
        run_ok(base().args([
            "enqueue",
            "--room",
            "r1",
            "--type",
            "RoomMicChanged",
            "--count",
            "50",
        ]));
        let refused = base()
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            .args(["run", "--drain"])
            .output()
            .unwrap();
        assert!(!refused.status.success());
        let stderr = String::from_utf8_lossy(&refused.stderr);
        assert!(stderr.contains("OTEL_EXPORTER_OTLP_PROTOCOL"), "{stderr}");
        run_ok(base().args(["run", "--drain"]))
    })
    .await
    .unwrap();
    assert!(output.status.success());
    let spans = collector.spans();
    let sends: std::collections::BTreeSet<String> = spans
        .iter()
        .filter(|s| s.span.name == "send log")
        .map(|s| {
            assert_eq!(s.service, "relay-from-env");
            s.attribute("messaging.message.id").unwrap()
        })
        .collect();
    assert_eq!(sends.len(), 50, "one delivery span per event: {spans:?}");
}

#[test]
fn bad_config_is_one_clear_error_naming_the_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[worker]\nbatch_sise = 10\n", "batch_sise"),
        ("[worker]\nlease = \"1s\"\n", "worker.lease"),
        (
            "[[route]]\nevent_type = \"*\"\nsink = \"im\"\n",
            "unknown sink `im`",
        ),
        (
            "[[sink]]\nname = \"log\"\nplugin = \"missing.wasm\"\n[[route]]\nevent_type = \"*\"\nsink = \"log\"\n",
            "missing.wasm",
        ),
        (
            "[worker]\nmode = \"held\"\n",
            "invalid config key `worker.mode`: \"held\" is no longer a mode",
        ),
        (
            "[worker]\nmode = \"leased\"\n",
            "invalid config key `worker.mode`: \"leased\" is no longer a mode",
        ),
    ];
    for (text, expected) in cases {
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, text).unwrap();
        let db = format!("sqlite://{}?mode=rwc", dir.path().join("x.db").display());
        let output = outboxd()
            .arg("--config")
            .arg(&path)
            .args(["--database-url", &db, "run", "--drain"])
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{text:?} accepted");
        assert!(stderr.contains(expected), "{text:?}: {stderr}");
        assert_eq!(
            stderr.lines().filter(|l| l.starts_with("error:")).count(),
            1,
            "{stderr}"
        );
    }
}

#[test]
fn unknown_database_scheme_is_refused() {
    let output = outboxd()
        .args(["--database-url", "redis://127.0.0.1", "status"])
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("unsupported database URL"));
}

/// The benchmark is a binary of its own (`outboxd-bench`, `bench/`): `outboxd bench` is an
/// unknown subcommand.
#[test]
fn bench_is_not_an_outboxd_subcommand() {
    let output = outboxd()
        .args(["bench", "--events", "10"])
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("unrecognized subcommand 'bench'"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}
