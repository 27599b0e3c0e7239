//! The `log` publisher plugin: writes one line per event through outboxd's logging import.
//!
//! Config: `format = "json" | "text"` (default `json`). JSON lines carry every event field, the
//! body base64-encoded; text lines are `key=value` pairs with the body's length.

wit_bindgen::generate!({
    world: "publisher",
    path: "../../wit",
});

use std::sync::Mutex;

use outbox::publisher::logging::{Level, log};

/// Line format, chosen by the `format` setting.
#[derive(Clone, Copy)]
enum Format {
    Json,
    Text,
}

/// The format `init` chose; `None` until `init` ran.
static FORMAT: Mutex<Option<Format>> = Mutex::new(None);

/// The plugin's implementation of the `publisher` world.
struct LogPlugin;

impl Guest for LogPlugin {
    fn init(config: Vec<(String, String)>) -> Result<(), String> {
        let mut format = Format::Json;
        for (key, value) in config {
            match (key.as_str(), value.as_str()) {
                ("format", "json") => format = Format::Json,
                ("format", "text") => format = Format::Text,
                ("format", other) => {
                    return Err(format!(
                        "log plugin: unknown format `{other}`: use `json` or `text`"
                    ));
                }
                (other, _) => {
                    return Err(format!(
                        "log plugin: unknown setting `{other}`: the only setting is `format`"
                    ));
                }
            }
        }
        *FORMAT
            .lock()
            .map_err(|_| "log plugin: state poisoned".to_string())? = Some(format);
        Ok(())
    }

    fn publish(batch: Vec<Event>) -> Vec<Result<(), PublishError>> {
        let format = FORMAT.lock().ok().and_then(|guard| *guard);
        let Some(format) = format else {
            return batch
                .iter()
                .map(|_| {
                    Err(PublishError::Retryable(
                        "log plugin: publish before init".to_string(),
                    ))
                })
                .collect();
        };
        batch
            .iter()
            .map(|event| {
                let line = match format {
                    Format::Json => json_line(event),
                    Format::Text => text_line(event),
                };
                log(Level::Info, &line);
                Ok(())
            })
            .collect()
    }
}

/// One JSON object with every field of `event`, body base64 (standard alphabet, padded).
fn json_line(event: &Event) -> String {
    let mut line = String::with_capacity(160 + event.body.len() * 4 / 3);
    line.push_str("{\"app_code\":");
    push_json_string(&mut line, &event.app_code);
    line.push_str(",\"event_id\":");
    push_json_string(&mut line, &event.event_id);
    line.push_str(",\"event_type\":");
    push_json_string(&mut line, &event.event_type);
    line.push_str(",\"room_id\":");
    push_json_string(&mut line, &event.room_id);
    line.push_str(&format!(
        ",\"room_version\":{},\"occurred_at_ms\":{},\"attempt\":{},\"body\":\"",
        event.room_version, event.occurred_at_ms, event.attempt
    ));
    push_base64(&mut line, &event.body);
    line.push_str("\"}");
    line
}

/// `key=value` pairs, strings quoted with Rust's debug escaping, the body as its length.
fn text_line(event: &Event) -> String {
    format!(
        "event_id={:?} event_type={:?} app_code={:?} room_id={:?} room_version={} occurred_at_ms={} attempt={} body_bytes={}",
        event.event_id,
        event.event_type,
        event.app_code,
        event.room_id,
        event.room_version,
        event.occurred_at_ms,
        event.attempt,
        event.body.len()
    )
}

/// Appends `text` as a JSON string literal.
fn push_json_string(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Appends `bytes` base64-encoded (RFC 4648 standard alphabet, with padding).
fn push_base64(out: &mut String, bytes: &[u8]) {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(ALPHABET[(n >> 18) as usize & 63] as char);
        out.push(ALPHABET[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            ALPHABET[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            ALPHABET[n as usize & 63] as char
        } else {
            '='
        });
    }
}

export!(LogPlugin);
