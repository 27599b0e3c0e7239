//! The `outboxd` command line: the contract scripts and docs use.
//!
//! Global options pick the config file and database; subcommands migrate, enqueue, run, report,
//! requeue, benchmark, and help plugin authors (`plugin check|test`).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::SystemTime;

use anyhow::{Context, Result, bail};
use clap::{Args, Parser, Subcommand};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::bench::{self, BenchOptions};
use crate::config::{Config, LogFormat};
use crate::record::{Record, now_ms};
use crate::store::{
    self, ConnectOptions, CountsParams, FailedFilter, ListFailedParams, OutboxStore, RequeueParams,
};
use crate::worker::{RunMode, Worker, WorkerOptions};

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
    /// Create or upgrade the outbox table (idempotent).
    Migrate,
    /// Write sample events (for trying things out and for scripts).
    Enqueue(EnqueueArgs),
    /// Deliver events until stopped (SIGINT/SIGTERM finish the batch in flight, then exit 0).
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
    #[arg(long = "app", default_value = crate::record::DEFAULT_APP_CODE)]
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
}

/// `outboxd bench`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Events per measured run.
    #[arg(long, default_value_t = 10_000)]
    pub events: u32,
    /// Claim batch size of outboxd's runs.
    #[arg(long, default_value_t = 500)]
    pub batch_size: u32,
    /// Worker loops (batches in flight) of outboxd's runs.
    #[arg(long, default_value_t = 4)]
    pub workers: u32,
    /// Rooms the events are spread over.
    #[arg(long, default_value_t = 1000)]
    pub rooms: u32,
    /// Runs to measure, comma-separated: outboxd, per-room (ordering on), go (the Go version's
    /// shape: batch 100, one mark statement per row, one batch in flight).
    #[arg(long, value_delimiter = ',', default_value = "outboxd,per-room,go")]
    pub shapes: Vec<bench::Shape>,
    /// Table the benchmark writes (created if missing); keep it away from production data.
    #[arg(long, default_value = "outboxd_bench")]
    pub table: String,
}

/// `outboxd plugin …`.
#[derive(Debug, Subcommand)]
pub enum PluginCommand {
    /// Load a plugin, check its WIT world and version, list what it imports.
    Check {
        /// The `.wasm` component.
        file: PathBuf,
    },
    /// Run init and publish on sample events without a database; print each result.
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
    },
}

/// Parses the process arguments, runs the command, and returns the exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(execute(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Runs one parsed command line.
pub async fn execute(cli: Cli) -> Result<()> {
    let config = load_config(&cli)?;
    init_logging(&config);
    match cli.command {
        Command::Migrate => {
            let store = connect(&config).await?;
            let applied = store.migrate().await?;
            if applied.is_empty() {
                println!("{} is up to date", config.database.table);
            } else {
                println!(
                    "applied migrations {applied:?} to {}",
                    config.database.table
                );
            }
            store.close().await;
        }
        Command::Enqueue(args) => enqueue(&config, args).await?,
        Command::Run { drain } => run(&config, drain).await?,
        Command::Status { json, app_code } => {
            let store = connect(&config).await?;
            let counts = store
                .counts(&CountsParams {
                    app_code,
                    now_ms: now_ms(),
                })
                .await?;
            if json {
                println!("{}", serde_json::to_string(&counts)?);
            } else {
                println!(
                    "pending {}  delivering {}  retryable {}  failed {}  delivered {}  oldest pending age {}",
                    counts.pending,
                    counts.delivering,
                    counts.retryable,
                    counts.failed,
                    counts.delivered,
                    counts
                        .oldest_pending_age_ms
                        .map(
                            |ms| humantime::format_duration(std::time::Duration::from_millis(
                                ms.max(0) as u64
                            ))
                            .to_string()
                        )
                        .unwrap_or_else(|| "-".into())
                );
            }
            store.close().await;
        }
        Command::Failed {
            command:
                FailedCommand::List {
                    json,
                    limit,
                    filter,
                },
        } => {
            let store = connect(&config).await?;
            let rows = store
                .list_failed(&ListFailedParams {
                    filter: filter.to_filter()?,
                    limit,
                })
                .await?;
            if json {
                println!("{}", serde_json::to_string(&rows)?);
            } else if rows.is_empty() {
                println!("no failed rows");
            } else {
                for row in &rows {
                    println!(
                        "{}\t{}\t{}\troom={}\tretries={}\t{}",
                        row.app_code,
                        row.event_id,
                        row.event_type,
                        row.room_id,
                        row.retry_count,
                        row.last_error.as_deref().unwrap_or("")
                    );
                }
            }
            store.close().await;
        }
        Command::Requeue(args) => {
            let filter = args.filter.to_filter()?;
            if filter.is_empty() && !args.all {
                bail!(
                    "requeue needs a filter (--event-id, --type, --room, --since, --until, --app) or --all"
                );
            }
            let store = connect(&config).await?;
            let count = store
                .requeue(&RequeueParams {
                    filter,
                    dry_run: args.dry_run,
                    now_ms: now_ms(),
                })
                .await?;
            if args.dry_run {
                println!("{count} failed rows would be requeued");
            } else {
                println!("requeued {count} failed rows");
            }
            store.close().await;
        }
        Command::Bench(args) => {
            let options = BenchOptions {
                events: args.events,
                batch_size: args.batch_size,
                workers: args.workers,
                rooms: args.rooms,
                shapes: args.shapes,
                table: store::TableName::new(&args.table).context("--table")?,
            };
            let report = bench::run(&config, &options).await?;
            print!("{report}");
        }
        Command::Plugin { command } => plugin_command(&config, command).await?,
    }
    Ok(())
}

