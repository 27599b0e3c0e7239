//! Sinks and routes as loaded: plugin file and hash, config (secrets `***`), limits, breaker
//! settings and state; pause / resume per sink; Reload.

use super::super::access::Caller;
use super::super::data::SinksView;
use super::layout::{action_form, hidden, may_act, page, time};

/// The page; `notice`: the outcome of the action that led here.
pub(crate) fn render(view: &SinksView, caller: &Caller, notice: &str) -> String {
    page("Sinks", Some(caller), true, |h| {
        if !notice.is_empty() {
            h.el("p", &[("class", "notice")], notice);
        }
        h.el(
            "p",
            &[("class", "note")],
            &match view.loaded_at_ms {
                Some(at) => format!("This host's sink set, serving since {}.", time(at)),
                None => "The sinks are starting.".into(),
            },
        );
        let acting = may_act(h, caller);
        if acting && view.reload {
            action_form(h, caller, "/actions/reload");
            h.el("button", &[("type", "submit")], "Reload config and plugins")
                .close("form");
        }
        let states: Vec<_> = view.sinks.iter().map(|s| s.state.clone()).collect();
        super::overview::sinks(h, &states);
        for sink in &view.sinks {
            h.open(
                "section",
                &[("class", "sink"), ("id", &format!("sink-{}", sink.name))],
            );
            h.el("h2", &[], &format!("Sink {}", sink.name));
            if acting {
                let (action, label) = if sink.state.paused_by.is_some() {
                    ("/actions/resume", "Resume")
                } else {
                    ("/actions/pause", "Pause")
                };
                action_form(h, caller, action);
                hidden(h, "sink", &sink.name);
                h.el(
                    "button",
                    &[("type", "submit"), ("name", "do"), ("value", label)],
                    &format!("{label} {}", sink.name),
                )
                .close("form");
            }
            h.open("table", &[("class", "pairs")]);
            let mut pair = |k: &str, v: &str| {
                h.open("tr", &[])
                    .el("th", &[], k)
                    .el("td", &[], v)
                    .close("tr");
            };
            pair("plugin", &sink.plugin);
            pair("sha256", sink.sha256.as_deref().unwrap_or("(unreadable)"));
            for (k, v) in &sink.config {
                pair(&format!("config.{k}"), v);
            }
            for (k, v) in &sink.limits {
                pair(&format!("limits.{k}"), v);
            }
            pair("breaker.failures", &sink.breaker_failures.to_string());
            pair("breaker.cool_down", &sink.breaker_cool_down);
            h.close("table").close("section");
        }
        h.el("h2", &[], "Routes (first match wins)");
        h.open("table", &[("class", "rows")])
            .open("tr", &[])
            .el("th", &[], "event_type")
            .el("th", &[], "sink")
            .close("tr");
        for (glob, sink) in &view.routes {
            h.open("tr", &[])
                .el("td", &[], glob)
                .el("td", &[], sink)
                .close("tr");
        }
        h.close("table");
    })
}
