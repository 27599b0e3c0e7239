//! `outboxd-bench --console-history N`: the console's pages over a table with N rows of history.
//!
//! Loads N old `delivered` rows of one tenant set-based ([`HistoryWriter`], as `--retention`
//! does), then through the store 2,000 `failed` rows (three error texts, three event types) and
//! 1,000 `pending` ones (and `--console-backlog` more, over 500 rooms), analyzes the table, and
//! times every console page that reads the table (the events search in each of its shapes, one
//! event, the dead letters) by asking the console itself for the page ([`Console::handle`], the
//! HTML written, no HTTP), `--rounds` times each.
//! Then prints each of the console's statements with its plan (PostgreSQL `EXPLAIN (ANALYZE,
//! BUFFERS)`, MariaDB/MySQL `ANALYZE`, SQLite `EXPLAIN QUERY PLAN`).

use std::str::FromStr as _;
use std::time::{Duration, Instant, SystemTime};

use anyhow::Context as _;
use sqlx::{ConnectOptions as _, Row as _};

use crate::args::BenchArgs;
use crate::history::HistoryWriter;
use outboxd::config::Config;
use outboxd::console::{Console, ConsoleParts, ConsoleRequest};
use outboxd::metrics::Metrics;
use outboxd::monitor::StatusSnapshot;
use outboxd::plugin::SinkControls;
use outboxd::record::{Record, now_ms};
use outboxd::reload::Loaded;
use outboxd::store::internals::{Bound, console_explain_statements, mysql_query, postgres_query};
use outboxd::store::{self, Backend, ConnectOptions, Mark, MarkParams, OutboxStore, TableName};

/// The tenant of the benchmark's rows.
const APP: &str = "bench-console";
/// Error texts of the failed rows.
const ERRORS: [&str; 3] = [
    "HTTP 503 from https://hooks.example.com/outbox",
    "connect timeout after 5s (limits.connect_timeout)",
    "no route for event type `RoomPkEnded`",
];
/// Event types of the fresh rows.
const TYPES: [&str; 3] = ["RoomGiftSent", "RoomMicChanged", "RoomPkEnded"];

/// The smallest `--console-history`: the deepest timed search starts 5,000 rows back.
const MIN_HISTORY: u64 = 5_000;

