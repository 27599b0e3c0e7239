//! Dead letters: the newest `failed` rows grouped by error (count, first and last seen) with
//! "requeue / purge these", then the failed list with its filters, a checkbox per row, and
//! "requeue / purge selected" and "… everything matching".

use super::super::access::Caller;
use super::super::data::{DeadView, GROUP_WINDOW};
use super::super::form::DeadForm;
use super::super::html::{Html, href};
use super::layout::{action_form, hidden, may_act, page, time};
use super::{events, table};

fn filter_fields(h: &mut Html, form: &DeadForm) {
    for (name, value) in form.events.pairs() {
        if name != "status" {
            hidden(h, name, value);
        }
    }
}

/// The page.
pub(crate) fn render(
    form: &DeadForm,
    view: Result<DeadView, String>,
    app_codes: &[String],
    caller: &Caller,
) -> String {
    page("Dead letters", Some(caller), false, |h| {
        let view = match view {
            Ok(view) => view,
            Err(error) => {
                h.el("p", &[("class", "message")], &error);
                return;
            }
        };
        let acting = caller.grant == super::super::access::Grant::Act;
        h.el("h2", &[], "By error");
        h.open("p", &[("class", "note")])
            .text(&format!(
                "The newest {} failed rows of {} grouped by last error{}.",
                view.grouped_rows,
                view.app_code,
                match view.failed_total {
                    Some(total) if total > u64::from(GROUP_WINDOW) => format!(
                        " (of {total} in the table; groups are of the newest {GROUP_WINDOW})"
                    ),
                    _ => String::new(),
                }
            ))
            .close("p");
        h.open("table", &[("class", "rows")]).open("tr", &[]);
        for name in ["error", "rows", "first seen", "last seen", ""] {
            h.el("th", &[], name);
        }
        h.close("tr");
        for group in &view.groups {
            let error = group.last_error.as_deref().unwrap_or("");
            h.open("tr", &[]);
            h.open("td", &[("class", "error")])
                .el(
                    "a",
                    &[(
                        "href",
                        &href("/dead", &[("app", &view.app_code), ("group", error)]),
                    )],
                    if error.is_empty() { "(none)" } else { error },
                )
                .close("td");
            h.open("td", &[("class", "num")])
                .num(group.count)
                .close("td");
            h.el("td", &[("class", "time")], &time(group.first_seen_ms));
            h.el("td", &[("class", "time")], &time(group.last_seen_ms));
            h.open("td", &[]);
            if acting {
                for (action, label) in [
                    ("/actions/requeue", "Requeue these…"),
                    ("/actions/purge", "Purge these…"),
                ] {
                    action_form(h, caller, action);
                    hidden(h, "app", &view.app_code);
                    hidden(h, "group", error);
                    hidden(h, "scope", "filter");
                    hidden(h, "step", "count");
                    h.el("button", &[("type", "submit")], label).close("form");
                }
            }
            h.close("td").close("tr");
        }
        h.close("table");

        h.el("h2", &[], "Failed rows");
        h.open(
            "form",
            &[("method", "get"), ("action", "/dead"), ("class", "search")],
        );
        events::fields(h, &form.events, app_codes, false);
        h.el("button", &[("type", "submit")], "Filter");
        h.close("form");
        if !form.events.group.is_empty() {
            h.open("p", &[("class", "note")])
                .text("Group: ")
                .el("code", &[], &form.events.group)
                .text(" ")
                .el(
                    "a",
                    &[("href", &href("/dead", &[("app", &view.app_code)]))],
                    "(clear)",
                )
                .close("p");
        }
        if may_act(h, caller) {
            action_form(h, caller, "/actions/requeue");
            filter_fields(h, form);
            hidden(h, "scope", "filter");
            hidden(h, "step", "count");
            h.el(
                "button",
                &[("type", "submit"), ("class", "all")],
                "Requeue everything matching…",
            )
            .close("form");
            action_form(h, caller, "/actions/purge");
            filter_fields(h, form);
            hidden(h, "scope", "filter");
            hidden(h, "step", "count");
            h.el(
                "button",
                &[("type", "submit"), ("class", "all")],
                "Purge everything matching…",
            )
            .close("form");
            // The selection form: the checkboxes of the table are its fields.
            action_form(h, caller, "/actions/requeue");
            hidden(h, "app", &view.app_code);
            hidden(h, "step", "count");
            table::rows(h, &view.page, true);
            h.open(
                "button",
                &[
                    ("type", "submit"),
                    ("name", "selection"),
                    ("value", "requeue"),
                ],
            )
            .text("Requeue selected…")
            .close("button");
            h.open(
                "button",
                &[("type", "submit"), ("formaction", "/actions/purge")],
            )
            .text("Purge selected…")
            .close("button");
            h.close("form");
        } else {
            table::rows(h, &view.page, false);
        }
        table::footer(h, &view.page, "/dead", &form.events, None);
    })
}
