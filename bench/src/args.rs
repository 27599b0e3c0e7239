//! The command line of `outboxd-bench` (clap): the database and config options, which mode to
//! run and its flags. The mode modules read their options from here; this file imports none of
//! them (only the leaf `history`, for its loader options).

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser};

use crate::history::HistoryArgs;

/// outboxd-bench: measures outboxd's delivery (throughput, latency, retention, history scaling,
/// the console's pages, a broker beside its own client) on a table of its own.
#[derive(Debug, Parser)]
#[command(name = "outboxd-bench", version, about)]
pub struct Cli {
    /// outboxd's config file (TOML): the worker, retention, plugins and brokers the benchmark
    /// runs with. Default: ./outboxd.toml when it exists.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Database URL: sqlite://FILE, mysql://USER@HOST:PORT/DB, postgres://USER@HOST:PORT/DB.
    /// Overrides the config file. Default sqlite://outboxd.db.
    #[arg(long, env = "OUTBOXD_DATABASE_URL", value_name = "URL")]
    pub database_url: Option<String>,
    /// What to measure.
    #[command(flatten)]
    pub bench: BenchArgs,
}

/// The benchmark's flags: which mode, its sizes, and the publisher.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Events per measured run.
    #[arg(long, default_value_t = 10_000)]
    pub events: u32,
    /// Claim batch size of outboxd's runs (default: the config's `worker.batch_size`, so with no
    /// config file the host's default, 1000).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=5000))]
    pub batch_size: Option<u32>,
    /// Worker loops (batches in flight) of outboxd's runs (default: the config's
    /// `worker.concurrency`, so with no config file the host's default, 1).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    pub workers: Option<u32>,
    /// Concurrent clients (connections) of the raw SQL loops (`raw`, `raw-held`).
    #[arg(long, default_value_t = 2)]
    pub raw_clients: u32,
    /// Rows per claim of the raw SQL loops: the yardstick's batch, fixed while outboxd's
    /// `--batch-size` is swept (default 500, the two-write loop the throughput targets were set
    /// against).
    #[arg(long, default_value_t = 500, value_parser = clap::value_parser!(u32).range(1..))]
    pub raw_batch_size: u32,
    /// Rooms the events are spread over.
    #[arg(long, default_value_t = 1000)]
    pub rooms: u32,
    /// Runs to measure, comma-separated: outboxd, per-room (ordering on), raw (a plain SQL
    /// client, no outboxd code: claim with FOR UPDATE SKIP LOCKED, then one fenced mark per
    /// batch; `--batch-size`, `--raw-clients`), raw-1idx (the same loop on a table with the
    /// primary key and one claim index only: the yardstick), raw-held (the ceiling: lock, mark
    /// delivered, commit in one transaction; each row written once).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "outboxd,per-room,raw,raw-1idx"
    )]
    pub shapes: Vec<Shape>,
    /// Table the benchmark writes (created if missing); keep it away from production data.
    #[arg(long, default_value = "outboxd_bench")]
    pub table: String,
    /// Partitions per tenant of the benchmark table (`outboxd migrate --partitions`), set before
    /// the run; default: as the table has them (64 on a new table).
    #[arg(long, value_name = "N")]
    pub partitions: Option<u32>,
    /// `--retention` and its options.
    #[command(flatten)]
    pub retention: RetentionBenchArgs,
    /// `--history-scaling` and its options.
    #[command(flatten)]
    pub scaling: ScalingBenchArgs,
    /// `--console-history`: the console's pages over a large table.
    #[command(flatten)]
    pub console: ConsoleBenchArgs,
    /// How `--retention` and `--history-scaling` load their history.
    #[command(flatten)]
    pub history: HistoryArgs,
    /// Latency mode: producers commit this many rows per second, one per transaction, and the
    /// worker (configured as `outboxd run` would be) delivers them; prints commit → delivered
    /// p50/p90/p99. Needs `--seconds`.
    #[arg(long, requires = "seconds", group = "latency")]
    pub rate: Option<u32>,
    /// Latency mode, a quiet room: one row every DURATION (e.g. `2s`) instead of `--rate`.
    /// Needs `--seconds`.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration,
        requires = "seconds", group = "latency")]
    pub every: Option<std::time::Duration>,
    /// Latency mode: how long the producers write.
    #[arg(long, requires = "latency")]
    pub seconds: Option<u32>,
    /// Latency mode: the worker idles this long (e.g. `60s`) before the producers start, and
    /// every row counts (no warm-up): a burst after a quiet spell.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration,
        requires = "latency")]
    pub quiet_first: Option<std::time::Duration>,
    /// Latency mode: producer tasks, each on its own database connection.
    #[arg(long, default_value_t = 4)]
    pub producers: u32,
    /// Latency mode: for this many of the slowest rows, print the claims the worker ran between
    /// the row's commit and the claim that handed it out (start, duration, rows / limit).
    #[arg(long, requires = "latency", default_value_t = 0)]
    pub trace_slowest: usize,
    /// Publish through this plugin (`.wasm` component; every event routed to it) instead of a
    /// native no-op publisher.
    #[arg(long, value_name = "FILE")]
    pub plugin: Option<PathBuf>,
    /// A setting passed to the plugin's init (repeatable), e.g. `quiet=true`.
    #[arg(long = "plugin-config", value_name = "KEY=VALUE")]
    pub plugin_config: Vec<String>,
    /// With the `broker` plugin: make the benchmark's destination on the `[[broker]]` the
    /// plugin's `connection` names, and after the run publish as many messages with that
    /// broker's own client (same confirmation, same batch size) and print both rates.
    #[arg(long, requires = "plugin")]
    pub broker_raw: bool,
}

