//! The login form: a token becomes an `HttpOnly`, `SameSite=Strict` session cookie.

use maud::html;

use super::layout::page;

/// The form, with why the last try (or the page asked) failed.
pub(crate) fn render(message: Option<&str>, actions_on: bool) -> String {
    let note = if actions_on {
        "[admin] token (OUTBOXD_ADMIN_TOKEN) reads and acts; [admin] read_token only reads."
    } else {
        "This host has no [admin] token: console actions are off. [admin] read_token lets you read from other addresses."
    };
    let main = html! {
        @if let Some(message) = message { p.message { (message) } }
        form method="post" action="/login" {
            label { "Token " input type="password" name="token" autocomplete="current-password" required; }
            button type="submit" { "Log in" }
        }
        p.note { (note) }
    };
    page("Log in", None, false, main)
}
