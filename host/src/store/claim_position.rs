//! Where a tenant's pending rows continue: the claim position a store remembers between claims,
//! so that while a backlog drains a claim starts its index range at the rows it has not handed
//! out yet instead of stepping over every entry the claims before it left behind.
//!
//! A claimed row leaves an entry under `status = 'pending'` in the pending index until the database
//! cleans it up: a dead tuple on PostgreSQL until VACUUM (20 → ~1,400 buffers per claim from 20k to
//! 200k claimed rows with autovacuum off), a delete-marked record on MariaDB until InnoDB's purge,
//! which falls behind while several loops claim and mark (a locking read of 1000 rows grew from 3.4
//! to 15.1 ms as they piled up; docs/PERFORMANCE.md). A claim reading from the head of the tenant's
//! range steps over all of them. A claim that came back full remembers the `(created_at_ms,
//! event_id)` of its last row, and the next one seeks past it in the pending index
//! (`(created_at_ms, event_id) > position`, on the index's full key, so a backlog written in one
//! millisecond is skipped as well as one spread over hours). A row committed late below the
//! position (a long producer transaction, a requeue, a lease another claimer rolled back) is still
//! delivered:
//!
//! - a claim that reads from a position and comes back short reads the rows up to the position
//!   too, in the same transaction, before the rows it already has: no claim hands out fewer rows
//!   than it asked for while older rows wait;
//! - every [`HEAD_SCAN_EVERY_MS`] of the claims' clock, a claim reads from the head anyway, so
//!   a late row waits at most that long behind a backlog that keeps every claim full;
//! - a claim of the head that does not come back full forgets the position.

use std::collections::HashMap;
use std::sync::Mutex;

/// Longest time (ms of the claims' `now_ms`) between two claims of a tenant that read its pending
/// rows from the head while later claims read from the remembered position.
pub const HEAD_SCAN_EVERY_MS: i64 = 1_000;

/// The claim-order key of the last row a full claim handed out: the next claim reads the rows
/// after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimPosition {
    /// The row's `created_at_ms`.
    pub created_at_ms: i64,
    /// The row's `event_id`.
    pub event_id: String,
}

/// Where the pending rows of a tenant continue, remembered from a claim that came back full.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Position {
    /// The last row the full claim handed out.
    after: ClaimPosition,
    /// `now_ms` of the last claim that read from the head.
    head_read_at_ms: i64,
}

/// The claim positions of one store, per tenant (shared by the store's worker loops).
#[derive(Debug, Default)]
pub struct ClaimPositions {
    by_app: Mutex<HashMap<String, Position>>,
}

/// Where one claim reads the pending rows of its tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingStart {
    /// From the head of the tenant's pending range.
    Head,
    /// From the rows after this one in claim order.
    After(ClaimPosition),
}

impl ClaimPositions {
    /// Where a claim of `app_code` at `now_ms` reads pending rows: from the remembered position,
    /// unless there is none or the head was last read [`HEAD_SCAN_EVERY_MS`] ago or more (or in
    /// the future of `now_ms`: a clock that went back).
    pub fn start(&self, app_code: &str, now_ms: i64) -> PendingStart {
        let by_app = self.by_app.lock().unwrap_or_else(|e| e.into_inner());
        match by_app.get(app_code) {
            Some(p)
                if now_ms >= p.head_read_at_ms
                    && now_ms - p.head_read_at_ms < HEAD_SCAN_EVERY_MS =>
            {
                PendingStart::After(p.after.clone())
            }
            _ => PendingStart::Head,
        }
    }

    /// Records what a claim of `app_code` at `now_ms` read: where it `started`, whether its
    /// pending rows filled what it asked for (`full`), and the last pending row it handed out
    /// read from where it started (`last`).
    pub fn record(
        &self,
        app_code: &str,
        now_ms: i64,
        started: &PendingStart,
        full: bool,
        last: Option<ClaimPosition>,
    ) {
        let mut by_app = self.by_app.lock().unwrap_or_else(|e| e.into_inner());
        match (full, last) {
            (true, Some(after)) => {
                let head_read_at_ms = match (started, by_app.get(app_code)) {
                    (PendingStart::After(_), Some(p)) => p.head_read_at_ms,
                    _ => now_ms,
                };
                by_app.insert(
                    app_code.to_string(),
                    Position {
                        after,
                        head_read_at_ms,
                    },
                );
            }
            _ => {
                by_app.remove(app_code);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(created_at_ms: i64, event_id: &str) -> ClaimPosition {
        ClaimPosition {
            created_at_ms,
            event_id: event_id.into(),
        }
    }

    #[test]
    fn a_full_claim_of_the_head_is_remembered() {
        let positions = ClaimPositions::default();
        assert_eq!(positions.start("a", 1_000), PendingStart::Head);
        positions.record("a", 1_000, &PendingStart::Head, true, Some(at(42, "e9")));
        assert_eq!(
            positions.start("a", 1_000),
            PendingStart::After(at(42, "e9"))
        );
        assert_eq!(positions.start("b", 1_000), PendingStart::Head);
        // Full from the position: moves on, keeps the time of the last head read.
        let started = PendingStart::After(at(42, "e9"));
        positions.record("a", 1_500, &started, true, Some(at(42, "f3")));
        assert_eq!(
            positions.start("a", 1_999),
            PendingStart::After(at(42, "f3"))
        );
        assert_eq!(positions.start("a", 2_000), PendingStart::Head);
        // A clock that went back reads the head.
        assert_eq!(positions.start("a", 999), PendingStart::Head);
    }

    #[test]
    fn a_short_claim_forgets_the_position() {
        let positions = ClaimPositions::default();
        positions.record("a", 1_000, &PendingStart::Head, true, Some(at(42, "e9")));
        let started = PendingStart::After(at(42, "e9"));
        positions.record("a", 1_100, &started, false, Some(at(60, "a1")));
        assert_eq!(positions.start("a", 1_100), PendingStart::Head);
        positions.record("a", 1_200, &PendingStart::Head, true, None);
        assert_eq!(positions.start("a", 1_200), PendingStart::Head);
    }
}
