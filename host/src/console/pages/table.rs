//! The rows table the events page and the dead-letter list share, and the "older" link of its
//! keyset pagination (no OFFSET: the next page starts below the last row's position).

use maud::{Markup, html};

use super::super::form::{EventsForm, cursor_text};
use super::super::request::href;
use super::layout::time;
use crate::store::EventPage;

const COLUMNS: [&str; 7] = [
    "created",
    "event id",
    "type",
    "room",
    "status",
    "attempts",
    "last error",
];

/// The table of `page`'s rows; `select`: a checkbox per row (named `ids`, inside the caller's
/// form).
pub(crate) fn rows(page: &EventPage, select: bool) -> Markup {
    if page.events.is_empty() {
        return html! { p.note { "No rows match on this page." } };
    }
    html! {
        table.rows {
            thead { tr { @if select { th {} } @for name in COLUMNS { th { (name) } } } }
            tbody {
                @for row in &page.events {
                    tr class=(row.status) {
                        @if select {
                            td { input type="checkbox" name="ids" value=(row.event_id) aria-label="select"; }
                        }
                        td.time { (time(row.created_at_ms)) }
                        td {
                            a href=(href("/event", &[("app", &row.app_code), ("id", &row.event_id)])) {
                                (row.event_id)
                            }
                        }
                        td { (row.event_type) }
                        td { (row.room_id) }
                        td.status { (row.status) }
                        td { (row.retry_count) }
                        td.error { (row.last_error.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
    }
}

/// What the page read, and the link to the next (older) page.
pub(crate) fn footer(
    page: &EventPage,
    path: &str,
    form: &EventsForm,
    elapsed_ms: Option<f64>,
) -> Markup {
    let older = page.next.as_ref().map(|next| {
        let before = cursor_text(next);
        href(path, &[form.pairs(), vec![("before", &before)]].concat())
    });
    html! {
        p.note {
            (page.events.len()) " rows shown, " (page.scanned) " read from the database"
            @if let Some(ms) = elapsed_ms { " in " (format!("{ms:.1}")) " ms" }
            @if page.filtered_on_top {
                ". Some filters are applied on top of the newest rows read (no index holds them): a short page may have more matches further back."
            }
        }
        @if let Some(older) = older { p { a.older href=(older) { "Older →" } } }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::EventSummary;

    #[test]
    fn every_value_from_the_database_is_text() {
        let page = EventPage {
            events: vec![EventSummary {
                app_code: "a&b".into(),
                event_id: "\"><script>".into(),
                event_type: "<script>alert('x')</script>".into(),
                room_id: "room-<i>2</i>".into(),
                status: "failed\" onclick=\"x".into(),
                last_error: Some("<b>bold</b> & more".into()),
                retry_count: 1,
                created_at_ms: 1,
                updated_at_ms: 1,
                next_retry_at_ms: 0,
                worker_id: "w".into(),
                lock_until_ms: None,
            }],
            next: None,
            scanned: 1,
            filtered_on_top: false,
        };
        let html = rows(&page, true).into_string();
        for markup in ["<script", "<i>", "<b>", "\" onclick"] {
            assert!(!html.contains(markup), "{markup} unescaped in {html}");
        }
        for text in [
            "value=\"&quot;&gt;&lt;script&gt;\"",
            "&lt;script&gt;alert('x')&lt;/script&gt;",
            "room-&lt;i&gt;2&lt;/i&gt;",
            "&lt;b&gt;bold&lt;/b&gt; &amp; more",
            "href=\"/event?app=a%26b&amp;id=%22%3E%3Cscript%3E\"",
        ] {
            assert!(html.contains(text), "no {text} in {html}");
        }
    }
}
