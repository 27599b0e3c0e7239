//! PostgreSQL's notify gate: the host's side of migration 0005's protocol, which has producers'
//! commits notify only while some host waits for one.
//!
//! PostgreSQL serialises every transaction that sends a `NOTIFY` through one cluster-wide lock
//! held across the commit's WAL flush, so producers that all notified were capped at about one
//! commit per WAL flush. The trigger therefore notifies only while a host is **armed**, and the
//! loops arm only while the table is quiet ([`crate::wake::rate`]); on a busy table they probe.
//!
//! One connection per host, kept apart from the listener and the store's pool (it holds session
//! locks for as long as it lives):
//! - it takes one of [`GATE_SLOTS`] slots on the table for its life (a session lock on the
//!   slot's registry key, asked without waiting: a host beyond [`GATE_SLOTS`] gets none and its
//!   loops probe);
//! - **arming** takes the slot's gate lock exclusively. The trigger takes every gate lock shared
//!   until its transaction ends, without waiting, and notifies when it cannot have one; so the
//!   arm waits for the producers that passed the trigger before it (and did not notify) to end,
//!   and every producer after it notifies. A loop that sees a new arm ([`Gate::Armed`]'s epoch)
//!   claims once more before it sleeps: the rows of those producers are committed by then.
//! - **disarming** releases the gate lock: producers stop notifying.
//!
//! The arm waits at most [`ARM_LOCK_TIMEOUT`] (a producer transaction that inserted a row and
//! then runs on for longer would hold it up): the gate then reports [`Gate::Stalled`], the loops
//! probe, and it tries again after [`ARM_RETRY`]. While it waits, producers notify (their shared
//! lock cannot be granted past a waiting exclusive one), so nothing they commit meanwhile is
//! missed. A lost connection releases the slot; the gate reconnects.

use std::time::Duration;

use sqlx::{Connection, PgConnection};
use tracing::{info, warn};

use crate::outage::Outage;
use crate::store::redact_url;
use crate::wake::Wake;

/// How many hosts can be armed on one table at a time (the trigger checks this many gate locks).
pub const GATE_SLOTS: i32 = 8;

/// Offset of the registry keys (one per slot, held for the connection's life) from the gate keys.
const REGISTRY: i32 = 1000;

/// Longest wait of one arm for the producer transactions before it (`lock_timeout` in
/// the gate session's settings).
pub const ARM_LOCK_TIMEOUT: Duration = Duration::from_millis(100);

/// The gate connection's settings: a name operators can find in `pg_stat_activity`, and the
/// arm's lock timeout ([`ARM_LOCK_TIMEOUT`]).
const SESSION_SETUP: &str =
    "SET application_name = 'outboxd notify gate'; SET lock_timeout = '100ms'";

/// Arms: takes the slot's gate key exclusively.
const ARM: &str = "SELECT pg_advisory_lock(hashtext($1), $2)";

/// Disarms: releases the slot's gate key.
const DISARM: &str = "SELECT pg_advisory_unlock(hashtext($1), $2)";

/// Wait before arming again after an arm timed out.
pub const ARM_RETRY: Duration = Duration::from_millis(250);

/// How often an idle gate connection checks that it is still alive (a dead one has lost its
/// locks, so producers would stop notifying without anyone noticing).
const KEEPALIVE: Duration = Duration::from_secs(10);

/// Longest wait between two reconnect attempts (also after finding every slot taken).
const MAX_GATE_RECONNECT_WAIT: Duration = Duration::from_secs(30);

/// The gate's state, as the loops see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Gate {
    /// No slot: not connected (yet), or every slot is taken by other hosts. Loops probe.
    Off,
    /// A slot held, not armed: producers do not notify this host.
    Disarmed,
    /// Armed: every commit since the arm with this number notifies.
    Armed(u64),
    /// The last arm timed out behind a producer transaction; the gate tries again soon. Loops
    /// probe meanwhile.
    Stalled,
}

