//! The `broker` publisher plugin: each event one message on a host `[[broker]]` connection
//! (NATS JetStream, RabbitMQ, Redis Streams, MQTT, Kafka), delivered once the broker confirmed it.
//!
//! Settings:
//! - `connection` (required): the `[[broker]]` name (the sink's `limits.allow_brokers` must list
//!   it);
//! - `topic`: template of the subject / routing key / stream / topic, default
//!   `outbox.{app_code}.{event_type}` (placeholders `{app_code}`, `{event_type}`, `{room_id}`,
//!   `{event_id}`);
//! - `key`: template of the ordering key, default `{room_id}` (a room's events in one Kafka
//!   partition); `""`: no key;
//! - `payload`: `protobuf` (default: the `outbox.v1.EventEnvelope` bytes), `json` (the event's
//!   JSON form, the body base64) or `body` (the body as it is);
//! - `headers`: `true` (default) or `false`: the headers `event-id`, `event-type`, `app-code`,
//!   `room-id`, `room-version`, `occurred-at-ms` and `content-type`, and the event's W3C trace
//!   context as `traceparent` and `tracestate` when it carries one.
//!
//! The message id is the event id: JetStream deduplicates on it (`Nats-Msg-Id`); it is the AMQP
//! `message_id`, and the `message-id` Redis field, MQTT user property and Kafka header. Each
//! event's result is the broker's answer as the host classed it.

mod envelope;
mod template;

use outboxd_plugin::broker::{self, Message};
use outboxd_plugin::{Config, Event, Plugin, PublishError, event_json, export_plugin, trace};

use template::Template;

/// What a message carries as its payload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Payload {
    Protobuf,
    Json,
    Body,
}

impl Payload {
    fn content_type(self) -> &'static str {
        match self {
            Payload::Protobuf => "application/x-protobuf; messageType=outbox.v1.EventEnvelope",
            Payload::Json => "application/json",
            Payload::Body => "application/octet-stream",
        }
    }
}

/// The plugin: the settings `init` parsed.
#[derive(Debug)]
struct BrokerPlugin {
    connection: String,
    topic: Template,
    key: Template,
    payload: Payload,
    headers: bool,
}

impl Plugin for BrokerPlugin {
    const NAME: &'static str = "broker";

    fn init(mut config: Config) -> Result<Self, String> {
        let connection = config.required("connection")?;
        let topic = config
            .optional("topic")
            .unwrap_or_else(|| "outbox.{app_code}.{event_type}".into());
        let topic = Template::parse("topic", &topic)?;
        if topic.is_empty() {
            return Err("`topic` must not be empty".into());
        }
        let key = config.optional("key").unwrap_or_else(|| "{room_id}".into());
        let key = Template::parse("key", &key)?;
        let payload = match config.choice("payload", &["protobuf", "json", "body"])? {
            Some("json") => Payload::Json,
            Some("body") => Payload::Body,
            _ => Payload::Protobuf,
        };
        let headers = config.flag("headers")?.unwrap_or(true);
        config.finish()?;
        Ok(BrokerPlugin {
            connection,
            topic,
            key,
            payload,
            headers,
        })
    }

    fn publish(&mut self, batch: &[Event]) -> Vec<Result<(), PublishError>> {
        let messages: Vec<Message> = batch.iter().map(|event| self.message(event)).collect();
        broker::publish(&self.connection, &messages)
    }
}

impl BrokerPlugin {
    /// The message of `event`.
    fn message(&self, event: &Event) -> Message {
        let trace = trace::context(event);
        let payload = match self.payload {
            Payload::Protobuf => envelope::encode(event, trace.as_ref()),
            Payload::Json => event_json::to_string(event).into_bytes(),
            Payload::Body => event.body.clone(),
        };
        let headers = if self.headers {
            vec![
                ("event-id".to_string(), event.event_id.clone()),
                ("event-type".to_string(), event.event_type.clone()),
                ("app-code".to_string(), event.app_code.clone()),
                ("room-id".to_string(), event.room_id.clone()),
                ("room-version".to_string(), event.room_version.to_string()),
                (
                    "occurred-at-ms".to_string(),
                    event.occurred_at_ms.to_string(),
                ),
                (
                    "content-type".to_string(),
                    self.payload.content_type().to_string(),
                ),
            ]
            .into_iter()
            .chain(trace.as_ref().map(trace::headers).unwrap_or_default())
            .collect()
        } else {
            Vec::new()
        };
        Message {
            topic: self.topic.render(event),
            key: (!self.key.is_empty()).then(|| self.key.render(event).into_bytes()),
            headers,
            payload,
            message_id: event.event_id.clone(),
        }
    }
}

export_plugin!(BrokerPlugin);

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn event(id: &str) -> Event {
        Event {
            app_code: "app".into(),
            event_id: id.into(),
            event_type: "RoomGiftSent".into(),
            room_id: "r-1".into(),
            room_version: 3,
            occurred_at_ms: 1_700_000_000_000,
            body: br#"{"gift":"rose"}"#.to_vec(),
            attempt: 1,
        }
    }

    fn plugin(pairs: &[(&str, &str)]) -> Result<BrokerPlugin, String> {
        BrokerPlugin::init(Config::from_pairs(pairs))
    }

    #[test]
    fn defaults_make_a_keyed_protobuf_message_with_headers() {
        let plugin = plugin(&[("connection", "events")]).unwrap();
        let message = plugin.message(&event("e-1"));
        assert_eq!(message.topic, "outbox.app.RoomGiftSent");
        assert_eq!(message.key.as_deref(), Some(&b"r-1"[..]));
        assert_eq!(message.message_id, "e-1");
        assert_eq!(message.payload, envelope::encode(&event("e-1"), None));
        let header = |name: &str| {
            message
                .headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
        };
        assert_eq!(header("event-id").as_deref(), Some("e-1"));
        assert_eq!(header("room-version").as_deref(), Some("3"));
        assert_eq!(header("occurred-at-ms").as_deref(), Some("1700000000000"));
        assert_eq!(header("room-id").as_deref(), Some("r-1"));
        assert_eq!(header("event-type").as_deref(), Some("RoomGiftSent"));
    }

    #[test]
    fn settings_choose_topic_key_payload_and_headers() {
        let rooms = plugin(&[
            ("connection", "events"),
            ("topic", "rooms.{room_id}"),
            ("key", ""),
            ("payload", "json"),
            ("headers", "false"),
        ])
        .unwrap();
        let message = rooms.message(&event("e-2"));
        assert_eq!(message.topic, "rooms.r-1");
        assert_eq!(message.key, None);
        assert!(message.headers.is_empty());
        let json: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
        assert_eq!(json["event_id"], "e-2");
        let body = plugin(&[("connection", "c"), ("payload", "body")]).unwrap();
        assert_eq!(body.message(&event("e")).payload, event("e").body);
    }

    #[test]
    fn bad_settings_are_named() {
        assert!(plugin(&[]).unwrap_err().contains("connection"));
        assert!(
            plugin(&[("connection", "c"), ("payload", "xml")])
                .unwrap_err()
                .contains("payload")
        );
        assert!(
            plugin(&[("connection", "c"), ("topic", "{nope}")])
                .unwrap_err()
                .contains("{nope}")
        );
        assert!(
            plugin(&[("connection", "c"), ("colour", "red")])
                .unwrap_err()
                .contains("unknown setting `colour`")
        );
        assert!(plugin(&[("connection", "c"), ("topic", "")]).is_err());
    }
}
