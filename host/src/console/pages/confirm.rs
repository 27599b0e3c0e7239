//! The dry run's answer: how many rows an action would change, and the button that runs it.

use maud::html;

use super::super::access::Caller;
use super::super::request::ConsoleRequest;
use super::layout::{action_form, hidden, page};

/// The form fields a confirmation carries on to the run.
const CARRIED: [&str; 9] = [
    "ids", "app", "group", "scope", "type", "room", "since", "until", "id",
];

/// "`matching` rows: requeue them?" carrying the request's fields on.
pub(crate) fn render(
    request: &ConsoleRequest,
    caller: &Caller,
    action: &'static str,
    what: &str,
    matching: u64,
) -> String {
    let (title, path) = if action == "requeue" {
        ("Requeue", "/actions/requeue")
    } else {
        ("Purge", "/actions/purge")
    };
    let fields = html! {
        @for (key, value) in &request.form {
            @if CARRIED.contains(&key.as_str()) { (hidden(key, value)) }
        }
        (hidden("step", "run"))
        button.danger type="submit" { (title) " " (matching) " rows" }
    };
    let main = html! {
        p { (matching) " failed rows match: " (what) "." }
        @if matching == 0 {
            p { a href="/dead" { "Back" } }
        } @else {
            (action_form(caller, path, fields))
            p { a href="/dead" { "Cancel" } }
        }
    };
    page(title, Some(caller), false, main)
}