/// Loads `--config` (or ./outboxd.toml when present) and applies `--database-url`.
fn load_config(cli: &Cli) -> Result<Config> {
    let default_path = Path::new("outboxd.toml");
    let path = match &cli.config {
        Some(path) => Some(path.as_path()),
        None if default_path.exists() => Some(default_path),
        None => None,
    };
    let mut config = Config::load(path, std::env::vars())?;
    if let Some(url) = &cli.database_url {
        store::Backend::from_url(url)?;
        config.database.url = url.clone();
    }
    Ok(config)
}

/// Logs to stderr in the configured format; `RUST_LOG` overrides the configured level.
fn init_logging(config: &Config) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(&config.log.level));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match config.log.format {
        LogFormat::Text => builder.try_init(),
        LogFormat::Json => builder.json().try_init(),
    };
}

async fn connect(config: &Config) -> Result<Arc<dyn OutboxStore>> {
    let options = ConnectOptions {
        url: config.database.url.clone(),
        table: config.database.table.clone(),
        max_connections: config.database.max_connections,
    };
    store::connect(&options).await.with_context(|| {
        format!(
            "cannot open database {}",
            store::redact_url(&config.database.url)
        )
    })
}

async fn enqueue(config: &Config, args: EnqueueArgs) -> Result<()> {
    serde_json::from_str::<serde_json::Value>(&args.body_json)
        .context("--body-json is not valid JSON")?;
    let now = SystemTime::now();
    let records: Vec<Record> = (0..args.count)
        .map(|i| {
            let mut record = Record::build(
                &args.room,
                &args.event_type,
                args.room_version + i64::from(i),
                now,
                &(),
            )
            .with_app_code(&args.app_code);
            record.envelope.body = args.body_json.as_bytes().to_vec();
            record
        })
        .collect();
    let store = connect(config).await?;
    let mut inserted = 0;
    for chunk in records.chunks(1000) {
        inserted += store.enqueue(chunk).await?;
    }
    println!(
        "enqueued {inserted} events (room {}, type {})",
        args.room, args.event_type
    );
    store.close().await;
    Ok(())
}

async fn run(config: &Config, drain: bool) -> Result<()> {
    let publisher = crate::plugin::load_publisher(&config.sinks, &config.routes, &config.plugins)
        .await
        .context("cannot load sink plugins")?;
    let store = connect(config).await?;
    let worker = Worker::new(store.clone(), publisher, WorkerOptions::from_config(config));
    let shutdown = CancellationToken::new();
    tokio::spawn(stop_on_signal(shutdown.clone()));
    let mode = if drain {
        RunMode::Drain
    } else {
        RunMode::Forever
    };
    info!(node_id = %config.worker.node_id, database = %store::redact_url(&config.database.url),
        app_codes = ?config.worker.app_codes, "outboxd running");
    let result = worker.run(mode, shutdown).await;
    store.close().await;
    let stats = result?;
    info!(
        claimed = stats.claimed,
        delivered = stats.delivered,
        retried = stats.retried,
        failed = stats.failed + stats.rejected,
        stale = stats.stale,
        "outboxd stopped"
    );
    Ok(())
}

