//! The console's pages, one `maud` template each; `layout.rs` is the frame around them (title,
//! navigation, who is reading, the live-refresh hook) and the pieces they share.

pub(super) mod confirm;
mod dead;
mod event;
mod events;
mod jobs;
mod layout;
pub(super) mod login;
pub(super) mod message;
mod overview;
mod sinks;
mod table;

use std::sync::Arc;

use http::StatusCode;

use super::Console;
use super::access::Caller;
use super::form::{DeadForm, EventsForm};
use super::request::{ConsoleRequest, Reply, html};
use super::view::View;

/// The page of `view` for a reader.
pub(super) async fn get(
    console: &Arc<Console>,
    request: &ConsoleRequest,
    caller: &Caller,
    view: View,
) -> Reply {
    let page = match view {
        View::Overview => overview::render(&console.overview(), caller),
        View::Events => {
            let form = EventsForm::read(request, false);
            let found = console.events(&form).await;
            events::render(&form, found, &console.app_codes, caller)
        }
        View::Event => match console.event(request.q("app"), request.q("id")).await {
            Ok(Some(view)) => event::render(&view, caller),
            Ok(None) => {
                let (id, app) = (request.q("id"), request.q("app"));
                let message = format!("no event {id:?} in app {app:?}");
                return html(
                    StatusCode::NOT_FOUND,
                    message::render("Not found", &message),
                );
            }
            Err(error) => message::render("Database error", &error),
        },
        View::Dead => {
            let form = DeadForm::read(request);
            let found = console.dead(&form).await;
            dead::render(&form, found, &console.app_codes, caller)
        }
        View::Sinks => sinks::render(&console.sinks(), caller, request.q("notice")),
        View::Jobs => {
            let job = request.q("id").parse().ok();
            let job = job.and_then(|id| console.jobs.get(id));
            jobs::render(job, &console.jobs.latest(10), caller)
        }
    };
    html(StatusCode::OK, page)
}
