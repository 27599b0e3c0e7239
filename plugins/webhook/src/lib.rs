//! The `webhook` publisher plugin: POSTs each event to a URL as a Standard Webhooks request.
//!
//! Config (see `config`): `url`, `secret` (`whsec_<base64>`, several space-separated for
//! rotation), `content_type` (`json` | `raw`), `raw_content_type`, `timeout_ms`. Each request
//! carries `webhook-id` (the event id), `webhook-timestamp` and `webhook-signature` (see
//! `signature`); the requests of a batch go out concurrently over wasi:http, and every answer is
//! classified into delivered / retryable / rate-limited / permanent (see `classify`).

wit_bindgen::generate!({
    world: "publisher",
    path: "../../wit",
});

mod classify;
mod config;
mod payload;
mod publish;
mod signature;

use std::sync::Mutex;

use http_util::WasiPlatform;
use outbox::publisher::logging::{Level, log};

use crate::config::Config;

/// The settings `init` parsed; `None` until `init` ran.
static CONFIG: Mutex<Option<Config>> = Mutex::new(None);

/// The plugin's implementation of the `publisher` world.
struct WebhookPlugin;

impl Guest for WebhookPlugin {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        let config = Config::parse(&config)?;
        log(
            Level::Info,
            &format!(
                "webhook plugin: posting to {} with {} signing secret(s)",
                config.url.split(['?', '#']).next().unwrap_or_default(),
                config.secrets.len()
            ),
        );
        *CONFIG
            .lock()
            .map_err(|_| "webhook plugin: state poisoned".to_string())? = Some(config);
        Ok(())
    }

    fn publish(batch: Vec<Event>) -> Vec<Result<(), PublishError>> {
        let config = CONFIG.lock().ok().and_then(|guard| guard.clone());
        let Some(config) = config else {
            return batch
                .iter()
                .map(|_| {
                    Err(PublishError::Retryable(
                        "webhook plugin: publish before init".to_string(),
                    ))
                })
                .collect();
        };
        publish::publish_batch(&config, &mut WasiPlatform, &batch)
    }
}

export!(WebhookPlugin);
