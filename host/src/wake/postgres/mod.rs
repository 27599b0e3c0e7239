//! PostgreSQL commit feed: one dedicated connection `LISTEN`s on the outbox table's channel,
//! which the statement-level trigger of migration 0002 notifies once per INSERT statement (and
//! PostgreSQL folds repeats within one transaction into one), so any producer that writes rows
//! directly (the Go service, any language) wakes the hosts with no code change. Migration 0003's
//! row trigger notifies the same channel when an UPDATE puts a row back to `pending`
//! (`outboxd requeue` from any host), so requeued rows are delivered at once too.
//!
//! Since migration 0005 the trigger notifies only while some host's gate is armed
//! ([`gate`], which runs beside the listener on a connection of its own).
//!
//! The listener reconnects on its own (backing off up to
//! [`MAX_RECONNECT_WAIT`](super::MAX_RECONNECT_WAIT)); while it is down the loops probe
//! adaptively, and after every (re)connect it wakes a loop once, since notifications sent while it
//! was away are gone.

pub mod gate;

use sqlx::postgres::PgListener;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use super::Wake;
use crate::outage::Outage;
use crate::store::{TableName, redact_url};

/// The channel the trigger of `table` notifies: `outboxd_<table>` in lower case (PostgreSQL
/// folds the unquoted table name the same way).
pub fn channel(table: &TableName) -> String {
    format!("outboxd_{}", table.as_str().to_ascii_lowercase())
}

/// Spawns the listener and the notify gate ([`gate`]); they run until `shutdown`.
pub fn spawn_listener(
    url: String,
    table: &TableName,
    wake: Wake,
    shutdown: CancellationToken,
) -> JoinHandle<()> {
    let channel = channel(table);
    wake.set_gated();
    tokio::spawn(async move {
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = listen_forever(&url, &channel, &wake) => {}
            _ = gate::run(&url, &channel, &wake) => {}
        }
        wake.set_gate(gate::Gate::Off);
        wake.set_commit_feed(false);
    })
}

/// Connects, listens and forwards notifications; reconnects after any error.
async fn listen_forever(url: &str, channel: &str, wake: &Wake) {
    let mut reconnect_wait = super::FIRST_RECONNECT_WAIT;
    let outage = Outage::new();
    loop {
        match listen_once(url, channel, wake, &outage).await {
            Ok(()) => {
                // The connection was lost after it had worked: try again soon.
                reconnect_wait = super::FIRST_RECONNECT_WAIT;
                outage.failed(|| {
                    warn!(database = %redact_url(url), channel, "commit feed lost its connection; reconnecting");
                });
            }
            Err(err) => {
                outage.failed(|| {
                    warn!(database = %redact_url(url), channel, error = %err,
                        retry_in = ?reconnect_wait, "commit feed cannot listen; probing until it reconnects");
                });
            }
        }
        wake.set_commit_feed(false);
        tokio::time::sleep(reconnect_wait).await;
        reconnect_wait = (reconnect_wait * 2).min(super::MAX_RECONNECT_WAIT);
    }
}

/// One connection's life: `Ok(())` when it was lost after listening, `Err` when it failed.
async fn listen_once(
    url: &str,
    channel: &str,
    wake: &Wake,
    outage: &Outage,
) -> Result<(), sqlx::Error> {
    let mut listener = PgListener::connect(url).await?;
    listener.eager_reconnect(false);
    listener.listen(channel).await?;
    outage.recovered(|ended| {
        info!(database = %redact_url(url), channel, outage = %ended.lasted_text(),
            failures = ended.failures, "commit feed back after an outage");
    });
    info!(database = %redact_url(url), channel, "commit feed listening");
    wake.set_commit_feed(true);
    // Rows committed while no one listened have no notification coming.
    wake.wake();
    loop {
        match listener.try_recv().await? {
            Some(_) => wake.wake(),
            None => return Ok(()),
        }
    }
}
