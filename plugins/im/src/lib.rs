//! The `im` publisher plugin: sends each event to its room's Tencent Cloud IM group.
//!
//! Each event becomes a `TIMCustomElem` group message (`send_group_msg`) or a group system
//! notification (`send_group_system_notification`) in group `group_prefix + room_id`, through the
//! IM REST API over wasi:http; the requests of a batch go out concurrently. The admin `usersig`
//! is made in the plugin from `secret_key` (TLSSigAPIv2, see `usersig`) and cached until near its
//! expiry. `Random` is derived from the event id so a retried event is deduplicated by IM. Answers
//! are classified by HTTP status (the SDK's `http::classify`) and `ActionStatus`/`ErrorCode`
//! (see `classify`).

mod classify;
mod config;
mod message;
mod publish;
mod usersig;

use outboxd_plugin::http::WasiPlatform;
use outboxd_plugin::{Event, Plugin, PublishError, export_plugin, log};

use crate::publish::ImSender;

/// The plugin: settings and the cached usersig.
struct ImPlugin {
    sender: ImSender,
}

impl Plugin for ImPlugin {
    const NAME: &'static str = "im";

    fn init(config: outboxd_plugin::Config) -> Result<Self, String> {
        let config = config::Config::parse(config)?;
        log::info(&format!(
            "im plugin: {} to groups `{}<room_id>` of app {} via {} as `{}`",
            config.mode.describe(),
            config.group_prefix,
            config.sdkappid,
            config.endpoint,
            config.identifier
        ));
        Ok(ImPlugin {
            sender: ImSender::new(config),
        })
    }

    fn publish(&mut self, batch: &[Event]) -> Vec<Result<(), PublishError>> {
        self.sender.publish_batch(&mut WasiPlatform, batch)
    }
}

export_plugin!(ImPlugin);
