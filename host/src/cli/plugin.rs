//! `outboxd plugin check|test`: tools for plugin authors, no database involved.

use anyhow::Result;

use super::PluginCommand;
use crate::config::Config;

/// `outboxd plugin check|test`.
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
    }
    Ok(())
}