/// A delivery shape to measure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Shape {
    /// outboxd's worker: batch size and worker count from the options; rows read from owned
    /// partitions without writing, one fenced mark per batch part.
    Outboxd,
    /// outboxd's worker with per-room ordering on.
    PerRoom,
    /// outboxd's worker with tracing on: every span (delivery per event, read and mark per
    /// batch) exported over OTLP to a collector on loopback (`collector.rs`); the drain ends
    /// when the last span is exported.
    Traced,
    /// Issue 10's raw two-write SQL loop: a plain sqlx client, claim then fenced mark, no outboxd
    /// code in the loop (`--raw-clients` clients, `--batch-size` rows per claim).
    Raw,
    /// The raw two-write loop on the yardstick table (`<table>_1idx`): the seed's columns, the
    /// primary key and ONE claim index, no triggers (issue 25's yardstick; `yardstick.rs`).
    #[value(name = "raw-1idx")]
    RawOneIndex,
    /// The raw ceiling: lock with `SELECT … FOR UPDATE SKIP LOCKED`, one UPDATE to delivered,
    /// commit, in one transaction (each row written once; not at-least-once safe as outboxd is).
    RawHeld,
}

impl Shape {
    /// The shape's name in reports and in `--shapes`.
    pub fn name(self) -> &'static str {
        match self {
            Shape::Outboxd => "outboxd",
            Shape::PerRoom => "per-room",
            Shape::Traced => "traced",
            Shape::Raw => "raw",
            Shape::RawOneIndex => "raw-1idx",
            Shape::RawHeld => "raw-held",
        }
    }
}

/// The `--retention` options of `outboxd-bench` .
#[derive(Debug, Clone, clap::Args)]
pub struct RetentionBenchArgs {
    /// Measure claim latency quiet vs while retention deletes `--history` old delivered rows
    /// (instead of the delivery shapes or the `--rate` latency mode).
    #[arg(long, conflicts_with = "rate")]
    pub retention: bool,
    /// Old `delivered` rows loaded before measuring (`--retention`).
    #[arg(long, default_value_t = 1_000_000)]
    pub history: u32,
    /// Rows per measured claim + mark (`--retention`).
    #[arg(long, default_value_t = 10)]
    pub claim_batch: u32,
    /// Length of one measurement window (`--retention`).
    #[arg(long, default_value = "5s", value_parser = humantime::parse_duration)]
    pub window: Duration,
    /// Quiet windows measured before the cleanup starts (`--retention`).
    #[arg(long, default_value_t = 3)]
    pub windows: u32,
    /// Stop measuring the cleanup after this long even if history is left (`--retention`).
    #[arg(long, default_value = "15m", value_parser = humantime::parse_duration)]
    pub max_cleanup: Duration,
}

/// The `--history-scaling` options of `outboxd-bench` .
#[derive(Debug, Clone, clap::Args)]
pub struct ScalingBenchArgs {
    /// Measure claim + mark cost at each of these delivered-history sizes, comma-separated and
    /// ascending (the same table grows), e.g. `10000,100000,1000000,10000000`.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["rate", "retention"])]
    pub history_scaling: Option<Vec<u64>>,
    /// Measured claim + mark calls per size (`--history-scaling`).
    #[arg(long, default_value_t = 100)]
    pub rounds: u32,
    /// Fresh rows per measured claim + mark (`--history-scaling`).
    #[arg(long, default_value_t = 500)]
    pub scaling_batch: u32,
}

/// The `--console-history` options of `outboxd-bench` .
#[derive(Debug, Clone, clap::Args)]
pub struct ConsoleBenchArgs {
    /// Time the console's pages over this many rows of delivered history (at least 5000; e.g.
    /// 10000000).
    #[arg(long, conflicts_with_all = ["rate", "retention", "history_scaling"])]
    pub console_history: Option<u64>,

    /// With `--console-history`: this many `pending` rows more, newer than the history, over 500
    /// rooms (a backlog, which a page of pending rows, or of the delivered rows behind it, must
    /// not read through).
    #[arg(long, default_value_t = 0, requires = "console_history")]
    pub console_backlog: u64,
}
