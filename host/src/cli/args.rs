//! The command line's arguments (clap): global options, subcommands and their flags. The
//! dispatch is in `cli/mod.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

use super::bench::{history, retention, scaling, throughput};
use super::{plugin_new, plugin_test};

/// outboxd: moves events committed to the `room_outbox` table out to sink plugins, at least once.
#[derive(Debug, Parser)]
#[command(name = "outboxd", version, about)]
pub struct Cli {
    /// Config file (TOML). Default: ./outboxd.toml when it exists. Goes before the subcommand
    /// (`outboxd --config FILE run`), since `plugin test` has a `--config KEY=VALUE` of its own.
    #[arg(long, value_name = "PATH")]
    pub config: Option<PathBuf>,
    /// Database URL: sqlite://FILE, mysql://USER@HOST:PORT/DB, postgres://USER@HOST:PORT/DB.
    /// Overrides the config file. Default sqlite://outboxd.db.
    #[arg(long, global = true, env = "OUTBOXD_DATABASE_URL", value_name = "URL")]
    pub database_url: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create or upgrade the outbox table (idempotent); with worker.ordering = "per-room" in the
    /// config (or --room-index), also the room index that per-room claims need.
    Migrate {
        /// Create the room index that per-room claims need even when the config's
        /// worker.ordering is not "per-room" (e.g. before turning per-room ordering on).
        #[arg(long)]
        room_index: bool,
    },
    /// Write sample events (for trying things out and for scripts).
    Enqueue(EnqueueArgs),
    /// Deliver events until stopped (SIGINT/SIGTERM finish the batches in flight, then exit 0; a
    /// second one more than 2s later, or SIGQUIT, exits at once with 130 / 131; SIGHUP reloads
    /// sinks and routes).
    Run {
        /// Exit 0 once nothing is claimable.
        #[arg(long)]
        drain: bool,
    },
    /// Row counts by status and the age of the oldest pending row.
    Status {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Only this app code.
        #[arg(long = "app")]
        app_code: Option<String>,
    },
    /// Inspect failed rows.
    Failed {
        /// What to do with them.
        #[command(subcommand)]
        command: FailedCommand,
    },
    /// Move failed rows back to pending (retry count reset).
    Requeue(RequeueArgs),
    /// Delete delivered and failed rows older than `[retention]` allows, in bounded batches.
    Purge {
        /// Only print how many rows would be deleted.
        #[arg(long)]
        dry_run: bool,
        /// Only this app code (default: worker.app_codes).
        #[arg(long = "app")]
        app_code: Option<String>,
    },
    /// Measure delivery throughput: enqueue N events, drain them with a no-op publisher.
    Bench(BenchArgs),
    /// Tools for plugin authors.
    Plugin {
        /// What to do.
        #[command(subcommand)]
        command: PluginCommand,
    },
}

/// `outboxd enqueue`.
#[derive(Debug, Args)]
pub struct EnqueueArgs {
    /// Room id.
    #[arg(long)]
    pub room: String,
    /// Event type.
    #[arg(long = "type")]
    pub event_type: String,
    /// App code (tenant).
    #[arg(long = "app", default_value = outboxd::record::DEFAULT_APP_CODE)]
    pub app_code: String,
    /// Event body: JSON text, stored as its UTF-8 bytes.
    #[arg(long, default_value = "{}")]
    pub body_json: String,
    /// How many events (room_version counts up from --room-version).
    #[arg(long, default_value_t = 1)]
    pub count: u32,
    /// room_version of the first event.
    #[arg(long, default_value_t = 1)]
    pub room_version: i64,
}

/// `outboxd failed …`.
#[derive(Debug, Subcommand)]
pub enum FailedCommand {
    /// List failed rows, oldest first.
    List {
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Most rows.
        #[arg(long, default_value_t = 100)]
        limit: u32,
        /// Which rows.
        #[command(flatten)]
        filter: FilterArgs,
    },
}

/// Filters on failed rows (all given must match).
#[derive(Debug, Args, Default)]
pub struct FilterArgs {
    /// Only this app code.
    #[arg(long = "app")]
    pub app_code: Option<String>,
    /// Only these event ids (repeatable).
    #[arg(long = "event-id")]
    pub event_ids: Vec<String>,
    /// Only this event type.
    #[arg(long = "type")]
    pub event_type: Option<String>,
    /// Only this room.
    #[arg(long = "room")]
    pub room_id: Option<String>,
    /// Only rows created at or after this time (RFC 3339, e.g. 2026-11-29T10:00:00Z, or Unix ms).
    #[arg(long)]
    pub since: Option<String>,
    /// Only rows created before this time (RFC 3339 or Unix ms).
    #[arg(long)]
    pub until: Option<String>,
    /// Only rows whose last error is exactly this text (as `failed list` prints it).
    #[arg(long = "error")]
    pub last_error: Option<String>,
}

