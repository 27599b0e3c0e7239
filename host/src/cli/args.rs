//! The command line's arguments (clap): global options, subcommands and their flags. The
//! dispatch is in `cli/mod.rs`.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

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
    /// Create or upgrade the outbox table, its indexes and the partition tables (idempotent,
    /// online: producers keep writing).
    Migrate {
        /// Partitions per tenant (a power of two, 1 to 1024): changes the table's count, online,
        /// while no host runs (refused otherwise). Without it the count stays as it is (64 on a
        /// new table; SQLite: 1).
        #[arg(long, value_name = "N")]
        partitions: Option<u32>,
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
