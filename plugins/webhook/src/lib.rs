//! The `webhook` publisher plugin: POSTs each event to a URL as a Standard Webhooks request.
//!
//! Config (see `config`): `url`, `secret` (`whsec_<base64>`, several space-separated for
//! rotation), `content_type` (`json` | `raw`), `raw_content_type`, `timeout_ms`. Each request
//! carries `webhook-id` (the event id), `webhook-timestamp` and `webhook-signature` (see
//! `signature`); the requests of a batch go out concurrently over wasi:http (the SDK's
//! `http` module), and every answer is classified by the SDK's `http::classify`.

mod config;
mod payload;
mod publish;
mod signature;

use outboxd_plugin::http::WasiPlatform;
use outboxd_plugin::{Event, Plugin, PublishError, export_plugin, log};

use crate::config::Config;

/// The plugin: the settings `init` parsed.
struct WebhookPlugin {
    config: Config,
}

impl Plugin for WebhookPlugin {
    const NAME: &'static str = "webhook";

    fn init(config: outboxd_plugin::Config) -> Result<Self, String> {
        let config = Config::parse(config)?;
        log::info(&format!(
            "webhook plugin: posting to {} with {} signing secret(s)",
            config.url.split(['?', '#']).next().unwrap_or_default(),
            config.secrets.len()
        ));
        Ok(WebhookPlugin { config })
    }

    fn publish(&mut self, batch: &[Event]) -> Vec<Result<(), PublishError>> {
        publish::publish_batch(&self.config, &mut WasiPlatform, batch)
    }
}

export_plugin!(WebhookPlugin);
