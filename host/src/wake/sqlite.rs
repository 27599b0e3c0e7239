//! SQLite commit feed: a dedicated connection reads `PRAGMA data_version` every
//! [`WATCH_INTERVAL`]. The value changes when another connection (any process) commits to the
//! file; reading it touches only the WAL index in shared memory, so an unchanged database costs no
//! I/O.

use std::time::Duration;

use sqlx::Connection;
use sqlx::sqlite::SqliteConnection;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use super::Wake;
use crate::store::StoreError;

/// How often the watcher reads `data_version`.
pub const WATCH_INTERVAL: Duration = Duration::from_millis(5);

/// Opens the watcher's connection and spawns its task (runs until `shutdown`); `Ok(None)` for an
/// in-memory database, which no other connection can write.
pub async fn spawn_watcher(
    url: &str,
    wake: Wake,
    shutdown: CancellationToken,
) -> Result<Option<JoinHandle<()>>, StoreError> {
    if url.contains(":memory:") || url.contains("mode=memory") {
        return Ok(None);
    }
    let options = crate::store::sqlite::connect_options(url)?;
    let mut conn = SqliteConnection::connect_with(&options)
        .await
        .map_err(StoreError::db("watch"))?;
    let mut seen = data_version(&mut conn)
        .await
        .map_err(StoreError::db("watch"))?;
    wake.set_commit_feed(true);
    Ok(Some(tokio::spawn(async move {
        let mut ticks = tokio::time::interval(WATCH_INTERVAL);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = ticks.tick() => {}
            }
            match data_version(&mut conn).await {
                Ok(version) if version != seen => {
                    seen = version;
                    wake.wake();
                }
                Ok(_) => {}
                Err(err) => {
                    warn!(error = %err, "commit feed cannot read PRAGMA data_version; probing instead");
                    break;
                }
            }
        }
        wake.set_commit_feed(false);
        let _ = conn.close().await;
    })))
}

async fn data_version(conn: &mut SqliteConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("PRAGMA data_version")
        .fetch_one(conn)
        .await
}
