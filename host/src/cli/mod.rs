//! The `outboxd` command line: the contract scripts and docs use.
//!
//! Global options pick the config file and database; subcommands migrate, enqueue, run, report,
//! requeue, and help plugin authors (`plugin check|test|new|bench`). The benchmark of the delivery
//! itself is a binary of its own, `outboxd-bench` (`bench/`).
//!
//! - this file: loading the config, logging, dispatch; `args.rs`: the arguments;
//! - [`ops`]: the store operations (migrate, enqueue, run, status, failed, requeue);
//! - [`plugin`]: `outboxd plugin check|test|new|bench`, with [`plugin_test`] (sample events, a
//!   stand-in broker for broker plugins, printed by [`stand_in_report`]), [`plugin_new`]
//!   (scaffolding from `plugins/templates/`) and [`plugin_bench`] (one plugin measured, no
//!   database);
//! - [`signals`]: SIGINT/SIGTERM/SIGQUIT handling of `outboxd run`, and its exit codes.

mod args;
pub mod ops;
pub mod plugin;
pub mod plugin_bench;
pub mod plugin_new;
pub mod plugin_test;
pub mod signals;
pub mod stand_in_report;

use std::process::ExitCode;
use std::sync::Arc;

use anyhow::Result;
use clap::Parser;

use outboxd::config::Config;
use outboxd::reload::ConfigSource;
use outboxd::startup;

pub use args::*;

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
    let result = runtime.block_on(execute(cli));
    startup::shut_down(runtime);
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_line(e.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// An error and its causes on one line, each cause once: a cause whose text the line already
/// holds (errors that print their source in their own message) is not repeated.
pub fn error_line(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(next) = cause {
        let text = next.to_string();
        if !text.is_empty() && !line.contains(&text) {
            line.push_str(": ");
            line.push_str(&text);
        }
        cause = next.source();
    }
    line
}

/// Runs one parsed command line: loads the config, starts logging, dispatches.
pub async fn execute(cli: Cli) -> Result<()> {
    let config = load_config(&cli)?;
    if let Command::Plugin {
        command: PluginCommand::Bench { .. },
    } = &cli.command
    {
        // The plugin's own log lines would flood the terminal and time the terminal, not the
        // plugin: only outboxd's own warnings and errors are shown.
        startup::init_logging(&config, "warn,outboxd::plugin=off");
    } else {
        startup::init_logging(&config, &config.log.level);
    }
    match cli.command {
        Command::Migrate { partitions } => ops::migrate(&config, partitions).await,
        Command::Enqueue(args) => ops::enqueue(&config, args).await,
        Command::Run { drain } => {
            let (path, url) = (cli.config.clone(), cli.database_url.clone());
            let source: ConfigSource = Arc::new(move || {
                startup::load_config(path.as_deref(), url.as_deref()).map_err(|e| format!("{e:#}"))
            });
            ops::run(&config, drain, source).await
        }
        Command::Purge { dry_run, app_code } => ops::purge(&config, dry_run, app_code).await,
        Command::Status { json, app_code } => ops::status(&config, json, app_code).await,
        Command::Failed {
            command:
                FailedCommand::List {
                    json,
                    limit,
                    filter,
                },
        } => ops::list_failed(&config, json, limit, &filter).await,
        Command::Requeue(args) => ops::requeue(&config, args).await,
        Command::Plugin { command } => plugin::command(&config, command).await,
    }
}

/// Loads `--config` (or ./outboxd.toml when present) and applies `--database-url`.
fn load_config(cli: &Cli) -> Result<Config> {
    startup::load_config(cli.config.as_deref(), cli.database_url.as_deref())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[test]
    fn error_lines_say_each_cause_once() {
        let io = std::io::Error::from(std::io::ErrorKind::NotFound);
        let text = io.to_string();
        let error = anyhow::Error::new(outboxd::plugin::PluginError::Cache {
            dir: PathBuf::from("/var/cache/outboxd"),
            source: io,
        })
        .context("cannot load sink plugins");
        let line = error_line(error.as_ref());
        assert_eq!(line.matches(&text).count(), 1, "{line}");
        assert!(
            line.starts_with(
                "cannot load sink plugins: plugin cache directory /var/cache/outboxd: "
            ),
            "{line}"
        );
    }

    #[test]
    fn cli_parses_the_documented_commands() {
        Cli::try_parse_from(["outboxd", "--database-url", "sqlite://x.db", "migrate"]).unwrap();
        assert!(Cli::try_parse_from(["outboxd", "migrate", "--room-index"]).is_err());
        Cli::try_parse_from([
            "outboxd", "enqueue", "--room", "r", "--type", "T", "--count", "3",
        ])
        .unwrap();
        Cli::try_parse_from(["outboxd", "run", "--drain"]).unwrap();
        Cli::try_parse_from(["outboxd", "status", "--json"]).unwrap();
        Cli::try_parse_from(["outboxd", "purge", "--dry-run", "--app", "live"]).unwrap();
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

    /// The benchmark is `outboxd-bench`, not a subcommand of the binary operators deploy.
    #[test]
    fn bench_is_not_a_subcommand() {
        let error = Cli::try_parse_from(["outboxd", "bench", "--events", "10"]).unwrap_err();
        assert_eq!(error.kind(), clap::error::ErrorKind::InvalidSubcommand);
    }
}
