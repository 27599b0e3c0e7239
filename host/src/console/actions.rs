//! The console's actions, `POST /actions/NAME` (a form: answered with a page or a redirect) and
//! `POST /api/actions/NAME` (the same fields; answered with JSON):
//!
//! - `requeue`, `purge`: `failed` rows back to `pending`, or deleted — one event or a selection
//!   (`ids`, repeated), or everything the dead-letter filter matches. `step=count` is the dry run
//!   (how many match); `step=run` starts a job that goes in chunks of [`ACTION_CHUNK`] rows
//!   (`crate::dead_letters`, the path `outboxd requeue` takes) and answers with its progress.
//! - `pause`, `resume`: one sink (`sink`).
//! - `reload`: re-read the config file and plugins (as `POST /reload`, `SIGHUP`).
//!
//! Each needs the action token (`access.rs`); each is logged (who, what, how many) and counted in
//! `outboxd_console_actions{action, result}`.

use std::sync::Arc;

use http::StatusCode;
use tracing::{info, warn};

use super::access::Caller;
use super::form::EventsForm;
use super::jobs::Job;
use super::request::{ConsoleRequest, Reply, href, html, json, redirect};
use super::{ACTION_CHUNK, Console, pages};
use crate::dead_letters::{self, DeadLetterAction};
use crate::plugin::Paused;
use crate::record::now_ms;
use crate::store::FailedFilter;

/// Most ids one selection may carry.
const MAX_SELECTION: usize = 1000;

/// How an action's answer is written.
struct Answer<'a> {
    console: &'a Console,
    action: &'static str,
    api: bool,
}

impl Answer<'_> {
    fn refused(&self, status: StatusCode, message: String) -> Reply {
        self.error("refused", status, "Refused", message)
    }

    fn failed(&self, message: String) -> Reply {
        self.error("failed", StatusCode::SERVICE_UNAVAILABLE, "Failed", message)
    }

    /// Counts, logs and answers an action that did not happen (`result`: refused or failed).
    fn error(&self, result: &str, status: StatusCode, title: &str, message: String) -> Reply {
        self.console
            .metrics
            .count_console_action(self.action, result);
        warn!(target: "outboxd::console", action = self.action, error = %message, "console action {result}");
        if self.api {
            json(status, &serde_json::json!({ "error": message }))
        } else {
            html(status, pages::message::render(title, &message))
        }
    }

    fn done(&self, who: &Caller, what: &str, rows: Option<u64>) {
        self.console
            .metrics
            .count_console_action(self.action, "done");
        info!(target: "outboxd::console", action = self.action, who = %who.who, what, rows, "console action");
    }
}

pub(super) async fn run(
    console: &Arc<Console>,
    request: &ConsoleRequest,
    name: &str,
    api: bool,
) -> Reply {
    let action = ["requeue", "purge", "pause", "resume", "reload"]
        .into_iter()
        .find(|action| *action == name)
        .unwrap_or("unknown");
    let answer = Answer {
        console,
        action,
        api,
    };
    if action == "unknown" {
        return answer.refused(
            StatusCode::NOT_FOUND,
            format!("no action {name:?}: requeue, purge, pause, resume, reload"),
        );
    }
    let caller = match console.access.actor(request, action) {
        Ok(caller) => caller,
        Err(denied) => return answer.refused(denied.status, denied.message),
    };
    match action {
        "requeue" => {
            dead_letter(
                console,
                request,
                &caller,
                &answer,
                DeadLetterAction::Requeue,
            )
            .await
        }
        "purge" => dead_letter(console, request, &caller, &answer, DeadLetterAction::Delete).await,
        "pause" | "resume" => switch(console, request, &caller, &answer),
        _ => reload(console, &caller, &answer).await,
    }
}

/// The rows a requeue or purge acts on, and those in words.
fn target(console: &Console, request: &ConsoleRequest) -> Result<(FailedFilter, String), String> {
    let ids = request.f_all("ids");
    let form = EventsForm::read(request, true);
    let app = form.app_or(console.default_app());
    if !ids.is_empty() {
        if ids.len() > MAX_SELECTION {
            return Err(format!(
                "{} events selected; at most {MAX_SELECTION} at once (use the filter instead)",
                ids.len()
            ));
        }
        let words = if ids.len() == 1 {
            format!("event {} of {app}", ids[0])
        } else {
            format!("{} selected events of {app}", ids.len())
        };
        let filter = FailedFilter {
            app_code: Some(app),
            event_ids: ids,
            ..FailedFilter::default()
        };
        return Ok((filter, words));
    }
    if request.f("scope") != "filter" {
        return Err("nothing selected: tick some rows, or use \"everything matching\"".into());
    }
    let filter = form.failed_filter(console.default_app())?;
    let mut words = vec![format!("every failed row of {app}")];
    for (key, value) in form.pairs() {
        if !value.is_empty() && !matches!(key, "app" | "status") {
            words.push(format!("{key} = {value:?}"));
        }
    }
    Ok((filter, words.join(", ")))
}

