//! A page with one message (a refusal, an error, nothing found).

use maud::html;

use super::layout::page;

/// `title` and `message`.
pub(crate) fn render(title: &str, message: &str) -> String {
    let main = html! {
        p.message { (message) }
        p { a href="/" { "Back to the overview" } }
    };
    page(title, None, false, main)
}
