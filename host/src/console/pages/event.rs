//! One event: its columns, the envelope field by field, the body as JSON / UTF-8 / hex, the
//! route that takes it now, and (for a dead letter) requeue and purge.

use super::super::access::Caller;
use super::super::data::EventView;
use super::super::html::Html;
use super::layout::{action_form, hidden, may_act, page, time};

fn pair(h: &mut Html, key: &str, value: &str) {
    h.open("tr", &[])
        .el("th", &[], key)
        .el("td", &[], value)
        .close("tr");
}

/// The page.
pub(crate) fn render(view: &EventView, caller: &Caller) -> String {
    let row = &view.row;
    page(
        &format!("Event {}", row.event_id),
        Some(caller),
        false,
        |h| {
            h.el("h2", &[], "Row");
            h.open("table", &[("class", "pairs")]);
            pair(h, "app_code", &row.app_code);
            pair(h, "event_id", &row.event_id);
            pair(h, "event_type", &row.event_type);
            pair(h, "room_id", &row.room_id);
            pair(h, "status", &row.status);
            pair(
                h,
                "retry_count (attempts failed)",
                &row.retry_count.to_string(),
            );
            pair(h, "last_error", row.last_error.as_deref().unwrap_or("-"));
            pair(
                h,
                "created_at_ms",
                &format!("{} ({})", row.created_at_ms, time(row.created_at_ms)),
            );
            pair(
                h,
                "updated_at_ms",
                &format!("{} ({})", row.updated_at_ms, time(row.updated_at_ms)),
            );
            pair(
                h,
                "next_retry_at_ms",
                &format!("{} ({})", row.next_retry_at_ms, time(row.next_retry_at_ms)),
            );
            pair(h, "worker_id", &row.worker_id);
            pair(
                h,
                "lock_until_ms",
                &row.lock_until_ms
                    .map_or("-".into(), |ms| format!("{ms} ({})", time(ms))),
            );
            pair(
                h,
                "route now",
                &match &view.route {
                    Some((glob, sink)) => format!("sink {sink} (route event_type = {glob:?})"),
                    None => "no route takes this type: it would fail".into(),
                },
            );
            h.close("table");
            h.el(
                "h2",
                &[],
                &format!("Envelope ({} bytes)", view.envelope_bytes),
            );
            match &view.envelope {
                Err(error) => {
                    h.el("p", &[("class", "message")], error);
                }
                Ok(e) => {
                    h.open("table", &[("class", "pairs")]);
                    pair(h, "app_code", &e.app_code);
                    pair(h, "event_id", &e.event_id);
                    pair(h, "room_id", &e.room_id);
                    pair(h, "event_type", &e.event_type);
                    pair(h, "room_version", &e.room_version.to_string());
                    pair(
                        h,
                        "occurred_at_ms",
                        &format!("{} ({})", e.occurred_at_ms, time(e.occurred_at_ms)),
                    );
                    pair(h, "body", &format!("{} bytes", e.body_bytes));
                    h.close("table");
                    if let Some(json) = &e.body_json {
                        h.el("h3", &[], "Body as JSON")
                            .el("pre", &[("class", "body")], json);
                    } else if let Some(text) = &e.body_utf8 {
                        h.el("h3", &[], "Body as UTF-8")
                            .el("pre", &[("class", "body")], text);
                    }
                    h.el("h3", &[], "Body as hex")
                        .el("pre", &[("class", "body hex")], &e.body_hex);
                }
            }
            if row.status == "failed" && may_act(h, caller) {
                h.el("h2", &[], "Dead letter");
                for (action, label) in [
                    ("/actions/requeue", "Requeue this event"),
                    ("/actions/purge", "Purge this event"),
                ] {
                    action_form(h, caller, action);
                    hidden(h, "app", &row.app_code);
                    hidden(h, "ids", &row.event_id);
                    hidden(h, "step", "run");
                    h.el("button", &[("type", "submit")], label).close("form");
                }
            }
        },
    )
}
