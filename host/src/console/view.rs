//! The console's views: what a page and its JSON show, named by the router (`routes.rs`) and
//! rendered by `pages/` and `api.rs`.

/// What a page and its JSON show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum View {
    /// `/`: the table's counts, sinks and recent activity.
    Overview,
    /// `/events`: the event search.
    Events,
    /// `/event`: one event.
    Event,
    /// `/dead`: failed events, grouped by error.
    Dead,
    /// `/sinks`: each sink's state.
    Sinks,
    /// `/jobs`: the chunked dead-letter jobs.
    Jobs,
}
