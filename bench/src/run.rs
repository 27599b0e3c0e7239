//! The dispatch: runs the mode the arguments ask for over one [`Harness`] and prints its report
//! (the modes are listed in `main.rs`).

use std::fmt::Display;

use crate::args::BenchArgs;
use crate::harness::Harness;
use crate::{broker, console, latency, retention, scaling, throughput};
use outboxd::config::Config;

/// Runs the mode the arguments ask for and prints its report.
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
