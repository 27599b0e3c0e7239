//! Wake-ups for idle worker loops: a commit to the outbox table wakes a loop at once instead of
//! after the next `poll_interval`.
//!
//! A [`Wake`] is shared by the loops of one [`crate::worker::Worker`] and by whatever feeds it:
//! - a **commit feed** started by [`start_commit_feed`]: PostgreSQL `LISTEN` on the channel the
//!   outbox table's triggers notify ([`postgres`]), SQLite's `PRAGMA data_version` read from
//!   memory every few milliseconds ([`sqlite`]), or the MySQL / MariaDB binary log followed as a
//!   replica would ([`binlog`], where the server writes one and the user may read it);
//! - a producer in the same process, which calls [`Wake::wake`] after its transaction commits.
//!
//! PostgreSQL's feed is **gated** ([`gate`]): commits notify only while a host is armed, because
//! notifying commits serialise cluster-wide. The loops arm while the table is quiet and probe
//! every [`rate::BUSY_PROBE`] while it is busy ([`rate`]), so producers never pay for
//! notifications at rates where a probe finds rows anyway.
//!
//! Polling stays as the safety net for a lost notification. Without a commit feed (MySQL /
//! MariaDB without a binlog to follow; or a feed reconnecting) the loops probe adaptively instead
//! ([`IdleBackoff`]): every few milliseconds while rows keep arriving, backing off to
//! `worker.idle_probe` once the table has been idle for a while (50 ms on MySQL / MariaDB; the
//! poll interval where a feed exists).

pub mod binlog;
pub mod postgres;
pub mod rate;
pub mod sqlite;
mod waiting;

pub use waiting::WaitRecord;

pub use postgres::gate;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{Notify, watch};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use serde::Deserialize;
use tracing::info;

use crate::store::{Backend, CommitFeed, StoreError, TableName};
use gate::Gate;
use rate::ArrivalRate;

/// Wakes idle worker loops. Cheap to clone; all clones wake the same loops.
#[derive(Debug, Clone, Default)]
pub struct Wake {
    inner: Arc<WakeInner>,
}

#[derive(Debug)]
struct WakeInner {
    notify: Notify,
    /// True while a commit feed is connected and delivering notifications.
    commit_feed: AtomicBool,
    /// True when the feed notifies only while armed (PostgreSQL's gate).
    gated: AtomicBool,
    /// The gate's state (written by the gate task).
    gate: watch::Sender<Gate>,
    /// Whether the loops want the gate armed (read by the gate task).
    arm: watch::Sender<bool>,
    /// Rows per second the loops find.
    rate: Mutex<ArrivalRate>,
    /// What wakes the loops, as logged at start (`binlog`, `probe (log_bin is OFF)`, …).
    kind: Mutex<String>,
    /// The loops waiting for work now.
    waiting: Arc<waiting::Waiting>,
}

impl Default for WakeInner {
    fn default() -> WakeInner {
        WakeInner {
            notify: Notify::new(),
            commit_feed: AtomicBool::new(false),
            gated: AtomicBool::new(false),
            gate: watch::Sender::new(Gate::Off),
            arm: watch::Sender::new(false),
            rate: Mutex::new(ArrivalRate::default()),
            kind: Mutex::new("probe".into()),
            waiting: Arc::default(),
        }
    }
}