/// Cancels `shutdown` on the first SIGINT or SIGTERM; a second signal exits at once (130).
async fn stop_on_signal(shutdown: CancellationToken) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        warn!("cannot install signal handlers; stop outboxd with SIGKILL");
        return;
    };
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    info!("shutdown requested: finishing batches in flight (signal again to exit at once)");
    shutdown.cancel();
    tokio::select! { _ = term.recv() => {}, _ = int.recv() => {} }
    std::process::exit(130);
}

async fn plugin_command(config: &Config, command: PluginCommand) -> Result<()> {
    match command {
        PluginCommand::Check { file } => {
            let report = crate::plugin::check(&file, &config.plugins).await?;
            println!("{report}");
        }
        PluginCommand::Test {
            file,
            config: settings,
            allow_hosts,
            events,
        } => {
            let settings = settings
                .iter()
                .map(|pair| crate::plugin::parse_config_pair(pair))
                .collect::<Result<Vec<_>, _>>()?;
            let events = if events.is_empty() {
                vec![crate::plugin::parse_event_json(0, "{}")?]
            } else {
                events
                    .iter()
                    .enumerate()
                    .map(|(i, json)| crate::plugin::parse_event_json(i, json))
                    .collect::<Result<Vec<_>, _>>()?
            };
            let outcomes = crate::plugin::test_plugin(
                &file,
                settings,
                events.clone(),
                allow_hosts,
                &config.plugins,
            )
            .await?;
            println!(
                "{}",
                crate::plugin::TestReport {
                    events: &events,
                    outcomes: &outcomes
                }
            );
        }
    }
    Ok(())
}

impl FilterArgs {
    /// The store filter these flags describe.
    pub fn to_filter(&self) -> Result<FailedFilter> {
        Ok(FailedFilter {
            app_code: self.app_code.clone(),
            event_ids: self.event_ids.clone(),
            event_type: self.event_type.clone(),
            room_id: self.room_id.clone(),
            since_ms: self
                .since
                .as_deref()
                .map(|t| parse_time(t).context("--since"))
                .transpose()?,
            until_ms: self
                .until
                .as_deref()
                .map(|t| parse_time(t).context("--until"))
                .transpose()?,
        })
    }
}

/// RFC 3339 (`2026-11-29T10:00:00Z`) or Unix milliseconds.
fn parse_time(text: &str) -> Result<i64> {
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(ms);
    }
    let time = humantime::parse_rfc3339_weak(text).with_context(|| {
        format!("{text:?} is neither RFC 3339 (2026-11-29T10:00:00Z) nor Unix milliseconds")
    })?;
    Ok(crate::record::system_time_ms(time))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse() {
        assert_eq!(parse_time("1700000000000").unwrap(), 1_700_000_000_000);
        assert_eq!(parse_time("1970-01-01T00:00:01Z").unwrap(), 1_000);
        assert!(parse_time("yesterday").is_err());
    }

    #[test]
    fn cli_parses_the_documented_commands() {
        Cli::try_parse_from(["outboxd", "--database-url", "sqlite://x.db", "migrate"]).unwrap();
        Cli::try_parse_from([
            "outboxd", "enqueue", "--room", "r", "--type", "T", "--count", "3",
        ])
        .unwrap();
        Cli::try_parse_from(["outboxd", "run", "--drain"]).unwrap();
        Cli::try_parse_from(["outboxd", "status", "--json"]).unwrap();
        Cli::try_parse_from(["outboxd", "failed", "list", "--json"]).unwrap();
        Cli::try_parse_from([
            "outboxd",
            "requeue",
            "--event-id",
            "a",
            "--event-id",
            "b",
            "--dry-run",
        ])
        .unwrap();
        Cli::try_parse_from([
            "outboxd",
            "bench",
            "--events",
            "10",
            "--batch-size",
            "5",
            "--workers",
            "2",
        ])
        .unwrap();
        let cli = Cli::try_parse_from([
            "outboxd",
            "--config",
            "a.toml",
            "plugin",
            "test",
            "x.wasm",
            "--config",
            "format=json",
        ])
        .unwrap();
        assert_eq!(cli.config, Some(PathBuf::from("a.toml")));
    }
}
