//! The frame of every page: the title, the navigation, who is reading, and `data-refresh` on
//! pages whose figures move (the embedded script reloads their `<main>` every few seconds); and
//! the pieces pages share: header rows, key/value rows, hidden fields, action forms.

use std::time::{Duration, UNIX_EPOCH};

use maud::{DOCTYPE, Markup, Render, html};

use super::super::access::{Caller, Grant};

/// The navigation, `(path, label)`.
const NAV: [(&str, &str); 4] = [
    ("/", "Overview"),
    ("/events", "Events"),
    ("/dead", "Dead letters"),
    ("/sinks", "Sinks"),
];

/// A whole page with `main` inside `<main>`.
pub(crate) fn page(title: &str, caller: Option<&Caller>, refresh: bool, main: Markup) -> String {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · outboxd" }
                link rel="stylesheet" href="/assets/console.css";
                script src="/assets/console.js" defer {}
            }
            body data-refresh=(if refresh { "5" } else { "" }) {
                header {
                    strong { "outboxd" }
                    nav { @for (path, label) in NAV { a href=(path) { (label) } } }
                    span.who {
                        @if let Some(caller) = caller {
                            (caller.who) " · " (if caller.grant == Grant::Act { "may act" } else { "reading" })
                            @if caller.csrf.is_some() {
                                form.inline method="post" action="/logout" {
                                    button type="submit" { "Log out" }
                                }
                            } @else {
                                " · " a href="/login" { "Log in" }
                            }
                        } @else {
                            a href="/login" { "Log in" }
                        }
                    }
                }
                main id="main" { h1 { (title) } (main) }
            }
        }
    }
    .into_string()
}

/// A table's header row.
pub(crate) fn heads(names: &[&str]) -> Markup {
    html! { tr { @for name in names { th { (name) } } } }
}

/// A key/value row of a `pairs` table.
pub(crate) fn pair(key: &str, value: impl Render) -> Markup {
    html! { tr { th { (key) } td { (value) } } }
}

/// A hidden input.
pub(crate) fn hidden(name: &str, value: &str) -> Markup {
    html! { input type="hidden" name=(name) value=(value); }
}

/// A form posting to the action `action`: `fields`, and the session's CSRF token.
pub(crate) fn action_form(caller: &Caller, action: &str, fields: Markup) -> Markup {
    html! {
        form.inline method="post" action=(action) {
            @if let Some(csrf) = &caller.csrf { (hidden("csrf", csrf)) }
            (fields)
        }
    }
}

/// Where to log in to act, for a reader.
pub(crate) fn login_note() -> Markup {
    html! {
        p.note { "Actions need the admin token: " a href="/login" { "log in" } " with [admin] token." }
    }
}

/// UTC milliseconds as RFC 3339 (`2026-11-29T10:00:00.123Z`).
pub(crate) fn time(ms: i64) -> String {
    if ms <= 0 {
        return "-".into();
    }
    humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(ms as u64)).to_string()
}

/// A duration of `ms` milliseconds, rounded to what a reader needs.
pub(crate) fn age(ms: i64) -> String {
    let ms = ms.max(0) as u64;
    let rounded = if ms >= 60_000 { ms / 1000 * 1000 } else { ms };
    humantime::format_duration(Duration::from_millis(rounded)).to_string()
}

/// `12.3 ms`, or `-` for nothing.
pub(crate) fn millis(ms: Option<f64>) -> String {
    match ms {
        Some(ms) if ms >= 100.0 => format!("{ms:.0} ms"),
        Some(ms) => format!("{ms:.1} ms"),
        None => "-".into(),
    }
}