/// What an idle loop does next ([`Wake::idle`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Idle {
    /// Sleep until woken, or the poll interval (the safety net).
    UntilWoken,
    /// Claim again at once: the gate has just armed, and rows committed before the arm sent no
    /// notification.
    ClaimNow,
    /// Claim again at this instant, or when woken before it.
    ProbeAt(tokio::time::Instant),
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

    /// Waits until [`Wake::wake`] is called (or returns at once if a wake is pending), or until
    /// the feed changes in a way that calls for a new plan ([`Wake::idle`]).
    pub async fn woken(&self) {
        self.inner.notify.notified().await;
    }

    /// Whether a commit feed is connected: then an idle loop may sleep the whole poll interval,
    /// since a commit wakes it (on a gated feed once it is armed: [`Wake::idle`]).
    pub fn has_commit_feed(&self) -> bool {
        self.inner.commit_feed.load(Ordering::Acquire)
            && (!self.inner.gated.load(Ordering::Acquire) || *self.inner.gate.borrow() != Gate::Off)
    }

    /// Records whether the commit feed is connected (its task calls this).
    pub(crate) fn set_commit_feed(&self, connected: bool) {
        self.inner.commit_feed.store(connected, Ordering::Release);
        if !connected {
            // Loops sleeping on the feed must probe now.
            self.inner.notify.notify_waiters();
        }
    }

    /// What wakes the loops: the feed's name (`binlog`, `listen`, `data_version`) or `probe`
    /// with the reason there is no feed; set once at start ([`start_commit_feed_with`]).
    pub fn kind(&self) -> String {
        self.inner
            .kind
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// How many of the loops woken through this wake are waiting for work now (between an idle
    /// round and the next claim).
    pub fn waiting_loops(&self) -> usize {
        self.inner.waiting.count()
    }

    /// How long until the first probe a waiting loop has planned; `None` when no waiting loop
    /// probes (each sleeps until woken, or the poll interval).
    pub fn next_probe_in(&self) -> Option<Duration> {
        self.inner.waiting.next_probe_in()
    }

    /// Records that loop `loop_id` waits for work, on a probe due at `probe` or (`None`) until
    /// woken, for as long as the record lives.
    pub(crate) fn record_wait(
        &self,
        loop_id: &str,
        probe: Option<tokio::time::Instant>,
    ) -> WaitRecord {
        WaitRecord::new(self.inner.waiting.clone(), loop_id, probe)
    }

    /// Records what wakes the loops ([`Wake::kind`]).
    pub(crate) fn set_kind(&self, kind: impl Into<String>) {
        *self.inner.kind.lock().unwrap_or_else(|e| e.into_inner()) = kind.into();
    }

    /// Marks the feed as gated: commits notify only while the gate is armed.
    pub(crate) fn set_gated(&self) {
        self.inner.gated.store(true, Ordering::Release);
    }

    /// The gate's state (the gate task sets it).
    pub fn gate(&self) -> Gate {
        *self.inner.gate.borrow()
    }

    /// Records the gate's state; loops asleep on it re-plan unless it has just armed.
    pub(crate) fn set_gate(&self, state: Gate) {
        self.inner.gate.send_replace(state);
        if !matches!(state, Gate::Armed(_)) {
            self.inner.notify.notify_waiters();
        }
    }

    /// The loops' arm requests, for the gate task.
    pub(crate) fn arm_requests(&self) -> watch::Receiver<bool> {
        self.inner.arm.subscribe()
    }

    /// Records a loop's round that claimed `rows` (counted into the host's arrival rate, which
    /// only a gated feed consults).
    pub fn record_round(&self, rows: u64) {
        if self.inner.gated.load(Ordering::Acquire) {
            self.rate().record(rows, Instant::now());
        }
    }

    /// Whether the loops currently find the table busy ([`rate::ArrivalRate`]).
    pub fn is_busy(&self) -> bool {
        self.rate().is_busy()
    }

    fn rate(&self) -> std::sync::MutexGuard<'_, ArrivalRate> {
        self.inner.rate.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How a loop whose round (started at `round_started`) left it idle waits: `probe` is its
    /// adaptive probe's wait ([`IdleBackoff`]), `seen` the last arm this loop claimed after.
    ///
    /// - No feed connected: probe.
    /// - A feed that always notifies (SQLite): sleep until woken.
    /// - A gated feed (PostgreSQL): on a busy table, disarm and probe every
    ///   [`rate::BUSY_PROBE`]; on a quiet one, arm (waiting for the producers before the arm),
    ///   claim once more after each new arm, then sleep until woken. An arm that stalls behind a
    ///   long producer transaction leaves the loop probing.
    pub async fn idle(
        &self,
        round_started: tokio::time::Instant,
        probe: Duration,
        seen: &mut Option<u64>,
    ) -> Idle {
        if !self.has_commit_feed() {
            return Idle::ProbeAt(round_started + probe);
        }
        if !self.inner.gated.load(Ordering::Acquire) {
            return Idle::UntilWoken;
        }
        if self.is_busy() {
            self.inner
                .arm
                .send_if_modified(|armed| std::mem::replace(armed, false));
            return Idle::ProbeAt(round_started + rate::BUSY_PROBE.min(probe));
        }
        match self.arm().await {
            Some(epoch) if *seen == Some(epoch) => Idle::UntilWoken,
            Some(epoch) => {
                *seen = Some(epoch);
                Idle::ClaimNow
            }
            None => Idle::ProbeAt(round_started + probe),
        }
    }

    /// Asks for the gate to be armed and waits until it is (its arm's number), or until it
    /// cannot be (`None`: off, or stalled behind a producer transaction).
    async fn arm(&self) -> Option<u64> {
        let mut state = self.inner.gate.subscribe();
        self.inner
            .arm
            .send_if_modified(|armed| !std::mem::replace(armed, true));
        // The gate's own lock timeout bounds the wait; this only guards against a gate task
        // that stopped answering.
        let settled = tokio::time::timeout(
            gate::ARM_LOCK_TIMEOUT * 10,
            state.wait_for(|s| *s != Gate::Disarmed),
        )
        .await;
        match settled {
            Ok(Ok(s)) => match *s {
                Gate::Armed(epoch) => Some(epoch),
                _ => None,
            },
            _ => None,
        }
    }
}