/// `outboxd-bench --console-history N`.
pub async fn command(config: &Config, args: BenchArgs) -> anyhow::Result<()> {
    let history = args.console.console_history.unwrap_or(0);
    anyhow::ensure!(
        history >= MIN_HISTORY,
        "--console-history {history}: at least {MIN_HISTORY} rows (the timed searches start \
         5,000 rows before the newest)"
    );
    let rounds = args.scaling.rounds.max(1);
    let table = TableName::new(&args.table).context("--table")?;
    let store = store::connect(&ConnectOptions {
        table: table.clone(),
        max_connections: config.database.max_connections.max(2),
        ..config.connect_options()
    })
    .await?;
    store.migrate().await?;
    let started = Instant::now();
    let base_ms = now_ms() - 30 * 24 * 3600 * 1000;
    let mut writer =
        HistoryWriter::connect(&config.database.url, &table, APP, "h", base_ms).await?;
    let mut last = Instant::now();
    writer
        .load(0, history, |done| {
            if last.elapsed() > Duration::from_secs(10) {
                eprintln!("loaded {done} of {history} rows");
                last = Instant::now();
            }
        })
        .await?;
    let (failed_ids, mut pending_ids) = fresh_rows(store.as_ref()).await?;
    pending_ids += backlog(store.as_ref(), args.console.console_backlog).await?;
    writer.after_load(args.history.after_load).await?;
    writer.close().await;
    println!(
        "loaded {history} delivered + {} failed + {} pending rows in {:.0} s",
        failed_ids.len(),
        pending_ids,
        started.elapsed().as_secs_f64()
    );
    let console = Console::new(ConsoleParts {
        store: store.clone(),
        app_codes: vec![APP.to_string()],
        node_id: "bench".into(),
        metrics: Metrics::new(),
        snapshot: StatusSnapshot::default(),
        loaded: Loaded::new(),
        controls: SinkControls::new(),
        reload: None,
        admin: config.admin.clone(),
    });
    let middle = base_ms + (history as i64) / 2;
    let one_id = failed_ids.first().cloned().unwrap_or_default();
    let old_id = format!("h{:012}", history / 3);
    let pages: Vec<(&str, String)> = vec![
        ("newest, any status", format!("/events?app={APP}")),
        (
            "newest delivered",
            format!("/events?app={APP}&status=delivered"),
        ),
        (
            "delivered, page 2 (keyset)",
            format!(
                "/events?app={APP}&status=delivered&before={}.h{:012}",
                base_ms + history as i64 - 51,
                history - 51
            ),
        ),
        ("failed", format!("/events?app={APP}&status=failed")),
        (
            "newest pending",
            format!("/events?app={APP}&status=pending"),
        ),
        (
            "one hour in the middle",
            format!(
                "/events?app={APP}&since={}&until={}",
                middle,
                middle + 3_600_000
            ),
        ),
        (
            "event id (old row)",
            format!("/events?app={APP}&id={old_id}"),
        ),
        (
            "type glob RoomMic* (on top)",
            format!("/events?app={APP}&type=RoomMic*"),
        ),
        (
            "error text 'timeout' (on top)",
            format!("/events?app={APP}&error=timeout"),
        ),
        (
            "room room-7 (on top, no room index)",
            format!("/events?app={APP}&room=room-7"),
        ),
        (
            "rare type, page 2 (on top)",
            format!(
                "/events?app={APP}&type=RoomNever&before={}.h{:012}",
                base_ms + history as i64 - 5000,
                history - 5000
            ),
        ),
        ("one event", format!("/event?app={APP}&id={one_id}")),
        ("dead letters", format!("/dead?app={APP}")),
    ];
    println!(
        "{:<40} {:>9} {:>9} {:>9}",
        "page", "p50 ms", "p95 ms", "max ms"
    );
    for (name, uri) in &pages {
        let mut times = Vec::new();
        for _ in 0..rounds {
            let started = Instant::now();
            let response = console.handle(&request(uri)).await;
            let status = response.as_ref().map(|r| r.status().as_u16());
            if status != Some(200) {
                anyhow::bail!("{uri} answered {status:?}");
            }
            times.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        times.sort_by(f64::total_cmp);
        let at = |q: f64| times[((times.len() - 1) as f64 * q).round() as usize];
        println!(
            "{name:<40} {:>9.1} {:>9.1} {:>9.1}",
            at(0.5),
            at(0.95),
            at(1.0)
        );
    }
    println!();
    explain(&config.database.url, store.backend(), &table).await?;
    store.close().await;
    Ok(())
}

fn request(uri: &str) -> ConsoleRequest {
    let uri: http::Uri = uri.parse().expect("a console path");
    ConsoleRequest::new(
        http::Method::GET,
        &uri,
        &http::HeaderMap::new(),
        b"",
        "127.0.0.1:1".parse().expect("an address"),
    )
}

/// 2,000 failed and 1,000 pending rows, newer than the history, through the store. Returns the
/// failed ids and the number of pending rows.
async fn fresh_rows(store: &dyn OutboxStore) -> anyhow::Result<(Vec<String>, u64)> {
    let now = SystemTime::now();
    let records: Vec<Record> = (0..3000)
        .map(|i| {
            Record::build(format!("room-{}", i % 50), TYPES[i % 3], i as i64, now, &())
                .with_app_code(APP)
        })
        .collect();
    for chunk in records.chunks(1000) {
        store.enqueue(chunk).await?;
    }
    let mut failed = Vec::new();
    while failed.len() < 2000 {
        let left = 2000 - failed.len() as u32;
        let batches =
            crate::read::read_due(store, APP, "bench-console", left.min(500), now_ms()).await?;
        if batches.is_empty() {
            break;
        }
        for batch in batches {
            let marks: Vec<Mark> = batch
                .events
                .iter()
                .enumerate()
                .map(|(i, e)| Mark {
                    event_id: e.event.event_id.clone(),
                    disposition: store::Disposition::Failed {
                        error: ERRORS[i % 3].into(),
                    },
                })
                .collect();
            store
                .mark(&MarkParams {
                    lease: &batch.lease,
                    marks: &marks,
                    now_ms: now_ms(),
                })
                .await?;
            failed.extend(marks.into_iter().map(|m| m.event_id));
        }
    }
    let pending = 3000 - failed.len() as u64;
    Ok((failed, pending))
}

/// `rows` pending rows over 500 rooms, newer than the history, through the store (1,000 a
/// statement). Returns `rows`.
async fn backlog(store: &dyn OutboxStore, rows: u64) -> anyhow::Result<u64> {
    let now = SystemTime::now();
    let mut written = 0;
    while written < rows {
        let records: Vec<Record> = (written..rows.min(written + 1000))
            .map(|i| {
                Record::build(
                    format!("backlog-{}", i % 500),
                    TYPES[i as usize % 3],
                    i as i64,
                    now,
                    &(),
                )
                .with_app_code(APP)
            })
            .collect();
        store.enqueue(&records).await?;
        written += records.len() as u64;
    }
    Ok(rows)
}

/// Prints each console statement's plan.
async fn explain(url: &str, backend: Backend, table: &TableName) -> anyhow::Result<()> {
    for (name, bound) in console_explain_statements(backend, table, APP) {
        println!("== {name}\n{}", bound.sql);
        let lines = match backend {
            Backend::Postgres => {
                let mut conn = sqlx::postgres::PgConnectOptions::from_str(url)?
                    .disable_statement_logging()
                    .connect()
                    .await?;
                let rows =
                    postgres_query(prefixed("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF)", &bound))
                        .fetch_all(&mut conn)
                        .await?;
                rows.iter()
                    .map(|r| r.get::<String, _>(0))
                    .collect::<Vec<_>>()
            }
            Backend::MySql => {
                let mut conn = sqlx::mysql::MySqlConnectOptions::from_str(url)?
                    .disable_statement_logging()
                    .connect()
                    .await?;
                let rows = mysql_query(prefixed("ANALYZE", &bound))
                    .fetch_all(&mut conn)
                    .await?;
                rows.iter()
                    .map(|r| {
                        (0..r.len())
                            .map(|i| {
                                r.try_get::<Option<String>, _>(i)
                                    .ok()
                                    .flatten()
                                    .or_else(|| {
                                        r.try_get::<Option<i64>, _>(i)
                                            .ok()
                                            .flatten()
                                            .map(|n| n.to_string())
                                    })
                                    .or_else(|| {
                                        r.try_get::<Option<f64>, _>(i)
                                            .ok()
                                            .flatten()
                                            .map(|n| format!("{n:.2}"))
                                    })
                                    .unwrap_or_else(|| "NULL".into())
                            })
                            .collect::<Vec<_>>()
                            .join(" | ")
                    })
                    .collect()
            }
            Backend::Sqlite => vec!["(EXPLAIN QUERY PLAN: run the statement in sqlite3)".into()],
        };
        for line in lines {
            println!("  {line}");
        }
    }
    Ok(())
}

/// `bound` run under `prefix` (`EXPLAIN …`, `ANALYZE`), with the same arguments.
fn prefixed(prefix: &str, bound: &Bound) -> Bound {
    Bound {
        sql: format!("{prefix} {}", bound.sql).into(),
        args: bound.args.clone(),
    }
}
