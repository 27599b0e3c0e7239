//! Dead letters: the newest `failed` rows grouped by error (count, first and last seen) with
//! "requeue / purge these", then the failed list with its filters, a checkbox per row, and
//! "requeue / purge selected" and "… everything matching".

use maud::{Markup, html};

use super::super::access::{Caller, Grant};
use super::super::data::{DeadView, GROUP_WINDOW};
use super::super::form::DeadForm;
use super::super::request::href;
use super::layout::{action_form, heads, hidden, login_note, page, time};
use super::{events, table};

/// The page.
pub(crate) fn render(
    form: &DeadForm,
    view: Result<DeadView, String>,
    app_codes: &[String],
    caller: &Caller,
) -> String {
    let main = match view {
        Ok(view) => list(form, &view, app_codes, caller),
        Err(error) => html! { p.message { (error) } },
    };
    page("Dead letters", Some(caller), false, main)
}

fn list(form: &DeadForm, view: &DeadView, app_codes: &[String], caller: &Caller) -> Markup {
    let acting = caller.grant == Grant::Act;
    let app = view.app_code.as_str();
    let of_total = match view.failed_total {
        Some(total) if total > u64::from(GROUP_WINDOW) => {
            format!(" (of {total} in the table; groups are of the newest {GROUP_WINDOW})")
        }
        _ => String::new(),
    };
    let these = [
        ("/actions/requeue", "Requeue these…"),
        ("/actions/purge", "Purge these…"),
    ];
    let matching = [
        ("/actions/requeue", "Requeue everything matching…"),
        ("/actions/purge", "Purge everything matching…"),
    ];
    let filters = html! {
        @for (name, value) in form.events.pairs() { @if name != "status" { (hidden(name, value)) } }
    };
    html! {
        h2 { "By error" }
        p.note { "The newest " (view.grouped_rows) " failed rows of " (app) " grouped by last error" (of_total) "." }
        table.rows {
            (heads(&["error", "rows", "first seen", "last seen", ""]))
            @for group in &view.groups {
                @let error = group.last_error.as_deref().unwrap_or("");
                tr {
                    td.error {
                        a href=(href("/dead", &[("app", app), ("group", error)])) {
                            (if error.is_empty() { "(none)" } else { error })
                        }
                    }
                    td.num { (group.count) }
                    td.time { (time(group.first_seen_ms)) }
                    td.time { (time(group.last_seen_ms)) }
                    td {
                        @if acting {
                            @for (action, label) in these {
                                (action_form(caller, action, html! {
                                    (hidden("app", app)) (hidden("group", error))
                                    (hidden("scope", "filter")) (hidden("step", "count"))
                                    button type="submit" { (label) }
                                }))
                            }
                        }
                    }
                }
            }
        }
        h2 { "Failed rows" }
        form.search method="get" action="/dead" {
            (events::fields(&form.events, app_codes, false))
            button type="submit" { "Filter" }
        }
        @if !form.events.group.is_empty() {
            p.note { "Group: " code { (form.events.group) } " " a href=(href("/dead", &[("app", app)])) { "(clear)" } }
        }
        @if acting {
            @for (action, label) in matching {
                (action_form(caller, action, html! {
                    (filters) (hidden("scope", "filter")) (hidden("step", "count"))
                    button.all type="submit" { (label) }
                }))
            }
            // The selection form: the checkboxes of the table are its fields.
            (action_form(caller, "/actions/requeue", html! {
                (hidden("app", app)) (hidden("step", "count"))
                (table::rows(&view.page, true))
                button type="submit" name="selection" value="requeue" { "Requeue selected…" }
                button type="submit" formaction="/actions/purge" { "Purge selected…" }
            }))
        } @else {
            (login_note())
            (table::rows(&view.page, false))
        }
        (table::footer(&view.page, "/dead", &form.events, None))
    }
}
