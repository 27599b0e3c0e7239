//! The `im` publisher plugin: sends each event to its room's Tencent Cloud IM group.
//!
//! Each event becomes a `TIMCustomElem` group message (`send_group_msg`) or a group system
//! notification (`send_group_system_notification`) in group `group_prefix + room_id`, through the
//! IM REST API over wasi:http; the requests of a batch go out concurrently. The admin `usersig`
//! is made in the plugin from `secret_key` (TLSSigAPIv2, see `usersig`) and cached until near its
//! expiry. `Random` is derived from the event id so a retried event is deduplicated by IM. Answers
//! are classified by HTTP status and `ActionStatus`/`ErrorCode` (see `classify`).

wit_bindgen::generate!({
    world: "publisher",
    path: "../../wit",
});

mod classify;
mod config;
mod message;
mod publish;
mod usersig;

use std::sync::Mutex;

use http_util::WasiPlatform;
use outbox::publisher::logging::{Level, log};

use crate::publish::ImSender;

/// The plugin's state once `init` ran: settings and the cached usersig.
static STATE: Mutex<Option<ImSender>> = Mutex::new(None);

/// The plugin's implementation of the `publisher` world.
struct ImPlugin;

impl Guest for ImPlugin {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        let config = config::Config::parse(&config)?;
        log(
            Level::Info,
            &format!(
                "im plugin: {} to groups `{}<room_id>` of app {} via {} as `{}`",
                config.mode.describe(),
                config.group_prefix,
                config.sdkappid,
                config.endpoint,
                config.identifier
            ),
        );
        *STATE
            .lock()
            .map_err(|_| "im plugin: state poisoned".to_string())? = Some(ImSender::new(config));
        Ok(())
    }

    fn publish(batch: Vec<Event>) -> Vec<Result<(), PublishError>> {
        let Ok(mut guard) = STATE.lock() else {
            return batch
                .iter()
                .map(|_| {
                    Err(PublishError::Retryable(
                        "im plugin: state poisoned".to_string(),
                    ))
                })
                .collect();
        };
        let Some(publisher) = guard.as_mut() else {
            return batch
                .iter()
                .map(|_| {
                    Err(PublishError::Retryable(
                        "im plugin: publish before init".to_string(),
                    ))
                })
                .collect();
        };
        publisher.publish_batch(&mut WasiPlatform, &batch)
    }
}

export!(ImPlugin);
