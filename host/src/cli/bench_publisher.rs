//! The publisher of `outboxd bench`: the `--plugin` component with every event routed to it
//! (on the config's `[[broker]]` connections, all of them allowed), or a native no-op.

use std::sync::Arc;

use anyhow::Context as _;

use super::BenchArgs;
use outboxd::broker::Brokers;
use outboxd::config::{Config, Publishing, RouteConfig, SinkConfig, SinkLimits};
use outboxd::publish::{Event, Outcome, Publisher};

/// A publisher that accepts everything at once: measures the host, not a sink.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoopPublisher;

#[async_trait::async_trait]
impl Publisher for NoopPublisher {
    async fn publish(&self, batch: &[Event]) -> Vec<Outcome> {
        vec![Outcome::Delivered; batch.len()]
    }
}

/// The publisher, and the broker connections it publishes on (close them when done).
pub async fn publisher(
    config: &Config,
    args: &BenchArgs,
) -> anyhow::Result<(Arc<dyn Publisher>, Brokers)> {
    let Some(plugin) = &args.plugin else {
        return Ok((Arc::new(NoopPublisher), Brokers::none()));
    };
    let mut settings = std::collections::BTreeMap::new();
    for pair in &args.plugin_config {
        let (key, value) = pair
            .split_once('=')
            .with_context(|| format!("--plugin-config {pair:?}: expected KEY=VALUE"))?;
        settings.insert(key.to_string(), value.to_string());
    }
    // Only the connection the plugin names is opened, when it names one.
    let wanted: Vec<_> = config
        .brokers
        .iter()
        .filter(|b| settings.get("connection").is_none_or(|c| c == b.name()))
        .cloned()
        .collect();
    let brokers = Brokers::open(&wanted, &outboxd::metrics::Metrics::default());
    let sink = SinkConfig {
        name: "bench".into(),
        plugin: plugin.clone(),
        config: settings,
        limits: SinkLimits {
            allow_brokers: brokers.names(),
            ..SinkLimits::default()
        },
        breaker: Default::default(),
    };
    let route = RouteConfig {
        event_type: "*".into(),
        sink: "bench".into(),
    };
    let publishing =
        Publishing::new(vec![sink], vec![route], std::path::Path::new("")).context("--plugin")?;
    let publisher = outboxd::plugin::load_publisher_with_brokers(
        &publishing,
        &config.plugins,
        &outboxd::metrics::Metrics::default(),
        &brokers,
    )
    .await
    .with_context(|| format!("cannot load the plugin {}", plugin.display()))?;
    Ok((publisher, brokers))
}
