//! The `log` publisher plugin: writes one line per event through outboxd's logging import.
//!
//! Config: `format = "json" | "text"` (default `json`). JSON lines are the event's JSON form
//! (every field, the body base64); text lines are `key=value` pairs with the body's length.

use outboxd_plugin::{Config, Event, Plugin, PublishError, event_json, export_plugin, log};

/// Line format, chosen by the `format` setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Format {
    Json,
    Text,
}

/// The plugin: the format `init` chose.
struct LogPlugin {
    format: Format,
}

impl Plugin for LogPlugin {
    const NAME: &'static str = "log";

    fn init(mut config: Config) -> Result<Self, String> {
        let format = match config.choice("format", &["json", "text"])? {
            Some("text") => Format::Text,
            _ => Format::Json,
        };
        config.finish()?;
        Ok(LogPlugin { format })
    }

    fn publish(&mut self, batch: &[Event]) -> Vec<Result<(), PublishError>> {
        batch
            .iter()
            .map(|event| {
                log::info(&line(self.format, event));
                Ok(())
            })
            .collect()
    }
}

/// The log line of `event` in `format`.
fn line(format: Format, event: &Event) -> String {
    match format {
        Format::Json => event_json::to_string(event),
        Format::Text => format!(
            "event_id={:?} event_type={:?} app_code={:?} room_id={:?} room_version={} occurred_at_ms={} attempt={} body_bytes={}",
            event.event_id,
            event.event_type,
            event.app_code,
            event.room_id,
            event.room_version,
            event.occurred_at_ms,
            event.attempt,
            event.body.len()
        ),
    }
}

export_plugin!(LogPlugin);

#[cfg(test)]
mod tests {
    use super::*;

    fn event() -> Event {
        Event {
            app_code: "app".into(),
            event_id: "e-1".into(),
            event_type: "RoomGiftSent".into(),
            room_id: "r-1".into(),
            room_version: 3,
            occurred_at_ms: 1_700_000_000_000,
            body: b"hi".to_vec(),
            attempt: 1,
        }
    }

    #[test]
    fn formats_and_settings() {
        let plugin = LogPlugin::init(Config::from_pairs(&[("format", "text")])).unwrap();
        assert_eq!(plugin.format, Format::Text);
        assert_eq!(
            line(Format::Text, &event()),
            r#"event_id="e-1" event_type="RoomGiftSent" app_code="app" room_id="r-1" room_version=3 occurred_at_ms=1700000000000 attempt=1 body_bytes=2"#
        );
        let json: serde_json::Value = serde_json::from_str(&line(Format::Json, &event())).unwrap();
        assert_eq!(json["body"], "aGk=");
        assert_eq!(
            LogPlugin::init(Config::default()).unwrap().format,
            Format::Json
        );
        assert_eq!(
            LogPlugin::init(Config::from_pairs(&[("format", "xml")])).err(),
            Some("unknown format `xml`: use `json` or `text`".to_string())
        );
        assert!(
            LogPlugin::init(Config::from_pairs(&[("colour", "red")]))
                .err()
                .unwrap()
                .contains("unknown setting `colour`")
        );
    }
}
