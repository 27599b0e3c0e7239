//! Wake-ups for idle worker loops: a commit to the outbox table wakes a loop at once instead of
//! after the next `poll_interval`.
//!
//! A [`Wake`] is shared by the loops of one [`crate::worker::Worker`] and by whatever feeds it:
//! - a **commit feed** started by [`start_commit_feed`]: PostgreSQL `LISTEN` on the channel the
//!   outbox table's statement-level trigger notifies ([`postgres`]), or SQLite's
//!   `PRAGMA data_version` read from memory every few milliseconds ([`sqlite`]);
//! - a producer in the same process, which calls [`Wake::wake`] after its transaction commits.
//!
//! Polling stays as the safety net for a lost notification. Without a commit feed (MySQL /
//! MariaDB have no notification; or the PostgreSQL listener is reconnecting) the loops probe
//! adaptively instead ([`IdleBackoff`]): every few milliseconds while rows keep arriving, backing
//! off to `poll_interval` once the table has been idle for a while.

pub mod postgres;
pub mod sqlite;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::store::{Backend, StoreError, TableName};

/// Wakes idle worker loops. Cheap to clone; all clones wake the same loops.
#[derive(Debug, Clone, Default)]
pub struct Wake {
    inner: Arc<WakeInner>,
}

#[derive(Debug, Default)]
struct WakeInner {
    notify: Notify,
    /// True while a commit feed is connected and delivering notifications.
    commit_feed: AtomicBool,
}

impl Wake {
    /// A wake with no feed yet (loops fall back to adaptive probing until one connects).
    pub fn new() -> Wake {
        Wake::default()
    }

    /// Wakes one idle loop now; when every loop is busy, the next one to go idle claims again at
    /// once instead of sleeping (the wake is kept until then, never lost). Call it after the
    /// transaction that wrote outbox rows has committed.
    pub fn wake(&self) {
        self.inner.notify.notify_one();
    }

    /// Waits until [`Wake::wake`] is called (or returns at once if a wake is pending).
    pub async fn woken(&self) {
        self.inner.notify.notified().await;
    }

    /// Whether a commit feed is connected: then an idle loop may sleep the whole poll interval,
    /// since a commit wakes it.
    pub fn has_commit_feed(&self) -> bool {
        self.inner.commit_feed.load(Ordering::Acquire)
    }

    /// Records whether the commit feed is connected (its task calls this).
    pub(crate) fn set_commit_feed(&self, connected: bool) {
        self.inner.commit_feed.store(connected, Ordering::Release);
    }
}

/// Shortest idle wait of adaptive probing: while rows keep arriving, a loop claims again this soon.
pub const PROBE_MIN: Duration = Duration::from_millis(5);

/// The idle wait of a loop without a commit feed: [`PROBE_MIN`] after a round that found rows
/// (and after the first round of a loop that has just started: a host started or restarted into
/// traffic picks it up within milliseconds, not after a whole `poll_interval`), doubling with
/// every empty round up to the poll interval (the worker counts each wait from the
/// start of the round, so a busy table is claimed every `PROBE_MIN`, not every `PROBE_MIN` plus
/// a round). A table that is idle costs one claim
/// per `poll_interval` per loop (after about ten empty rounds); one that is busy is probed every
/// few milliseconds.
#[derive(Debug, Clone)]
pub struct IdleBackoff {
    max: Duration,
    next: Duration,
}

impl IdleBackoff {
    /// Starts as after a round that found rows: the first empty rounds wait 2 × [`PROBE_MIN`],
    /// 4 × …, reaching `poll_interval` after about ten of them (~1 s of probes at most).
    pub fn new(poll_interval: Duration) -> IdleBackoff {
        IdleBackoff {
            max: poll_interval,
            next: PROBE_MIN.min(poll_interval),
        }
    }

    /// The wait after a round; `found_rows` says whether the round claimed anything.
    pub fn after_round(&mut self, found_rows: bool) -> Duration {
        self.next = if found_rows {
            PROBE_MIN.min(self.max)
        } else {
            (self.next * 2).min(self.max)
        };
        self.next
    }
}

/// Starts the commit feed of the database at `url` for `table`, feeding `wake` until `shutdown`:
/// PostgreSQL listens for the trigger's notifications, SQLite watches `PRAGMA data_version`;
/// MySQL / MariaDB have none (`Ok(None)`: the loops probe adaptively). An in-memory SQLite
/// database has no other connection to watch, so none either.
pub async fn start_commit_feed(
    url: &str,
    table: &TableName,
    wake: &Wake,
    shutdown: CancellationToken,
) -> Result<Option<JoinHandle<()>>, StoreError> {
    match Backend::from_url(url)? {
        Backend::Postgres => Ok(Some(postgres::spawn_listener(
            url.to_string(),
            table,
            wake.clone(),
            shutdown,
        ))),
        Backend::Sqlite => sqlite::spawn_watcher(url, wake.clone(), shutdown).await,
        Backend::MySql => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_probes_fast_while_busy_and_slows_to_the_poll_interval() {
        let poll = Duration::from_secs(1);
        let mut backoff = IdleBackoff::new(poll);
        // Just started: probing begins fast, as after a busy round.
        assert_eq!(backoff.clone().after_round(false), PROBE_MIN * 2);
        assert_eq!(backoff.after_round(true), PROBE_MIN);
        assert_eq!(backoff.after_round(false), PROBE_MIN * 2);
        assert_eq!(backoff.after_round(false), PROBE_MIN * 4);
        let mut waits = Vec::new();
        for _ in 0..10 {
            waits.push(backoff.after_round(false));
        }
        assert_eq!(waits.last(), Some(&poll));
        assert_eq!(backoff.after_round(true), PROBE_MIN);
        // A poll interval shorter than the probe minimum is kept.
        let mut short = IdleBackoff::new(Duration::from_millis(2));
        assert_eq!(short.after_round(true), Duration::from_millis(2));
    }

    #[tokio::test]
    async fn a_wake_before_the_wait_is_kept() {
        let wake = Wake::new();
        wake.wake();
        tokio::time::timeout(Duration::from_secs(1), wake.woken())
            .await
            .expect("the pending wake returns at once");
        assert!(
            tokio::time::timeout(Duration::from_millis(20), wake.woken())
                .await
                .is_err(),
            "one wake wakes one wait"
        );
        assert!(!wake.has_commit_feed());
        wake.set_commit_feed(true);
        assert!(wake.clone().has_commit_feed());
    }
}
