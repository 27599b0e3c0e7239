//! Path → page, JSON or action, through a `matchit` router; the method is checked per route.
//! Every page and JSON document first asks access who is reading; every action asks who is
//! acting.

use std::sync::{Arc, LazyLock};

use http::{Method, StatusCode};
use matchit::Router;

use super::access::AccessDenied;
use super::request::{ConsoleRequest, Reply, html, json, redirect, respond};
use super::view::View;
use super::{Console, actions, api, pages};

/// What a path leads to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Route {
    /// An embedded file: its content type and text.
    Asset(&'static str, &'static str),
    Login,
    Logout,
    /// `POST /actions/NAME` (`false`) or `/api/actions/NAME` (`true`).
    Action(bool),
    Page(View),
    /// `/api/…`; `None`: a name that is no view.
    Api(Option<View>),
}

static ROUTES: LazyLock<Router<Route>> = LazyLock::new(|| {
    use View::*;
    let mut router = Router::new();
    let css = include_str!("assets/console.css");
    let js = include_str!("assets/console.js");
    let routes = [
        (
            "/assets/console.css",
            Route::Asset("text/css; charset=utf-8", css),
        ),
        (
            "/assets/console.js",
            Route::Asset("text/javascript; charset=utf-8", js),
        ),
        ("/login", Route::Login),
        ("/logout", Route::Logout),
        ("/actions/{*name}", Route::Action(false)),
        ("/api/actions/{*name}", Route::Action(true)),
        ("/api/{*name}", Route::Api(None)),
    ];
    let views = [
        ("/", "/api/overview", Overview),
        ("/events", "/api/events", Events),
        ("/event", "/api/event", Event),
        ("/dead", "/api/dead", Dead),
        ("/sinks", "/api/sinks", Sinks),
        ("/jobs", "/api/jobs", Jobs),
    ];
    let views = views
        .into_iter()
        .flat_map(|(page, api, view)| [(page, Route::Page(view)), (api, Route::Api(Some(view)))]);
    for (path, route) in routes.into_iter().chain(views) {
        router
            .insert(path, route)
            .expect("the console's routes are distinct");
    }
    router
});

/// Whether `path` is one of the console's.
pub(super) fn owns(path: &str) -> bool {
    ROUTES.at(path).is_ok()
}

/// The answer to `request`; `None` when its path is not the console's.
pub(super) async fn route(console: &Arc<Console>, request: &ConsoleRequest) -> Option<Reply> {
    let found = ROUTES.at(&request.path).ok()?;
    let access = &console.access;
    let login_page = |denied: &AccessDenied| {
        html(
            denied.status,
            pages::login::render(Some(&denied.message), access.actions_on()),
        )
    };
    let reply = match (*found.value, &request.method) {
        (Route::Asset(content_type, text), &Method::GET) => {
            respond(StatusCode::OK, content_type, text)
        }
        (Route::Login, &Method::GET) => html(
            StatusCode::OK,
            pages::login::render(None, access.actions_on()),
        ),
        (Route::Login, &Method::POST) => match access.login(request.f("token")) {
            Ok(cookie) => redirect("/", Some(cookie)),
            Err(denied) => login_page(&denied),
        },
        (Route::Logout, &Method::POST) => redirect("/", Some(access.logout(request))),
        (Route::Action(api), &Method::POST) => {
            let name = found.params.get("name").unwrap_or_default();
            actions::run(console, request, name, api).await
        }
        (Route::Page(view), &Method::GET) => match access.caller(request) {
            Ok(caller) => pages::get(console, request, &caller, view).await,
            Err(denied) => login_page(&denied),
        },
        (Route::Api(view), &Method::GET) => match access.caller(request) {
            Ok(_) => api::get(console, request, view).await,
            Err(denied) => denied_json(&denied),
        },
        _ => respond(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain; charset=utf-8",
            "method not allowed\n",
        ),
    };
    Some(reply)
}

/// A denial as JSON: `{"error": "…"}`.
fn denied_json(denied: &AccessDenied) -> Reply {
    json(
        denied.status,
        &serde_json::json!({ "error": denied.message }),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route_of(path: &str) -> Option<Route> {
        ROUTES.at(path).ok().map(|found| *found.value)
    }

    #[test]
    fn paths_lead_to_their_page_json_or_action() {
        assert_eq!(route_of("/"), Some(Route::Page(View::Overview)));
        assert_eq!(route_of("/dead"), Some(Route::Page(View::Dead)));
        assert_eq!(route_of("/api/dead"), Some(Route::Api(Some(View::Dead))));
        assert_eq!(route_of("/api/nothing/here"), Some(Route::Api(None)));
        assert_eq!(route_of("/api/actions/pause"), Some(Route::Action(true)));
        assert_eq!(route_of("/actions/requeue"), Some(Route::Action(false)));
        let pause = ROUTES.at("/actions/pause").unwrap();
        assert_eq!(pause.params.get("name"), Some("pause"));
        for path in ["/metrics", "/healthz", "/readyz", "/reload", "/events/x"] {
            assert!(!owns(path), "{path} is the admin listener's");
        }
    }
}
