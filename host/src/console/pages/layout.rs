//! The frame of every page: the title, the navigation, who is reading, and `data-refresh` on
//! pages whose figures move (the embedded script reloads their `<main>` every few seconds).

use std::time::{Duration, UNIX_EPOCH};

use super::super::access::{Caller, Grant};
use super::super::html::Html;

/// The navigation, `(path, label)`.
const NAV: [(&str, &str); 4] = [
    ("/", "Overview"),
    ("/events", "Events"),
    ("/dead", "Dead letters"),
    ("/sinks", "Sinks"),
];

/// A whole page: `body` writes the inside of `<main>`.
pub(crate) fn page(
    title: &str,
    caller: Option<&Caller>,
    refresh: bool,
    body: impl FnOnce(&mut Html),
) -> String {
    let mut h = Html::new();
    h.markup("<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    h.el("title", &[], &format!("{title} · outboxd"));
    h.markup("<link rel=\"stylesheet\" href=\"/assets/console.css\"><script src=\"/assets/console.js\" defer></script></head>");
    h.open("body", &[("data-refresh", if refresh { "5" } else { "" })]);
    h.open("header", &[]).el("strong", &[], "outboxd");
    h.open("nav", &[]);
    for (path, label) in NAV {
        h.el("a", &[("href", path)], label);
    }
    h.close("nav");
    h.open("span", &[("class", "who")]);
    match caller {
        Some(caller) => {
            let grant = match caller.grant {
                Grant::Act => "may act",
                Grant::Read => "reading",
            };
            h.text(&format!("{} · {grant}", caller.who));
            if caller.csrf.is_some() {
                h.open(
                    "form",
                    &[
                        ("method", "post"),
                        ("action", "/logout"),
                        ("class", "inline"),
                    ],
                )
                .el("button", &[("type", "submit")], "Log out")
                .close("form");
            } else {
                h.text(" · ").el("a", &[("href", "/login")], "Log in");
            }
        }
        None => {
            h.el("a", &[("href", "/login")], "Log in");
        }
    }
    h.close("span").close("header");
    h.open("main", &[("id", "main")]);
    h.el("h1", &[], title);
    body(&mut h);
    h.close("main").close("body");
    h.markup("</html>");
    h.finish()
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

/// A hidden input.
pub(crate) fn hidden(h: &mut Html, name: &'static str, value: &str) {
    h.open(
        "input",
        &[("type", "hidden"), ("name", name), ("value", value)],
    );
}

/// Opens an action form (closed by the caller) carrying the session's CSRF token.
pub(crate) fn action_form(h: &mut Html, caller: &Caller, action: &'static str) {
    h.open(
        "form",
        &[("method", "post"), ("action", action), ("class", "inline")],
    );
    if let Some(csrf) = &caller.csrf {
        hidden(h, "csrf", csrf);
    }
}

/// Whether the caller may act; otherwise writes where to log in.
pub(crate) fn may_act(h: &mut Html, caller: &Caller) -> bool {
    if caller.grant == Grant::Act {
        return true;
    }
    h.open("p", &[("class", "note")])
        .text("Actions need the admin token: ")
        .el("a", &[("href", "/login")], "log in")
        .text(" with [admin] token.")
        .close("p");
    false
}
