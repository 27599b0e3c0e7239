//! End-to-end tests of the `outboxd-bench` binary: each mode (throughput with the raw SQL loops
//! and the yardstick, latency with its trace, retention, history scaling) runs on a fresh
//! database and its report says what it measured (the modes cannot rot unnoticed).

#[path = "../../tests/fixtures/mod.rs"]
mod fixtures;
#[path = "../../tests/support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use support::{Backend, TestDb};

fn outboxd_bench() -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_outboxd-bench"));
    command
        .env_remove("OUTBOXD_DATABASE_URL")
        .env("OUTBOXD_ADMIN_LISTEN", "")
        // sqlx's statement log: a run that hangs shows the statements it ran last.
        .env("RUST_LOG", "info,sqlx=debug");
    command
}

/// A config file routing everything to the log plugin, with `worker.batch_size` 500 and
/// `worker.concurrency` 2.
fn write_config(dir: &Path) -> PathBuf {
    let path = dir.join("outboxd.toml");
    let text = format!(
        r#"
[worker]
app_codes = ["default"]
batch_size = 500
poll_interval = "50ms"
concurrency = 2

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
        cache = dir.join("cache").display(),
        plugin = fixtures::plugin("log").display(),
    );
    std::fs::write(&path, text).unwrap();
    path
}

/// `outboxd-bench --config CONFIG --database-url URL`, ready for the benchmark's flags.
fn with(config: &Path, url: &str) -> Command {
    let mut command = outboxd_bench();
    command
        .arg("--config")
        .arg(config)
        .args(["--database-url", url]);
    command
}

/// How long one `outboxd-bench` run may take: the slowest mode here takes ~20 s in a debug
/// build on a busy machine; a run past this hangs, and fails with its threads' backtraces.
const RUN_DEADLINE: Duration = Duration::from_secs(120);

fn run_ok(command: &mut Command) -> Output {
    let output = support::output_within(command, RUN_DEADLINE);
    assert!(
        output.status.success(),
        "{command:?} failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

/// The rows of `table` in the SQLite database `url` counted by status, in status order.
fn status_counts(url: &str, table: &str) -> Vec<(String, u64)> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        use sqlx::{Connection as _, Row as _};
        let mut conn = sqlx::SqliteConnection::connect(url).await.unwrap();
        let sql = format!("SELECT status, COUNT(*) FROM {table} GROUP BY status ORDER BY status");
        sqlx::query(sqlx::AssertSqlSafe(sql))
            .fetch_all(&mut conn)
            .await
            .unwrap()
            .iter()
            .map(|row| (row.get::<String, _>(0), row.get::<i64, _>(1) as u64))
            .collect()
    })
}

/// The report line of `shape` in `outboxd-bench`'s output, split into columns.
fn bench_line<'a>(stdout: &'a str, shape: &str) -> Vec<&'a str> {
    stdout
        .lines()
        .map(|line| line.split_whitespace().collect::<Vec<_>>())
        .find(|columns| columns.first() == Some(&shape))
        .unwrap_or_else(|| panic!("no {shape:?} line in:\n{stdout}"))
}

/// One shape's line of `outboxd-bench`'s throughput report.
#[derive(Debug)]
struct BenchRow {
    shape: String,
    batch: u32,
    workers: u32,
    events: u32,
    enqueue_rate: f64,
    drain_s: f64,
    drain_rate: f64,
    /// The printed ratios: `vs raw`, `vs 1idx` (`None`: `-`).
    ratios: [Option<f64>; 2],
    /// The drain's CPU: cores busy, µs per event of the machine and of the bench (`None`: `-`,
    /// a drain too short to count).
    cpu: [Option<f64>; 3],
}

/// The shapes the ratio columns compare with, in column order.
const BENCH_BASES: [&str; 2] = ["raw", "raw-1idx"];

