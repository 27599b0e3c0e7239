//! `outboxd-bench`: measures outboxd's delivery on a table of its own, through the `outboxd`
//! library's public API (and `outboxd::store::internals` for the statements it times by hand).
//! It is a separate binary: the `outboxd` that operators deploy does not carry it.
//!
//! # Layout
//! - this file: the process (config, logging, exit code); [`args`]: the command line; [`run`]:
//!   the dispatch to one mode.
//!
//! | mode | flags | module |
//! |---|---|---|
//! | throughput (the default) | `--events`, `--shapes` | [`throughput`]; the raw SQL loops it compares against in [`raw`], the one-index yardstick table in [`yardstick`], the CPU each drain cost in [`cpu`] |
//! | latency | `--rate` or `--every`, `--seconds` | [`latency`], its report [`latency_report`], what the slowest rows waited for [`trace`] |
//! | retention | `--retention` | [`retention`], its report [`retention_report`] |
//! | history scaling | `--history-scaling` | [`scaling`] |
//! | the console's pages | `--console-history` | [`console`] |
//! | a broker beside its own client | `--plugin …/broker.wasm --broker-raw` | [`broker`] (report, outboxd's side), [`broker_raw`] (the brokers' own clients, the benchmark's destinations) |
//!
//! Retention, history scaling and the console's pages load old history with [`history`]. Every
//! mode connects, names its tenant, loads its publisher and writes its events through
//! [`harness`], and prints percentiles from [`samples`]. Imports go one way: `run` → the modes →
//! their reports, `harness`, `history`, `samples` → `args` (which imports only `history`).

mod args;
mod broker;
mod broker_raw;
mod collector;
mod console;
mod cpu;
mod harness;
mod history;
mod latency;
mod latency_report;
mod raw;
mod read;
mod retention;
mod retention_report;
mod run;
mod samples;
mod scaling;
mod settle;
mod throughput;
mod trace;
mod yardstick;

use std::process::ExitCode;

use anyhow::Result;
use clap::Parser;

use outboxd::startup;

use args::Cli;

fn main() -> ExitCode {
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
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Loads the config, starts logging and runs the benchmark.
async fn execute(cli: Cli) -> Result<()> {
    let config = startup::load_config(cli.config.as_deref(), cli.database_url.as_deref())?;
    startup::init_logging(&config, &config.log.level);
    run::command(&config, cli.bench).await
}
