//! Request building: the dedupe `Random`, the group id, the URL and the JSON body per mode.

use outboxd_plugin::Event;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

use crate::config::{Config, Mode};

/// A stable 32-bit value derived from `event_id`: the first four bytes of its SHA-256, big
/// endian. Sent as the message's `Random` (IM drops a second message with the same `Random` in
/// the same group within its dedupe window) and as the request's `random` query parameter.
pub fn random_for(event_id: &str) -> u32 {
    let digest = Sha256::digest(event_id.as_bytes());
    u32::from_be_bytes([digest[0], digest[1], digest[2], digest[3]])
}

/// The group an event goes to: `group_prefix` followed by its room id.
pub fn group_id(config: &Config, event: &Event) -> String {
    format!("{}{}", config.group_prefix, event.room_id)
}

/// The event's JSON form (the SDK's `event_json`), as text: the message's `Data` or the
/// notification's `Content`.
pub fn event_json(event: &Event) -> String {
    outboxd_plugin::event_json::to_string(event)
}

/// The request body for `event` in `config.mode`.
pub fn body(config: &Config, event: &Event) -> Value {
    let group = group_id(config, event);
    match config.mode {
        Mode::GroupMessage => json!({
            "GroupId": group,
            "Random": random_for(&event.event_id),
            "MsgBody": [{
                "MsgType": "TIMCustomElem",
                "MsgContent": { "Data": event_json(event), "Desc": event.event_type },
            }],
            // The event id travels with the message so clients can deduplicate beyond IM's
            // `Random` window.
            "CloudCustomData": json!({ "event_id": event.event_id }).to_string(),
        }),
        Mode::SystemNotification => json!({ "GroupId": group, "Content": event_json(event) }),
    }
}

/// The request URL: endpoint, API path for the mode, and the query string IM requires.
pub fn url(config: &Config, usersig: &str, random: u32) -> String {
    format!(
        "{}/v4/{}?sdkappid={}&identifier={}&usersig={}&random={}&contenttype=json",
        config.endpoint,
        config.mode.api(),
        config.sdkappid,
        percent_encode(&config.identifier),
        percent_encode(usersig),
        random
    )
}

/// `text` with every byte outside RFC 3986's unreserved set and `*` percent-encoded (`*`, a
/// character of the usersig alphabet, is legal in a query and is sent as-is like IM's own SDKs do).
fn percent_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~*".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::publish::tests::{config, event};

    #[test]
    fn random_is_stable_and_spread() {
        assert_eq!(random_for("e-1"), random_for("e-1"));
        assert_ne!(random_for("e-1"), random_for("e-2"));
        // SHA-256("abc") starts ba 78 16 bf.
        assert_eq!(random_for("abc"), 0xba78_16bf);
    }

    #[test]
    fn group_message_body() {
        let body = body(&config(Mode::GroupMessage), &event("e-1", "r-9"));
        assert_eq!(body["GroupId"], "room_r-9");
        assert_eq!(body["Random"], random_for("e-1"));
        assert_eq!(body["MsgBody"][0]["MsgType"], "TIMCustomElem");
        assert_eq!(
            body["MsgBody"][0]["MsgContent"]["Desc"],
            "room.member.joined"
        );
        let data: Value =
            serde_json::from_str(body["MsgBody"][0]["MsgContent"]["Data"].as_str().unwrap())
                .unwrap();
        assert_eq!(data["event_id"], "e-1");
        assert_eq!(data["room_version"], 7);
        assert_eq!(data["body"], "eyJrIjoxfQ==");
        let custom: Value =
            serde_json::from_str(body["CloudCustomData"].as_str().unwrap()).unwrap();
        assert_eq!(custom["event_id"], "e-1");
    }

    #[test]
    fn system_notification_body() {
        let body = body(&config(Mode::SystemNotification), &event("e-1", "r-9"));
        assert_eq!(body["GroupId"], "room_r-9");
        let content: Value = serde_json::from_str(body["Content"].as_str().unwrap()).unwrap();
        assert_eq!(content["event_type"], "room.member.joined");
        assert!(body.get("Random").is_none());
    }

    #[test]
    fn url_carries_the_query_string() {
        let mut config = config(Mode::GroupMessage);
        config.identifier = "ad min".into();
        assert_eq!(
            url(&config, "eJw*-_", 42),
            "http://127.0.0.1:1/v4/group_open_http_svc/send_group_msg?sdkappid=1400000000&identifier=ad%20min&usersig=eJw*-_&random=42&contenttype=json"
        );
    }
}
