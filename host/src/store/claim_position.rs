//! Where a tenant's pending rows continue: the claim position a store remembers between claims,
//! so that while a backlog drains a claim starts its index range at the rows it has not handed
//! out yet instead of stepping over every entry the claims before it left behind.
//!
//! On PostgreSQL a claimed row leaves a dead entry under `status = 'pending'` in the pending
//! index until VACUUM removes it; a claim reading from the head of the tenant's range walks all
//! of them (20 → ~1,400 buffers per claim from 20k to 200k claimed rows with autovacuum off). A
//! claim that came back full remembers the `created_at_ms` of its last row, and the next one reads
//! from there (`created_at_ms >= position`). A row committed late with an earlier
//! `created_at_ms` (a long producer transaction, a requeue, a lease another claimer rolled back)
//! sits below the position and is still delivered:
//!
//! - a claim that reads from a position and comes back short reads the head too, in the same
//!   transaction, before the rows it already has: no claim hands out fewer rows than it asked
//!   for while older rows wait;
//! - every [`HEAD_SCAN_EVERY_MS`] of the claims' clock, a claim reads from the head anyway, so
//!   a late row waits at most that long behind a backlog that keeps every claim full;
//! - a claim of the head that does not come back full forgets the position.

use std::collections::HashMap;
use std::sync::Mutex;

/// Longest time (ms of the claims' `now_ms`) between two claims of a tenant that read its pending
/// rows from the head while later claims read from the remembered position.
pub const HEAD_SCAN_EVERY_MS: i64 = 1_000;

/// Where the pending rows of a tenant continue, remembered from a claim that came back full.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Position {
    /// `created_at_ms` of the last row the full claim handed out.
    created_at_ms: i64,
    /// `now_ms` of the last claim that read from the head.
    head_read_at_ms: i64,
}

/// The claim positions of one store, per tenant (shared by the store's worker loops).
#[derive(Debug, Default)]
pub struct ClaimPositions {
    by_app: Mutex<HashMap<String, Position>>,
}

/// Where one claim reads the pending rows of its tenant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PendingStart {
    /// From the head of the tenant's pending range.
    Head,
    /// From the rows with `created_at_ms >=` this value.
    From(i64),
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
                PendingStart::From(p.created_at_ms)
            }
            _ => PendingStart::Head,
        }
    }

    /// Records what a claim of `app_code` at `now_ms` read: where it `started`, whether its
    /// pending rows filled what it asked for (`full`), and the `created_at_ms` of the last
    /// pending row it handed out read from where it started (`last`).
    pub fn record(
        &self,
        app_code: &str,
        now_ms: i64,
        started: PendingStart,
        full: bool,
        last: Option<i64>,
    ) {
        let mut by_app = self.by_app.lock().unwrap_or_else(|e| e.into_inner());
        match (full, last) {
            (true, Some(created_at_ms)) => {
                let head_read_at_ms = match (started, by_app.get(app_code)) {
                    (PendingStart::From(_), Some(p)) => p.head_read_at_ms,
                    _ => now_ms,
                };
                by_app.insert(
                    app_code.to_string(),
                    Position {
                        created_at_ms,
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

    #[test]
    fn a_full_claim_of_the_head_is_remembered() {
        let positions = ClaimPositions::default();
        assert_eq!(positions.start("a", 1_000), PendingStart::Head);
        positions.record("a", 1_000, PendingStart::Head, true, Some(42));
        assert_eq!(positions.start("a", 1_000), PendingStart::From(42));
        assert_eq!(positions.start("b", 1_000), PendingStart::Head);
        // Full from the position: moves on, keeps the time of the last head read.
        positions.record("a", 1_500, PendingStart::From(42), true, Some(50));
        assert_eq!(positions.start("a", 1_999), PendingStart::From(50));
        assert_eq!(positions.start("a", 2_000), PendingStart::Head);
        // A clock that went back reads the head.
        assert_eq!(positions.start("a", 999), PendingStart::Head);
    }

    #[test]
    fn a_short_claim_forgets_the_position() {
        let positions = ClaimPositions::default();
        positions.record("a", 1_000, PendingStart::Head, true, Some(42));
        positions.record("a", 1_100, PendingStart::From(42), false, Some(60));
        assert_eq!(positions.start("a", 1_100), PendingStart::Head);
        positions.record("a", 1_200, PendingStart::Head, true, None);
        assert_eq!(positions.start("a", 1_200), PendingStart::Head);
    }
}