/// Parses the throughput report in `stdout` and checks it says what it measured: the shapes are
/// `shapes` in order, each delivered `events` events; its rates are finite and positive and its
/// drain rate is `events` over its drain time (as far as the printed rounding tells); and every
/// ratio column holds the shape's drain rate over its base shape's (`raw`, `raw-1idx`),
/// recomputed from the printed rates and compared with the printed two decimals, or `-` when
/// the base shape did not run.
fn check_bench_report(stdout: &str, shapes: &[&str], events: u32) -> Vec<BenchRow> {
    let mut lines = stdout.lines().skip_while(|l| !l.starts_with("shape "));
    let header: Vec<&str> = lines
        .next()
        .unwrap_or_else(|| panic!("no report header in:\n{stdout}"))
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "shape", "batch", "workers", "events", "enqueue", "ev/s", "drain", "s", "drain",
            "ev/s", "vs", "raw", "vs", "1idx", "cores", "cpu", "us/ev", "own", "us/ev"
        ],
        "{stdout}"
    );
    let number = |column: &str, text: &str| -> f64 {
        let value: f64 = text
            .parse()
            .unwrap_or_else(|_| panic!("{column} {text:?} is not a number:\n{stdout}"));
        assert!(
            value.is_finite() && value >= 0.0,
            "{column} {text}:\n{stdout}"
        );
        value
    };
    let rows: Vec<BenchRow> = lines
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .take_while(|columns| columns.len() == 12)
        .map(|c| BenchRow {
            shape: c[0].to_string(),
            batch: c[1].parse().unwrap(),
            workers: c[2].parse().unwrap(),
            events: c[3].parse().unwrap(),
            enqueue_rate: number("enqueue ev/s", c[4]),
            drain_s: number("drain s", c[5]),
            drain_rate: number("drain ev/s", c[6]),
            ratios: [c[7], c[8]].map(|ratio| {
                (ratio != "-").then(|| {
                    let value = ratio
                        .strip_suffix('x')
                        .unwrap_or_else(|| panic!("ratio {ratio:?} does not end in x:\n{stdout}"));
                    number("ratio", value)
                })
            }),
            cpu: [c[9], c[10], c[11]].map(|cell| (cell != "-").then(|| number("cpu", cell))),
        })
        .collect();
    let names: Vec<&str> = rows.iter().map(|r| r.shape.as_str()).collect();
    assert_eq!(names, shapes, "{stdout}");
    for row in &rows {
        let shape = &row.shape;
        assert_eq!(row.events, events, "{shape}: events:\n{stdout}");
        assert!(
            row.enqueue_rate > 0.0 && row.drain_rate > 0.0,
            "{shape}: rates:\n{stdout}"
        );
        // drain ev/s = events / drain s: the printed drain time is to 0.005 s, the rate to 0.5.
        let events = f64::from(events);
        let slowest = events / (row.drain_s + 0.005) - 0.5;
        let fastest = if row.drain_s > 0.005 {
            events / (row.drain_s - 0.005) + 0.5
        } else {
            f64::INFINITY
        };
        assert!(
            (slowest..=fastest).contains(&row.drain_rate),
            "{shape}: {} ev/s is not {events} events in {} s:\n{stdout}",
            row.drain_rate,
            row.drain_s
        );
        // CPU: all three figures or none, none for a drain shorter than 0.2 s (/proc counts in
        // 10 ms ticks); a process's own CPU is part of the machine's (to a tick per core).
        let counted = row.cpu.iter().filter(|c| c.is_some()).count();
        assert!(
            counted == 0 || counted == 3,
            "{shape}: cpu {:?}:\n{stdout}",
            row.cpu
        );
        if row.drain_s < 0.195 {
            assert_eq!(
                counted, 0,
                "{shape}: cpu of a {} s drain:\n{stdout}",
                row.drain_s
            );
        }
        if let [Some(_), Some(machine), Some(own)] = row.cpu {
            let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
            let tick_per_event = cores * 0.01 * 1e6 / events;
            assert!(own <= machine + tick_per_event, "{shape}: cpu:\n{stdout}");
        }
        for (base, printed) in BENCH_BASES.iter().zip(row.ratios) {
            let Some(base_row) = rows.iter().find(|r| r.shape == *base) else {
                assert_eq!(
                    printed, None,
                    "{shape} vs {base}, which did not run:\n{stdout}"
                );
                continue;
            };
            let printed =
                printed.unwrap_or_else(|| panic!("{shape}: no ratio to {base}:\n{stdout}"));
            // The printed rates are rounded to 0.5 ev/s, the printed ratio to 0.005.
            let (rate, base_rate) = (row.drain_rate, base_row.drain_rate);
            let low = (rate - 0.5) / (base_rate + 0.5) - 0.005;
            let high = if base_rate > 0.5 {
                (rate + 0.5) / (base_rate - 0.5) + 0.005
            } else {
                f64::INFINITY
            };
            assert!(
                (low - 1e-9..=high + 1e-9).contains(&printed),
                "{shape} vs {base}: printed {printed:.2}x, but {rate} / {base_rate} ev/s = {:.4}x:\n{stdout}",
                rate / base_rate
            );
        }
    }
    rows
}

