//! Sinks and routes as loaded: plugin file and hash, config (secrets `***`), limits, breaker
//! settings and state; pause / resume per sink; Reload.

use maud::html;

use super::super::access::{Caller, Grant};
use super::super::data::SinksView;
use super::layout::{action_form, heads, hidden, login_note, page, pair, time};

/// The page; `notice`: the outcome of the action that led here.
pub(crate) fn render(view: &SinksView, caller: &Caller, notice: &str) -> String {
    let acting = caller.grant == Grant::Act;
    let serving = match view.loaded_at_ms {
        Some(at) => format!("This host's sink set, serving since {}.", time(at)),
        None => "The sinks are starting.".into(),
    };
    let states: Vec<_> = view.sinks.iter().map(|s| s.state.clone()).collect();
    let main = html! {
        @if !notice.is_empty() { p.notice { (notice) } }
        p.note { (serving) }
        @if !acting { (login_note()) }
        @if acting && view.reload {
            (action_form(caller, "/actions/reload", html! { button type="submit" { "Reload config and plugins" } }))
        }
        (super::overview::sinks(&states))
        @for sink in &view.sinks {
            section.sink id=(format!("sink-{}", sink.name)) {
                h2 { "Sink " (sink.name) }
                @if acting {
                    @let (action, label) = if sink.state.paused_by.is_some() {
                        ("/actions/resume", "Resume")
                    } else {
                        ("/actions/pause", "Pause")
                    };
                    (action_form(caller, action, html! {
                        (hidden("sink", &sink.name))
                        button type="submit" name="do" value=(label) { (label) " " (sink.name) }
                    }))
                }
                table.pairs {
                    (pair("plugin", &sink.plugin))
                    (pair("sha256", sink.sha256.as_deref().unwrap_or("(unreadable)")))
                    @for (k, v) in &sink.config { (pair(&format!("config.{k}"), v)) }
                    @for (k, v) in &sink.limits { (pair(&format!("limits.{k}"), v)) }
                    (pair("breaker.failures", sink.breaker_failures))
                    (pair("breaker.cool_down", &sink.breaker_cool_down))
                }
            }
        }
        h2 { "Routes (first match wins)" }
        table.rows {
            (heads(&["event_type", "sink"]))
            @for (glob, sink) in &view.routes { tr { td { (glob) } td { (sink) } } }
        }
    };
    page("Sinks", Some(caller), true, main)
}
