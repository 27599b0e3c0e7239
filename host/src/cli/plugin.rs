//! `outboxd plugin check|test|new|bench`: tools for plugin authors, no database involved.

use anyhow::Result;

use super::{PluginCommand, plugin_bench, plugin_new};
use crate::config::Config;

/// `outboxd plugin check|test|new|bench`.
pub async fn command(config: &Config, command: PluginCommand) -> Result<()> {
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
        PluginCommand::New {
            name,
            lang,
            dir,
            sdk_path,
        } => {
            let dir = dir.unwrap_or_else(|| std::path::PathBuf::from(&name));
            let files = plugin_new::scaffold(&plugin_new::ScaffoldOptions {
                name: name.clone(),
                lang,
                dir: dir.clone(),
                sdk_path,
            })?;
            println!("created plugin `{name}` in {}:", dir.display());
            for file in files {
                println!("  {}", file.display());
            }
            println!(
                "next: cd {} && make && make test (see README.md)",
                dir.display()
            );
        }
        PluginCommand::Bench {
            file,
            config: settings,
            allow_hosts,
            events,
            count,
            batch_size,
        } => {
            let settings = settings
                .iter()
                .map(|pair| crate::plugin::parse_config_pair(pair))
                .collect::<Result<Vec<_>, _>>()?;
            let samples = if events.is_empty() {
                let mut sample = crate::plugin::parse_event_json(0, "{}")?;
                sample.body = vec![b'x'; 256];
                vec![sample]
            } else {
                events
                    .iter()
                    .enumerate()
                    .map(|(i, json)| crate::plugin::parse_event_json(i, json))
                    .collect::<Result<Vec<_>, _>>()?
            };
            let report = plugin_bench::bench_plugin(&plugin_bench::PluginBenchOptions {
                path: file,
                config: settings,
                allow_hosts,
                samples,
                events: count as usize,
                batch_size: batch_size as usize,
                settings: config.plugins.clone(),
            })
            .await?;
            println!("{report}");
        }
    }
    Ok(())
}