/// Shortest idle wait of adaptive probing: while rows keep arriving, a loop claims again this soon.
pub const PROBE_MIN: Duration = Duration::from_millis(5);

/// First wait before a commit feed (the binlog reader, the PostgreSQL listener and its notify
/// gate) reconnects, after a lost connection or a first failed attempt; doubled per failure.
pub const FIRST_RECONNECT_WAIT: Duration = Duration::from_millis(100);

/// Longest wait between two reconnect attempts of a commit feed (the binlog reader, the
/// PostgreSQL listener).
pub const MAX_RECONNECT_WAIT: Duration = Duration::from_secs(5);

/// Empty rounds after one that found rows that still wait only [`PROBE_MIN`]: rows arriving a
/// few milliseconds apart leave gaps of two or three probes now and then (at 200 rows/s, one row
/// every 5 ms on average), and a doubled wait there was most of a row's latency (MariaDB without
/// a binlog, 200 rows/s: p99 13.3–14.4 ms, the wait for the claim 11 of them).
pub const QUICK_EMPTY_PROBES: u32 = 3;

/// The idle wait of a loop without a commit feed: [`PROBE_MIN`] after a round that found rows
/// (and after the first round of a loop that has just started: a host started or restarted into
/// traffic picks it up within milliseconds, not after a whole `poll_interval`) and after the
/// [`QUICK_EMPTY_PROBES`] empty rounds that follow it, then doubling with every empty round up to
/// its bound, `worker.idle_probe` (the worker counts each wait from the start of the round, so a
/// busy table is claimed every `PROBE_MIN`, not every `PROBE_MIN` plus a round). A table that is
/// idle costs one claim per bound per loop (after a few empty rounds); one that is busy is
/// probed every few milliseconds.
#[derive(Debug, Clone)]
pub struct IdleBackoff {
    max: Duration,
    next: Duration,
    /// Empty rounds since the last that found rows.
    empty: u32,
}

impl IdleBackoff {
    /// Starts as after a round that found rows: the first [`QUICK_EMPTY_PROBES`] empty rounds
    /// wait [`PROBE_MIN`], the next 2 × …, 4 × …, reaching `bound` (`worker.idle_probe`, at most
    /// the poll interval) after a few of them and staying there.
    pub fn new(bound: Duration) -> IdleBackoff {
        IdleBackoff {
            max: bound,
            next: PROBE_MIN.min(bound),
            empty: 0,
        }
    }

    /// The wait after a round; `found_rows` says whether the round claimed anything.
    pub fn after_round(&mut self, found_rows: bool) -> Duration {
        self.empty = if found_rows {
            0
        } else {
            self.empty.saturating_add(1)
        };
        self.next = if self.empty <= QUICK_EMPTY_PROBES {
            PROBE_MIN.min(self.max)
        } else {
            (self.next * 2).min(self.max)
        };
        self.next
    }
}

/// What may wake idle loops on MySQL / MariaDB (`worker.wake`); PostgreSQL and SQLite always
/// use their own commit feed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum WakeMode {
    /// Follow the binlog where the server writes one and the user may read it; probe otherwise.
    #[default]
    Auto,
    /// Follow the binlog; refuse to start when it cannot be followed.
    Binlog,
    /// Never follow the binlog: probe (bounded by `worker.idle_probe`).
    Probe,
}

