//! The events page: the search form (event id, room, type glob, status, error text, time range)
//! and one page of rows, newest first.

use maud::{Markup, html};

use super::super::access::Caller;
use super::super::data::EventsView;
use super::super::form::EventsForm;
use super::layout::{hidden, page};
use super::table;

const STATUSES: [&str; 6] = [
    "",
    "pending",
    "delivering",
    "retryable",
    "failed",
    "delivered",
];

/// The search form's fields (shared with the dead-letter list, which leaves out the status).
pub(crate) fn fields(form: &EventsForm, app_codes: &[String], status: bool) -> Markup {
    let texts = [
        ("id", "event id", &form.id, "exact"),
        ("room", "room", &form.room, "exact"),
        ("type", "type", &form.event_type, "glob: Room*"),
        ("error", "error", &form.error, "text in last_error"),
        ("since", "since", &form.since, "RFC 3339 or ms"),
        ("until", "until", &form.until, "RFC 3339 or ms"),
    ];
    let chosen =
        |app: &String| *app == form.app || (form.app.is_empty() && Some(app) == app_codes.first());
    html! {
        label {
            "app "
            select name="app" { @for app in app_codes { option value=(app) selected[chosen(app)] { (app) } } }
        }
        @if status {
            label {
                "status "
                select name="status" {
                    @for s in STATUSES {
                        option value=(s) selected[form.status == s] { (if s.is_empty() { "any" } else { s }) }
                    }
                }
            }
        }
        @for (name, label, value, hint) in texts {
            label { (label) " " input name=(name) value=(value) placeholder=(hint); }
        }
        @if !form.group.is_empty() { (hidden("group", &form.group)) }
    }
}

/// The page.
pub(crate) fn render(
    form: &EventsForm,
    view: Result<EventsView, String>,
    app_codes: &[String],
    caller: &Caller,
) -> String {
    let main = html! {
        form.search method="get" action="/events" {
            (fields(form, app_codes, true))
            button type="submit" { "Search" }
        }
        @match view {
            Ok(view) => {
                (table::rows(&view.page, false))
                (table::footer(&view.page, "/events", form, Some(view.elapsed_ms)))
            }
            Err(error) => p.message { (error) }
        }
    };
    page("Events", Some(caller), false, main)
}
