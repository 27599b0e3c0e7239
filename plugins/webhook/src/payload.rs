//! Request bodies: the event's JSON form (the SDK's `event_json`) or the raw body bytes.

use outboxd_plugin::{Event, event_json};

use crate::config::Content;

/// The body to send for `event` and its `content-type`.
pub fn body(content: &Content, event: &Event) -> (Vec<u8>, String) {
    match content {
        Content::Json => (
            event_json::to_string(event).into_bytes(),
            "application/json".to_string(),
        ),
        Content::Raw(content_type) => (event.body.clone(), content_type.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::tests::event;

    #[test]
    fn json_body_has_every_field() {
        let (bytes, content_type) = body(&Content::Json, &event("e-1"));
        assert_eq!(content_type, "application/json");
        let value: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(value["event_id"], "e-1");
        assert_eq!(value["app_code"], "app");
        assert_eq!(value["event_type"], "room.member.joined");
        assert_eq!(value["room_id"], "r-1");
        assert_eq!(value["room_version"], 7);
        assert_eq!(value["occurred_at_ms"], 1_700_000_000_000i64);
        assert_eq!(value["attempt"], 2);
        assert_eq!(value["body"], "eyJrIjoxfQ==");
    }

    #[test]
    fn raw_body_is_the_bytes() {
        let (bytes, content_type) = body(
            &Content::Raw("application/x-protobuf".into()),
            &event("e-1"),
        );
        assert_eq!(bytes, br#"{"k":1}"#);
        assert_eq!(content_type, "application/x-protobuf");
    }
}
