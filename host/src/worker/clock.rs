//! The host's clock checked against the database's.
//!
//! Leases (`lock_until_ms`) and retry times (`next_retry_at_ms`) are written from each host's
//! clock, and a claim takes a lease whose `lock_until_ms` is before its own "now" as expired. A
//! host whose clock runs ahead by a lease would therefore take over live leases: the event is
//! published twice, and with per-room ordering two events of one room are in flight at once.
//!
//! So before claiming, a worker compares its clock with the database's ([`ClockGuard`]): one
//! query at start and again every [`CLOCK_CHECK_INTERVAL`], never on every claim. While the two
//! disagree by more than a tenth of `worker.lease` (beyond the measurement's own uncertainty, half
//! the query's round trip) the worker claims nothing, logs it once, and reports it in
//! `outboxd_clock_offset_seconds` and `outboxd_clock_claims_refused`; it claims again as soon as a
//! measurement is back within the bound. Hosts within the bound of the database are within twice
//! of each other, a fifth of a lease, which the lease's margin absorbs. SQLite has no clock
//! apart from the host's, so there is nothing to compare.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use crate::metrics::Metrics;
use crate::store::OutboxStore;

/// How often a worker measures its clock against the database's.
pub const CLOCK_CHECK_INTERVAL: Duration = Duration::from_secs(30);

/// The worker's clock: UTC milliseconds since the epoch. The system clock in production; tests
/// shift it.
pub type Clock = Arc<dyn Fn() -> i64 + Send + Sync>;

/// The system clock ([`crate::record::now_ms`]).
pub fn system_clock() -> Clock {
    Arc::new(crate::record::now_ms)
}

/// One measurement: the database's clock minus the host's, and how sure it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Offset {
    /// Database minus host, milliseconds.
    pub offset_ms: i64,
    /// Half the round trip of the query: the offset is right to within this.
    pub uncertainty_ms: i64,
}

/// Whether a worker may claim, from its clock's last measurement against the database's. Shared
/// by the loops of one worker.
pub struct ClockGuard {
    /// Largest offset tolerated: a tenth of the lease.
    bound_ms: i64,
    state: tokio::sync::Mutex<State>,
}

#[derive(Default)]
struct State {
    /// When the last measurement was taken; `None`: never.
    measured_at: Option<Instant>,
    /// Claims refused for the last measurement.
    refusing: bool,
}

impl ClockGuard {
    /// A guard tolerating a tenth of `lease`.
    pub fn new(lease: Duration) -> ClockGuard {
        ClockGuard {
            bound_ms: i64::try_from(lease.as_millis() / 10).unwrap_or(i64::MAX),
            state: tokio::sync::Mutex::new(State::default()),
        }
    }

    /// Whether claims may go ahead now; measures first when the last measurement is older than
    /// [`CLOCK_CHECK_INTERVAL`]. A measurement that fails (the database is away) keeps the last
    /// verdict: the claim will meet the same database anyway.
    pub async fn allows_claims(
        &self,
        store: &dyn OutboxStore,
        clock: &Clock,
        metrics: &Metrics,
    ) -> bool {
        let mut state = self.state.lock().await;
        let due = state
            .measured_at
            .is_none_or(|at| at.elapsed() >= CLOCK_CHECK_INTERVAL);
        if !due {
            return !state.refusing;
        }
        let offset = match measure(store, clock).await {
            Ok(Some(offset)) => offset,
            Ok(None) => {
                state.measured_at = Some(Instant::now());
                return true;
            }
            Err(_) => return !state.refusing,
        };
        state.measured_at = Some(Instant::now());
        let off_by = offset.offset_ms.abs() - offset.uncertainty_ms;
        let refusing = off_by > self.bound_ms;
        metrics.set_clock(offset.offset_ms, refusing);
        if refusing && !state.refusing {
            warn!(
                offset_ms = offset.offset_ms,
                bound_ms = self.bound_ms,
                status = "clock_skew",
                "this host's clock is {} ms off the database's, more than a tenth of worker.lease ({} ms): not claiming until it is back within (check NTP on this host)",
                offset.offset_ms,
                self.bound_ms
            );
        } else if !refusing && state.refusing {
            info!(
                offset_ms = offset.offset_ms,
                bound_ms = self.bound_ms,
                status = "clock_ok",
                "this host's clock is back within a tenth of worker.lease of the database's: claiming again"
            );
        }
        state.refusing = refusing;
        !refusing
    }
}

/// Measures `clock` against the database's: `None` where the database has no clock of its own.
pub async fn measure(
    store: &dyn OutboxStore,
    clock: &Clock,
) -> Result<Option<Offset>, crate::store::StoreError> {
    let before = clock();
    let database = store.clock_ms().await?;
    let after = clock();
    Ok(database.map(|database| Offset {
        offset_ms: database - (before + (after - before) / 2),
        uncertainty_ms: (after - before + 1) / 2,
    }))
}