impl WakeMode {
    /// The value as written in the config (`auto`, `binlog`, `probe`).
    pub fn as_str(self) -> &'static str {
        match self {
            WakeMode::Auto => "auto",
            WakeMode::Binlog => "binlog",
            WakeMode::Probe => "probe",
        }
    }
}

/// Why a commit feed could not start.
#[derive(Debug, thiserror::Error)]
pub enum FeedError {
    /// The database could not be opened.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `worker.wake = "binlog"` and the binlog cannot be followed.
    #[error(
        "worker.wake = \"binlog\", but the binlog cannot be followed: {0}; enable log_bin and \
         grant REPLICATION SLAVE, REPLICATION CLIENT to the user, or set worker.wake = \"auto\""
    )]
    BinlogUnavailable(binlog::Unavailable),
}

/// Starts the commit feed of the database at `url` for `table` as `worker.wake = "auto"` does
/// ([`start_commit_feed_with`]).
pub async fn start_commit_feed(
    url: &str,
    table: &TableName,
    wake: &Wake,
    shutdown: CancellationToken,
) -> Result<Option<JoinHandle<()>>, FeedError> {
    start_commit_feed_with(url, table, WakeMode::Auto, wake, shutdown).await
}

/// Starts the commit feed of the database at `url` for `table`, feeding `wake` until `shutdown`:
/// PostgreSQL listens for the trigger's notifications, SQLite watches `PRAGMA data_version`,
/// MySQL / MariaDB follow the binlog as `mode` says. `Ok(None)` where there is none (the loops
/// probe adaptively); an in-memory SQLite database has no other connection to watch, so none
/// either. Logs what wakes the loops (`wake: binlog`, `wake: probe (log_bin is OFF)`, …) and
/// records it in [`Wake::kind`].
pub async fn start_commit_feed_with(
    url: &str,
    table: &TableName,
    mode: WakeMode,
    wake: &Wake,
    shutdown: CancellationToken,
) -> Result<Option<JoinHandle<()>>, FeedError> {
    let feed = match Backend::from_url(url)?.commit_feed() {
        CommitFeed::Listen => {
            wake.set_kind("listen");
            Some(postgres::spawn_listener(
                url.to_string(),
                table,
                wake.clone(),
                shutdown,
            ))
        }
        CommitFeed::DataVersion => {
            let feed = sqlite::spawn_watcher(url, wake.clone(), shutdown).await?;
            wake.set_kind(if feed.is_some() {
                "data_version"
            } else {
                "probe (in-memory database)"
            });
            feed
        }
        CommitFeed::Binlog if mode == WakeMode::Probe => {
            wake.set_kind("probe (worker.wake = \"probe\")");
            None
        }
        CommitFeed::Binlog => {
            let opened = match binlog::Target::new(url, table) {
                Ok(target) => {
                    let server_id = binlog::server_id();
                    binlog::open(&target, server_id)
                        .await
                        .map(|opened| (target, server_id, opened))
                }
                Err(why) => Err(why),
            };
            match opened {
                Ok((target, server_id, opened)) => {
                    wake.set_kind("binlog");
                    Some(binlog::spawn_follower(
                        target,
                        server_id,
                        opened,
                        wake.clone(),
                        shutdown,
                    ))
                }
                Err(why) if mode == WakeMode::Binlog => {
                    return Err(FeedError::BinlogUnavailable(why));
                }
                Err(why) => {
                    wake.set_kind(format!("probe ({why})"));
                    None
                }
            }
        }
    };
    info!(wake = %wake.kind(), "wake: {}", wake.kind());
    Ok(feed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_probes_fast_while_busy_and_slows_to_the_poll_interval() {
        let poll = Duration::from_secs(1);
        let mut backoff = IdleBackoff::new(poll);
        // Just started: probing begins fast, as after a busy round.
        let quick = |backoff: &mut IdleBackoff| {
            for _ in 0..QUICK_EMPTY_PROBES {
                assert_eq!(backoff.after_round(false), PROBE_MIN, "a gap between rows");
            }
        };
        quick(&mut backoff.clone());
        assert_eq!(backoff.after_round(true), PROBE_MIN);
        quick(&mut backoff);
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
