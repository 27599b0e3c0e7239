//! The operator console: server-rendered pages at `/` of the admin listener, and the JSON behind
//! each at `/api/…`. Readable without JavaScript (a small embedded script only refreshes the live
//! pages); every asset is embedded in the binary; nothing loads from another origin.
//!
//! - `routes.rs`: path → page, JSON or action (a `matchit` router); `request.rs`: the request as
//!   read and the responses with their security headers (a strict Content-Security-Policy);
//! - `access.rs`: who may read (loopback, or a token) and act (`[admin] token`), login sessions
//!   (`cookie`), CSRF, tokens compared in constant time (`subtle`);
//! - `data.rs`: what each page shows, gathered once for the page and its JSON; `form.rs`: the
//!   search forms → the store's queries;
//! - `pages/`: one `maud` template per page (checked at compile time; every value escaped);
//!   `api.rs`: the same views as JSON;
//! - `actions.rs`: requeue, purge, pause, resume, reload — each logged (who, what, how many) and
//!   counted in `outboxd_console_actions`; `jobs.rs`: the chunked dead-letter jobs in flight.
//!
//! Figures are labelled by whose they are: the table counts are the shared table's (every host's
//! rows); rates, latencies and sink states are this host's.

mod access;
mod actions;
mod api;
mod data;
mod form;
mod jobs;
mod pages;
pub mod request;
mod routes;
mod view;

use std::sync::Arc;

pub use access::{Grant, SESSION_COOKIE, is_loopback};
pub use data::{DeadView, EventView, EventsView, Overview, SinksView};
pub use form::{PAGE_ROWS, SCAN_ROWS};
pub use jobs::Job;
pub use request::{CONTENT_SECURITY_POLICY, ConsoleRequest, Reply};

use crate::config::admin::AdminConfig;
use crate::metrics::Metrics;
use crate::monitor::StatusSnapshot;
use crate::plugin::SinkControls;
use crate::reload::{Loaded, ReloadFn};
use crate::store::OutboxStore;

/// Rows per transaction of a console requeue or purge.
pub const ACTION_CHUNK: u32 = 500;

/// What the console reads and acts on.
pub struct ConsoleParts {
    /// The outbox table.
    pub store: Arc<dyn OutboxStore>,
    /// The tenants this host serves (the tenant picker; chunked actions go tenant by tenant).
    pub app_codes: Vec<String>,
    /// This host's `worker.node_id`.
    pub node_id: String,
    /// This host's metrics (and its last hour, [`crate::metrics::Recent`]).
    pub metrics: Metrics,
    /// The status refresher's latest table counts.
    pub snapshot: StatusSnapshot,
    /// The sink set serving now.
    pub loaded: Arc<Loaded>,
    /// The sinks' pause switches.
    pub controls: Arc<SinkControls>,
    /// Hot reload, when the host has a config file to re-read.
    pub reload: Option<ReloadFn>,
    /// `[admin]`: the tokens.
    pub admin: AdminConfig,
}

/// The console of one host.
pub struct Console {
    store: Arc<dyn OutboxStore>,
    app_codes: Vec<String>,
    node_id: String,
    metrics: Metrics,
    snapshot: StatusSnapshot,
    loaded: Arc<Loaded>,
    controls: Arc<SinkControls>,
    reload: Option<ReloadFn>,
    access: access::Access,
    jobs: Arc<jobs::Jobs>,
}

impl Console {
    /// The console over `parts`.
    pub fn new(parts: ConsoleParts) -> Arc<Console> {
        Arc::new(Console {
            access: access::Access::new(parts.admin.token.clone(), parts.admin.read_token.clone()),
            store: parts.store,
            app_codes: parts.app_codes,
            node_id: parts.node_id,
            metrics: parts.metrics,
            snapshot: parts.snapshot,
            loaded: parts.loaded,
            controls: parts.controls,
            reload: parts.reload,
            jobs: Arc::new(jobs::Jobs::default()),
        })
    }

    /// Answers a console request; `None` when the path is not the console's.
    pub async fn handle(self: &Arc<Self>, request: &ConsoleRequest) -> Option<Reply> {
        routes::route(self, request).await
    }

    /// Whether `path` is one of the console's (so the listener reads a form body for it).
    pub fn owns(path: &str) -> bool {
        routes::owns(path)
    }
}
