//! One event: its columns, the envelope field by field (its trace id among them), the body as JSON / UTF-8 / hex, the
//! route that takes it now, and (for a dead letter) requeue and purge.

use maud::html;

use super::super::access::{Caller, Grant};
use super::super::data::{EnvelopeView, EventView};
use super::layout::{action_form, hidden, login_note, page, pair, time};

/// The envelope's trace context: the trace id (then the header values), why it is invalid, or
/// `-`.
fn trace(e: &EnvelopeView) -> String {
    match (&e.trace_id, &e.trace_error) {
        (Some(id), _) if e.tracestate.is_empty() => {
            format!("trace id {id} (traceparent {})", e.traceparent)
        }
        (Some(id), _) => format!(
            "trace id {id} (traceparent {}, tracestate {})",
            e.traceparent, e.tracestate
        ),
        (None, Some(error)) => format!("invalid, not passed on: {error}"),
        (None, None) => "-".into(),
    }
}

/// The page.
pub(crate) fn render(view: &EventView, caller: &Caller) -> String {
    let row = &view.row;
    let at = |ms: i64| format!("{ms} ({})", time(ms));
    let route = match &view.route {
        Some((glob, sink)) => format!("sink {sink} (route event_type = {glob:?})"),
        None => "no route takes this type: it would fail".into(),
    };
    let actions = [
        ("/actions/requeue", "Requeue this event"),
        ("/actions/purge", "Purge this event"),
    ];
    let main = html! {
        h2 { "Row" }
        table.pairs {
            (pair("app_code", &row.app_code))
            (pair("event_id", &row.event_id))
            (pair("event_type", &row.event_type))
            (pair("room_id", &row.room_id))
            (pair("status", &row.status))
            (pair("retry_count (attempts failed)", row.retry_count))
            (pair("last_error", row.last_error.as_deref().unwrap_or("-")))
            (pair("created_at_ms", at(row.created_at_ms)))
            (pair("updated_at_ms", at(row.updated_at_ms)))
            (pair("next_retry_at_ms", at(row.next_retry_at_ms)))
            (pair("worker_id", &row.worker_id))
            (pair("lock_until_ms", row.lock_until_ms.map_or("-".into(), at)))
            (pair("route now", route))
        }
        h2 { "Envelope (" (view.envelope_bytes) " bytes)" }
        @match &view.envelope {
            Err(error) => p.message { (error) }
            Ok(e) => {
                table.pairs {
                    (pair("app_code", &e.app_code))
                    (pair("event_id", &e.event_id))
                    (pair("room_id", &e.room_id))
                    (pair("event_type", &e.event_type))
                    (pair("room_version", e.room_version))
                    (pair("occurred_at_ms", at(e.occurred_at_ms)))
                    (pair("body", format!("{} bytes", e.body_bytes)))
                    (pair("trace", trace(e)))
                    @if let Some(id) = &view.delivery_trace_id {
                        (pair("delivery trace (outboxd's spans; the producer traced nothing)", id))
                    }
                    @if let Some(link) = &view.trace_link {
                        (pair("trace in the tracing UI", html! { a href=(link) rel="noreferrer" { (link) } }))
                    }
                }
                @if let Some(json) = &e.body_json {
                    h3 { "Body as JSON" } pre.body { (json) }
                } @else if let Some(text) = &e.body_utf8 {
                    h3 { "Body as UTF-8" } pre.body { (text) }
                }
                h3 { "Body as hex" } pre.body.hex { (e.body_hex) }
            }
        }
        @if row.status == "failed" && caller.grant == Grant::Act {
            h2 { "Dead letter" }
            @for (action, label) in actions {
                (action_form(caller, action, html! {
                    (hidden("app", &row.app_code)) (hidden("ids", &row.event_id)) (hidden("step", "run"))
                    button type="submit" { (label) }
                }))
            }
        } @else if row.status == "failed" {
            (login_note())
        }
    };
    page(
        &format!("Event {}", row.event_id),
        Some(caller),
        false,
        main,
    )
}
