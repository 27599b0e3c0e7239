//! The host side of the WIT `broker` import: a plugin's messages handed to the `[[broker]]`
//! connection it names, if its sink may use it (`limits.allow_brokers`), answered once the broker
//! confirmed each, and always before the call's deadline: the guest is blocked in this host call,
//! where epochs are not checked, so the publish itself ends [`BROKER_RETURN_MARGIN`] before it
//! (messages unconfirmed then are retryable) and leaves the guest time to return its results.

use std::time::{Duration, Instant};

use super::bindings::outbox::publisher::broker::{self, Message as WitMessage};
use super::bindings::outbox::publisher::types::{PublishError, RateLimit};
use super::state::HostState;
use crate::broker::{BrokerRefusal, Message, PublishOutcome};

/// How long before the plugin call's deadline a broker publish gives up waiting for
/// confirmations, left to the guest to return its results. (Not the configuration's
/// [`DEADLINE_MARGIN`](crate::config::DEADLINE_MARGIN), which nests the configured timeouts.)
pub const BROKER_RETURN_MARGIN: Duration = Duration::from_millis(200);

/// The deadline of a broker publish made outside an armed call (never in practice).
const UNARMED_DEADLINE: Duration = Duration::from_secs(10);

impl broker::Host for HostState {
    async fn publish(
        &mut self,
        connection: String,
        messages: Vec<WitMessage>,
    ) -> Vec<Result<(), PublishError>> {
        let sink = self.sink.clone();
        let Some(target) = sink.brokers.get(&connection).cloned() else {
            tracing::warn!(sink = %sink.name, broker = %connection,
                "plugin published to a broker connection its sink may not use (not in limits.allow_brokers)");
            let message = format!(
                "sink `{}` may not publish on broker `{connection}`: it is not in the sink's \
                 limits.allow_brokers ({})",
                sink.name,
                sink.brokers.names().join(", ")
            );
            return vec![Err(PublishError::Permanent(message)); messages.len()];
        };
        let now = Instant::now();
        let deadline = self.deadline.map_or(now + UNARMED_DEADLINE, |deadline| {
            deadline
                .checked_sub(BROKER_RETURN_MARGIN)
                .filter(|d| *d > now)
                .unwrap_or(now)
        });
        let messages: Vec<Message> = messages.into_iter().map(from_wit).collect();
        target
            .publish(&messages, deadline)
            .await
            .into_iter()
            .map(to_wit)
            .collect()
    }
}

fn from_wit(message: WitMessage) -> Message {
    Message {
        topic: message.topic,
        key: message.key,
        headers: message.headers,
        payload: message.payload,
        message_id: message.message_id,
    }
}

fn to_wit(sent: PublishOutcome) -> Result<(), PublishError> {
    sent.map_err(|refusal| match refusal {
        BrokerRefusal::Retryable(message) => PublishError::Retryable(message),
        BrokerRefusal::Permanent(message) => PublishError::Permanent(message),
        BrokerRefusal::RateLimited {
            message,
            retry_after,
        } => PublishError::RateLimited(RateLimit {
            message,
            retry_after_ms: u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX),
        }),
    })
}
