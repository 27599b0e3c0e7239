//! `outboxd plugin check|test|new|bench`: tools for plugin authors, no database involved.

use anyhow::Result;

use super::{PluginCommand, plugin_bench, plugin_new, plugin_test};
use outboxd::config::Config;

/// `outboxd plugin check|test|new|bench`.
pub async fn command(config: &Config, command: PluginCommand) -> Result<()> {
    match command {
        PluginCommand::Check { file } => {
            let report = outboxd::plugin::check(&file, &config.plugins).await?;
            println!("{report}");
        }
        PluginCommand::Test {
            file,
            config: settings,
            allow_hosts,
            events,
            stand_in,
        } => {
            let options = plugin_test::PluginTestOptions {
                file: &file,
                config: parse_settings(&settings)?,
                events: parse_events(&events, |_| {})?,
                allow_hosts,
                stand_in: &stand_in,
            };
            plugin_test::run(options, &config.plugins).await?;
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
            let settings = parse_settings(&settings)?;
            let samples = parse_events(&events, |sample| sample.body = vec![b'x'; 256])?;
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

/// The `--config key=value` pairs of `plugin test` and `plugin bench`.
fn parse_settings(pairs: &[String]) -> Result<Vec<(String, String)>> {
    Ok(pairs
        .iter()
        .map(|pair| outboxd::plugin::parse_config_pair(pair))
        .collect::<Result<Vec<_>, _>>()?)
}

/// The `--event JSON` arguments as events; with none, one default event, adjusted by `default`.
fn parse_events(
    jsons: &[String],
    default: impl FnOnce(&mut outboxd::publish::Event),
) -> Result<Vec<outboxd::publish::Event>> {
    if jsons.is_empty() {
        let mut sample = outboxd::plugin::parse_event_json(0, "{}")?;
        default(&mut sample);
        return Ok(vec![sample]);
    }
    Ok(jsons
        .iter()
        .enumerate()
        .map(|(i, json)| outboxd::plugin::parse_event_json(i, json))
        .collect::<Result<Vec<_>, _>>()?)
}