/// Runs the gate of `channel` (the notification channel; its hash keys the locks) until the
/// task is dropped, feeding `wake`'s gate state and following its arm requests.
pub(super) async fn run(url: &str, channel: &str, wake: &Wake) {
    let mut reconnect_wait = crate::wake::FIRST_RECONNECT_WAIT;
    let mut armed_count = 0u64;
    let outage = Outage::new();
    loop {
        match serve(url, channel, wake, &mut armed_count, &outage).await {
            Ok(Served::NoSlot) => {
                warn!(database = %redact_url(url), channel, slots = GATE_SLOTS,
                    "every notify slot of the table is taken by other hosts; this host probes");
                reconnect_wait = MAX_GATE_RECONNECT_WAIT;
            }
            Ok(Served::Lost) => {
                reconnect_wait = crate::wake::FIRST_RECONNECT_WAIT;
                outage.failed(|| {
                    warn!(database = %redact_url(url), channel, "notify gate lost its connection; reconnecting");
                });
            }
            Err(err) => {
                outage.failed(|| {
                    warn!(database = %redact_url(url), channel, error = %err, retry_in = ?reconnect_wait,
                        "notify gate cannot connect; probing until it does");
                });
            }
        }
        wake.set_gate(Gate::Off);
        tokio::time::sleep(reconnect_wait).await;
        reconnect_wait = (reconnect_wait * 2).min(MAX_GATE_RECONNECT_WAIT);
    }
}

/// How one connection's life ended.
enum Served {
    /// Every slot was taken.
    NoSlot,
    /// The connection broke after it had worked.
    Lost,
}

/// One connection: take a slot, then arm and disarm as asked until the connection breaks.
async fn serve(
    url: &str,
    channel: &str,
    wake: &Wake,
    armed_count: &mut u64,
    outage: &Outage,
) -> Result<Served, sqlx::Error> {
    let mut conn = PgConnection::connect(url).await?;
    sqlx::raw_sql(SESSION_SETUP).execute(&mut conn).await?;
    let Some(slot) = take_slot(&mut conn, channel).await? else {
        return Ok(Served::NoSlot);
    };
    outage.recovered(|ended| {
        info!(database = %redact_url(url), channel, outage = %ended.lasted_text(),
            failures = ended.failures, "notify gate back after an outage");
    });
    info!(database = %redact_url(url), channel, slot, "notify gate ready");
    let mut want = wake.arm_requests();
    let mut armed = false;
    wake.set_gate(Gate::Disarmed);
    loop {
        let wanted = *want.borrow_and_update();
        if wanted && !armed {
            match lock(&mut conn, ARM, channel, slot).await {
                Ok(()) => {
                    armed = true;
                    *armed_count += 1;
                    wake.set_gate(Gate::Armed(*armed_count));
                }
                Err(e) if is_lock_timeout(&e) => {
                    wake.set_gate(Gate::Stalled);
                    tokio::time::sleep(ARM_RETRY).await;
                    // Try again if the loops still ask (they probe meanwhile).
                    wake.set_gate(Gate::Disarmed);
                    continue;
                }
                Err(e) => return Err(e),
            }
        } else if !wanted && armed {
            lock(&mut conn, DISARM, channel, slot).await?;
            armed = false;
            wake.set_gate(Gate::Disarmed);
        }
        match tokio::time::timeout(KEEPALIVE, want.changed()).await {
            Ok(Ok(())) => {}
            // The wake is gone: nothing left to serve.
            Ok(Err(_)) => return Ok(Served::Lost),
            Err(_) => {
                if conn.ping().await.is_err() {
                    return Ok(Served::Lost);
                }
            }
        }
    }
}

/// Takes the first free slot's registry lock (without waiting); `None` when every slot is taken.
async fn take_slot(conn: &mut PgConnection, channel: &str) -> Result<Option<i32>, sqlx::Error> {
    for slot in 0..GATE_SLOTS {
        let taken: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1), $2)")
            .bind(channel)
            .bind(REGISTRY + slot)
            .fetch_one(&mut *conn)
            .await?;
        if taken {
            return Ok(Some(slot));
        }
    }
    Ok(None)
}

/// Runs `sql` ([`ARM`] or [`DISARM`]) on the slot's gate key.
async fn lock(
    conn: &mut PgConnection,
    sql: &'static str,
    channel: &str,
    slot: i32,
) -> Result<(), sqlx::Error> {
    sqlx::query(sql)
        .bind(channel)
        .bind(slot)
        .execute(conn)
        .await
        .map(|_| ())
}

/// Whether `e` is PostgreSQL's `lock_timeout` (SQLSTATE 55P03, lock_not_available).
fn is_lock_timeout(e: &sqlx::Error) -> bool {
    e.as_database_error()
        .and_then(|d| d.code())
        .is_some_and(|code| code == "55P03")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_lock_timeout_is_the_arm_timeout() {
        let setting = format!("lock_timeout = '{}ms'", ARM_LOCK_TIMEOUT.as_millis());
        assert!(SESSION_SETUP.contains(&setting), "{SESSION_SETUP}");
    }
}
