//! The dry run's answer: how many rows an action would change, and the button that runs it.

use super::super::access::Caller;
use super::super::request::ConsoleRequest;
use super::layout::{action_form, hidden, page};

/// "`matching` rows: requeue them?" carrying the request's fields on.
pub(crate) fn render(
    request: &ConsoleRequest,
    caller: &Caller,
    action: &'static str,
    what: &str,
    matching: u64,
) -> String {
    let title = if action == "requeue" {
        "Requeue"
    } else {
        "Purge"
    };
    page(title, Some(caller), false, |h| {
        h.el("p", &[], &format!("{matching} failed rows match: {what}."));
        if matching == 0 {
            h.open("p", &[])
                .el("a", &[("href", "/dead")], "Back")
                .close("p");
            return;
        }
        action_form(
            h,
            caller,
            if action == "requeue" {
                "/actions/requeue"
            } else {
                "/actions/purge"
            },
        );
        for (key, value) in &request.form {
            if !matches!(key.as_str(), "csrf" | "step" | "selection") {
                match key.as_str() {
                    "ids" => hidden(h, "ids", value),
                    "app" => hidden(h, "app", value),
                    "group" => hidden(h, "group", value),
                    "scope" => hidden(h, "scope", value),
                    "type" => hidden(h, "type", value),
                    "room" => hidden(h, "room", value),
                    "since" => hidden(h, "since", value),
                    "until" => hidden(h, "until", value),
                    "id" => hidden(h, "id", value),
                    _ => {}
                }
            }
        }
        hidden(h, "step", "run");
        let label = format!("{title} {matching} rows");
        h.el("button", &[("type", "submit"), ("class", "danger")], &label)
            .close("form");
        h.open("p", &[])
            .el("a", &[("href", "/dead")], "Cancel")
            .close("p");
    })
}
