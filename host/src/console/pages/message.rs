//! A page with one message (a refusal, an error, nothing found).

use super::layout::page;

/// `title` and `message`.
pub(crate) fn render(title: &str, message: &str) -> String {
    page(title, None, false, |h| {
        h.el("p", &[("class", "message")], message);
        h.open("p", &[])
            .el("a", &[("href", "/")], "Back to the overview")
            .close("p");
    })
}
