//! Topic and key templates: text with `{app_code}`, `{event_type}`, `{room_id}` and
//! `{event_id}` placeholders, parsed once at `init` (an unknown placeholder is an error naming
//! it) and filled per event.

use outboxd_plugin::Event;

/// One piece of a template.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    AppCode,
    EventType,
    RoomId,
    EventId,
}

/// A parsed template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Template {
    pieces: Vec<Piece>,
}

impl Template {
    /// Parses `text`; `key` names the setting in errors.
    pub fn parse(key: &str, text: &str) -> Result<Template, String> {
        let mut pieces = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('{') {
            if open > 0 {
                pieces.push(Piece::Text(rest[..open].to_string()));
            }
            let after = &rest[open + 1..];
            let close = after
                .find('}')
                .ok_or_else(|| format!("`{key}` has a `{{` without its `}}`: `{text}`"))?;
            pieces.push(match &after[..close] {
                "app_code" => Piece::AppCode,
                "event_type" => Piece::EventType,
                "room_id" => Piece::RoomId,
                "event_id" => Piece::EventId,
                other => {
                    return Err(format!(
                        "`{key}` has an unknown placeholder `{{{other}}}`: use {{app_code}}, \
                         {{event_type}}, {{room_id}} or {{event_id}}"
                    ));
                }
            });
            rest = &after[close + 1..];
        }
        if !rest.is_empty() {
            pieces.push(Piece::Text(rest.to_string()));
        }
        Ok(Template { pieces })
    }

    /// Whether the template is empty (an empty key: no key).
    pub fn is_empty(&self) -> bool {
        self.pieces.is_empty()
    }

    /// The template filled with `event`'s fields.
    pub fn render(&self, event: &Event) -> String {
        let mut out = String::new();
        for piece in &self.pieces {
            out.push_str(match piece {
                Piece::Text(text) => text,
                Piece::AppCode => &event.app_code,
                Piece::EventType => &event.event_type,
                Piece::RoomId => &event.room_id,
                Piece::EventId => &event.event_id,
            });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tests::event;

    #[test]
    fn renders_placeholders() {
        let topic = Template::parse("topic", "outbox.{app_code}.{event_type}").unwrap();
        assert_eq!(topic.render(&event("e-1")), "outbox.app.RoomGiftSent");
        let rooms = Template::parse("topic", "rooms.{room_id}").unwrap();
        assert_eq!(rooms.render(&event("e-1")), "rooms.r-1");
        let id = Template::parse("key", "{event_id}").unwrap();
        assert_eq!(id.render(&event("e-9")), "e-9");
        assert!(Template::parse("key", "").unwrap().is_empty());
        assert_eq!(
            Template::parse("topic", "plain")
                .unwrap()
                .render(&event("e")),
            "plain"
        );
    }

    #[test]
    fn bad_templates_name_the_key() {
        let err = Template::parse("topic", "a.{room}").unwrap_err();
        assert!(err.contains("`topic`") && err.contains("{room}"), "{err}");
        let err = Template::parse("key", "a.{room_id").unwrap_err();
        assert!(err.contains("`key`"), "{err}");
    }
}
