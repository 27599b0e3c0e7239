//! The login form: a token becomes an `HttpOnly`, `SameSite=Strict` session cookie.

use super::layout::page;

/// The form, with why the last try (or the page asked) failed.
pub(crate) fn render(message: Option<&str>, actions_on: bool) -> String {
    page("Log in", None, false, |h| {
        if let Some(message) = message {
            h.el("p", &[("class", "message")], message);
        }
        h.open("form", &[("method", "post"), ("action", "/login")]);
        h.open("label", &[]).text("Token ");
        h.open(
            "input",
            &[
                ("type", "password"),
                ("name", "token"),
                ("autocomplete", "current-password"),
                ("required", ""),
            ],
        );
        h.close("label");
        h.el("button", &[("type", "submit")], "Log in");
        h.close("form");
        h.el(
            "p",
            &[("class", "note")],
            if actions_on {
                "[admin] token (OUTBOXD_ADMIN_TOKEN) reads and acts; [admin] read_token only reads."
            } else {
                "This host has no [admin] token: console actions are off. [admin] read_token lets you read from other addresses."
            },
        );
    })
}
