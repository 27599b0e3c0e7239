//! The console's search forms read from a query string: [`EventsForm`] (the events page, and the
//! failed list of the dead-letter page inside [`DeadForm`]), turned into the store's
//! [`EventQuery`] or, for "requeue / purge everything matching", its [`FailedFilter`]. A value
//! that does not parse is refused naming the field.

use super::request::ConsoleRequest;
use crate::record::Status;
use crate::store::{EventCursor, EventQuery, FailedFilter};

/// Rows on one page.
pub const PAGE_ROWS: u32 = 50;
/// Rows read per status when a filter is applied on top.
pub const SCAN_ROWS: u32 = 2_000;

/// The events search, as typed.
#[derive(Debug, Clone, Default)]
pub struct EventsForm {
    /// `app`.
    pub app: String,
    /// `status` (`""`: any).
    pub status: String,
    /// `id`: one event id.
    pub id: String,
    /// `room`.
    pub room: String,
    /// `type`: an event type glob.
    pub event_type: String,
    /// `error`: text in `last_error`.
    pub error: String,
    /// `group`: the exact `last_error` of a dead-letter group.
    pub group: String,
    /// `since`: RFC 3339 or Unix ms.
    pub since: String,
    /// `until`: RFC 3339 or Unix ms.
    pub until: String,
    /// `before`: the previous page's position, `created_at_ms.event_id`.
    pub before: String,
}

impl EventsForm {
    /// The form of a request's query string (or, `from_form`, its form body).
    pub fn read(request: &ConsoleRequest, from_form: bool) -> EventsForm {
        let get = |key: &str| {
            if from_form {
                request.f(key)
            } else {
                request.q(key)
            }
            .to_string()
        };
        EventsForm {
            app: get("app"),
            status: get("status"),
            id: get("id"),
            room: get("room"),
            event_type: get("type"),
            error: get("error"),
            group: get("group"),
            since: get("since"),
            until: get("until"),
            before: get("before"),
        }
    }

    /// The tenant, or `default`.
    pub fn app_or(&self, default: &str) -> String {
        if self.app.is_empty() {
            default
        } else {
            &self.app
        }
        .to_string()
    }

    /// The store's query; `default_app` when no tenant was given.
    pub fn query(&self, default_app: &str) -> Result<EventQuery, String> {
        let text = |value: &str| (!value.is_empty()).then(|| value.to_string());
        let statuses = match self.status.as_str() {
            "" | "any" => Vec::new(),
            status => vec![Status::parse(status).ok_or_else(|| {
                format!(
                    "status {status:?} is none of pending, delivering, retryable, failed, delivered"
                )
            })?],
        };
        Ok(EventQuery {
            app_code: self.app_or(default_app),
            statuses,
            event_id: text(&self.id),
            room_id: text(&self.room),
            event_type: text(&self.event_type),
            error_contains: text(&self.error),
            last_error: text(&self.group),
            since_ms: parse_time("since", &self.since)?,
            until_ms: parse_time("until", &self.until)?,
            before: parse_cursor(&self.before)?,
            limit: PAGE_ROWS,
            scan_limit: SCAN_ROWS,
        })
    }

    /// The dead-letter filter these fields describe (every `failed` row they match, for requeue
    /// or purge of everything matching). A type glob or error text has no such filter: refused.
    pub fn failed_filter(&self, default_app: &str) -> Result<FailedFilter, String> {
        if self.event_type.contains(['*', '?']) {
            return Err("a type glob cannot be requeued or purged as a filter: give an exact type, or select the rows".into());
        }
        if !self.error.is_empty() {
            return Err("error text cannot be requeued or purged as a filter: pick its group, or select the rows".into());
        }
        let text = |value: &str| (!value.is_empty()).then(|| value.to_string());
        Ok(FailedFilter {
            app_code: Some(self.app_or(default_app)),
            event_ids: text(&self.id).into_iter().collect(),
            event_type: text(&self.event_type),
            room_id: text(&self.room),
            since_ms: parse_time("since", &self.since)?,
            until_ms: parse_time("until", &self.until)?,
            last_error: text(&self.group),
        })
    }

    /// The fields as `(name, value)` pairs, for links and hidden inputs.
    pub fn pairs(&self) -> Vec<(&'static str, &str)> {
        vec![
            ("app", &self.app),
            ("status", &self.status),
            ("id", &self.id),
            ("room", &self.room),
            ("type", &self.event_type),
            ("error", &self.error),
            ("group", &self.group),
            ("since", &self.since),
            ("until", &self.until),
        ]
    }
}

/// The dead-letter page's form: the failed list's filters.
#[derive(Debug, Clone, Default)]
pub struct DeadForm {
    /// The list's filters (status is always `failed`).
    pub events: EventsForm,
}

impl DeadForm {
    /// The form of a request's query string.
    pub fn read(request: &ConsoleRequest) -> DeadForm {
        DeadForm {
            events: EventsForm::read(request, false),
        }
    }

    /// The tenant, or `default`.
    pub fn app_or(&self, default: &str) -> String {
        self.events.app_or(default)
    }
}

/// RFC 3339 (`2026-11-29T10:00:00Z`) or Unix ms; `""` is none.
pub fn parse_time(field: &str, text: &str) -> Result<Option<i64>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    if let Ok(ms) = text.parse::<i64>() {
        return Ok(Some(ms));
    }
    humantime::parse_rfc3339_weak(text)
        .map(|t| Some(crate::record::system_time_ms(t)))
        .map_err(|_| {
            format!(
                "{field} {text:?} is neither RFC 3339 (2026-11-29T10:00:00Z) nor Unix milliseconds"
            )
        })
}

/// `created_at_ms.event_id`; `""` is none.
pub fn parse_cursor(text: &str) -> Result<Option<EventCursor>, String> {
    if text.is_empty() {
        return Ok(None);
    }
    let parsed = text.split_once('.').and_then(|(created, id)| {
        Some(EventCursor {
            created_at_ms: created.parse().ok()?,
            event_id: id.to_string(),
        })
    });
    parsed
        .map(Some)
        .ok_or_else(|| format!("before {text:?} is not a page position (created_at_ms.event_id)"))
}

/// The `before` value of a position.
pub fn cursor_text(cursor: &EventCursor) -> String {
    format!("{}.{}", cursor.created_at_ms, cursor.event_id)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_fields_are_named() {
        let form = EventsForm {
            status: "lost".into(),
            ..EventsForm::default()
        };
        assert!(form.query("a").unwrap_err().contains("status \"lost\""));
        let form = EventsForm {
            since: "yesterday".into(),
            ..EventsForm::default()
        };
        assert!(
            form.query("a")
                .unwrap_err()
                .starts_with("since \"yesterday\"")
        );
        assert!(parse_cursor("x").unwrap_err().contains("before"));
        let cursor = parse_cursor("17.evt.a.b").unwrap().unwrap();
        assert_eq!(
            (cursor.created_at_ms, cursor.event_id.as_str()),
            (17, "evt.a.b")
        );
        assert_eq!(cursor_text(&cursor), "17.evt.a.b");
        let glob = EventsForm {
            event_type: "Room*".into(),
            ..EventsForm::default()
        };
        assert!(glob.failed_filter("a").unwrap_err().contains("glob"));
        assert_eq!(
            parse_time("since", "1970-01-01T00:00:01Z").unwrap(),
            Some(1000)
        );
    }
}