/// `outboxd requeue`.
#[derive(Debug, Args)]
pub struct RequeueArgs {
    /// Which rows.
    #[command(flatten)]
    pub filter: FilterArgs,
    /// Requeue every failed row (required when no filter is given).
    #[arg(long)]
    pub all: bool,
    /// Only print how many rows would move.
    #[arg(long)]
    pub dry_run: bool,
    /// Rows moved per transaction (oldest first), so a large requeue never holds a long lock.
    #[arg(long, default_value_t = 1000, value_parser = clap::value_parser!(u32).range(1..))]
    pub chunk: u32,
}

/// `outboxd bench`.
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
    /// Runs to measure, comma-separated: outboxd, per-room (ordering on), go (the Go version's
    /// shape: batch 100, one mark statement per row, one batch in flight), raw (a plain SQL
    /// client, no outboxd code: claim with FOR UPDATE SKIP LOCKED, then one fenced mark per
    /// batch; `--batch-size`, `--raw-clients`), raw-1idx (the same loop on a table with the
    /// primary key and one claim index only: the yardstick), raw-held (the ceiling: lock, mark
    /// delivered, commit in one transaction; each row written once).
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "outboxd,per-room,go,raw,raw-1idx"
    )]
    pub shapes: Vec<throughput::Shape>,
    /// Table the benchmark writes (created if missing); keep it away from production data.
    #[arg(long, default_value = "outboxd_bench")]
    pub table: String,
    /// `--retention` and its options.
    #[command(flatten)]
    pub retention: retention::RetentionBenchArgs,
    /// `--history-scaling` and its options.
    #[command(flatten)]
    pub scaling: scaling::ScalingBenchArgs,
    /// `--console-history`: the console's pages over a large table.
    #[command(flatten)]
    pub console: super::bench::console::ConsoleBenchArgs,
    /// How `--retention` and `--history-scaling` load their history.
    #[command(flatten)]
    pub history: history::HistoryArgs,
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

/// `outboxd plugin …`.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Load a plugin, check its WIT world and version, list what it imports.
    Check {
        /// The `.wasm` component.
        file: PathBuf,
    },
    /// Run init and publish on sample events without a database; print each result (and, for a
    /// plugin that imports the `broker` interface, each message a stand-in broker received).
    Test {
        /// The `.wasm` component.
        file: PathBuf,
        /// A setting passed to init (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
        /// Let the plugin make HTTP requests to this origin, `scheme://host[:port]` (repeatable;
        /// the sink's `limits.allow_hosts` in a real config).
        #[arg(long = "allow-host", value_name = "ORIGIN")]
        allow_hosts: Vec<String>,
        /// A sample event as JSON (repeatable), e.g. '{"event_type":"RoomGiftSent","room_id":"r1","body":"hi"}'
        /// (fields: app_code, event_id, event_type, room_id, room_version, occurred_at_ms, attempt,
        /// body or body_base64; all optional). Without --event one sample event is used.
        #[arg(long = "event", value_name = "JSON")]
        events: Vec<String>,
        /// The stand-in broker a plugin importing the `broker` interface publishes on.
        #[command(flatten)]
        stand_in: plugin_test::StandInArgs,
    },
    /// Write a new plugin project (Rust, Python or JavaScript) that builds with `make` and
    /// passes `outboxd plugin test`.
    New {
        /// The plugin's name (lower-case letters, digits, `-`).
        name: String,
        /// Its language.
        #[arg(long, value_enum)]
        lang: plugin_new::Lang,
        /// The project directory to create (default: ./NAME).
        #[arg(long, value_name = "PATH")]
        dir: Option<PathBuf>,
        /// Rust: the guest SDK crate, an outboxd checkout's `plugins/sdk` (default: the one this
        /// outboxd was built from).
        #[arg(long, value_name = "PATH")]
        sdk_path: Option<PathBuf>,
    },
    /// Measure a plugin without a database: events/s and cost per event on sample events.
    Bench {
        /// The `.wasm` component.
        file: PathBuf,
        /// A setting passed to init (repeatable).
        #[arg(long = "config", value_name = "KEY=VALUE")]
        config: Vec<String>,
        /// Let the plugin make HTTP requests to this origin (repeatable).
        #[arg(long = "allow-host", value_name = "ORIGIN")]
        allow_hosts: Vec<String>,
        /// A sample event as JSON (repeatable; as for `plugin test`), cycled to fill the batches.
        /// Default: one event with a 256-byte body.
        #[arg(long = "event", value_name = "JSON")]
        events: Vec<String>,
        /// Events published in the measured run (after one warm-up batch).
        #[arg(long = "events", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(1..))]
        count: u32,
        /// Events per publish call.
        #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=5000))]
        batch_size: u32,
    },
}
