//! The JSON behind each page: `GET /api/overview`, `/api/events?…` (the events page's fields),
//! `/api/event?app=&id=`, `/api/dead?…`, `/api/sinks`, `/api/jobs[?id=]`. The same views the pages
//! render (`data.rs`); errors are `{"error": "…"}` with a 4xx/5xx status.

use std::sync::Arc;

use http::StatusCode;

use super::Console;
use super::form::{DeadForm, EventsForm};
use super::request::{ConsoleRequest, Reply, json};
use super::view::View;

fn error(status: StatusCode, message: impl Into<String>) -> Reply {
    json(status, &serde_json::json!({ "error": message.into() }))
}

/// A bad form is 400, a database error 503.
fn failed(message: String) -> Reply {
    let status = if message.starts_with("database") || message.contains("database error") {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::BAD_REQUEST
    };
    error(status, message)
}

/// The JSON of `view` (`None`: a name that is none).
pub(super) async fn get(
    console: &Arc<Console>,
    request: &ConsoleRequest,
    view: Option<View>,
) -> Reply {
    let Some(view) = view else {
        let name = request.path.trim_start_matches("/api/");
        return error(
            StatusCode::NOT_FOUND,
            format!("no /api/{name}: try overview, events, event, dead, sinks, jobs"),
        );
    };
    match view {
        View::Overview => json(StatusCode::OK, &console.overview()),
        View::Events => match console.events(&EventsForm::read(request, false)).await {
            Ok(view) => json(StatusCode::OK, &view),
            Err(message) => failed(message),
        },
        View::Event => match console.event(request.q("app"), request.q("id")).await {
            Ok(Some(view)) => json(StatusCode::OK, &view),
            Ok(None) => error(
                StatusCode::NOT_FOUND,
                format!(
                    "no event {:?} in app {:?}",
                    request.q("id"),
                    request.q("app")
                ),
            ),
            Err(message) => failed(message),
        },
        View::Dead => match console.dead(&DeadForm::read(request)).await {
            Ok(view) => json(StatusCode::OK, &view),
            Err(message) => failed(message),
        },
        View::Sinks => json(StatusCode::OK, &console.sinks()),
        View::Jobs => match request.q("id") {
            "" => json(StatusCode::OK, &console.jobs.latest(20)),
            id => match id.parse().ok().and_then(|id| console.jobs.get(id)) {
                Some(job) => json(StatusCode::OK, &job),
                None => error(StatusCode::NOT_FOUND, format!("no job {id:?}")),
            },
        },
    }
}