/// `outboxd-bench` runs the raw SQL loops beside outboxd on the same table: every row of every
/// shape ends `delivered`, the raw loop's rows were leased by its own clients (`raw-N`, so no
/// outboxd code claimed them), the lock-held loop's rows were never leased (written once), and
/// every shape's line carries its ratio to the raw loop and to the yardstick, its drain rate over
/// theirs ([`check_bench_report`]; the yardstick `raw-1idx` is the same loop on a table of its
/// own with the primary key and one claim index only).
async fn bench_compares_every_shape_with_the_raw_loop(backend: Backend) {
    let Some(db) = TestDb::new(backend).await else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let output = run_ok(outboxd_bench().current_dir(dir.path()).args([
        "--database-url",
        &db.url,
        "--events",
        "1500",
        "--batch-size",
        "100",
        "--workers",
        "2",
        "--raw-clients",
        "3",
        "--raw-batch-size",
        "100",
        "--shapes",
        "outboxd,raw,raw-1idx,raw-held",
        "--table",
        "bench_raw_t",
    ]));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let rows = check_bench_report(&stdout, &["outboxd", "raw", "raw-1idx", "raw-held"], 1500);
    let batch_and_workers: Vec<_> = rows.iter().map(|r| (r.batch, r.workers)).collect();
    assert_eq!(
        batch_and_workers,
        [(100, 2), (100, 3), (100, 3), (100, 3)],
        "outboxd: --batch-size, --workers; the raw loops: --raw-batch-size, --raw-clients: {stdout}"
    );
    // The yardstick ran on its own table, leased by the raw loop's clients.
    let yardstick = db.rows_where("bench_raw_t_1idx", "1 = 1", &[]).await;
    assert_eq!(yardstick.len(), 1500, "{stdout}");
    assert!(yardstick.iter().all(|r| {
        r.status == "delivered"
            && r.worker_id
                .as_deref()
                .is_some_and(|w| w.starts_with("raw-"))
    }));
    let rows = db.rows_where("bench_raw_t", "1 = 1", &[]).await;
    assert_eq!(rows.len(), 3 * 1500);
    assert!(rows.iter().all(|r| r.status == "delivered"));
    let of = |shape: &str| {
        let prefix = format!("bench-{shape}-");
        let rows: Vec<_> = rows
            .iter()
            .filter(|r| {
                // `bench-<shape>-<run>-<position in --shapes>`
                r.app_code.strip_prefix(&prefix).is_some_and(|run| {
                    run.split('-')
                        .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
                })
            })
            .collect();
        assert_eq!(rows.len(), 1500, "{shape}");
        rows
    };
    assert!(
        of("raw").iter().all(|r| r
            .worker_id
            .as_deref()
            .is_some_and(|w| w.starts_with("raw-"))),
        "the raw loop leases with its own clients' worker ids"
    );
    assert!(
        of("raw-held").iter().all(|r| r.worker_id.is_none()),
        "the lock-held loop writes each row once, never leasing it"
    );
    assert!(
        of("outboxd").iter().all(|r| r.worker_id.is_none()),
        "outboxd writes each row once, and a delivered row names no host"
    );
    db.cleanup().await;
}

/// Runs `outboxd-bench ARGS` on a fresh SQLite file in a temporary folder (the folder is also
/// the working directory); its standard output.
fn bench_on_a_fresh_sqlite_file(args: &[&str]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("x.db").display());
    let output = run_ok(
        outboxd_bench()
            .current_dir(dir.path())
            .args(["--database-url", &url])
            .args(args),
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Without `--shapes` the report holds the raw loop and the yardstick, so every default run
/// prints the ratios to both;
/// without a config file or `--batch-size` / `--workers`, outboxd's runs use the host's defaults
/// (batch 1000, one loop), the raw loop its fixed yardstick (batch 500, 2 clients).
#[test]
fn bench_runs_the_raw_loop_by_default() {
    let stdout = bench_on_a_fresh_sqlite_file(&["--events", "300"]);
    check_bench_report(&stdout, &["outboxd", "per-room", "raw", "raw-1idx"], 300);
    let outboxd = bench_line(&stdout, "outboxd");
    assert_eq!(outboxd[1..3], ["1000", "1"], "{stdout}");
    let raw = bench_line(&stdout, "raw");
    assert_eq!(raw[1..4], ["500", "2", "300"], "{stdout}");
    let one_index = bench_line(&stdout, "raw-1idx");
    assert_eq!(one_index[1..4], ["500", "2", "300"], "{stdout}");
}

/// `outboxd-bench` measures what the config runs: its `worker.batch_size` and
/// `worker.concurrency`, unless the flags say otherwise.
#[test]
fn bench_takes_batch_size_and_loops_from_the_config() {
    let dir = tempfile::tempdir().unwrap();
    let config = write_config(dir.path());
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("x.db").display());
    let bench = |args: &[&str]| {
        let output = run_ok(
            with(&config, &url)
                .args(["--events", "200", "--shapes", "outboxd,raw"])
                .args(args),
        );
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    let stdout = bench(&["--table", "from_config"]);
    check_bench_report(&stdout, &["outboxd", "raw"], 200);
    assert_eq!(
        bench_line(&stdout, "outboxd")[1..3],
        ["500", "2"],
        "{stdout}"
    );
    assert_eq!(bench_line(&stdout, "raw")[1..3], ["500", "2"], "{stdout}");
    let stdout = bench(&["--table", "flags", "--batch-size", "700", "--workers", "3"]);
    assert_eq!(
        bench_line(&stdout, "outboxd")[1..3],
        ["700", "3"],
        "{stdout}"
    );
    assert_eq!(bench_line(&stdout, "raw")[1..3], ["500", "2"], "{stdout}");
}

/// `outboxd-bench --retention` end to end on a small history: the history is loaded, measured
/// quiet, then deleted by the real retention pass while claims are measured, and the report
/// says so (the benchmark mode cannot rot unnoticed).
#[test]
fn bench_retention_measures_claims_while_the_history_is_deleted() {
    let stdout = bench_on_a_fresh_sqlite_file(&[
        "--retention",
        "--history",
        "2500",
        "--window",
        "300ms",
        "--windows",
        "2",
    ]);
    for expected in [
        "history: 2500 delivered rows",
        "loader sql, after load: analyze",
        "retention.batch_size 1000 pause 100ms: deleted 2500 rows",
        ", 0 left",
        "quiet 1 ",
        "quiet 2 ",
        "cleanup 1 ",
        "cleanup all ",
        "cleanup / quiet: p50 ",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}");
    }
    assert!(!stdout.contains("quiet 3 "), "{stdout}");
}

