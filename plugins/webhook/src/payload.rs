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
    fn json_body_is_the_sdk_event_json() {
        let event = event("e-1");
        let (bytes, content_type) = body(&Content::Json, &event);
        assert_eq!(content_type, "application/json");
        assert_eq!(bytes, event_json::to_string(&event).into_bytes());
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
