//! Publishing on the host's message-broker connections (feature `broker`): the WIT `broker`
//! import. The host holds the connections (`[[broker]]` in outboxd's config); a plugin names one
//! and may use only those its sink's `limits.allow_brokers` lists. Each message's result comes
//! back once the broker confirmed it, classed like a publish result, so a plugin usually returns
//! them as they are.
//!
//! ```ignore
//! use outboxd_plugin::broker::{self, Message};
//! let results = broker::publish("events", &[Message {
//!     topic: "outbox.default.RoomGiftSent".into(),
//!     key: Some(b"room-1".to_vec()),
//!     headers: vec![("event-type".into(), "RoomGiftSent".into())],
//!     payload: b"{}".to_vec(),
//!     message_id: "evt_1".into(),
//! }]);
//! ```

use crate::PublishError;
pub use crate::bindings::outbox::publisher::broker::Message;

/// Publishes `messages` in order on the connection named `connection` and returns one result
/// per message, in order, each once the broker confirmed it (see the WIT `broker.publish`).
pub fn publish(connection: &str, messages: &[Message]) -> Vec<Result<(), PublishError>> {
    crate::bindings::outbox::publisher::broker::publish(connection, messages)
}