/// `outboxd-bench --rate … --trace-slowest K` on SQLite: the report counts the rows claims passed
/// over, lists the K slowest rows with the claims and marks of their wait, and prints the
/// steady-state percentiles.
#[test]
fn bench_rate_traces_the_slowest_rows() {
    let stdout =
        bench_on_a_fresh_sqlite_file(&["--rate", "100", "--seconds", "2", "--trace-slowest", "2"]);
    assert!(stdout.contains("rows passed over by a claim"), "{stdout}");
    assert_eq!(
        stdout.matches("slow row: committed at +").count(),
        2,
        "{stdout}"
    );
    assert!(stdout.contains("marks meanwhile"), "{stdout}");
    assert!(stdout.contains("steady: "), "{stdout}");
}

/// `outboxd-bench --history-scaling` end to end on SQLite with tiny sizes: the history is grown
/// set-based in two steps, each size is measured, and the report has one row per size with its
/// ratio to the first (the mode cannot rot unnoticed).
#[test]
fn bench_history_scaling_reports_each_size() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.path().join("x.db").display());
    let output = run_ok(outboxd_bench().current_dir(dir.path()).args([
        "--database-url",
        &url,
        "--history-scaling",
        "1000,102000",
        "--rounds",
        "3",
        "--scaling-batch",
        "20",
    ]));
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        stdout.contains("claim + mark of 20 fresh rows  after load: analyze"),
        "{stdout}"
    );
    let rows: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .filter(|cols: &Vec<&str>| cols.first().is_some_and(|c| c.parse::<u64>().is_ok()))
        .collect();
    assert_eq!(rows.len(), 2, "{stdout}");
    assert_eq!(rows[0][0], "1000", "{stdout}");
    assert_eq!(rows[1][0], "102000", "{stdout}");
    // calls measured, and the first row is its own reference.
    assert_eq!(rows[0][2], "3", "{stdout}");
    assert_eq!(&rows[0][7..9], ["1.00", "1.00"], "{stdout}");
    // The history really is in the table (two load statements for the second size): 102000 old
    // rows plus (5 warm-up + 3 measured) × 20 fresh ones per size, all delivered.
    let counts = status_counts(&url, "outboxd_bench");
    assert_eq!(
        counts,
        [("delivered".to_string(), 102_000 + 2 * 8 * 20)],
        "{stdout}"
    );
}

/// `outboxd-bench --retention --loader store` still loads its history through the store (enqueue,
/// claim, mark), and the cleanup deletes all of it.
#[test]
fn bench_retention_loads_through_the_store_on_request() {
    let stdout = bench_on_a_fresh_sqlite_file(&[
        "--retention",
        "--history",
        "1200",
        "--loader",
        "store",
        "--after-load",
        "none",
        "--window",
        "200ms",
        "--windows",
        "1",
    ]);
    for expected in [
        "history: 1200 delivered rows",
        "loader store, after load: none",
        "deleted 1200 rows",
        ", 0 left",
    ] {
        assert!(stdout.contains(expected), "no {expected:?} in:\n{stdout}");
    }
}

support::per_backend!(bench_compares_every_shape_with_the_raw_loop);
