//! The console's pages, one renderer each over [`super::html::Html`]; `layout.rs` is the frame
//! around them (title, navigation, who is reading, the live-refresh hook).

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

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;

use super::Console;
use super::access::Caller;
use super::form::{DeadForm, EventsForm};
use super::request::{ConsoleRequest, html};

/// A page for a reader.
pub(super) async fn get(
    console: &Arc<Console>,
    request: &ConsoleRequest,
    caller: &Caller,
) -> Response<Full<Bytes>> {
    let notice = request.q("notice");
    let page = match request.path.as_str() {
        "/" => overview::render(&console.overview(), caller),
        "/events" => {
            let form = EventsForm::read(request, false);
            events::render(
                &form,
                console.events(&form).await,
                &console.app_codes,
                caller,
            )
        }
        "/event" => match console.event(request.q("app"), request.q("id")).await {
            Ok(Some(view)) => event::render(&view, caller),
            Ok(None) => {
                return html(
                    StatusCode::NOT_FOUND,
                    message::render(
                        "Not found",
                        &format!(
                            "no event {:?} in app {:?}",
                            request.q("id"),
                            request.q("app")
                        ),
                    ),
                );
            }
            Err(error) => message::render("Database error", &error),
        },
        "/dead" => {
            let form = DeadForm::read(request);
            dead::render(&form, console.dead(&form).await, &console.app_codes, caller)
        }
        "/sinks" => sinks::render(&console.sinks(), caller, notice),
        "/jobs" => jobs::render(
            request
                .q("id")
                .parse()
                .ok()
                .and_then(|id| console.jobs.get(id)),
            &console.jobs.latest(10),
            caller,
        ),
        _ => {
            return html(
                StatusCode::NOT_FOUND,
                message::render(
                    "Not found",
                    &format!("no page {}: try /, /events, /dead, /sinks", request.path),
                ),
            );
        }
    };
    html(StatusCode::OK, page)
}
