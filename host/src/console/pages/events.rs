//! The events page: the search form (event id, room, type glob, status, error text, time range)
//! and one page of rows, newest first.

use super::super::access::Caller;
use super::super::data::EventsView;
use super::super::form::EventsForm;
use super::super::html::Html;
use super::layout::page;
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
pub(crate) fn fields(h: &mut Html, form: &EventsForm, app_codes: &[String], status: bool) {
    h.open("label", &[]).text("app ");
    h.open("select", &[("name", "app")]);
    for app in app_codes {
        let selected =
            if *app == form.app || (form.app.is_empty() && Some(app) == app_codes.first()) {
                "selected"
            } else {
                ""
            };
        if selected.is_empty() {
            h.el("option", &[("value", app)], app);
        } else {
            h.el("option", &[("value", app), ("selected", "")], app);
        }
    }
    h.close("select").close("label");
    if status {
        h.open("label", &[])
            .text("status ")
            .open("select", &[("name", "status")]);
        for s in STATUSES {
            let label = if s.is_empty() { "any" } else { s };
            if form.status == s {
                h.el("option", &[("value", s), ("selected", "")], label);
            } else {
                h.el("option", &[("value", s)], label);
            }
        }
        h.close("select").close("label");
    }
    for (name, label, value, hint) in [
        ("id", "event id", &form.id, "exact"),
        ("room", "room", &form.room, "exact"),
        ("type", "type", &form.event_type, "glob: Room*"),
        ("error", "error", &form.error, "text in last_error"),
        ("since", "since", &form.since, "RFC 3339 or ms"),
        ("until", "until", &form.until, "RFC 3339 or ms"),
    ] {
        h.open("label", &[]).text(label).text(" ");
        h.open(
            "input",
            &[("name", name), ("value", value), ("placeholder", hint)],
        );
        h.close("label");
    }
    if !form.group.is_empty() {
        super::layout::hidden(h, "group", &form.group);
    }
}

/// The page.
pub(crate) fn render(
    form: &EventsForm,
    view: Result<EventsView, String>,
    app_codes: &[String],
    caller: &Caller,
) -> String {
    page("Events", Some(caller), false, |h| {
        h.open(
            "form",
            &[
                ("method", "get"),
                ("action", "/events"),
                ("class", "search"),
            ],
        );
        fields(h, form, app_codes, true);
        h.el("button", &[("type", "submit")], "Search");
        h.close("form");
        match view {
            Ok(view) => {
                table::rows(h, &view.page, false);
                table::footer(h, &view.page, "/events", form, Some(view.elapsed_ms));
            }
            Err(error) => {
                h.el("p", &[("class", "message")], &error);
            }
        }
    })
}