async fn dead_letter(
    console: &Arc<Console>,
    request: &ConsoleRequest,
    caller: &Caller,
    answer: &Answer<'_>,
    action: DeadLetterAction,
) -> Reply {
    let (filter, what) = match target(console, request) {
        Ok(target) => target,
        Err(message) => return answer.refused(StatusCode::BAD_REQUEST, message),
    };
    let matching = match dead_letters::count(console.store.as_ref(), &filter).await {
        Ok(n) => n,
        Err(error) => return answer.failed(error.to_string()),
    };
    if request.f("step") != "run" {
        info!(target: "outboxd::console", action = action.name(), who = %caller.who, what = %what, rows = matching, "console dry run");
        return if answer.api {
            json(
                StatusCode::OK,
                &serde_json::json!({ "action": action.name(), "what": what, "matching": matching }),
            )
        } else {
            html(
                StatusCode::OK,
                pages::confirm::render(request, caller, action.name(), &what, matching),
            )
        };
    }
    let id = console.jobs.start(Job {
        id: 0,
        action: action.name().into(),
        target: what.clone(),
        who: caller.who.clone(),
        expected: matching,
        done: 0,
        finished: false,
        error: None,
        started_at_ms: now_ms(),
    });
    let (store, jobs, tenants) = (
        console.store.clone(),
        console.jobs.clone(),
        console.app_codes.clone(),
    );
    let metrics = console.metrics.clone();
    let who = caller.who.clone();
    let name = action.name();
    tokio::spawn(async move {
        let result = dead_letters::run_in_chunks(
            store.as_ref(),
            action,
            &filter,
            &tenants,
            ACTION_CHUNK,
            now_ms(),
            |rows| jobs.progress(id, rows),
        )
        .await;
        match result {
            Ok(rows) => {
                metrics.count_console_action(name, "done");
                info!(target: "outboxd::console", action = name, who = %who, what = %what, rows, job = id, "console action");
                jobs.finish(id, None);
            }
            Err(error) => {
                metrics.count_console_action(name, "failed");
                warn!(target: "outboxd::console", action = name, who = %who, what = %what, job = id, error = %error, "console action failed");
                jobs.finish(id, Some(error.to_string()));
            }
        }
    });
    if answer.api {
        json(StatusCode::ACCEPTED, &console.jobs.get(id))
    } else {
        redirect(&format!("/jobs?id={id}"), None)
    }
}

fn switch(
    console: &Console,
    request: &ConsoleRequest,
    caller: &Caller,
    answer: &Answer<'_>,
) -> Reply {
    let sink = request.f("sink");
    let known = console.loaded.get().is_some_and(|set| {
        set.config
            .publishing
            .sinks()
            .iter()
            .any(|s| s.name() == sink)
    });
    if !known {
        return answer.refused(
            StatusCode::NOT_FOUND,
            format!("no sink named {sink:?} is loaded"),
        );
    }
    let changed = if answer.action == "pause" {
        console.controls.pause(
            sink,
            Paused {
                by: caller.who.clone(),
                since_ms: now_ms(),
            },
        )
    } else {
        console.controls.resume(sink)
    };
    let notice = match (answer.action, changed) {
        ("pause", true) => {
            format!("sink {sink} paused: its events wait as retryable without spending attempts")
        }
        ("pause", false) => format!("sink {sink} was paused already"),
        (_, true) => format!(
            "sink {sink} resumed: its events flow within {}s",
            crate::plugin::PAUSED_RETRY.as_secs()
        ),
        (_, false) => format!("sink {sink} was not paused"),
    };
    answer.done(caller, &format!("sink {sink}"), None);
    if answer.api {
        json(
            StatusCode::OK,
            &serde_json::json!({ "sink": sink, "changed": changed, "notice": notice }),
        )
    } else {
        redirect(&href("/sinks", &[("notice", &notice)]), None)
    }
}

async fn reload(console: &Console, caller: &Caller, answer: &Answer<'_>) -> Reply {
    let Some(reload) = &console.reload else {
        return answer.refused(
            StatusCode::NOT_FOUND,
            "reload is not available here (the host has no config file to re-read)".into(),
        );
    };
    match reload().await {
        Ok(summary) => {
            answer.done(caller, "reload", None);
            if answer.api {
                json(StatusCode::OK, &serde_json::json!({ "notice": summary }))
            } else {
                redirect(&href("/sinks", &[("notice", &summary)]), None)
            }
        }
        Err(reason) => answer.refused(StatusCode::CONFLICT, format!("reload refused: {reason}")),
    }
}
