//! `outboxd bench`: the benchmark modes, and the dispatch that runs the one the arguments ask
//! for over one [`Harness`] and prints its report.
//!
//! | mode | flags | module |
//! |---|---|---|
//! | throughput (the default) | `--events`, `--shapes` | [`throughput`]; the raw SQL loops it compares against in [`raw`], the one-index yardstick table in [`yardstick`] |
//! | latency | `--rate` or `--every`, `--seconds` | [`latency`], its report [`latency_report`], what the slowest rows waited for [`trace`] |
//! | retention | `--retention` | [`retention`], its report [`retention_report`] |
//! | history scaling | `--history-scaling` | [`scaling`] |
//! | the console's pages | `--console-history` | [`console`] |
//! | a broker beside its own client | `--plugin …/broker.wasm --broker-raw` | [`broker`] (destinations, report), [`broker_raw`] (the brokers' own clients) |
//!
//! The last three load old history set-based with [`history`]. Every mode connects, names its
//! tenant, loads its publisher and writes its events through [`harness`], and prints
//! percentiles from [`samples`].

pub mod broker;
pub mod broker_raw;
pub mod console;
pub mod harness;
pub mod history;
pub mod latency;
pub mod latency_report;
pub mod raw;
pub mod retention;
pub mod retention_report;
pub mod samples;
pub mod scaling;
pub mod throughput;
pub mod trace;
pub mod yardstick;

use std::fmt::Display;

use super::BenchArgs;
pub use harness::Harness;
use outboxd::config::Config;

/// `outboxd bench`: runs the mode the arguments ask for and prints its report.
pub async fn command(config: &Config, args: BenchArgs) -> anyhow::Result<()> {
    if args.console.console_history.is_some() {
        return console::command(config, args).await;
    }
    let harness = Harness::new(config, &args)?;
    let broker = if args.broker_raw {
        let spec = broker::spec(config, &args)?;
        broker::prepare(spec).await?;
        Some(spec)
    } else {
        None
    };
    let report: Box<dyn Display> = if args.retention.retention {
        let options = retention::RetentionBenchOptions::new(&args)?;
        Box::new(retention::run(&harness, &options).await?)
    } else if args.scaling.history_scaling.is_some() {
        let options = scaling::ScalingOptions::new(&args)?;
        Box::new(scaling::run(&harness, &options).await?)
    } else if args.rate.is_some() || args.every.is_some() {
        let options = latency::LatencyOptions::new(&args);
        let publisher = harness.publisher(&args).await?;
        let report = latency::run(&harness, &options, publisher).await;
        if let Some(spec) = broker {
            broker::cleanup(spec).await;
        }
        Box::new(report?)
    } else {
        let options = throughput::BenchOptions::new(config, &args);
        let publisher = harness.publisher(&args).await?;
        let report = throughput::run(&harness, &options, publisher).await?;
        if broker.is_some() {
            let outboxd = report.rows.first().map_or(0.0, |row| row.drain_rate());
            print!("{report}");
            let raw = broker::raw(
                config,
                &args,
                options.events,
                options.batch_size,
                options.rooms,
            )
            .await?;
            Box::new(raw.with_outboxd(outboxd))
        } else {
            Box::new(report)
        }
    };
    print!("{report}");
    Ok(())
}
