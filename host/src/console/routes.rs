//! Path → page, JSON or action. Every page and JSON document first asks access who is reading;
//! every action asks who is acting.

use std::sync::Arc;

use bytes::Bytes;
use http::{Method, Response, StatusCode};
use http_body_util::Full;

use super::access::Refusal;
use super::request::{ConsoleRequest, html, json, redirect, respond};
use super::{Console, actions, api, pages};

const CSS: &str = include_str!("assets/console.css");
const JS: &str = include_str!("assets/console.js");

/// The console's path prefixes (`/` itself too).
const PATHS: [&str; 10] = [
    "/events",
    "/event",
    "/dead",
    "/sinks",
    "/jobs",
    "/login",
    "/logout",
    "/actions/",
    "/api/",
    "/assets/",
];

pub(super) fn owns(path: &str) -> bool {
    path == "/"
        || PATHS.iter().any(|p| {
            path == *p
                || path.starts_with(&format!("{p}/"))
                || (p.ends_with('/') && path.starts_with(p))
        })
}

type Reply = Response<Full<Bytes>>;

pub(super) async fn route(console: &Arc<Console>, request: &ConsoleRequest) -> Option<Reply> {
    let path = request.path.as_str();
    if !owns(path) {
        return None;
    }
    let method = &request.method;
    let reply = match (method, path) {
        (&Method::GET, "/assets/console.css") => {
            respond(StatusCode::OK, "text/css; charset=utf-8", CSS)
        }
        (&Method::GET, "/assets/console.js") => {
            respond(StatusCode::OK, "text/javascript; charset=utf-8", JS)
        }
        (&Method::GET, "/login") => html(
            StatusCode::OK,
            pages::login::render(None, console.access.actions_on()),
        ),
        (&Method::POST, "/login") => match console.access.login(request.f("token")) {
            Ok(cookie) => redirect("/", Some(cookie)),
            Err(refusal) => html(
                refusal.status,
                pages::login::render(Some(&refusal.message), console.access.actions_on()),
            ),
        },
        (&Method::POST, "/logout") => redirect("/", Some(console.access.logout(request))),
        (&Method::POST, p) if p.starts_with("/actions/") => {
            actions::run(console, request, &p["/actions/".len()..], false).await
        }
        (&Method::POST, p) if p.starts_with("/api/actions/") => {
            actions::run(console, request, &p["/api/actions/".len()..], true).await
        }
        (&Method::GET, p) => {
            let api = p.starts_with("/api/");
            match console.access.caller(request) {
                Ok(_) if api => api::get(console, request, &p["/api/".len()..]).await,
                Ok(caller) => pages::get(console, request, &caller).await,
                Err(refusal) if api => refusal_json(&refusal),
                Err(refusal) => html(
                    refusal.status,
                    pages::login::render(Some(&refusal.message), console.access.actions_on()),
                ),
            }
        }
        _ => respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "method not allowed\n",
        ),
    };
    Some(reply)
}

/// A refusal as JSON: `{"error": "…"}`.
pub(super) fn refusal_json(refusal: &Refusal) -> Reply {
    json(
        refusal.status,
        &serde_json::json!({ "error": refusal.message }),
    )
}
