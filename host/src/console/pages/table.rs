//! The rows table the events page and the dead-letter list share, and the "older" link of its
//! keyset pagination (no OFFSET: the next page starts below the last row's position).

use super::super::form::{EventsForm, cursor_text};
use super::super::html::{Html, href};
use super::layout::time;
use crate::store::EventPage;

/// The table of `page`'s rows; `select`: a checkbox per row (named `ids`, inside the caller's
/// form).
pub(crate) fn rows(h: &mut Html, page: &EventPage, select: bool) {
    if page.events.is_empty() {
        h.el("p", &[("class", "note")], "No rows match on this page.");
    } else {
        h.open("table", &[("class", "rows")])
            .open("thead", &[])
            .open("tr", &[]);
        if select {
            h.el("th", &[], "");
        }
        for name in [
            "created",
            "event id",
            "type",
            "room",
            "status",
            "attempts",
            "last error",
        ] {
            h.el("th", &[], name);
        }
        h.close("tr").close("thead").open("tbody", &[]);
        for row in &page.events {
            h.open("tr", &[("class", &row.status)]);
            if select {
                h.open("td", &[]);
                h.open(
                    "input",
                    &[
                        ("type", "checkbox"),
                        ("name", "ids"),
                        ("value", &row.event_id),
                        ("aria-label", "select"),
                    ],
                );
                h.close("td");
            }
            h.el("td", &[("class", "time")], &time(row.created_at_ms));
            h.open("td", &[])
                .el(
                    "a",
                    &[(
                        "href",
                        &href("/event", &[("app", &row.app_code), ("id", &row.event_id)]),
                    )],
                    &row.event_id,
                )
                .close("td");
            h.el("td", &[], &row.event_type);
            h.el("td", &[], &row.room_id);
            h.el("td", &[("class", "status")], &row.status);
            h.open("td", &[]).num(row.retry_count).close("td");
            h.el(
                "td",
                &[("class", "error")],
                row.last_error.as_deref().unwrap_or(""),
            );
            h.close("tr");
        }
        h.close("tbody").close("table");
    }
}

/// What the page read, and the link to the next (older) page.
pub(crate) fn footer(
    h: &mut Html,
    page: &EventPage,
    path: &'static str,
    form: &EventsForm,
    elapsed_ms: Option<f64>,
) {
    h.open("p", &[("class", "note")]);
    h.text(&format!(
        "{} rows shown, {} read from the database",
        page.events.len(),
        page.scanned
    ));
    if let Some(ms) = elapsed_ms {
        h.text(&format!(" in {ms:.1} ms"));
    }
    if page.filtered_on_top {
        h.text(". Some filters are applied on top of the newest rows read (no index holds them): a short page may have more matches further back.");
    }
    h.close("p");
    if let Some(next) = &page.next {
        let mut params = form.pairs();
        let before = cursor_text(next);
        params.push(("before", &before));
        h.open("p", &[])
            .el(
                "a",
                &[("href", &href(path, &params)), ("class", "older")],
                "Older →",
            )
            .close("p");
    }
}
