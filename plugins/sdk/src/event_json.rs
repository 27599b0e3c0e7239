//! The event's JSON form, one definition for every plugin that sends or writes JSON:
//! `{"app_code", "event_id", "event_type", "room_id", "room_version", "occurred_at_ms",
//! "attempt", "body"}`, the body base64 (RFC 4648 standard alphabet, padded).

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use crate::Event;

/// `event` as a JSON object with every field, the body base64.
pub fn to_value(event: &Event) -> Value {
    json!({
        "app_code": event.app_code,
        "event_id": event.event_id,
        "event_type": event.event_type,
        "room_id": event.room_id,
        "room_version": event.room_version,
        "occurred_at_ms": event.occurred_at_ms,
        "attempt": event.attempt,
        "body": STANDARD.encode(&event.body),
    })
}

/// `event` as compact JSON text (see [`to_value`]).
pub fn to_string(event: &Event) -> String {
    to_value(event).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_body_base64() {
        let event = Event {
            app_code: "app".into(),
            event_id: "e-\"1\"".into(),
            event_type: "room.member.joined".into(),
            room_id: "r-1".into(),
            room_version: 7,
            occurred_at_ms: 1_700_000_000_000,
            body: br#"{"k":1}"#.to_vec(),
            attempt: 2,
        };
        let value: Value = serde_json::from_str(&to_string(&event)).unwrap();
        assert_eq!(value["app_code"], "app");
        assert_eq!(value["event_id"], "e-\"1\"");
        assert_eq!(value["event_type"], "room.member.joined");
        assert_eq!(value["room_id"], "r-1");
        assert_eq!(value["room_version"], 7);
        assert_eq!(value["occurred_at_ms"], 1_700_000_000_000i64);
        assert_eq!(value["attempt"], 2);
        assert_eq!(value["body"], "eyJrIjoxfQ==");
        assert_eq!(value.as_object().unwrap().len(), 8);
    }
}
